//! The contract between a store, its persistence policy and the consumer. A [`Store`]
//! names its policy ([`Store::Persist`]) and every policy ([`Persistence`], whose flash
//! steps are `blocking::Policy` and `asynch::Policy`) is generic over its store: the
//! traits name each other, so they live here together, with what their signatures name
//! (what recovery hands back, how far a commit got, the consumer's errors in `error.rs`).
//! Below it are the log, the flash and the journal; the policies (`crate::persist`), the
//! dedup rules (`crate::store`) and the consumer stand on it. The module is private:
//! each item is named where a reader looks for it, `store::{Store, Outcome, Rejections}`
//! and the rest in `persist`.

use core::fmt::Debug;

use postcard::experimental::max_size::MaxSize;
use serde::{Serialize, de::DeserializeOwned};

use crate::flash::{Layout, Region, ZeroOver};
use crate::journal::JournalError;
use crate::log::{Event, Offset};

mod error;

pub use error::{ConsumerError, Disagreement};

/// What a store does with one delivered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Outcome {
    /// The effect changes the state.
    Applied,
    /// A duplicate: the state stays as it is.
    Skipped,
    /// The application refuses the event: the state stays as it is, the position moves
    /// past it, and the durable count of rejected events grows by one. Behind a dedup
    /// rule the rejection is remembered like an effect, so a replay is skipped and counted
    /// once; a store without one counts a replayed rejection again, as it applies a
    /// replayed event again (at-least-once).
    Rejected,
}

/// The durable count of events a store rejected, kept in the store's record: `u32` for a
/// store that can reject, `()` for one that never does (its record then carries no count,
/// not a byte). A `()` store that returns [`Outcome::Rejected`] stops the consumer with
/// [`crate::consumer::ConsumerError::Rejections`].
pub trait Rejections:
    Copy + Default + PartialEq + Debug + Send + Sync + Serialize + DeserializeOwned + MaxSize
{
    /// The count with one more, or `None` when it cannot hold one more.
    fn one_more(self) -> Option<Self>;

    /// The count.
    fn count(self) -> u32;
}

impl Rejections for () {
    fn one_more(self) -> Option<Self> {
        None
    }

    fn count(self) -> u32 {
        0
    }
}

impl Rejections for u32 {
    fn one_more(self) -> Option<Self> {
        self.checked_add(1)
    }

    fn count(self) -> u32 {
        self
    }
}

/// The application's rule over its durable state.
pub trait Store: Clone + Debug {
    /// What its events carry: the application's own type (decoded, and small enough to
    /// copy: the consumer hands each event on by value).
    type Payload: Copy;

    /// The whole durable state: one journal record.
    type State: Serialize + DeserializeOwned + MaxSize + Clone + Default + PartialEq + Debug;

    /// Why an event could not be decided now (a bounded memory that is full, a value past
    /// its range): the step stops and is tried again; nothing was written.
    type Error: Debug;

    /// The durable count of rejected events: `u32`, or `()` for a store that never
    /// rejects.
    type Rejections: Rejections;

    /// How the consumer makes the record durable: [`EachEffect`](crate::persist::EachEffect), [`Appended`](crate::persist::Appended),
    /// [`crate::persist::Checkpoint`] or [`crate::persist::TwoPhase`].
    type Persist: Persistence<Self>;

    /// Names the store's record in journal page headers, so one store never reads
    /// another's pages. The rule: a tag names one encoding of the store's record, which is
    /// its [`Store::State`] and its [`Store::Rejections`] (a count of `()` takes no byte, a
    /// `u32` does). Change it with every change to that encoding (a field added, removed,
    /// reordered or retyped; a count added), as a version: records of the old encoding are then refused as foreign
    /// ([`crate::journal::JournalError::Foreign`]), never decoded into the new type (a
    /// `(u8, u8)` record of the same size would read back as a `(u16,)`). Then open with
    /// [`crate::consumer::Consumer::open_or_reset`] to start over. The consumer mixes the
    /// layout's tag into it by XOR, and so does each dedup rule with a mark of its own
    /// (in the low byte): keep the store tags of one application apart above the low
    /// byte, leave the low byte 0 for the marks (`0x5E70_0100`), and give the application
    /// its own layout tag. (idem's payment tags, `0x5301_00xx`, predate this rule; only the
    /// combinations idem builds are kept apart.)
    const TAG: u32;

    /// Says what to do with `event`, reading the state only: apply it, skip it as a
    /// duplicate, or reject it.
    fn check(
        &self,
        state: &Self::State,
        event: &Event<Self::Payload>,
    ) -> Result<Outcome, Self::Error>;

    /// Applies `event`, which [`Store::check`] said to apply, to `state` in RAM.
    fn apply(&self, state: &mut Self::State, event: &Event<Self::Payload>);

