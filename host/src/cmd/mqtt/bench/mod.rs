//! `idem mqtt bench`: how fast each reader drains a session's queue of QoS 2 payments,
//! on a Mosquitto the bench starts on 127.0.0.1 (`broker`): paho-mqtt's plain subscriber
//! loop (the baseline, nothing durable), then `idem mqtt consume` with `--sync none` and
//! with `--sync checkpoint`, at the broker's in-flight limit of 1 and at its stock 20.
//! Each round makes every reader's session, publishes N payments once (so each session
//! has N queued), then runs each reader alone as a whole process, timed from its spawn
//! to its last message, and checks what it summed against what was published.

mod broker;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::Args;
use serde_json::{Value, json};

use broker::Mosquitto;
use idem_lab::error::usage;

/// The paho baseline, run with `python -c`.
const PLAIN_SUB_PY: &str = include_str!("plain_sub.py");
/// The topic the bench fills.
const TOPIC: &str = "bench";
/// The broker's in-flight limits measured: one message at a time, and Mosquitto's stock.
const INFLIGHT: [u16; 2] = [1, 20];
/// How long idem's consume waits with nothing new before it stops; its time is counted
/// to its last message, without this wait.
const IDLE_MS: u64 = 300;
/// The longest one reader's run may take.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// `mqtt bench`'s options.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// QoS 2 payments queued for each reader's session (1 to 200,000).
    #[arg(long, value_name = "N", default_value_t = 5_000)]
    messages: u32,
    /// Rounds: each reader once at each in-flight limit (1 to 9); the median counts, the
    /// slowest and the fastest are printed beside it.
    #[arg(long, value_name = "R", default_value_t = 3)]
    runs: u32,
    /// naive or message-id.
    #[arg(long, value_parser = idem_lab::choice::store(), default_value = "naive")]
    store: idem_lab::select::StoreKind,
    /// Pass --release-now to idem's consume (each release in a record of its own).
    #[arg(long)]
    release_now: bool,
    /// The protocol idem's consume speaks: 3.1.1, or 5 (its Receive Maximum, the
    /// receiver's places); paho's subscriber speaks 3.1.1.
    #[arg(long, value_name = "3.1.1|5", default_value = "3.1.1", value_parser = super::parse_protocol)]
    protocol: idem_mqtt::codec::Protocol,
    /// The Mosquitto binary [default: $IDEM_MOSQUITTO, else /usr/sbin/mosquitto].
    #[arg(long, value_name = "PATH")]
    mosquitto: Option<PathBuf>,
    /// The Python that has paho-mqtt [default: $IDEM_PAHO_PYTHON].
    #[arg(long, value_name = "PATH")]
    paho_python: Option<PathBuf>,
    /// Where the flash images go (its file system is the fsyncs'; /tmp may be tmpfs).
    #[arg(long, value_name = "DIR", default_value = "target/idem-bench")]
    dir: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// A reader the bench times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    Paho,
    IdemNone,
    IdemCheckpoint,
}

impl Reader {
    const ALL: [Reader; 3] = [Reader::Paho, Reader::IdemNone, Reader::IdemCheckpoint];

    fn name(self) -> &'static str {
        match self {
            Reader::Paho => "paho-mqtt plain subscriber",
            Reader::IdemNone => "idem --sync none",
            Reader::IdemCheckpoint => "idem --sync checkpoint",
        }
    }

    fn client_id(self, inflight: u16) -> String {
        let short = match self {
            Reader::Paho => "paho",
            Reader::IdemNone => "idem-none",
            Reader::IdemCheckpoint => "idem-checkpoint",
        };
        format!("bench-{short}-{inflight}")
    }
}

/// One reader's run.
#[derive(Debug, Clone)]
struct Run {
    reader: Reader,
    inflight: u16,
    /// From the spawn to the last message.
    time: Duration,
    /// idem's report (`--json`), or paho's line.
    report: Value,
}

/// What the bench needs from the machine.
struct Setup<'a> {
    a: &'a BenchArgs,
    idem: PathBuf,
    python: PathBuf,
    mosquitto: PathBuf,
    images: PathBuf,
}

