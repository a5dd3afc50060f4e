//! Each run's figures checked against what was produced, and the bench's table (or one
//! JSON object).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::child::{GNU_TIME, Measured};
use super::{Reader, TruthBy};
use idem_host::image::SyncMode;

/// What a run printed, once checked.
pub(super) struct Checked {
    verdict: String,
    /// Records read and their sum (idem's: its total).
    read: (u64, i64),
    /// The image's `sync_data` calls and their median latency (idem's runs).
    syncs: Option<(u64, Option<u64>)>,
}

/// Checks what `reader` printed against the `records` payments produced and their `sum`:
/// a baseline must have read every record and summed them exactly; idem's verdict must
/// be exact, its total and true total the sum, and every record read. Why not, in words.
pub(super) fn check(
    reader: Reader,
    stdout: &str,
    records: u64,
    sum: i64,
) -> Result<Checked, String> {
    let v: Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("it printed no JSON object ({e})"))?;
    let int = |v: &Value| v.as_i64();
    if !matches!(reader, Reader::Idem(..)) {
        let got = (v["records"].as_u64(), int(&v["sum"]));
        if got != (Some(records), Some(sum)) {
            return Err(format!(
                "it read {} records summing to {}, where {records} summing to {sum} were produced",
                v["records"], v["sum"]
            ));
        }
        return Ok(Checked {
            verdict: "exact".into(),
            read: (records, sum),
            syncs: None,
        });
    }
    let read: u64 = v["partitions"].as_array().map_or(0, |ps| {
        ps.iter().filter_map(|p| p["records_read"].as_u64()).sum()
    });
    let verdict = v["verdict"].as_str().unwrap_or("none").to_string();
    if verdict != "exact" || int(&v["total"]) != Some(sum) || int(&v["true_total"]) != Some(sum) {
        return Err(format!(
            "its verdict is {verdict} with the total {} and the true total {}, where the {records} payments produced sum to {sum}",
            v["total"], v["true_total"]
        ));
    }
    if read != records {
        return Err(format!("it read {read} of the {records} records produced"));
    }
    let syncs = v["syncs"]
        .as_u64()
        .ok_or("its report has no syncs figure")?;
    Ok(Checked {
        verdict,
        read: (read, sum),
        syncs: Some((syncs, v["sync_median_us"].as_u64())),
    })
}

/// A reader's measured runs.
pub(super) struct Row {
    pub(super) reader: Reader,
    walls: Vec<Duration>,
    cpu: Vec<Duration>,
    rss_kib: Vec<u64>,
    verdict: String,
    read: Vec<(u64, i64)>,
    syncs: Vec<u64>,
    sync_us: Vec<u64>,
}

impl Row {
    pub(super) fn new(reader: Reader) -> Self {
        Self {
            reader,
            walls: Vec::new(),
            cpu: Vec::new(),
            rss_kib: Vec::new(),
            verdict: String::new(),
            read: Vec::new(),
            syncs: Vec::new(),
            sync_us: Vec::new(),
        }
    }

    /// Adds a measured run.
    pub(super) fn add(&mut self, m: &Measured, c: Checked) {
        self.walls.push(m.wall);
        self.cpu.push(m.cpu);
        self.rss_kib.push(m.rss_kib);
        self.verdict = c.verdict;
        self.read.push(c.read);
        if let Some((n, us)) = c.syncs {
            self.syncs.push(n);
            self.sync_us.extend(us);
        }
    }

    /// The median wall-clock, in seconds.
    fn wall_s(&self) -> f64 {
        median(
            &self
                .walls
                .iter()
                .map(Duration::as_secs_f64)
                .collect::<Vec<_>>(),
        )
    }

    /// The median CPU time, user and system, in seconds.
    fn cpu_s(&self) -> f64 {
        median(
            &self
                .cpu
                .iter()
                .map(Duration::as_secs_f64)
                .collect::<Vec<_>>(),
        )
    }

    /// The largest peak resident memory of the runs, MiB.
    fn rss_mib(&self) -> f64 {
        self.rss_kib.iter().copied().max().unwrap_or(0) as f64 / 1024.0
    }

    /// Whether its fsync figures are shown: idem's runs with `--sync checkpoint`.
    fn syncing(&self) -> bool {
        matches!(self.reader, Reader::Idem(_, SyncMode::Checkpoint, _))
    }
}

/// The median of `xs` (of the two middle ones, their mean).
fn median(xs: &[f64]) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// The bench's figures.
pub(super) struct Report {
    pub(super) records: u64,
    pub(super) partitions: i32,
    /// Records the producer's partitioner put in each partition.
    pub(super) per_partition: Vec<u64>,
    pub(super) sum: i64,
    pub(super) runs: u32,
    /// The broker's `--version`.
    pub(super) broker: String,
    pub(super) dir: PathBuf,
    pub(super) file_system: String,
    /// The baseline (rdkafka's plain loop) first.
    pub(super) rows: Vec<Row>,
}

/// How the figures are taken, in words.
const HOW: &str = "records/s: the records produced / the child process's wall-clock (spawn to exit, connecting included), median of the measured runs; CPU s: the child's user + system time (GNU time's %U + %S), median; peak RSS: the largest of the runs' maximum resident set sizes (GNU time's %M, from wait4)";

impl Report {
    fn per_s(&self, row: &Row) -> f64 {
        self.records as f64 / row.wall_s()
    }

    /// Whether sync_data on the images' file system reaches no disk.
    fn tmpfs(&self) -> bool {
        self.file_system == "tmpfs"
    }

