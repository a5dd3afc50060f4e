//! [`EachEffect`]: the store's whole record after every effect, and its migration.

use super::*;

crate::io::doors! { in self;
    /// Migrates the store journal of `layout` from the store `Old`'s encoding (its
    /// [`Store::TAG`]) to `New`'s, for a firmware update that changed the store's state:
    /// call it at every boot, before [`crate::consumer::Consumer::open`]. Where the journal
    /// still holds `Old`'s records, its newest state goes through `migrate` and becomes
    /// `New`'s first record, with the same committed position and count of rejected events
    /// ([`Journal::open_migrating`]: a power cut anywhere leaves the old record or the new
    /// one). The position journal is left as it is, and the consumer resumes where it was.
    /// `Ok(true)` when this call migrated.
    ///
    /// For stores that keep their whole state in their newest record and commit with
    /// [`EachEffect`] (an [`crate::store::OffsetStamp`], for one): a `migrate` over
    /// [`crate::store::Stamped`] keeps the stamp. The other policies have theirs:
    /// [`migrate_checkpoint`], [`migrate_two_phase`], and for the message-id window
    /// ([`Appended`]) [`crate::store::migrate_window`].
    ///
    /// Chain the steps across versions: at every boot call each step in order (v1 to v2,
    /// then v2 to v3), or each old version straight to the current one. A step that finds a
    /// third encoding in the region (a later version, or another store) does nothing and
    /// says `Ok(false)`; the consumer's open still refuses a journal that is not its own.
    ///
    /// A new encoding takes a new [`Store::TAG`]: a migration from a store to one of the
    /// same tag stops the build (`E0080`, "a new encoding takes a new Store::TAG"), as
    /// [`migrate_checkpoint`], [`migrate_two_phase`] and
    /// [`crate::store::migrate_window`] do:
    ///
    /// ```compile_fail,E0080
    /// use idem_core::log::Event;
    /// use idem_core::persist::{EachEffect, Layout, migrate_each};
    /// use idem_core::store::{Outcome, Store};
    /// use idem_core::testing::flash::MemFlash;
    ///
    /// #[derive(Clone, Debug)]
    /// struct Setpoint<const TAG: u32>;
    ///
    /// impl<const TAG: u32> Store for Setpoint<TAG> {
    ///     type Payload = u8;
    ///     type State = u8;
    ///     type Error = ();
    ///     type Rejections = ();
    ///     type Persist = EachEffect<Self>;
    ///     const TAG: u32 = TAG;
    ///     fn check(&self, _: &u8, _: &Event<u8>) -> Result<Outcome, ()> {
    ///         Ok(Outcome::Applied)
    ///     }
    ///     fn apply(&self, s: &mut u8, e: &Event<u8>) {
    ///         *s = e.payload;
    ///     }
    /// }
    ///
    /// type Flash = MemFlash<4, 1024>;
    /// let layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
    /// // `Setpoint<0x5E70_0200>` builds; the same tag does not.
    /// migrate_each::<Setpoint<0x5E70_0100>, Setpoint<0x5E70_0100>, _>(
    ///     &mut Flash::new(),
    ///     &layout,
    ///     |s| s,
    /// )
    /// .unwrap();
    /// ```
    pub fn migrate_each | migrate_each_async [Old, New, F] flash F
        (flash: &mut F, layout: &Layout, migrate: impl FnOnce(Old::State) -> New::State)
        -> Result<bool, JournalError<F::Error>>
        where [
            Old: Store<Persist = EachEffect<Old>>,
            New: Store<Persist = EachEffect<New>, Rejections = Old::Rejections>,
        ]
        => migrate_each::<Old, New, F>(flash, layout, migrate);
}

/// A migration step's answer where the region holds a third encoding (a later version
/// in a chain of steps, or another store): nothing for this step to do, `Ok(false)`.
/// [`crate::consumer::Consumer::open`] still names a journal that is not the store's.
pub(crate) fn not_ours<E>(
    migrated: Result<bool, JournalError<E>>,
) -> Result<bool, JournalError<E>> {
    match migrated {
        Err(JournalError::Foreign { .. }) => Ok(false),
        other => other,
    }
}

/// Stops the build where a migration's new store has its old store's tag.
pub(crate) const fn new_tag(old: u32, new: u32) {
    assert!(old != new, "a new encoding takes a new Store::TAG");
}

/// `migrate` over an [`EachEffect`] record: the state migrated, the position and the
/// count kept.
pub(super) fn each_record<Old: Store, New: Store<Rejections = Old::Rejections>>(
    migrate: impl FnOnce(Old::State) -> New::State,
) -> impl FnOnce(EachRecord<Old>) -> EachRecord<New> {
    |old| Covered {
        covered: old.covered,
        rejected: old.rejected,
        state: migrate(old.state),
    }
}

/// The record [`EachEffect`] writes for the store `S`.
pub type EachRecord<S> = Covered<<S as Store>::State, <S as Store>::Rejections>;

/// The store's record is written after every applied or rejected event; the position is
/// committed in the consumer's own journal every K events. Each store record carries the
/// position committed when it was written, and each position record the store journal's
/// newest record, so recovery refuses journals that one-sided damage has put out of step.
#[derive(Debug, Clone)]
pub struct EachEffect<S: Store>(pub(super) SinkThenPosition<EachRecord<S>>);

impl<S: Store> Persistence<S> for EachEffect<S> {
    const BATCHED: bool = false;
    const POSITION_JOURNAL: bool = true;
    type Record = EachRecord<S>;

    fn records_written(&self) -> u64 {
        self.0.records_written()
    }
}
