//! `idem matrix`: every store against every fault, the dual-write fixes, and the
//! gauges (naturally idempotent operations) against theirs.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idem_sim::check::Verdict;
use idem_sim::run::Report;
use serde_json::json;

use idem_lab::matrix::{FAULTS, Fault, GAUGE_FAULTS, MatrixReport, TXN_FAULTS, table};
use idem_lab::render::verdict_name;
use idem_lab::select::{
    self, FixArg, IsolationArg, ProducerArg, ScenarioArgs, ScenarioKind, SinkChoice, StoreKind,
    WINDOW,
};
use idem_lab::spec::value_name;

/// The width of a column of a matrix in a terminal (cells are at most 12 characters).
const COLUMN: usize = 13;

/// Writes `cells` after `first`, each in a column of `width`, without trailing blanks.
fn write_row(
    out: &mut impl Write,
    width: usize,
    first: &str,
    cells: &[String],
) -> std::io::Result<()> {
    let mut line = format!("{first:<COLUMN$}");
    for c in cells {
        line += &format!(" {c:<width$}");
    }
    writeln!(out, "{}", line.trim_end())
}

/// A table as text: a header of fault titles, each column's scenario (as `idem run`
/// takes it) and producer, the truths, a row per store.
fn write_table(
    out: &mut impl Write,
    rows: &[(StoreKind, Vec<Report>)],
    faults: &[Fault],
) -> std::io::Result<()> {
    let row = |f: fn(&Fault) -> String| faults.iter().map(f).collect::<Vec<_>>();
    // Isolation levels are longer than a column: their table is wider.
    let isolation = faults
        .iter()
        .any(|f| f.isolation != IsolationArg::default());
    let w = if isolation {
        faults
            .iter()
            .map(|f| value_name(&f.isolation).len())
            .fold(COLUMN, usize::max)
    } else {
        COLUMN
    };
    write_row(out, w, "store", &row(|f| f.head.to_string()))?;
    write_row(
        out,
        w,
        "  scenario",
        &row(|f| f.scenario.name().to_string()),
    )?;
    // The producer where it is not the default (non-idempotent).
    if faults.iter().any(|f| f.producer != ProducerArg::default()) {
        write_row(
            out,
            w,
            "  --producer",
            &row(|f| {
                if f.producer == ProducerArg::default() {
                    String::new()
                } else {
                    value_name(&f.producer)
                }
            }),
        )?;
    }
    // Every level, where one is not the default.
    if isolation {
        write_row(out, w, "  --isolation", &row(|f| value_name(&f.isolation)))?;
    }
    let truths: Vec<String> = rows[0].1.iter().map(|r| r.true_total.to_string()).collect();
    write_row(out, w, "  (truth)", &truths)?;
    for (store, cells) in rows {
        let cells: Vec<String> = cells.iter().map(cell).collect();
        write_row(out, w, store.name(), &cells)?;
    }
    Ok(())
}

/// Every store against every fault.
#[derive(Debug, Args)]
pub struct Cmd {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// The stores against the simulator's faults, or the MQTT receiver against a device
    /// reset at every crash point (`mqtt`).
    #[arg(long, default_value = "simulator", value_parser = ["simulator", "mqtt"])]
    source: String,
}

fn cell(r: &Report) -> String {
    let v = Verdict::of(r.final_total, r.true_total);
    format!("{} {}", v.name(), r.final_total)
}

/// The matrix's tables: every store against every fault, the transactions, the dual
/// writes' fixes and the gauges.
struct Tables {
    rows: Vec<(StoreKind, Vec<Report>)>,
    gauges: Vec<(StoreKind, Vec<Report>)>,
    txns: Vec<(StoreKind, Vec<Report>)>,
    duals: Vec<(&'static str, Report)>,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if self.source == "mqtt" {
            crate::cmd::mqtt::matrix::print(&mut out, self.json)?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        let tables = tables()?;
        if self.json {
            print_json(&mut out, &tables)?;
        } else {
            print_text(&mut out, &tables)?;
        }
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Runs every cell of the matrix.
fn tables() -> anyhow::Result<Tables> {
    let rows = table(&StoreKind::ALL, &FAULTS)?;
    let gauges = table(&StoreKind::GAUGES, &GAUGE_FAULTS)?;
    let txns = table(&StoreKind::ALL, &TXN_FAULTS)?;
    let duals: Vec<(&str, Report)> = FixArg::ALL
        .iter()
        .map(|&fix| {
            let args = ScenarioArgs {
                fix: Some(fix),
                ..ScenarioArgs::default()
            };
            let loaded = select::load(Some(ScenarioKind::DualWrite), &args)?;
            let r = select::run(&loaded, SinkChoice::Dual(fix), WINDOW, false)?;
            Ok((fix.name(), r.report))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Tables {
        rows,
        gauges,
        txns,
        duals,
    })
}

/// `--json`: the tables as one object.
fn print_json(out: &mut impl Write, t: &Tables) -> anyhow::Result<()> {
    let stores = MatrixReport::new(&t.rows, &FAULTS);
    let dual_rows: Vec<_> = t
        .duals
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
    writeln!(
        out,
        "{}",
        json!({
            "faults": stores.faults,
            "rows": stores.rows,
            "dual_write": dual_rows,
            "gauges": MatrixReport::new(&t.gauges, &GAUGE_FAULTS),
            "transactions": MatrixReport::new(&t.txns, &TXN_FAULTS),
        })
    )?;
    Ok(())
}

/// The tables as text.
fn print_text(out: &mut impl Write, t: &Tables) -> anyhow::Result<()> {
    write_table(out, &t.rows, &FAULTS)?;
    writeln!(
        out,
        "\nwho writes what each store reads: the broker writes the offset (offset, atomic,\n\
two-phase); the application writes the message id (message-id) and its own instance, epoch\n\
and seq in the payload (producer-seq). An idempotent producer's id, epoch and sequence are\n\
written by its library for the broker: no application, and so no store, can see them.\n"
    )?;
    writeln!(
        out,
        "transactions (zombie with --producer transactional): A's p42 sits in the open\n\
transaction that B's start aborted; read_committed passes over it:"
    )?;
    write_table(out, &t.txns, &TXN_FAULTS)?;
    writeln!(
        out,
        "\ndual writes (a crash between the two writes of offset {}):",
        idem_sim::dual::DUAL_CRASH
    )?;
    for (fix, r) in &t.duals {
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
        "\nnaturally idempotent operations (the gauge: reading i + 1 at offset i; the truth is\nthe newest reading):"
    )?;
    write_table(out, &t.gauges, &GAUGE_FAULTS)?;
    writeln!(
        out,
        "\nthe producer is non-idempotent where no --producer is named, the consumer at\nread-uncommitted where no --isolation is; rerun a cell:\n  idem run <scenario> --store <store> [--producer <producer>] [--isolation <level>] --trace\n  idem run dual-write --fix <fix> --trace"
    )?;
    Ok(())
}
