//! The command-line choices: which scenario or log, which store (or dual-write fix),
//! and the options of a run.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use idem_core::log::Offset;
use idem_payments::crash::CrashPoint;
use idem_sim::scenario::ProducerMode;
use idem_sim::txn::Isolation;

use idem_payments::registry::WINDOW;

/// The stores a run can use: the registry's ([`idem_payments::registry`]).
pub use idem_payments::registry::StoreKind;
use idem_payments::registry::{self, Family};

/// The built-in scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioKind {
    /// DDIA ch. 12: n events of +1, checkpoint every k, crash after one offset.
    Ddia,
    /// The lesson's worked example: 5, 3, 4, crash after offset 1, nothing committed.
    WorkedExample,
    /// The lesson's payments: p17 retried after a lost ack, then p18.
    Payments,
    /// Two different payments of one amount: p17 (5), p19 (5), p18 (3), nothing repeated.
    SameAmount,
    /// An application resend of p17 (a new sequence), then p18.
    Resend,
    /// A stalled producer instance's send lands after a restarted one took over and sent it again (with --producer transactional: its record landed before, in a transaction it never commits).
    Zombie,
    /// A retry that lands 40 messages after its original.
    LateRetry,
    /// One fact written to two views; a crash between the two writes (give --fix).
    DualWrite,
    /// A gauge: reading i + 1 at offset i (the ddia count as a value), crash after 49.
    Gauge,
    /// The gauge's readings, then the reading 60 delivered again after the last.
    LateReading,
    /// MQTT: 30 payments to a subscriber that resets once, after p14's record and
    /// before its acknowledgement (`idem run mqtt --qos 0|1|2 --session flash|ram`).
    Mqtt,
    /// A dosing pump: 20 doses of 5 ml, resets between a dose's record and its last
    /// millilitre (`idem run pump --way after|reassert|effects`).
    Pump,
}

impl ScenarioKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ddia => "ddia",
            Self::WorkedExample => "worked-example",
            Self::Payments => "payments",
            Self::SameAmount => "same-amount",
            Self::Resend => "resend",
            Self::Zombie => "zombie",
            Self::LateRetry => "late-retry",
            Self::DualWrite => "dual-write",
            Self::Gauge => "gauge",
            Self::LateReading => "late-reading",
            Self::Mqtt => "mqtt",
            Self::Pump => "pump",
        }
    }

    /// Whether `--events N` sets this scenario's length (a generated log); the others
    /// have a fixed log.
    pub fn takes_events(self) -> bool {
        matches!(self, Self::Ddia | Self::Gauge)
    }

    /// Whether this scenario's log holds a gauge's readings (for the gauges, set and
    /// max) rather than amounts (for the stores that sum).
    pub fn is_gauge(self) -> bool {
        matches!(self, Self::Gauge | Self::LateReading)
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
    /// Number of events (ddia and gauge only, at most 1048576) [default: 100]
    #[arg(long)]
    pub events: Option<u64>,
    /// Commit the consumer position every K events (at least 1) [default: 10]
    #[arg(long, value_name = "K")]
    pub checkpoint_every: Option<u64>,
    /// Crash after the effect of this offset, before its checkpoint [ddia default: 49]
    #[arg(long, value_name = "OFFSET", conflicts_with = "no_crash")]
    pub crash_after: Option<Offset>,
    /// Run without a crash.
    #[arg(long)]
    pub no_crash: bool,
    /// Crash at these points, e.g. "crash@effect:49,crash@effect:45#2" (see the book, docs/reference.md)
    #[arg(long, value_name = "POINTS", conflicts_with_all = ["crash_after", "no_crash"])]
    pub schedule: Option<String>,
    /// Read the log from a JSON Lines file instead of a built-in scenario.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// How many message ids the message-id store remembers (1 to 32)
    #[arg(long, value_name = "W", default_value_t = WINDOW)]
    pub window: usize,
    /// Commit the position after the effects (at-least-once) or before (at-most-once)
    #[arg(long, value_enum, default_value = "at-least-once")]
    pub guarantee: GuaranteeArg,
    /// The producer's settings: non-idempotent (enable.idempotence=false, librdkafka's default; alias plain), idempotent (the broker appends a retried batch once; a Java 3.0.1+ or kafka-python 3 producer at its defaults), transactional (each send a transaction; a restart aborts the replaced instance's open one and fences it), or no-retry
    #[arg(long, value_enum, default_value = "non-idempotent")]
    pub producer: ProducerArg,
    /// The consumer's isolation.level: read-uncommitted (the Java client's and kafka-python's default) reads the records of aborted transactions too; read-committed (librdkafka's default) passes over them and stops at the first open transaction. Only the transactional producer's built-in scenarios hold transactions: other logs (--log files too) read the same at both levels
    #[arg(long, value_enum, default_value = "read-uncommitted")]
    pub isolation: IsolationArg,
    /// The dual-write fix the run is for (set by the command; it picks the default crash).
    #[arg(skip)]
    pub fix: Option<FixArg>,
    /// The key of the message ids of a `--log` file's ids (set by the command: a device's
    /// or an image's own); `None` draws one for this run ([`crate::events::run_key`]).
    #[arg(skip)]
    pub id_key: Option<idem_core::log::IdKey>,
}

