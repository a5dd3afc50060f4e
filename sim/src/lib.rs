//! idem-sim: the simulator that proves idem's engine (idem-core), and payments, the
//! engine's user it proves it with.
//!
//! Always here, and `no_std` (what idem's boards ship with `default-features = false`):
//! - [`payment`]: a payment message, the logs it arrives in, the stores that sum it
//!   (naive, offset-stamped, message-id, atomic, producer sequence, two-phase) and what
//!   the checker reads of them;
//! - the [`registry`] of the stores by name, with their capacities and sources;
//! - [`crash`] points and the [`ddia`] exercise's parameters.
//!
//! With the default feature `simulator`: the [`scenario`]s, the deterministic crash
//! simulator ([`run`]) that runs one with a plan of crash points on a strict in-memory
//! [`flash`], the [`check`]er that names its anomalies, the [`sweep`] of every crash point,
//! the [`cost`] of a run in flash, the seeded [`rng`], the [`dual`] writes problem, the
//! [`lesson`]s that ask questions the simulator answers, [`producer`]s (retries,
//! idempotent and transactional sends), Kafka's transactions as a consumer reads them
//! ([`txn`]), when a host's flash file reaches the disk ([`sync`]), and a dosing
//! [`pump`] whose doses a reset loses, doubles, or (with the effects API) neither.
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]

pub mod crash;
pub mod ddia;
pub mod payment;
pub mod registry;

#[cfg(feature = "simulator")]
pub mod check;
#[cfg(feature = "simulator")]
pub mod cost;
#[cfg(feature = "simulator")]
pub mod dual;
#[cfg(feature = "simulator")]
pub use idem_core::testing::{flash, rng};
#[cfg(feature = "simulator")]
pub mod lesson;
#[cfg(feature = "simulator")]
pub mod producer;
#[cfg(feature = "simulator")]
pub mod pump;
#[cfg(feature = "simulator")]
pub mod run;
#[cfg(feature = "simulator")]
pub mod scenario;
#[cfg(feature = "simulator")]
pub mod sweep;
#[cfg(feature = "simulator")]
pub mod sync;
#[cfg(feature = "simulator")]
pub mod txn;
