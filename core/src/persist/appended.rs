//! [`Appended`]: a small record per effect, the state rebuilt from the newest.

use super::*;

/// A store whose applied effects are appended as small records ([`Appended`]): its
/// state is rebuilt at recovery from its newest records instead of being written whole
/// with every effect.
pub trait Appendable: Store {
    /// What one applied effect appends, taken from the state right after it.
    type Delta: Serialize + DeserializeOwned + MaxSize + Clone + Debug;
    /// The most records a state is ever rebuilt from.
    const MAX_NEEDED: u32;
    /// The delta of `event`, applied (or rejected and remembered) just now, taken from
    /// `state` right after it; `seq` is the sequence number its record will carry.
    fn delta(state: &Self::State, event: &Event<Self::Payload>, seq: u32) -> Self::Delta;
    /// A state being rebuilt.
    type Rebuild;
    /// From the newest delta: a state to rebuild, and at most how many of the newest
    /// deltas (the newest included) it takes.
    fn start(newest: &Self::Delta) -> (Self::Rebuild, u32);
    /// Folds one more delta into a state being rebuilt, newest first.
    fn fold_back(state: &mut Self::Rebuild, older: &Self::Delta);
    /// The rebuilt state, or `None` when the deltas folded were not enough.
    fn finish(state: Self::Rebuild) -> Option<Self::State>;
}

/// The record [`Appended`] writes for the store `S`.
pub type AppendedRecord<S> = Covered<<S as Appendable>::Delta, <S as Store>::Rejections>;

/// Each applied or rejected event appends one small record (a [`Appendable::Delta`], the
/// count of rejected events and the position committed when it was written); the
/// position is committed in the consumer's own journal every K events. Recovery rebuilds
/// the state from the newest records, which the region always keeps: it must hold
/// [`Appendable::MAX_NEEDED`] records besides the page it reclaims
/// ([`ConsumerError::Region`] otherwise).
///
/// Why an appended record stays safe: a torn append is not a valid record, so recovery
/// ends at the one before it, whose state is the state before the torn effect, and the
/// effect is replayed from the durable position as any unwritten effect is; a replayed
/// effect that was appended is recognised by the rebuilt state (its id is in the window)
/// and skipped. The records a state is rebuilt from follow on from each other in the
/// journal ([`Journal::recent`](crate::journal::Journal::recent)'s `adjacent`); a hole no
/// newer record vouches for means records were lost, which recovery refuses
/// ([`Disagreement::RecordsLost`]).
#[derive(Debug, Clone)]
pub struct Appended<S: Appendable>(pub(super) SinkThenPosition<AppendedRecord<S>>);

impl<S: Appendable> Persistence<S> for Appended<S> {
    const BATCHED: bool = false;
    const POSITION_JOURNAL: bool = true;
    type Record = AppendedRecord<S>;

    fn records_written(&self) -> u64 {
        self.0.records_written()
    }

    /// The records after the durable position (the newest store record a position
    /// commit names) were written since the last sync, and their effects are replayed
    /// from that position anyway. Where one of them is missing and a later one is not,
    /// the later one's state counts an effect whose id the rebuilt window would lack, so
    /// it and all after it are voided ([`Journal::void_after`]), and recovery rebuilds
    /// from the record before the hole. A hole at or before the durable record is left
    /// to recovery, which refuses it ([`Disagreement::RecordsLost`]), and so is a record
    /// written after a commit that the position journal does not hold
    /// ([`Disagreement::PositionBehind`]): nothing is voided then.
    fn void_in_doubt<F: ZeroOver>(
        flash: &mut F,
        layout: &Layout,
    ) -> Result<u32, ConsumerError<F::Error, S::Error>> {
        let (sink, _) =
            Journal::<AppendedRecord<S>>::open(flash, layout.sink, sink_tag::<S>(layout))?;
        let (_, position) =
            Journal::<Position>::open(flash, layout.positions, positions_tag(layout))?;
        let Some(newest) = sink.newest_seq() else {
            return Ok(0);
        };
        let (durable, next) = position.map_or((0, 0), |p| (p.sinks[0], p.next));
        // How far back from the newest the durable record is (a sink behind its position
        // is recovery's to refuse).
        let doubt = newest.wrapping_sub(durable);
        if doubt == 0 || doubt > u32::MAX / 2 {
            return Ok(0);
        }
        let (mut keep, mut oldest, mut reached, mut ahead) = (None, newest, false, false);
        sink.recent(flash, |seq, record, adjacent| {
            // A record written after a commit the position journal lacks: the journals
            // disagree, which recovery refuses; nothing is voided.
            ahead |= record.covered > next;
            let back = newest.wrapping_sub(seq);
            if back <= doubt && !adjacent {
                keep = Some(seq);
            }
            (oldest, reached) = (seq, back >= doubt);
            !reached && !ahead
        })?;
        if ahead {
            return Ok(0);
        }
        // The walk ended before the durable record: a hole lies between (unless nothing
        // was ever committed and the walk went back to the journal's first record).
        let from_first = durable == 0 && oldest == crate::journal::FIRST_SEQ;
        if !(reached || from_first) {
            keep = Some(durable);
        }
        match keep {
            Some(keep) => Ok(sink.void_after(flash, keep)?),
            None => Ok(0),
        }
    }
}
