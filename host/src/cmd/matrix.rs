//! `idem matrix`: every store against every fault, and the dual-write fixes.

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
        let mut rows = Vec::new();
        for store in StoreKind::ALL {
            let mut cells = Vec::new();
            for f in &FAULTS {
                let args = ScenarioArgs {
                    producer: f.producer,
                    ..ScenarioArgs::default()
                };
                let loaded = select::load(Some(f.scenario), &args)?;
                cells.push(select::run(&loaded, store, WINDOW_CAPACITY, false)?.report);
            }
            rows.push((store, cells));
        }
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
            let rows: Vec<_> = rows
                .iter()
                .map(|(store, cells)| {
                    json!({
                        "store": store.name(),
                        "cells": cells.iter().zip(&FAULTS).map(|(r, f)| json!({
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
                .collect();
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
                json!({ "faults": faults, "rows": rows, "dual_write": dual_rows })
            )?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        write!(out, "{:<13}", "store")?;
        for f in &FAULTS {
            write!(out, " {:<23}", f.title)?;
        }
        writeln!(out)?;
        write!(out, "{:<13}", "  (truth)")?;
        for r in &rows[0].1 {
            write!(out, " {:<23}", r.true_total)?;
        }
        writeln!(out)?;
        for (store, cells) in &rows {
            write!(out, "{:<13}", store.name())?;
            for r in cells {
                write!(out, " {:<23}", cell(r))?;
            }
            writeln!(out)?;
        }
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
            "\nrerun a cell: idem run <scenario> --store <store> [--producer idempotent] --trace; idem run dual-write --fix <fix>"
        )?;
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}
