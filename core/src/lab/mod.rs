//! What proves the engine, and what a firmware leaves out (the default `lab` feature):
//! a strict in-memory NOR [`flash`], the [`scenario`]s, the deterministic simulator
//! ([`sim`]) that runs one with a plan of crash points, the [`check`]er that names its
//! anomalies, the [`sweep`] of every crash point, the seeded [`rng`], and the [`dual`]
//! writes problem as sinks the simulator drives.

pub mod check;
pub mod dual;
pub mod flash;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod sweep;
