//! Effects outside the flash: an action that moves hardware (a pump doses, a valve
//! opens, a motor turns) once for each command, across resets.
//!
//! A setpoint can be re-asserted at every boot; a dose cannot. Between the record that
//! says a command was applied and the end of its action lies a window where a reset
//! either loses the action (nothing redoes it) or doubles it (a boot that re-asserts it
//! pumps it again). Exactly once for a physical action takes the action's own state:
//!
//! 1. **The intent, durable before the action.** The store's state carries an
//!    [`Intent`]: [`Store::apply`](crate::store::Store::apply) issues one
//!    ([`Intent::issue`]) for a command that acts, so the intent is in the same record
//!    as the command's effect and its dedup, written before the step returns. Use a
//!    store that writes its record at every effect ([`crate::persist::EachEffect`],
//!    [`crate::persist::Appended`]: the message-id window); a store that writes at
//!    checkpoints only keeps one intent a batch.
//! 2. **The action, then its done.** After a step that applied, [`Ledger::pending`]
//!    names the intent without a done: act, then [`Ledger::done`] appends its serial
//!    to the ledger, a journal of its own region.
//! 3. **At open, a decision for each intent without its done.** [`Ledger::pending`] on
//!    the recovered state names it, and nobody knows whether its action ran, ran half or
//!    never started. The application says which [`Choice`] holds for its actuator:
//!    - [`Choice::Asked`]: the actuator is asked (a pump's dispensed volume from its
//!      own counter, a valve's position switch) and says whether the action took
//!      effect: **exactly once**, given an actuator whose answer is true.
//!    - [`Choice::Redo`]: the action is done again: **at least once** (safe for an
//!      idempotent action: move to a position, set a level).
//!    - [`Choice::Drop`]: it is marked done without acting: **at most once**.
//!
//! What it does not own: the actuator, and what "took effect" means for it (a dose
//! half pumped when power failed is the application's to finish: ask the counter for
//! the remainder). The ledger holds only serials; the actions live in the store's state.
//!
//! To test it with the power-cut checker, run each action through
//! `testing::cuts::act` (feature `testing`): the checker sees the flash, not the
//! hardware, and cuts around an action only where it is marked.

use core::fmt::Debug;

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::journal::{Journal, JournalError, Region};

/// The newest action a store's state asks of the hardware: its serial number (1 for
/// the first; 0: none yet) and the action. Kept in the store's state, it is durable in
/// the record of the command that issued it, before anything moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent<A> {
    /// How many intents were issued: the newest one's serial number.
    pub serial: u32,
    /// The newest one's action.
    pub action: Option<A>,
}

/// None issued, whatever the action's type (no `A: Default` asked of a state that
/// derives `Default`).
impl<A> Default for Intent<A> {
    fn default() -> Self {
        Self {
            serial: 0,
            action: None,
        }
    }
}

impl<A: MaxSize> MaxSize for Intent<A> {
    const POSTCARD_MAX_SIZE: usize = u32::POSTCARD_MAX_SIZE + <Option<A>>::POSTCARD_MAX_SIZE;
}

impl<A> Intent<A> {
    /// Issues the next intent, for `action`: call it from
    /// [`Store::apply`](crate::store::Store::apply).
    pub fn issue(&mut self, action: A) {
        self.serial = self.serial.wrapping_add(1);
        self.action = Some(action);
    }
}

/// An intent whose action has no done yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending<A> {
    /// Its serial number, for [`Ledger::done`].
    pub serial: u32,
    /// What to do.
    pub action: A,
}

/// What the application knows of an intent found without its done at open, and so
/// what the ledger can promise for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Choice {
    /// The actuator was asked and says whether the action took effect (a pump's own
    /// dispensed-volume counter against the volume the state commanded): act only if it
    /// did not. Exactly once, given an actuator whose answer is true.
    Asked {
        /// The actuator's answer: the action took effect.
        happened: bool,
    },
    /// Act again: at least once. An action that ran before the reset runs twice; fine
    /// for an idempotent one, a double dose for a pump.
    Redo,
    /// Mark it done without acting: at most once. An action that never ran is lost.
    Drop,
}

impl<A> Pending<A> {
    /// The action to run for an intent found at open, by the application's `choice`
    /// (`None`: run nothing). Either way, call [`Ledger::done`] after it.
    pub fn decide(self, choice: Choice) -> Option<A> {
        match choice {
            Choice::Asked { happened: false } | Choice::Redo => Some(self.action),
            Choice::Asked { happened: true } | Choice::Drop => None,
        }
    }
}

