//! `idem consume`: a real process consumes a scenario into a flash image. Kill it at any
//! instant and run it again: it resumes from what the image holds.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use idem_host::image::{Image, SyncMode};
use idem_host::image_consumer;
use idem_lab::render;
use idem_lab::select::{ScenarioKind, StoreKind, WorkloadArgs};

/// Consume a scenario into a flash image, from its committed position to the end.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario.
    scenario: ScenarioKind,
    /// Where the effects land.
    #[arg(long, value_parser = idem_lab::choice::store())]
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
    /// No progress lines on stderr (one per checkpoint by default).
    #[arg(long)]
    quiet: bool,
    /// When the image's writes reach the disk
    #[arg(long, value_parser = idem_lab::choice::sync(), default_value = "checkpoint")]
    sync: SyncMode,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let (loaded, meta) = image_consumer::prepare(self.scenario, self.store, &self.workload)?;
        let mut image = Image::open_or_create(&self.flash, &meta)?;
        let positions = idem_host::image::bytes(image_consumer::layout(&image.meta).positions);
        image.flash.set_sync(self.sync, vec![positions]);
        // One line per durable checkpoint on stderr, as it happens: something to watch
        // (and to interrupt) while stdout keeps the one final report.
        let events = loaded.events();
        let quiet = self.quiet;
        let mut progress = |next: u64, total: i64| {
            if quiet {
                return;
            }
            eprintln!(
                "checkpoint: {} of {events}; total {total}",
                render::position_text(next)
            );
        };
        let p = image_consumer::consume(
            &mut image,
            Duration::from_millis(self.pace_ms),
            &mut progress,
        )?;
        let mut out = std::io::stdout().lock();
        if self.json {
            let mut v = crate::cmd::status::progress_json(&image.meta, &p);
            v["syncs"] = image.flash.syncs().into();
            writeln!(out, "{v}")?;
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
