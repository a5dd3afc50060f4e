//! `idem consume`: a real process consumes a scenario into a flash image. Kill it at any
//! instant and run it again: it resumes from what the image holds.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::device;
use crate::image::Image;
use crate::select::{self, ScenarioKind, StoreKind, WorkloadArgs};

/// Consume a scenario into a flash image, from its committed position to the end.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario.
    scenario: ScenarioKind,
    /// Where the effects land.
    #[arg(long, value_enum)]
    store: StoreKind,
    /// The flash image (created erased when missing).
    #[arg(long, value_name = "FILE")]
    flash: PathBuf,
    /// Sleep this long after each effect, so a kill can land mid-stream.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pace_ms: u64,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let args = self.workload.scenario_args();
        let loaded = select::load(Some(self.scenario), &args)?;
        select::check_window(self.store, self.workload.window)?;
        let meta = device::meta_for(&loaded, self.store, self.workload.window);
        let mut image = Image::open_or_create(&self.flash, &meta)?;
        let p = device::recover(&mut image, Some(Duration::from_millis(self.pace_ms)))?;
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(
                out,
                "{}",
                crate::cmd::status::progress_json(&image.meta, &p)
            )?;
        } else {
            writeln!(
                out,
                "{}: consumed to the end ({} events), total {} (true total {})",
                self.flash.display(),
                p.next_offset,
                p.total,
                p.true_total
            )?;
        }
        Ok(ExitCode::SUCCESS)
    }
}
