//! The report of one run, as `idem run --json` prints it and the playground reads it:
//! one serde type for both, so the page and the CLI cannot drift.

use idem_core::consumer::Guarantee;
use idem_core::log::Offset;
use idem_core::persist::Resolution;
use idem_sim::check::Anomalies;
use idem_sim::cost::FlashCost;
use idem_sim::run::{FlashUse, TraceStep};
use idem_sim::scenario::{Landed, ProducerStep, SendKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::render::{action_name, message_name, verdict_name};
use crate::select::{Loaded, Outcome, SinkChoice};

/// One run: its configuration, the totals, the checker's verdict and anomalies, flash
/// use, and, when asked for, every step and the producer's sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The scenario's name (`log` for a file).
    pub scenario: String,
    /// The store, for a run with a store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The dual-write fix, for a dual-write run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Events in the log.
    pub events: u64,
    /// The checkpoint interval K.
    pub checkpoint_every: u64,
    /// The crash plan, in idem's grammar (`crash@effect:49`).
    pub crashes: Vec<String>,
    /// The sum of the log's amounts: the truth the verdict is graded against.
    pub true_total: i64,
    /// The durable total at the end.
    pub final_total: i64,
    /// `exact`, `over`, `under` or `diverged`.
    pub verdict: String,
    /// The last offset the durable position covered at the first crash.
    pub committed_at_crash: Option<Offset>,
    /// Where the restart after the first crash resumed.
    pub resume_at: Option<Offset>,
    /// Offsets delivered a second time, in order.
    pub redelivered: Vec<Offset>,
    /// Offsets the store skipped as duplicates, in order.
    pub skipped: Vec<Offset>,
    /// Messages (by first offset) never durably applied.
    pub lost: Vec<Offset>,
    /// Sends that never reached the log.
    pub lost_sends: Vec<String>,
    /// `at-least-once` or `at-most-once`.
    pub guarantee: String,
    /// The consumer's isolation level: `read_uncommitted` or `read_committed`.
    pub isolation: String,
    /// Offsets the consumer passed over: records of aborted transactions, under
    /// `read_committed`.
    pub passed: Vec<Offset>,
    /// Message ids the message-id store's window forgot.
    pub evicted: u64,
    /// The checker's anomalies, by their Jepsen names.
    pub anomalies: AnomalyCounts,
    /// Deliveries, replays included.
    pub delivered: u64,
    /// Effects applied.
    pub applied: u64,
    /// Flash use, in all and per event.
    pub flash: FlashReport,
    /// What recovery did with a prepared two-phase record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryReport>,
    /// Dual-write: the total view at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// Dual-write: the index view's sum at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_sum: Option<i64>,
    /// Dual-write: whether the two views disagree at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged: Option<bool>,
    /// Dual-write: the two views when a recovery found them disagreeing (`null` when none
    /// did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged_at_recovery: Option<Option<Views>>,
    /// Every step, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<TraceEntry>>,
    /// The producer's sends, for a scenario that names its messages (with the trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<Vec<SendEntry>>,
}

/// The checker's anomaly counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnomalyCounts {
    /// Messages whose effect was made durable more than once.
    pub duplicate: u64,
    /// Messages never durably applied.
    #[serde(rename = "lost-write")]
    pub lost_write: u64,
    /// Times the durable position moved backwards.
    pub nonmonotonic: u64,
    /// Recoveries that found two views of one fact disagreeing.
    pub diverged: u64,
}

impl From<&Anomalies> for AnomalyCounts {
    fn from(a: &Anomalies) -> Self {
        Self {
            duplicate: a.duplicate,
            lost_write: a.lost_write,
            nonmonotonic: a.nonmonotonic,
            diverged: a.diverged,
        }
    }
}

/// Flash use: in all, and per log event on an nRF51 (`idem_sim::cost`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlashReport {
    /// Journal records appended.
    pub writes: u64,
    /// Pages erased.
    pub erases: u64,
    /// Bytes programmed.
    pub bytes_written: u64,
    /// Bytes programmed per log event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_event: Option<f64>,
    /// Page erases per log event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erases_per_event: Option<f64>,
    /// Modelled nRF51 flash time per log event, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nrf51_us_per_event: Option<f64>,
    /// Events a 2-page partition lasts at 20,000 erase cycles per page (`null` when the
    /// run erased no page, or the events are not known).
    #[serde(default)]
    pub lifetime_events: Option<u64>,
}

