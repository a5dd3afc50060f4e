//! `idem kafka bench`: idem's consume against two plain loops that only sum (librdkafka's
//! and kafka-python's), on a tansu broker the bench starts and stops. Each reader runs
//! alone as a child process, one warm-up run and then `--runs` measured runs (in rounds
//! of every reader once, so that a slow spell of the machine falls on all of them), and
//! every run's figures are checked against what was produced. It needs a broker and
//! kafka-python, which `cargo bench` cannot assume.

mod broker;
mod child;
mod plain;
mod table;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use clap::{Args, Subcommand};
use idem_payments::registry::Source;

use super::produce::{Batching, send_chunked};
use super::{Broker, KafkaScenario, MAX_PARTITIONS, client};
use broker::Tansu;
use child::{Measured, measure};
use idem_host::image::SyncMode;
use idem_host::truth::TruthWriter;
use idem_lab::error::usage;
use idem_lab::select::StoreKind;
use table::{Report, Row};

/// The most records a bench produces.
const MAX_RECORDS: u64 = 1_000_000;
/// The most measured runs of a reader.
const MAX_RUNS: u32 = 9;
/// The topic the bench fills.
const TOPIC: &str = "bench";
/// The kafka-python baseline, run with `python -c`.
const PLAIN_SUM_PY: &str = include_str!("plain_sum.py");

/// The bench, and the plain loop it measures idem against.
#[derive(Debug, Subcommand)]
pub(super) enum Action {
    /// Throughput and peak memory of `kafka consume` with each store, against plain
    /// librdkafka and kafka-python loops that only sum, on a tansu broker it starts on
    /// 127.0.0.1 and stops (it needs tansu 0.6.0 with libSQL and kafka-python 3.0.12).
    Bench(Bench),
    /// For the bench: librdkafka's plain loop, which sums a topic's payments from offset 0
    /// to the end offsets it found at the start and prints {"records", "sum"}.
    #[command(hide = true)]
    PlainSum {
        /// The topic.
        topic: String,
        #[command(flatten)]
        broker: Broker,
    },
}

/// `kafka bench`'s options.
#[derive(Debug, Args)]
pub(super) struct Bench {
    /// Payments to produce (1 to 1,000,000).
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    records: u64,
    /// Partitions of the topic (1 to 6).
    #[arg(long, value_name = "P", default_value_t = 4)]
    partitions: i32,
    /// Measured runs of each reader, after one warm-up run (1 to 9); the median counts.
    #[arg(long, value_name = "R", default_value_t = 3)]
    runs: u32,
    /// The tansu binary [default: $IDEM_TANSU, else tansu on PATH].
    #[arg(long, value_name = "PATH")]
    tansu: Option<PathBuf>,
    /// The Python that has kafka-python [default: $IDEM_KAFKA_PYTHON].
    #[arg(long, value_name = "PATH")]
    kafka_python: Option<PathBuf>,
    /// Where the flash images go (its file system is the fsyncs'; /tmp may be tmpfs).
    #[arg(long, value_name = "DIR", default_value = "target/idem-bench")]
    dir: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

impl Action {
    /// Runs the bench, or the plain loop.
    pub(super) fn run(self, out: &mut impl Write) -> anyhow::Result<ExitCode> {
        match self {
            Self::Bench(b) => {
                let report = b.bench()?;
                if b.json {
                    writeln!(out, "{}", report.json())?;
                } else {
                    report.text(out)?;
                }
            }
            Self::PlainSum { topic, broker } => plain::plain_sum(out, &broker.brokers, &topic)?,
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A reader the bench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reader {
    /// `kafka plain-sum`: librdkafka's plain loop, the baseline.
    Rdkafka,
    /// `plain_sum.py`: kafka-python's plain loop.
    KafkaPython,
    /// `kafka consume` with a store, syncing the image as `--sync` says, graded by what
    /// it takes the truth from.
    Idem(StoreKind, SyncMode, TruthBy),
}

/// Where a bench's `kafka consume` takes its true total from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TruthBy {
    /// The truth file the bench wrote as it produced (`--truth`): the topic is read once.
    File,
    /// A second read of the topic, in no group, beside the consuming one.
    Read,
}

impl Reader {
    /// Its name in the table.
    pub(super) fn name(self) -> String {
        match self {
            Self::Rdkafka => "rdkafka plain loop".into(),
            Self::KafkaPython => "kafka-python plain loop".into(),
            Self::Idem(store, sync, TruthBy::File) => {
                format!("idem {} --sync {}", store.name(), sync.name())
            }
            Self::Idem(store, sync, TruthBy::Read) => {
                format!("idem {} --sync {}, truth read", store.name(), sync.name())
            }
        }
    }
}

/// What the bench needs to run the readers.
struct Setup {
    python: PathBuf,
    idem: PathBuf,
    brokers: String,
    /// Where the runs' images and outputs go (removed at the end).
    work: tempfile::TempDir,
    records: u64,
    sum: i64,
    /// The truth file of what was produced.
    truth: PathBuf,
    /// Longest one run may take.
    limit: Duration,
}

impl Bench {
    /// Starts the broker, produces, runs every reader and checks every run.
    fn bench(&self) -> anyhow::Result<Report> {
        self.check()?;
        child::need_gnu_time()?;
        let tansu = broker::find_tansu(self.tansu.as_deref())?;
        let python = self.kafka_python()?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            usage(format!(
                "cannot create the directory {} ({e})",
                self.dir.display()
            ))
        })?;
        let file_system = file_system(&self.dir);
        let readers = readers();
        let limit = Duration::from_secs(60) + Duration::from_millis(self.records);
        // Ctrl-C, SIGTERM, SIGHUP: the running child and the broker are killed, the
        // directories removed, and the bench exits 130. SIGKILL: the broker's shell
        // does the same (broker.rs).
        idem_host::cleanup::defer_signals();
        let version = Tansu::version(&tansu)?;
        let work = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(&self.dir)?;
        let mut broker = Tansu::start(&tansu, work.path())?;
        let truth = work.path().join("sent.jsonl");
        let (sum, per_partition) = produce(&broker.brokers, self.records, self.partitions, &truth)?;
        let setup = Setup {
            python,
            idem: std::env::current_exe()?,
            brokers: broker.brokers.clone(),
            work,
            records: self.records,
            sum,
            truth,
            limit,
        };
        let rows = setup
            .rounds(&readers, self.runs)
            .map_err(|e| broker.explain(e))?;
        Ok(Report {
            records: self.records,
            partitions: self.partitions,
            per_partition,
            sum,
            runs: self.runs,
            broker: version,
            dir: self.dir.clone(),
            file_system,
            rows,
        })
    }

