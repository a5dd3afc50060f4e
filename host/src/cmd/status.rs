//! `idem status`: what a flash image holds, read without changing it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use idem_host::image::{Image, Meta};
use idem_host::image_consumer::{self, Progress};

/// Show the store, scenario, position and total held by a flash image.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The flash image.
    #[arg(long, value_name = "FILE")]
    flash: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The JSON object of `status --json` (and `consume --json`).
pub fn progress_json(meta: &Meta, p: &Progress) -> Value {
    json!({
        "store": meta.store,
        "scenario": meta.scenario,
        "events": p.events,
        "checkpoint_every": meta.checkpoint_every,
        "next_offset": p.next_offset,
        "total": p.total,
        "true_total": p.true_total,
        "done": p.next_offset >= p.events,
    })
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut image = Image::open(&self.flash, false)?;
        let p = image_consumer::recover(&mut image, None)?;
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", progress_json(&image.meta, &p))?;
            return Ok(ExitCode::SUCCESS);
        }
        let m = &image.meta;
        writeln!(out, "{}: {}", self.flash.display(), m.describe())?;
        writeln!(
            out,
            "  next offset to read  {} of {}{}",
            p.next_offset,
            p.events,
            if p.next_offset >= p.events {
                " (done)"
            } else {
                ""
            }
        )?;
        writeln!(out, "  total                {}", p.total)?;
        writeln!(out, "  true total           {}", p.true_total)?;
        Ok(ExitCode::SUCCESS)
    }
}