/// Runs the bench.
pub fn run(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    if !(1..=200_000).contains(&a.messages) || !(1..=9).contains(&a.runs) {
        return Err(usage("--messages takes 1 to 200,000 and --runs 1 to 9"));
    }
    let python = a
        .paho_python
        .clone()
        .or_else(|| std::env::var_os("IDEM_PAHO_PYTHON").map(PathBuf::from))
        .ok_or_else(|| usage("no Python with paho-mqtt: pass --paho-python PATH or set IDEM_PAHO_PYTHON (paho-mqtt 2.2.0 in a virtualenv)"))?;
    let images = std::path::absolute(&a.dir)?.join(format!("mqtt-{}", std::process::id()));
    let setup = Setup {
        a,
        idem: std::env::current_exe()?,
        python,
        mosquitto: broker::find(a.mosquitto.as_deref())?,
        images,
    };
    let mut runs = Vec::new();
    for round in 0..a.runs {
        for inflight in INFLIGHT {
            eprintln!(
                "mqtt bench: round {} of {}, in-flight {inflight}",
                round + 1,
                a.runs
            );
            runs.extend(setup.round(inflight)?);
        }
    }
    print(a, &runs)?;
    Ok(ExitCode::SUCCESS)
}

impl Setup<'_> {
    /// One broker at `inflight`: every reader's session made, N published once, each
    /// reader timed draining its queue.
    fn round(&self, inflight: u16) -> anyhow::Result<Vec<Run>> {
        let broker_dir = self.images.join(format!("mosquitto-{inflight}"));
        std::fs::create_dir_all(&self.images)?;
        let b = Mosquitto::start(&self.mosquitto, &broker_dir, inflight, &[&self.images])?;
        for r in Reader::ALL {
            let _ = std::fs::remove_file(self.image(r, inflight));
            self.reader(r, inflight, &b.addr, true)?;
        }
        let truth = self.images.join("truth.jsonl");
        let published = Command::new(&self.idem)
            .args(["mqtt", "publish", "--broker", &b.addr, "--topic", TOPIC])
            .args(["--count", &self.a.messages.to_string(), "--qos", "2"])
            .arg("--truth")
            .arg(&truth)
            .stdout(Stdio::null())
            .output()?;
        if !published.status.success() {
            bail!(
                "idem mqtt publish failed: {}",
                String::from_utf8_lossy(&published.stderr).trim()
            );
        }
        let want = true_sum(&truth)?;
        Reader::ALL
            .into_iter()
            .map(|r| {
                let run = self.reader(r, inflight, &b.addr, false)?;
                check(&run, self.a.messages, want)?;
                Ok(run)
            })
            .collect()
    }

    fn image(&self, r: Reader, inflight: u16) -> PathBuf {
        self.images.join(format!("{}.img", r.client_id(inflight)))
    }

    /// Runs `r` alone: to make its session (`prepare`), or timed, draining its queue.
    fn reader(&self, r: Reader, inflight: u16, addr: &str, prepare: bool) -> anyhow::Result<Run> {
        let id = r.client_id(inflight);
        let mut c = match r {
            Reader::Paho => {
                let mut c = Command::new(&self.python);
                let count = if prepare { 0 } else { self.a.messages };
                c.args(["-c", PLAIN_SUB_PY, addr, TOPIC, &id])
                    .args([count.to_string(), RUN_LIMIT.as_secs().to_string()]);
                c
            }
            Reader::IdemNone | Reader::IdemCheckpoint => {
                let sync = if r == Reader::IdemNone {
                    "none"
                } else {
                    "checkpoint"
                };
                let mut c = Command::new(&self.idem);
                c.args(["mqtt", "consume", "--broker", addr, "--topic", TOPIC])
                    .args(["--client-id", &id, "--store", self.a.store.name()])
                    .args(["--sync", sync, "--json", "--idle-ms"])
                    .arg(if prepare {
                        "50".into()
                    } else {
                        IDLE_MS.to_string()
                    })
                    .arg("--flash")
                    .arg(self.image(r, inflight));
                if self.a.release_now {
                    c.arg("--release-now");
                }
                c.args(["--protocol", self.a.protocol.name()]);
                c
            }
        };
        let started = Instant::now();
        let out = c
            .stdin(Stdio::null())
            .output()
            .map_err(|e| anyhow!("cannot start {} ({e})", r.name()))?;
        let mut time = started.elapsed();
        if !out.status.success() {
            bail!(
                "{} failed ({}): {}",
                r.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if r != Reader::Paho {
            time = time.saturating_sub(Duration::from_millis(IDLE_MS));
        }
        let report: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| anyhow!("{} printed no JSON report ({e})", r.name()))?;
        Ok(Run {
            reader: r,
            inflight,
            time,
            report,
        })
    }
}

/// The truth file's total, read as `--truth` reads it (idem's first and end lines
/// included).
fn true_sum(truth: &Path) -> anyhow::Result<i64> {
    Ok(idem_host::truth::TruthFile::read(truth)?.total)
}

