//! Producers, their retries, and the log-side check that makes a producer idempotent.
//!
//! Each [`Producer::send`] call is one application-level send: it takes the next
//! sequence number. When the ack of an append is lost, the producer cannot tell
//! whether the message landed and sends the same message again, same id and same
//! sequence; a plain log keeps both copies at two offsets. A second `send` call for the
//! same message id is an application resend and gets a new sequence.
//!
//! An [`IdempotentLog`] is Kafka's idempotent producer seen from the broker: it remembers,
//! per producer, the current epoch and the last sequence, and refuses a repeated sequence
//! (a retry: the producer takes the refusal as its ack), a gap, and any send from an older
//! epoch (a zombie instance that a restart replaced). It remembers a fixed number of
//! producers: O(producers), never O(messages). It cannot catch an application resend,
//! which carries a new sequence.

use crate::log::{AppendLog, Event, Log, LogError, Message, MessageId, Offset};

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
    /// A producer instance; its first message gets sequence 1.
    pub const fn new(id: u32, epoch: u16) -> Self {
        Self {
            id,
            epoch,
            next_seq: 1,
        }
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

    /// Sends one message. With [`Ack::Lost`] the producer retries it: a plain log lands
    /// it twice, an idempotent log refuses the retry as a duplicate (and that refusal is
    /// the producer's ack).
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
    /// later). `Ok(None)` when an idempotent log refused it as a duplicate.
    pub fn retry<L: AppendLog>(log: &mut L, message: Message) -> Result<Option<Offset>, LogError> {
        match log.append(message) {
            Ok(offset) => Ok(Some(offset)),
            Err(LogError::Duplicate { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What an [`IdempotentLog`] remembers of one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The producer.
    pub producer: u32,
    /// Its current epoch.
    pub epoch: u16,
    /// The last sequence landed in that epoch.
    pub last_seq: u32,
}

/// A log that refuses retries, gaps and zombies, for up to `P` producers.
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

    /// The producers it remembers.
    pub fn producers(&self) -> &[ProducerEntry] {
        &self.producers
    }
}

impl<L: Log, const P: usize> Log for IdempotentLog<L, P> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn get(&self, offset: Offset) -> Option<Event> {
        self.inner.get(offset)
    }

    fn true_total(&self) -> i64 {
        self.inner.true_total()
    }

    fn canonical(&self, offset: Offset) -> Offset {
        self.inner.canonical(offset)
    }
}

impl<L: AppendLog, const P: usize> AppendLog for IdempotentLog<L, P> {
    fn append(&mut self, m: Message) -> Result<Offset, LogError> {
        let found = self.producers.iter().position(|e| e.producer == m.producer);
        let expected = match found.map(|i| self.producers[i]) {
            Some(e) if m.epoch < e.epoch => {
                return Err(LogError::Fenced {
                    producer: m.producer,
                    epoch: m.epoch,
                    current: e.epoch,
                });
            }
            Some(e) if m.epoch == e.epoch && m.seq <= e.last_seq => {
                return Err(LogError::Duplicate {
                    producer: m.producer,
                    seq: m.seq,
                });
            }
            Some(e) if m.epoch == e.epoch => e.last_seq + 1,
            // A new producer, or a new epoch of a known one, starts at sequence 1.
            _ => 1,
        };
        if m.seq != expected {
            return Err(LogError::OutOfSequence {
                producer: m.producer,
                expected,
                got: m.seq,
            });
        }
        let entry = ProducerEntry {
            producer: m.producer,
            epoch: m.epoch,
            last_seq: m.seq,
        };
        match found {
            Some(i) => {
                let offset = self.inner.append(m)?;
                self.producers[i] = entry;
                Ok(offset)
            }
            None if self.producers.is_full() => Err(LogError::Producers { capacity: P }),
            None => {
                let offset = self.inner.append(m)?;
                // Cannot fail: checked not full just above.
                let _ = self.producers.push(entry);
                Ok(offset)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::VecLog;

    fn id(k: &str) -> MessageId {
        MessageId::keyed(&crate::log::IdKey::PUBLIC, k.as_bytes())
    }

    #[test]
    fn a_lost_ack_lands_the_same_message_twice_in_a_plain_log() {
        let mut log = VecLog::<4>::new();
        let mut p = Producer::new(1, 0);
        let sent = p.send(&mut log, id("p17"), 5, Ack::Lost).unwrap();
        assert_eq!((sent.offset, sent.retry), (0, Some(1)));
        p.send(&mut log, id("p18"), 3, Ack::Received).unwrap();
        assert_eq!(
            log.get(0).unwrap().message,
            log.get(1).unwrap().message,
            "same id, same sequence"
        );
        assert_eq!(log.get(2).unwrap().message.seq, 2);
        assert_eq!(log.true_total(), 8);
    }

    #[test]
    fn an_idempotent_log_refuses_the_retry_but_not_a_resend() {
        let mut log = IdempotentLog::<VecLog<4>, 2>::new(VecLog::new());
        let mut p = Producer::new(1, 0);
        let sent = p.send(&mut log, id("p17"), 5, Ack::Lost).unwrap();
        assert_eq!(
            (sent.offset, sent.retry),
            (0, None),
            "the retry never reaches the log"
        );
        p.send(&mut log, id("p17"), 5, Ack::Received).unwrap();
        assert_eq!(
            log.len(),
            2,
            "an application resend has a new sequence: it lands"
        );
    }

    #[test]
    fn gaps_zombies_and_too_many_producers_are_refused() {
        let mut log = IdempotentLog::<VecLog<8>, 2>::new(VecLog::new());
        let m = |producer, epoch, seq| Message {
            id: MessageId(1),
            producer,
            epoch,
            seq,
            amount: 1,
        };
        log.append(m(1, 0, 1)).unwrap();
        assert_eq!(
            log.append(m(1, 0, 3)),
            Err(LogError::OutOfSequence {
                producer: 1,
                expected: 2,
                got: 3
            })
        );
        log.append(m(1, 1, 1)).unwrap();
        assert_eq!(
            log.append(m(1, 0, 2)),
            Err(LogError::Fenced {
                producer: 1,
                epoch: 0,
                current: 1
            })
        );
        log.append(m(2, 0, 1)).unwrap();
        assert_eq!(
            log.append(m(3, 0, 1)),
            Err(LogError::Producers { capacity: 2 })
        );
        assert_eq!(log.len(), 3);
        assert_eq!(
            log.producers()[0],
            ProducerEntry {
                producer: 1,
                epoch: 1,
                last_seq: 1
            }
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
