//! idem's simulator as its front ends see it: the `idem` CLI and the browser playground
//! (`web/`) both choose a scenario and a store here ([`select`]), run it, and render the
//! same report ([`report::RunReport`]), so the two cannot drift. The [`lesson`]s'
//! texts live here, and their predictions are read and graded here too ([`grade`]); the
//! MQTT and pump runs, which are not sums over a log of payments, have their own modules
//! ([`mqtt`], [`pump`]). The command line's [`choice`]s of a library's type (a store, a
//! sync mode) are read here, with the words `--help` and the page show beside each.
//!
//! Every rule lives in `idem-core`, `idem-payments` and `idem-sim`; this crate only
//! chooses, runs, asks and describes.

pub mod choice;
pub mod error;
pub mod events;
pub mod grade;
pub mod lesson;
pub mod matrix;
pub mod mqtt;
pub mod pump;
pub mod render;
pub mod report;
pub mod select;
pub mod spec;
