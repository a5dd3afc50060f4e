//! The deterministic simulator: runs a scenario with a crash plan on a device made of a
//! strict in-memory flash and RAM.
//!
//! A crash drops everything in RAM (the consumer, the sinks' state it holds, the journal
//! cursors) and recovers from flash alone. A crash at a `torn` or `erase` point cuts the
//! power in the middle of that flash operation. The same scenario and plan always give
//! the same trace: there is no clock and no randomness. Each step is reported to an
//! [`Observer`] as a [`TraceStep`], and the run ends with a [`Report`].
//!
//! A [`Run`] is a value: clone it at any step to branch a crashed run off an uncrashed
//! one (what a sweep does), and compare a branch's [`Logical`] state with the uncrashed
//! run's to know when the two have become the same.

use crate::check::{AppliedSet, BitSet, CheckError, Checker};
use crate::flash::{FlashError, FlashStats, MemFlash, PowerCut};
use crate::scenario::Scenario;
use idem_core::consumer::{Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::journal::{JournalError, Region};
use idem_core::log::Offset;
use idem_core::persist::{Disagreement, Layout, Resolution};
use idem_core::store::Outcome;
use idem_payments::Total;
use idem_payments::crash::{CrashPoint, MAX_CRASHES, Plan, PlanFull};
use idem_payments::stores::StoreError;
use idem_payments::{Message, SumSinks, Truth};

pub use crate::check::Anomalies;

/// The simulated device's flash: 8 pages of 1 KiB, as on a micro:bit v1.
pub type SimFlash = MemFlash<8, 1024>;

/// The simulated device's partitions: the position journal on pages 0..4, the store's
/// journal on pages 4..8 (a pair of sinks: 4..6 and 6..8).
pub const SIM_LAYOUT: Layout = Layout {
    positions: Region { start: 0, pages: 4 },
    sink: Region {
        start: 4 * 1024,
        pages: 4,
    },
    tag: 0,
};

/// The applied set [`run`] checks with: logs of up to 1,048,576 events.
pub type DefaultApplied = BitSet<16_384>;

/// What happened at one step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// An event was read; `redelivery` when its offset had been delivered before.
    Deliver {
        /// Whether this offset was delivered before.
        redelivery: bool,
    },
    /// The first of two sinks wrote the event's effect; the second has not yet.
    Between,
    /// The store applied the event.
    Apply,
    /// The store skipped the event as a duplicate.
    Skip,
    /// The consumer passed over the event without giving it to the store (under
    /// `read_committed`, a record of an aborted transaction).
    Pass,
    /// A two-phase store's prepared record is durable (the decision is not).
    Prepare,
    /// The position was committed: the step's `resume_at` is the new one.
    Commit,
    /// The device crashed at this point.
    Crash(CrashPoint),
    /// The device restarted and recovered from flash; it resumes at the step's `resume_at`.
    Recover,
}

/// One step of a run, with the state visible after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceStep {
    /// Step number, from 0.
    pub index: u64,
    /// The offset the step is about (the last offset a prepare or commit covers; none
    /// for a recovery or a flash-level crash).
    pub offset: Option<Offset>,
    /// What happened.
    pub action: Action,
    /// The store's total after the step.
    pub total: i64,
    /// The durable position after the step: where a restart resumes (0 when nothing is
    /// covered yet).
    pub resume_at: Offset,
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

/// An observer that ignores every step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn on_step(&mut self, _: &TraceStep) {}
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
    /// Where the device resumed after its last crash (the durable position then);
    /// `None` without a crash.
    pub resume_at_crash: Option<Offset>,
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
    /// Events the consumer passed over (records of aborted transactions, under
    /// `read_committed`).
    pub passed: u64,
    /// Flash use.
    pub flash: FlashUse,
    /// What the checker found.
    pub anomalies: Anomalies,
    /// Entries the store's bounded memory forgot because it was full.
    pub evicted: u64,
    /// Sinks that are two views of one fact: (total view, index view) at the end.
    pub views: Option<(i64, i64)>,
    /// The two views as the last recovery that found them disagreeing read them.
    pub diverged_at_recovery: Option<(i64, i64)>,
    /// What the last recovery did with a record in doubt (two-phase: rolled forward or
    /// back); `None` when it found none.
    pub resolution: Option<Resolution>,
}

