//! Crash points, their one textual grammar, and the [`Plan`] that says when one fires.
//!
//! A point is matched against the consumer's own [`Step`]s, so the simulator, a sweep
//! and the board's planned crash all crash at the same places.
//!
//! ```text
//! crash@deliver:O   after offset O was delivered, before its effect
//! crash@between:O   between the two writes of offset O's effect (sinks written one
//!                   after the other, such as dual writes without a fix)
//! crash@effect:O    after the effect of offset O (and before its checkpoint)
//! crash@prepare:O   just after a two-phase store's prepared record for the commit
//!                   that covers offset O, before the decision
//! crash@commit:O    just after the commit that covers offset O
//! crash@torn:W      in the middle of the W-th flash word write of the run (from 1)
//! crash@erase:E     in the middle of the E-th flash page erase of the run (from 1)
//! ```
//! `deliver`, `between`, `effect`, `prepare` and `commit` take an occurrence suffix `#n` when offset O is seen
//! more than once (`crash@effect:45#2` is during the replay; `#1` is the default).
//! A schedule is several points joined with commas.

use core::fmt;
use core::str::FromStr;

use idem_core::consumer::Step;
use idem_core::log::Offset;

/// The most crash points one plan holds.
pub const MAX_CRASHES: usize = 8;

/// Where in a run a crash happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum At {
    /// After the delivery of an offset.
    Deliver(Offset),
    /// Between the two writes of an offset's effect.
    Between(Offset),
    /// After the effect of an offset.
    Effect(Offset),
    /// After a two-phase prepare for the commit that covers an offset.
    Prepare(Offset),
    /// After the commit that covers an offset (next offset to read = offset + 1).
    Commit(Offset),
    /// In the middle of the n-th flash word write of the run.
    Torn(u64),
    /// In the middle of the n-th flash page erase of the run.
    Erase(u64),
}

/// A crash point: a place and, for offsets, which occurrence of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CrashPoint {
    /// The place.
    pub at: At,
    /// Which occurrence (1 = the first time the place is reached).
    pub occurrence: u32,
}

impl CrashPoint {
    /// The first occurrence of `at`.
    pub const fn new(at: At) -> Self {
        Self { at, occurrence: 1 }
    }

    /// `--crash-after O`: after the effect of offset O, before its checkpoint.
    pub const fn after_effect(offset: Offset) -> Self {
        Self::new(At::Effect(offset))
    }

    /// Whether the consumer's `step` is this point's place (any occurrence).
    pub fn is_at<P>(&self, step: &Step<P>) -> bool {
        match (self.at, step) {
            (At::Deliver(o), Step::Deliver(e)) => e.offset == o,
            (At::Between(o), Step::Between(e)) => e.offset == o,
            (At::Effect(o), Step::Effect(e, _)) => e.offset == o,
            (At::Prepare(o), Step::Prepare { next }) => *next == o + 1,
            (At::Commit(o), Step::Commit { next }) => *next == o + 1,
            _ => false,
        }
    }
}

/// The plan is full: it holds at most [`MAX_CRASHES`] points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanFull;

impl fmt::Display for PlanFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a crash plan holds at most {MAX_CRASHES} points")
    }
}

impl core::error::Error for PlanFull {}

/// A crash plan as a run goes: which points have fired, and how often each offset point's
/// place has been seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    points: heapless::Vec<CrashPoint, MAX_CRASHES>,
    seen: [u32; MAX_CRASHES],
    fired: [bool; MAX_CRASHES],
}

impl Plan {
    /// A plan of `points`, none fired.
    pub fn new(points: &[CrashPoint]) -> Result<Self, PlanFull> {
        Ok(Self {
            points: heapless::Vec::from_slice(points).map_err(|_| PlanFull)?,
            ..Self::default()
        })
    }

    /// The points, in plan order.
    pub fn points(&self) -> &[CrashPoint] {
        &self.points
    }

    /// Counts `step` against the offset points; the point that fires now, if any.
    pub fn on_step<P>(&mut self, step: &Step<P>) -> Option<CrashPoint> {
        let mut crash = None;
        for (i, p) in self.points.iter().enumerate() {
            if !self.fired[i] && p.is_at(step) {
                self.seen[i] += 1;
                if self.seen[i] == p.occurrence {
                    self.fired[i] = true;
                    crash.get_or_insert(*p);
                }
            }
        }
        crash
    }

