//! Judging a run: the verdict on its total, and the anomalies behind it.
//!
//! A run is [`Verdict::Exact`] when the store's final total equals the true total (each
//! distinct message applied once), [`Verdict::Over`] when duplicates inflated it and
//! [`Verdict::Under`] when events were lost.
//!
//! The [`Checker`] names anomalies as Jepsen's Kafka checker does: `duplicate` (a
//! message's effect made durable more than once), `lost-write` (a message in the log
//! never durably applied), `nonmonotonic` (the durable position moved backwards), and
//! `diverged` (two views of one fact disagreed when a recovery read them back). It
//! follows durability, not RAM: a store that keeps effects in RAM until its checkpoint
//! (an atomic checkpoint) has them counted at the commit, and loses them at a crash.
//! Messages are known by their canonical offset (the first offset that carries their id,
//! [`Truth::canonical`](idem_payments::Truth::canonical)), so a producer's retry of p17 counts
//! as a second application of p17.

use idem_core::log::Offset;

/// How a final total compares with the true total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Equal to the true total.
    Exact,
    /// Above the true total by this much (two 64-bit totals differ by at most
    /// 2⁶⁴ − 1, so the difference is exact, never wrapped).
    Over(u64),
    /// Below the true total by this much.
    Under(u64),
}

impl Verdict {
    /// Compares `final_total` with `true_total`.
    pub fn of(final_total: i64, true_total: i64) -> Self {
        let d = i128::from(final_total) - i128::from(true_total);
        // |d| < 2⁶⁴: the conversion cannot fail.
        let by = u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX);
        match d.signum() {
            0 => Self::Exact,
            1 => Self::Over(by),
            _ => Self::Under(by),
        }
    }

    /// `exact`, `over` or `under`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Over(_) => "over",
            Self::Under(_) => "under",
        }
    }
}

/// The verdict with its difference, as every front end words it: `exact`,
/// `over by 10`, `under by 4`.
impl core::fmt::Display for Verdict {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Exact => f.write_str("exact"),
            Self::Over(d) | Self::Under(d) => write!(f, "{} by {d}", self.name()),
        }
    }
}

/// The set of messages (canonical offsets) durably applied so far.
pub trait AppliedSet: Clone {
    /// Marks `offset`; `Ok(true)` when it was not marked before.
    fn insert(&mut self, offset: Offset) -> Result<bool, CheckError>;
    /// Whether `offset` is marked.
    fn contains(&self, offset: Offset) -> bool;
}

/// A fixed-capacity [`AppliedSet`] of `64 * WORDS` offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitSet<const WORDS: usize> {
    words: [u64; WORDS],
}

impl<const WORDS: usize> BitSet<WORDS> {
    /// How many offsets (`0..CAPACITY`) the set follows.
    pub const CAPACITY: u64 = 64 * WORDS as u64;

    /// An empty set.
    pub const fn new() -> Self {
        Self { words: [0; WORDS] }
    }
}

impl<const WORDS: usize> Default for BitSet<WORDS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const WORDS: usize> AppliedSet for BitSet<WORDS> {
    fn insert(&mut self, offset: Offset) -> Result<bool, CheckError> {
        let capacity = Self::CAPACITY;
        let word = self
            .words
            .get_mut((offset / 64) as usize)
            .ok_or(CheckError::Capacity { capacity })?;
        let bit = 1u64 << (offset % 64);
        let new = *word & bit == 0;
        *word |= bit;
        Ok(new)
    }

    fn contains(&self, offset: Offset) -> bool {
        self.words
            .get((offset / 64) as usize)
            .is_some_and(|w| w & (1 << (offset % 64)) != 0)
    }
}

/// Why the checker could not follow a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// The log is longer than the applied set holds.
    Capacity {
        /// How many offsets the set holds.
        capacity: u64,
    },
}

impl core::fmt::Display for CheckError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Capacity { capacity } => {
                write!(f, "the checker follows logs of up to {capacity} events")
            }
        }
    }
}

impl core::error::Error for CheckError {}

/// What the checker found in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anomalies {
    /// Messages whose effect was made durable more than once (one count per extra time).
    pub duplicate: u64,
    /// Messages never durably applied.
    pub lost_write: u64,
    /// Times the durable position moved backwards.
    pub nonmonotonic: u64,
    /// Recoveries that found two views of one fact disagreeing.
    pub diverged: u64,
    /// The first duplicated message (canonical offset).
    pub first_duplicate: Option<Offset>,
    /// The first lost message (canonical offset).
    pub first_lost: Option<Offset>,
    /// The first backwards move: from, to (next offsets to read).
    pub first_nonmonotonic: Option<(Offset, Offset)>,
    /// Where the first recovery that found the views disagreeing resumed.
    pub first_diverged: Option<Offset>,
}