    /// Refuses what the bench cannot run.
    fn check(&self) -> anyhow::Result<()> {
        if !(1..=MAX_RECORDS).contains(&self.records) {
            return Err(usage(format!("--records takes 1 to {MAX_RECORDS} records")));
        }
        if !(1..=MAX_PARTITIONS).contains(&self.partitions) {
            return Err(usage(format!(
                "--partitions takes 1 to {MAX_PARTITIONS} partitions (idem consumes up to {MAX_PARTITIONS})"
            )));
        }
        if !(1..=MAX_RUNS).contains(&self.runs) {
            return Err(usage(format!("--runs takes 1 to {MAX_RUNS} runs")));
        }
        Ok(())
    }

    /// `--kafka-python`, else `$IDEM_KAFKA_PYTHON`, once it has shown it imports kafka.
    fn kafka_python(&self) -> anyhow::Result<PathBuf> {
        let python = self
            .kafka_python
            .clone()
            .or_else(|| std::env::var_os("IDEM_KAFKA_PYTHON").map(PathBuf::from))
            .ok_or_else(|| {
                usage("no Python with kafka-python: pass --kafka-python PATH or set IDEM_KAFKA_PYTHON (a virtualenv with `pip install kafka-python==3.0.12`)")
            })?;
        let imports = Command::new(&python)
            .args(["-c", "import kafka"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut c| {
                child::wait_bounded(&mut c, Duration::from_secs(30), "python -c 'import kafka'")
                    .map_err(std::io::Error::other)
            });
        match imports {
            Ok((status, _)) if status.success() => Ok(python),
            _ => Err(usage(format!(
                "{} cannot import kafka-python (a virtualenv with `pip install kafka-python==3.0.12`)",
                python.display()
            ))),
        }
    }
}

/// The readers, the baselines first: then every store Kafka takes, without and with
/// syncs, graded by the truth file; last the offset store graded by a second read.
fn readers() -> Vec<Reader> {
    let mut readers = vec![Reader::Rdkafka, Reader::KafkaPython];
    for store in StoreKind::on(Source::Kafka) {
        for sync in [SyncMode::None, SyncMode::Checkpoint] {
            readers.push(Reader::Idem(store, sync, TruthBy::File));
        }
    }
    readers.push(Reader::Idem(
        StoreKind::Offset,
        SyncMode::None,
        TruthBy::Read,
    ));
    readers
}

/// Creates the topic with `partitions` and produces `n` payments ([`KafkaScenario::stream`]),
/// written to the truth file at `truth` as the broker acknowledges them. The sum of the
/// amounts, and how many records each partition got.
fn produce(
    brokers: &str,
    n: u64,
    partitions: i32,
    truth: &Path,
) -> anyhow::Result<(i64, Vec<u64>)> {
    let created = client::create_topic(brokers, TOPIC, partitions);
    let records = KafkaScenario::stream(n);
    let mut file = Some(TruthWriter::create(truth, "kafka bench", None)?);
    let acks = send_chunked(
        brokers,
        TOPIC,
        (false, Batching::Batched),
        &records,
        &created,
        &mut file,
    )?;
    if let Some(f) = file {
        f.finish()?;
    }
    let mut per_partition = vec![0u64; partitions as usize];
    for (p, _) in acks {
        if let Some(c) = usize::try_from(p)
            .ok()
            .and_then(|p| per_partition.get_mut(p))
        {
            *c += 1;
        }
    }
    Ok((records.iter().map(|r| r.2).sum(), per_partition))
}

/// The type of the file system `dir` is on: its mount's in /proc/mounts (the longest
/// mount point that holds it), else `stat -f -c %T` (which says `ext2/ext3` of ext4).
fn file_system(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mount = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (at, kind) = (f.nth(1)?, f.next()?);
            Some((PathBuf::from(at.replace("\\040", " ")), kind))
        })
        .filter(|(at, _)| dir.starts_with(at))
        .max_by_key(|(at, _)| at.as_os_str().len());
    if let Some((_, kind)) = mount {
        return kind.to_string();
    }
    Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(&dir)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

impl Setup {
    /// Round 0 runs each reader once to warm up, then rounds 1 to `runs` each once more,
    /// measured: a slow spell of the machine or its disk falls on every reader, not on
    /// one reader's runs. Each reader's measured runs, in the order of `readers`.
    fn rounds(&self, readers: &[Reader], runs: u32) -> anyhow::Result<Vec<Row>> {
        let mut rows: Vec<Row> = readers.iter().map(|&r| Row::new(r)).collect();
        for run in 0..=runs {
            for row in &mut rows {
                let (measured, checked) = self.run_once(row.reader, run)?;
                if run > 0 {
                    row.add(&measured, checked);
                }
            }
        }
        Ok(rows)
    }

