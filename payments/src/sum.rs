//! What the checker reads of a payment store: the total it shows, and what its rule
//! promises. The engine never asks; the simulator, the host and the boards' reports do.

use idem_core::consumer::Consumer;
use idem_core::persist::blocking::Drive;
use idem_core::persist::{EachEffect, Pair};
use idem_core::store::{MessageIdWindow, OffsetStamp, Store};

use super::Message;
use super::stores::{Atomic, Max, Naive, NaiveState, ProducerSeq, Set, StoreError, TwoPhase};

/// A payment store as the checker sees it.
pub trait Sum: Store<Payload = Message, Error = StoreError> {
    /// Whether the store promises an exact total under replay (every store here but
    /// [`Naive`]); checkers hold such a store to the true total.
    const IDEMPOTENT: bool = true;

    /// Whether applying a message again is harmless by the rule itself, with no memory of
    /// what was applied (a gauge's set and max): a checker then does not count the repeat
    /// of a replay as a duplicate.
    const NATURALLY_IDEMPOTENT: bool = false;

    /// The value the sink shows.
    fn total(state: &Self::State) -> i64;

    /// Entries a bounded memory forgot because it was full (message ids evicted from a
    /// window): a duplicate of one of them would slip through.
    fn evicted(_state: &Self::State) -> u64 {
        0
    }

    /// For a record that holds two views of one fact (a total and an index): both, as
    /// (total view, index view).
    fn views(_state: &Self::State) -> Option<(i64, i64)> {
        None
    }

    /// `Some(d)` when a store in state `a` behaves exactly as one in state `b` from here
    /// on, except that its total stays `d` above: equal states (`d` = 0), or, for a store
    /// whose rule never reads its total, states equal but for the total.
    fn total_shift(a: &Self::State, b: &Self::State) -> Option<i64> {
        (a == b).then_some(0)
    }
}

impl Sum for Naive {
    const IDEMPOTENT: bool = false;

    fn total(state: &NaiveState) -> i64 {
        state.total
    }

    /// The rule never reads the total: any two states differ by their totals only.
    fn total_shift(a: &NaiveState, b: &NaiveState) -> Option<i64> {
        a.total.checked_sub(b.total)
    }
}

impl Sum for OffsetStamp<Naive> {
    fn total(state: &Self::State) -> i64 {
        state.state.total
    }
}

impl<const W: usize> Sum for MessageIdWindow<Naive, W, true> {
    fn total(state: &Self::State) -> i64 {
        state.state.total
    }

    fn evicted(state: &Self::State) -> u64 {
        state.evicted
    }
}

impl<const N: usize> Sum for MessageIdWindow<Naive, N, false> {
    fn total(state: &Self::State) -> i64 {
        state.state.total
    }
}

impl Sum for Set {
    const NATURALLY_IDEMPOTENT: bool = true;

    fn total(state: &Self::State) -> i64 {
        state.value.unwrap_or(0)
    }
}

impl Sum for Max {
    const NATURALLY_IDEMPOTENT: bool = true;

    fn total(state: &Self::State) -> i64 {
        state.value.unwrap_or(0)
    }
}

impl Sum for Atomic {
    fn total(state: &Self::State) -> i64 {
        state.total
    }
}

impl<const P: usize> Sum for ProducerSeq<P> {
    fn total(state: &Self::State) -> i64 {
        state.total
    }
}

impl Sum for TwoPhase {
    fn total(state: &Self::State) -> i64 {
        state.total
    }
}

/// What the checker reads of the sinks a consumer drives: one [`Sum`] store, or a
/// [`Pair`] of them.
pub trait SumSinks: Drive<Payload = Message, Error = StoreError> {
    /// Whether every sink promises an exact total under replay.
    const IDEMPOTENT: bool;
    /// Whether every sink's rule makes a repeated message harmless by itself
    /// ([`Sum::NATURALLY_IDEMPOTENT`]).
    const NATURALLY_IDEMPOTENT: bool;

    /// The total the (first) sink shows.
    fn value(state: &Self::State) -> i64;

    /// Entries a bounded memory forgot because it was full.
    fn evictions(state: &Self::State) -> u64;

    /// Two views of one fact, as a reader of the flash would see them (total view,
    /// index view); `None` for sinks that are not views of one fact.
    fn view_pair(&self, state: &Self::State) -> Option<(i64, i64)>;

    /// `Some(d)` when `a` behaves as `b` from here on, except that its total stays `d`
    /// above (see [`Sum::total_shift`]).
    fn shift(a: &Self::State, b: &Self::State) -> Option<i64>;
}

impl<S: Sum> SumSinks for S {
    const IDEMPOTENT: bool = <S as Sum>::IDEMPOTENT;
    const NATURALLY_IDEMPOTENT: bool = <S as Sum>::NATURALLY_IDEMPOTENT;

    fn value(state: &S::State) -> i64 {
        S::total(state)
    }

    fn evictions(state: &S::State) -> u64 {
        S::evicted(state)
    }

    fn view_pair(&self, state: &S::State) -> Option<(i64, i64)> {
        S::views(state)
    }

    fn shift(a: &S::State, b: &S::State) -> Option<i64> {
        S::total_shift(a, b)
    }
}

impl<A, B> SumSinks for Pair<A, B>
where
    A: Sum<Persist = EachEffect<A>, Rejections = ()>,
    B: Sum<Persist = EachEffect<B>, Rejections = ()>,
{
    const IDEMPOTENT: bool = <A as Sum>::IDEMPOTENT && <B as Sum>::IDEMPOTENT;
    const NATURALLY_IDEMPOTENT: bool =
        <A as Sum>::NATURALLY_IDEMPOTENT && <B as Sum>::NATURALLY_IDEMPOTENT;

    fn value(state: &Self::State) -> i64 {
        A::total(&state.0)
    }

    fn evictions(state: &Self::State) -> u64 {
        A::evicted(&state.0) + B::evicted(&state.1)
    }

    fn view_pair(&self, state: &Self::State) -> Option<(i64, i64)> {
        self.are_views()
            .then(|| (A::total(&state.0), B::total(&state.1)))
    }

    fn shift(a: &Self::State, b: &Self::State) -> Option<i64> {
        (a == b).then_some(0)
    }
}

/// The total a consumer of payments shows.
pub trait Total {
    /// The total the (first) sink shows now (for an atomic store: including effects in
    /// RAM).
    fn total(&self) -> i64;
}

impl<K: SumSinks> Total for Consumer<K> {
    fn total(&self) -> i64 {
        K::value(self.state())
    }
}