    /// The pending torn-write and erase points: the earliest word write and erase
    /// (counted from the start of the run) after `writes` and `erases`.
    pub fn next_flash(&self, writes: u64, erases: u64) -> (Option<u64>, Option<u64>) {
        let pending = |pick: fn(At) -> Option<u64>, done: u64| {
            self.pending()
                .filter_map(|p| pick(p.at))
                .filter(|&n| n > done)
                .min()
        };
        (
            pending(|a| if let At::Torn(w) = a { Some(w) } else { None }, writes),
            pending(
                |a| if let At::Erase(e) = a { Some(e) } else { None },
                erases,
            ),
        )
    }

    /// The torn-write or erase point that a power cut at `writes` word writes and
    /// `erases` erases hit, marked as fired.
    pub fn fire_flash(&mut self, writes: u64, erases: u64) -> Option<CrashPoint> {
        let i = self.points.iter().enumerate().position(|(i, p)| {
            !self.fired[i]
                && match p.at {
                    At::Torn(w) => w == writes,
                    At::Erase(e) => e == erases,
                    _ => false,
                }
        })?;
        self.fired[i] = true;
        Some(self.points[i])
    }

    /// Records a crash at `point` that the plan did not hold, as fired (when it has room).
    pub fn record(&mut self, point: CrashPoint) {
        if !self.points.contains(&point) && self.points.push(point).is_ok() {
            self.fired[self.points.len() - 1] = true;
        }
    }

    /// The points that have fired, in plan order.
    pub fn fired(&self) -> impl Iterator<Item = CrashPoint> + '_ {
        self.points
            .iter()
            .zip(self.fired)
            .filter(|(_, f)| *f)
            .map(|(p, _)| *p)
    }

    /// The points that have not fired.
    pub fn pending(&self) -> impl Iterator<Item = &CrashPoint> + '_ {
        self.points
            .iter()
            .zip(self.fired)
            .filter(|(_, f)| !*f)
            .map(|(p, _)| p)
    }

    /// Whether every point has fired.
    pub fn done(&self) -> bool {
        self.pending().next().is_none()
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, n) = match self.at {
            At::Deliver(o) => ("deliver", o),
            At::Between(o) => ("between", o),
            At::Effect(o) => ("effect", o),
            At::Prepare(o) => ("prepare", o),
            At::Commit(o) => ("commit", o),
            At::Torn(w) => ("torn", w),
            At::Erase(e) => ("erase", e),
        };
        write!(f, "crash@{name}:{n}")?;
        if self.occurrence != 1 {
            write!(f, "#{}", self.occurrence)?;
        }
        Ok(())
    }
}

/// Why a crash point did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseCrashError {
    /// It does not start with `crash@`.
    Prefix,
    /// The place is not one of deliver, between, effect, prepare, commit, torn, erase.
    Kind,
    /// The number (or the occurrence) is missing or not a number.
    Number,
    /// The number (or the occurrence) is too large for its type.
    TooLarge,
    /// Occurrence 0, or an occurrence on torn/erase, or torn/erase 0.
    Occurrence,
}

impl fmt::Display for ParseCrashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prefix => "a crash point starts with `crash@`",
            Self::Kind => {
                "a crash point is one of deliver, between, effect, prepare, commit, torn, erase"
            }
            Self::Number => "a crash point needs a number after `:` (and after `#`)",
            Self::TooLarge => {
                "a crash point's offset is at most 18446744073709551615, its occurrence at most 4294967295"
            }
            Self::Occurrence => {
                "occurrences count from #1, torn and erase count from 1 and take no #"
            }
        })
    }
}

impl core::error::Error for ParseCrashError {}

impl FromStr for CrashPoint {
    type Err = ParseCrashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .trim()
            .strip_prefix("crash@")
            .ok_or(ParseCrashError::Prefix)?;
        let (kind, num) = rest.split_once(':').ok_or(ParseCrashError::Number)?;
        let number = |e: core::num::ParseIntError| match e.kind() {
            core::num::IntErrorKind::PosOverflow => ParseCrashError::TooLarge,
            _ => ParseCrashError::Number,
        };
        let (num, occurrence) = match num.split_once('#') {
            Some((n, occ)) => (n, Some(occ.parse::<u32>().map_err(number)?)),
            None => (num, None),
        };
        let n: u64 = num.parse().map_err(number)?;
        let at = match kind {
            "deliver" => At::Deliver(n),
            "between" => At::Between(n),
            "effect" => At::Effect(n),
            "prepare" => At::Prepare(n),
            "commit" => At::Commit(n),
            "torn" => At::Torn(n),
            "erase" => At::Erase(n),
            _ => return Err(ParseCrashError::Kind),
        };
        let flash = matches!(at, At::Torn(_) | At::Erase(_));
        match occurrence {
            Some(0) => Err(ParseCrashError::Occurrence),
            Some(_) if flash => Err(ParseCrashError::Occurrence),
            _ if flash && n == 0 => Err(ParseCrashError::Occurrence),
            occ => Ok(Self {
                at,
                occurrence: occ.unwrap_or(1),
            }),
        }
    }
}

