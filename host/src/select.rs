//! From command-line choices to core values: which scenario, which store, and a run
//! that collects what the renderers need.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use idem_core::consumer::{ConsumerConfig, Guarantee};
use idem_core::crash::{CrashPoint, parse_schedule};
use idem_core::log::{GeneratedLog, Log, Offset, VecLog};
use idem_core::scenario::{self, ProducerMode, SMALL_LOG, Scenario};
use idem_core::sim::{
    Action, DefaultApplied, Report, Run, SIM_LAYOUT, SimError, SimFlash, TraceStep,
};
use idem_core::store::{
    Atomic, MessageIdWindow, Naive, OffsetStamped, ProducerSeq, Store, TwoPhase,
};

use crate::events::{self, FileLog};
use crate::usage;

/// The message-id store's window capacity (ids kept in its one flash record).
pub const WINDOW_CAPACITY: usize = 32;

/// How many producers the producer-seq store remembers (in its one flash record).
pub const PRODUCER_CAPACITY: usize = 8;

/// The stores a run can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// total += amount.
    Naive,
    /// Apply only if the offset is newer than the stamp.
    Offset,
    /// Skip message ids seen in a bounded window.
    MessageId,
    /// Per producer, apply only if (epoch, sequence) is newer.
    ProducerSeq,
    /// Value and consumer position in one record, written at checkpoints.
    Atomic,
    /// Two-phase commit of value and position at each checkpoint.
    TwoPhase,
}

impl StoreKind {
    /// The store named `name` on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the core holds this store to the true total under replay.
    pub fn idempotent(self) -> bool {
        struct Ask;
        impl Job for Ask {
            type Out = bool;
            fn call<L: Log + Sync, S: HostStore>(
                self,
                _: &Scenario<L>,
                _: S,
            ) -> anyhow::Result<bool> {
                Ok(S::IDEMPOTENT)
            }
        }
        let probe = Loaded::Small(Box::new(scenario::payments(ProducerMode::Plain)));
        dispatch(&probe, self, WINDOW_CAPACITY, Ask).unwrap_or(true)
    }

    /// Every store, in table order.
    pub const ALL: [StoreKind; 6] = [
        Self::Naive,
        Self::Offset,
        Self::MessageId,
        Self::ProducerSeq,
        Self::Atomic,
        Self::TwoPhase,
    ];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Offset => "offset",
            Self::MessageId => "message-id",
            Self::ProducerSeq => "producer-seq",
            Self::Atomic => "atomic",
            Self::TwoPhase => "two-phase",
        }
    }
}

/// The built-in scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioKind {
    /// DDIA ch. 12: n events of +1, checkpoint every k, crash after one offset.
    Ddia,
    /// The lesson's worked example: 5, 3, 4, crash after offset 1, nothing committed.
    WorkedExample,
    /// The lesson's payments: p17 retried after a lost ack, then p18.
    Payments,
    /// An application resend of p17 (a new sequence), then p18.
    Resend,
    /// A stalled producer instance retries after a restarted one took over.
    Zombie,
    /// A retry that lands 40 messages after its original.
    LateRetry,
    /// One fact written to two views; a crash between the two writes (idem run only).
    DualWrite,
}

impl ScenarioKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ddia => "ddia",
            Self::WorkedExample => "worked-example",
            Self::Payments => "payments",
            Self::Resend => "resend",
            Self::Zombie => "zombie",
            Self::LateRetry => "late-retry",
            Self::DualWrite => "dual-write",
        }
    }

    /// The scenario named `name` on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        <Self as ValueEnum>::value_variants()
            .iter()
            .copied()
            .find(|k| k.name() == name)
    }
}