/// `--guarantee`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GuaranteeArg {
    /// Commit after the effects: a crash replays.
    AtLeastOnce,
    /// Commit before the effects: a crash loses.
    AtMostOnce,
}

/// `--producer`. A Java (3.0.1, 3.1.1, 3.2.0 and later) or kafka-python 3 producer left
/// at its defaults is `idempotent`; librdkafka's is `non-idempotent`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ProducerArg {
    /// enable.idempotence=false (librdkafka's default): no producer id, epoch or
    /// sequence on a batch, so a retry lands twice.
    #[value(alias = "plain")]
    #[default]
    NonIdempotent,
    /// Kafka's idempotent producer, the Java client's and kafka-python's default: the
    /// broker appends a retried batch once; a restart gets a fresh producer id, so a
    /// zombie instance is not fenced.
    Idempotent,
    /// Kafka's transactional producer: as idempotent, each send a transaction; a
    /// restart bumps the epoch of its transactional id, which aborts the open
    /// transaction of the instance it replaced and fences that instance.
    Transactional,
    /// A producer that never retries: a send that is lost is gone (at-most-once).
    NoRetry,
}

impl ProducerArg {
    /// The core's producer mode.
    pub fn mode(self) -> ProducerMode {
        match self {
            Self::NonIdempotent => ProducerMode::NonIdempotent,
            Self::Idempotent => ProducerMode::Idempotent,
            Self::Transactional => ProducerMode::Transactional,
            Self::NoRetry => ProducerMode::NoRetry,
        }
    }
}

/// `--isolation`: the consumer's `isolation.level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum IsolationArg {
    /// read_uncommitted, the Java client's and kafka-python's default: every record,
    /// aborted transactions included.
    #[default]
    ReadUncommitted,
    /// read_committed, librdkafka's default: passes over aborted transactions and
    /// stops at the first open one.
    ReadCommitted,
}

impl IsolationArg {
    /// The core's isolation level.
    pub fn level(self) -> Isolation {
        match self {
            Self::ReadUncommitted => Isolation::ReadUncommitted,
            Self::ReadCommitted => Isolation::ReadCommitted,
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
            window: WINDOW,
            guarantee: GuaranteeArg::AtLeastOnce,
            producer: ProducerArg::NonIdempotent,
            isolation: IsolationArg::ReadUncommitted,
            fix: None,
            id_key: None,
        }
    }
}

/// The workload options of the commands that run a built-in scenario without choosing
/// its crashes (`consume`, `chaos`, `sweep`).
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// Number of events (ddia and gauge only, at most 1048576) [default: 100]
    #[arg(long)]
    pub events: Option<u64>,
    /// Commit the consumer position every K events (at least 1) [default: 10]
    #[arg(long, value_name = "K")]
    pub checkpoint_every: Option<u64>,
    /// How many message ids the message-id store remembers (1 to 32)
    #[arg(long, value_name = "W", default_value_t = WINDOW)]
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
        if self.window != WINDOW {
            f.extend(["--window".to_string(), self.window.to_string()]);
        }
        f
    }
}

/// `--fix` of the dual-write scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FixArg {
    /// Two records, one after the other.
    None,
    /// One record for both views.
    Atomic,
    /// Only the index is written; the total is derived from it.
    Derive,
    /// Two records, the total stamped with its position: only the index diverges.
    Split,
}

impl FixArg {
    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Atomic => "atomic",
            Self::Derive => "derive",
            Self::Split => "split",
        }
    }

    /// Every fix, in table order.
    pub const ALL: [FixArg; 4] = [Self::None, Self::Atomic, Self::Derive, Self::Split];

    /// Where the dual-write scenario crashes by default: between the two writes of
    /// offset 25, or, for a fix that writes once, right after that write.
    pub fn default_crash(self) -> CrashPoint {
        let o = idem_sim::dual::DUAL_CRASH;
        match self {
            Self::None | Self::Split => CrashPoint::new(idem_payments::crash::At::Between(o)),
            Self::Atomic | Self::Derive => CrashPoint::after_effect(o),
        }
    }
}

/// What consumes a run: one store, or the sinks of a dual-write fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkChoice {
    /// A store.
    Store(StoreKind),
    /// The dual-write sinks of a fix.
    Dual(FixArg),
}

