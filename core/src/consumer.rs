//! The consumer: reads from its position, applies each event to a store, and commits its
//! position every K events.
//!
//! The consumer is a state machine driven one [`Step`] at a time, so whoever drives it
//! (the simulator, a real process, the firmware) can crash it between any two steps:
//! after a delivery, after an effect, after a commit. Each step that changes durable
//! state does so with one journal append, and a step returns only once that append is
//! complete.
//!
//! With [`Guarantee::AtLeastOnce`] the position is committed AFTER the effects of a batch
//! (a crash in between replays them); with [`Guarantee::AtMostOnce`] it is committed
//! BEFORE them (a crash in between loses them). Batches are aligned on offsets: a batch
//! is `[bK, bK + K - 1]`, and the end of the log closes the last one.
//!
//! Where the position lives depends on the store's [`Persist`] policy: in the consumer's
//! own position journal, inside the store's record, or both, through a two-phase commit.

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::journal::{Journal, JournalError, Region};
use crate::log::{Event, Log, Offset};
use crate::store::{Outcome, Persist, Store, StoreError};

/// When the consumer commits its position relative to a batch's effects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Guarantee {
    /// Commit after the effects: a crash replays (duplicates, never losses).
    #[default]
    AtLeastOnce,
    /// Commit before the effects: a crash loses (losses, never duplicates).
    AtMostOnce,
}

/// Whether the at-least-once checkpoint falls right after the effect of `offset`:
/// batches are `[bK, bK + K - 1]`, and the end of a log of `len` events closes the last.
pub const fn checkpoint_after(offset: Offset, checkpoint_every: u64, len: u64) -> bool {
    let k = if checkpoint_every == 0 {
        1
    } else {
        checkpoint_every
    };
    (offset + 1).is_multiple_of(k) || offset + 1 >= len
}

/// Consumer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Commit the position every this many events (at least 1).
    pub checkpoint_every: u64,
    /// Commit after or before the effects.
    pub guarantee: Guarantee,
}

impl ConsumerConfig {
    /// At-least-once, committing every `checkpoint_every` events.
    pub const fn every(checkpoint_every: u64) -> Self {
        Self {
            checkpoint_every,
            guarantee: Guarantee::AtLeastOnce,
        }
    }
}

/// Where a consumer keeps its journals, and the tag that marks them as this
/// application's (a different tag, or another store, is refused as foreign).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The consumer's position journal (unused by stores that keep the position).
    pub positions: Region,
    /// The store's journal.
    pub sink: Region,
    /// Mixed into both journals' tags: an application, scenario or image id.
    pub tag: u32,
}

/// The position journal's record: the next offset to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct Position {
    /// Next offset to read.
    pub next: Offset,
}

const POSITIONS_TAG: u32 = 0x5001_0000;

/// The tag of the position journal of a consumer laid out by `layout`.
pub const fn positions_tag(layout: &Layout) -> u32 {
    POSITIONS_TAG ^ layout.tag
}

/// The tag of the journal of store `S` laid out by `layout`.
pub const fn sink_tag<S: Store>(layout: &Layout) -> u32 {
    S::TAG ^ layout.tag
}

/// One step of the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The event at the position was read; its effect is not applied yet.
    Deliver(Event),
    /// The store applied or skipped the event (and persisted itself when needed).
    Effect(Event, Outcome),
    /// Two-phase stores: the prepared record for the commit of `next` is durable; the
    /// decision is not made yet.
    Prepare {
        /// Next offset to read once committed.
        next: Offset,
    },
    /// The position was made durable: the next offset to read is `next`.
    Commit {
        /// Next offset to read.
        next: Offset,
    },
    /// Everything in the log is applied and committed.
    Done,
}

/// Errors of the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerError<E> {
    /// A journal failed (including the flash under it).
    Journal(JournalError<E>),
    /// The store refused an event (a bounded memory is full).
    Store(StoreError),
}

impl<E> From<JournalError<E>> for ConsumerError<E> {
    fn from(e: JournalError<E>) -> Self {
        Self::Journal(e)
    }
}

impl<E> From<StoreError> for ConsumerError<E> {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl<E: core::fmt::Debug> core::fmt::Display for ConsumerError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Journal(e) => e.fmt(f),
            Self::Store(e) => e.fmt(f),
        }
    }
}

impl<E: core::fmt::Debug> core::error::Error for ConsumerError<E> {}