/// Parses a comma-separated schedule into `out`; returns how many points it held.
/// More points than `out` holds is [`ScheduleError::TooMany`].
pub fn parse_schedule(s: &str, out: &mut [CrashPoint]) -> Result<usize, ScheduleError> {
    let (mut n, capacity) = (0, out.len());
    if s.trim().is_empty() {
        return Err(ScheduleError::Empty);
    }
    for (i, part) in s.split(',').enumerate() {
        if part.trim().is_empty() {
            return Err(ScheduleError::EmptyPart { index: i + 1 });
        }
        let point: CrashPoint = part.parse().map_err(ScheduleError::Point)?;
        if out[..n].contains(&point) {
            return Err(ScheduleError::Duplicate(point));
        }
        let slot = out.get_mut(n).ok_or(ScheduleError::TooMany { capacity })?;
        *slot = point;
        n += 1;
    }
    if n == 0 {
        return Err(ScheduleError::Empty);
    }
    Ok(n)
}

/// Why a schedule did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError {
    /// One point did not parse.
    Point(ParseCrashError),
    /// More points than the schedule can hold.
    TooMany {
        /// How many points fit.
        capacity: usize,
    },
    /// No point at all.
    Empty,
    /// Nothing between two commas (or before or after one): point number `index`.
    EmptyPart {
        /// Which comma-separated part, from 1.
        index: usize,
    },
    /// The same point twice: a crash happens once at a given point.
    Duplicate(CrashPoint),
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Point(e) => e.fmt(f),
            Self::TooMany { capacity } => {
                write!(f, "a schedule holds at most {capacity} crash points")
            }
            Self::Empty => f.write_str("a schedule needs at least one crash point"),
            Self::EmptyPart { index } => {
                write!(f, "part {index} of the schedule is empty (a stray comma?)")
            }
            Self::Duplicate(p) => write!(
                f,
                "{p} is in the schedule twice (a point happens once; `#N` names its Nth occurrence)"
            ),
        }
    }
}

impl core::error::Error for ScheduleError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_round_trips() {
        for s in [
            "crash@deliver:0",
            "crash@between:25",
            "crash@effect:49",
            "crash@effect:45#2",
            "crash@commit:39",
            "crash@torn:17",
            "crash@erase:3",
        ] {
            let p: CrashPoint = s.parse().unwrap();
            let mut buf = heapless::String::<32>::new();
            core::fmt::write(&mut buf, format_args!("{p}")).unwrap();
            assert_eq!(buf.as_str(), s);
        }
        assert_eq!(
            "crash@effect:45#2".parse(),
            Ok(CrashPoint {
                at: At::Effect(45),
                occurrence: 2
            })
        );
    }

    #[test]
    fn bad_points_are_refused() {
        assert_eq!(
            "effect:1".parse::<CrashPoint>(),
            Err(ParseCrashError::Prefix)
        );
        assert_eq!(
            "crash@apply:1".parse::<CrashPoint>(),
            Err(ParseCrashError::Kind)
        );
        assert_eq!(
            "crash@effect:x".parse::<CrashPoint>(),
            Err(ParseCrashError::Number)
        );
        assert_eq!(
            "crash@effect:1#0".parse::<CrashPoint>(),
            Err(ParseCrashError::Occurrence)
        );
        assert_eq!(
            "crash@torn:0".parse::<CrashPoint>(),
            Err(ParseCrashError::Occurrence)
        );
        assert_eq!(
            "crash@torn:3#2".parse::<CrashPoint>(),
            Err(ParseCrashError::Occurrence)
        );
    }

    #[test]
    fn schedules_are_comma_separated_and_bounded() {
        let mut out = [CrashPoint::new(At::Effect(0)); 2];
        assert_eq!(
            parse_schedule("crash@effect:1, crash@commit:9", &mut out),
            Ok(2)
        );
        assert_eq!(out[1], CrashPoint::new(At::Commit(9)));
        assert_eq!(
            parse_schedule("crash@effect:1,crash@effect:2,crash@effect:3", &mut out),
            Err(ScheduleError::TooMany { capacity: 2 })
        );
        assert_eq!(parse_schedule(" ", &mut out), Err(ScheduleError::Empty));
    }
}