/// A done: the serial number of the newest intent whose action completed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// The serial, as four fixed bytes (its slot is 8 bytes on a word flash).
    #[serde(with = "postcard::fixint::le")]
    pub serial: u32,
}

impl MaxSize for Done {
    const POSTCARD_MAX_SIZE: usize = 4;
}

/// The ledger of dones: a journal, on a region of its own, of the newest intent whose
/// action completed.
#[derive(Debug, Clone)]
pub struct Ledger {
    journal: Journal<Done>,
    done: u32,
}

impl Ledger {
    crate::io::doors! { in Self;
        /// Opens the ledger on `region` (blank: nothing done yet): a region of its own of
        /// at least 2 pages, as every journal (fewer is [`JournalError::BadRegion`], "journal
        /// region must be at least two whole pages inside the flash"), placed after the
        /// consumer's with `layout.sink.next::<F>(2)`. Its first done after a blank
        /// region erases the first page, which may read blank without being erased.
        pub fn open | open_async [F] flash F
            (flash: &mut F, region: Region, tag: u32) -> Result<Self, JournalError<F::Error>>
            => open(flash, region, tag);

        /// Records that the action of intent `serial` completed (or was decided at open).
        /// `Ok` once it is durable.
        pub fn done | done_async [F] flash F
            (&mut self, flash: &mut F, serial: u32) -> Result<(), JournalError<F::Error>>
            => done(self, flash, serial);
    }

    fn of(journal: Journal<Done>, done: Option<Done>) -> Self {
        Self {
            journal,
            done: done.map_or(0, |d| d.serial),
        }
    }

    /// The serial of the newest intent done (0: none).
    pub fn last_done(&self) -> u32 {
        self.done
    }

    /// The store state's intent, if its action has no done: after a step, one to act
    /// on; at open, one to decide ([`Pending::decide`]).
    pub fn pending<A: Copy>(&self, intent: &Intent<A>) -> Option<Pending<A>> {
        match intent.action {
            Some(action) if intent.serial != self.done => Some(Pending {
                serial: intent.serial,
                action,
            }),
            _ => None,
        }
    }
}

/// The ledger's flash steps over `embedded_storage`'s blocking `NorFlash`.
mod blocking {
    use super::*;
    use crate::io::blocking::*;
    use crate::journal::blocking as journal_io;
    include!("effects/io.rs");
}

/// The ledger's flash steps over `embedded_storage_async`'s `NorFlash`.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
mod asynch {
    use super::*;
    use crate::io::asynch::*;
    use crate::journal::asynch as journal_io;
    include!("effects/io.rs");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_choice_says_whether_to_act() {
        let p = Pending {
            serial: 3,
            action: 7u32,
        };
        assert_eq!(p.decide(Choice::Asked { happened: false }), Some(7));
        assert_eq!(p.decide(Choice::Asked { happened: true }), None);
        assert_eq!(p.decide(Choice::Redo), Some(7));
        assert_eq!(p.decide(Choice::Drop), None);
    }

    #[test]
    fn an_intent_defaults_to_none_for_an_action_without_default() {
        /// An action with no `Default` of its own.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        struct Open(u8);
        #[derive(Default)]
        struct State {
            intent: Intent<Open>,
        }
        let mut s = State::default();
        assert_eq!((s.intent.serial, s.intent.action), (0, None));
        s.intent.issue(Open(3));
        assert_eq!((s.intent.serial, s.intent.action), (1, Some(Open(3))));
    }

    #[cfg(feature = "testing")]
    #[test]
    fn an_intent_is_pending_until_its_serial_is_done() {
        let mut intent = Intent::<u32>::default();
        let ledger = Ledger {
            journal: Journal::unscanned::<crate::testing::flash::MemFlash<2, 1024>>(
                Region { start: 0, pages: 2 },
                1,
            ),
            done: 0,
        };
        assert_eq!(ledger.pending(&intent), None, "nothing issued");
        intent.issue(5);
        intent.issue(6);
        assert_eq!(
            ledger.pending(&intent),
            Some(Pending {
                serial: 2,
                action: 6
            })
        );
        let done = Ledger { done: 2, ..ledger };
        let mut flash = crate::testing::flash::MemFlash::<2, 1024>::new();
        let one_page = Region { start: 0, pages: 1 };
        let refused = Ledger::open(&mut flash, one_page, 1).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "journal region must be at least two whole pages inside the flash"
        );
        assert_eq!(done.pending(&intent), None);
        let mut buf = [0u8; 8];
        assert_eq!(
            postcard::to_slice(&Done { serial: 2 }, &mut buf)
                .unwrap()
                .len(),
            Done::POSTCARD_MAX_SIZE
        );
    }
}
