//! A dosing pump: an effect that moves hardware, against a reset between its durable
//! record and the end of its pumping.
//!
//! A gateway's log holds [`DOSES`] commands, each `Dispense { ml: 5 }` with its own
//! command id. The controller consumes them with idem's engine (a message-id window in
//! the pump's record, the position committed every [`CHECKPOINT_EVERY`]), so a command
//! replayed after a reset is skipped, never applied twice. The motor pumps a dose one
//! millilitre at a time and counts every millilitre it pumps on its own counter, which
//! survives every reset: that counter is the truth the run reports, never the store.
//!
//! A reset can fall after a dose's record is durable and before its last millilitre
//! ([`Reset`]: after `pumped` of its millilitres). What the controller does about it is
//! its [`Way`]:
//! - [`Way::After`]: drive the pump after the step, nothing at boot. A reset before the
//!   dose is fully pumped loses what was left of it: at most once.
//! - [`Way::Reassert`]: the same, and at every boot pump again the newest dose in the
//!   state, as a setpoint is re-asserted. A reset after the dose (or part of it) was
//!   pumped doubles that much: at least once.
//! - [`Way::Effects`]: the effects API ([`idem_core::effects`]): the intent is in the
//!   dose's record, the done in a ledger of its own after the pumping, and at boot an
//!   intent without its done is decided by asking the motor's counter
//!   ([`Choice::Asked`]); a dose found half pumped is finished, its remainder only:
//!   exactly once.
//!
//! [`run`] runs one way against a schedule of resets; [`sweep`] runs it against a reset
//! at every point, and [`random`] against seeded schedules of several.

use core::convert::Infallible;

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::effects::{Choice, Intent, Ledger};
use idem_core::journal::Region;
use idem_core::log::{Event, Identified, MessageId, Received};
use idem_core::persist::{EachEffect, Layout};
use idem_core::store::{MessageIdWindow, Outcome, Store};
use serde::{Deserialize, Serialize};

use crate::flash::{FlashError, MemFlash};
use crate::rng::SplitMix64;

/// The commands in the log, one dose each.
pub const DOSES: usize = 20;
/// Millilitres a command dispenses.
pub const DOSE_ML: u16 = 5;
/// The consumer commits its position every this many commands.
pub const CHECKPOINT_EVERY: u64 = 4;
/// The most resets a schedule holds.
pub const MAX_RESETS: usize = 8;
/// The resets of the scenario: after the record of the dose at offset 6, before the
/// motor starts; after the dose at offset 13 is fully pumped, before anything follows.
pub const RESETS: [Reset; 2] = [
    Reset {
        offset: 6,
        pumped: 0,
    },
    Reset {
        offset: 13,
        pumped: DOSE_ML,
    },
];

/// The controller's flash: 6 pages of 1 KiB (positions, store, ledger: 2 each).
pub type PumpFlash = MemFlash<6, 1024>;
const LAYOUT: Layout = Layout::from_pages::<PumpFlash>(0, 2, 2, 0x0D05_E000);
const LEDGER: Region = Region::of_pages::<PumpFlash>(4, 2);
const LEDGER_TAG: u32 = 0x0D05_ED00;
const WINDOW: usize = 8;
const EVERY: CheckpointEvery = match CheckpointEvery::new(CHECKPOINT_EVERY) {
    Some(k) => k,
    None => CheckpointEvery::MIN,
};

/// A command from the gateway: its id and the millilitres to dispense.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispense {
    /// The gateway's command id.
    pub id: u64,
    /// Millilitres.
    pub ml: u16,
}

impl Identified for Dispense {
    fn id(&self) -> MessageId {
        MessageId(self.id)
    }
}

/// The pump's durable state: millilitres commanded, and the newest dose intended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PumpState {
    /// Millilitres commanded so far.
    pub commanded_ml: u64,
    /// The newest dose: durable in its command's record, before the motor turns.
    pub intent: Intent<u16>,
}

impl idem_core::MaxSize for PumpState {
    const POSTCARD_MAX_SIZE: usize = u64::POSTCARD_MAX_SIZE + Intent::<u16>::POSTCARD_MAX_SIZE;
}

/// The pump's store: every command it applies adds its millilitres and issues its dose.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pump;

impl Store for Pump {
    type Payload = Dispense;
    type State = PumpState;
    type Error = Infallible;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x9D05_0300;
    fn check(&self, _: &PumpState, _: &Event<Dispense>) -> Result<Outcome, Infallible> {
        Ok(Outcome::Applied)
    }
    fn apply(&self, s: &mut PumpState, e: &Event<Dispense>) {
        s.commanded_ml += u64::from(e.payload.ml);
        s.intent.issue(e.payload.ml);
    }
}

