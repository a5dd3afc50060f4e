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
use serde::{Deserialize, Serialize};

use crate::consumer::ConsumerError;
use crate::journal::{Journal, JournalError, Region};
use crate::log::{Event, Offset};
use crate::store::{Outcome, Rejections, Store};

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

/// A persistence policy for the store `S`: the RAM it needs (journal cursors) and its
/// three steps.
pub trait Persistence<S: Store>: Sized + Clone + Debug {
    /// Whether effects reach flash only at a commit (the store's record carries the
    /// position): effects between checkpoints live in RAM and vanish at a crash.
    const BATCHED: bool;
    /// Whether the consumer's own position journal is used.
    const POSITION_JOURNAL: bool;
    /// Whether the store's records must reach the flash in the order they were written
    /// (a storage that can reorder writes, a file under a page cache, must sync each one
    /// before the next): the state is rebuilt from several of them ([`Appended`]).
    const ORDERED: bool = false;
    /// The record of the store's journal.
    type Record: Serialize + serde::de::DeserializeOwned + MaxSize + Debug;

    /// Recovers from flash: the policy's RAM, the store's state, the count of rejected
    /// events and the next offset to read. Journals that disagree are refused before
    /// anything is written.
    fn open<F: NorFlash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>>;

    /// Makes the effect of `event` durable, if the policy writes one (`outcome` says
    /// whether the state changed or the event was rejected; `rejected` is the count after
    /// it). By default effects stay in RAM until the commit.
    fn effect<F: NorFlash>(
        &mut self,
        _flash: &mut F,
        _state: &S::State,
        _rejected: S::Rejections,
        _event: &Event<S::Payload>,
        _outcome: Outcome,
    ) -> Result<(), JournalError<F::Error>> {
        Ok(())
    }

    /// Makes the position `next` durable, or takes the next phase towards it.
    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>>;

    /// Journal records appended since [`Persistence::open`].
    fn records_written(&self) -> u64;

    /// What recovery did with a record in doubt, if it found one.
    fn resolution(&self) -> Option<Resolution> {
        None
    }
}

fn open_positions<F: NorFlash>(
    flash: &mut F,
    layout: &Layout,
) -> Result<(Journal<Position>, Position), JournalError<F::Error>> {
    let (j, p) = Journal::<Position>::open(flash, layout.positions, positions_tag(layout))?;
    Ok((
        j,
        p.unwrap_or(Position {
            next: 0,
            sinks: [0; 2],
        }),
    ))
}

/// A store's journal and its newest record (the default state on blank flash).
type OpenSink<R> = (Journal<R>, R);

fn open_sink<S: Store, R, F: NorFlash>(
    flash: &mut F,
    layout: &Layout,
    region: Region,
) -> Result<OpenSink<R>, JournalError<F::Error>>
where
    R: Serialize + serde::de::DeserializeOwned + MaxSize + Default,
{
    let (j, record) = Journal::<R>::open(flash, region, sink_tag::<S>(layout))?;
    Ok((j, record.unwrap_or_default()))
}

/// Checks one [`EachEffect`] sink's journal against the position journal.
fn cross_check<R, E, A>(
    sink: u8,
    journal: &Journal<R>,
    covered: Offset,
    position: &Position,
) -> Result<(), ConsumerError<E, A>>
where
    R: Serialize + serde::de::DeserializeOwned + MaxSize,
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

impl<R: Serialize + serde::de::DeserializeOwned + MaxSize> SinkThenPosition<R> {
    /// Commits `next`, recording the store journal's newest record beside it.
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        let sinks = [self.sink.newest_seq().unwrap_or(0), 0];
        self.positions.append(flash, &Position { next, sinks })?;
        self.committed = next;
        Ok(Phase::Committed)
    }

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

impl<S: Store> EachEffect<S> {
    fn append<F: NorFlash>(
        sink: &mut Journal<EachRecord<S>>,
        flash: &mut F,
        committed: Offset,
        rejected: S::Rejections,
        state: &S::State,
    ) -> Result<(), JournalError<F::Error>> {
        // Borrowed, not cloned: a large state (a message-id window) would cost more to
        // copy than to append.
        sink.append_view(
            flash,
            &CoveredRef {
                covered: committed,
                rejected,
                state,
            },
        )
    }
}

