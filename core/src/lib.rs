//! idem-core: stream-delivery guarantees you can run, crash and check, on a desktop or a
//! microcontroller. `no_std`, no allocation; every capacity is a const generic and
//! exceeding one is a typed error.
//!
//! Follow one event down and back up:
//! [`log`] holds it at an offset (a [`producer`] may have put it there twice);
//! the [`consumer`] reads it, lets a [`store`] apply it, and commits its position every
//! K events; both the store's state and the position are records in a [`journal`] on any
//! `embedded_storage` [`NorFlash`](embedded_storage::nor_flash::NorFlash) (the strict
//! in-memory one is [`flash`]); after a crash, the journals are all that is left, and the
//! consumer resumes from them. [`sim`] runs a [`scenario`] with a plan of [`crash`]
//! points and [`check`] judges the result; [`sweep`] decides what a sweep of every crash
//! point tries and when a crashed branch has rejoined the uncrashed run.
//!
//! The micro:bit firmware is [`demo`] (three sinks side by side) with frames from
//! [`wire`]; [`dual`] is the dual-write problem and its fixes; [`rng`] is the one seeded
//! generator everything random uses.
//!
//! # Your effect, your flash
//!
//! A store is a rule over one durable record; the consumer persists it. Here a
//! meter that must survive resets, over any `NorFlash` (the in-memory one
//! stands in for a chip driver). Nothing in it needs `std` or an allocator:
//!
//! ```
//! use idem_core::consumer::{Consumer, ConsumerConfig, Layout};
//! use idem_core::flash::MemFlash;
//! use idem_core::journal::Region;
//! use idem_core::log::{Event, GeneratedLog};
//! use idem_core::store::{Outcome, Store, StoreError};
//! use postcard::experimental::max_size::MaxSize;
//! use serde::{Deserialize, Serialize};
//!
//! /// Sum of amounts, applied at most once per offset.
//! #[derive(Clone)]
//! struct Meter;
//!
//! #[derive(Clone, Default, PartialEq, Debug, Serialize, Deserialize, MaxSize)]
//! struct MeterState { sum: i64, stamp: Option<u64> }
//!
//! impl Store for Meter {
//!     type State = MeterState;
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
//! let layout = Layout {
//!     positions: Region { start: 0, pages: 2 },
//!     sink: Region { start: 2048, pages: 2 },
//!     tag: 0x0001,
//! };
//! let log = GeneratedLog { events: 50, amount: 2 };
//! let mut flash = MemFlash::<4, 1024>::new(); // your chip's NorFlash driver here
//! let mut consumer = Consumer::open(&mut flash, layout, Meter, ConsumerConfig::every(10)).unwrap();
//! for _ in 0..37 {
//!     consumer.step(&mut flash, &log).unwrap(); // ... and then the power fails
//! }
//! let mut consumer = Consumer::open(&mut flash, layout, Meter, ConsumerConfig::every(10)).unwrap();
//! assert_eq!(consumer.committed(), Some(10)); // it resumes from the durable position
//! consumer.run(&mut flash, &log).unwrap();
//! assert_eq!(consumer.total(), 100); // and the replay applied nothing twice
//! ```
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]

pub mod check;
pub mod consumer;
pub mod crash;
pub mod demo;
pub mod dual;
pub mod flash;
pub mod journal;
pub mod log;
pub mod producer;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod store;
pub mod sweep;
pub mod wire;
