//! Producers, their retries, and the broker-side check that makes a producer idempotent.
//!
//! Three writers put numbers on an event, and each number means something else:
//! - the broker writes the **offset**;
//! - the producer library writes a **producer id, epoch and sequence** in the header of
//!   each record batch ([`BatchHeader`]), and only with idempotence or transactions on
//!   (`enable.idempotence`, `transactional.id`); without them Kafka stores producer id
//!   -1. Only the broker checks them: a Kafka consumer cannot read them;
//! - the application writes a **message id**, or its own numbering of its sends
//!   ([`Producer`]: instance, epoch, sequence), in the payload, where a consumer reads it.
//!
//! Each [`Producer::message`] call is one application-level send: it takes the next
//! sequence number, from 0. When the ack of an append is lost, the producer cannot tell
//! whether the message landed and sends the same message again, same id and same
//! sequence; a log without the broker's check keeps both copies at two offsets. A second
//! send call for the same message id is an application resend and gets a new sequence.
//!
//! An [`IdempotentLog`] is Kafka's broker-side check of an idempotent producer. It
//! remembers, per producer id, the current epoch, the last sequence and the offsets of
//! the last [`REMEMBERED_BATCHES`] batches. A retry of one of those is answered with
//! success and its original offset, and nothing is appended; an older one fails the
//! sequence check (OUT_OF_ORDER_SEQUENCE_NUMBER), as a gap does; a gap and a batch from
//! an older epoch (a zombie instance that a restart replaced) are
//! rejected. It remembers a fixed number of producers: O(producers), never O(messages).
//! It cannot catch an application resend, which carries a new sequence.

use idem_core::log::{Log, MessageId, Offset};
use idem_payments::{AppendLog, LogError, Message, Payment, Truth};

/// What happened to the acknowledgement of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The producer received the ack.
    Received,
    /// The message landed but its ack was lost: the producer retries at once.
    Lost,
}

/// Where one send landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// What was sent.
    pub message: Message,
    /// Offset of the first copy.
    pub offset: Offset,
    /// Offset of the retry, when the first ack was lost and the log kept the retry.
    pub retry: Option<Offset>,
}

/// A producer instance: an id, an epoch and a sequence counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    id: u32,
    epoch: u16,
    next_seq: u32,
}

impl Producer {
    /// A producer instance; its first message gets sequence 0.
    pub const fn new(id: u32, epoch: u16) -> Self {
        Self {
            id,
            epoch,
            next_seq: 0,
        }
    }

    /// The instance that replaces this one after a restart: the same instance in the
    /// application's next epoch, numbering its sends from 0 again.
    pub const fn restarted(&self) -> Self {
        Self::new(self.id, self.epoch.wrapping_add(1))
    }

    /// The producer id.
    pub const fn id(&self) -> u32 {
        self.id
    }

    /// The epoch of this instance.
    pub const fn epoch(&self) -> u16 {
        self.epoch
    }

    /// The next message this producer would send: `id` and `amount` with the next
    /// sequence (taken now, as a send call does).
    pub fn message(&mut self, id: MessageId, amount: i64) -> Message {
        let message = Message {
            id,
            producer: self.id,
            epoch: self.epoch,
            seq: self.next_seq,
            amount,
        };
        self.next_seq += 1;
        message
    }

    /// Sends one message into a log without the broker's check. With [`Ack::Lost`] the
    /// producer retries it, and the log lands it twice.
    pub fn send<L: AppendLog>(
        &mut self,
        log: &mut L,
        id: MessageId,
        amount: i64,
        ack: Ack,
    ) -> Result<Sent, LogError> {
        let message = self.message(id, amount);
        let offset = log.append(message)?;
        let retry = match ack {
            Ack::Received => None,
            Ack::Lost => Self::retry(log, message)?,
        };
        Ok(Sent {
            message,
            offset,
            retry,
        })
    }

    /// Sends `message` again, as a producer does when its ack never came (possibly much
    /// later), into a log without the broker's check: it lands again.
    pub fn retry<L: AppendLog>(log: &mut L, message: Message) -> Result<Option<Offset>, LogError> {
        log.append(message).map(Some)
    }
}

/// What the producer library writes in a record batch's header when idempotence or
/// transactions are on: the broker checks it, and no consumer can read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// The producer id the broker assigned (`InitProducerId`).
    pub producer_id: u32,
    /// The producer epoch: a transactional producer's restart bumps it.
    pub epoch: u16,
    /// The batch's sequence for this producer id, epoch and partition, from 0.
    pub sequence: u32,
}

/// How many batches of each producer id the broker remembers, to answer a retry with
/// its original offset (Kafka keeps five, which is why an idempotent producer allows at
/// most five requests in flight per connection).
pub const REMEMBERED_BATCHES: usize = 5;

