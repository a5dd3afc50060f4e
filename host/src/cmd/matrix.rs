//! `idem matrix`: every store against every fault.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idem_core::check::Verdict;
use serde_json::json;

use crate::render;
use crate::select::{self, ScenarioArgs, ScenarioKind, StoreKind, WINDOW_CAPACITY};

/// The faults of the matrix: a name, what it is, and the scenario that shows it.
const FAULTS: [(&str, &str, ScenarioKind); 2] = [
    (
        "consumer-crash",
        "consumer crash (ddia)",
        ScenarioKind::Ddia,
    ),
    (
        "producer-retry",
        "producer retry (payments)",
        ScenarioKind::Payments,
    ),
];

/// Every store against every fault.
#[derive(Debug, Args)]
pub struct Cmd {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let args = ScenarioArgs::default();
        let mut rows = Vec::new();
        for store in StoreKind::ALL {
            let mut cells = Vec::new();
            for (fault, _, kind) in FAULTS {
                let loaded = select::load(Some(kind), &args)?;
                let r = select::run(&loaded, store, WINDOW_CAPACITY, false)?.report;
                cells.push((fault, loaded.name(), r));
            }
            rows.push((store, cells));
        }
        if self.json {
            let rows: Vec<_> = rows
                .iter()
                .map(|(store, cells)| {
                    json!({
                        "store": store.name(),
                        "cells": cells.iter().map(|(fault, scenario, r)| json!({
                            "fault": fault,
                            "scenario": scenario,
                            "verdict": Verdict::of(r.final_total, r.true_total).name(),
                            "final_total": r.final_total,
                            "true_total": r.true_total,
                            "flash_writes": r.flash.writes,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let faults: Vec<_> = FAULTS.iter().map(|(f, _, _)| *f).collect();
            writeln!(out, "{}", json!({ "faults": faults, "rows": rows }))?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        write!(out, "{:<12}", "store")?;
        for (_, title, _) in FAULTS {
            write!(out, "  {title:<28}")?;
        }
        writeln!(out)?;
        for (store, cells) in &rows {
            write!(out, "{:<12}", store.name())?;
            for (_, _, r) in cells {
                let cell = format!(
                    "{} {}/{}",
                    render::verdict_text(Verdict::of(r.final_total, r.true_total)),
                    r.final_total,
                    r.true_total
                );
                write!(out, "  {cell:<28}")?;
            }
            writeln!(out)?;
        }
        writeln!(
            out,
            "\ncells: verdict final/true total; rerun one with `idem run <scenario> --store <store> --trace`"
        )?;
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}
