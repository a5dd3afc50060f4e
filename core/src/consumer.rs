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
//! Where the position lives, and when each sink's record is written, is the sinks'
//! persistence policy ([`crate::persist`]); the consumer only orders the steps. Inside the
//! core a position is always the next offset to read (Kafka's convention): "covers
//! through 39" is "resumes at 40".

use core::num::NonZeroU64;

use crate::journal::JournalError;
use crate::log::{Event, Log, Offset};
#[doc(no_inline)]
pub use crate::persist::ConsumerError;
use crate::persist::{Layout, Phase, Recovered, Resolution, Sinks};
use crate::store::{Outcome, Rejections};

/// When the consumer commits its position relative to a batch's effects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Guarantee {
    /// Commit after the effects: a crash replays (duplicates, never losses).
    #[default]
    AtLeastOnce,
    /// Commit before the effects: a crash loses (losses, never duplicates).
    AtMostOnce,
}

/// A checkpoint interval: commit every K events, K at least 1. Batches are aligned on
/// offsets, `[bK, bK + K - 1]`, and the end of the log closes the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointEvery(NonZeroU64);

impl CheckpointEvery {
    /// Every event: the smallest interval.
    pub const MIN: Self = Self(NonZeroU64::MIN);

    /// `k` events, or `None` for 0.
    pub const fn new(k: u64) -> Option<Self> {
        match NonZeroU64::new(k) {
            Some(k) => Some(Self(k)),
            None => None,
        }
    }

    /// K.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The position right after the batch that holds `offset` in a log of `len`
    /// events: where that batch's checkpoint resumes.
    pub const fn batch_end(self, offset: Offset, len: u64) -> Offset {
        let k = self.0.get();
        let end = offset - rem(offset, k) + k;
        if end < len { end } else { len }
    }

    /// Whether the at-least-once checkpoint falls right after the effect of `offset`.
    pub const fn closes_batch(self, offset: Offset, len: u64) -> bool {
        rem(offset + 1, self.0.get()) == 0 || offset + 1 >= len
    }
}

/// The batches' bound from `log`'s end: past every offset while the end is not known, so
/// that only the interval closes a batch there.
#[cfg_attr(not(target_os = "none"), inline(always))]
fn known_end<P, L: Log<P> + ?Sized>(log: &L) -> Offset {
    log.end().unwrap_or(Offset::MAX)
}

/// `n % k` (`k` > 0). On Arm, where 64-bit division is a library routine (904 bytes of
/// a Cortex-M0 firmware), by shift and subtract; elsewhere the processor divides.
const fn rem(n: u64, k: u64) -> u64 {
    if cfg!(target_arch = "arm") {
        rem_by_shifts(n, k)
    } else {
        n % k
    }
}

/// `n % k` (`k` > 0) by shift and subtract: a few dozen bytes of code, at most 64 rounds.
const fn rem_by_shifts(n: u64, k: u64) -> u64 {
    if n < k {
        return n;
    }
    let mut r: u64 = 0;
    let mut bit = 64;
    while bit > 0 {
        bit -= 1;
        // r < k before the shift, so 2r + 1 < 2k fits when k <= 2^63; above that the
        // carry out of r says r >= k.
        let carry = r >> 63;
        r = (r << 1) | ((n >> bit) & 1);
        if carry == 1 || r >= k {
            r = r.wrapping_sub(k);
        }
    }
    r
}

impl core::fmt::Display for CheckpointEvery {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

/// Consumer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Commit the position every this many events.
    pub checkpoint_every: CheckpointEvery,
    /// Commit after or before the effects.
    pub guarantee: Guarantee,
}

impl ConsumerConfig {
    /// At-least-once, committing every `checkpoint_every` events.
    pub const fn every(checkpoint_every: CheckpointEvery) -> Self {
        Self {
            checkpoint_every,
            guarantee: Guarantee::AtLeastOnce,
        }
    }
}