    /// Notes in its dedup memory an event that [`Store::check`] rejected, so that a replay
    /// of it is skipped rather than counted twice. Only a dedup rule does anything here,
    /// and passes it on to the store it wraps; an application's store keeps the default,
    /// which does nothing, so its own state never changes for an event it rejected.
    fn remember(&self, state: &mut Self::State, event: &Event<Self::Payload>) {
        let _ = (state, event);
    }
}

/// How far a commit got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A two-phase store's prepared record is durable; the decision is not.
    Prepared,
    /// The position is durable.
    Committed,
}

/// A persistence policy for the store `S`: the RAM it needs (journal cursors), and its
/// three flash steps, recovery, the effect and the commit, in each build
/// ([`blocking::Policy`](crate::persist::blocking::Policy), and with feature `async` `asynch::Policy`: one source, see
/// `core/src/persist/io.rs`). idem's four policies are the ones there are: [`EachEffect`](crate::persist::EachEffect),
/// [`Appended`](crate::persist::Appended), [`Checkpoint`](crate::persist::Checkpoint) and [`TwoPhase`](crate::persist::TwoPhase).
pub trait Persistence<S: Store>: Sized + Clone + Debug + PolicyIo<S> {
    /// Whether effects reach flash only at a commit (the store's record carries the
    /// position): effects between checkpoints live in RAM and vanish at a crash.
    const BATCHED: bool;
    /// Whether the consumer's own position journal is used.
    const POSITION_JOURNAL: bool;
    /// The record of the store's journal.
    type Record: Serialize + DeserializeOwned + MaxSize + Debug;

    /// Journal records appended since the policy was opened.
    fn records_written(&self) -> u64;

    /// What recovery did with a record in doubt, if it found one.
    fn resolution(&self) -> Option<Resolution> {
        None
    }

    /// Before recovery, on a storage that can keep a later write and lose an earlier one
    /// (a file under a page cache, synced only at commits): voids the store's records
    /// that follow a hole after the durable position, and returns how many
    /// ([`Appended`](crate::persist::Appended); the others rebuild from one record and void nothing).
    fn void_in_doubt<F: ZeroOver>(
        _flash: &mut F,
        _layout: &Layout,
    ) -> Result<u32, ConsumerError<F::Error, S::Error>> {
        Ok(0)
    }
}

/// The flash steps every policy has: the blocking ones, and with feature `async` the
/// async ones too.
#[cfg(not(feature = "async"))]
pub trait PolicyIo<S: Store>: blocking::Policy<S> {}
#[cfg(not(feature = "async"))]
impl<S: Store, P: blocking::Policy<S>> PolicyIo<S> for P {}
/// The flash steps every policy has: the blocking ones, and with feature `async` the
/// async ones too.
#[cfg(feature = "async")]
pub trait PolicyIo<S: Store>: blocking::Policy<S> + asynch::Policy<S> {}
#[cfg(feature = "async")]
impl<S: Store, P: blocking::Policy<S> + asynch::Policy<S>> PolicyIo<S> for P {}

/// What recovery hands the consumer: the policy's RAM `D`, the state `T` and the count
/// of rejected events `C` (a store's, or a pair of sinks'), and the next offset to read.
#[derive(Debug, Clone)]
pub struct Recovered<D, T, C> {
    /// The policy's RAM (journal cursors).
    pub durable: D,
    /// The state.
    pub state: T,
    /// The durable count of rejected events.
    pub rejected: C,
    /// The next offset to read.
    pub next: Offset,
}

/// What recovery of the store `S` under the policy `D` hands the consumer.
pub type StoreRecovered<D, S> = Recovered<D, <S as Store>::State, <S as Store>::Rejections>;

/// What recovery did with a prepared (in-doubt) two-phase record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The consumer's journal held the decision: the prepared values were kept and the
    /// consumer resumes at `next`.
    RolledForward {
        /// The next offset to read.
        next: Offset,
    },
    /// No decision was written: the last committed values were kept and the consumer
    /// resumes at `next`, replaying the batch.
    RolledBack {
        /// The next offset to read.
        next: Offset,
    },
}

/// The flash steps of a policy over `embedded_storage`'s blocking `NorFlash`
/// (`persist::blocking::Policy`).
pub(crate) mod blocking {
    use super::*;
    use crate::io::blocking::*;
    include!("contract/io.rs");
}

/// The same over `embedded_storage_async`'s `NorFlash` (`persist::asynch::Policy`).
// `io!` and `body!` spell what `async fn` would: one source for both builds.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
pub(crate) mod asynch {
    use super::*;
    use crate::io::asynch::*;
    include!("contract/io.rs");
}
