//! The seed workloads and their faults.
//!
//! - [`ddia`]: `n` events of +1, a checkpoint every `k`, a crash after the effect of one
//!   offset (DDIA, chapter 12: 100 events, k = 10, crash after 49: naive 110, offset 100).
//! - [`worked_example`]: amounts 5, 3, 4; a crash after handling offset 1 with nothing
//!   committed (naive 20, idempotent 12).
//! - [`payments`]: p17 (5) whose ack is lost, so the producer retries it; p18 (3); no
//!   consumer crash (naive 13, offset-stamped 13, message-id 8).
//! - [`resend`]: the application sends p17 twice (a new sequence each time), then p18:
//!   only the message-id store is exact, even with an idempotent producer.
//! - [`zombie`]: a producer instance stalls with a send in flight, a restarted instance
//!   takes over and sends the same payment again, and the old send lands late.
//! - [`late_retry`]: a retry that lands 40 messages after its original: further back
//!   than a message-id window of 32 remembers.
//!
//! The last four take a [`ProducerMode`]: a non-idempotent producer, Kafka's idempotent
//! one (the broker appends a retried batch once and rejects gaps per producer id,
//! [`crate::producer::IdempotentLog`]), or its transactional one (each send a
//! transaction; a restart bumps the epoch, which aborts the old instance's open
//! transaction and fences that instance, [`crate::txn`]). Their logs are
//! [`TxnLog`]s, read at the consumer's isolation level.
//!
//! A [`Scenario`] is a log, consumer settings and a crash plan; [`crate::run`] runs it.

use crate::producer::{Appended, BatchHeader, IdempotentLog, Producer};
use crate::txn::TxnLog;
use idem_core::consumer::{CheckpointEvery, ConsumerConfig};
use idem_core::log::{MessageId, Offset};
use idem_payments::crash::{At, CrashPoint, MAX_CRASHES};
use idem_payments::{GaugeLog, GeneratedLog, LogError, Message, Truth};

/// Capacity of the logs the built-in small scenarios use.
pub const SMALL_LOG: usize = 64;

/// How many producers the built-in scenarios' idempotent log remembers.
pub const SCENARIO_PRODUCERS: usize = 4;

/// How the built-in scenarios produce their log, as Kafka's producer settings have it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProducerMode {
    /// A producer with `enable.idempotence=false` (librdkafka's default, and idem's own
    /// `kafka produce` without `--idempotent`): it writes no producer id, epoch or
    /// sequence (Kafka stores producer id -1), so the broker appends whatever it is
    /// sent, retries included.
    #[default]
    NonIdempotent,
    /// Kafka's idempotent producer (`enable.idempotence=true`, with `acks=all`): the
    /// default of the Java client since 3.0.1, 3.1.1 and 3.2.0, and of kafka-python 3.
    /// The library numbers each record under a producer id, and the broker appends a
    /// retried batch once. Each start of the application's producer gets a fresh
    /// producer id, so nothing fences the instance it replaced: a zombie's sends land.
    Idempotent,
    /// Kafka's transactional producer (`transactional.id`): as idempotent, and each
    /// send is a transaction, committed once it lands. A restart keeps the producer id
    /// and bumps its epoch: that aborts the open transaction of the instance it
    /// replaced, and the broker fences that instance from then on ([`crate::txn`]).
    Transactional,
    /// A producer that never retries (`retries=0`): at-most-once on the producer's side.
    /// A send that is lost is simply gone; the application meant it all the same.
    NoRetry,
}

/// The producer id the simulated broker gives the first producer it meets (the next
/// get the following ones), far from the application's own instance numbers.
pub const FIRST_PRODUCER_ID: u32 = 1000;

