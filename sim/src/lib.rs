//! idem-sim: the simulator that proves idem's engine (idem-core), with idem's payments
//! (idem-payments) as its stream. `no_std`, no allocator.
//!
//! The [`scenario`]s, the deterministic crash simulator ([`run`]) that runs one with a
//! plan of crash points on a strict in-memory [`flash`], the [`check`]er that names its
//! anomalies, the [`sweep`] of every crash point, the [`cost`] of a run in flash, the
//! seeded [`rng`], the [`dual`] writes problem, [`producer`]s (retries, idempotent and transactional sends), Kafka's
//! transactions as a consumer reads them ([`txn`]), when a host's flash file reaches the
//! disk ([`sync`]), and a dosing [`pump`] whose doses a reset loses, doubles, or (with
//! the effects API) neither.
//!
//! What a firmware ships of payments (the message, its stores, the registry of stores,
//! the crash points) is idem-payments, which names no simulator.
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]

pub mod check;
pub mod cost;
pub mod dual;
pub use idem_core::testing::{flash, rng};
pub mod producer;
pub mod pump;
pub mod run;
pub mod scenario;
pub mod sweep;
pub mod sync;
pub mod txn;
