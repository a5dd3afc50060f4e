//! A pump that doses once for each command, across power cuts: the intent is in the
//! store's record (`effects::Intent`), the done in a ledger of its own
//! (`effects::Ledger`), and at open the intent without a done is decided by one of the
//! three choices. Swept with a power cut at every unit write and erase of a reference
//! run, and with a reset between each dose and its done; judged by the pump's own
//! counter, never by the store's state.
//!
//! 28 doses (70 ml) of 40 commands; 616 cuts and 56 resets (before and after each dose).
//! Asked (the pump's counter against the volume the state commanded) is exact in all
//! 644 runs; Redo doubles a dose in 90 (the 28 resets after a dose, and the 62 cuts in
//! a done's write); Drop loses one in 28 (the resets before a dose).

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::effects::{Choice, Intent, Ledger};
use idem_core::journal::{JournalError, Region};
use idem_core::log::{Event, Identified, MessageId, Received};
use idem_core::persist::{EachEffect, Layout};
use idem_core::store::{MessageIdWindow, Outcome, Store};
use idem_core::testing::flash::{FlashError, FlashStats, MemFlash, PowerCut};
use serde::{Deserialize, Serialize};

type Flash = MemFlash<6, 1024>;
const LAYOUT: Layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
const LEDGER: Region = Region::of_pages::<Flash>(4, 2);
const LEDGER_TAG: u32 = 0x1ED6_0001;
const EVENTS: u64 = 40;

/// What a command asks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Pump this many millilitres: once.
    Dispense(u16),
    /// Set the flow rate: idempotent.
    SetRate(u16),
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Command {
    id: u64,
    kind: Kind,
}

impl Identified for Command {
    fn id(&self) -> MessageId {
        MessageId(self.id)
    }
}

/// Offset `o`: every fifth resends the command two offsets back; every seventh new one
/// sets the rate; the others dispense `o % 4 + 1` ml.
fn commands() -> Vec<Event<Command>> {
    let mut out: Vec<Event<Command>> = Vec::new();
    for offset in 0..EVENTS {
        let payload = if offset % 5 == 4 {
            out[offset as usize - 2].payload
        } else if offset % 7 == 6 {
            Command {
                id: 500 + offset,
                kind: Kind::SetRate(offset as u16),
            }
        } else {
            Command {
                id: 500 + offset,
                kind: Kind::Dispense((offset % 4) as u16 + 1),
            }
        };
        out.push(Event { offset, payload });
    }
    out
}

/// The pump's durable state: millilitres commanded, the rate, and the newest dose
/// intended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
struct PumpState {
    commanded: u64,
    rate: u16,
    intent: Intent<u16>,
}

impl idem_core::MaxSize for PumpState {
    const POSTCARD_MAX_SIZE: usize =
        u64::POSTCARD_MAX_SIZE + u16::POSTCARD_MAX_SIZE + Intent::<u16>::POSTCARD_MAX_SIZE;
}

#[derive(Clone, Debug)]
struct Pump;

impl Store for Pump {
    type Payload = Command;
    type State = PumpState;
    type Error = core::convert::Infallible;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x9E_0100;
    fn check(&self, _: &PumpState, _: &Event<Command>) -> Result<Outcome, Self::Error> {
        Ok(Outcome::Applied)
    }
    fn apply(&self, s: &mut PumpState, e: &Event<Command>) {
        match e.payload.kind {
            Kind::Dispense(ml) => {
                s.commanded += u64::from(ml);
                s.intent.issue(ml);
            }
            Kind::SetRate(rate) => s.rate = rate,
        }
    }
}

fn pump() -> MessageIdWindow<Pump, 8> {
    MessageIdWindow::new(Pump, 8).unwrap()
}

fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(4).unwrap())
}

/// The pump's motor and its own counters: they survive every reset.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Motor {
    dispensed: u64,
    doses: u32,
}

/// How a boot decides an intent it finds without a done.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    Asked,
    Redo,
    Drop,
}

type Error = ConsumerError<FlashError, core::convert::Infallible>;

/// A reset in a dose's life: before dose `n` starts (its intent durable), or after it,
/// before its done.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reset {
    Before(u32),
    After(u32),
}