/// What the broker did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Appended at this offset.
    At(Offset),
    /// One of the last [`REMEMBERED_BATCHES`] batches of that producer, sent again (a
    /// retry): answered with success and the original offset; nothing appended.
    Already(Offset),
    /// A sequence older than the batches the broker remembers: it fails the sequence
    /// check (OUT_OF_ORDER_SEQUENCE_NUMBER, which the producer reports as an error);
    /// nothing appended.
    OlderDuplicate,
}

/// What an [`IdempotentLog`] remembers of one producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The producer id.
    pub producer: u32,
    /// Its current epoch.
    pub epoch: u16,
    /// The last sequence appended in that epoch.
    pub last_seq: u32,
    /// The offsets of the last batches, by sequence modulo [`REMEMBERED_BATCHES`].
    recent: [Offset; REMEMBERED_BATCHES],
}

impl ProducerEntry {
    /// The offset of the batch with sequence `seq` (at most `last_seq`), if the broker
    /// still remembers it.
    fn remembered(&self, seq: u32) -> Option<Offset> {
        let back = self.last_seq - seq;
        (back < REMEMBERED_BATCHES as u32).then(|| self.recent[seq as usize % REMEMBERED_BATCHES])
    }
}

/// A log behind Kafka's broker-side check of idempotent producers, for up to `P`
/// producer ids.
#[derive(Debug, Clone, Default)]
pub struct IdempotentLog<L, const P: usize> {
    inner: L,
    producers: heapless::Vec<ProducerEntry, P>,
}

impl<L, const P: usize> IdempotentLog<L, P> {
    /// Wraps `inner`; no producer is known yet.
    pub const fn new(inner: L) -> Self {
        Self {
            inner,
            producers: heapless::Vec::new(),
        }
    }

    /// The log underneath, with what landed.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// The log underneath, to change what the broker's check does not (a record's
    /// transaction state, [`crate::txn`]).
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// The producer ids it remembers.
    pub fn producers(&self) -> &[ProducerEntry] {
        &self.producers
    }
}

impl<L: Truth, const P: usize> Log<Message> for IdempotentLog<L, P> {
    fn end(&self) -> Option<Offset> {
        self.inner.end()
    }

    fn get(&self, offset: Offset) -> Option<Payment> {
        self.inner.get(offset)
    }
}

impl<L: Truth, const P: usize> Truth for IdempotentLog<L, P> {
    fn true_total(&self) -> i64 {
        self.inner.true_total()
    }

    fn canonical(&self, offset: Offset) -> Offset {
        self.inner.canonical(offset)
    }
}

impl<L: AppendLog, const P: usize> IdempotentLog<L, P> {
    /// Takes a batch without a producer id (a non-idempotent producer's: Kafka stores
    /// producer id -1): the broker checks nothing and appends it.
    pub fn append_unchecked(&mut self, m: Message) -> Result<Offset, LogError> {
        self.inner.append(m)
    }

