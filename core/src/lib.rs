//! idem-core: stream-delivery guarantees you can run, crash and check, on a desktop or a
//! microcontroller. `no_std`, no allocation; every capacity is a const generic and
//! exceeding one is a typed error.
//!
//! Follow one event down and back up. The engine, what a firmware ships, sits at the
//! root: a [`log`] holds events of the application's own payload type at consecutive
//! offsets (a producer may have put one there twice); the [`consumer`] reads them, lets
//! its [`store`] decide each one (apply, skip a duplicate, or reject) and apply it, and
//! commits its position every K events; how each record and the position reach flash is
//! the store's [`persist`]ence policy, and every record is a slot in a [`journal`] on any
//! `embedded_storage` [`NorFlash`](embedded_storage::nor_flash::NorFlash). After a crash,
//! the journals are all that is left, and the consumer resumes from them. The dedup rules
//! ([`store::OffsetStamp`], [`store::MessageIdWindow`]) wrap any store. An action that
//! moves hardware once per command (a dose) keeps its intent in the store's record and
//! its done in a ledger of its own ([`effects`]).
//!
//! That is all idem-core holds: what a firmware ships. Feature `testing` adds what its
//! host tests run on, the strict in-memory NOR flash with power cuts and a harness that
//! resets a run after every step and judges each end state against a truth the caller
//! supplies (the example below runs on it). idem's own user of the engine, payments, and
//! the simulator that proves it are the `idem-sim` crate; the micro:bit's protocol is
//! `idem-board`.
//!
//! # Your effect, your flash
//!
//! A store is a rule over one durable record; the consumer persists it. Here the
//! setpoint of a heater, which must survive resets, over any `NorFlash` (the in-memory
//! one stands in for a chip driver, feature `testing`). A command outside the heater's
//! range is rejected: the position moves past it and the count of rejected commands is
//! kept beside the state. Nothing in it needs `std` or an allocator:
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
//! use idem_core::journal::Region;
//! use idem_core::log::{Event, Received};
//! use idem_core::persist::Layout;
//! use idem_core::store::{OffsetStamp, Outcome, Store};
//! use idem_core::testing::flash::MemFlash;
//!
//! /// The heater's setpoint in tenths of a degree, set by each command.
//! #[derive(Clone, Debug)]
//! struct Heater;
//!
//! impl Store for Heater {
//!     type Payload = i16; // a command: the new setpoint
//!     type State = i16;
//!     type Error = core::convert::Infallible;
//!     type Rejections = u32; // it can reject, and counts what it rejected
//!     type Persist = idem_core::persist::EachEffect<Self>;
//!     const TAG: u32 = 0x4845_0001;
//!     fn check(&self, _: &i16, e: &Event<i16>) -> Result<Outcome, Self::Error> {
//!         Ok(if (50..=300).contains(&e.payload) { Outcome::Applied } else { Outcome::Rejected })
//!     }
//!     fn apply(&self, setpoint: &mut i16, e: &Event<i16>) {
//!         *setpoint = e.payload;
//!     }
//! }
//!
//! type Flash = MemFlash<4, 1024>; // your chip's NorFlash driver here
//! // Pages 0 and 1 for the position, 2 and 3 for the store, from the flash's ERASE_SIZE.
//! let layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
//! assert_eq!(layout.sink.start, 2048);
//! // The commands as they arrived, at offsets 0 to 5: 999 is out of range.
//! let commands = [200, 210, 999, 220, 230, 240].map(|c| c as i16);
//! let events: [Event<i16>; 6] =
//!     core::array::from_fn(|o| Event { offset: o as u64, payload: commands[o] });
//! let stream = Received::new(&events, Some(6));
//! let mut flash = Flash::new();
//! let every4 = ConsumerConfig::every(CheckpointEvery::new(4).unwrap());
//! // The offset stamp makes a replay after a reset harmless.
//! let mut c = Consumer::open(&mut flash, layout, OffsetStamp(Heater), every4).unwrap();
//! for _ in 0..8 {
//!     c.step(&mut flash, &stream).unwrap(); // ... and then the power fails
//! }
//! let mut c = Consumer::open(&mut flash, layout, OffsetStamp(Heater), every4).unwrap();
//! assert_eq!(c.resume_at(), 0); // no commit yet: it replays from offset 0
//! c.run(&mut flash, &stream).unwrap();
//! assert_eq!((c.state().state, c.rejected()), (240, 1)); // 999 rejected once
//! # }
//! ```
#![cfg_attr(not(test), no_std)]
// docs.rs badges each item gated by a feature (`async`, `testing`, `defmt`).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

/// The bound on every journal record: its largest postcard encoding, which sizes its
/// flash slot. This is postcard's `experimental` `MaxSize`, outside postcard's semver:
/// name it as `idem_core::MaxSize` (trait and derive), so that a change to it is idem's
/// to absorb in a release of its own. The derive's code still names `postcard`, so a
/// crate that derives it depends on postcard 1.2 with `experimental-derive`.
pub use postcard::experimental::max_size::MaxSize;

pub mod consumer;
pub mod effects;
mod io;
pub mod journal;
pub mod log;
pub mod persist;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