/// One boot: the intent left without a done decided, then the run, acting after each
/// step whose state holds a new intent. `Ok(true)` at the run's end; `Ok(false)` for the
/// reset `reset` (once).
fn boot(
    flash: &mut Flash,
    motor: &mut Motor,
    policy: Policy,
    reset: &mut Option<Reset>,
) -> Result<bool, Error> {
    let events = commands();
    let stream = Received::new(&events, Some(EVENTS));
    let mut ledger = Ledger::open(flash, LEDGER, LEDGER_TAG)?;
    let mut c = Consumer::open(flash, LAYOUT, pump(), config())?;
    let state = c.state().state;
    if let Some(p) = ledger.pending(&state.intent) {
        let choice = match policy {
            Policy::Asked => Choice::Asked {
                happened: motor.dispensed == state.commanded,
            },
            Policy::Redo => Choice::Redo,
            Policy::Drop => Choice::Drop,
        };
        if let Some(ml) = p.decide(choice) {
            motor.dispensed += u64::from(ml);
            motor.doses += 1;
        }
        ledger.done(flash, p.serial)?;
    }
    loop {
        if matches!(c.step(flash, &stream)?, Step::Done) {
            return Ok(true);
        }
        let state = c.state().state;
        if let Some(p) = ledger.pending(&state.intent) {
            if *reset == Some(Reset::Before(motor.doses + 1)) {
                *reset = None;
                return Ok(false);
            }
            motor.dispensed += u64::from(p.action);
            motor.doses += 1;
            // Judged at every dose: the pump never ran ahead of what was commanded.
            if policy == Policy::Asked {
                assert!(motor.dispensed <= state.commanded, "{motor:?}");
            }
            if *reset == Some(Reset::After(motor.doses)) {
                *reset = None;
                return Ok(false);
            }
            ledger.done(flash, p.serial)?;
        }
    }
}

/// Boots until the run ends (a power cut or a reset ends a boot); the motor's counters
/// and the flash's.
fn run(cut: Option<PowerCut>, reset: Option<Reset>, policy: Policy, seed: u64) -> Motor {
    let mut flash = Flash::new();
    flash.seed_noise(seed);
    if let Some(cut) = cut {
        flash.schedule_power_cut(cut);
    }
    let (mut motor, mut reset) = (Motor::default(), reset);
    for _boot in 0..4 {
        match boot(&mut flash, &mut motor, policy, &mut reset) {
            Ok(true) => return motor,
            Ok(false) => {}
            Err(ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))) => {
                flash.power_on()
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("four boots without an end");
}

/// The true doses: each new dispensing id once.
fn truth() -> Motor {
    let mut seen = Vec::new();
    let mut motor = Motor::default();
    for e in commands() {
        if let (false, Kind::Dispense(ml)) = (seen.contains(&e.payload.id), e.payload.kind) {
            motor.dispensed += u64::from(ml);
            motor.doses += 1;
        }
        seen.push(e.payload.id);
    }
    motor
}

/// Every cut, and a reset before each dose and after each, under `policy`: runs exact,
/// runs with a dose doubled, runs with a dose lost.
fn sweep(policy: Policy, reference: FlashStats, doses: u32) -> [u32; 3] {
    let truth = truth();
    let mut tally = [0; 3];
    let cuts = reference
        .cuts_since(FlashStats::default())
        .map(|c| (Some(c), None));
    let resets = (1..=doses).flat_map(|n| [Reset::Before(n), Reset::After(n)]);
    let resets = resets.map(|r| (None, Some(r)));
    for (seed, (cut, reset)) in cuts.chain(resets).enumerate() {
        let motor = run(cut, reset, policy, seed as u64);
        let i = match motor.doses.cmp(&truth.doses) {
            core::cmp::Ordering::Equal => 0,
            core::cmp::Ordering::Greater => 1,
            core::cmp::Ordering::Less => 2,
        };
        // A doubled or lost dose is one whole command's, never a part.
        assert_eq!(
            motor.dispensed == truth.dispensed,
            i == 0,
            "{policy:?} {cut:?} {reset:?}: {motor:?}"
        );
        tally[i] += 1;
    }
    tally
}

#[test]
fn the_pump_doses_once_at_every_cut_when_it_asks_its_counter() {
    let truth = truth();
    assert_eq!(
        truth,
        Motor {
            dispensed: 70,
            doses: 28
        }
    );
    // The reference run, and what its flash did.
    let mut flash = Flash::new();
    let mut motor = Motor::default();
    assert!(boot(&mut flash, &mut motor, Policy::Asked, &mut None).unwrap());
    assert_eq!(motor, truth);
    let reference = flash.stats();
    let runs = reference.cuts_since(FlashStats::default()).count() as u32 + 2 * truth.doses;
    assert_eq!(runs, 644);
    assert_eq!(sweep(Policy::Asked, reference, truth.doses), [runs, 0, 0]);
    assert_eq!(sweep(Policy::Redo, reference, truth.doses), [554, 90, 0]);
    assert_eq!(sweep(Policy::Drop, reference, truth.doses), [616, 0, 28]);
}