impl ProducerMode {
    /// The header the producer library writes on the batch of the application's
    /// message `m`: none without idempotence (Kafka stores producer id -1). With it,
    /// the idempotent producer gets a fresh producer id each time the application
    /// starts an instance (instance, epoch), and the transactional one one producer id
    /// per instance (its `transactional.id`), whose epoch is bumped at each start. Each
    /// send call is one batch, so the batch's sequence is the application's, from 0.
    /// `ids` holds the producer ids given so far, by what they were given for.
    pub fn header<const P: usize>(
        self,
        m: &Message,
        ids: &mut heapless::Vec<(u32, u16), P>,
    ) -> Result<Option<BatchHeader>, LogError> {
        let (key, epoch) = match self {
            Self::NonIdempotent | Self::NoRetry => return Ok(None),
            Self::Idempotent => ((m.producer, m.epoch), 0),
            // One producer id per transactional.id: keyed by the instance alone.
            Self::Transactional => ((m.producer, 0), m.epoch),
        };
        let index = match ids.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                ids.push(key)
                    .map_err(|_| LogError::Producers { capacity: P })?;
                ids.len() - 1
            }
        };
        Ok(Some(BatchHeader {
            producer_id: FIRST_PRODUCER_ID + index as u32,
            epoch,
            sequence: m.seq,
        }))
    }
}

/// A message's name as the lessons write it: `p17`, or a prefix and a number (`r0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// A name of its own.
    Is(&'static str),
    /// A prefix and a number.
    Numbered(&'static str, u32),
}

impl core::fmt::Display for Name {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Is(n) => f.write_str(n),
            Self::Numbered(p, i) => write!(f, "{p}{i}"),
        }
    }
}

/// Why the producer sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendKind {
    /// A send call of the application.
    Send,
    /// The same message again (same id, same sequence) because its ack was lost.
    Retry,
    /// A second send call for a message the application already sent (a new sequence).
    Resend,
    /// A send that stalled in flight and arrives late, from an instance since replaced.
    Stalled,
    /// A transactional send that landed, in a transaction its instance stalls before
    /// committing: the transaction stays open.
    Uncommitted,
    /// The stalled commit of an [`SendKind::Uncommitted`] send's transaction, arriving
    /// late from an instance since replaced. Nothing is appended.
    LateCommit,
    /// A send that was lost before the log, by a producer that never retries.
    Lost,
}

/// What the broker did with a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// It landed at this offset.
    At(Offset),
    /// A retry of a batch the broker already holds and remembers: answered with
    /// success and the original offset; nothing appended.
    Already(Offset),
    /// A retry older than the batches the broker remembers for that producer id:
    /// it fails the broker's sequence check (OUT_OF_ORDER_SEQUENCE_NUMBER); nothing
    /// appended.
    OlderDuplicate,
    /// A transaction's commit, accepted: its records are committed.
    Committed,
    /// Rejected: a newer epoch of that producer id exists (a zombie, fenced).
    Fenced {
        /// The epoch the broker knows.
        current: u16,
    },
    /// It never reached the log.
    Never,
}

/// One send of the producer side, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStep {
    /// The message's name.
    pub name: Name,
    /// Why it was sent.
    pub kind: SendKind,
    /// What the application sent (its own numbering in the payload, and the amount).
    pub message: Message,
    /// What the producer library wrote in the batch header: `None` without
    /// idempotence.
    pub header: Option<BatchHeader>,
    /// What the broker did with it.
    pub landed: Landed,
    /// Whether the send is in a transaction (a transactional producer's).
    pub transactional: bool,
    /// The first offset of another instance's open transaction that this send's
    /// instance aborted when it started (transactional only).
    pub aborted: Option<Offset>,
    /// The last stable offset after this send: a `read_committed` consumer reads no
    /// further ([`TxnLog::stable_end`]).
    pub stable_end: Offset,
}

/// The producer side of a small scenario, in order.
pub type ProducerSteps = heapless::Vec<ProducerStep, { 2 * SMALL_LOG }>;

/// A send for [`produce`]'s closure: why, and the named message.
type Land<'a> = dyn FnMut(SendKind, (Name, Message)) -> Result<Option<Offset>, LogError> + 'a;

/// `p`'s next message named `name`: its id is the name's (`p17`), with `amount`.
fn named(p: &mut Producer, name: &'static str, amount: i64) -> (Name, Message) {
    (
        Name::Is(name),
        p.message(
            MessageId::keyed(&idem_core::log::IdKey::PUBLIC, name.as_bytes()),
            amount,
        ),
    )
}

