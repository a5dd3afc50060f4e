//! Kafka's transactions as a consumer sees them: isolation levels, the last stable
//! offset, and the records of aborted transactions.
//!
//! A transactional producer's records land in the log at once, inside an open
//! transaction, and are committed or aborted later, all together. A transaction is
//! aborted by its producer, by the next instance that starts with the same
//! `transactional.id` (its initialisation aborts the open transaction and bumps the
//! epoch, which fences the old instance), or by the transaction coordinator once
//! `transaction.timeout.ms` has passed (60 s by default in the Java client), at its next
//! check. idem keeps one epoch per instance, as Kafka's transaction version 1 does; with
//! transaction version 2 (KIP-890, Kafka 4.0) the epoch also goes up at every commit or
//! abort.
//!
//! What a consumer reads depends on its `isolation.level` ([`Isolation`]):
//! - `read_uncommitted` (the Java client's and kafka-python's default): every record,
//!   those of aborted and open transactions included, up to the end of the log;
//! - `read_committed` (librdkafka's default): it passes over the records of aborted
//!   transactions ([`Log::passed_over`]), and it reads only the offsets before the
//!   **last stable offset**, the first offset of a transaction still open, until that
//!   transaction commits or aborts.
//!
//! Where idem simplifies: Kafka ends a transaction with a control record (a commit or
//! abort marker) at an offset of its own, which no application ever receives; a
//! [`TxnLog`] keeps each record's transaction state beside the record instead, so its
//! offsets run without gaps.

use idem_core::log::{Log, Offset};
use idem_payments::{AppendLog, LogError, Message, Payment, Truth, VecLog};

/// A consumer's `isolation.level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Every record up to the end of the log, aborted ones included: the default of the
    /// Java client and of kafka-python.
    #[default]
    ReadUncommitted,
    /// Only committed and non-transactional records, up to the last stable offset:
    /// librdkafka's default.
    ReadCommitted,
}

impl Isolation {
    /// The level as Kafka's configuration writes it (`read_committed`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::ReadUncommitted => "read_uncommitted",
            Self::ReadCommitted => "read_committed",
        }
    }
}

/// Where a record stands in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// Written outside any transaction: every consumer reads it.
    None,
    /// In a transaction still open, of this producer id and epoch.
    Open {
        /// The producer id (one per `transactional.id`).
        producer_id: u32,
        /// The epoch of the instance that opened it.
        epoch: u16,
    },
    /// In a committed transaction.
    Committed,
    /// In an aborted transaction: a `read_committed` consumer passes over it.
    Aborted,
}

/// A log of up to `N` records with each record's transaction state, read at one
/// isolation level.
#[derive(Debug, Clone, Default)]
pub struct TxnLog<const N: usize> {
    log: VecLog<N>,
    states: heapless::Vec<TxnState, N>,
    isolation: Isolation,
}

impl<const N: usize> TxnLog<N> {
    /// An empty log, read at `read_uncommitted`.
    pub const fn new() -> Self {
        Self {
            log: VecLog::new(),
            states: heapless::Vec::new(),
            isolation: Isolation::ReadUncommitted,
        }
    }

    /// The same log read at `isolation`.
    pub fn with_isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// The level it is read at.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The transaction state of the record at `offset` (`None` past the end).
    pub fn state(&self, offset: Offset) -> Option<TxnState> {
        self.states.get(usize::try_from(offset).ok()?).copied()
    }

    /// Every record, whatever its state and the isolation level, in offset order.
    pub fn messages(&self) -> &[Message] {
        self.log.messages()
    }

    /// The last stable offset: the first offset of a transaction still open, or the
    /// end of the log when none is open. A `read_committed` consumer reads only the
    /// offsets before it.
    pub fn stable_end(&self) -> Offset {
        self.states
            .iter()
            .position(|s| matches!(s, TxnState::Open { .. }))
            .map_or(self.log.len(), |o| o as Offset)
    }

