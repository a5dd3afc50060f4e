//! How a consumer makes its sinks durable: one type per persistence policy, each owning
//! its recovery (open), effect and commit steps, so the consumer never asks which policy
//! it runs.
//!
//! | policy | a store's record is written | the position lives in | recovery |
//! |---|---|---|---|
//! | [`EachEffect`] | after every applied or rejected event | the consumer's position journal | newest record, newest position |
//! | [`Checkpoint`] | at each checkpoint, with the position in it | the store's record | newest record |
//! | [`TwoPhase`] | prepared, then committed, at each checkpoint | both (the journal holds the decision) | resolves an in-doubt prepared record |
//!
//! The [`Store`] trait is defined here, beside the policies, and read at
//! [`crate::store`] with the dedup rules: a store names its policy and every policy is
//! generic over the store, so the two traits are one piece, and the engine's modules
//! import one another in one direction only (`core/tests/modules.rs`).
//!
//! A store names its policy as [`Store::Persist`]; a policy that needs more of the store
//! than its rule asks for it by trait: [`Checkpoint`] needs [`Positioned`], [`TwoPhase`]
//! needs [`TwoPhaseRecord`]. A store that names [`TwoPhase`] without being a
//! [`TwoPhaseRecord`] does not compile:
//!
//! ```compile_fail
//! use idem_core::log::Event;
//! use idem_core::persist::TwoPhase;
//! use idem_core::store::{Outcome, Store};
//!
//! /// Claims two-phase commit but has no prepare and no resolve.
//! #[derive(Debug, Clone)]
//! struct Careless;
//!
//! impl Store for Careless {
//!     type Payload = i64;
//!     type State = i64;
//!     type Error = ();
//!     type Rejections = ();
//!     type Persist = TwoPhase<Self>;
//!     const TAG: u32 = 1;
//!     fn check(&self, _: &i64, _: &Event<i64>) -> Result<Outcome, ()> {
//!         Ok(Outcome::Applied)
//!     }
//!     fn apply(&self, s: &mut i64, e: &Event<i64>) {
//!         *s += e.payload;
//!     }
//! }
//! ```
//!
//! Several sinks can share one position ([`Pair`]): each effect writes them one after the
//! other, so a crash can fall between the two writes ([`crate::consumer::Step::Between`]).

use core::fmt::Debug;

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::journal::{Journal, JournalError, Region, ZeroOver};
use crate::log::{Event, Offset};

/// What a store does with one delivered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Outcome {
    /// The effect changes the state.
    Applied,
    /// A duplicate: the state stays as it is.
    Skipped,
    /// The application refuses the event: the state stays as it is, the position moves
    /// past it, and the durable count of rejected events grows by one. Behind a dedup
    /// rule the rejection is remembered like an effect, so a replay is skipped and counted
    /// once; a store without one counts a replayed rejection again, as it applies a
    /// replayed event again (at-least-once).
    Rejected,
}

/// The durable count of events a store rejected, kept in the store's record: `u32` for a
/// store that can reject, `()` for one that never does (its record then carries no count,
/// not a byte). A `()` store that returns [`Outcome::Rejected`] stops the consumer with
/// [`crate::consumer::ConsumerError::Rejections`].
pub trait Rejections:
    Copy + Default + PartialEq + Debug + Send + Sync + Serialize + DeserializeOwned + MaxSize
{
    /// The count with one more, or `None` when it cannot hold one more.
    fn one_more(self) -> Option<Self>;

    /// The count.
    fn count(self) -> u32;
}

impl Rejections for () {
    fn one_more(self) -> Option<Self> {
        None
    }

    fn count(self) -> u32 {
        0
    }
}

impl Rejections for u32 {
    fn one_more(self) -> Option<Self> {
        self.checked_add(1)
    }

    fn count(self) -> u32 {
        self
    }
}

/// The application's rule over its durable state.
pub trait Store: Clone + Debug {
    /// What its events carry: the application's own type (decoded, and small enough to
    /// copy: the consumer hands each event on by value).
    type Payload: Copy;

    /// The whole durable state: one journal record.
    type State: Serialize + DeserializeOwned + MaxSize + Clone + Default + PartialEq + Debug;

    /// Why an event could not be decided now (a bounded memory that is full, a value past
    /// its range): the step stops and is tried again; nothing was written.
    type Error: Debug;

