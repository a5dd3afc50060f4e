//! What proves the engine, and what a firmware leaves out (the default `lab` feature):
//! a strict in-memory NOR [`flash`], the [`scenario`]s, the deterministic simulator
//! ([`sim`]) that runs one with a plan of crash points, the [`check`]er that names its
//! anomalies, the [`sweep`] of every crash point, the seeded [`rng`], the [`dual`]
//! writes problem as sinks the simulator drives, and the [`lesson`]s that ask
//! questions the simulator answers.

pub mod check;
pub mod cost;
pub mod dual;
pub use crate::testing::{flash, rng};
pub mod lesson;
pub mod scenario;
pub mod sim;
pub mod sweep;