    /// Puts the record just appended at `offset` into the open transaction of
    /// `producer_id` at `epoch`.
    pub fn open(&mut self, offset: Offset, producer_id: u32, epoch: u16) {
        if let Some(s) = usize::try_from(offset)
            .ok()
            .and_then(|o| self.states.get_mut(o))
        {
            *s = TxnState::Open { producer_id, epoch };
        }
    }

    /// Ends the open transaction of `producer_id` at `epoch`: committed or aborted.
    /// Returns the first offset it held, if it held any.
    pub fn end_transaction(
        &mut self,
        producer_id: u32,
        epoch: u16,
        commit: bool,
    ) -> Option<Offset> {
        self.end_where(
            |p, e| p == producer_id && e == epoch,
            if commit {
                TxnState::Committed
            } else {
                TxnState::Aborted
            },
        )
    }

    /// What a new instance's initialisation does: aborts the open transaction of
    /// `producer_id` from any epoch older than `epoch`. Returns its first offset, if
    /// there was one.
    pub fn abort_older(&mut self, producer_id: u32, epoch: u16) -> Option<Offset> {
        self.end_where(|p, e| p == producer_id && e < epoch, TxnState::Aborted)
    }

    fn end_where(&mut self, matches: impl Fn(u32, u16) -> bool, to: TxnState) -> Option<Offset> {
        let mut first = None;
        for (o, s) in self.states.iter_mut().enumerate() {
            if let TxnState::Open { producer_id, epoch } = *s
                && matches(producer_id, epoch)
            {
                *s = to;
                first.get_or_insert(o as Offset);
            }
        }
        first
    }
}

impl<const N: usize> Log<Message> for TxnLog<N> {
    /// At `read_committed`, the last stable offset; otherwise every record.
    fn end(&self) -> Option<Offset> {
        Some(match self.isolation {
            Isolation::ReadUncommitted => Truth::len(&self.log),
            Isolation::ReadCommitted => self.stable_end(),
        })
    }

    fn get(&self, offset: Offset) -> Option<Payment> {
        if offset < Truth::len(self) {
            self.log.get(offset)
        } else {
            None
        }
    }

    fn passed_over(&self, offset: Offset) -> bool {
        self.isolation == Isolation::ReadCommitted && self.state(offset) == Some(TxnState::Aborted)
    }
}

impl<const N: usize> Truth for TxnLog<N> {}

impl<const N: usize> AppendLog for TxnLog<N> {
    /// Appends a record outside any transaction ([`TxnLog::open`] puts it in one).
    fn append(&mut self, message: Message) -> Result<Offset, LogError> {
        let offset = self.log.append(message)?;
        // The two buffers have the same capacity, and `log` just took one more.
        let _ = self.states.push(TxnState::None);
        Ok(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::MessageId;

    fn m(id: u64) -> Message {
        Message {
            id: MessageId(id),
            producer: 7,
            epoch: 0,
            seq: 0,
            amount: 1,
        }
    }

    #[test]
    fn read_committed_stops_at_an_open_transaction_and_passes_over_an_aborted_one() {
        let mut log = TxnLog::<8>::new();
        log.append(m(0)).unwrap();
        let o = log.append(m(1)).unwrap();
        log.open(o, 1000, 0);
        log.append(m(2)).unwrap(); // outside the transaction, after it
        let rc = log.clone().with_isolation(Isolation::ReadCommitted);
        assert_eq!((rc.len(), rc.get(1), log.len()), (1, None, 3));
        assert_eq!(log.abort_older(1000, 0), None, "not older: still open");
        assert_eq!(
            log.abort_older(1000, 1),
            Some(1),
            "a new instance aborts it"
        );
        let rc = log.clone().with_isolation(Isolation::ReadCommitted);
        assert_eq!(rc.len(), 3);
        assert!(rc.passed_over(1) && !rc.passed_over(2) && !log.passed_over(1));
        assert_eq!(
            log.end_transaction(1000, 0, true),
            None,
            "an ended transaction ends once"
        );
    }
}
