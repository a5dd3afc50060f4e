//! The deterministic simulator: runs a scenario with a crash plan on a device made of a
//! strict in-memory flash and RAM.
//!
//! A crash drops everything in RAM (the consumer, the store state it holds, the journal
//! cursors) and recovers from flash alone. A crash at a `torn` or `erase` point cuts the
//! power in the middle of that flash operation. The same scenario and plan always give
//! the same trace: there is no clock and no randomness. Each step is reported to an
//! [`Observer`] as a [`TraceStep`], and the run ends with a [`Report`].

use crate::consumer::{Consumer, Layout, Step};
use crate::crash::{At, CrashPoint};
use crate::flash::{FlashError, MemFlash, PowerCut};
use crate::journal::{JournalError, Region};
use crate::log::{Log, Offset};
use crate::scenario::{MAX_CRASHES, Scenario};
use crate::store::{Outcome, Store};

/// The simulated device's flash: 8 pages of 1 KiB, as on a micro:bit v1.
pub type SimFlash = MemFlash<8, 1024>;

/// The simulated device's partitions: the position journal on pages 0..4, the store's
/// journal on pages 4..8.
pub const SIM_LAYOUT: Layout = Layout {
    positions: Region { start: 0, pages: 4 },
    sink: Region {
        start: 4 * 1024,
        pages: 4,
    },
    tag: 0,
};

/// What happened at one step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// An event was read; `redelivery` when its offset had been delivered before.
    Deliver {
        /// Whether this offset was delivered before.
        redelivery: bool,
    },
    /// The store applied the event.
    Apply,
    /// The store skipped the event as a duplicate.
    Skip,
    /// The position was committed: the next offset to read is the step's `committed`.
    Commit,
    /// The device crashed at this point.
    Crash(CrashPoint),
    /// The device restarted and recovered from flash; it resumes at the step's `committed`.
    Recover,
}

/// One step of a run, with the state visible after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceStep {
    /// Step number, from 0.
    pub index: u64,
    /// The offset the step is about (none for a recovery or a flash-level crash).
    pub offset: Option<Offset>,
    /// What happened.
    pub action: Action,
    /// The store's total after the step.
    pub total: i64,
    /// The durable position after the step (next offset to read; `None`: nothing committed).
    pub committed: Option<Offset>,
}

/// Receives every step of a run.
pub trait Observer {
    /// Called once per step, in order.
    fn on_step(&mut self, step: &TraceStep);
}

impl<F: FnMut(&TraceStep)> Observer for F {
    fn on_step(&mut self, step: &TraceStep) {
        self(step)
    }
}

/// Flash use of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlashUse {
    /// Journal records appended (store records and position commits).
    pub writes: u64,
    /// Pages erased.
    pub erases: u64,
    /// Bytes programmed (records and page headers).
    pub bytes_written: u64,
}

/// The outcome of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// What the total should be: each distinct message counted once.
    pub true_total: i64,
    /// The store's total at the end.
    pub final_total: i64,
    /// The last offset covered by the durable position when the last crash hit
    /// (`None`: no crash, or nothing committed by then).
    pub committed_at_crash: Option<Offset>,
    /// Crashes that happened.
    pub crashes: u32,
    /// Crash points of the plan that the run never reached.
    pub unfired: u32,
    /// Steps in the trace.
    pub steps: u64,
    /// Deliveries (redeliveries included).
    pub delivered: u64,
    /// Deliveries of an offset delivered before.
    pub redelivered: u64,
    /// Effects applied.
    pub applied: u64,
    /// Events skipped as duplicates.
    pub skipped: u64,
    /// Flash use.
    pub flash: FlashUse,
}

/// Runs `scenario` with `store` on a fresh [`SimFlash`] and [`SIM_LAYOUT`].
pub fn run<S: Store + Clone, L: Log>(
    scenario: &Scenario<L>,
    store: S,
    observer: &mut impl Observer,
) -> Result<Report, JournalError<FlashError>> {
    let mut flash = SimFlash::new();
    run_on(&mut flash, SIM_LAYOUT, scenario, store, observer)
}