    /// Each measured run's figures and the medians, as one JSON object.
    pub(super) fn json(&self) -> Value {
        let base = self.per_s(&self.rows[0]);
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let (store, sync, truth) = match r.reader {
                    Reader::Idem(store, sync, by) => (
                        Some(store.name()),
                        Some(sync.name()),
                        Some(match by {
                            TruthBy::File => "file",
                            TruthBy::Read => "read",
                        }),
                    ),
                    _ => (None, None, None),
                };
                json!({
                    "reader": r.reader.name(),
                    "store": store,
                    "sync": sync,
                    "truth": truth,
                    "records_per_s": self.per_s(r).round(),
                    "ratio": self.per_s(r) / base,
                    "wall_s": r.walls.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
                    "cpu_s": r.cpu.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
                    "peak_rss_mib": r.rss_mib(),
                    "peak_rss_kib": r.rss_kib,
                    "verdict": r.verdict,
                    "records_read": r.read.iter().map(|r| r.0).collect::<Vec<_>>(),
                    "sums": r.read.iter().map(|r| r.1).collect::<Vec<_>>(),
                    "syncs": r.syncing().then(|| median_u64(&r.syncs)),
                    "sync_median_us": r.syncing().then(|| median_u64(&r.sync_us)),
                })
            })
            .collect();
        json!({
            "records": self.records,
            "partitions": self.partitions,
            "records_per_partition": self.per_partition,
            "sum": self.sum,
            "runs": self.runs,
            "warm_up_runs": 1,
            "broker": self.broker,
            "dir": self.dir,
            "file_system": self.file_system,
            "fsync_figures_count": !self.tmpfs(),
            "measured_with": format!("{GNU_TIME} -f '%M %U %S'"),
            "how": HOW,
            "readers": rows,
        })
    }

    /// The table, with a line on how its figures were taken.
    pub(super) fn text(&self, out: &mut impl Write) -> anyhow::Result<()> {
        writeln!(
            out,
            "{} payments (sum {}) on {} partitions ({}) of {} with libSQL on 127.0.0.1; each reader alone, 1 warm-up and {} measured runs in rounds of every reader once",
            self.records,
            self.sum,
            self.partitions,
            self.per_partition
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            self.broker,
            self.runs
        )?;
        let base = self.per_s(&self.rows[0]);
        let width = self
            .rows
            .iter()
            .map(|r| r.reader.name().len())
            .max()
            .unwrap_or(0);
        let line = |out: &mut dyn Write, cells: [&str; 8]| {
            let [name, rest @ ..] = cells;
            let mut l = format!("{name:<width$}");
            for (cell, w) in rest.iter().zip([10, 6, 6, 13, 8, 7, 13]) {
                l += &format!(" {cell:>w$}");
            }
            writeln!(out, "{}", l.trim_end())
        };
        line(
            out,
            [
                "reader",
                "records/s",
                "ratio",
                "CPU s",
                "peak RSS MiB",
                "verdict",
                "fsyncs",
                "fsync median",
            ],
        )?;
        for r in &self.rows {
            let (syncs, us) = if r.syncing() {
                (
                    median_u64(&r.syncs).to_string(),
                    format!("{} µs", median_u64(&r.sync_us)),
                )
            } else {
                (String::new(), String::new())
            };
            line(
                out,
                [
                    &r.reader.name(),
                    &format!("{:.0}", self.per_s(r)),
                    &format!("{:.2}", self.per_s(r) / base),
                    &format!("{:.2}", r.cpu_s()),
                    &format!("{:.1}", r.rss_mib()),
                    &r.verdict,
                    &syncs,
                    &us,
                ],
            )?;
        }
        writeln!(
            out,
            "{HOW}; fsyncs: the image's sync_data calls in a run and the median of their latencies (medians of the runs), on {} ({})",
            self.file_system,
            self.dir.display()
        )?;
        if self.tmpfs() {
            writeln!(
                out,
                "the images' directory is on tmpfs, where sync_data reaches no disk: the fsync figures do not count"
            )?;
        }
        Ok(())
    }
}

/// The median of `xs`, rounded.
fn median_u64(xs: &[u64]) -> u64 {
    median(&xs.iter().map(|&x| x as f64).collect::<Vec<_>>()).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_lab::select::StoreKind;

    const IDEM: Reader = Reader::Idem(StoreKind::Offset, SyncMode::Checkpoint, TruthBy::File);

    fn idem_json(verdict: &str, total: i64, read: [u64; 2]) -> String {
        json!({
            "verdict": verdict, "total": total, "true_total": 40, "syncs": 7,
            "sync_median_us": 90,
            "partitions": [{"records_read": read[0]}, {"records_read": read[1]}],
        })
        .to_string()
    }

    #[test]
    fn a_run_passes_only_with_every_record_and_the_exact_sum() {
        let ok = check(Reader::Rdkafka, r#"{"records":10,"sum":40}"#, 10, 40).unwrap();
        assert_eq!(
            (ok.verdict.as_str(), ok.read, ok.syncs),
            ("exact", (10, 40), None)
        );
        assert_eq!(
            check(Reader::KafkaPython, r#"{"records":9,"sum":36}"#, 10, 40).err(),
            Some("it read 9 records summing to 36, where 10 summing to 40 were produced".into())
        );
        let ok = check(IDEM, &idem_json("exact", 40, [4, 6]), 10, 40).unwrap();
        assert_eq!((ok.read, ok.syncs), ((10, 40), Some((7, Some(90)))));
        assert_eq!(
            check(IDEM, &idem_json("over", 44, [4, 6]), 10, 40).err(),
            Some("its verdict is over with the total 44 and the true total 40, where the 10 payments produced sum to 40".into())
        );
        assert_eq!(
            check(IDEM, &idem_json("exact", 40, [4, 5]), 10, 40).err(),
            Some("it read 9 of the 10 records produced".into())
        );
        assert!(check(IDEM, "idem: no broker", 10, 40).is_err());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median_u64(&[]), 0);
    }
}
