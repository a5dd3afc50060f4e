//! `idem chaos`: real crashes. Spawns `idem consume` processes paced so that a kill
//! lands mid-stream, SIGKILLs each at a seeded random instant, restarts until the
//! stream is done, and checks the store's final total against the truth.
//!
//! Bounded: at most `--kills` kills and two minutes of killing, then one last unpaced
//! run finishes the stream.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use idem_sim::check::Verdict;
use idem_sim::rng::SplitMix64;
use idem_sim::run::Report;
use serde_json::json;

use idem_host::cleanup;
use idem_host::image::Image;
use idem_host::image_consumer::{self, Progress};
use idem_lab::error::usage;
use idem_lab::select::{self, Loaded, ScenarioKind, StoreKind, WorkloadArgs};

/// The longest the kill loop runs.
const KILL_BUDGET: Duration = Duration::from_secs(120);
/// Kills land uniformly in this many milliseconds after a start.
const DELAY_MS: (u64, u64) = (5, 35);

/// Kill `idem consume` at random instants until the stream is done; check the total.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario.
    scenario: ScenarioKind,
    /// Where the effects land.
    #[arg(long, value_parser = idem_lab::choice::store())]
    store: StoreKind,
    /// How many kills (at most 10,000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    kills: u32,
    /// Seed of the kill instants.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sleep after each effect in the consumer [default: chosen so every kill lands mid-stream]
    #[arg(long, value_name = "MS")]
    pace_ms: Option<u64>,
    /// The flash image to create (must not exist) [default: a temporary file, removed after]
    #[arg(long, value_name = "FILE")]
    flash: Option<PathBuf>,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// When the consumers' writes reach the disk (see `idem consume --sync`)
    #[arg(long, value_parser = idem_lab::choice::sync(), default_value = "checkpoint")]
    sync: idem_host::image::SyncMode,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        // Everything a consume run would refuse is refused here, before any process.
        let (loaded, _) = image_consumer::prepare(self.scenario, self.store, &self.workload)?;
        let (path, temporary) = match &self.flash {
            Some(p) if std::fs::symlink_metadata(p).is_ok() => {
                return Err(usage(format!(
                    "{} exists; chaos starts from a new image",
                    p.display()
                )));
            }
            Some(p) => {
                let folder = p.parent().filter(|d| !d.as_os_str().is_empty());
                if folder.is_some_and(|d| !d.is_dir()) {
                    return Err(usage(format!(
                        "{}: the folder {} does not exist",
                        p.display(),
                        folder.map_or_else(String::new, |d| d.display().to_string())
                    )));
                }
                (p.clone(), None)
            }
            None => {
                // A folder of this run's own, created exclusively under a name nobody can
                // predict: what is removed afterwards (the folder and the image in it, as
                // the guard drops, signals included: chaos handles them itself) is only
                // what this run made.
                let dir = tempfile::Builder::new()
                    .prefix("idem-chaos-")
                    .tempdir()
                    .context("creating a temporary folder for the chaos image")?;
                let path = dir.path().join("chaos.bin");
                (path, Some(dir))
            }
        };
        // SIGINT/SIGTERM/SIGHUP: kill the child, remove the temporary image, exit 130.
        cleanup::defer_signals();
        let result = self.kill_loop(&loaded, &path);
        drop(temporary);
        result
    }

    fn consume(&self, path: &Path, pace_ms: u64) -> anyhow::Result<Child> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("consume")
            .arg(self.scenario.name())
            .args(["--store", self.store.name()]);
        // Quiet: its stderr is a pipe read only if it fails.
        cmd.arg("--quiet")
            .arg("--flash")
            .arg(path)
            .args(["--pace-ms", &pace_ms.to_string()])
            .args(["--sync", self.sync.name()])
            .args(self.workload.flags());
        Ok(cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?)
    }

    /// Kills consume runs until the budget ends, finishes the stream with one last run,
    /// and reports the total against the truth and against a run without a crash.
    fn kill_loop(&self, loaded: &Loaded, path: &Path) -> anyhow::Result<ExitCode> {
        let killed = self.kill(loaded, path)?;
        self.finish(path)?;
        let p = image_consumer::recover(&mut Image::open(path, false)?, None)?;
        let verdict = Verdict::of(p.total, p.true_total);
        // The same log and store without a crash, simulated: what the log itself causes
        // (a duplicate the store cannot see) is not the kills'.
        let clean = select::run(loaded, self.store, self.workload.window, false)?.report;
        let off = self.store.idempotent() && verdict != Verdict::Exact;
        self.print(&killed, &p, &clean)?;
        Ok(if off {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }

    /// The kills: paced consume runs, each SIGKILLed at a seeded instant, until
    /// `--kills` of them, the budget's end, or a run that finishes the stream.
    fn kill(&self, loaded: &Loaded, path: &Path) -> anyhow::Result<Killed> {
        let events = loaded.events().max(1);
        let mean = (DELAY_MS.0 + DELAY_MS.1) / 2;
        // Slow enough that the kills, on average, use up only half of the stream.
        let pace = self
            .pace_ms
            .unwrap_or_else(|| (2 * u64::from(self.kills) * mean / events).clamp(1, 50));
        let mut rng = SplitMix64::new(self.seed);
        let mut killed = Killed {
            pace,
            kills: 0,
            mid_stream: 0,
        };
        let started = Instant::now();
        while killed.kills < self.kills && started.elapsed() < KILL_BUDGET {
            let mut child = self.consume(path, pace)?;
            let deadline =
                Instant::now() + Duration::from_millis(rng.range(DELAY_MS.0, DELAY_MS.1));
            match exit_before(&mut child, Some(deadline))? {
                Some(status) if status.success() => break,
                Some(_) => return Err(failed(child)),
                None => {
                    child.kill()?;
                    child.wait()?;
                    killed.kills += 1;
                    if path.exists() {
                        let p = image_consumer::recover(&mut Image::open(path, false)?, None)?;
                        killed.mid_stream += u32::from(p.next_offset < p.events);
                    }
                }
            }
        }
        Ok(killed)
    }

    /// One last run, unpaced and never killed (but for a signal), finishes the stream.
    fn finish(&self, path: &Path) -> anyhow::Result<()> {
        let mut last = self.consume(path, 0)?;
        match exit_before(&mut last, None)? {
            Some(status) if status.success() => Ok(()),
            _ => Err(failed(last)),
        }
    }

    /// Prints what the kills did and the final total (`p`), against `clean`, the total
    /// of the same log and store without a crash.
    fn print(&self, killed: &Killed, p: &Progress, clean: &Report) -> std::io::Result<()> {
        let Killed {
            pace,
            kills,
            mid_stream,
        } = *killed;
        let verdict = Verdict::of(p.total, p.true_total);
        let mut out = std::io::stdout().lock();
        if self.json {
            let v = json!({
                "scenario": self.scenario.name(), "store": self.store.name(), "seed": self.seed,
                "pace_ms": pace, "kills": kills, "mid_stream": mid_stream,
                "final_total": p.total, "true_total": p.true_total, "verdict": verdict.name(),
                "without_a_crash": { "final_total": clean.final_total, "true_total": clean.true_total },
            });
            return writeln!(out, "{v}");
        }
        writeln!(
            out,
            "chaos: {kills} SIGKILLs of `idem consume {} --store {}` (seed {}, pace {pace} ms), {mid_stream} landed mid-stream",
            self.scenario.name(),
            self.store.name(),
            self.seed
        )?;
        writeln!(
            out,
            "final total {} (true total {}): {}; {}",
            p.total,
            p.true_total,
            verdict,
            self.why(verdict, p, clean)
        )
    }

    /// Why the final total is what it is, for this store.
    fn why(&self, verdict: Verdict, p: &Progress, clean: &Report) -> String {
        let clean_exact = clean.final_total == clean.true_total;
        match (self.store.idempotent(), verdict) {
            (true, Verdict::Exact) => "the store survived every kill".to_string(),
            (true, _) if !clean_exact && clean.final_total == p.total => format!(
                "not exact on this log, crash or no crash: without a kill it ends at {} too (true total {}), since the log holds a duplicate this store cannot see",
                clean.final_total, clean.true_total
            ),
            (true, _) if !clean_exact => format!(
                "not exact on this log, crash or no crash (without a kill it ends at {}, true total {}); the kills moved it to {}",
                clean.final_total, clean.true_total, p.total
            ),
            (true, _) => "WRONG: an idempotent store must end exact".to_string(),
            (false, Verdict::Exact) => {
                "this time no kill landed between an effect and its commit".to_string()
            }
            (false, _) => {
                "expected for the naive store: each kill replays what its last checkpoint missed"
                    .to_string()
            }
        }
    }
}

/// What the kill loop did: the consumers' pace, the kills, and how many of them found
/// the stream not yet consumed to its end.
#[derive(Debug, Clone, Copy)]
struct Killed {
    pace: u64,
    kills: u32,
    mid_stream: u32,
}

/// Waits for `child` to exit, until `deadline` if there is one: its status, or `None`
/// when the deadline came first. A signal that asks idem to stop kills it.
fn exit_before(child: &mut Child, deadline: Option<Instant>) -> anyhow::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        interrupted(child)?;
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A consume run that exited with an error: its own sentence, and its exit status's
/// meaning (2: the input was refused).
fn failed(child: Child) -> anyhow::Error {
    if cleanup::stop_requested() {
        // The same signal reached the child (Ctrl-C signals the whole group).
        return anyhow::Error::new(cleanup::Interrupted);
    }
    let (code, text) = child.wait_with_output().map_or((None, String::new()), |o| {
        let text = String::from_utf8_lossy(&o.stderr).trim().to_string();
        (o.status.code(), text)
    });
    let text = text.strip_prefix("idem: ").unwrap_or(&text).to_string();
    let text = format!("a consume run failed: {text}");
    if code == Some(2) {
        usage(text)
    } else {
        anyhow::anyhow!(text)
    }
}

/// When a signal asked idem to stop: kills `child` and returns the error that ends the
/// run (exit 130; the temporary image is removed as the stack unwinds).
fn interrupted(child: &mut Child) -> anyhow::Result<()> {
    if !cleanup::stop_requested() {
        return Ok(());
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(anyhow::Error::new(cleanup::Interrupted))
}