impl Anomalies {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.duplicate == 0 && self.lost_write == 0 && self.nonmonotonic == 0 && self.diverged == 0
    }

    /// Adds `other`'s counts (and its firsts, where this has none).
    pub fn add(&mut self, other: &Anomalies) {
        self.duplicate += other.duplicate;
        self.lost_write += other.lost_write;
        self.nonmonotonic += other.nonmonotonic;
        self.diverged += other.diverged;
        self.first_duplicate = self.first_duplicate.or(other.first_duplicate);
        self.first_lost = self.first_lost.or(other.first_lost);
        self.first_nonmonotonic = self.first_nonmonotonic.or(other.first_nonmonotonic);
        self.first_diverged = self.first_diverged.or(other.first_diverged);
    }

    /// The anomalies found after `earlier` was taken, when this is a later tally of the
    /// same run: counts only, and the firsts that fall in that suffix.
    pub fn since(&self, earlier: &Anomalies) -> Anomalies {
        Anomalies {
            duplicate: self.duplicate - earlier.duplicate,
            lost_write: self.lost_write - earlier.lost_write,
            nonmonotonic: self.nonmonotonic - earlier.nonmonotonic,
            diverged: self.diverged - earlier.diverged,
            first_duplicate: self
                .first_duplicate
                .filter(|_| self.duplicate > earlier.duplicate),
            first_lost: self
                .first_lost
                .filter(|_| self.lost_write > earlier.lost_write),
            first_nonmonotonic: self
                .first_nonmonotonic
                .filter(|_| self.nonmonotonic > earlier.nonmonotonic),
            first_diverged: self
                .first_diverged
                .filter(|_| self.diverged > earlier.diverged),
        }
    }
}

/// Follows a run's durable effects and names its anomalies.
#[derive(Debug, Clone)]
pub struct Checker<A> {
    applied: A,
    in_record: bool,
    repeat_harmless: bool,
    pending: Option<(Offset, Offset)>,
    resume_at: Offset,
    settled: Offset,
    found: Anomalies,
}

impl<A: AppliedSet> Checker<A> {
    /// A checker over `applied` (empty); `in_record` for a store whose effects become
    /// durable only at its checkpoint.
    pub fn new(applied: A, in_record: bool) -> Self {
        Self {
            applied,
            in_record,
            repeat_harmless: false,
            pending: None,
            resume_at: 0,
            settled: 0,
            found: Anomalies::default(),
        }
    }

    /// For a store whose rule makes a repeated message harmless by itself (a gauge's set):
    /// a message applied again is not a duplicate. A total off the truth still shows in
    /// the verdict.
    pub fn repeats_harmless(mut self, harmless: bool) -> Self {
        self.repeat_harmless = harmless;
        self
    }

    /// The store applied the event at `offset`, message `canonical`.
    pub fn applied(&mut self, offset: Offset, canonical: Offset) -> Result<(), CheckError> {
        if self.in_record {
            self.pending = Some((self.pending.map_or(offset, |(from, _)| from), offset));
            Ok(())
        } else {
            self.mark(canonical)
        }
    }

    /// The position `next` was made durable; `canonical` maps offsets to messages.
    pub fn committed(
        &mut self,
        next: Offset,
        canonical: impl Fn(Offset) -> Offset,
    ) -> Result<(), CheckError> {
        self.moved_to(next);
        if let Some((from, to)) = self.pending.take() {
            for o in from..=to {
                self.mark(canonical(o))?;
            }
        }
        Ok(())
    }

    /// The device recovered and resumes at `resume_at`. Effects that were in RAM are
    /// gone, unless the recovered position covers them: a commit that was complete when
    /// the power failed (a two-phase commit rolled forward) made them durable.
    pub fn recovered(
        &mut self,
        resume_at: Offset,
        canonical: impl Fn(Offset) -> Offset,
    ) -> Result<(), CheckError> {
        let before = self.resume_at;
        self.moved_to(resume_at);
        let now = resume_at;
        if let Some((from, to)) = self.pending.take()
            && now > before
        {
            for o in (from..=to).filter(|&o| o < now) {
                self.mark(canonical(o))?;
            }
        }
        Ok(())
    }

