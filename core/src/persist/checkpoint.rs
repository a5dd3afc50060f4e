//! [`Checkpoint`]: the atomic checkpoint, position inside the store's record, and its
//! migration.

use super::*;

crate::io::doors! { in self;
    /// Migrates the journal of an atomic-checkpoint store ([`Checkpoint`]) from `Old`'s
    /// encoding to `New`'s, as [`migrate_each`] does for [`EachEffect`]: call it at every
    /// boot, before [`crate::consumer::Consumer::open`]. The newest record's state goes
    /// through `migrate`; the position it carries ([`Positioned::position`]) is set in the
    /// migrated state whatever `migrate` did with it, and the count of rejected events is
    /// kept. Its effects since that checkpoint were never durable, and replay from it as
    /// after any reset. A cut anywhere leaves the old record or the new one
    /// ([`Journal::open_migrating`]). Chain it as [`migrate_each`]: one call per old version,
    /// each to the current one. `Ok(true)` when this call migrated.
    pub fn migrate_checkpoint | migrate_checkpoint_async [Old, New, F] flash F
        (flash: &mut F, layout: &Layout, migrate: impl FnOnce(Old::State) -> New::State)
        -> Result<bool, JournalError<F::Error>>
        where [
            Old: Positioned,
            New: Positioned<Rejections = Old::Rejections>,
        ]
        => migrate_checkpoint::<Old, New, F>(flash, layout, migrate);
}

/// A store that keeps the consumer's position inside its own record ([`Checkpoint`]).
pub trait Positioned: Store {
    /// The next offset to read, as of the record (0: nothing committed).
    fn position(state: &Self::State) -> Offset;
    /// Records the next offset to read.
    fn set_position(state: &mut Self::State, next: Offset);
}

/// The record [`Checkpoint`] writes for the store `S`.
pub type CheckpointRecord<S> = Counted<<S as Store>::State, <S as Store>::Rejections>;

/// An atomic checkpoint: value, position and the count of rejected events in one record,
/// written at each checkpoint. Effects in between stay in RAM and are replayed after a
/// crash.
#[derive(Debug, Clone)]
pub struct Checkpoint<S: Store> {
    pub(super) sink: Journal<CheckpointRecord<S>>,
}

impl<S: Positioned> Persistence<S> for Checkpoint<S> {
    const BATCHED: bool = true;
    const POSITION_JOURNAL: bool = false;
    type Record = CheckpointRecord<S>;

    fn records_written(&self) -> u64 {
        self.sink.appended()
    }
}
