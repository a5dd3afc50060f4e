//! The doses of the message-id window tests: a command (an id and the millilitres it
//! doses), a gateway's stream of them with resends, and the pump that doses them. A
//! fixture, not idem-core's API: included by `#[path]` where it is used.

use idem_core::log::{Event, Identified, MessageId};
use idem_core::persist::EachEffect;
use idem_core::store::{Outcome, Store};

/// A command: its id and the millilitres it doses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dose {
    /// The command's id, the same in a resend.
    pub id: u64,
    /// Millilitres to dose.
    pub ml: u32,
}

impl Identified for Dose {
    fn id(&self) -> MessageId {
        MessageId(self.id)
    }
}

/// Offsets 0 to `events - 1`: at offset `o` a new id `100 + o` of `o % 5 + 1` ml, but
/// every fourth offset resends the command two offsets back (a gateway's resend under a
/// new offset).
pub fn commands(events: u64) -> Vec<Event<Dose>> {
    let mut out: Vec<Event<Dose>> = Vec::new();
    for offset in 0..events {
        let payload = if offset % 4 == 3 {
            out[offset as usize - 2].payload
        } else {
            Dose {
                id: 100 + offset,
                ml: (offset % 5) as u32 + 1,
            }
        };
        out.push(Event { offset, payload });
    }
    out
}

/// The old firmware's pump: millilitres dosed; a command of 5 ml or more is rejected.
#[derive(Clone, Debug)]
pub struct PumpV1;

impl Store for PumpV1 {
    type Payload = Dose;
    type State = u64;
    type Error = core::convert::Infallible;
    type Rejections = u32;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x7D05_0100;
    fn check(&self, _: &u64, e: &Event<Dose>) -> Result<Outcome, Self::Error> {
        Ok(if e.payload.ml < 5 {
            Outcome::Applied
        } else {
            Outcome::Rejected
        })
    }
    fn apply(&self, ml: &mut u64, e: &Event<Dose>) {
        *ml += u64::from(e.payload.ml);
    }
}