impl Report {
    /// The last offset the durable position covered when the last crash hit (`None`:
    /// no crash, or nothing covered by then).
    pub fn committed_at_crash(&self) -> Option<Offset> {
        self.resume_at_crash
            .and_then(idem_core::consumer::covers_through)
    }
}

/// Why a run stopped short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// A journal failed other than by a scheduled power cut.
    Journal(JournalError<FlashError>),
    /// The checker could not follow the run.
    Check(CheckError),
    /// The store refused an event (a bounded memory is full).
    Store(StoreError),
    /// More crash points than a plan holds.
    Plan(PlanFull),
    /// Recovery found the journals out of step.
    Disagree(Disagreement),
    /// The consumer stopped otherwise (a journal region too small for its store).
    Consumer(ConsumerError<FlashError, StoreError>),
    /// The consumer took a step or gave an outcome this simulator does not know: an
    /// idem-core newer than this idem-sim.
    UnknownStep,
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Journal(e) => e.fmt(f),
            Self::Check(e) => e.fmt(f),
            Self::Store(e) => e.fmt(f),
            Self::Plan(e) => e.fmt(f),
            Self::Disagree(e) => e.fmt(f),
            Self::Consumer(e) => e.fmt(f),
            Self::UnknownStep => f.write_str(
                "the consumer took a step this simulator does not know (idem-core is newer than idem-sim)",
            ),
        }
    }
}

impl core::error::Error for SimError {}

impl From<JournalError<FlashError>> for SimError {
    fn from(e: JournalError<FlashError>) -> Self {
        Self::Journal(e)
    }
}

impl From<ConsumerError<FlashError, StoreError>> for SimError {
    fn from(e: ConsumerError<FlashError, StoreError>) -> Self {
        match e {
            ConsumerError::Journal(e) => Self::Journal(e),
            ConsumerError::Store(e) => Self::Store(e),
            ConsumerError::Disagree(e) => Self::Disagree(e),
            e => Self::Consumer(e),
        }
    }
}

impl From<CheckError> for SimError {
    fn from(e: CheckError) -> Self {
        Self::Check(e)
    }
}

impl From<PlanFull> for SimError {
    fn from(e: PlanFull) -> Self {
        Self::Plan(e)
    }
}

/// What decides the rest of a run: two idle runs with equal logical state behave the
/// same from there on (the flash layout may differ, the outcome does not).
#[derive(Debug, Clone, PartialEq)]
pub struct Logical<K: SumSinks> {
    /// The sinks' state.
    pub state: K::State,
    /// The durable position (next offset to read after a crash).
    pub resume_at: Offset,
    /// The next offset to read.
    pub next: Offset,
}

/// One run of a scenario on a simulated device, a step at a time.
#[derive(Debug)]
pub struct Run<'l, K: SumSinks, L, A, const P: usize, const PS: usize> {
    flash: MemFlash<P, PS>,
    layout: Layout,
    log: &'l L,
    sinks: K,
    config: ConsumerConfig,
    plan: Plan,
    base: FlashStats,
    consumer: Consumer<K>,
    high_water: Option<Offset>,
    checker: Checker<A>,
    report: Report,
    done: bool,
}

// By hand: a derived Clone would ask the log to be Clone, and a run only borrows it.
impl<K: SumSinks, L, A: Clone, const P: usize, const PS: usize> Clone for Run<'_, K, L, A, P, PS> {
    fn clone(&self) -> Self {
        Self {
            flash: self.flash.clone(),
            layout: self.layout,
            log: self.log,
            sinks: self.sinks.clone(),
            config: self.config,
            plan: self.plan.clone(),
            base: self.base,
            consumer: self.consumer.clone(),
            high_water: self.high_water,
            checker: self.checker.clone(),
            report: self.report,
            done: self.done,
        }
    }
}