impl FlashReport {
    /// `f`, and per event when the log's `events` are known (rounded to 3 decimals).
    pub fn new(f: &FlashUse, events: Option<u64>) -> Self {
        let cost = events.and_then(|n| FlashCost::of(f, n));
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        Self {
            writes: f.writes,
            erases: f.erases,
            bytes_written: f.bytes_written,
            bytes_per_event: cost.map(|c| round(c.bytes_per_event)),
            erases_per_event: cost.map(|c| round(c.erases_per_event)),
            nrf51_us_per_event: cost.map(|c| round(c.nrf51_us_per_event)),
            lifetime_events: cost.and_then(|c| c.lifetime_events),
        }
    }
}

/// What recovery did with a prepared two-phase record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// `rolled-forward` or `rolled-back`.
    pub prepared_record: String,
    /// Where the consumer resumed.
    pub resume_at: Offset,
}

/// Two views of one fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Views {
    /// The total view.
    pub total: i64,
    /// The index view's sum.
    pub index_sum: i64,
}

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// The step's number.
    pub step: u64,
    /// The offset it handled, if any.
    pub offset: Option<Offset>,
    /// The message at that offset, for a scenario that names its messages.
    pub message: Option<String>,
    /// `deliver`, `redeliver`, `apply`, `skip`, `commit`, `recover`, or the crash point.
    pub action: String,
    /// The durable total after the step.
    pub total: i64,
    /// Where a restart after the step would resume.
    pub resume_at: Offset,
}

impl TraceEntry {
    /// The entry of `t`; `producer` names the messages.
    pub fn new(t: &TraceStep, producer: &[ProducerStep]) -> Self {
        Self {
            step: t.index,
            offset: t.offset,
            message: t.offset.and_then(|o| message_name(producer, o)),
            action: action_name(t.action),
            total: t.total,
            resume_at: t.resume_at,
        }
    }
}

/// One send of the producer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendEntry {
    /// The message's name.
    pub message: String,
    /// `send`, `retry`, `resend`, `stalled`, `lost`, `uncommitted` (a transactional
    /// send whose instance stalls before committing) or `late-commit` (that commit,
    /// arriving late).
    pub kind: String,
    /// The application's own numbering in the payload: the sending instance.
    pub instance: u32,
    /// The application's epoch of that instance.
    pub epoch: u16,
    /// The application's sequence number of the send, from 0.
    pub seq: u32,
    /// The amount.
    pub amount: i64,
    /// What the producer library wrote in the batch header; `None` without idempotence
    /// (Kafka stores producer id -1).
    pub batch: Option<BatchEntry>,
    /// `landed`, `already-appended` (a retry the broker answered with its first offset),
    /// `older-duplicate` (a retry older than the broker's memory, rejected as out of
    /// sequence), `committed` (a late commit, accepted), `fenced` or `lost`.
    pub landed: String,
    /// Where it landed, or where the broker said a retry already was.
    pub offset: Option<Offset>,
    /// The first offset of the open transaction this send's instance aborted when it
    /// started (transactional producer only).
    pub aborted: Option<Offset>,
    /// The last stable offset after this send: a `read_committed` consumer reads no
    /// further.
    pub stable_end: Offset,
}

/// A record batch's header, as the producer library wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEntry {
    /// The producer id.
    pub producer_id: u32,
    /// The producer epoch.
    pub epoch: u16,
    /// The batch's sequence, from 0.
    pub sequence: u32,
}