/// Scenario options shared by the commands that run one.
#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Number of +1 events (ddia only) [default: 100]
    #[arg(long)]
    pub events: Option<u64>,
    /// Commit the consumer position every K events [default: 10]
    #[arg(long, value_name = "K")]
    pub checkpoint_every: Option<u64>,
    /// Crash after the effect of this offset, before its checkpoint [ddia default: 49]
    #[arg(long, value_name = "OFFSET", conflicts_with = "no_crash")]
    pub crash_after: Option<Offset>,
    /// Run without a crash.
    #[arg(long)]
    pub no_crash: bool,
    /// Crash at these points, e.g. "crash@effect:49,crash@effect:45#2" (see README)
    #[arg(long, value_name = "POINTS", conflicts_with_all = ["crash_after", "no_crash"])]
    pub schedule: Option<String>,
    /// Read the log from a JSON Lines file instead of a built-in scenario.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// How many message ids the message-id store remembers (1 to 32)
    #[arg(long, value_name = "W", default_value_t = WINDOW_CAPACITY)]
    pub window: usize,
    /// Commit the position after the effects (at-least-once) or before (at-most-once)
    #[arg(long, value_enum, default_value = "at-least-once")]
    pub guarantee: GuaranteeArg,
    /// A plain producer, or an idempotent one (the log refuses retries, gaps, zombies)
    #[arg(long, value_enum, default_value = "plain")]
    pub producer: ProducerArg,
}

/// `--guarantee`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GuaranteeArg {
    /// Commit after the effects: a crash replays.
    AtLeastOnce,
    /// Commit before the effects: a crash loses.
    AtMostOnce,
}

/// `--producer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProducerArg {
    /// A plain producer: its retries land twice.
    Plain,
    /// Kafka's idempotent producer.
    Idempotent,
}

impl ProducerArg {
    /// The core's producer mode.
    pub fn mode(self) -> ProducerMode {
        match self {
            Self::Plain => ProducerMode::Plain,
            Self::Idempotent => ProducerMode::Idempotent,
        }
    }
}

impl Default for ScenarioArgs {
    /// The scenario's own defaults, with the full message-id window.
    fn default() -> Self {
        Self {
            events: None,
            checkpoint_every: None,
            crash_after: None,
            no_crash: false,
            schedule: None,
            log: None,
            window: WINDOW_CAPACITY,
            guarantee: GuaranteeArg::AtLeastOnce,
            producer: ProducerArg::Plain,
        }
    }
}

/// The workload options of the commands that run a built-in scenario without choosing
/// its crashes (`consume`, `chaos`, `sweep`).
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// Number of +1 events (ddia only) [default: 100]
    #[arg(long)]
    pub events: Option<u64>,
    /// Commit the consumer position every K events [default: 10]
    #[arg(long, value_name = "K")]
    pub checkpoint_every: Option<u64>,
    /// How many message ids the message-id store remembers (1 to 32)
    #[arg(long, value_name = "W", default_value_t = WINDOW_CAPACITY)]
    pub window: usize,
}

impl WorkloadArgs {
    /// The scenario options: these, and no crash.
    pub fn scenario_args(&self) -> ScenarioArgs {
        ScenarioArgs {
            events: self.events,
            checkpoint_every: self.checkpoint_every,
            no_crash: true,
            window: self.window,
            ..ScenarioArgs::default()
        }
    }

    /// The command-line flags that repeat these options where they differ from the
    /// defaults (for a child process, or a line that reruns a result).
    pub fn flags(&self) -> Vec<String> {
        let mut f = Vec::new();
        if let Some(n) = self.events {
            f.extend(["--events".to_string(), n.to_string()]);
        }
        if let Some(k) = self.checkpoint_every {
            f.extend(["--checkpoint-every".to_string(), k.to_string()]);
        }
        if self.window != WINDOW_CAPACITY {
            f.extend(["--window".to_string(), self.window.to_string()]);
        }
        f
    }
}

/// A scenario ready to run, whatever its log.
pub enum Loaded {
    /// A generated workload.
    Generated(Box<Scenario<GeneratedLog>>),
    /// A small built-in log.
    Small(Box<Scenario<VecLog<SMALL_LOG>>>),
    /// The user's log file.
    File(Box<Scenario<FileLog>>),
}

