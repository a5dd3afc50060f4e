//! What a consumer drives ([`Sinks`]): one store, or a [`Pair`] sharing one position,
//! and what recovery hands back.

use super::*;

/// A store's journal and its newest record (the default state on blank flash).
pub(super) type OpenSink<R> = (Journal<R>, R);

/// Checks one [`EachEffect`] sink's journal against the position journal.
pub(super) fn cross_check<R, E, A>(
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
pub(super) struct SinkThenPosition<R> {
    pub(super) sink: Journal<R>,
    pub(super) positions: Journal<Position>,
    /// The durable position (next offset to read).
    pub(super) committed: Offset,
}

impl<R: Serialize + DeserializeOwned + MaxSize> SinkThenPosition<R> {
    pub(super) fn records_written(&self) -> u64 {
        self.sink.appended() + self.positions.appended()
    }
}

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
pub(super) fn decide<S: Store, E>(
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
    pub(super) first: Journal<EachRecord<A>>,
    pub(super) second: Journal<EachRecord<B>>,
    pub(super) positions: Journal<Position>,
    /// The durable position (next offset to read).
    pub(super) committed: Offset,
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