    /// The durable count of rejected events: `u32`, or `()` for a store that never
    /// rejects.
    type Rejections: Rejections;

    /// How the consumer makes the record durable: [`EachEffect`], [`Appended`],
    /// [`crate::persist::Checkpoint`] or [`crate::persist::TwoPhase`].
    type Persist: Persistence<Self>;

    /// Names the store's record in journal page headers, so one store never reads
    /// another's pages. The rule: a tag names one encoding of the store's record, which is
    /// its [`Store::State`] and its [`Store::Rejections`] (a count of `()` takes no byte, a
    /// `u32` does). Change it with every change to that encoding (a field added, removed,
    /// reordered or retyped; a count added), as a version: records of the old encoding are then refused as foreign
    /// ([`crate::journal::JournalError::Foreign`]), never decoded into the new type (a
    /// `(u8, u8)` record of the same size would read back as a `(u16,)`). Then open with
    /// [`crate::consumer::Consumer::open_or_reset`] to start over. The consumer mixes the
    /// layout's tag into it by XOR, and so does each dedup rule with a mark of its own
    /// (in the low byte): keep the store tags of one application apart above the low
    /// byte, leave the low byte 0 for the marks (`0x5E70_0100`), and give the application
    /// its own layout tag. (idem's payment tags, `0x5301_00xx`, predate this rule; only the
    /// combinations idem builds are kept apart.)
    const TAG: u32;

    /// Says what to do with `event`, reading the state only: apply it, skip it as a
    /// duplicate, or reject it.
    fn check(
        &self,
        state: &Self::State,
        event: &Event<Self::Payload>,
    ) -> Result<Outcome, Self::Error>;

    /// Applies `event`, which [`Store::check`] said to apply, to `state` in RAM.
    fn apply(&self, state: &mut Self::State, event: &Event<Self::Payload>);

    /// Notes in its dedup memory an event that [`Store::check`] rejected, so that a replay
    /// of it is skipped rather than counted twice. Only a dedup rule does anything here,
    /// and passes it on to the store it wraps; an application's store keeps the default,
    /// which does nothing, so its own state never changes for an event it rejected.
    fn remember(&self, state: &mut Self::State, event: &Event<Self::Payload>) {
        let _ = (state, event);
    }
}

/// Errors of the consumer: `E` is the flash's, `A` the store's
/// ([`Store::Error`]). After the store's error (and after
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

/// Where a consumer keeps its journals, and the tag that marks them as this
/// application's (a different tag, or another store, is refused as foreign).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The consumer's position journal (unused by a [`Checkpoint`] store).
    pub positions: Region,
    /// The store's journal ([`Pair`] splits it in two halves, one per sink).
    pub sink: Region,
    /// Mixed into every journal's tag: an application, scenario or image id.
    pub tag: u32,
}

impl Layout {
    /// Both journals side by side from page `first` of the flash `F`: `positions` pages
    /// for the position journal, then `sink` pages for the store's (at least 2 each; a
    /// [`Pair`] needs 4 for its sink, 2 per half). Made from page numbers and
    /// `ERASE_SIZE`, never from byte addresses worked out by hand.
    pub const fn from_pages<F: NorFlash>(first: u32, positions: u32, sink: u32, tag: u32) -> Self {
        let positions = Region::of_pages::<F>(first, positions);
        Self {
            positions,
            sink: positions.next::<F>(sink),
            tag,
        }
    }

    /// [`Layout::from_pages`] on an async flash (feature `async`), from its `ERASE_SIZE`:
    /// an async-only driver (embassy's) lays out its journals without a blocking
    /// `NorFlash` and without byte addresses worked out by hand.
    ///
    /// ```
    /// # #[cfg(all(feature = "async", feature = "testing"))] {
    /// use idem_core::persist::Layout;
    /// use idem_core::testing::flash::MemFlash;
    ///
    /// type Flash = MemFlash<4, 4096>; // your async chip driver here
    /// let layout = Layout::from_pages_async::<Flash>(0, 2, 2, 0x0001);
    /// assert_eq!((layout.positions.start, layout.sink.start, layout.sink.pages), (0, 8192, 2));
    /// assert_eq!(layout, Layout::from_pages::<Flash>(0, 2, 2, 0x0001));
    /// # }
    /// ```
    #[cfg(feature = "async")]
    pub const fn from_pages_async<F: embedded_storage_async::nor_flash::NorFlash>(
        first: u32,
        positions: u32,
        sink: u32,
        tag: u32,
    ) -> Self {
        let positions = Region::of_pages_async::<F>(first, positions);
        Self {
            positions,
            sink: positions.next_async::<F>(sink),
            tag,
        }
    }

