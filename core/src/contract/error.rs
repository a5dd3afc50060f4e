//! What stops a consumer: its errors, and the disagreements between its journals that
//! recovery refuses.

use crate::journal::JournalError;
use crate::log::Offset;

/// Errors of the consumer: `E` is the flash's, `A` the store's
/// ([`Store::Error`](crate::store::Store::Error)). After the store's error (and after
/// [`ConsumerError::Rejections`]) nothing changed and nothing was written: the next step
/// tries the same event. After a journal error RAM may be ahead of the flash (a
/// two-phase commit may have written its decision and not its committed record): open
/// the consumer again from the flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConsumerError<E, A> {
    /// A journal failed (including the flash under it).
    Journal(JournalError<E>),
    /// The store could not decide an event (a bounded memory is full): the next step
    /// tries it again.
    Store(A),
    /// Recovery found the consumer's journals out of step (damage, not a crash).
    Disagree(Disagreement),
    /// An appending store's journal region keeps `records` records beside the page it
    /// reclaims, fewer than the `needed` its state is rebuilt from.
    Region {
        /// Records the region keeps while one page is reclaimed.
        records: u32,
        /// Records the store rebuilds its state from, at most.
        needed: u32,
    },
    /// The store rejected the event at `offset`, but its count of rejected events cannot
    /// hold one more (a store whose count is `()` never rejects).
    Rejections {
        /// The event's offset.
        offset: Offset,
    },
    /// An earlier step failed in its journal (the flash), which can leave RAM ahead of the
    /// flash: this consumer steps no more. Open it again from the flash.
    Reopen,
}

impl<E, A> From<JournalError<E>> for ConsumerError<E, A> {
    fn from(e: JournalError<E>) -> Self {
        Self::Journal(e)
    }
}

impl<E: core::fmt::Display, A: core::fmt::Display> core::fmt::Display for ConsumerError<E, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Journal(e) => core::fmt::Display::fmt(e, f),
            Self::Store(e) => core::fmt::Display::fmt(e, f),
            Self::Disagree(e) => core::fmt::Display::fmt(e, f),
            Self::Region { records, needed } => write!(
                f,
                "the store's journal keeps {records} records while it reclaims a page, fewer than the {needed} its state is rebuilt from: give it more pages"
            ),
            Self::Rejections { offset } => write!(
                f,
                "the store rejected the event at offset {offset}, but its count of rejected events cannot hold one more"
            ),
            Self::Reopen => f.write_str(
                "an earlier step failed in its journal, which can leave RAM ahead of the flash: open the consumer again from the flash",
            ),
        }
    }
}

impl<E, A> core::error::Error for ConsumerError<E, A>
where
    E: core::fmt::Display + core::fmt::Debug,
    A: core::fmt::Display + core::fmt::Debug,
{
}

/// Why recovery refused to go on: the journals of one consumer disagree, which no crash
/// can cause (a crash only ever loses the write in progress). Nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Disagreement {
    /// Sink `sink`'s journal ends at record `newest` (0: none), older than record
    /// `committed`, which it held when the position was committed: store records were
    /// lost.
    SinkBehind {
        /// Which sink (0 or 1).
        sink: u8,
        /// Sequence number of its newest readable record.
        newest: u32,
        /// Sequence number the position journal recorded.
        committed: u32,
    },
    /// The position journal resumes at `resume_at`, but a sink record was written
    /// after position `covered` had been committed: position records were lost.
    PositionBehind {
        /// The next offset to read, as the position journal says.
        resume_at: Offset,
        /// The committed position the newest sink record carries.
        covered: Offset,
    },
    /// An appending store's state is rebuilt from up to `needed` of its newest records,
    /// but the `found` the journal holds in sequence do not make it: store records were
    /// lost.
    RecordsLost {
        /// Records the state is rebuilt from.
        needed: u32,
        /// Records found, newest first, without a gap.
        found: u32,
    },
    /// A two-phase store's committed position and the consumer's decision differ, and
    /// no prepared record explains it.
    TwoPhase {
        /// The position the store's record says is committed.
        store: Offset,
        /// The position the consumer's journal says was decided.
        decided: Offset,
    },
}

impl core::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::SinkBehind {
                sink,
                newest,
                committed,
            } => write!(
                f,
                "store journal {sink} ends at record {newest}, but the committed position recorded record {committed}: store records were lost"
            ),
            Self::PositionBehind { resume_at, covered } => write!(
                f,
                "the position journal resumes at offset {resume_at}, but the store holds a record written after offset {covered} was committed: position records were lost"
            ),
            Self::RecordsLost { needed, found } => write!(
                f,
                "the store's state is rebuilt from up to {needed} of its newest records, but the {found} the journal holds in sequence do not make it: store records were lost"
            ),
            Self::TwoPhase { store, decided } => write!(
                f,
                "the two-phase store's record is committed at offset {store} but the consumer's journal decided offset {decided}"
            ),
        }
    }
}

impl core::error::Error for Disagreement {}