/// Sends with `send` into a log behind the broker's check when `mode` has one; what
/// landed, and what the producer did. A transactional send is its own transaction,
/// committed once it lands, except an [`SendKind::Uncommitted`] one; a transactional
/// instance's first send aborts the open transaction of the instance it replaced.
fn produce(
    mode: ProducerMode,
    send: impl Fn(&mut Land<'_>) -> Result<(), LogError>,
) -> Result<(TxnLog<SMALL_LOG>, ProducerSteps), LogError> {
    let mut steps = ProducerSteps::new();
    let mut log = IdempotentLog::<_, SCENARIO_PRODUCERS>::new(TxnLog::<SMALL_LOG>::new());
    let mut ids = heapless::Vec::<(u32, u16), SCENARIO_PRODUCERS>::new();
    let txn = mode == ProducerMode::Transactional;
    send(&mut |kind, (name, m)| {
        let header = mode.header(&m, &mut ids)?;
        let aborted = match header {
            Some(h) if txn && kind != SendKind::LateCommit => {
                log.inner_mut().abort_older(h.producer_id, h.epoch)
            }
            _ => None,
        };
        let landed = match (kind, header) {
            (SendKind::Lost, _) => Landed::Never,
            (SendKind::LateCommit, Some(h)) => {
                let known = log.producers().iter().find(|e| e.producer == h.producer_id);
                match known {
                    Some(e) if e.epoch > h.epoch => Landed::Fenced { current: e.epoch },
                    _ => {
                        log.inner_mut()
                            .end_transaction(h.producer_id, h.epoch, true);
                        Landed::Committed
                    }
                }
            }
            // No transaction to commit without a transactional producer.
            (SendKind::LateCommit, None) => Landed::Never,
            (_, None) => Landed::At(log.append_unchecked(m)?),
            (_, Some(h)) => match log.append_batch(h, m) {
                Ok(Appended::At(o)) => Landed::At(o),
                Ok(Appended::Already(o)) => Landed::Already(o),
                Ok(Appended::OlderDuplicate) => Landed::OlderDuplicate,
                Err(LogError::Fenced { current, .. }) => Landed::Fenced { current },
                Err(e) => return Err(e),
            },
        };
        if let (true, Some(h), Landed::At(o)) = (txn, header, landed) {
            let log = log.inner_mut();
            log.open(o, h.producer_id, h.epoch);
            if kind != SendKind::Uncommitted {
                log.end_transaction(h.producer_id, h.epoch, true);
            }
        }
        // As long as the log: a scenario that sends more than twice its capacity fails
        // on the log first.
        let _ = steps.push(ProducerStep {
            name,
            kind,
            message: m,
            header,
            landed,
            transactional: txn && header.is_some(),
            aborted,
            stable_end: log.inner_mut().stable_end(),
        });
        Ok(match landed {
            Landed::At(o) => Some(o),
            _ => None,
        })
    })?;
    Ok((log.into_inner(), steps))
}

/// A workload with its consumer settings and crash plan.
#[derive(Debug, Clone)]
pub struct Scenario<L> {
    /// The scenario's name, as on the command line.
    pub name: &'static str,
    /// The log as it landed (producer retries included).
    pub log: L,
    /// Checkpoint interval and guarantee.
    pub consumer: ConsumerConfig,
    /// Where the device crashes.
    pub crashes: heapless::Vec<CrashPoint, MAX_CRASHES>,
    /// Messages the application sent that never reached the log (a producer that does
    /// not retry lost them): part of the truth, never of any total.
    pub lost_sends: LostSends,
    /// What the producer side did, send by send (empty for generated logs and files).
    pub producer: ProducerSteps,
    /// The consumer's isolation level. Only a [`TxnLog`] holds records it changes, and
    /// it is read at its own level ([`TxnLog::with_isolation`]); the loader sets both.
    pub isolation: crate::txn::Isolation,
}

/// Sends lost before the log: their names and the sum of their amounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostSends {
    /// The messages' names, as the lessons call them.
    pub names: heapless::Vec<&'static str, 4>,
    /// Their amounts, summed.
    pub amount: i64,
}

/// An impossible scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScenarioError {
    /// A crash at an offset the log does not have.
    CrashPastLog {
        /// The offset asked for.
        offset: Offset,
        /// How many events the log has.
        len: u64,
    },
    /// More crash points than a plan holds.
    TooManyCrashes,
    /// The log did not fit.
    Log(LogError),
}