    /// [`Layout::one_region`] on an async flash (feature `async`).
    #[cfg(feature = "async")]
    pub const fn one_region_async<F: embedded_storage_async::nor_flash::NorFlash>(
        first: u32,
        pages: u32,
        tag: u32,
    ) -> Self {
        let sink = Region::of_pages_async::<F>(first, pages);
        Self {
            positions: Region {
                start: sink.start,
                pages: 0,
            },
            sink,
            tag,
        }
    }

    /// One journal of `pages` pages from page `first` of the flash `F`, for a store whose
    /// state carries its own position ([`Checkpoint`], the atomic checkpoint): 2 pages
    /// where two journals take 4. A store that needs the position journal refuses this
    /// layout at [`crate::consumer::Consumer::open`] (`JournalError::BadRegion`: its
    /// position region has no pages).
    pub const fn one_region<F: NorFlash>(first: u32, pages: u32, tag: u32) -> Self {
        let sink = Region::of_pages::<F>(first, pages);
        Self {
            positions: Region {
                start: sink.start,
                pages: 0,
            },
            sink,
            tag,
        }
    }
}

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
struct CoveredRef<'a, T, C> {
    covered: Offset,
    rejected: C,
    state: &'a T,
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
struct CountedRef<'a, T, C> {
    state: &'a T,
    rejected: C,
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

const POSITIONS_TAG: u32 = 0x5001_0000;

/// The tag of the position journal of a consumer laid out by `layout`.
pub const fn positions_tag(layout: &Layout) -> u32 {
    POSITIONS_TAG ^ layout.tag
}