impl Loaded {
    /// The scenario's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Generated(s) => s.name,
            Self::Small(s) => s.name,
            Self::File(s) => s.name,
        }
    }

    /// Events in the log.
    pub fn events(&self) -> u64 {
        match self {
            Self::Generated(s) => s.log.len(),
            Self::Small(s) => s.log.len(),
            Self::File(s) => s.log.len(),
        }
    }

    /// Consumer settings.
    pub fn consumer(&self) -> ConsumerConfig {
        match self {
            Self::Generated(s) => s.consumer,
            Self::Small(s) => s.consumer,
            Self::File(s) => s.consumer,
        }
    }

    /// The crash plan.
    pub fn crashes(&self) -> &[CrashPoint] {
        match self {
            Self::Generated(s) => &s.crashes,
            Self::Small(s) => &s.crashes,
            Self::File(s) => &s.crashes,
        }
    }
}

/// Builds the scenario the user asked for; impossible choices are usage errors.
pub fn load(kind: Option<ScenarioKind>, a: &ScenarioArgs) -> anyhow::Result<Loaded> {
    if a.events.is_some() && kind != Some(ScenarioKind::Ddia) {
        return Err(usage("--events applies to the ddia scenario only"));
    }
    Ok(match (kind, &a.log) {
        (Some(_), Some(_)) => return Err(usage("give either a scenario or --log FILE, not both")),
        (None, None) => {
            return Err(usage(
                "name a scenario (ddia, worked-example, payments, resend, zombie, late-retry, dual-write) or give --log FILE",
            ));
        }
        (Some(ScenarioKind::Ddia), None) => {
            let events = a.events.unwrap_or(scenario::DDIA_EVENTS);
            let base = scenario::ddia(events, scenario::DDIA_CHECKPOINT_EVERY, None)
                .map_err(|e| usage(e.to_string()))?;
            let default = [CrashPoint::after_effect(scenario::DDIA_CRASH_AFTER)];
            Loaded::Generated(Box::new(configure(base, &default, a)?))
        }
        (Some(ScenarioKind::WorkedExample), None) => {
            let base = scenario::worked_example();
            let default = base.crashes.clone();
            Loaded::Small(Box::new(configure(base, &default, a)?))
        }
        (Some(kind), None) => {
            let mode = a.producer.mode();
            let base = match kind {
                ScenarioKind::Payments => scenario::payments(mode),
                ScenarioKind::Resend => scenario::resend(mode),
                ScenarioKind::Zombie => scenario::zombie(mode),
                ScenarioKind::LateRetry => scenario::late_retry(mode),
                ScenarioKind::DualWrite => scenario::dual_write(),
                ScenarioKind::Ddia | ScenarioKind::WorkedExample => scenario::worked_example(),
            };
            let default = base.crashes.clone();
            Loaded::Small(Box::new(configure(base, &default, a)?))
        }
        (None, Some(path)) => {
            let log = *events::load(path, a.producer.mode())?;
            let base = Scenario {
                name: "log",
                log,
                consumer: ConsumerConfig::every(10),
                crashes: Default::default(),
            };
            Loaded::File(Box::new(configure(base, &[], a)?))
        }
    })
}

/// Applies the user's checkpoint interval and crash choice to `base`; `default` is the
/// crash plan when the user chose none.
fn configure<L: Log>(
    base: Scenario<L>,
    default: &[CrashPoint],
    a: &ScenarioArgs,
) -> anyhow::Result<Scenario<L>> {
    let mut consumer = base.consumer;
    if let Some(k) = a.checkpoint_every {
        consumer.checkpoint_every = k;
    }
    consumer.guarantee = match a.guarantee {
        GuaranteeArg::AtLeastOnce => Guarantee::AtLeastOnce,
        GuaranteeArg::AtMostOnce => Guarantee::AtMostOnce,
    };
    let crashes = match (&a.schedule, a.no_crash, a.crash_after) {
        (Some(text), _, _) => {
            let mut points = [CrashPoint::after_effect(0); scenario::MAX_CRASHES];
            let n = parse_schedule(text, &mut points)
                .map_err(|e| usage(format!("--schedule {text:?}: {e}")))?;
            points[..n].to_vec()
        }
        (None, true, _) => Vec::new(),
        (None, false, Some(o)) => vec![CrashPoint::after_effect(o)],
        (None, false, None) => default.to_vec(),
    };
    Scenario::new(base.name, base.log, consumer)
        .and_then(|s| s.with_crashes(&crashes))
        .map_err(|e| usage(e.to_string()))
}

