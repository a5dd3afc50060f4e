//! idem's simulator as its front ends see it: the `idem` CLI and the browser playground
//! (`web/`) both choose a scenario and a store here ([`select`]), run it, and render the
//! same report ([`report::RunReport`]), so the two cannot drift. A lesson's predictions
//! are read and graded here too ([`grade`]); the MQTT and pump runs, which are not
//! sums over a log of payments, have their own modules ([`mqtt`], [`pump`]); the
//! lessons' texts are the core's
//! (`idem_sim::lesson`).
//!
//! Every rule lives in `idem-core` and `idem-sim`; this crate only chooses, runs and
//! describes.

pub mod error;
pub mod events;
pub mod grade;
pub mod matrix;
pub mod mqtt;
pub mod pump;
pub mod render;
pub mod report;
pub mod select;
pub mod spec;