impl SendEntry {
    /// The entry of one send.
    pub fn new(p: &ProducerStep) -> Self {
        let (landed, offset) = match p.landed {
            Landed::At(o) => ("landed", Some(o)),
            Landed::Already(o) => ("already-appended", Some(o)),
            Landed::OlderDuplicate => ("older-duplicate", None),
            Landed::Committed => ("committed", None),
            Landed::Fenced { .. } => ("fenced", None),
            Landed::Never => ("lost", None),
        };
        Self {
            message: p.name.to_string(),
            kind: match p.kind {
                SendKind::Send => "send",
                SendKind::Retry => "retry",
                SendKind::Resend => "resend",
                SendKind::Stalled => "stalled",
                SendKind::Lost => "lost",
                SendKind::Uncommitted => "uncommitted",
                SendKind::LateCommit => "late-commit",
            }
            .into(),
            instance: p.message.producer,
            epoch: p.message.epoch,
            seq: p.message.seq,
            amount: p.message.amount,
            batch: p.header.map(|h| BatchEntry {
                producer_id: h.producer_id,
                epoch: h.epoch,
                sequence: h.sequence,
            }),
            landed: landed.into(),
            offset,
            aborted: p.aborted,
            stable_end: p.stable_end,
        }
    }
}

/// The checker's anomalies as JSON, by their Jepsen names.
pub fn anomalies_json(a: &Anomalies) -> Value {
    serde_json::to_value(AnomalyCounts::from(a)).unwrap_or(Value::Null)
}

/// The JSON object of `idem run --json`: the shared [`RunReport`].
pub fn run_json(loaded: &Loaded, choice: SinkChoice, o: &Outcome) -> Value {
    serde_json::to_value(RunReport::new(loaded, choice, o)).unwrap_or(Value::Null)
}

/// A consumer guarantee as the CLI spells it: `at-least-once` or `at-most-once`.
pub fn guarantee_name(g: Guarantee) -> &'static str {
    match g {
        Guarantee::AtLeastOnce => "at-least-once",
        Guarantee::AtMostOnce => "at-most-once",
    }
}

impl RunReport {
    /// The report of a finished run of `loaded` with `choice`.
    pub fn new(loaded: &Loaded, choice: SinkChoice, o: &Outcome) -> Self {
        let r = &o.report;
        let dual = matches!(choice, SinkChoice::Dual(_));
        let producer = loaded.producer();
        Self {
            scenario: loaded.name().to_string(),
            store: match choice {
                SinkChoice::Store(k) => Some(k.name().to_string()),
                SinkChoice::Dual(_) => None,
            },
            fix: match choice {
                SinkChoice::Dual(f) => Some(f.name().to_string()),
                SinkChoice::Store(_) => None,
            },
            events: loaded.events(),
            checkpoint_every: loaded.consumer().checkpoint_every.get(),
            crashes: loaded.crashes().iter().map(ToString::to_string).collect(),
            true_total: r.true_total,
            final_total: r.final_total,
            verdict: verdict_name(r).to_string(),
            committed_at_crash: r.committed_at_crash(),
            resume_at: r.resume_at_crash,
            redelivered: o.redelivered.clone(),
            skipped: o.skipped.clone(),
            lost: o.lost.clone(),
            lost_sends: loaded
                .lost_sends()
                .names
                .iter()
                .map(|n| n.to_string())
                .collect(),
            guarantee: guarantee_name(loaded.consumer().guarantee).to_string(),
            isolation: loaded.isolation().name().to_string(),
            passed: o.passed.clone(),
            evicted: r.evicted,
            anomalies: (&r.anomalies).into(),
            delivered: r.delivered,
            applied: r.applied,
            flash: FlashReport::new(&r.flash, Some(loaded.events())),
            recovery: r.resolution.map(|res| match res {
                Resolution::RolledForward { next } => RecoveryReport {
                    prepared_record: "rolled-forward".into(),
                    resume_at: next,
                },
                Resolution::RolledBack { next } => RecoveryReport {
                    prepared_record: "rolled-back".into(),
                    resume_at: next,
                },
            }),
            total: r.views.filter(|_| dual).map(|(t, _)| t),
            index_sum: r.views.filter(|_| dual).map(|(_, i)| i),
            diverged: r.views.filter(|_| dual).map(|(t, i)| t != i),
            diverged_at_recovery: dual.then(|| {
                r.diverged_at_recovery
                    .map(|(total, index_sum)| Views { total, index_sum })
            }),
            trace: o
                .trace
                .as_ref()
                .map(|t| t.iter().map(|t| TraceEntry::new(t, producer)).collect()),
            producer: (o.trace.is_some() && !producer.is_empty())
                .then(|| producer.iter().map(SendEntry::new).collect()),
        }
    }
}
