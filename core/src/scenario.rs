//! The seed workloads and their faults.
//!
//! - [`ddia`]: `n` events of +1, a checkpoint every `k`, a crash after the effect of one
//!   offset (DDIA, chapter 12: 100 events, k = 10, crash after 49: naive 110, offset 100).
//! - [`worked_example`]: amounts 5, 3, 4; a crash after handling offset 1 with nothing
//!   committed (naive 20, idempotent 12).
//! - [`payments`]: p17 (5) whose ack is lost, so the producer retries it; p18 (3); no
//!   consumer crash (naive 13, offset-stamped 13, message-id 8).
//!
//! A [`Scenario`] is a log, consumer settings and a crash plan; [`crate::sim`] runs it.

use crate::consumer::ConsumerConfig;
use crate::crash::{At, CrashPoint};
use crate::log::{GeneratedLog, Log, LogError, MessageId, Offset, VecLog};
use crate::producer::{Ack, Producer};

/// The most crash points one plan holds.
pub const MAX_CRASHES: usize = 8;

/// The DDIA exercise's number of events.
pub const DDIA_EVENTS: u64 = 100;
/// The DDIA exercise's checkpoint interval.
pub const DDIA_CHECKPOINT_EVERY: u64 = 10;
/// The DDIA exercise's crash: after the effect of this offset.
pub const DDIA_CRASH_AFTER: Offset = 49;

/// Capacity of the logs the built-in small scenarios use.
pub const SMALL_LOG: usize = 8;

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
}

/// An impossible scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScenarioError {
    /// A checkpoint interval of 0.
    CheckpointEveryZero,
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
            Self::CheckpointEveryZero => {
                f.write_str("the checkpoint interval must be at least 1 event")
            }
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

impl<L: Log> Scenario<L> {
    /// A scenario over `log` with no crash.
    pub fn new(
        name: &'static str,
        log: L,
        consumer: ConsumerConfig,
    ) -> Result<Self, ScenarioError> {
        if consumer.checkpoint_every == 0 {
            return Err(ScenarioError::CheckpointEveryZero);
        }
        Ok(Self {
            name,
            log,
            consumer,
            crashes: heapless::Vec::new(),
        })
    }

    /// Replaces the crash plan; offset points must name offsets the log has.
    pub fn with_crashes(mut self, points: &[CrashPoint]) -> Result<Self, ScenarioError> {
        self.crashes.clear();
        for p in points {
            if let At::Deliver(o) | At::Effect(o) | At::Commit(o) = p.at
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
    checkpoint_every: u64,
    crash_after: Option<Offset>,
) -> Result<Scenario<GeneratedLog>, ScenarioError> {
    let s = Scenario::new(
        "ddia",
        GeneratedLog { events, amount: 1 },
        ConsumerConfig::every(checkpoint_every),
    )?;
    match crash_after {
        Some(o) => s.with_crashes(&[CrashPoint::after_effect(o)]),
        None => Ok(s),
    }
}

/// The lesson's worked example: amounts 5, 3, 4, a crash after handling offset 1 with
/// nothing committed yet (checkpoint every 10 events).
pub fn worked_example() -> Scenario<VecLog<SMALL_LOG>> {
    let mut log = VecLog::new();
    let mut producer = Producer::new(1, 0);
    for (id, amount) in [(b"w0", 5), (b"w1", 3), (b"w2", 4)] {
        // Three sends into an empty log of capacity 8 cannot fail.
        let _ = producer.send(&mut log, MessageId::from_key(id), amount, Ack::Received);
    }
    let mut crashes = heapless::Vec::new();
    let _ = crashes.push(CrashPoint::after_effect(1));
    Scenario {
        name: "worked-example",
        log,
        consumer: ConsumerConfig::every(10),
        crashes,
    }
}

/// The lesson's payments: p17 (5) whose ack is lost and which the producer retries
/// (same id, same sequence, a new offset), then p18 (3). No consumer crash.
pub fn payments() -> Scenario<VecLog<SMALL_LOG>> {
    let mut log = VecLog::new();
    let mut producer = Producer::new(1, 0);
    // Three appends into an empty log of capacity 8 cannot fail.
    let _ = producer.send(&mut log, MessageId::from_key(b"p17"), 5, Ack::Lost);
    let _ = producer.send(&mut log, MessageId::from_key(b"p18"), 3, Ack::Received);
    Scenario {
        name: "payments",
        log,
        consumer: ConsumerConfig::every(10),
        crashes: heapless::Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_parameters_are_refused() {
        assert_eq!(
            ddia(100, 0, None).unwrap_err(),
            ScenarioError::CheckpointEveryZero
        );
        assert_eq!(
            ddia(100, 10, Some(100)).unwrap_err(),
            ScenarioError::CrashPastLog {
                offset: 100,
                len: 100
            }
        );
        assert_eq!(
            ddia(0, 10, Some(0)).unwrap_err(),
            ScenarioError::CrashPastLog { offset: 0, len: 0 }
        );
        let many = [CrashPoint::after_effect(1); MAX_CRASHES + 1];
        assert_eq!(
            ddia(10, 1, None).unwrap().with_crashes(&many).unwrap_err(),
            ScenarioError::TooManyCrashes
        );
    }

    #[test]
    fn payments_log_holds_the_retry_at_a_new_offset() {
        let s = payments();
        assert_eq!(s.log.len(), 3);
        let (a, b) = (s.log.get(0).unwrap().message, s.log.get(1).unwrap().message);
        assert_eq!((a.id, a.seq), (b.id, b.seq));
        assert_eq!(s.log.true_total(), 8);
        assert_eq!(worked_example().log.true_total(), 12);
    }
}
