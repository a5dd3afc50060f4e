//! The DDIA chapter 12 exercise's parameters: 100 events of +1, a checkpoint every 10,
//! a crash right after applying offset 49 (its checkpoint would cover 40..49). The board
//! demo runs them and the lab's `ddia` scenario defaults to them.

use idem_core::consumer::CheckpointEvery;
use idem_core::log::Offset;

/// Events in the exercise's log.
pub const EVENTS: u64 = 100;
/// The exercise's checkpoint interval.
pub const CHECKPOINT_EVERY: CheckpointEvery = CheckpointEvery::new(10).unwrap();
/// The exercise's crash: right after the effect of this offset.
pub const CRASH_AFTER: Offset = 49;