type PumpStore = MessageIdWindow<Pump, WINDOW>;

/// What the controller does about a dose a reset may have cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Drive the pump after the step; nothing at boot.
    After,
    /// Drive the pump after the step; at boot, pump the newest dose again.
    Reassert,
    /// The effects API: intent, done, and at boot ask the motor's counter.
    Effects,
}

impl Way {
    /// Every way, in teaching order.
    pub const ALL: [Way; 3] = [Way::After, Way::Reassert, Way::Effects];

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::After => "after",
            Self::Reassert => "reassert",
            Self::Effects => "effects",
        }
    }

    /// The way named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }
}

/// A reset when the dose of the command at `offset` has had `pumped` of its
/// millilitres pumped: 0 is right after its record is durable, before the motor starts;
/// [`DOSE_ML`] is after its last millilitre (and, for [`Way::Effects`], before its done).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reset {
    /// The command's offset.
    pub offset: u64,
    /// Millilitres of its dose pumped when the power fails.
    pub pumped: u16,
}

/// A schedule of resets, each taken the first time the motor reaches it.
pub type Schedule = heapless::Vec<Reset, MAX_RESETS>;

/// Why a schedule does not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleError {
    /// A point is not `crash@pump:OFFSET/ML`.
    Syntax,
    /// The offset is past the log's last command.
    Offset(u64),
    /// More millilitres than a dose has.
    Ml(u16),
    /// More than [`MAX_RESETS`] points.
    TooMany,
}

impl core::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Syntax => f.write_str(
                "a pump reset is crash@pump:OFFSET/ML (a reset when ML millilitres of the dose at OFFSET are pumped)",
            ),
            Self::Offset(o) => write!(f, "offset {o} is past the log's last command, {}", DOSES - 1),
            Self::Ml(ml) => write!(f, "{ml} ml is more than a dose's {DOSE_ML}"),
            Self::TooMany => write!(f, "more than {MAX_RESETS} resets"),
        }
    }
}

/// Reads `crash@pump:6/0,crash@pump:13/5`: a reset when `ML` millilitres of the dose at
/// `OFFSET` are pumped.
pub fn parse_schedule(text: &str) -> Result<Schedule, ScheduleError> {
    let mut out = Schedule::new();
    for point in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let rest = point
            .strip_prefix("crash@pump:")
            .ok_or(ScheduleError::Syntax)?;
        let (offset, ml) = rest.split_once('/').ok_or(ScheduleError::Syntax)?;
        let offset: u64 = offset.parse().map_err(|_| ScheduleError::Syntax)?;
        let pumped: u16 = ml.parse().map_err(|_| ScheduleError::Syntax)?;
        if offset >= DOSES as u64 {
            return Err(ScheduleError::Offset(offset));
        }
        if pumped > DOSE_ML {
            return Err(ScheduleError::Ml(pumped));
        }
        out.push(Reset { offset, pumped })
            .map_err(|_| ScheduleError::TooMany)?;
    }
    Ok(out)
}

/// The scenario's own schedule, [`RESETS`].
pub fn default_schedule() -> Schedule {
    RESETS.iter().copied().collect()
}

/// The log: command `100 + o` at offset `o`, [`DOSE_ML`] each.
pub fn commands() -> [Event<Dispense>; DOSES] {
    core::array::from_fn(|o| Event {
        offset: o as u64,
        payload: Dispense {
            id: 100 + o as u64,
            ml: DOSE_ML,
        },
    })
}

/// What happened, step by step, as a front end tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PumpStep {
    /// The controller booted; the consumer resumes at `resume_at`.
    Boot {
        /// The next offset it reads.
        resume_at: u64,
    },
    /// The command's record is durable: its dose is commanded.
    Recorded {
        /// The command's offset.
        offset: u64,
    },
    /// A replayed command, skipped by its id.
    Skipped {
        /// The command's offset.
        offset: u64,
    },
    /// The motor pumped `ml` millilitres of the dose at `offset`.
    Pumped {
        /// The dose's offset.
        offset: u64,
        /// Millilitres pumped now.
        ml: u16,
    },
    /// At boot, the newest dose was pumped again ([`Way::Reassert`]).
    Reasserted {
        /// The dose's offset.
        offset: u64,
    },
    /// At boot, the motor's counter was asked about an intent without its done
    /// ([`Way::Effects`]): `pumped` of `commanded` millilitres.
    Asked {
        /// The dose's offset.
        offset: u64,
        /// The motor's counter.
        pumped: u64,
        /// Millilitres the state commanded.
        commanded: u64,
    },
    /// The dose's done is durable in the ledger ([`Way::Effects`]).
    Done {
        /// The dose's offset.
        offset: u64,
    },
    /// The power failed.
    Reset(Reset),
}