impl core::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::CrashPastLog { offset, len: 0 } => {
                write!(f, "cannot crash at offset {offset}: the log is empty")
            }
            Self::CrashPastLog { offset, len } => {
                write!(
                    f,
                    "cannot crash at offset {offset}: the log has offsets 0..={}",
                    len - 1
                )
            }
            Self::TooManyCrashes => write!(f, "a crash plan holds at most {MAX_CRASHES} points"),
            Self::Log(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for ScenarioError {}

impl<L: Truth> Scenario<L> {
    /// A scenario over `log` with no crash.
    pub fn new(name: &'static str, log: L, consumer: ConsumerConfig) -> Self {
        Self {
            name,
            log,
            consumer,
            crashes: heapless::Vec::new(),
            lost_sends: LostSends::default(),
            producer: ProducerSteps::new(),
            isolation: crate::txn::Isolation::ReadUncommitted,
        }
    }

    /// What the consumer should reach: what landed, each message once, plus what the
    /// application sent that never landed.
    pub fn true_total(&self) -> i64 {
        self.log.true_total().saturating_add(self.lost_sends.amount)
    }

    /// Replaces the crash plan; offset points must name offsets the log has.
    pub fn with_crashes(mut self, points: &[CrashPoint]) -> Result<Self, ScenarioError> {
        self.crashes.clear();
        for p in points {
            if let At::Deliver(o) | At::Effect(o) | At::Prepare(o) | At::Commit(o) = p.at
                && o >= self.log.len()
            {
                return Err(ScenarioError::CrashPastLog {
                    offset: o,
                    len: self.log.len(),
                });
            }
            self.crashes
                .push(*p)
                .map_err(|_| ScenarioError::TooManyCrashes)?;
        }
        Ok(self)
    }
}

/// The DDIA exercise: `events` events of +1, a checkpoint every `checkpoint_every`, a
/// crash after the effect of `crash_after` (none with `None`).
pub fn ddia(
    events: u64,
    checkpoint_every: CheckpointEvery,
    crash_after: Option<Offset>,
) -> Result<Scenario<GeneratedLog>, ScenarioError> {
    let s = Scenario::new(
        "ddia",
        GeneratedLog { events, amount: 1 },
        ConsumerConfig::every(checkpoint_every),
    );
    match crash_after {
        Some(o) => s.with_crashes(&[CrashPoint::after_effect(o)]),
        None => Ok(s),
    }
}

/// The DDIA boundary, a naturally idempotent operation: a gauge whose event at offset i
/// carries the reading i + 1, checkpoint every `checkpoint_every`, and optionally a crash
/// after one offset. The truth is the last reading, `events`.
pub fn gauge(
    events: u64,
    checkpoint_every: CheckpointEvery,
    crash_after: Option<Offset>,
) -> Result<Scenario<GaugeLog>, ScenarioError> {
    let s = Scenario::new(
        "gauge",
        GaugeLog { events, late: None },
        ConsumerConfig::every(checkpoint_every),
    );
    match crash_after {
        Some(o) => s.with_crashes(&[CrashPoint::after_effect(o)]),
        None => Ok(s),
    }
}

/// The gauge's 100 readings, then the reading 60 (offset 59's message) delivered again
/// after the last one, with no crash: `set` ends at 60, `max` stays at 100.
pub fn late_reading() -> Result<Scenario<GaugeLog>, ScenarioError> {
    Ok(Scenario::new(
        "late-reading",
        GaugeLog {
            events: idem_payments::ddia::EVENTS,
            late: Some(59),
        },
        ConsumerConfig::every(idem_payments::ddia::CHECKPOINT_EVERY),
    ))
}

/// The lesson's worked example: amounts 5, 3, 4, a crash after handling offset 1 with
/// nothing committed yet (checkpoint every 10 events).
pub fn worked_example() -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    let log = produce(ProducerMode::NonIdempotent, |land| {
        let mut producer = Producer::new(1, 0);
        for (name, amount) in [("w0", 5), ("w1", 3), ("w2", 4)] {
            land(SendKind::Send, named(&mut producer, name, amount))?;
        }
        Ok(())
    });
    small("worked-example", log)?.with_crashes(&[CrashPoint::after_effect(1)])
}