    /// Run number `run` of `reader` (0 is the warm-up): what it measured and its checked
    /// figures.
    fn run_once(&self, reader: Reader, run: u32) -> anyhow::Result<(Measured, table::Checked)> {
        let dir = self.work.path();
        let mut flash = None;
        let (program, args) = match reader {
            Reader::Rdkafka => (
                &self.idem,
                strings(&["kafka", "plain-sum", TOPIC, "--brokers", &self.brokers]),
            ),
            Reader::KafkaPython => (
                &self.python,
                strings(&["-c", PLAIN_SUM_PY, &self.brokers, TOPIC]),
            ),
            Reader::Idem(store, sync, by) => {
                let name = format!("{}-{}-{run}", store.name(), sync.name());
                let group = format!("idem-bench-{name}-{}", client::unique());
                let image = flash.insert(dir.join(format!("{name}.bin")));
                let mut args = consume_args(self, store, sync, &group, image);
                if by == TruthBy::File {
                    args.push("--truth".into());
                    args.push(self.truth.display().to_string());
                }
                (&self.idem, args)
            }
        };
        let what = match run {
            0 => format!("the {} warm-up run", reader.name()),
            _ => format!("the {} run {run}", reader.name()),
        };
        let measured = measure(program, &args, dir, self.limit, &what)?;
        if let Some(image) = flash {
            std::fs::remove_file(&image)?;
            // And the log of ids a run graded by the truth file keeps beside it.
            idem_host::kafka::applied::AppliedLog::remove(&image)?;
        }
        let checked = table::check(reader, &measured.stdout, self.records, self.sum)
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        Ok((measured, checked))
    }
}

/// `kafka consume`'s arguments for one measured run: a fresh group and a fresh image,
/// `--checkpoint-every 100`. A partition is done when it reaches the end offset read at
/// the start, as in the plain loops.
fn consume_args(
    s: &Setup,
    store: StoreKind,
    sync: SyncMode,
    group: &str,
    flash: &Path,
) -> Vec<String> {
    let mut args = strings(&["kafka", "consume", TOPIC, "--brokers", &s.brokers]);
    args.extend(strings(&["--group", group, "--store", store.name()]));
    args.extend(strings(&[
        "--checkpoint-every",
        "100",
        "--sync",
        sync.name(),
    ]));
    args.extend(strings(&["--json", "--flash"]));
    args.push(flash.display().to_string());
    args
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_string()).collect()
}
