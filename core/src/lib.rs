// The crate's documentation is its README: one text on crates.io, GitHub and docs.rs,
// whose example runs as a doctest (on the `testing` flash: the dev-dependency on the
// crate itself turns that feature on for its tests).
#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), no_std)]
// docs.rs badges each item gated by a feature (`async`, `testing`, `defmt`).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

/// The bound on every journal record: its largest postcard encoding, which the journal
/// checks against its record limit when it is built (a record is written at its
/// encoded size). This is postcard's `experimental` `MaxSize`, outside postcard's semver:
/// name it as `idem_core::MaxSize` (trait and derive), so that a change to it is idem's
/// to absorb in a release of its own. The derive's code still names `postcard`, so a
/// crate that derives it depends on postcard 1.2 with `experimental-derive`.
pub use postcard::experimental::max_size::MaxSize;

pub mod consumer;
mod contract;
pub mod effects;
mod flash;
mod io;
pub mod journal;
pub mod log;
pub mod persist;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