impl<S: Store> Persistence<S> for EachEffect<S> {
    const BATCHED: bool = false;
    const POSITION_JOURNAL: bool = true;
    type Record = EachRecord<S>;

    fn open<F: NorFlash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>> {
        let (sink, record) = open_sink::<S, EachRecord<S>, F>(flash, layout, sink)?;
        let (positions, position) = open_positions(flash, layout)?;
        cross_check(0, &sink, record.covered, &position)?;
        let committed = position.next;
        Ok(Recovered {
            durable: Self(SinkThenPosition {
                sink,
                positions,
                committed,
            }),
            state: record.state,
            rejected: record.rejected,
            next: committed,
        })
    }

    fn effect<F: NorFlash>(
        &mut self,
        flash: &mut F,
        state: &S::State,
        rejected: S::Rejections,
        _: &Event<S::Payload>,
        outcome: Outcome,
    ) -> Result<(), JournalError<F::Error>> {
        if outcome != Outcome::Skipped {
            Self::append(&mut self.0.sink, flash, self.0.committed, rejected, state)?;
        }
        Ok(())
    }

    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        _: &mut S::State,
        _: S::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        self.0.commit(flash, next)
    }

    fn records_written(&self) -> u64 {
        self.0.records_written()
    }
}

/// A store whose applied effects are appended as small records ([`Appended`]): its
/// state is rebuilt at recovery from its newest records instead of being written whole
/// with every effect.
pub trait Appendable: Store {
    /// What one applied effect appends, taken from the state right after it.
    type Delta: Serialize + serde::de::DeserializeOwned + MaxSize + Clone + Debug;
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
    const ORDERED: bool = true;
    type Record = AppendedRecord<S>;

    fn open<F: NorFlash>(
        flash: &mut F,
        layout: &Layout,
        region: Region,
    ) -> Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>> {
        let (sink, newest) =
            Journal::<AppendedRecord<S>>::open(flash, region, sink_tag::<S>(layout))?;
        let keeps = region.pages.saturating_sub(1) * sink.slots_per_page();
        if keeps < S::MAX_NEEDED {
            return Err(ConsumerError::Region {
                records: keeps,
                needed: S::MAX_NEEDED,
            });
        }
        let (positions, position) = open_positions(flash, layout)?;
        cross_check(
            0,
            &sink,
            newest.as_ref().map_or(0, |r| r.covered),
            &position,
        )?;
        let state = match &newest {
            None => S::State::default(),
            Some(newest) => {
                let (mut state, needed) = S::start(&newest.state);
                let mut found = 0;
                sink.recent(flash, |_, record, adjacent| {
                    // A record lost from the middle leaves slots between that no newer
                    // record says it stepped over (the journal tells writes cut short apart).
                    if found >= needed || !adjacent {
                        return false;
                    }
                    S::fold_back(&mut state, &record.state);
                    found += 1;
                    true
                })?;
                S::finish(state).ok_or(ConsumerError::Disagree(Disagreement::RecordsLost {
                    needed,
                    found,
                }))?
            }
        };
        let committed = position.next;
        Ok(Recovered {
            durable: Self(SinkThenPosition {
                sink,
                positions,
                committed,
            }),
            state,
            rejected: newest.map(|r| r.rejected).unwrap_or_default(),
            next: committed,
        })
    }