/// The tag of the journal of store `S` laid out by `layout`.
pub const fn sink_tag<S: Store>(layout: &Layout) -> u32 {
    S::TAG ^ layout.tag
}

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
pub fn migrate_each<Old, New, F>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> Result<bool, JournalError<F::Error>>
where
    Old: Store<Persist = EachEffect<Old>>,
    New: Store<Persist = EachEffect<New>, Rejections = Old::Rejections>,
    F: NorFlash,
{
    const {
        assert!(
            Old::TAG != New::TAG,
            "a new encoding takes a new Store::TAG"
        )
    }
    not_ours(
        Journal::<EachRecord<New>>::open_migrating(
            flash,
            layout.sink,
            sink_tag::<New>(layout),
            sink_tag::<Old>(layout),
            each_record::<Old, New>(migrate),
        )
        .map(|(_, _, migrated)| migrated),
    )
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

/// `migrate` over an [`EachEffect`] record: the state migrated, the position and the
/// count kept.
fn each_record<Old: Store, New: Store<Rejections = Old::Rejections>>(
    migrate: impl FnOnce(Old::State) -> New::State,
) -> impl FnOnce(EachRecord<Old>) -> EachRecord<New> {
    |old| Covered {
        covered: old.covered,
        rejected: old.rejected,
        state: migrate(old.state),
    }
}

/// [`migrate_each`] on an async flash (feature `async`).
#[cfg(feature = "async")]
pub async fn migrate_each_async<Old, New, F>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> Result<bool, JournalError<F::Error>>
where
    Old: Store<Persist = EachEffect<Old>>,
    New: Store<Persist = EachEffect<New>, Rejections = Old::Rejections>,
    F: embedded_storage_async::nor_flash::NorFlash,
{
    const {
        assert!(
            Old::TAG != New::TAG,
            "a new encoding takes a new Store::TAG"
        )
    }
    not_ours(
        Journal::<EachRecord<New>>::open_migrating_async(
            flash,
            layout.sink,
            sink_tag::<New>(layout),
            sink_tag::<Old>(layout),
            each_record::<Old, New>(migrate),
        )
        .await
        .map(|(_, _, migrated)| migrated),
    )
}

/// Migrates the journal of an atomic-checkpoint store ([`Checkpoint`]) from `Old`'s
/// encoding to `New`'s, as [`migrate_each`] does for [`EachEffect`]: call it at every
/// boot, before [`crate::consumer::Consumer::open`]. The newest record's state goes
/// through `migrate`; the position it carries ([`Positioned::position`]) is set in the
/// migrated state whatever `migrate` did with it, and the count of rejected events is
/// kept. Its effects since that checkpoint were never durable, and replay from it as
/// after any reset. A cut anywhere leaves the old record or the new one
/// ([`Journal::open_migrating`]). Chain it as [`migrate_each`]: one call per old version,
/// each to the current one. `Ok(true)` when this call migrated.
pub fn migrate_checkpoint<Old, New, F>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> Result<bool, JournalError<F::Error>>
where
    Old: Positioned,
    New: Positioned<Rejections = Old::Rejections>,
    F: NorFlash,
{
    blocking::migrate_checkpoint::<Old, New, F>(flash, layout, migrate)
}

/// [`migrate_checkpoint`] on an async flash (feature `async`).
#[cfg(feature = "async")]
pub async fn migrate_checkpoint_async<Old, New, F>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> Result<bool, JournalError<F::Error>>
where
    Old: Positioned,
    New: Positioned<Rejections = Old::Rejections>,
    F: embedded_storage_async::nor_flash::NorFlash,
{
    asynch::migrate_checkpoint::<Old, New, F>(flash, layout, migrate).await
}

/// Migrates the journal of a two-phase store ([`TwoPhase`]) from `Old`'s encoding to
/// `New`'s: call it at every boot, before [`crate::consumer::Consumer::open`]. A
/// prepared record in doubt is first resolved by the decision in the position journal,
/// as recovery would (forward if the position was committed, back if not); the resolved
/// state goes through `migrate` and is written committed at the same position
/// ([`TwoPhaseRecord::prepare`] then [`TwoPhaseRecord::resolve`]), so no record in doubt
/// crosses the update and the position journal is left as it is. A cut anywhere leaves
/// the old record or the new one ([`Journal::open_migrating`]). Chain it as
/// [`migrate_each`]. `Ok(true)` when this call migrated.
pub fn migrate_two_phase<Old, New, F>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> Result<bool, JournalError<F::Error>>
where
    Old: TwoPhaseRecord,
    New: TwoPhaseRecord<Rejections = Old::Rejections>,
    F: NorFlash,
{
    blocking::migrate_two_phase::<Old, New, F>(flash, layout, migrate)
}

/// [`migrate_two_phase`] on an async flash (feature `async`).
#[cfg(feature = "async")]
pub async fn migrate_two_phase_async<Old, New, F>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> Result<bool, JournalError<F::Error>>
where
    Old: TwoPhaseRecord,
    New: TwoPhaseRecord<Rejections = Old::Rejections>,
    F: embedded_storage_async::nor_flash::NorFlash,
{
    asynch::migrate_two_phase::<Old, New, F>(flash, layout, migrate).await
}

/// A two-phase record resolved by the decision `decided` (the position journal's next
/// offset), as recovery resolves it: its state and count of rejected events.
fn resolved<S: TwoPhaseRecord>(
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

/// What recovery did with a prepared (in-doubt) two-phase record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The consumer's journal held the decision: the prepared values were kept and the
    /// consumer resumes at `next`.
    RolledForward {
        /// The next offset to read.
        next: Offset,
    },
    /// No decision was written: the last committed values were kept and the consumer
    /// resumes at `next`, replaying the batch.
    RolledBack {
        /// The next offset to read.
        next: Offset,
    },
}

/// How far a commit got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A two-phase store's prepared record is durable; the decision is not.
    Prepared,
    /// The position is durable.
    Committed,
}

/// A store that keeps the consumer's position inside its own record ([`Checkpoint`]).
pub trait Positioned: Store {
    /// The next offset to read, as of the record (0: nothing committed).
    fn position(state: &Self::State) -> Offset;
    /// Records the next offset to read.
    fn set_position(state: &mut Self::State, next: Offset);
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

/// A persistence policy for the store `S`: the RAM it needs (journal cursors), and its
/// three flash steps, recovery, the effect and the commit, in each build
/// ([`BlockingPolicy`], and with feature `async` `AsyncPolicy`: one source, see
/// `core/src/persist/io.rs`). idem's four policies are the ones there are: [`EachEffect`],
/// [`Appended`], [`Checkpoint`] and [`TwoPhase`].
pub trait Persistence<S: Store>: Sized + Clone + Debug + PolicyIo<S> {
    /// Whether effects reach flash only at a commit (the store's record carries the
    /// position): effects between checkpoints live in RAM and vanish at a crash.
    const BATCHED: bool;
    /// Whether the consumer's own position journal is used.
    const POSITION_JOURNAL: bool;
    /// The record of the store's journal.
    type Record: Serialize + DeserializeOwned + MaxSize + Debug;