/// One step of the consumer.
///
/// When an effect is on flash depends on the store's persistence policy, and that is
/// when a firmware may drive hardware from it (and re-assert the state at boot, from
/// [`Consumer::state`], since a reset can fall between the flash write and the output):
/// - [`crate::persist::EachEffect`] (and [`crate::persist::Pair`]): at
///   [`Step::Effect`], the store's record is durable when the step returns;
/// - [`crate::persist::Checkpoint`] and two-phase stores: at [`Step::Commit`], for every
///   effect since the last commit; an `Effect` before it is in RAM only, and a reset
///   replays it.
///
/// A skipped or rejected event changes nothing of the application's state, by
/// construction: [`Store::check`](crate::store::Store::check) decides reading the state
/// only, and only an applied event reaches [`Store::apply`](crate::store::Store::apply).
/// (A dedup rule's memory notes a rejected event, through
/// [`Store::remember`](crate::store::Store::remember); an application's store keeps its
/// default, which does nothing.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step<P> {
    /// The event at the position was read; its effect is not applied yet.
    Deliver(Event<P>),
    /// Sinks written one after the other ([`crate::persist::Pair`]): the first holds the
    /// event's effect, the second does not yet.
    Between(Event<P>),
    /// The sinks applied, skipped or rejected the event; under
    /// [`crate::persist::EachEffect`] and [`crate::persist::Appended`] the record (and a
    /// rejection's count) is durable when this step returns.
    Effect(Event<P>, Outcome),
    /// The event at the position is not for the sinks ([`Log::passed_over`]: under
    /// `read_committed`, a record of an aborted transaction): the position moved past
    /// it and no sink was written.
    Pass(Event<P>),
    /// Two-phase stores: the prepared record for the commit of `next` is durable; the
    /// decision is not made yet.
    Prepare {
        /// Next offset to read once committed.
        next: Offset,
    },
    /// The position was made durable: the next offset to read is `next`. Under
    /// [`crate::persist::Checkpoint`] and two-phase stores, the effects since the last
    /// commit became durable with it.
    Commit {
        /// Next offset to read.
        next: Offset,
    },
    /// Nothing is left to read now: every event the log holds (up to [`Log::end`]) is applied
    /// and committed. On a live stream more may come; step again once it has.
    Done,
}

/// What [`Consumer::open_or_reset`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Opened {
    /// The journals were this consumer's: it resumed from them (or the flash was blank).
    Recovered,
    /// The journals were not this consumer's, or not in its encoding: both regions were
    /// erased and it starts at offset 0.
    Reset(Reset),
}

/// Why [`Consumer::open_or_reset`] started over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Reset {
    /// A page held another journal (its header's tag and format version).
    Foreign {
        /// Page index inside its region.
        page: u32,
        /// The tag found.
        tag: u32,
        /// The format version found.
        version: u16,
    },
    /// The newest record had a valid check word but did not decode as the state.
    Decode,
}

/// The errors of a consumer of the sinks `K` on the flash `F`.
pub type ErrorOf<F, K> =
    ConsumerError<<F as embedded_storage::nor_flash::ErrorType>::Error, <K as Sinks>::Error>;

/// A consumer applying a log to the sinks `K` (one [`Store`](crate::store::Store), or a
/// [`Pair`](crate::persist::Pair) sharing one position).
#[derive(Debug, Clone)]
pub struct Consumer<K: Sinks> {
    sinks: K,
    state: K::State,
    rejected: K::Rejections,
    durable: K::Durable,
    cursor: Cursor<K::Payload>,
}

/// Where a consumer is in its log and what it owes: the part of a step that does not
/// depend on the sinks. It is compiled once per payload type, not once per store: on a
/// Cortex-M0 image with six stores, scheduling inside the generic step cost about 300
/// bytes a store.
#[derive(Debug, Clone)]
struct Cursor<P> {
    config: ConsumerConfig,
    next: Offset,
    resume_at: Offset,
    delivered: Option<Event<P>>,
    /// Sinks of the delivered event written so far, and the outcome so far (applied by
    /// one of them, else rejected by one, else skipped).
    written: usize,
    outcome: Outcome,
    /// A commit to make before anything else: the next offset it records.
    commit_due: Option<Offset>,
    /// A step failed in its journal: RAM may be ahead of the flash, so no more steps.
    broken: bool,
}

/// What the sinks owe next.
enum Due<P> {
    /// Write the delivered event to sink `usize`.
    Write(Event<P>, usize),
    /// Commit the position: the next offset to read.
    Commit(Offset),
    /// Nothing for the sinks: this is the step.
    Report(Step<P>),
    /// An earlier step failed in its journal: open the consumer again.
    Broken,
}

impl<P: Copy> Cursor<P> {
    /// What comes next: a write, a commit, or a step that touches no sink (a delivery,
    /// the end).
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    #[cfg_attr(not(target_os = "none"), inline(always))]
    fn due<L: Log<P> + ?Sized>(&mut self, log: &L) -> Due<P> {
        if self.broken {
            return Due::Broken;
        }
        if let Some(event) = self.delivered {
            return Due::Write(event, self.written);
        }
        if self.commit_due.is_none() {
            let Some(event) = log.get(self.next) else {
                return Due::Report(Step::Done);
            };
            if self.config.guarantee == Guarantee::AtMostOnce && self.resume_at <= event.offset {
                self.commit_due = Some(
                    self.config
                        .checkpoint_every
                        .batch_end(event.offset, known_end(log)),
                );
            } else if log.passed_over(event.offset) {
                return Due::Report(self.passed(event, known_end(log)));
            } else {
                self.delivered = Some(event);
                return Due::Report(Step::Deliver(event));
            }
        }
        match self.commit_due {
            Some(next) => Due::Commit(next),
            None => Due::Report(Step::Done),
        }
    }