/// A consumer applying a log to the store `S`.
#[derive(Debug, Clone)]
pub struct Consumer<S: Store> {
    store: S,
    config: ConsumerConfig,
    state: S::State,
    sink: Journal<S::State>,
    positions: Option<Journal<Position>>,
    next: Offset,
    committed: Option<Offset>,
    delivered: Option<Event>,
    /// A commit to make before anything else: the next offset it records.
    commit_due: Option<Offset>,
    /// Two-phase: the target whose prepared record is already written.
    prepared: Option<Offset>,
}

impl<S: Store> Consumer<S> {
    /// Recovers a consumer from flash: the store's newest record and the newest
    /// committed position (nothing on blank flash: it starts at offset 0). A two-phase
    /// store's in-doubt prepared record is resolved here, and the resolution written.
    pub fn open<F: NorFlash>(
        flash: &mut F,
        layout: Layout,
        store: S,
        config: ConsumerConfig,
    ) -> Result<Self, ConsumerError<F::Error>> {
        let (mut sink, record) =
            Journal::<S::State>::open(flash, layout.sink, sink_tag::<S>(&layout))?;
        let mut state = record.unwrap_or_default();
        let (positions, position) = match S::PERSIST {
            Persist::Checkpoint => (None, None),
            _ => {
                let (j, p) =
                    Journal::<Position>::open(flash, layout.positions, positions_tag(&layout))?;
                (Some(j), p.map(|p| p.next))
            }
        };
        let committed = match S::PERSIST {
            Persist::EachEffect => position,
            Persist::Checkpoint => S::position(&state),
            Persist::TwoPhase => {
                if let Some(target) = S::prepared(&state) {
                    // The position journal holds the decision.
                    S::resolve(&mut state, position.is_some_and(|p| p >= target));
                    sink.append(flash, &state)?;
                }
                S::position(&state)
            }
        };
        Ok(Self {
            store,
            config,
            state,
            sink,
            positions,
            next: committed.unwrap_or(0),
            committed,
            delivered: None,
            commit_due: None,
            prepared: None,
        })
    }

    /// Resumes from a durable position kept outside this consumer's flash, such as a Kafka
    /// consumer group's committed offset (`None`: nothing committed, start at 0). Only for
    /// stores whose position is not in their record ([`Persist::EachEffect`]); the others
    /// keep their own position and ignore this.
    pub fn resume_from(&mut self, committed: Option<Offset>) {
        if S::PERSIST == Persist::EachEffect
            && self.delivered.is_none()
            && self.commit_due.is_none()
        {
            self.committed = committed;
            self.next = committed.unwrap_or(0);
        }
    }

    /// Advances by one step.
    pub fn step<F: NorFlash, L: Log + ?Sized>(
        &mut self,
        flash: &mut F,
        log: &L,
    ) -> Result<Step, ConsumerError<F::Error>> {
        let k = self.config.checkpoint_every.max(1);
        if let Some(event) = self.delivered.take() {
            let outcome = self.store.apply(&mut self.state, &event)?;
            if outcome == Outcome::Applied && S::PERSIST == Persist::EachEffect {
                self.sink.append(flash, &self.state)?;
            }
            self.next = event.offset + 1;
            if self.config.guarantee == Guarantee::AtLeastOnce
                && checkpoint_after(event.offset, k, log.len())
            {
                self.commit_due = Some(self.next);
            }
            return Ok(Step::Effect(event, outcome));
        }
        if self.commit_due.is_none() {
            let Some(event) = log.get(self.next) else {
                return Ok(Step::Done);
            };
            if self.config.guarantee == Guarantee::AtMostOnce
                && self.committed.is_none_or(|c| c <= event.offset)
            {
                let batch_end = (event.offset / k + 1) * k;
                self.commit_due = Some(batch_end.min(log.len()));
            } else {
                self.delivered = Some(event);
                return Ok(Step::Deliver(event));
            }
        }
        let Some(next) = self.commit_due else {
            return Ok(Step::Done);
        };
        if S::PERSIST == Persist::TwoPhase && self.prepared != Some(next) {
            let mut record = self.state.clone();
            S::prepare(&mut record, next);
            self.sink.append(flash, &record)?;
            self.state = record;
            self.prepared = Some(next);
            return Ok(Step::Prepare { next });
        }
        self.commit(flash, next)?;
        self.commit_due = None;
        self.prepared = None;
        Ok(Step::Commit { next })
    }