    /// Takes one batch, `m` under `header`, as the broker does: a retry of a remembered
    /// batch is answered with its offset, an older duplicate is answered without one, and
    /// a gap, a zombie's epoch and one producer id too many are errors.
    pub fn append_batch(&mut self, header: BatchHeader, m: Message) -> Result<Appended, LogError> {
        let BatchHeader {
            producer_id,
            epoch,
            sequence,
        } = header;
        let found = self
            .producers
            .iter()
            .position(|e| e.producer == producer_id);
        let expected = match found.map(|i| self.producers[i]) {
            Some(e) if epoch < e.epoch => {
                return Err(LogError::Fenced {
                    producer: producer_id,
                    epoch,
                    current: e.epoch,
                });
            }
            Some(e) if epoch == e.epoch && sequence <= e.last_seq => {
                return Ok(e
                    .remembered(sequence)
                    .map_or(Appended::OlderDuplicate, Appended::Already));
            }
            Some(e) if epoch == e.epoch => e.last_seq + 1,
            // A new producer id, or a new epoch of a known one, starts at sequence 0.
            _ => 0,
        };
        if sequence != expected {
            return Err(LogError::OutOfSequence {
                producer: producer_id,
                expected,
                got: sequence,
            });
        }
        match found {
            Some(i) => {
                let offset = self.inner.append(m)?;
                let e = &mut self.producers[i];
                e.epoch = epoch;
                e.last_seq = sequence;
                e.recent[sequence as usize % REMEMBERED_BATCHES] = offset;
                Ok(Appended::At(offset))
            }
            None if self.producers.is_full() => Err(LogError::Producers { capacity: P }),
            None => {
                let offset = self.inner.append(m)?;
                let mut recent = [0; REMEMBERED_BATCHES];
                recent[0] = offset;
                // Cannot fail: checked not full just above.
                let _ = self.producers.push(ProducerEntry {
                    producer: producer_id,
                    epoch,
                    last_seq: sequence,
                    recent,
                });
                Ok(Appended::At(offset))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_payments::VecLog;

    fn id(k: &str) -> MessageId {
        MessageId::keyed(&idem_core::log::IdKey::PUBLIC, k.as_bytes())
    }

    fn header(producer_id: u32, epoch: u16, sequence: u32) -> BatchHeader {
        BatchHeader {
            producer_id,
            epoch,
            sequence,
        }
    }

    #[test]
    fn a_lost_ack_lands_the_same_message_twice_in_a_plain_log() {
        let mut log = VecLog::<4>::new();
        let mut p = Producer::new(1, 0);
        let sent = p.send(&mut log, id("p17"), 5, Ack::Lost).unwrap();
        assert_eq!((sent.offset, sent.retry), (0, Some(1)));
        p.send(&mut log, id("p18"), 3, Ack::Received).unwrap();
        assert_eq!(
            log.get(0).unwrap().payload,
            log.get(1).unwrap().payload,
            "same id, same sequence"
        );
        assert_eq!(log.get(0).unwrap().payload.seq, 0, "sequences start at 0");
        assert_eq!(log.get(2).unwrap().payload.seq, 1);
        assert_eq!(log.true_total(), 8);
    }

    #[test]
    fn the_broker_answers_a_retry_with_its_offset_and_takes_a_resend() {
        let mut log = IdempotentLog::<VecLog<4>, 2>::new(VecLog::new());
        let mut p = Producer::new(1, 0);
        let p17 = p.message(id("p17"), 5);
        assert_eq!(
            log.append_batch(header(1000, 0, 0), p17),
            Ok(Appended::At(0))
        );
        assert_eq!(
            log.append_batch(header(1000, 0, 0), p17),
            Ok(Appended::Already(0)),
            "the retry: success, the first offset, nothing appended"
        );
        let again = p.message(id("p17"), 5);
        assert_eq!(
            log.append_batch(header(1000, 0, 1), again),
            Ok(Appended::At(1)),
            "an application resend has a new sequence: it lands"
        );
        assert_eq!(log.len(), 2);
    }

    #[test]
    fn the_broker_remembers_five_batches_of_each_producer() {
        let mut log = IdempotentLog::<VecLog<8>, 1>::new(VecLog::new());
        let mut p = Producer::new(1, 0);
        let sent: Vec<Message> = (0..7).map(|_| p.message(id("r"), 1)).collect();
        for (s, m) in sent.iter().enumerate() {
            let s = s as u32;
            assert_eq!(
                log.append_batch(header(1000, 0, s), *m),
                Ok(Appended::At(u64::from(s)))
            );
        }
        // Sequences 2..=6 are the last five.
        assert_eq!(
            log.append_batch(header(1000, 0, 2), sent[2]),
            Ok(Appended::Already(2))
        );
        assert_eq!(
            log.append_batch(header(1000, 0, 1), sent[1]),
            Ok(Appended::OlderDuplicate)
        );
        assert_eq!(log.len(), 7);
    }

    #[test]
    fn gaps_zombies_and_too_many_producers_are_rejected() {
        let mut log = IdempotentLog::<VecLog<8>, 2>::new(VecLog::new());
        let m = Message {
            id: MessageId(1),
            producer: 1,
            epoch: 0,
            seq: 0,
            amount: 1,
        };
        assert_eq!(
            log.append_batch(header(1, 0, 1), m),
            Err(LogError::OutOfSequence {
                producer: 1,
                expected: 0,
                got: 1
            }),
            "a new producer id starts at sequence 0"
        );
        log.append_batch(header(1, 0, 0), m).unwrap();
        assert_eq!(
            log.append_batch(header(1, 0, 2), m),
            Err(LogError::OutOfSequence {
                producer: 1,
                expected: 1,
                got: 2
            })
        );
        log.append_batch(header(1, 1, 0), m).unwrap();
        assert_eq!(
            log.append_batch(header(1, 0, 1), m),
            Err(LogError::Fenced {
                producer: 1,
                epoch: 0,
                current: 1
            })
        );
        log.append_batch(header(2, 0, 0), m).unwrap();
        assert_eq!(
            log.append_batch(header(3, 0, 0), m),
            Err(LogError::Producers { capacity: 2 })
        );
        assert_eq!(log.len(), 3);
        assert_eq!(
            (log.producers()[0].epoch, log.producers()[0].last_seq),
            (1, 0)
        );
    }

    #[test]
    fn a_retry_into_a_full_log_is_an_error() {
        let mut log = VecLog::<1>::new();
        let mut p = Producer::new(1, 0);
        assert_eq!(
            p.send(&mut log, MessageId(1), 1, Ack::Lost),
            Err(LogError::Full { capacity: 1 })
        );
    }
}