    /// Counts as lost every message below `end` never durably applied (`is_canonical`
    /// tells which offsets carry a message's first occurrence), except those applied in
    /// RAM and not yet durable. Each offset is judged once.
    pub fn settle(&mut self, end: Offset, is_canonical: impl Fn(Offset) -> bool) {
        // Effects still in RAM are not final: judge only below them.
        let end = self.pending.map_or(end, |(from, _)| end.min(from));
        for o in self.settled..end {
            if is_canonical(o) && !self.applied.contains(o) {
                self.found.lost_write += 1;
                self.found.first_lost.get_or_insert(o);
            }
        }
        self.settled = self.settled.max(end);
    }

    /// The set of messages durably applied so far.
    pub fn applied_set(&self) -> &A {
        &self.applied
    }

    /// What was found so far.
    pub fn anomalies(&self) -> Anomalies {
        self.found
    }

    fn mark(&mut self, canonical: Offset) -> Result<(), CheckError> {
        if !self.applied.insert(canonical)? && !self.repeat_harmless {
            self.found.duplicate += 1;
            self.found.first_duplicate.get_or_insert(canonical);
        }
        Ok(())
    }

    /// A recovery that resumed at `resume_at` read two views of one fact that disagree.
    pub fn diverged(&mut self, resume_at: Offset) {
        self.found.diverged += 1;
        self.found.first_diverged.get_or_insert(resume_at);
    }

    fn moved_to(&mut self, to: Offset) {
        let from = self.resume_at;
        if to < from {
            self.found.nonmonotonic += 1;
            self.found.first_nonmonotonic.get_or_insert((from, to));
        }
        self.resume_at = to;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(Verdict::of(110, 100), Verdict::Over(10));
        assert_eq!(Verdict::of(96, 100), Verdict::Under(4));
        assert_eq!(Verdict::of(8, 8), Verdict::Exact);
        assert_eq!(Verdict::Under(4).name(), "under");
        assert_eq!(Verdict::Under(4).to_string(), "under by 4");
        assert_eq!(Verdict::Over(10).to_string(), "over by 10");
        assert_eq!(Verdict::Exact.to_string(), "exact");
    }

    #[test]
    fn a_difference_past_i64_is_said_in_full() {
        // 1.15 × 10¹⁹ over: a wrapping difference would have read "under".
        let v = Verdict::of(i64::MAX, -2_305_843_009_213_693_952);
        assert_eq!(v, Verdict::Over(11_529_215_046_068_469_759));
        assert_eq!(Verdict::of(i64::MIN, i64::MAX), Verdict::Under(u64::MAX));
        assert_eq!(Verdict::of(-5, 7), Verdict::Under(12));
        assert_eq!(Verdict::of(3, 3), Verdict::Exact);
    }

    #[test]
    fn duplicates_losses_and_backward_moves() {
        let mut c = Checker::new(BitSet::<2>::new(), false);
        for o in [0, 1, 2, 1] {
            c.applied(o, o).unwrap();
        }
        c.committed(3, |o| o).unwrap();
        c.recovered(1, |o| o).unwrap();
        c.settle(5, |_| true);
        let a = c.anomalies();
        assert_eq!((a.duplicate, a.first_duplicate), (1, Some(1)));
        assert_eq!((a.lost_write, a.first_lost), (2, Some(3)));
        assert_eq!((a.nonmonotonic, a.first_nonmonotonic), (1, Some((3, 1))));
        assert_eq!(
            BitSet::<1>::new().insert(64),
            Err(CheckError::Capacity { capacity: 64 })
        );
    }

    #[test]
    fn in_record_effects_count_at_the_commit_and_vanish_at_a_crash() {
        let mut c = Checker::new(BitSet::<1>::new(), true);
        c.applied(0, 0).unwrap();
        c.applied(1, 1).unwrap();
        c.recovered(0, |o| o).unwrap();
        for o in 0..3 {
            c.applied(o, o).unwrap();
        }
        c.committed(3, |o| o).unwrap();
        c.settle(3, |_| true);
        assert!(c.anomalies().is_empty(), "{:?}", c.anomalies());
    }

    #[test]
    fn a_repeat_is_a_duplicate_unless_the_rule_makes_it_harmless() {
        for (harmless, duplicates) in [(false, 1), (true, 0)] {
            let mut c = Checker::new(BitSet::<1>::new(), false).repeats_harmless(harmless);
            c.applied(0, 0).unwrap();
            c.recovered(0, |o| o).unwrap();
            c.applied(0, 0).unwrap();
            assert_eq!(c.anomalies().duplicate, duplicates, "harmless: {harmless}");
        }
    }
}