/// A run that did not take every message once is no figure.
fn check(run: &Run, messages: u32, want: i64) -> anyhow::Result<()> {
    let (count, sum) = match run.reader {
        Reader::Paho => (&run.report["messages"], &run.report["sum"]),
        _ => (&run.report["applied"], &run.report["final_total"]),
    };
    if count.as_u64() != Some(u64::from(messages)) || sum.as_i64() != Some(want) {
        bail!(
            "{} at in-flight {} took {count} messages summing to {sum}, not {messages} summing to {want}",
            run.reader.name(),
            run.inflight
        );
    }
    Ok(())
}

/// The slowest and the fastest run of `reader` at `inflight`, in messages a second.
fn range(runs: &[Run], reader: Reader, inflight: u16, messages: u32) -> [u64; 2] {
    let rates = runs
        .iter()
        .filter(|r| r.reader == reader && r.inflight == inflight)
        .map(|r| (f64::from(messages) / r.time.as_secs_f64().max(1e-9)).round() as u64);
    [rates.clone().min(), rates.max()].map(Option::unwrap_or_default)
}

/// The median run of `reader` at `inflight`.
fn median(runs: &[Run], reader: Reader, inflight: u16) -> Option<&Run> {
    let mut mine: Vec<&Run> = runs
        .iter()
        .filter(|r| r.reader == reader && r.inflight == inflight)
        .collect();
    mine.sort_by_key(|r| r.time);
    mine.get(mine.len() / 2).copied()
}

/// idem's figures per message: records, syncs and bytes written (of the image, its log
/// of ids included), and reconnections per 1,000.
fn per_message(r: &Run, messages: u32) -> [f64; 4] {
    let per = |k: &str| r.report[k].as_f64().unwrap_or(0.0) / f64::from(messages);
    [
        per("records"),
        per("syncs"),
        per("bytes_written"),
        1000.0 * per("resend_reconnects"),
    ]
}

fn print(a: &BenchArgs, runs: &[Run]) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for inflight in INFLIGHT {
        let base = median(runs, Reader::Paho, inflight).map(|r| r.time.as_secs_f64());
        for reader in Reader::ALL {
            let Some(r) = median(runs, reader, inflight) else {
                continue;
            };
            let rate = f64::from(a.messages) / r.time.as_secs_f64().max(1e-9);
            let ratio = base.map(|b| b / r.time.as_secs_f64().max(1e-9));
            let [records, syncs, bytes, reconnects] = per_message(r, a.messages);
            let idem = |x: f64| (reader != Reader::Paho).then_some(x);
            rows.push(json!({
                "reader": reader.name(),
                "inflight": inflight,
                "messages_per_s": rate.round() as u64,
                "messages_per_s_range": range(runs, reader, inflight, a.messages),
                "vs_paho": ratio,
                "records_per_message": idem(records),
                "syncs_per_message": idem(syncs),
                "bytes_per_message": idem(bytes),
                "reconnects_per_1000": idem(reconnects),
                "sync_median_us": r.report.get("sync_median_us"),
                "unanswered": r.report.get("unanswered"),
            }));
        }
    }
    if a.json {
        println!(
            "{}",
            json!({ "messages": a.messages, "runs": a.runs, "store": a.store.name(), "rows": rows })
        );
        return Ok(());
    }
    println!(
        "{} QoS 2 payments queued per session, {} store, median of {} runs",
        a.messages,
        a.store.name(),
        a.runs
    );
    println!(
        "in-flight | reader                     | msg/s  | slowest-fastest | × paho | records/msg | syncs/msg | bytes/msg | reconnects/1000 | sync µs"
    );
    for row in &rows {
        let f = |k: &str| {
            row[k]
                .as_f64()
                .map_or("-".to_string(), |x| format!("{x:.2}"))
        };
        let sync_us = row["sync_median_us"]
            .as_u64()
            .map_or("-".to_string(), |us| us.to_string());
        println!(
            "{:>9} | {:<26} | {:>6} | {:>15} | {:>6} | {:>11} | {:>9} | {:>9} | {:>15} | {sync_us:>7}",
            row["inflight"].to_string(),
            row["reader"].as_str().unwrap_or_default(),
            row["messages_per_s"].to_string(),
            format!(
                "{}-{}",
                row["messages_per_s_range"][0], row["messages_per_s_range"][1]
            ),
            f("vs_paho"),
            f("records_per_message"),
            f("syncs_per_message"),
            f("bytes_per_message"),
            f("reconnects_per_1000")
        );
    }
    Ok(())
}