    /// Journal records appended since the policy was opened.
    fn records_written(&self) -> u64;

    /// What recovery did with a record in doubt, if it found one.
    fn resolution(&self) -> Option<Resolution> {
        None
    }

    /// Before recovery, on a storage that can keep a later write and lose an earlier one
    /// (a file under a page cache, synced only at commits): voids the store's records
    /// that follow a hole after the durable position, and returns how many
    /// ([`Appended`]; the others rebuild from one record and void nothing).
    fn void_in_doubt<F: ZeroOver>(
        _flash: &mut F,
        _layout: &Layout,
    ) -> Result<u32, ConsumerError<F::Error, S::Error>> {
        Ok(0)
    }
}

/// The flash steps every policy has: the blocking ones, and with feature `async` the
/// async ones too.
#[cfg(not(feature = "async"))]
pub trait PolicyIo<S: Store>: BlockingPolicy<S> {}
#[cfg(not(feature = "async"))]
impl<S: Store, P: BlockingPolicy<S>> PolicyIo<S> for P {}
/// The flash steps every policy has: the blocking ones, and with feature `async` the
/// async ones too.
#[cfg(feature = "async")]
pub trait PolicyIo<S: Store>: BlockingPolicy<S> + AsyncPolicy<S> {}
#[cfg(feature = "async")]
impl<S: Store, P: BlockingPolicy<S> + AsyncPolicy<S>> PolicyIo<S> for P {}

#[cfg(feature = "async")]
pub use asynch::{Drive as AsyncSinks, Policy as AsyncPolicy};
pub use blocking::{Drive as BlockingSinks, Policy as BlockingPolicy};

/// The flash steps over `embedded_storage`'s blocking `NorFlash`.
mod blocking {
    use super::*;
    use crate::io::blocking::*;
    use crate::journal::blocking as journal_io;
    include!("persist/io.rs");
}

/// The flash steps over `embedded_storage_async`'s `NorFlash`.
// `io!` and `body!` spell what `async fn` would: one source for both builds.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
mod asynch {
    use super::*;
    use crate::io::asynch::*;
    use crate::journal::asynch as journal_io;
    include!("persist/io.rs");
}

/// A store's journal and its newest record (the default state on blank flash).
type OpenSink<R> = (Journal<R>, R);

/// Checks one [`EachEffect`] sink's journal against the position journal.
fn cross_check<R, E, A>(
    sink: u8,
    journal: &Journal<R>,
    covered: Offset,
    position: &Position,
) -> Result<(), ConsumerError<E, A>>
where
    R: Serialize + DeserializeOwned + MaxSize,
{
    let newest = journal.newest_seq().unwrap_or(0);
    let committed = position.sinks[usize::from(sink)];
    if newest < committed {
        return Err(ConsumerError::Disagree(Disagreement::SinkBehind {
            sink,
            newest,
            committed,
        }));
    }
    if covered > position.next {
        return Err(ConsumerError::Disagree(Disagreement::PositionBehind {
            resume_at: position.next,
            covered,
        }));
    }
    Ok(())
}

/// A store journal and the consumer's position journal, committed one after the other
/// (the policies that write the store before the position: [`EachEffect`], [`Appended`]).
#[derive(Debug, Clone)]
struct SinkThenPosition<R> {
    sink: Journal<R>,
    positions: Journal<Position>,
    /// The durable position (next offset to read).
    committed: Offset,
}

impl<R: Serialize + DeserializeOwned + MaxSize> SinkThenPosition<R> {
    fn records_written(&self) -> u64 {
        self.sink.appended() + self.positions.appended()
    }
}

/// The record [`EachEffect`] writes for the store `S`.
pub type EachRecord<S> = Covered<<S as Store>::State, <S as Store>::Rejections>;

/// The store's record is written after every applied or rejected event; the position is
/// committed in the consumer's own journal every K events. Each store record carries the
/// position committed when it was written, and each position record the store journal's
/// newest record, so recovery refuses journals that one-sided damage has put out of step.
#[derive(Debug, Clone)]
pub struct EachEffect<S: Store>(SinkThenPosition<EachRecord<S>>);

impl<S: Store> Persistence<S> for EachEffect<S> {
    const BATCHED: bool = false;
    const POSITION_JOURNAL: bool = true;
    type Record = EachRecord<S>;

