//! The records the policies write: the position journal's, and each policy's store
//! record around the store's state.

use super::*;

/// The position journal's record: the next offset to read, and how far each sink's
/// journal had got when it was committed (the sequence number of its newest record, 0
/// for none), so recovery can tell a sink journal that lost records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct Position {
    /// Next offset to read.
    pub next: Offset,
    /// The newest record of each sink's journal at the commit (a single store uses the
    /// first).
    pub sinks: [u32; 2],
}

/// A sink's record under [`EachEffect`] and [`Appended`]: the store's state (or delta),
/// the durable count of rejected events, and the position the consumer had committed
/// when it was written (the next offset to read), so recovery can tell a position journal
/// that lost records. No store reads the position: the naive store still replays.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Covered<T, C = ()> {
    /// The committed position when the record was written.
    pub covered: Offset,
    /// Events rejected so far ([`Store::Rejections`]; `()` takes no byte).
    pub rejected: C,
    /// The store's state.
    pub state: T,
}

/// The count of rejected events is left out of a record's `Debug` when the store never
/// rejects (its count is `()`).
fn count_field<C: Debug>(d: &mut core::fmt::DebugStruct<'_, '_>, name: &str, c: &C) {
    if size_of::<C>() > 0 {
        d.field(name, c);
    }
}

impl<T: Debug, C: Debug> Debug for Covered<T, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("Covered");
        d.field("covered", &self.covered);
        count_field(&mut d, "rejected", &self.rejected);
        d.field("state", &self.state).finish()
    }
}

impl<T: Debug, C: Debug> Debug for Counted<T, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("Counted");
        d.field("state", &self.state);
        count_field(&mut d, "rejected", &self.rejected);
        d.finish()
    }
}

impl<T: Debug, C: Debug> Debug for Prepared<T, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("Prepared");
        d.field("state", &self.state);
        count_field(&mut d, "rejected", &self.rejected);
        count_field(&mut d, "committed_rejected", &self.committed_rejected);
        d.finish()
    }
}

/// [`Covered`] with the state borrowed: encodes exactly as a `Covered<T, C>`.
#[derive(Serialize)]
pub(super) struct CoveredRef<'a, T, C> {
    pub(super) covered: Offset,
    pub(super) rejected: C,
    pub(super) state: &'a T,
}

impl<T: MaxSize, C: MaxSize> MaxSize for Covered<T, C> {
    const POSTCARD_MAX_SIZE: usize =
        Offset::POSTCARD_MAX_SIZE + C::POSTCARD_MAX_SIZE + T::POSTCARD_MAX_SIZE;
}

/// A record that holds the position itself ([`Checkpoint`]): the store's state and the
/// durable count of rejected events.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted<T, C = ()> {
    /// The store's state.
    pub state: T,
    /// Events rejected as of this record.
    pub rejected: C,
}

impl<T: MaxSize, C: MaxSize> MaxSize for Counted<T, C> {
    const POSTCARD_MAX_SIZE: usize = T::POSTCARD_MAX_SIZE + C::POSTCARD_MAX_SIZE;
}

/// [`Counted`] with the state borrowed: encodes exactly as a `Counted<T, C>`.
#[derive(Serialize)]
pub(super) struct CountedRef<'a, T, C> {
    pub(super) state: &'a T,
    pub(super) rejected: C,
}

/// A two-phase store's record ([`TwoPhase`]): the store's state, the count of rejected
/// events, and the count as of the last commit, restored with the state when a prepared
/// record is rolled back.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared<T, C = ()> {
    /// The store's state.
    pub state: T,
    /// Events rejected as of this record.
    pub rejected: C,
    /// Events rejected as of the last commit.
    pub committed_rejected: C,
}

impl<T: MaxSize, C: MaxSize> MaxSize for Prepared<T, C> {
    const POSTCARD_MAX_SIZE: usize = T::POSTCARD_MAX_SIZE + 2 * C::POSTCARD_MAX_SIZE;
}
