//! [`TwoPhase`]: a prepared record, the decision, a committed record; and its migration.

use super::*;

crate::io::doors! { in self;
    /// Migrates the journal of a two-phase store ([`TwoPhase`]) from `Old`'s encoding to
    /// `New`'s: call it at every boot, before [`crate::consumer::Consumer::open`]. A
    /// prepared record in doubt is first resolved by the decision in the position journal,
    /// as recovery would (forward if the position was committed, back if not); the resolved
    /// state goes through `migrate` and is written committed at the same position
    /// ([`TwoPhaseRecord::prepare`] then [`TwoPhaseRecord::resolve`]), so no record in doubt
    /// crosses the update and the position journal is left as it is. A cut anywhere leaves
    /// the old record or the new one ([`Journal::open_migrating`]). Chain it as
    /// [`migrate_each`]. `Ok(true)` when this call migrated.
    pub fn migrate_two_phase | migrate_two_phase_async [Old, New, F] flash F
        (flash: &mut F, layout: &Layout, migrate: impl FnOnce(Old::State) -> New::State)
        -> Result<bool, JournalError<F::Error>>
        where [
            Old: TwoPhaseRecord,
            New: TwoPhaseRecord<Rejections = Old::Rejections>,
        ]
        => migrate_two_phase::<Old, New, F>(flash, layout, migrate);
}

/// A two-phase record resolved by the decision `decided` (the position journal's next
/// offset), as recovery resolves it: its state and count of rejected events.
pub(super) fn resolved<S: TwoPhaseRecord>(
    record: TwoPhaseRecordOf<S>,
    decided: Offset,
) -> (S::State, S::Rejections) {
    let Prepared {
        mut state,
        mut rejected,
        committed_rejected,
    } = record;
    if let Some(target) = S::prepared(&state) {
        let commit = decided >= target;
        S::resolve(&mut state, commit);
        if !commit {
            rejected = committed_rejected;
        }
    }
    (state, rejected)
}

/// A store whose record can be prepared and resolved ([`TwoPhase`]).
pub trait TwoPhaseRecord: Store {
    /// The committed position (next offset to read; 0: nothing committed).
    fn position(state: &Self::State) -> Offset;
    /// The position a prepared (in-doubt) record would commit.
    fn prepared(state: &Self::State) -> Option<Offset>;
    /// Turns the running state into a prepared record for `next`.
    fn prepare(state: &mut Self::State, next: Offset);
    /// Resolves a prepared record, forward (`commit`) or back; a record that is not
    /// prepared is already committed, which is a success.
    fn resolve(state: &mut Self::State, commit: bool);
}

/// The record [`TwoPhase`] writes for the store `S`.
pub type TwoPhaseRecordOf<S> = Prepared<<S as Store>::State, <S as Store>::Rejections>;

/// Two-phase commit at each checkpoint: a prepared record (new value and position, and
/// the last committed ones), then the position in the consumer's journal (the decision),
/// then the committed record. Recovery resolves a prepared record by the decision:
/// forward if the position was committed, back if not.
#[derive(Debug, Clone)]
pub struct TwoPhase<S: Store> {
    pub(super) sink: Journal<TwoPhaseRecordOf<S>>,
    pub(super) positions: Journal<Position>,
    /// The commit whose prepared record is already written.
    pub(super) prepared: Option<Offset>,
    /// Events rejected as of the last commit.
    pub(super) committed_rejected: S::Rejections,
    /// What recovery did with a prepared record it found.
    pub(super) resolved: Option<Resolution>,
}

impl<S: TwoPhaseRecord> Persistence<S> for TwoPhase<S> {
    const BATCHED: bool = true;
    const POSITION_JOURNAL: bool = true;
    type Record = TwoPhaseRecordOf<S>;

    fn records_written(&self) -> u64 {
        self.sink.appended() + self.positions.appended()
    }

    fn resolution(&self) -> Option<Resolution> {
        self.resolved
    }
}
