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
use idem_lab::matrix::{FAULTS, Fault, GAUGE_FAULTS, table};

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
