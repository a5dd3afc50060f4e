//! The pump run, as `idem run pump` and the pump lesson both see it
//! ([`idem_sim::pump`]): 20 doses of 5 ml from a log, the motor's own counter of what it
//! pumped, and resets between a dose's record and its last millilitre.

use idem_sim::pump::{self, Ended, PumpStep, Reset, Schedule, Way};

use crate::error::usage;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PumpRun {
    /// What the controller does about a dose a reset may cut.
    pub way: Way,
    /// The resets.
    pub schedule: Schedule,
}

/// A run's end and its steps.
#[derive(Debug, Clone)]
pub struct PumpOutcome {
    /// How it ended: the motor's counts against the truth.
    pub end: Ended,
    /// Every step.
    pub steps: Vec<PumpStep>,
}

/// The way named `name`, or a sentence naming the three.
pub fn way(name: Option<&str>) -> anyhow::Result<Way> {
    let names = || {
        Way::ALL
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let name = name.ok_or_else(|| usage(format!("pump takes --way: one of {}", names())))?;
    Way::from_name(name).ok_or_else(|| usage(format!("unknown way {name:?}: one of {}", names())))
}

/// The resets of `--schedule` (none for `--no-crash`, the scenario's own without
/// either).
pub fn schedule(text: Option<&str>, no_crash: bool) -> anyhow::Result<Schedule> {
    match (text.map(str::trim), no_crash) {
        (_, true) | (Some("" | "none"), _) => Ok(Schedule::new()),
        (None, false) => Ok(pump::default_schedule()),
        (Some(text), false) => pump::parse_schedule(text).map_err(|e| usage(e.to_string())),
    }
}

/// Runs it.
pub fn run(r: &PumpRun) -> anyhow::Result<PumpOutcome> {
    let mut steps = Vec::new();
    let end = pump::run_traced(r.way, &r.schedule, &mut |s| steps.push(s))
        .map_err(|e| anyhow::anyhow!("the pump's flash refused: {e:?}"))?;
    Ok(PumpOutcome { end, steps })
}

/// A reset point as `--schedule` spells it.
pub fn point(r: &Reset) -> String {
    format!("crash@pump:{}/{}", r.offset, r.pumped)
}

/// One step in words; `None` for a millilitre pumped (a front end counts them).
pub fn line(step: &PumpStep) -> Option<String> {
    Some(match *step {
        PumpStep::Boot { resume_at } => format!("boot: the consumer resumes at offset {resume_at}"),
        PumpStep::Recorded { offset } => {
            format!("offset {offset}: record durable, dose commanded")
        }
        PumpStep::Skipped { offset } => {
            format!("offset {offset}: skipped, its command id is in the record")
        }
        PumpStep::Pumped { .. } => return None,
        PumpStep::Reasserted { offset } => {
            format!("boot: pump the newest dose again (offset {offset})")
        }
        PumpStep::Asked {
            offset,
            pumped,
            commanded,
        } => format!(
            "boot: offset {offset}'s intent has no done; the counter shows {pumped} of the {commanded} ml commanded"
        ),
        PumpStep::Done { offset } => format!("offset {offset}: done durable in the ledger"),
        PumpStep::Reset(r) => format!(
            "RESET with {} ml of offset {}'s dose pumped ({})",
            r.pumped,
            r.offset,
            point(&r)
        ),
    })
}

/// The steps in words, each run of millilitres pumped as one line.
pub fn lines(steps: &[PumpStep]) -> Vec<String> {
    let mut out = Vec::new();
    let mut pumping: Option<(u64, u64)> = None;
    let flush = |out: &mut Vec<String>, pumping: &mut Option<(u64, u64)>| {
        if let Some((offset, ml)) = pumping.take() {
            out.push(format!("offset {offset}: motor pumps {ml} ml"));
        }
    };
    for s in steps {
        match (*s, pumping) {
            (PumpStep::Pumped { offset, ml }, Some((o, n))) if o == offset => {
                pumping = Some((o, n + u64::from(ml)));
            }
            (PumpStep::Pumped { offset, ml }, _) => {
                flush(&mut out, &mut pumping);
                pumping = Some((offset, u64::from(ml)));
            }
            _ => {
                flush(&mut out, &mut pumping);
                out.extend(line(s));
            }
        }
    }
    flush(&mut out, &mut pumping);
    out
}

/// The end in words: the counter against the truth, and each dose pumped other than
/// once.
pub fn summary(r: &PumpRun, end: &Ended) -> Vec<String> {
    let pumped = end.motor.pumped_ml;
    let verdict = match pumped.cmp(&end.true_ml) {
        std::cmp::Ordering::Equal => "exact".to_string(),
        std::cmp::Ordering::Less => format!("under by {}", end.true_ml - pumped),
        std::cmp::Ordering::Greater => format!("over by {}", pumped - end.true_ml),
    };
    let mut out = vec![format!(
        "way {}: the motor's counter shows {pumped} ml, {verdict} (true total {} ml: {} doses of {} ml), after {}",
        r.way.name(),
        end.true_ml,
        pump::DOSES,
        pump::DOSE_ML,
        crate::render::count(end.resets as u64, "reset")
    )];
    for (offset, &ml) in end.motor.per_dose.iter().enumerate() {
        if ml < pump::DOSE_ML {
            out.push(format!(
                "  offset {offset}: {ml} of {} ml pumped (lost)",
                pump::DOSE_ML
            ));
        } else if ml > pump::DOSE_ML {
            out.push(format!(
                "  offset {offset}: {ml} of {} ml pumped (doubled)",
                pump::DOSE_ML
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenarios_run_reads_as_a_person_would_tell_it() {
        let r = PumpRun {
            way: way(Some("reassert")).unwrap(),
            schedule: schedule(None, false).unwrap(),
        };
        let o = run(&r).unwrap();
        assert_eq!(
            summary(&r, &o.end),
            [
                "way reassert: the motor's counter shows 105 ml, over by 5 (true total 100 ml: 20 doses of 5 ml), after 2 resets",
                "  offset 13: 10 of 5 ml pumped (doubled)",
            ]
        );
        let text = lines(&o.steps);
        let first_reset = text.iter().position(|l| l.starts_with("RESET")).unwrap();
        assert_eq!(
            text[first_reset - 1..first_reset + 4],
            [
                "offset 6: record durable, dose commanded",
                "RESET with 0 ml of offset 6's dose pumped (crash@pump:6/0)",
                "boot: the consumer resumes at offset 4",
                "boot: pump the newest dose again (offset 6)",
                "offset 6: motor pumps 5 ml",
            ]
        );
        assert_eq!(
            way(Some("twice")).unwrap_err().to_string(),
            "unknown way \"twice\": one of after, reassert, effects"
        );
        assert_eq!(
            schedule(Some("crash@pump:3/9"), false)
                .unwrap_err()
                .to_string(),
            "9 ml is more than a dose's 5"
        );
    }
}