    fn records_written(&self) -> u64 {
        self.0.records_written()
    }
}

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
pub struct Appended<S: Appendable>(SinkThenPosition<AppendedRecord<S>>);

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

/// The record [`Checkpoint`] writes for the store `S`.
pub type CheckpointRecord<S> = Counted<<S as Store>::State, <S as Store>::Rejections>;

/// An atomic checkpoint: value, position and the count of rejected events in one record,
/// written at each checkpoint. Effects in between stay in RAM and are replayed after a
/// crash.
#[derive(Debug, Clone)]
pub struct Checkpoint<S: Store> {
    sink: Journal<CheckpointRecord<S>>,
}

impl<S: Positioned> Persistence<S> for Checkpoint<S> {
    const BATCHED: bool = true;
    const POSITION_JOURNAL: bool = false;
    type Record = CheckpointRecord<S>;

    fn records_written(&self) -> u64 {
        self.sink.appended()
    }
}

/// The record [`TwoPhase`] writes for the store `S`.
pub type TwoPhaseRecordOf<S> = Prepared<<S as Store>::State, <S as Store>::Rejections>;

/// Two-phase commit at each checkpoint: a prepared record (new value and position, and
/// the last committed ones), then the position in the consumer's journal (the decision),
/// then the committed record. Recovery resolves a prepared record by the decision:
/// forward if the position was committed, back if not.
#[derive(Debug, Clone)]
pub struct TwoPhase<S: Store> {
    sink: Journal<TwoPhaseRecordOf<S>>,
    positions: Journal<Position>,
    /// The commit whose prepared record is already written.
    prepared: Option<Offset>,
    /// Events rejected as of the last commit.
    committed_rejected: S::Rejections,
    /// What recovery did with a prepared record it found.
    resolved: Option<Resolution>,
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

/// What recovery hands the consumer: the policy's RAM `D`, the state `T` and the count
/// of rejected events `C` (a store's, or a pair of sinks'), and the next offset to read.
#[derive(Debug, Clone)]
pub struct Recovered<D, T, C> {
    /// The policy's RAM (journal cursors).
    pub durable: D,
    /// The state.
    pub state: T,
    /// The durable count of rejected events.
    pub rejected: C,
    /// The next offset to read.
    pub next: Offset,
}

/// What recovery of the store `S` under the policy `D` hands the consumer.
pub type StoreRecovered<D, S> = Recovered<D, <S as Store>::State, <S as Store>::Rejections>;

/// What recovery of the sinks `K` hands the consumer.
pub type SinksRecovered<K> =
    Recovered<<K as Sinks>::Durable, <K as Sinks>::State, <K as Sinks>::Rejections>;

/// What a consumer drives: one store, or several sinks sharing one position. Every
/// [`Store`] is a set of one.
pub trait Sinks: Clone + Debug {
    /// What the events carry.
    type Payload: Copy;
    /// The sinks' state in RAM.
    type State: Clone + PartialEq + Debug;
    /// Why a sink could not decide an event now.
    type Error: Debug;
    /// The durable count of rejected events.
    type Rejections: Rejections;
    /// The persistence policy's RAM (journal cursors).
    type Durable: Clone + Debug;
    /// Whether effects reach flash only at a commit ([`Persistence::BATCHED`]).
    const BATCHED: bool;
    /// Whether the consumer's position journal is used.
    const POSITION_JOURNAL: bool;
    /// How many sinks each effect writes, one after the other.
    const WRITES: usize;

    /// Journal records appended since the sinks were opened.
    fn records_written(durable: &Self::Durable) -> u64;

    /// What recovery did with a record in doubt ([`Persistence::resolution`]).
    fn resolution(_durable: &Self::Durable) -> Option<Resolution> {
        None
    }

