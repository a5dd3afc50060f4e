//! What a firmware author tests a store with, on the host (feature `testing`, which
//! idem-sim's simulator turns on): the strict in-memory NOR [`flash`], which refuses what real flash would fail
//! at and cuts the power in the middle of a chosen write or erase, each chip family's
//! flash as that strict flash ([`chips`]), the seeded [`rng`]
//! behind its torn contents, the [`resets`] harness that resets a run after every
//! step and judges each end state against the caller's truth, and the power-cut checker
//! [`cuts`], which cuts a program of any flash user at every unit write and erase of a
//! reference run, reboots it and judges every step.

// The heap flash only (feature `alloc`): the engine never allocates.
#[cfg(feature = "alloc")]
extern crate alloc;

pub mod chips;
pub mod cuts;
pub mod flash;
pub mod resets;
pub mod rng;