impl SinkChoice {
    /// The name in rerun lines and JSON: the store, or `dual-write --fix F`'s fix.
    pub fn flag(self) -> String {
        match self {
            Self::Store(k) => format!("--store {}", k.name()),
            Self::Dual(f) => format!("--fix {}", f.name()),
        }
    }

    /// The store's or the fix's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Store(k) => k.name(),
            Self::Dual(f) => f.name(),
        }
    }
}

impl From<StoreKind> for SinkChoice {
    fn from(kind: StoreKind) -> Self {
        Self::Store(kind)
    }
}

/// What consumes a run of `scenario`: dual-write takes a fix and no store, every other
/// scenario a store and no fix; a gauge's readings take a gauge (set, max) and a log of
/// amounts a store that sums. Anything else is a usage error in one sentence. Every
/// command that runs a scenario with a store asks here, so each refuses alike.
pub fn choose(
    scenario: Option<ScenarioKind>,
    store: Option<StoreKind>,
    fix: Option<FixArg>,
) -> anyhow::Result<SinkChoice> {
    use crate::error::usage;
    let dual = scenario == Some(ScenarioKind::DualWrite);
    match (dual, store, fix) {
        (true, Some(_), _) => Err(usage(
            "dual-write writes its own two views: give --fix, not --store",
        )),
        (true, None, None) => Err(usage(
            "dual-write needs --fix none, atomic, derive or split",
        )),
        (true, None, Some(fix)) => Ok(SinkChoice::Dual(fix)),
        (false, _, Some(_)) => Err(usage("--fix applies to the dual-write scenario only")),
        (false, None, None) => Err(usage(format!(
            "--store is required: {}",
            registry::list(StoreKind::of(Family::Sum), " or ")
        ))),
        (false, Some(store), None) => {
            check_pair(scenario, store)?;
            Ok(SinkChoice::Store(store))
        }
    }
}

/// Refuses a store that does not fit the scenario's log: a gauge store on amounts, a
/// summing store on a gauge's readings. A `--log` file (no scenario) takes any store.
pub fn check_pair(scenario: Option<ScenarioKind>, store: StoreKind) -> anyhow::Result<()> {
    use crate::error::usage;
    let Some(kind) = scenario else {
        return Ok(());
    };
    let gauge_store = StoreKind::GAUGES.contains(&store);
    if kind == ScenarioKind::Mqtt && !store.runs_on(registry::Source::Mqtt) {
        return Err(usage(format!(
            "mqtt takes the {} store: MQTT has no offsets",
            registry::list(StoreKind::on(registry::Source::Mqtt), " or ")
        )));
    }
    if kind == ScenarioKind::DualWrite {
        return Err(usage(
            "dual-write writes its own two views: give --fix, not --store",
        ));
    }
    if kind.is_gauge() && !gauge_store {
        return Err(usage(format!(
            "{} holds a gauge's readings, which the {} store would add up: give --store {}",
            kind.name(),
            store.name(),
            registry::list(StoreKind::of(Family::Gauge), " or ")
        )));
    }
    if !kind.is_gauge() && gauge_store {
        return Err(usage(format!(
            "the {} store keeps a gauge's newest reading, and {} holds amounts to add up: give --store {}",
            store.name(),
            kind.name(),
            registry::list(StoreKind::of(Family::Sum), " or ")
        )));
    }
    Ok(())
}

/// The stores a command runs for `name` (one store, or `all` or nothing for the
/// scenario's whole family), each checked with [`choose`].
pub fn choose_all(
    scenario: ScenarioKind,
    name: Option<&str>,
    fix: Option<FixArg>,
) -> anyhow::Result<Vec<SinkChoice>> {
    use crate::error::usage;
    let family: &[StoreKind] = if scenario.is_gauge() {
        &StoreKind::GAUGES
    } else {
        &StoreKind::ALL
    };
    let all = name.is_none_or(|n| n == "all");
    if all && scenario != ScenarioKind::DualWrite && fix.is_none() {
        return Ok(family.iter().copied().map(SinkChoice::Store).collect());
    }
    let store = match name {
        None => None,
        // `all` with a fix, or on dual-write: refused below as a store would be.
        Some("all") => Some(family[0]),
        Some(name) => Some(StoreKind::from_name(name).ok_or_else(|| {
            usage(format!(
                "unknown store {name:?}: one of {}, all",
                registry::list(
                    StoreKind::of(Family::Sum)
                        .chain(StoreKind::of(Family::Table))
                        .chain(StoreKind::of(Family::Gauge)),
                    ", "
                )
            ))
        })?),
    };
    Ok(vec![choose(Some(scenario), store, fix)?])
}
