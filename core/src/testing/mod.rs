//! What a firmware author tests a store with, on the host (feature `testing`, part of
//! `lab`): the strict in-memory NOR [`flash`], which refuses what real flash would fail
//! at and cuts the power in the middle of a chosen write or erase, and the seeded
//! [`rng`] behind its torn contents.

pub mod flash;
pub mod rng;
