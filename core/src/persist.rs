//! How a consumer makes its sinks durable: one type per persistence policy, each owning
//! its recovery (open), effect and commit steps, so the consumer never asks which policy
//! it runs.
//!
//! | policy | a store's record is written | the position lives in | recovery |
//! |---|---|---|---|
//! | [`EachEffect`] | after every applied or rejected event | the consumer's position journal | newest record, newest position |
//! | [`Checkpoint`] | at each checkpoint, with the position in it | the store's record | newest record |
//! | [`TwoPhase`] | prepared, then committed, at each checkpoint | both (the journal holds the decision) | resolves an in-doubt prepared record |
//!
//! The [`Store`] contract is [`crate::store`]'s; a store names its policy
//! ([`Store::Persist`]) and every policy is generic over the store, so [`Store`] and
//! [`Persistence`] name each other, the one circle between the engine's modules
//! (`core/tests/modules.rs`).
//!
//! One file a concern: the records (`persist/records.rs`), the layout and tags
//! (`layout.rs`), the consumer's errors (`error.rs`), one file a policy (`each.rs`,
//! `appended.rs`, `checkpoint.rs`, `two_phase.rs`), what a consumer drives (`sinks.rs`),
//! and the flash steps of them all, written once for both builds (`io.rs`).
//!
//! A store names its policy as [`Store::Persist`]; a policy that needs more of the store
//! than its rule asks for it by trait: [`Checkpoint`] needs [`Positioned`], [`TwoPhase`]
//! needs [`TwoPhaseRecord`]. A store that names [`TwoPhase`] without being a
//! [`TwoPhaseRecord`] does not compile:
//!
//! ```compile_fail
//! use idem_core::log::Event;
//! use idem_core::persist::TwoPhase;
//! use idem_core::store::{Outcome, Store};
//!
//! /// Claims two-phase commit but has no prepare and no resolve.
//! #[derive(Debug, Clone)]
//! struct Careless;
//!
//! impl Store for Careless {
//!     type Payload = i64;
//!     type State = i64;
//!     type Error = ();
//!     type Rejections = ();
//!     type Persist = TwoPhase<Self>;
//!     const TAG: u32 = 1;
//!     fn check(&self, _: &i64, _: &Event<i64>) -> Result<Outcome, ()> {
//!         Ok(Outcome::Applied)
//!     }
//!     fn apply(&self, s: &mut i64, e: &Event<i64>) {
//!         *s += e.payload;
//!     }
//! }
//! ```
//!
//! Several sinks can share one position ([`Pair`]): each effect writes them one after the
//! other, so a crash can fall between the two writes ([`crate::consumer::Step::Between`]).

use core::fmt::Debug;

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::journal::{Journal, JournalError, Region, ZeroOver};
use crate::log::{Event, Offset};
use crate::store::{Outcome, Rejections, Store};

mod appended;
mod checkpoint;
mod each;
mod error;
mod layout;
mod records;
mod sinks;
mod two_phase;

pub use appended::*;
pub use checkpoint::*;
pub use each::*;
pub use error::*;
pub use layout::*;
pub use records::*;
pub use sinks::*;
pub use two_phase::*;

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
/// ([`blocking::Policy`], and with feature `async` `asynch::Policy`: one source, see
/// `core/src/persist/io.rs`). idem's four policies are the ones there are: [`EachEffect`],
/// [`Appended`], [`Checkpoint`] and [`TwoPhase`].
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
    /// ([`Appended`]; the others rebuild from one record and void nothing).
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

/// The flash steps over `embedded_storage`'s blocking `NorFlash`: each policy's
/// ([`blocking::Policy`]) and those of what a consumer drives ([`blocking::Drive`]).
pub mod blocking {
    use super::*;
    use crate::io::blocking::*;
    use crate::journal::blocking as journal_io;
    include!("persist/io.rs");
}

/// The flash steps over `embedded_storage_async`'s `NorFlash` (feature `async`): the
/// same traits as [`blocking`]'s, from the same source, awaited.
// `io!` and `body!` spell what `async fn` would: one source for both builds.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
pub mod asynch {
    use super::*;
    use crate::io::asynch::*;
    use crate::journal::asynch as journal_io;
    include!("persist/io.rs");
}
