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
//! [`Persistence`] name each other: the two traits, the policies' flash-step traits and
//! what their signatures name ([`Phase`], [`Recovered`], [`Resolution`],
//! [`ConsumerError`]) live together in one private module under this one
//! (`core/src/contract.rs`), and [`Layout`] with the flash's regions under the journal
//! (`core/src/flash.rs`); each is named here. The engine's modules import one another in
//! one direction only (`core/tests/modules.rs`).
//!
//! One file a concern: the records (`persist/records.rs`), the journals' tags
//! (`tags.rs`), one file a policy (`each.rs`, `appended.rs`, `checkpoint.rs`,
//! `two_phase.rs`), what a consumer drives (`sinks.rs`), and the flash steps of them all,
//! written once for both builds (`io.rs`).
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

use crate::contract::{Outcome, Rejections, Store};
use crate::journal::{Journal, JournalError, Region, ZeroOver};
use crate::log::{Event, Offset};

mod appended;
mod checkpoint;
mod each;
mod records;
mod sinks;
mod tags;
mod two_phase;

pub use crate::contract::{
    ConsumerError, Disagreement, Persistence, Phase, PolicyIo, Recovered, Resolution,
    StoreRecovered,
};
pub use crate::flash::Layout;
pub use appended::*;
pub use checkpoint::*;
pub use each::*;
pub use records::*;
pub use sinks::*;
pub use tags::*;
pub use two_phase::*;

/// The flash steps over `embedded_storage`'s blocking `NorFlash`: each policy's
/// ([`blocking::Policy`]) and those of what a consumer drives ([`blocking::Drive`]).
pub mod blocking {
    use super::*;
    pub use crate::contract::blocking::Policy;
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
    pub use crate::contract::asynch::Policy;
    use crate::io::asynch::*;
    use crate::journal::asynch as journal_io;
    include!("persist/io.rs");
}