impl<'l, K: SumSinks, L: Truth, A: AppliedSet, const P: usize, const PS: usize>
    Run<'l, K, L, A, P, PS>
{
    /// Starts `scenario` with `sinks` on `flash`, checking with the empty set `applied`.
    pub fn new(
        mut flash: MemFlash<P, PS>,
        layout: Layout,
        scenario: &'l Scenario<L>,
        sinks: K,
        applied: A,
    ) -> Result<Self, SimError> {
        let base = flash.stats();
        let consumer = Consumer::open(&mut flash, layout, sinks.clone(), scenario.consumer)?;
        let mut run = Self {
            flash,
            layout,
            log: &scenario.log,
            sinks,
            config: scenario.consumer,
            plan: Plan::new(&scenario.crashes)?,
            base,
            consumer,
            high_water: None,
            checker: Checker::new(applied, K::BATCHED).repeats_harmless(K::NATURALLY_IDEMPOTENT),
            report: Report {
                true_total: scenario.true_total(),
                final_total: 0,
                resume_at_crash: None,
                crashes: 0,
                unfired: 0,
                steps: 0,
                delivered: 0,
                redelivered: 0,
                applied: 0,
                skipped: 0,
                passed: 0,
                flash: FlashUse::default(),
                anomalies: Anomalies::default(),
                evicted: 0,
                views: None,
                diverged_at_recovery: None,
                resolution: None,
            },
            done: false,
        };
        run.arm();
        Ok(run)
    }

    /// Advances by one consumer step (and, when the plan says so, a crash and recovery).
    /// `Ok(false)` once the run is done.
    pub fn step(&mut self, observer: &mut impl Observer) -> Result<bool, SimError> {
        if self.done {
            return Ok(false);
        }
        match self.consumer.step(&mut self.flash, self.log) {
            Ok(Step::Done) => {
                self.done = true;
                Ok(false)
            }
            Ok(step) => {
                let (offset, action) = self.account(&step)?;
                self.emit(observer, offset, action);
                if let Some(point) = self.plan.on_step(&step) {
                    self.crash(point, offset, observer)?;
                }
                Ok(true)
            }
            Err(ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))) => {
                let point = self.fired_flash_point()?;
                self.crash(point, None, observer)?;
                Ok(true)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Crashes the device now at `point` (recorded in the trace, and among the fired
    /// points when the plan has room) and recovers it.
    pub fn crash(
        &mut self,
        point: CrashPoint,
        offset: Option<Offset>,
        observer: &mut impl Observer,
    ) -> Result<(), SimError> {
        self.plan.record(point);
        self.report.crashes += 1;
        self.report.resume_at_crash = Some(self.consumer.resume_at());
        self.report.flash.writes += self.consumer.records_written();
        self.emit(observer, offset, Action::Crash(point));
        loop {
            self.flash.power_on();
            self.arm();
            match Consumer::open(
                &mut self.flash,
                self.layout,
                self.sinks.clone(),
                self.config,
            ) {
                Ok(consumer) => {
                    self.consumer = consumer;
                    break;
                }
                // A crash during recovery: a two-phase resolution was being written.
                Err(ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))) => {
                    let point = self.fired_flash_point()?;
                    self.report.crashes += 1;
                    self.emit(observer, None, Action::Crash(point));
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.report.resolution = self.consumer.resolution();
        let log = self.log;
        let resume_at = self.consumer.resume_at();
        self.checker.recovered(resume_at, |o| log.canonical(o))?;
        if let Some((total, index)) = self.sinks.view_pair(self.consumer.state())
            && total != index
        {
            self.checker.diverged(resume_at);
            self.report.diverged_at_recovery = Some((total, index));
        }
        self.emit(observer, None, Action::Recover);
        Ok(())
    }

    /// The plan's torn-write or erase point that the flash's power cut just hit,
    /// marked as fired.
    fn fired_flash_point(&mut self) -> Result<CrashPoint, SimError> {
        let (writes, erases) = self.flash_ops();
        self.plan
            .fire_flash(writes, erases)
            .ok_or(SimError::Journal(JournalError::Flash(FlashError::PowerCut)))
    }

    /// Runs to the end.
    pub fn run_to_end(&mut self, observer: &mut impl Observer) -> Result<(), SimError> {
        while self.step(observer)? {}
        Ok(())
    }

    /// Whether the consumer is between events.
    pub fn is_idle(&self) -> bool {
        self.consumer.is_idle()
    }

    /// The checker's set of messages durably applied so far.
    pub fn applied(&self) -> &A {
        self.checker.applied_set()
    }

    /// The crash points of the plan that have happened, in plan order.
    pub fn fired_points(&self) -> heapless::Vec<CrashPoint, MAX_CRASHES> {
        self.plan.fired().collect()
    }

    /// Whether every crash point of the plan has happened.
    pub fn plan_done(&self) -> bool {
        self.plan.done()
    }

    /// The state that decides the rest of the run.
    pub fn logical(&self) -> Logical<K> {
        Logical {
            state: self.consumer.state().clone(),
            resume_at: self.consumer.resume_at(),
            next: self.consumer.next_offset(),
        }
    }

    /// Whether this run, idle, behaves from here on as one in the logical state
    /// `other` would: `Some(d)` when it does with its total `d` above. A shift other than
    /// 0 counts only once the run has read past everything it delivered before (no
    /// replay under way) and on a log whose ids are distinct, where the two runs' futures
    /// apply the same messages for the first time.
    pub fn rejoins(&self, other: &Logical<K>) -> Option<i64> {
        if !self.is_idle()
            || self.consumer.next_offset() != other.next
            || self.consumer.resume_at() != other.resume_at
        {
            return None;
        }
        let d = K::shift(self.consumer.state(), &other.state)?;
        let settled = self.high_water.is_none_or(|h| h < other.next) && self.log.ids_distinct();
        (d == 0 || settled).then_some(d)
    }

    /// The next offset the consumer will read.
    pub fn next_offset(&self) -> Offset {
        self.consumer.next_offset()
    }

    /// The flash's counters since the run started.
    pub fn flash_ops(&self) -> (u64, u64) {
        let now = self.flash.stats();
        (
            now.word_writes - self.base.word_writes,
            now.erases - self.base.erases,
        )
    }

    /// Replaces the crash plan of a run that has not crashed yet (torn and erase points
    /// count from the start of the run).
    pub fn set_plan(&mut self, plan: &[CrashPoint]) -> Result<(), SimError> {
        self.plan = Plan::new(plan)?;
        self.arm();
        Ok(())
    }

    /// The report so far (for a run still going, totals as of now; anomalies without
    /// the lost writes, which are judged at [`Run::finish`]).
    pub fn report(&self) -> Report {
        let mut r = self.report;
        let (_, erases) = self.flash_ops();
        r.final_total = self.consumer.total();
        r.flash.writes += self.consumer.records_written();
        r.flash.erases = erases;
        r.flash.bytes_written = self.flash.stats().bytes_written - self.base.bytes_written;
        r.anomalies = self.checker.anomalies();
        r.evicted = K::evictions(self.consumer.state());
        r.views = self.sinks.view_pair(self.consumer.state());
        r.unfired = self.plan.pending().count() as u32;
        r
    }

    /// Judges lost writes below the run's position `end` (every message there is final)
    /// and returns the report. A finished run uses the log's length.
    pub fn finish_at(&mut self, end: Offset) -> Report {
        let log = self.log;
        self.checker.settle(end, |o| log.canonical(o) == o);
        self.report()
    }

    /// Calls `f` with every message (canonical offset) of the log that was never durably
    /// applied: at the end of a run, the lost writes.
    pub fn for_each_lost(&self, mut f: impl FnMut(Offset)) {
        for o in 0..self.log.len() {
            if self.log.canonical(o) == o && !self.checker.applied_set().contains(o) {
                f(o);
            }
        }
    }

    /// Ends a finished run: judges lost writes over the whole log.
    pub fn finish(mut self) -> Report {
        let len = self.log.len();
        self.flash.cancel_power_cut();
        self.finish_at(len)
    }

    /// Updates the counters and the checker for one consumer step.
    fn account(&mut self, step: &Step<Message>) -> Result<(Option<Offset>, Action), SimError> {
        let log = self.log;
        Ok(match *step {
            Step::Deliver(e) => {
                let redelivery = self.high_water.is_some_and(|h| e.offset <= h);
                self.high_water = Some(self.high_water.map_or(e.offset, |h| h.max(e.offset)));
                self.report.delivered += 1;
                self.report.redelivered += u64::from(redelivery);
                (Some(e.offset), Action::Deliver { redelivery })
            }
            Step::Between(e) => (Some(e.offset), Action::Between),
            Step::Effect(e, Outcome::Applied) => {
                self.report.applied += 1;
                self.checker.applied(e.offset, log.canonical(e.offset))?;
                (Some(e.offset), Action::Apply)
            }
            // A payment store never rejects (its count is `()`: the consumer stops first).
            Step::Effect(e, Outcome::Skipped | Outcome::Rejected) => {
                self.report.skipped += 1;
                (Some(e.offset), Action::Skip)
            }
            Step::Pass(e) => {
                self.report.passed += 1;
                (Some(e.offset), Action::Pass)
            }
            Step::Prepare { next } => (next.checked_sub(1), Action::Prepare),
            Step::Commit { next } => {
                self.checker.committed(next, |o| log.canonical(o))?;
                (next.checked_sub(1), Action::Commit)
            }
            Step::Done => (None, Action::Commit),
            _ => return Err(SimError::UnknownStep),
        })
    }

    fn emit(&mut self, observer: &mut impl Observer, offset: Option<Offset>, action: Action) {
        observer.on_step(&TraceStep {
            index: self.report.steps,
            offset,
            action,
            total: self.consumer.total(),
            resume_at: self.consumer.resume_at(),
        });
        self.report.steps += 1;
    }

    /// Arms the flash with the next pending torn-write and erase points.
    fn arm(&mut self) {
        let (writes, erases) = self.flash_ops();
        let (torn, erase) = self.plan.next_flash(writes, erases);
        self.flash.cancel_power_cut();
        if let Some(w) = torn {
            self.flash
                .schedule_power_cut(PowerCut::AtWordWrite(w - writes));
        }
        if let Some(e) = erase {
            self.flash.schedule_power_cut(PowerCut::AtErase(e - erases));
        }
    }
}

/// Runs `scenario` with `sinks` on a fresh [`SimFlash`] and [`SIM_LAYOUT`].
pub fn run<K: SumSinks, L: Truth>(
    scenario: &Scenario<L>,
    sinks: K,
    observer: &mut impl Observer,
) -> Result<Report, SimError> {
    let mut r = Run::new(
        SimFlash::new(),
        SIM_LAYOUT,
        scenario,
        sinks,
        DefaultApplied::new(),
    )?;
    r.run_to_end(observer)?;
    Ok(r.finish())
}

#[cfg(test)]
mod tests {
    fn every(k: u64) -> idem_core::consumer::CheckpointEvery {
        idem_core::consumer::CheckpointEvery::new(k).unwrap()
    }
    use super::*;
    use crate::scenario;
    use idem_payments::crash::At;
    use idem_payments::stores::{Atomic, MessageIdWindow, Naive, OffsetStamped, TwoPhase};

    #[test]
    fn ddia_naive_and_offset() {
        let s = scenario::ddia(100, every(10), Some(49)).unwrap();
        let naive = run(&s, Naive, &mut Quiet).unwrap();
        assert_eq!(
            (
                naive.final_total,
                naive.true_total,
                naive.committed_at_crash()
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
        assert_eq!(
            (naive.anomalies.duplicate, naive.anomalies.first_duplicate),
            (10, Some(40))
        );
        let offset = run(&s, OffsetStamped, &mut Quiet).unwrap();
        assert_eq!(
            (offset.final_total, offset.skipped, offset.flash.writes),
            (100, 10, 110)
        );
        assert!(offset.anomalies.is_empty());
        let atomic = run(&s, Atomic, &mut Quiet).unwrap();
        assert_eq!(
            (
                atomic.final_total,
                atomic.flash.writes,
                atomic.committed_at_crash()
            ),
            (100, 10, Some(39))
        );
        assert!(atomic.anomalies.is_empty(), "{:?}", atomic.anomalies);
    }

    #[test]
    fn payments_retry_is_a_duplicate_for_naive_only_message_id_catches_it() {
        let s = scenario::payments(scenario::ProducerMode::NonIdempotent).unwrap();
        let naive = run(&s, Naive, &mut Quiet).unwrap();
        assert_eq!(
            (naive.anomalies.duplicate, naive.anomalies.first_duplicate),
            (1, Some(0))
        );
        let mid = run(&s, MessageIdWindow::<Naive, 8>::default(), &mut Quiet).unwrap();
        assert!(mid.anomalies.is_empty(), "{:?}", mid.anomalies);
    }

    #[test]
    fn producer_faults_against_every_store() {
        use crate::scenario::ProducerMode::{Idempotent, NonIdempotent as Plain, Transactional};
        use crate::txn::Isolation;
        use idem_payments::stores::ProducerSeq;
        type Mid = idem_payments::registry::MessageIdStore;
        type Seq = ProducerSeq<{ idem_payments::registry::PRODUCERS }>;
        let totals = |s: &Scenario<crate::txn::TxnLog<{ scenario::SMALL_LOG }>>| {
            [
                run(s, Naive, &mut Quiet).unwrap().final_total,
                run(s, OffsetStamped, &mut Quiet).unwrap().final_total,
                run(s, Mid::default(), &mut Quiet).unwrap().final_total,
                run(s, Seq::default(), &mut Quiet).unwrap().final_total,
                run(s, Atomic, &mut Quiet).unwrap().final_total,
                run(s, TwoPhase, &mut Quiet).unwrap().final_total,
            ]
        };
        //                                          naive offset m-id seq atomic 2pc
        assert_eq!(
            totals(&scenario::payments(Plain).unwrap()),
            [13, 13, 8, 8, 13, 13]
        );
        assert_eq!(totals(&scenario::payments(Idempotent).unwrap()), [8; 6]);
        assert_eq!(totals(&scenario::payments(Transactional).unwrap()), [8; 6]);
        // Two payments of one amount are two payments: nothing repeats, all 13.
        assert_eq!(totals(&scenario::same_amount(Plain).unwrap()), [13; 6]);
        assert_eq!(
            totals(&scenario::resend(Plain).unwrap()),
            [13, 13, 8, 13, 13, 13]
        );
        assert_eq!(
            totals(&scenario::resend(Idempotent).unwrap()),
            [13, 13, 8, 13, 13, 13]
        );
        assert_eq!(
            totals(&scenario::zombie(Plain).unwrap()),
            [15, 15, 12, 12, 15, 15]
        );
        // A restarted idempotent producer has a fresh producer id: the broker fences
        // nothing, and the zombie's p42 is the next in its own sequence. The message-id
        // store sees the same payment twice; producer-seq reads the application's own
        // numbering in the payload (the same under every producer setting), where the
        // zombie's epoch is the older one.
        assert_eq!(
            totals(&scenario::zombie(Idempotent).unwrap()),
            [15, 15, 12, 12, 15, 15]
        );
        // A transactional A's p42 landed in a transaction it never committed; B's start
        // aborted it. Read uncommitted, the aborted copy counts (and producer-seq sees
        // A's epoch before B's); read committed, it is passed over, and all are exact.
        let txn = scenario::zombie(Transactional).unwrap();
        assert_eq!(totals(&txn), [15, 15, 12, 15, 15, 15]);
        let committed = Scenario {
            log: txn.log.clone().with_isolation(Isolation::ReadCommitted),
            ..txn
        };
        assert_eq!(totals(&committed), [12; 6]);
        let r = run(&committed, Naive, &mut Quiet).unwrap();
        assert_eq!(
            (r.passed, r.delivered, r.anomalies),
            (1, 3, Anomalies::default())
        );
        // The retry of r0 arrives 40 messages late: a 32-id window has evicted r0.
        assert_eq!(
            totals(&scenario::late_retry(Plain).unwrap()),
            [41, 41, 41, 40, 41, 41]
        );
        assert_eq!(totals(&scenario::late_retry(Idempotent).unwrap()), [40; 6]);
    }

    #[test]
    fn a_gauge_is_naturally_idempotent_and_max_is_also_commutative() {
        use idem_payments::stores::{Max, Set};
        let crash = scenario::gauge(100, every(10), Some(49)).unwrap();
        let late = scenario::late_reading().unwrap();
        let set = run(&crash, Set, &mut Quiet).unwrap();
        let max = run(&crash, Max, &mut Quiet).unwrap();
        // The replay of 40..49 writes readings 41..50 again, then 51..100: no harm.
        assert_eq!(
            (set.final_total, max.final_total, set.true_total),
            (100, 100, 100)
        );
        assert_eq!(set.redelivered, 10);
        // An old reading (60) after the last: set goes back to it, max does not move.
        let set = run(&late, Set, &mut Quiet).unwrap();
        let max = run(&late, Max, &mut Quiet).unwrap();
        assert_eq!(
            (set.final_total, max.final_total, set.true_total),
            (60, 100, 100)
        );
        // The naive store adds readings: a sum, not a gauge.
        assert_eq!(
            run(&crash, Naive, &mut Quiet).unwrap().final_total,
            5050 + 455
        );
    }

    #[test]
    fn trace_marks_the_crash_and_the_recovery() {
        let s = scenario::worked_example().unwrap();
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

    /// Cuts power at every word write and erase of `store`'s clean run, one cut a run.
    fn every_cut<S: idem_payments::Sum>(store: S) -> u64 {
        let clean = scenario::ddia(200, every(10), None).unwrap();
        let mut r = Run::new(
            SimFlash::new(),
            SIM_LAYOUT,
            &clean,
            store.clone(),
            DefaultApplied::new(),
        )
        .unwrap();
        r.run_to_end(&mut Quiet).unwrap();
        let (writes, erases) = r.flash_ops();
        assert!(erases > 0);
        for at in (1..=writes)
            .map(At::Torn)
            .chain((1..=erases).map(At::Erase))
        {
            let s = clean.clone().with_crashes(&[CrashPoint::new(at)]).unwrap();
            let report = run(&s, store.clone(), &mut Quiet).unwrap();
            assert_eq!((report.final_total, report.crashes), (200, 1), "{at:?}");
            assert!(
                report.anomalies.is_empty(),
                "{at:?}: {:?}",
                report.anomalies
            );
        }
        writes + erases
    }

    #[test]
    fn torn_writes_and_interrupted_erases_recover_exactly() {
        // Word writes + erases of 200 events, a commit every 10, the records at their
        // encoded size (journal format 3: a length byte and the payload in words, then the
        // check word; a run's small varints take 1 or 2 words where format 2's slots took
        // the largest encoding's). Offset: 200 store records and 20 position records, 4
        // page headers of 5 words, 3 store pages and 1 position page entered (was 1965 + 9
        // in slots).
        assert_eq!(every_cut(OffsetStamped), 668 + 4);
        // Message-id (16 ids), appending: 200 records (id, total, evicted, held, covered),
        // the window rebuilt at each recovery; 4 store pages and 1 position page (was
        // 2200 + 50 + 125 + 11).
        assert_eq!(every_cut(MessageIdWindow::<Naive, 16>::default()), 1073 + 5);
        // Atomic: 20 records on one page, and no position journal (was 140 + 5 + 1).
        assert_eq!(every_cut(Atomic), 59 + 1);
        // Two-phase: 20 prepared and 20 committed records on one page, and the 20
        // position records on another (was 40 * 12 + 10 + 125 + 3).
        assert_eq!(every_cut(TwoPhase), 199 + 2);
    }

    #[test]
    fn two_phase_is_exact_whichever_phase_a_crash_hits() {
        let clean = scenario::ddia(100, every(10), None).unwrap();
        for batch_end in (9..100).step_by(10) {
            for at in [
                At::Prepare(batch_end),
                At::Commit(batch_end),
                At::Effect(batch_end),
            ] {
                let s = clean.clone().with_crashes(&[CrashPoint::new(at)]).unwrap();
                let r = run(&s, TwoPhase, &mut Quiet).unwrap();
                assert_eq!((r.final_total, r.crashes), (100, 1), "{at:?}");
                assert!(r.anomalies.is_empty(), "{at:?}: {:?}", r.anomalies);
            }
        }
        // Three records per checkpoint: prepared, position, committed.
        assert_eq!(run(&clean, TwoPhase, &mut Quiet).unwrap().flash.writes, 30);
    }

    #[test]
    fn a_point_the_run_never_reaches_is_reported() {
        let s = scenario::ddia(100, every(10), None)
            .unwrap()
            .with_crashes(&[CrashPoint::new(At::Commit(35))])
            .unwrap();
        let r = run(&s, Naive, &mut Quiet).unwrap();
        assert_eq!((r.crashes, r.unfired, r.final_total), (0, 1, 100));
    }

    #[test]
    fn at_most_once_loses_and_the_checker_names_the_lost_writes() {
        let mut s = scenario::ddia(100, every(10), Some(45)).unwrap();
        s.consumer.guarantee = idem_core::consumer::Guarantee::AtMostOnce;
        let r = run(&s, OffsetStamped, &mut Quiet).unwrap();
        assert_eq!(
            (
                r.final_total,
                r.anomalies.lost_write,
                r.anomalies.first_lost
            ),
            (96, 4, Some(46))
        );
    }
}