    /// [`Persistence::void_in_doubt`] for the sinks: call it before
    /// [`crate::consumer::Consumer::open`] on a storage that can reorder writes, and make
    /// what it wrote durable before the consumer writes.
    fn void_in_doubt<F: ZeroOver>(
        _flash: &mut F,
        _layout: &Layout,
    ) -> Result<u32, ConsumerError<F::Error, Self::Error>> {
        Ok(0)
    }
}

/// `store`'s verdict on `event`, applied to `state` in RAM: the application's state
/// changes only when it is applied; a rejection is counted and noted by the dedup rule.
/// Nothing changes when it is an error.
// Always inlined: each caller is the one write of its store, and out of line it cost a
// Cortex-M0 image about 650 bytes of calls and spills (BENCHMARKS.md, "Firmware size").
#[inline(always)]
fn decide<S: Store, E>(
    store: &S,
    state: &mut S::State,
    rejected: &mut S::Rejections,
    event: &Event<S::Payload>,
) -> Result<Outcome, ConsumerError<E, S::Error>> {
    let outcome = store.check(state, event).map_err(ConsumerError::Store)?;
    match outcome {
        Outcome::Applied => store.apply(state, event),
        Outcome::Rejected => {
            *rejected = rejected.one_more().ok_or(ConsumerError::Rejections {
                offset: event.offset,
            })?;
            store.remember(state, event);
        }
        Outcome::Skipped => {}
    }
    Ok(outcome)
}

impl<S: Store> Sinks for S {
    type Payload = S::Payload;
    type State = S::State;
    type Error = S::Error;
    type Rejections = S::Rejections;
    type Durable = S::Persist;
    const BATCHED: bool = <S::Persist as Persistence<S>>::BATCHED;
    const POSITION_JOURNAL: bool = <S::Persist as Persistence<S>>::POSITION_JOURNAL;
    const WRITES: usize = 1;

    fn records_written(durable: &S::Persist) -> u64 {
        durable.records_written()
    }

    fn resolution(durable: &S::Persist) -> Option<Resolution> {
        durable.resolution()
    }

    fn void_in_doubt<F: ZeroOver>(
        flash: &mut F,
        layout: &Layout,
    ) -> Result<u32, ConsumerError<F::Error, S::Error>> {
        <S::Persist as Persistence<S>>::void_in_doubt(flash, layout)
    }
}

/// Two sinks written after every effect, one after the other, sharing one position:
/// the first sink's journal in the first half of [`Layout::sink`], the second's in the
/// second half. Neither rejects (their count is `()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair<A, B> {
    /// Written first.
    pub first: A,
    /// Written second.
    pub second: B,
    views: bool,
}

impl<A, B> Pair<A, B> {
    /// Two independent sinks side by side (the board demo's naive and offset-stamped).
    pub const fn side_by_side(first: A, second: B) -> Self {
        Self {
            first,
            second,
            views: false,
        }
    }

    /// Two views of one fact (a total and an index): sinks that must agree, so a
    /// checker names their disagreement.
    pub const fn views(first: A, second: B) -> Self {
        Self {
            first,
            second,
            views: true,
        }
    }

    /// Whether the two are views of one fact ([`Pair::views`]).
    pub const fn are_views(&self) -> bool {
        self.views
    }
}

/// [`Pair`]'s RAM: both sinks' journals and the shared position journal.
#[derive(Debug, Clone)]
pub struct PairJournals<A: Store, B: Store> {
    first: Journal<EachRecord<A>>,
    second: Journal<EachRecord<B>>,
    positions: Journal<Position>,
    /// The durable position (next offset to read).
    committed: Offset,
}

impl<A, B> Sinks for Pair<A, B>
where
    A: Store<Persist = EachEffect<A>, Rejections = ()>,
    B: Store<Persist = EachEffect<B>, Rejections = (), Payload = A::Payload, Error = A::Error>,
{
    type Payload = A::Payload;
    type State = (A::State, B::State);
    type Error = A::Error;
    type Rejections = ();
    type Durable = PairJournals<A, B>;
    const BATCHED: bool = false;
    const POSITION_JOURNAL: bool = true;
    const WRITES: usize = 2;

    fn records_written(durable: &Self::Durable) -> u64 {
        durable.first.appended() + durable.second.appended() + durable.positions.appended()
    }
}
