//! `idem consume`: a real process consumes a scenario into a flash image. Kill it at any
//! instant and run it again: it resumes from what the image holds.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::device;
use crate::image::Image;
use crate::select::{self, ScenarioArgs, ScenarioKind, StoreKind, WINDOW_CAPACITY};

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
    /// Number of +1 events (ddia only) [default: 100]
    #[arg(long)]
    events: Option<u64>,
    /// Commit the consumer position every K events [default: 10]
    #[arg(long, value_name = "K")]
    checkpoint_every: Option<u64>,
    /// How many message ids the message-id store remembers (1 to 32)
    #[arg(long, value_name = "W", default_value_t = WINDOW_CAPACITY)]
    window: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let args = ScenarioArgs {
            events: self.events,
            checkpoint_every: self.checkpoint_every,
            no_crash: true,
            window: self.window,
            ..ScenarioArgs::default()
        };
        let loaded = select::load(Some(self.scenario), &args)?;
        let meta = device::meta_for(&loaded, self.store, self.window);
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