/// The motor: millilitres it pumped for each dose, and in all. It survives resets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Motor {
    /// Millilitres pumped for the dose at each offset.
    pub per_dose: [u16; DOSES],
    /// Millilitres pumped in all: the counter a boot can ask.
    pub pumped_ml: u64,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The motor's counts: the truth of what was pumped.
    pub motor: Motor,
    /// What the commands ask, each command once: [`DOSES`] × [`DOSE_ML`].
    pub true_ml: u64,
    /// The resets taken.
    pub resets: usize,
}

impl Ended {
    /// Doses pumped less than their millilitres.
    pub fn short(&self) -> usize {
        self.motor
            .per_dose
            .iter()
            .filter(|&&ml| ml < DOSE_ML)
            .count()
    }

    /// Doses pumped more than their millilitres.
    pub fn over(&self) -> usize {
        self.motor
            .per_dose
            .iter()
            .filter(|&&ml| ml > DOSE_ML)
            .count()
    }
}

/// Why a run failed: the flash refused (never, on a sound engine).
pub type PumpError = ConsumerError<FlashError, Infallible>;

/// The device: its flash and motor (which survive a reset) and the schedule's state.
struct Device<'a> {
    flash: PumpFlash,
    motor: Motor,
    way: Way,
    schedule: &'a [Reset],
    taken: [bool; MAX_RESETS],
    resets: usize,
    observe: &'a mut dyn FnMut(PumpStep),
}

/// The power failed: the boot starts over.
struct PowerFailed;

enum Stop {
    Reset,
    Failed(PumpError),
}

impl From<PumpError> for Stop {
    fn from(e: PumpError) -> Self {
        Self::Failed(e)
    }
}

impl From<idem_core::journal::JournalError<FlashError>> for Stop {
    fn from(e: idem_core::journal::JournalError<FlashError>) -> Self {
        Self::Failed(e.into())
    }
}

impl From<PowerFailed> for Stop {
    fn from(_: PowerFailed) -> Self {
        Self::Reset
    }
}

impl Device<'_> {
    /// Whether the schedule resets the device with `pumped` millilitres of the dose at
    /// `offset` pumped; a point is taken once.
    fn reset_at(&mut self, offset: u64, pumped: u16) -> Result<(), PowerFailed> {
        let at = Reset { offset, pumped };
        let hit = self
            .schedule
            .iter()
            .zip(self.taken.iter_mut())
            .find(|(r, taken)| **r == at && !**taken);
        match hit {
            Some((_, taken)) => {
                *taken = true;
                self.resets += 1;
                (self.observe)(PumpStep::Reset(at));
                Err(PowerFailed)
            }
            None => Ok(()),
        }
    }

    /// Pumps `ml` millilitres of the dose at `offset`, one at a time, the schedule
    /// checked before the first and after each.
    fn pump(&mut self, offset: u64, ml: u64) -> Result<(), PowerFailed> {
        let i = offset as usize;
        self.reset_at(offset, self.motor.per_dose[i])?;
        for _ in 0..ml {
            self.motor.per_dose[i] += 1;
            self.motor.pumped_ml += 1;
            (self.observe)(PumpStep::Pumped { offset, ml: 1 });
            self.reset_at(offset, self.motor.per_dose[i])?;
        }
        Ok(())
    }

    /// The offset of the command that issued intent `serial`: every command issues one,
    /// in order.
    fn offset_of(serial: u32) -> u64 {
        u64::from(serial.saturating_sub(1))
    }

    /// One boot, to the end of the log or to a reset.
    fn boot(&mut self, log: &Received<'_, Event<Dispense>>) -> Result<(), Stop> {
        let store = PumpStore::default();
        let config = ConsumerConfig::every(EVERY);
        let mut ledger = match self.way {
            Way::Effects => Some(Ledger::open(&mut self.flash, LEDGER, LEDGER_TAG)?),
            _ => None,
        };
        let mut consumer = Consumer::open(&mut self.flash, LAYOUT, store, config)?;
        (self.observe)(PumpStep::Boot {
            resume_at: consumer.resume_at(),
        });
        let state = consumer.state().state;
        self.at_boot(&state, ledger.as_mut())?;
        loop {
            match consumer.step(&mut self.flash, log)? {
                Step::Done => return Ok(()),
                Step::Effect(e, Outcome::Applied) => {
                    (self.observe)(PumpStep::Recorded { offset: e.offset });
                    self.pump(e.offset, u64::from(e.payload.ml))?;
                    if let Some(ledger) = ledger.as_mut() {
                        let serial = consumer.state().state.intent.serial;
                        ledger.done(&mut self.flash, serial)?;
                        (self.observe)(PumpStep::Done { offset: e.offset });
                    }
                }
                Step::Effect(e, _) => (self.observe)(PumpStep::Skipped { offset: e.offset }),
                _ => {}
            }
        }
    }

    /// What a boot does about the newest dose, by the way.
    fn at_boot(&mut self, state: &PumpState, ledger: Option<&mut Ledger>) -> Result<(), Stop> {
        let offset = Self::offset_of(state.intent.serial);
        match (self.way, ledger) {
            (Way::After, _) => {}
            (Way::Reassert, _) => {
                if let Some(ml) = state.intent.action {
                    (self.observe)(PumpStep::Reasserted { offset });
                    self.pump(offset, u64::from(ml))?;
                }
            }
            (Way::Effects, Some(ledger)) => {
                if let Some(p) = ledger.pending(&state.intent) {
                    let pumped = self.motor.pumped_ml;
                    (self.observe)(PumpStep::Asked {
                        offset,
                        pumped,
                        commanded: state.commanded_ml,
                    });
                    let happened = pumped >= state.commanded_ml;
                    // The decision says whether to act; what is left to pump is the
                    // counter's shortfall, for a dose the reset cut half way.
                    if p.decide(Choice::Asked { happened }).is_some() {
                        self.pump(offset, state.commanded_ml - pumped)?;
                    }
                    ledger.done(&mut self.flash, p.serial)?;
                    (self.observe)(PumpStep::Done { offset });
                }
            }
            (Way::Effects, None) => {}
        }
        Ok(())
    }
}