/// The lesson's payments: p17 (5) whose ack is lost and which the producer retries
/// (same id, same sequence, a new offset), then p18 (3). No consumer crash. With an
/// idempotent producer the retry never reaches the log. With a producer that never
/// retries, p17's send itself is lost: the log holds p18 only, 3 against the 8 the
/// application sent ([`Scenario::lost_sends`]).
pub fn payments(mode: ProducerMode) -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    use SendKind::{Lost, Retry, Send};
    let log = produce(mode, |land| {
        let mut p = Producer::new(1, 0);
        let p17 = named(&mut p, "p17", 5);
        if mode == ProducerMode::NoRetry {
            land(Lost, p17)?;
        } else {
            land(Send, p17)?;
            land(Retry, p17)?; // its ack was lost
        }
        land(Send, named(&mut p, "p18", 3))?;
        Ok(())
    });
    let mut s = small("payments", log)?;
    if mode == ProducerMode::NoRetry {
        // p17's send itself was lost, and this producer never retries.
        let _ = s.lost_sends.names.push("p17"); // one name in an empty list of four
        s.lost_sends.amount = 5;
    }
    Ok(s)
}

/// Two different payments of the same amount: p17 (5), p19 (5), then p18 (3), each sent
/// once and acknowledged. Nothing repeats, so every store ends at the true 13: a message-id
/// store skips a repeated id, never a repeated amount (the payments lesson's "change the
/// second p17 to p19").
pub fn same_amount(mode: ProducerMode) -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    let log = produce(mode, |land| {
        let mut p = Producer::new(1, 0);
        land(SendKind::Send, named(&mut p, "p17", 5))?;
        land(SendKind::Send, named(&mut p, "p19", 5))?;
        land(SendKind::Send, named(&mut p, "p18", 3))?;
        Ok(())
    });
    small("same-amount", log)
}

/// An application resend: the application sends p17 (5) again with a second send call
/// (a new sequence), then p18 (3). The idempotent producer cannot tell: both land.
pub fn resend(mode: ProducerMode) -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    use SendKind::{Resend, Send};
    let log = produce(mode, |land| {
        let mut p = Producer::new(1, 0);
        land(Send, named(&mut p, "p17", 5))?;
        land(Resend, named(&mut p, "p17", 5))?;
        land(Send, named(&mut p, "p18", 3))?;
        Ok(())
    });
    small("resend", log)
}

/// A zombie producer: instance A sends p41 (5), then p42 (3), whose send stalls in
/// flight. A restarted instance B takes over, sends p42 again (it cannot know whether
/// A's landed) and p43 (4). Then A's stalled p42 arrives. A plain log lands it (15); so
/// does an idempotent producer's log, since B came back under a fresh producer id and
/// A's send is the next in A's own sequence (15). A transactional producer's p42
/// is appended as it is sent, in a transaction A stalls before committing: B's start aborts it and
/// bumps the epoch, and A's late commit is fenced. The log holds p42 twice, once
/// aborted: a `read_uncommitted` consumer reads both (15), a `read_committed` one passes
/// over the aborted copy (12).
pub fn zombie(mode: ProducerMode) -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    use SendKind::{LateCommit, Resend, Send, Stalled, Uncommitted};
    let log = produce(mode, |land| {
        let mut a = Producer::new(7, 0);
        land(Send, named(&mut a, "p41", 5))?;
        let stalled = named(&mut a, "p42", 3);
        let txn = mode == ProducerMode::Transactional;
        if txn {
            // A transaction's send is appended as it is sent; what stalls is A's commit.
            land(Uncommitted, stalled)?;
        }
        let mut b = a.restarted();
        land(Resend, named(&mut b, "p42", 3))?;
        land(Send, named(&mut b, "p43", 4))?;
        land(if txn { LateCommit } else { Stalled }, stalled)?; // the zombie, late
        Ok(())
    });
    small("zombie", log)
}

/// A late retry: r0 .. r39 (1 each), and the retry of r0 (same id, same sequence) lands
/// after all of them, 40 messages after its original.
pub fn late_retry(mode: ProducerMode) -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    let log = produce(mode, |land| {
        let mut p = Producer::new(3, 0);
        let mut first = None;
        for i in 0..40u32 {
            let m = p.message(MessageId(0x1A7E_0000 + u64::from(i)), 1);
            first.get_or_insert(m);
            land(SendKind::Send, (Name::Numbered("r", i), m))?;
        }
        if let Some(m) = first
            && mode != ProducerMode::NoRetry
        {
            land(SendKind::Retry, (Name::Numbered("r", 0), m))?;
        }
        Ok(())
    });
    small("late-retry", log)
}

