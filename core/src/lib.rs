//! idem-core: stream-delivery guarantees you can run, crash and check, on a desktop or a
//! microcontroller. `no_std`, no allocation; every capacity is a const generic and
//! exceeding one is a typed error.
//!
//! Follow one event down and back up. The engine, what a firmware ships, sits at the
//! root: the [`log`] holds an event at an offset (a producer may have put it there
//! twice); the [`consumer`] reads it, lets its sinks (a [`store`], or a
//! [`Pair`](persist::Pair) of them) apply it, and commits its position every K events;
//! how each record and the position reach flash is the store's [`persist`]ence policy,
//! and every record is a slot in a [`journal`] on any `embedded_storage`
//! [`NorFlash`](embedded_storage::nor_flash::NorFlash). After a crash, the journals are
//! all that is left, and the consumer resumes from them. A log may say to pass over an
//! offset (an aborted transaction's record, under `read_committed`).
//!
//! Around the engine, with the `lab` feature: `producer` (retries, idempotent and
//! transactional sends), `txn` (Kafka's transactions as a consumer reads them), `crash`
//! (a crash point names a place among the consumer's steps), `ddia` (the exercise's
//! parameters) and `sync` (when a host's flash file reaches the disk).
//!
//! `lab` proves it (default feature `lab`): the strict in-memory flash, scenarios, the
//! simulator, the checker, sweeps of every crash point, dual writes. `board` (default
//! feature `board`) is what the micro:bit and the host share: the demo device, the feed
//! device and their wire frames. A firmware of its own builds with
//! `default-features = false` and gets the engine alone; its host tests add `testing`
//! (the strict in-memory flash with power cuts, without the simulator), which the
//! example below runs on.
//!
//! # Your effect, your flash
//!
//! A store is a rule over one durable record; the consumer persists it. Here a
//! meter that must survive resets, over any `NorFlash` (the in-memory one
//! stands in for a chip driver, feature `testing`). Nothing in it needs `std` or an
//! allocator:
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
//! use idem_core::journal::Region;
//! use idem_core::testing::flash::MemFlash;
//! use idem_core::log::{Event, GeneratedLog};
//! use idem_core::persist::{EachEffect, Layout};
//! use idem_core::store::{Outcome, Store, StoreError};
//! use idem_core::MaxSize;
//! use serde::{Deserialize, Serialize};
//!
//! /// Sum of amounts, applied at most once per offset.
//! #[derive(Clone, Debug)]
//! struct Meter;
//!
//! #[derive(Clone, Default, PartialEq, Debug, Serialize, Deserialize, MaxSize)]
//! struct MeterState { sum: i64, stamp: Option<u64> }
//!
//! impl Store for Meter {
//!     type State = MeterState;
//!     type Persist = EachEffect<Self>; // its record after every effect
//!     const TAG: u32 = 0x4D45_5445;
//!     fn apply(&self, s: &mut MeterState, e: &Event) -> Result<Outcome, StoreError> {
//!         if s.stamp.is_some_and(|o| e.offset <= o) {
//!             return Ok(Outcome::Skipped);
//!         }
//!         s.sum += e.message.amount;
//!         s.stamp = Some(e.offset);
//!         Ok(Outcome::Applied)
//!     }
//!     fn total(s: &MeterState) -> i64 { s.sum }
//! }
//!
//! type Flash = MemFlash<4, 1024>; // your chip's NorFlash driver here
//! // Pages 0 and 1 for the position, 2 and 3 for the store, from the flash's ERASE_SIZE.
//! let layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
//! assert_eq!(layout.sink, Region { start: 2048, pages: 2 });
//! let log = GeneratedLog { events: 50, amount: 2 };
//! let mut flash = Flash::new();
//! let every10 = ConsumerConfig::every(CheckpointEvery::new(10).unwrap());
//! let mut consumer = Consumer::open(&mut flash, layout, Meter, every10).unwrap();
//! for _ in 0..37 {
//!     consumer.step(&mut flash, &log).unwrap(); // ... and then the power fails
//! }
//! let mut consumer = Consumer::open(&mut flash, layout, Meter, every10).unwrap();
//! assert_eq!(consumer.resume_at(), 10); // it resumes from the durable position
//! consumer.run(&mut flash, &log).unwrap();
//! assert_eq!(consumer.total(), 100); // and the replay applied nothing twice
//! # }
//! ```
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]

/// The bound on every journal record: its largest postcard encoding, which sizes its
/// flash slot. This is postcard's `experimental` `MaxSize`, outside postcard's semver:
/// name it as `idem_core::MaxSize` (trait and derive), so that a change to it is idem's
/// to absorb in a release of its own. The derive's code still names `postcard`, so a
/// crate that derives it depends on postcard 1.2 with `experimental-derive`.
pub use postcard::experimental::max_size::MaxSize;

#[cfg(feature = "board")]
pub mod board;
pub mod consumer;
// Crash points and the exercise's parameters: the simulator's and idem's boards'.
#[cfg(any(feature = "lab", feature = "board"))]
pub mod crash;
#[cfg(any(feature = "lab", feature = "board"))]
pub mod ddia;
pub mod journal;
#[cfg(feature = "lab")]
pub mod lab;
pub mod log;
pub mod persist;
#[cfg(feature = "testing")]
pub mod testing;
// Producers, a host's flash-file sync rules and Kafka's transactions: what the
// simulator and the host model around the engine, not what a firmware consumes with.
#[cfg(feature = "lab")]
pub mod producer;
pub mod store;
#[cfg(feature = "lab")]
pub mod sync;
#[cfg(feature = "lab")]
pub mod txn;