/// Runs the log with `way` against `schedule`, each reset a reboot from the flash and
/// the motor alone, telling `observe` each step.
pub fn run_traced(
    way: Way,
    schedule: &[Reset],
    observe: &mut dyn FnMut(PumpStep),
) -> Result<Ended, PumpError> {
    let log = commands();
    let received = Received::new(&log, Some(DOSES as u64));
    let mut device = Device {
        flash: PumpFlash::new(),
        motor: Motor {
            per_dose: [0; DOSES],
            pumped_ml: 0,
        },
        way,
        schedule: &schedule[..schedule.len().min(MAX_RESETS)],
        taken: [false; MAX_RESETS],
        resets: 0,
        observe,
    };
    // Each reset is taken once, so the boots end.
    loop {
        match device.boot(&received) {
            Ok(()) => break,
            Err(Stop::Reset) => continue,
            Err(Stop::Failed(e)) => return Err(e),
        }
    }
    Ok(Ended {
        motor: device.motor,
        true_ml: DOSES as u64 * u64::from(DOSE_ML),
        resets: device.resets,
    })
}

/// [`run_traced`] without the steps.
pub fn run(way: Way, schedule: &[Reset]) -> Result<Ended, PumpError> {
    run_traced(way, schedule, &mut |_| {})
}

/// Runs over many schedules, by their pumped millilitres against the truth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Schedules run.
    pub runs: u64,
    /// Runs that pumped exactly what the commands ask.
    pub exact: u64,
    /// Runs that pumped less.
    pub under: u64,
    /// Runs that pumped more.
    pub over: u64,
    /// Millilitres never pumped, over all runs.
    pub lost_ml: u64,
    /// Millilitres pumped twice, over all runs.
    pub extra_ml: u64,
}

impl Tally {
    fn add(&mut self, e: &Ended) {
        self.runs += 1;
        let pumped = e.motor.pumped_ml;
        match pumped.cmp(&e.true_ml) {
            core::cmp::Ordering::Equal => self.exact += 1,
            core::cmp::Ordering::Less => self.under += 1,
            core::cmp::Ordering::Greater => self.over += 1,
        }
        for &ml in &e.motor.per_dose {
            self.lost_ml += u64::from(DOSE_ML.saturating_sub(ml));
            self.extra_ml += u64::from(ml.saturating_sub(DOSE_ML));
        }
    }
}

/// `way` against one reset at every point: each dose's every millilitre, 0 to
/// [`DOSE_ML`] ([`DOSES`] × 6 runs).
pub fn sweep(way: Way) -> Result<Tally, PumpError> {
    let mut tally = Tally::default();
    for offset in 0..DOSES as u64 {
        for pumped in 0..=DOSE_ML {
            tally.add(&run(way, &[Reset { offset, pumped }])?);
        }
    }
    Ok(tally)
}