    fn effect<F: NorFlash>(
        &mut self,
        flash: &mut F,
        state: &S::State,
        rejected: S::Rejections,
        event: &Event<S::Payload>,
        outcome: Outcome,
    ) -> Result<(), JournalError<F::Error>> {
        if outcome != Outcome::Skipped {
            let seq = self.0.sink.newest_seq().map_or(1, |n| n.wrapping_add(1));
            self.0.sink.append(
                flash,
                &Covered {
                    covered: self.0.committed,
                    rejected,
                    state: S::delta(state, event, seq),
                },
            )?;
        }
        Ok(())
    }

    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        _: &mut S::State,
        _: S::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        self.0.commit(flash, next)
    }

    fn records_written(&self) -> u64 {
        self.0.records_written()
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

    fn open<F: NorFlash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>> {
        let (sink, record) = open_sink::<S, CheckpointRecord<S>, F>(flash, layout, sink)?;
        let next = S::position(&record.state);
        Ok(Recovered {
            durable: Self { sink },
            state: record.state,
            rejected: record.rejected,
            next,
        })
    }

    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        S::set_position(state, next);
        self.sink
            .append_view(flash, &CountedRef { state, rejected })?;
        Ok(Phase::Committed)
    }

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

    fn open<F: NorFlash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>> {
        let (sink, record) = open_sink::<S, TwoPhaseRecordOf<S>, F>(flash, layout, sink)?;
        let Prepared {
            mut state,
            mut rejected,
            committed_rejected,
        } = record;
        let (positions, decided) = open_positions(flash, layout)?;
        let decided = decided.next;
        // The decision is written between the prepared and the committed record: it is
        // the store's committed position, or the position a prepared record waits for.
        let store = S::position(&state);
        if decided != store && S::prepared(&state) != Some(decided) {
            return Err(ConsumerError::Disagree(Disagreement::TwoPhase {
                store,
                decided,
            }));
        }
        let prepared = S::prepared(&state);
        if let Some(target) = prepared {
            // The position journal holds the decision. The resolution stays in RAM:
            // until the next prepared record supersedes the one in doubt, every recovery
            // reads the same decision and resolves it the same way, so opening an image
            // never writes (a read-only `status` can recover a two-phase store).
            let commit = decided >= target;
            S::resolve(&mut state, commit);
            if !commit {
                rejected = committed_rejected;
            }
        }
        let next = S::position(&state);
        let resolved = prepared.map(|target| {
            if decided >= target {
                Resolution::RolledForward { next }
            } else {
                Resolution::RolledBack { next }
            }
        });
        Ok(Recovered {
            durable: Self {
                sink,
                positions,
                prepared: None,
                committed_rejected: rejected,
                resolved,
            },
            state,
            rejected,
            next,
        })
    }

    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        if self.prepared != Some(next) {
            let mut record = state.clone();
            S::prepare(&mut record, next);
            self.sink.append(
                flash,
                &Prepared {
                    state: record.clone(),
                    rejected,
                    committed_rejected: self.committed_rejected,
                },
            )?;
            *state = record;
            self.prepared = Some(next);
            return Ok(Phase::Prepared);
        }
        // The decision: once the position is durable, recovery rolls forward.
        self.positions.append(
            flash,
            &Position {
                next,
                sinks: [self.sink.newest_seq().unwrap_or(0), 0],
            },
        )?;
        S::resolve(state, true);
        self.committed_rejected = rejected;
        self.sink.append(
            flash,
            &Prepared {
                state: state.clone(),
                rejected,
                committed_rejected: rejected,
            },
        )?;
        self.prepared = None;
        Ok(Phase::Committed)
    }

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
    /// Whether a sink's records must reach the flash in order ([`Persistence::ORDERED`]).
    const ORDERED_SINK: bool = false;
    /// Whether the consumer's position journal is used.
    const POSITION_JOURNAL: bool;
    /// How many sinks each effect writes, one after the other.
    const WRITES: usize;

    /// Recovers the sinks and the next offset to read from flash.
    fn open<F: NorFlash>(
        &self,
        flash: &mut F,
        layout: &Layout,
    ) -> Result<SinksRecovered<Self>, ConsumerError<F::Error, Self::Error>>;

    /// Decides and applies `event` in sink number `sink` (`0..WRITES`), counts it in
    /// `rejected` if it was rejected, and makes it durable as the policy says.
    fn write<F: NorFlash>(
        &self,
        durable: &mut Self::Durable,
        flash: &mut F,
        state: &mut Self::State,
        rejected: &mut Self::Rejections,
        event: &Event<Self::Payload>,
        sink: usize,
    ) -> Result<Outcome, ConsumerError<F::Error, Self::Error>>;

    /// Commits the position `next` (or takes the next phase towards it).
    fn commit<F: NorFlash>(
        durable: &mut Self::Durable,
        flash: &mut F,
        state: &mut Self::State,
        rejected: Self::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>>;

    /// Journal records appended since [`Sinks::open`].
    fn records_written(durable: &Self::Durable) -> u64;

    /// What recovery did with a record in doubt ([`Persistence::resolution`]).
    fn resolution(_durable: &Self::Durable) -> Option<Resolution> {
        None
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
    const ORDERED_SINK: bool = <S::Persist as Persistence<S>>::ORDERED;
    const WRITES: usize = 1;

    fn open<F: NorFlash>(
        &self,
        flash: &mut F,
        layout: &Layout,
    ) -> Result<SinksRecovered<Self>, ConsumerError<F::Error, S::Error>> {
        S::Persist::open(flash, layout, layout.sink)
    }

    // Inlined on a host; out of line on bare metal, where each copy costs flash
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(not(target_os = "none"), inline)]
    #[cfg_attr(target_os = "none", inline(never))]
    fn write<F: NorFlash>(
        &self,
        durable: &mut S::Persist,
        flash: &mut F,
        state: &mut S::State,
        rejected: &mut S::Rejections,
        event: &Event<S::Payload>,
        _: usize,
    ) -> Result<Outcome, ConsumerError<F::Error, S::Error>> {
        let outcome = decide(self, state, rejected, event)?;
        durable.effect(flash, state, *rejected, event, outcome)?;
        Ok(outcome)
    }

    fn commit<F: NorFlash>(
        durable: &mut S::Persist,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        durable.commit(flash, state, rejected, next)
    }

    fn records_written(durable: &S::Persist) -> u64 {
        durable.records_written()
    }

    fn resolution(durable: &S::Persist) -> Option<Resolution> {
        durable.resolution()
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

    fn open<F: NorFlash>(
        &self,
        flash: &mut F,
        layout: &Layout,
    ) -> Result<SinksRecovered<Self>, ConsumerError<F::Error, A::Error>> {
        let half = layout.sink.pages / 2;
        let a = Region {
            start: layout.sink.start,
            pages: half,
        };
        let b = Region {
            start: layout.sink.start + half * F::ERASE_SIZE as u32,
            pages: layout.sink.pages - half,
        };
        let (first, sa) = open_sink::<A, EachRecord<A>, F>(flash, layout, a)?;
        let (second, sb) = open_sink::<B, EachRecord<B>, F>(flash, layout, b)?;
        let (positions, position) = open_positions(flash, layout)?;
        cross_check(0, &first, sa.covered, &position)?;
        cross_check(1, &second, sb.covered, &position)?;
        let committed = position.next;
        Ok(Recovered {
            durable: PairJournals {
                first,
                second,
                positions,
                committed,
            },
            state: (sa.state, sb.state),
            rejected: (),
            next: committed,
        })
    }

    fn write<F: NorFlash>(
        &self,
        durable: &mut Self::Durable,
        flash: &mut F,
        state: &mut Self::State,
        rejected: &mut (),
        event: &Event<A::Payload>,
        sink: usize,
    ) -> Result<Outcome, ConsumerError<F::Error, A::Error>> {
        let (outcome, appended) = match sink {
            0 => {
                let o = decide(&self.first, &mut state.0, rejected, event)?;
                let r = (o == Outcome::Applied).then(|| {
                    EachEffect::<A>::append(
                        &mut durable.first,
                        flash,
                        durable.committed,
                        (),
                        &state.0,
                    )
                });
                (o, r)
            }
            _ => {
                let o = decide(&self.second, &mut state.1, rejected, event)?;
                let r = (o == Outcome::Applied).then(|| {
                    EachEffect::<B>::append(
                        &mut durable.second,
                        flash,
                        durable.committed,
                        (),
                        &state.1,
                    )
                });
                (o, r)
            }
        };
        appended.transpose()?;
        Ok(outcome)
    }

    fn commit<F: NorFlash>(
        durable: &mut Self::Durable,
        flash: &mut F,
        _: &mut Self::State,
        _: (),
        next: Offset,
    ) -> Result<Phase, JournalError<F::Error>> {
        let sinks = [
            durable.first.newest_seq().unwrap_or(0),
            durable.second.newest_seq().unwrap_or(0),
        ];
        durable.positions.append(flash, &Position { next, sinks })?;
        durable.committed = next;
        Ok(Phase::Committed)
    }

    fn records_written(durable: &Self::Durable) -> u64 {
        durable.first.appended() + durable.second.appended() + durable.positions.appended()
    }
}