    /// One of `writes` sinks wrote `event` with `outcome`, in a log of `len` events.
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    #[cfg_attr(not(target_os = "none"), inline(always))]
    fn written(&mut self, event: Event<P>, outcome: Outcome, writes: usize, len: u64) -> Step<P> {
        self.outcome = match (self.outcome, outcome) {
            (Outcome::Applied, _) | (_, Outcome::Applied) => Outcome::Applied,
            (Outcome::Rejected, _) | (_, Outcome::Rejected) => Outcome::Rejected,
            _ => Outcome::Skipped,
        };
        self.written += 1;
        if self.written < writes {
            return Step::Between(event);
        }
        let outcome = self.outcome;
        (self.delivered, self.written, self.outcome) = (None, 0, Outcome::Skipped);
        self.moved_past(event.offset, len);
        Step::Effect(event, outcome)
    }

    /// The event at the position is passed over: nothing to write.
    fn passed(&mut self, event: Event<P>, len: u64) -> Step<P> {
        self.moved_past(event.offset, len);
        Step::Pass(event)
    }

    /// The position moved past `offset`, in a log of `len` events: a commit is due when
    /// it closed a batch (at-least-once).
    fn moved_past(&mut self, offset: Offset, len: u64) {
        self.next = offset + 1;
        if self.config.guarantee == Guarantee::AtLeastOnce
            && self.config.checkpoint_every.closes_batch(offset, len)
        {
            self.commit_due = Some(self.next);
        }
    }

    /// The sinks made `phase` of the commit of `next` durable.
    #[cfg_attr(not(target_os = "none"), inline(always))]
    fn committed(&mut self, next: Offset, phase: Phase) -> Step<P> {
        match phase {
            Phase::Prepared => Step::Prepare { next },
            Phase::Committed => {
                self.resume_at = next;
                self.commit_due = None;
                Step::Commit { next }
            }
        }
    }

    fn is_idle(&self) -> bool {
        self.delivered.is_none() && self.commit_due.is_none()
    }
}

impl<K: Sinks> Consumer<K> {
    crate::io::doors! { in Self;
        /// Recovers a consumer from flash: the sinks' newest records and the durable
        /// position (on blank flash it starts at offset 0). The policy resolves whatever it
        /// left in doubt (a two-phase store's prepared record) in RAM; opening never writes.
        /// Journals that disagree are refused ([`ConsumerError::Disagree`]).
        pub fn open | open_async ("The same steps, awaited.") [F] flash F drive K
            (flash: &mut F, layout: Layout, sinks: K, config: ConsumerConfig)
            -> Result<Self, ErrorOf<F, K>>
            => open(flash, layout, sinks, config);

        /// [`Consumer::open`], or, where the flash holds another journal (another tag: a
        /// store of another encoding, see [`crate::store::Store::TAG`]; another format or
        /// write unit) or a newest record that does not decode, erases both regions and
        /// opens blank. What was found is returned with the consumer ([`Opened`]), so the
        /// firmware can log it. Damage and journals that disagree are still refused, never
        /// erased: only a journal that is not this consumer's, or not in its encoding, is
        /// started over.
        pub fn open_or_reset | open_or_reset_async [F] flash F drive K
            (flash: &mut F, layout: Layout, sinks: K, config: ConsumerConfig)
            -> Result<(Self, Opened), ErrorOf<F, K>>
            => open_or_reset(flash, layout, sinks, config);

        /// [`Consumer::open_or_reset`], where a consumer that has nothing yet starts at
        /// `start` rather than at offset 0: the application's own resume point (the
        /// gateway's offset it last handed to this device, an offset in a manifest shipped
        /// with the update), for a store whose journals could not be read or migrated.
        /// "Nothing yet": blank journals, journals just reset, or a store that recovers at
        /// offset 0 with its default state and no rejected event. Such a consumer commits
        /// `start` before it returns (two phases for a two-phase store; a cut between them
        /// leaves it with nothing yet, so the next open starts there again), and the
        /// events before it are never read. A consumer that recovers its position resumes
        /// there, whatever `start` says. Never a silent start from 0 in a log that the
        /// application knows has been applied: it names where to begin.
        pub fn open_or_start_at | open_or_start_at_async [F] flash F drive K
            (flash: &mut F, layout: Layout, sinks: K, config: ConsumerConfig, start: Offset)
            -> Result<(Self, Opened), ErrorOf<F, K>>
            where [K::State: Default]
            => open_or_start_at(flash, layout, sinks, config, start);

        /// Advances by one step. After an `Err` from the store nothing changed, and the next
        /// step tries the same event again. After a journal error (the flash failed, or lost
        /// power) every later step is [`ConsumerError::Reopen`]: open the consumer again.
        pub fn step | step_async ("When it returns, the effect is as durable as `step`'s.")
            [F, L: Log<K::Payload> + ?Sized] flash F drive K
            (&mut self, flash: &mut F, log: &L) -> Result<Step<K::Payload>, ErrorOf<F, K>>
            => step(self, flash, log);

        /// Runs to [`Step::Done`].
        pub fn run | run_async [F, L: Log<K::Payload> + ?Sized] flash F drive K
            (&mut self, flash: &mut F, log: &L) -> Result<(), ErrorOf<F, K>>
            => run(self, flash, log);
    }