/// Runs `scenario` with `store` on `flash`, crashing at each point of the scenario's plan.
pub fn run_on<S: Store + Clone, L: Log, const P: usize, const PS: usize>(
    flash: &mut MemFlash<P, PS>,
    layout: Layout,
    scenario: &Scenario<L>,
    store: S,
    observer: &mut impl Observer,
) -> Result<Report, JournalError<FlashError>> {
    let plan = &scenario.crashes[..];
    let base = flash.stats();
    let mut seen = [0u32; MAX_CRASHES];
    let mut fired = [false; MAX_CRASHES];
    let mut report = Report {
        true_total: scenario.log.true_total(),
        final_total: 0,
        committed_at_crash: None,
        crashes: 0,
        unfired: 0,
        steps: 0,
        delivered: 0,
        redelivered: 0,
        applied: 0,
        skipped: 0,
        flash: FlashUse::default(),
    };
    let mut high_water: Option<Offset> = None;
    arm(flash, plan, &fired, base);
    let mut consumer = Consumer::open(flash, layout, store.clone(), scenario.consumer)?;
    loop {
        let (offset, action, crash) = match consumer.step(flash, &scenario.log) {
            Ok(Step::Done) => break,
            Ok(step) => {
                let (offset, action) = match step {
                    Step::Deliver(e) => {
                        let redelivery = high_water.is_some_and(|h| e.offset <= h);
                        high_water = Some(high_water.map_or(e.offset, |h| h.max(e.offset)));
                        report.delivered += 1;
                        report.redelivered += u64::from(redelivery);
                        (Some(e.offset), Action::Deliver { redelivery })
                    }
                    Step::Effect(e, Outcome::Applied) => {
                        report.applied += 1;
                        (Some(e.offset), Action::Apply)
                    }
                    Step::Effect(e, Outcome::Skipped) => {
                        report.skipped += 1;
                        (Some(e.offset), Action::Skip)
                    }
                    Step::Commit { .. } | Step::Done => (next_minus_one(&step), Action::Commit),
                };
                (
                    offset,
                    action,
                    match_point(plan, &mut seen, &mut fired, &step),
                )
            }
            Err(JournalError::Flash(FlashError::PowerCut)) => {
                let now = flash.stats();
                let point = plan.iter().enumerate().find(|&(i, p)| {
                    !fired[i]
                        && match p.at {
                            At::Torn(w) => w == now.word_writes - base.word_writes,
                            At::Erase(e) => e == now.erases - base.erases,
                            _ => false,
                        }
                });
                let Some((i, p)) = point else {
                    return Err(JournalError::Flash(FlashError::PowerCut));
                };
                fired[i] = true;
                (None, Action::Crash(*p), Some(*p))
            }
            Err(e) => return Err(e),
        };
        if !matches!(action, Action::Crash(_)) {
            emit(observer, &mut report, offset, action, &consumer);
        }
        if let Some(point) = crash {
            report.crashes += 1;
            report.committed_at_crash = consumer.committed().and_then(|n| n.checked_sub(1));
            report.flash.writes += consumer.records_written();
            emit(
                observer,
                &mut report,
                offset,
                Action::Crash(point),
                &consumer,
            );
            flash.power_on();
            arm(flash, plan, &fired, base);
            consumer = Consumer::open(flash, layout, store.clone(), scenario.consumer)?;
            emit(observer, &mut report, None, Action::Recover, &consumer);
        }
    }
    flash.cancel_power_cut();
    let now = flash.stats();
    report.final_total = consumer.total();
    report.flash.writes += consumer.records_written();
    report.flash.erases = now.erases - base.erases;
    report.flash.bytes_written = now.bytes_written - base.bytes_written;
    report.unfired = fired[..plan.len()].iter().filter(|f| !**f).count() as u32;
    Ok(report)
}

/// The last offset a commit covers.
fn next_minus_one(step: &Step) -> Option<Offset> {
    match step {
        Step::Commit { next } => next.checked_sub(1),
        _ => None,
    }
}

fn emit<S: Store>(
    observer: &mut impl Observer,
    report: &mut Report,
    offset: Option<Offset>,
    action: Action,
    consumer: &Consumer<S>,
) {
    observer.on_step(&TraceStep {
        index: report.steps,
        offset,
        action,
        total: consumer.total(),
        committed: consumer.committed(),
    });
    report.steps += 1;
}

/// Counts `step` against the plan's offset points; the point that fires now, if any.
fn match_point(
    plan: &[CrashPoint],
    seen: &mut [u32; MAX_CRASHES],
    fired: &mut [bool; MAX_CRASHES],
    step: &Step,
) -> Option<CrashPoint> {
    let mut crash = None;
    for (i, p) in plan.iter().enumerate() {
        let hit = match (p.at, step) {
            (At::Deliver(o), Step::Deliver(e)) => e.offset == o,
            (At::Effect(o), Step::Effect(e, _)) => e.offset == o,
            (At::Commit(o), Step::Commit { next }) => *next == o + 1,
            _ => false,
        };
        if hit && !fired[i] {
            seen[i] += 1;
            if seen[i] == p.occurrence {
                fired[i] = true;
                crash.get_or_insert(*p);
            }
        }
    }
    crash
}

