//! A producer that numbers its messages and retries when an ack is lost.
//!
//! Each [`Producer::send`] call is one application-level send: it takes the next
//! sequence number. When the ack of an append is lost, the producer cannot tell
//! whether the message landed and sends the same message again, same id and same
//! sequence; the log keeps both copies at two offsets. A second `send` call for the same
//! message id is an application resend and gets a new sequence.

use crate::log::{AppendLog, LogError, Message, MessageId, Offset};

/// What happened to the acknowledgement of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The producer received the ack.
    Received,
    /// The message landed but its ack was lost: the producer retries.
    Lost,
}

/// Where one send landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Offset of the first copy.
    pub offset: Offset,
    /// Offset of the retry, when the first ack was lost.
    pub retry: Option<Offset>,
}

/// A producer with an id, an epoch and a sequence counter.
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

    /// Sends one message. With [`Ack::Lost`] the message lands twice.
    pub fn send<L: AppendLog>(
        &mut self,
        log: &mut L,
        id: MessageId,
        amount: i64,
        ack: Ack,
    ) -> Result<Sent, LogError> {
        let message = Message {
            id,
            producer: self.id,
            epoch: self.epoch,
            seq: self.next_seq,
            amount,
        };
        self.next_seq += 1;
        let offset = log.append(message)?;
        let retry = match ack {
            Ack::Received => None,
            Ack::Lost => Some(log.append(message)?),
        };
        Ok(Sent { offset, retry })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Log, VecLog};

    #[test]
    fn a_lost_ack_lands_the_same_message_twice() {
        let mut log = VecLog::<4>::new();
        let mut p = Producer::new(1, 0);
        let p17 = MessageId::from_key(b"p17");
        assert_eq!(
            p.send(&mut log, p17, 5, Ack::Lost),
            Ok(Sent {
                offset: 0,
                retry: Some(1)
            })
        );
        assert_eq!(
            p.send(&mut log, MessageId::from_key(b"p18"), 3, Ack::Received),
            Ok(Sent {
                offset: 2,
                retry: None
            })
        );
        let (a, b) = (log.get(0).unwrap().message, log.get(1).unwrap().message);
        assert_eq!(a, b, "same id, same sequence");
        assert_eq!(log.get(2).unwrap().message.seq, 2);
        assert_eq!(log.true_total(), 8);
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
