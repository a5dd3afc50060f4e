//! The consumer's power-cut suite on each chip family's flash (`idem_core::testing::chips`):
//! a heater's setpoint kept exactly once (an `EachEffect` store behind an offset stamp,
//! positions checkpointed every 4 commands), a cut at every unit write and erase of the
//! run in each of the checker's models and a reset after every step; each trial must end
//! with the setpoint and the count of rejected commands a plain fold of the log gives.

use embedded_storage::nor_flash::NorFlash;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::log::{Event, Received};
use idem_core::persist::Layout;
use idem_core::store::{OffsetStamp, Outcome, Store};
use idem_core::testing::chips;
use idem_core::testing::cuts::{Cuttable, Plan, Seen, sweep};
use idem_core::testing::flash::FlashError;

/// A heater's setpoint in tenths of a degree, set by each command in 50..=300.
#[derive(Clone, Debug)]
struct Heater;

impl Store for Heater {
    type Payload = i16;
    type State = i16;
    type Error = core::convert::Infallible;
    type Rejections = u32;
    type Persist = idem_core::persist::EachEffect<Self>;
    const TAG: u32 = 0x4845_0001;
    fn check(&self, _: &i16, e: &Event<i16>) -> Result<Outcome, Self::Error> {
        Ok(if (50..=300).contains(&e.payload) {
            Outcome::Applied
        } else {
            Outcome::Rejected
        })
    }
    fn apply(&self, setpoint: &mut i16, e: &Event<i16>) {
        *setpoint = e.payload;
    }
}

/// `n` commands; every seventh out of range.
fn commands(n: u64) -> Vec<Event<i16>> {
    (0..n)
        .map(|offset| Event {
            offset,
            payload: if offset % 7 == 3 {
                999
            } else {
                50 + (offset % 251) as i16
            },
        })
        .collect()
}

/// The setpoint and the rejected count a plain fold of `events` gives.
fn truth(events: &[Event<i16>]) -> (i16, u32) {
    events.iter().fold((0, 0), |(set, rejected), e| {
        match Heater.check(&set, e).unwrap() {
            Outcome::Applied => (e.payload, rejected),
            _ => (set, rejected + 1),
        }
    })
}

/// Every cut (or a seeded sample, as `plan` says) of `n` commands on the flashes `fresh`
/// makes, two pages for the positions and two for the store: the reference run's steps,
/// unit writes and erases, and the trials of each model.
fn every_cut<F: NorFlash<Error = FlashError> + Cuttable>(
    fresh: impl Fn() -> F,
    plan: &Plan,
    n: u64,
) -> ([u64; 3], [u64; 4]) {
    let events = commands(n);
    let expected = truth(&events);
    let stream = Received::new(&events, Some(n));
    let layout = Layout::from_pages::<F>(0, 2, 2, 0x0001);
    let every4 = ConsumerConfig::every(CheckpointEvery::new(4).unwrap());
    let found = sweep(
        plan,
        || (fresh(), None),
        |flash, _| Consumer::open(flash, layout, OffsetStamp(Heater), every4),
        |c, flash, ended| match c.step(flash, &stream)? {
            Step::Done => {
                *ended = Some((c.state().state, c.rejected()));
                Ok(None)
            }
            step => Ok(Some(step)),
        },
        |_, ended, seen| match seen {
            Seen::Ended if *ended != Some(expected) => {
                Err(format!("ended with {ended:?}, not {expected:?}"))
            }
            Seen::Failed(e) => Err(format!("{e:?}")),
            Seen::Stuck => Err("stuck".into()),
            _ => Ok(()),
        },
    );
    found.assert_all_right();
    let r = found.reference;
    let counts = (
        [r.steps, r.unit_writes, r.erases],
        found.models.each_ref().map(|t| t.trials),
    );
    println!(
        "consumer, {} B units, {} B pages: {n} commands; reference (steps, unit writes, erases) and trials a model (torn, clean, weak erase, reset): {counts:?}",
        F::WRITE_SIZE,
        F::ERASE_SIZE
    );
    counts
}

#[test]
fn the_consumer_at_every_cut_on_the_nrf52840s_and_the_esp32_c3s_flash() {
    assert_eq!(
        every_cut(chips::nrf52840::<4>, &Plan::new(), 400),
        ([900, 1_742, 3], [1_745, 1_745, 3, 900])
    );
}

#[test]
fn the_consumer_at_every_cut_on_the_rp2040s_flash() {
    assert_eq!(
        every_cut(chips::rp2040::<4>, &Plan::new(), 200),
        ([450, 3_204, 2], [3_206, 3_206, 2, 450])
    );
}

#[test]
fn the_consumer_at_every_cut_on_the_stm32l476s_flash() {
    assert_eq!(
        every_cut(chips::stm32l476::<4>, &Plan::new(), 400),
        ([900, 1_276, 6], [1_282, 1_282, 6, 900])
    );
}

/// Four sectors of 128 KiB, on the heap. 4,800 commands apply 4,114, more records than
/// the store's two sectors hold, so its journal wraps round them (the run's 4 erases: a
/// sector each region at the start, the store's second sector, its first again): 500
/// first cuts a model, drawn from the seed, of the run's 12,008 unit writes and 10,800
/// steps, and each of its 4 erases.
#[test]
fn the_consumer_at_a_seeded_sample_of_cuts_on_the_stm32h743s_sectors() {
    assert_eq!(
        every_cut(
            chips::stm32h743::<4>,
            &Plan::new().sample(500).seed(0x4743),
            4_800
        ),
        ([10_800, 12_008, 4], [500, 500, 4, 500])
    );
}