/// The dual-write workload: 30 payments (1 to 5 each) by 3 payers (the producer id is
/// the payer), a checkpoint every 10; see [`crate::dual`] for its sinks and its
/// default crash.
pub fn dual_write() -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    let log = produce(ProducerMode::NonIdempotent, |land| {
        let mut payers = [
            Producer::new(0, 0),
            Producer::new(1, 0),
            Producer::new(2, 0),
        ];
        for i in 0..30u32 {
            let m = payers[(i % 3) as usize]
                .message(MessageId(0xD0A1_0000 + u64::from(i)), i64::from(i % 5 + 1));
            land(SendKind::Send, (Name::Numbered("d", i), m))?;
        }
        Ok(())
    });
    small("dual-write", log)
}

/// Checkpoints of the small scenarios: every 10 events.
const SMALL_EVERY: CheckpointEvery = CheckpointEvery::new(10).unwrap();

/// A small scenario over `log` and the sends that made it: checkpoint every 10, no
/// crash.
fn small(
    name: &'static str,
    log: Result<(TxnLog<SMALL_LOG>, ProducerSteps), LogError>,
) -> Result<Scenario<TxnLog<SMALL_LOG>>, ScenarioError> {
    let (log, steps) = log.map_err(ScenarioError::Log)?;
    let mut s = Scenario::new(name, log, ConsumerConfig::every(SMALL_EVERY));
    s.producer = steps;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::Log;

    #[test]
    fn impossible_parameters_are_refused() {
        assert_eq!(
            ddia(100, SMALL_EVERY, Some(100)).unwrap_err(),
            ScenarioError::CrashPastLog {
                offset: 100,
                len: 100
            }
        );
        assert_eq!(
            ddia(0, SMALL_EVERY, Some(0)).unwrap_err(),
            ScenarioError::CrashPastLog { offset: 0, len: 0 }
        );
        let many = [CrashPoint::after_effect(1); MAX_CRASHES + 1];
        assert_eq!(
            ddia(10, CheckpointEvery::new(1).unwrap(), None)
                .unwrap()
                .with_crashes(&many)
                .unwrap_err(),
            ScenarioError::TooManyCrashes
        );
    }

    #[test]
    fn payments_log_holds_the_retry_at_a_new_offset() {
        let s = payments(ProducerMode::NonIdempotent).unwrap();
        assert_eq!(s.log.len(), 3);
        let (a, b) = (s.log.get(0).unwrap().payload, s.log.get(1).unwrap().payload);
        assert_eq!((a.id, a.seq), (b.id, b.seq));
        assert_eq!(s.log.true_total(), 8);
        assert_eq!(worked_example().unwrap().log.true_total(), 12);
        assert_eq!(
            payments(ProducerMode::Idempotent).unwrap().log.len(),
            2,
            "the retry never lands"
        );
    }

    #[test]
    fn resend_zombie_and_late_retry_logs() {
        for mode in [ProducerMode::NonIdempotent, ProducerMode::Idempotent] {
            let r = resend(mode).unwrap();
            assert_eq!(
                (r.log.len(), r.log.true_total()),
                (3, 8),
                "{mode:?}: a resend always lands"
            );
        }
        let z = zombie(ProducerMode::NonIdempotent).unwrap();
        assert_eq!((z.log.len(), z.log.true_total()), (4, 12));
        assert_eq!(
            zombie(ProducerMode::Idempotent).unwrap().log.len(),
            4,
            "a fresh producer id: the zombie's send lands"
        );
        let t = zombie(ProducerMode::Transactional).unwrap();
        assert_eq!(
            (t.log.len(), t.log.state(1), t.producer[1].stable_end),
            (4, Some(crate::txn::TxnState::Aborted), 1),
            "A's open transaction held p42 at offset 1 until B's start aborted it"
        );
        assert_eq!(
            (t.producer[2].aborted, t.producer[4].landed),
            (Some(1), Landed::Fenced { current: 1 }),
            "B's first send aborted it; A's late commit is fenced"
        );
        let l = late_retry(ProducerMode::NonIdempotent).unwrap();
        assert_eq!(
            (l.log.len(), l.log.true_total(), l.log.canonical(40)),
            (41, 40, 0)
        );
        assert_eq!(late_retry(ProducerMode::Idempotent).unwrap().log.len(), 40);
    }
}
