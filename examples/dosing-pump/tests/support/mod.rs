//! What the pump's tests share: the v1 firmware's run, which leaves the journal the
//! update migrates.

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::log::{Event, Received};
use idem_core::store::Outcome;
use idem_core::testing::flash::MemFlash;
use idem_example_dosing_pump::{Command, Kind, Motor, PumpV1, StoreV1, WINDOW};

/// The pump's flash on the host: 6 pages of 4 KiB in 4-byte units, as the nRF52840's.
pub type Flash = MemFlash<6, 4096>;

/// The v1 firmware: it drove the motor within each step, and ran `steps` steps of
/// `events` from a blank flash. Its flash and its motor.
pub fn v1_firmware<M: Motor + Default>(events: &[Event<Command>], steps: usize) -> (Flash, M) {
    let (mut flash, mut motor) = (Flash::new(), M::default());
    let stream = Received::new(events, Some(events.len() as u64));
    let config = ConsumerConfig::every(CheckpointEvery::new(8).unwrap());
    let store = StoreV1::new(PumpV1, WINDOW).unwrap();
    let layout = idem_example_dosing_pump::layout::<Flash>(0).0;
    let mut c = Consumer::open(&mut flash, layout, store, config).unwrap();
    for _ in 0..steps {
        if let Step::Effect(e, Outcome::Applied) = c.step(&mut flash, &stream).unwrap()
            && let Kind::Dispense { ml } = e.payload.kind
        {
            motor.dispense(ml);
        }
    }
    (flash, motor)
}