/// A finished run: the core's report and what the renderers list.
pub struct Outcome {
    /// The core's report.
    pub report: Report,
    /// Offsets delivered a second time, in order.
    pub redelivered: Vec<Offset>,
    /// Offsets the store skipped as duplicates, in order.
    pub skipped: Vec<Offset>,
    /// Messages (by first offset) never durably applied: lost writes.
    pub lost: Vec<Offset>,
    /// Every step, when asked for.
    pub trace: Option<Vec<TraceStep>>,
}

/// A store the host can run: any core store (each is cloneable and can cross threads).
pub trait HostStore: Store<State: Send + Sync> + Clone + Send + Sync {}

impl<S: Store<State: Send + Sync> + Clone + Send + Sync> HostStore for S {}

/// Work to do with a scenario and a store, whatever their types.
pub trait Job {
    /// What the work returns.
    type Out;
    /// Does the work.
    fn call<L: Log + Sync, S: HostStore>(
        self,
        scenario: &Scenario<L>,
        store: S,
    ) -> anyhow::Result<Self::Out>;
}

/// Calls `job` with `loaded`'s scenario and the store `kind` (with `window` for the
/// message-id store).
pub fn dispatch<J: Job>(
    loaded: &Loaded,
    kind: StoreKind,
    window: usize,
    job: J,
) -> anyhow::Result<J::Out> {
    fn with_store<J: Job, L: Log + Sync>(
        s: &Scenario<L>,
        kind: StoreKind,
        window: usize,
        job: J,
    ) -> anyhow::Result<J::Out> {
        match kind {
            StoreKind::Naive => job.call(s, Naive),
            StoreKind::Offset => job.call(s, OffsetStamped),
            StoreKind::MessageId => {
                let w = MessageIdWindow::<WINDOW_CAPACITY>::new(window)
                    .map_err(|e| usage(e.to_string()))?;
                job.call(s, w)
            }
            StoreKind::ProducerSeq => job.call(s, ProducerSeq::<PRODUCER_CAPACITY>),
            StoreKind::Atomic => job.call(s, Atomic),
            StoreKind::TwoPhase => job.call(s, TwoPhase),
        }
    }
    match loaded {
        Loaded::Generated(s) => with_store(s, kind, window, job),
        Loaded::Small(s) => with_store(s, kind, window, job),
        Loaded::File(s) => with_store(s, kind, window, job),
    }
}

/// Runs `loaded` with `store`; keeps the whole trace when `trace` is set.
pub fn run(
    loaded: &Loaded,
    store: StoreKind,
    window: usize,
    trace: bool,
) -> anyhow::Result<Outcome> {
    struct Simulate(bool);
    impl Job for Simulate {
        type Out = Outcome;
        fn call<L: Log + Sync, S: HostStore>(
            self,
            s: &Scenario<L>,
            store: S,
        ) -> anyhow::Result<Outcome> {
            run_with(s, store, self.0)
        }
    }
    dispatch(loaded, store, window, Simulate(trace))
}

fn run_with<L: Log, S: Store + Clone>(
    s: &Scenario<L>,
    store: S,
    keep: bool,
) -> anyhow::Result<Outcome> {
    let (mut redelivered, mut skipped, mut trace) = (Vec::new(), Vec::new(), Vec::new());
    let failed = |e: SimError| match e {
        SimError::Store(e) => usage(e.to_string()),
        e => anyhow::anyhow!("the simulated device failed: {e}"),
    };
    let mut r = Box::new(
        Run::new(SimFlash::new(), SIM_LAYOUT, s, store, DefaultApplied::new()).map_err(failed)?,
    );
    r.run_to_end(&mut |t: &TraceStep| {
        match (t.action, t.offset) {
            (Action::Deliver { redelivery: true }, Some(o)) => redelivered.push(o),
            (Action::Skip, Some(o)) => skipped.push(o),
            _ => {}
        }
        if keep {
            trace.push(*t);
        }
    })
    .map_err(failed)?;
    let mut lost = Vec::new();
    r.for_each_lost(|o| lost.push(o));
    let report: Report = r.finish();
    Ok(Outcome {
        report,
        redelivered,
        skipped,
        lost,
        trace: keep.then_some(trace),
    })
}