/// `way` against `schedules` seeded schedules of `resets` resets each (at most
/// [`MAX_RESETS`]), each at a random dose and millilitre.
pub fn random(way: Way, seed: u64, resets: usize, schedules: u64) -> Result<Tally, PumpError> {
    let mut rng = SplitMix64::new(seed);
    let mut tally = Tally::default();
    for _ in 0..schedules {
        let mut schedule = Schedule::new();
        for _ in 0..resets.min(MAX_RESETS) {
            let offset = rng.range(0, DOSES as u64 - 1);
            let pumped = rng.range(0, u64::from(DOSE_ML)) as u16;
            // Capacity is MAX_RESETS, and no more are pushed.
            let _ = schedule.push(Reset { offset, pumped });
        }
        tally.add(&run(way, &schedule)?);
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenarios_two_resets_lose_a_dose_double_one_or_neither() {
        let pumped = |way| run(way, &RESETS).unwrap();
        let after = pumped(Way::After);
        assert_eq!(
            (after.motor.pumped_ml, after.true_ml, after.resets),
            (95, 100, 2)
        );
        assert_eq!(after.motor.per_dose[6], 0);
        assert_eq!((after.short(), after.over()), (1, 0));
        let reassert = pumped(Way::Reassert);
        assert_eq!(reassert.motor.pumped_ml, 105);
        assert_eq!(
            (reassert.motor.per_dose[6], reassert.motor.per_dose[13]),
            (5, 10)
        );
        assert_eq!((reassert.short(), reassert.over()), (0, 1));
        let effects = pumped(Way::Effects);
        assert_eq!(effects.motor.pumped_ml, 100);
        assert_eq!(effects.motor.per_dose, [DOSE_ML; DOSES]);
        // Without a reset, every way pumps each dose once.
        for way in Way::ALL {
            assert_eq!(run(way, &[]).unwrap().motor.per_dose, [DOSE_ML; DOSES]);
        }
    }

    #[test]
    fn a_dose_cut_half_way_is_finished_by_asking_the_counter() {
        let half = [Reset {
            offset: 17,
            pumped: 2,
        }];
        let ml = |way| run(way, &half).unwrap().motor.pumped_ml;
        assert_eq!(
            (ml(Way::After), ml(Way::Reassert), ml(Way::Effects)),
            (97, 102, 100)
        );
    }

    #[test]
    fn a_reset_at_every_point() {
        // 20 doses, a reset at each of 0 to 5 ml pumped: 120 runs a way.
        let t = |way| sweep(way).unwrap();
        let after = t(Way::After);
        assert_eq!(
            after,
            Tally {
                runs: 120,
                exact: 20,
                under: 100,
                over: 0,
                lost_ml: 300,
                extra_ml: 0
            }
        );
        let reassert = t(Way::Reassert);
        assert_eq!(
            reassert,
            Tally {
                runs: 120,
                exact: 20,
                under: 0,
                over: 100,
                lost_ml: 0,
                extra_ml: 300
            }
        );
        let effects = t(Way::Effects);
        assert_eq!((effects.runs, effects.exact), (120, 120));
    }

    #[test]
    fn seeded_schedules_of_three_resets() {
        // 200 schedules of 3 resets, seed 7, each at a random dose and millilitre.
        let t = |way| random(way, 7, 3, 200).unwrap();
        let effects = t(Way::Effects);
        assert_eq!((effects.runs, effects.exact), (200, 200));
        // Driving after the step loses what a reset leaves unpumped of a dose;
        // re-asserting pumps again what a reset found pumped.
        let after = t(Way::After);
        assert_eq!(
            after,
            Tally {
                runs: 200,
                exact: 0,
                under: 200,
                over: 0,
                lost_ml: 1_517,
                extra_ml: 0
            }
        );
        let reassert = t(Way::Reassert);
        assert_eq!(
            reassert,
            Tally {
                runs: 200,
                exact: 2,
                under: 0,
                over: 198,
                lost_ml: 0,
                extra_ml: 1_390
            }
        );
    }

    #[test]
    fn a_schedule_reads_or_says_why_not() {
        assert_eq!(
            parse_schedule("crash@pump:6/0, crash@pump:13/5").unwrap(),
            default_schedule()
        );
        assert_eq!(
            parse_schedule("crash@pump:20/0"),
            Err(ScheduleError::Offset(20))
        );
        assert_eq!(parse_schedule("crash@pump:2/6"), Err(ScheduleError::Ml(6)));
        assert_eq!(parse_schedule("crash@effect:2"), Err(ScheduleError::Syntax));
        assert_eq!(parse_schedule("").unwrap().len(), 0);
    }
}