    /// Runs to [`Step::Done`].
    pub fn run<F: NorFlash, L: Log + ?Sized>(
        &mut self,
        flash: &mut F,
        log: &L,
    ) -> Result<(), ConsumerError<F::Error>> {
        while self.step(flash, log)? != Step::Done {}
        Ok(())
    }

    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        next: Offset,
    ) -> Result<(), ConsumerError<F::Error>> {
        match S::PERSIST {
            Persist::EachEffect => {
                if let Some(positions) = &mut self.positions {
                    positions.append(flash, &Position { next })?;
                }
            }
            Persist::Checkpoint => {
                S::set_position(&mut self.state, next);
                self.sink.append(flash, &self.state)?;
            }
            Persist::TwoPhase => {
                // The decision: once the position is durable, recovery rolls forward.
                if let Some(positions) = &mut self.positions {
                    positions.append(flash, &Position { next })?;
                }
                S::resolve(&mut self.state, true);
                self.sink.append(flash, &self.state)?;
            }
        }
        self.committed = Some(next);
        Ok(())
    }

    /// The total the store shows now (for an atomic store: including effects in RAM).
    pub fn total(&self) -> i64 {
        S::total(&self.state)
    }

    /// The store's state in RAM.
    pub fn state(&self) -> &S::State {
        &self.state
    }

    /// The store rule.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The durable position: the next offset to read after a crash (`None`: nothing
    /// committed yet, a restart begins at offset 0).
    pub fn committed(&self) -> Option<Offset> {
        self.committed
    }

    /// Whether the consumer is between events: nothing delivered and not yet applied,
    /// no commit due. Two consumers that are idle with equal state, durable position and
    /// next offset behave the same from there on.
    pub fn is_idle(&self) -> bool {
        self.delivered.is_none() && self.commit_due.is_none()
    }

    /// The next offset this consumer will read.
    pub fn next_offset(&self) -> Offset {
        self.next
    }

    /// Journal records appended since this consumer was opened (sink records and
    /// position commits).
    pub fn records_written(&self) -> u64 {
        self.sink.appended() + self.positions.as_ref().map_or(0, Journal::appended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::MemFlash;
    use crate::log::GeneratedLog;
    use crate::store::{Atomic, Naive, OffsetStamped};

    type F = MemFlash<8, 1024>;
    const LAYOUT: Layout = Layout {
        positions: Region { start: 0, pages: 4 },
        sink: Region {
            start: 4096,
            pages: 4,
        },
        tag: 0,
    };

    /// Runs until the effect of `crash_after`, drops the consumer, reopens and finishes.
    fn crash_after<S: Store + Copy>(store: S, crash_after: Offset) -> (i64, Option<Offset>, u64) {
        let log = GeneratedLog {
            events: 100,
            amount: 1,
        };
        let mut f = F::new();
        let mut c = Consumer::open(&mut f, LAYOUT, store, ConsumerConfig::every(10)).unwrap();
        loop {
            if let Step::Effect(e, _) = c.step(&mut f, &log).unwrap()
                && e.offset == crash_after
            {
                break;
            }
        }
        let mut writes = c.records_written();
        let mut c = Consumer::open(&mut f, LAYOUT, store, ConsumerConfig::every(10)).unwrap();
        let resumed = c.committed();
        c.run(&mut f, &log).unwrap();
        writes += c.records_written();
        (c.total(), resumed, writes)
    }

    #[test]
    fn ddia_figures() {
        assert_eq!(crash_after(Naive, 49), (110, Some(40), 60 + 4 + 6 + 50));
        assert_eq!(
            crash_after(OffsetStamped, 49),
            (100, Some(40), 50 + 4 + 6 + 50)
        );
        // Atomic: one record per checkpoint, 4 before the crash and 6 after.
        assert_eq!(crash_after(Atomic, 49), (100, Some(40), 10));
    }

    #[test]
    fn at_most_once_commits_the_batch_first_and_loses_on_a_crash() {
        let log = GeneratedLog {
            events: 100,
            amount: 1,
        };
        let mut f = F::new();
        let cfg = ConsumerConfig {
            checkpoint_every: 10,
            guarantee: Guarantee::AtMostOnce,
        };
        let mut c = Consumer::open(&mut f, LAYOUT, OffsetStamped, cfg).unwrap();
        assert_eq!(c.step(&mut f, &log).unwrap(), Step::Commit { next: 10 });
        while !matches!(c.step(&mut f, &log).unwrap(), Step::Effect(e, _) if e.offset == 45) {}
        let mut c = Consumer::open(&mut f, LAYOUT, OffsetStamped, cfg).unwrap();
        assert_eq!(c.committed(), Some(50));
        c.run(&mut f, &log).unwrap();
        assert_eq!(c.total(), 96);
    }
}
