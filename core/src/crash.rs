//! Crash points and their one textual grammar.
//!
//! ```text
//! crash@deliver:O   after offset O was delivered, before its effect
//! crash@effect:O    after the effect of offset O (and before its checkpoint)
//! crash@prepare:O   just after a two-phase store's prepared record for the commit
//!                   that covers offset O, before the decision
//! crash@commit:O    just after the commit that covers offset O
//! crash@torn:W      in the middle of the W-th flash word write of the run (from 1)
//! crash@erase:E     in the middle of the E-th flash page erase of the run (from 1)
//! ```
//! `deliver`, `effect`, `prepare` and `commit` take an occurrence suffix `#n` when offset O is seen
//! more than once (`crash@effect:45#2` is during the replay; `#1` is the default).
//! A schedule is several points joined with commas.

use core::fmt;
use core::str::FromStr;

use crate::log::Offset;

/// Where in a run a crash happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum At {
    /// After the delivery of an offset.
    Deliver(Offset),
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
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, n) = match self.at {
            At::Deliver(o) => ("deliver", o),
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
    /// The place is not one of deliver, effect, commit, torn, erase.
    Kind,
    /// The number (or the occurrence) is missing or not a number.
    Number,
    /// Occurrence 0, or an occurrence on torn/erase, or torn/erase 0.
    Occurrence,
}

impl fmt::Display for ParseCrashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prefix => "a crash point starts with `crash@`",
            Self::Kind => "a crash point is one of deliver, effect, prepare, commit, torn, erase",
            Self::Number => "a crash point needs a number after `:` (and after `#`)",
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
        let (num, occurrence) = match num.split_once('#') {
            Some((n, occ)) => (
                n,
                Some(occ.parse::<u32>().map_err(|_| ParseCrashError::Number)?),
            ),
            None => (num, None),
        };
        let n: u64 = num.parse().map_err(|_| ParseCrashError::Number)?;
        let at = match kind {
            "deliver" => At::Deliver(n),
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
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let slot = out.get_mut(n).ok_or(ScheduleError::TooMany { capacity })?;
        *slot = part.parse().map_err(ScheduleError::Point)?;
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
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Point(e) => e.fmt(f),
            Self::TooMany { capacity } => {
                write!(f, "a schedule holds at most {capacity} crash points")
            }
            Self::Empty => f.write_str("a schedule needs at least one crash point"),
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
