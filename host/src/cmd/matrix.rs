//! `idem matrix`: every store against every fault, the dual-write fixes, and the
//! gauges (naturally idempotent operations) against theirs.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idem_core::lab::check::Verdict;
use idem_core::lab::sim::Report;
use serde_json::json;

use crate::render::verdict_name;
use crate::select::{
    self, FixArg, ProducerArg, ScenarioArgs, ScenarioKind, SinkChoice, StoreKind, WINDOW_CAPACITY,
};

/// A fault of the matrix: a name, a column title, and the run that shows it.
struct Fault {
    name: &'static str,
    title: &'static str,
    scenario: ScenarioKind,
    producer: ProducerArg,
}

const FAULTS: [Fault; 6] = [
    Fault {
        name: "consumer-crash",
        title: "consumer crash",
        scenario: ScenarioKind::Ddia,
        producer: ProducerArg::Plain,
    },
    Fault {
        name: "producer-retry",
        title: "producer retry",
        scenario: ScenarioKind::Payments,
        producer: ProducerArg::Plain,
    },
    Fault {
        name: "producer-retry-idempotent",
        title: "retry, idem. producer",
        scenario: ScenarioKind::Payments,
        producer: ProducerArg::Idempotent,
    },
    Fault {
        name: "application-resend",
        title: "app resend, idem. prod.",
        scenario: ScenarioKind::Resend,
        producer: ProducerArg::Idempotent,
    },
    Fault {
        name: "zombie-producer",
        title: "zombie producer",
        scenario: ScenarioKind::Zombie,
        producer: ProducerArg::Plain,
    },
    Fault {
        name: "late-retry",
        title: "retry 40 msgs late",
        scenario: ScenarioKind::LateRetry,
        producer: ProducerArg::Plain,
    },
];

/// The gauges' faults: the DDIA consumer crash on readings, and an old reading that
/// arrives after the last.
const GAUGE_FAULTS: [Fault; 2] = [
    Fault {
        name: "consumer-crash",
        title: "consumer crash",
        scenario: ScenarioKind::Gauge,
        producer: ProducerArg::Plain,
    },
    Fault {
        name: "late-reading",
        title: "late reading",
        scenario: ScenarioKind::LateReading,
        producer: ProducerArg::Plain,
    },
];

/// The reports of `stores` against `faults`, a row per store.
fn table(stores: &[StoreKind], faults: &[Fault]) -> anyhow::Result<Vec<(StoreKind, Vec<Report>)>> {
    let mut rows = Vec::new();
    for &store in stores {
        let mut cells = Vec::new();
        for f in faults {
            let args = ScenarioArgs {
                producer: f.producer,
                ..ScenarioArgs::default()
            };
            let loaded = select::load(Some(f.scenario), &args)?;
            cells.push(select::run(&loaded, store, WINDOW_CAPACITY, false)?.report);
        }
        rows.push((store, cells));
    }
    Ok(rows)
}

/// The JSON rows of a table.
fn rows_json(rows: &[(StoreKind, Vec<Report>)], faults: &[Fault]) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|(store, cells)| {
            json!({
                "store": store.name(),
                "cells": cells.iter().zip(faults).map(|(r, f)| json!({
                    "fault": f.name,
                    "scenario": f.scenario.name(),
                    "producer": if f.producer == ProducerArg::Idempotent { "idempotent" } else { "plain" },
                    "verdict": Verdict::of(r.final_total, r.true_total).name(),
                    "final_total": r.final_total,
                    "true_total": r.true_total,
                    "flash_writes": r.flash.writes,
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// A table as text: a header of fault titles, the truths, a row per store.
fn write_table(
    out: &mut impl Write,
    rows: &[(StoreKind, Vec<Report>)],
    faults: &[Fault],
) -> std::io::Result<()> {
    write!(out, "{:<13}", "store")?;
    for f in faults {
        write!(out, " {:<23}", f.title)?;
    }
    writeln!(out)?;
    write!(out, "{:<13}", "  (truth)")?;
    for r in &rows[0].1 {
        write!(out, " {:<23}", r.true_total)?;
    }
    writeln!(out)?;
    for (store, cells) in rows {
        write!(out, "{:<13}", store.name())?;
        for r in cells {
            write!(out, " {:<23}", cell(r))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Every store against every fault.
#[derive(Debug, Args)]
pub struct Cmd {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn cell(r: &Report) -> String {
    match Verdict::of(r.final_total, r.true_total) {
        Verdict::Exact => format!("exact {}", r.final_total),
        Verdict::Over(d) => format!("over {} (+{d})", r.final_total),
        Verdict::Under(d) => format!("under {} (-{d})", r.final_total),
    }
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let rows = table(&StoreKind::ALL, &FAULTS)?;
        let gauges = table(&StoreKind::GAUGES, &GAUGE_FAULTS)?;
        let duals: Vec<(&str, Report)> = FixArg::ALL
            .iter()
            .map(|&fix| {
                let args = ScenarioArgs {
                    fix: Some(fix),
                    ..ScenarioArgs::default()
                };
                let loaded = select::load(Some(ScenarioKind::DualWrite), &args)?;
                let r = select::run(&loaded, SinkChoice::Dual(fix), WINDOW_CAPACITY, false)?;
                Ok((fix.name(), r.report))
            })
            .collect::<anyhow::Result<_>>()?;
        if self.json {
            let gauge_faults: Vec<_> = GAUGE_FAULTS.iter().map(|f| f.name).collect();
            let gauges = json!({
                "faults": gauge_faults,
                "rows": rows_json(&gauges, &GAUGE_FAULTS),
            });
            let rows = rows_json(&rows, &FAULTS);
            let dual_rows: Vec<_> = duals
                .iter()
                .map(|(fix, r)| {
                    json!({
                        "fault": "dual-write-crash",
                        "fix": fix,
                        "verdict": verdict_name(r),
                        "total": r.views.map(|v| v.0),
                        "index_sum": r.views.map(|v| v.1),
                        "true_total": r.true_total,
                        "flash_writes": r.flash.writes,
                    })
                })
                .collect();
            let faults: Vec<_> = FAULTS.iter().map(|f| f.name).collect();
            writeln!(
                out,
                "{}",
                json!({ "faults": faults, "rows": rows, "dual_write": dual_rows, "gauges": gauges })
            )?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        write_table(&mut out, &rows, &FAULTS)?;
        writeln!(out)?;
        writeln!(
            out,
            "dual writes (a crash between the two writes of offset {}):",
            idem_core::lab::dual::DUAL_CRASH
        )?;
        for (fix, r) in &duals {
            writeln!(
                out,
                "  --fix {fix:<7} total {:>4}  index {:>4}  true {:>4}  {}",
                r.views.map_or(r.final_total, |v| v.0),
                r.views.map_or(r.final_total, |v| v.1),
                r.true_total,
                verdict_name(r)
            )?;
        }
        writeln!(
            out,
            "\nnaturally idempotent operations (the gauge: reading i + 1 at offset i; the truth is the last reading):"
        )?;
        write_table(&mut out, &gauges, &GAUGE_FAULTS)?;
        writeln!(
            out,
            "\nrerun a cell: idem run <scenario> --store <store> [--producer idempotent] --trace; idem run dual-write --fix <fix>; idem run gauge|late-reading --store set|max"
        )?;
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}