/// Arms the flash with the next pending torn-write and erase points, counted from `base`.
fn arm<const P: usize, const PS: usize>(
    flash: &mut MemFlash<P, PS>,
    plan: &[CrashPoint],
    fired: &[bool; MAX_CRASHES],
    base: crate::flash::FlashStats,
) {
    let now = flash.stats();
    let (writes, erases) = (now.word_writes - base.word_writes, now.erases - base.erases);
    let pending = |f: fn(At) -> Option<u64>, done: u64| {
        plan.iter()
            .enumerate()
            .filter(|&(i, _)| !fired[i])
            .filter_map(|(_, p)| f(p.at))
            .filter(|&n| n > done)
            .min()
    };
    flash.cancel_power_cut();
    if let Some(w) = pending(|a| if let At::Torn(w) = a { Some(w) } else { None }, writes) {
        flash.schedule_power_cut(PowerCut::AtWordWrite(w - writes));
    }
    if let Some(e) = pending(
        |a| if let At::Erase(e) = a { Some(e) } else { None },
        erases,
    ) {
        flash.schedule_power_cut(PowerCut::AtErase(e - erases));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;
    use crate::store::{Atomic, MessageIdWindow, Naive, OffsetStamped};

    #[test]
    fn ddia_naive_and_offset() {
        let s = scenario::ddia(100, 10, Some(49)).unwrap();
        let naive = run(&s, Naive, &mut |_: &TraceStep| {}).unwrap();
        assert_eq!(
            (
                naive.final_total,
                naive.true_total,
                naive.committed_at_crash
            ),
            (110, 100, Some(39))
        );
        assert_eq!(
            (
                naive.redelivered,
                naive.skipped,
                naive.crashes,
                naive.unfired
            ),
            (10, 0, 1, 0)
        );
        let offset = run(&s, OffsetStamped, &mut |_: &TraceStep| {}).unwrap();
        assert_eq!(
            (offset.final_total, offset.skipped, offset.flash.writes),
            (100, 10, 110)
        );
        let atomic = run(&s, Atomic, &mut |_: &TraceStep| {}).unwrap();
        assert_eq!(
            (
                atomic.final_total,
                atomic.flash.writes,
                atomic.committed_at_crash
            ),
            (100, 10, Some(39))
        );
    }

    #[test]
    fn trace_marks_the_crash_and_the_recovery() {
        let s = scenario::worked_example();
        let mut totals = heapless::Vec::<(Action, i64), 32>::new();
        let r = run(&s, Naive, &mut |t: &TraceStep| {
            if !matches!(t.action, Action::Deliver { .. }) {
                totals.push((t.action, t.total)).unwrap();
            }
        })
        .unwrap();
        assert_eq!(r.final_total, 20);
        let crash = CrashPoint::after_effect(1);
        assert_eq!(
            &totals[..],
            &[
                (Action::Apply, 5),
                (Action::Apply, 8),
                (Action::Crash(crash), 8),
                (Action::Recover, 8),
                (Action::Apply, 13),
                (Action::Apply, 16),
                (Action::Apply, 20),
                (Action::Commit, 20)
            ]
        );
    }

    #[test]
    fn torn_writes_and_interrupted_erases_recover_exactly() {
        // Every word write and erase of the offset store's ddia run, one cut each.
        let clean = scenario::ddia(200, 10, None).unwrap();
        let mut flash = SimFlash::new();
        run_on(
            &mut flash,
            SIM_LAYOUT,
            &clean,
            OffsetStamped,
            &mut |_: &TraceStep| {},
        )
        .unwrap();
        let (writes, erases) = (flash.stats().word_writes, flash.stats().erases);
        assert!(erases > 0);
        for at in (1..=writes)
            .map(At::Torn)
            .chain((1..=erases).map(At::Erase))
        {
            let s = clean.clone().with_crashes(&[CrashPoint::new(at)]).unwrap();
            for store_total in [
                run(&s, OffsetStamped, &mut |_: &TraceStep| {}).unwrap(),
                run(
                    &s,
                    MessageIdWindow::<16>::default(),
                    &mut |_: &TraceStep| {},
                )
                .unwrap(),
                run(&s, Atomic, &mut |_: &TraceStep| {}).unwrap(),
            ] {
                assert_eq!(store_total.final_total, 200, "{at:?}");
            }
        }
    }

    #[test]
    fn a_point_the_run_never_reaches_is_reported() {
        let s = scenario::ddia(100, 10, None)
            .unwrap()
            .with_crashes(&[CrashPoint::new(At::Commit(35))])
            .unwrap();
        let r = run(&s, Naive, &mut |_: &TraceStep| {}).unwrap();
        assert_eq!((r.crashes, r.unfired, r.final_total), (0, 1, 100));
    }
}