    /// Events the sinks rejected ([`Outcome::Rejected`]), as durable as the state: after
    /// a reset, the count the flash holds.
    pub fn rejected(&self) -> u32 {
        self.rejected.count()
    }

    /// The sinks' state in RAM.
    pub fn state(&self) -> &K::State {
        &self.state
    }

    /// The sinks.
    pub fn sinks(&self) -> &K {
        &self.sinks
    }

    /// The durable position: the next offset to read after a crash (0 when nothing was
    /// committed yet).
    pub fn resume_at(&self) -> Offset {
        self.cursor.resume_at
    }

    /// Whether the consumer is between events: nothing delivered and not yet applied,
    /// no commit due. Two consumers that are idle with equal state, durable position and
    /// next offset behave the same from there on.
    pub fn is_idle(&self) -> bool {
        self.cursor.is_idle()
    }

    /// The next offset this consumer will read.
    pub fn next_offset(&self) -> Offset {
        self.cursor.next
    }

    /// What recovery did with a record in doubt when this consumer was opened (a
    /// two-phase store's prepared record: rolled forward or back).
    pub fn resolution(&self) -> Option<Resolution> {
        K::resolution(&self.durable)
    }

    /// Journal records appended since this consumer was opened (sink records and
    /// position commits).
    pub fn records_written(&self) -> u64 {
        K::records_written(&self.durable)
    }
}

/// The flash steps over `embedded_storage`'s blocking `NorFlash`.
mod blocking {
    use super::*;
    use crate::io::blocking::*;
    pub(super) use crate::persist::blocking::Drive;
    include!("consumer/io.rs");
}

/// The flash steps over `embedded_storage_async`'s `NorFlash`.
// `io!` and `body!` spell what `async fn` would: one source for both builds.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
mod asynch {
    use super::*;
    use crate::io::asynch::*;
    pub(super) use crate::persist::asynch::Drive;
    include!("consumer/io.rs");
}

/// The last offset a durable position covers (`resume_at` minus one), `None` when it
/// covers nothing (resumes at 0).
pub const fn covers_through(resume_at: Offset) -> Option<Offset> {
    resume_at.checked_sub(1)
}

#[cfg(test)]
mod interval_tests {
    use super::*;

    #[test]
    fn the_shift_and_subtract_remainder_is_the_remainder() {
        let edges = [
            0,
            1,
            2,
            9,
            10,
            11,
            1 << 32,
            (1 << 63) - 1,
            1 << 63,
            (1 << 63) + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        for n in edges {
            for k in edges.into_iter().filter(|&k| k > 0) {
                assert_eq!(rem_by_shifts(n, k), n % k, "{n} % {k}");
            }
        }
        // And a million seeded pairs of every magnitude.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = x >> (x % 64);
            let k = (x.rotate_left(29) >> (x % 61)).max(1);
            assert_eq!(rem_by_shifts(n, k), n % k, "{n} % {k}");
        }
    }

    #[test]
    fn batches_are_aligned_and_the_log_end_closes_the_last() {
        assert_eq!(CheckpointEvery::new(0), None);
        let k = CheckpointEvery::new(10).unwrap();
        assert_eq!((k.batch_end(0, 100), k.batch_end(45, 100)), (10, 50));
        assert_eq!(k.batch_end(95, 97), 97);
        assert!(k.closes_batch(39, 100) && !k.closes_batch(40, 100));
        assert!(k.closes_batch(96, 97));
        assert_eq!(covers_through(40), Some(39));
        assert_eq!(covers_through(0), None);
    }
}
