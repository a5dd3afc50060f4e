//! `idem run pump`: the dosing pump's run ([`idem_lab::pump`]), its steps with
//! `--trace`, its end as text or JSON.

use std::io::Write;
use std::process::ExitCode;

use idem_lab::error::usage;
use idem_lab::pump::{self, PumpRun};

impl super::Cmd {
    /// `idem run pump`.
    pub(super) fn pump(&self) -> anyhow::Result<ExitCode> {
        if self.store.is_some() || self.fix.is_some() || self.qos.is_some() {
            return Err(usage(
                "pump takes --way, not --store, --fix or --qos: its store is the pump's own",
            ));
        }
        if self.args.crash_after.is_some() {
            return Err(usage(
                "pump takes --schedule crash@pump:OFFSET/ML, not --crash-after",
            ));
        }
        let r = PumpRun {
            way: pump::way(self.way.as_deref())?,
            schedule: pump::schedule(self.args.schedule.as_deref(), self.args.no_crash)?,
        };
        let o = pump::run(&r)?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if self.json {
            let json = serde_json::json!({
                "scenario": "pump",
                "way": r.way.name(),
                "schedule": r.schedule.iter().map(pump::point).collect::<Vec<_>>(),
                "resets": o.end.resets,
                "pumped_ml": o.end.motor.pumped_ml,
                "true_ml": o.end.true_ml,
                "per_dose_ml": o.end.motor.per_dose,
            });
            writeln!(out, "{json}")?;
        } else {
            if self.trace || self.replay {
                for line in pump::lines(&o.steps) {
                    writeln!(out, "{line}")?;
                }
                writeln!(out)?;
            }
            for line in pump::summary(&r, &o.end) {
                writeln!(out, "{line}")?;
            }
        }
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}
