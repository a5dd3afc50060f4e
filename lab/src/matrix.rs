//! The matrix: every store against every fault (the runs that show each), for `idem
//! matrix` and the playground.

use idem_sim::check::Verdict;
use idem_sim::run::Report;
use serde::Serialize;

use crate::select::{
    self, IsolationArg, ProducerArg, ScenarioArgs, ScenarioKind, StoreKind, WINDOW,
};
use crate::spec::{RunSpec, value_name};

/// A fault of the matrix: a name, a column title, and the run that shows it.
pub struct Fault {
    /// The fault's name in JSON.
    pub name: &'static str,
    /// The column's title.
    pub title: &'static str,
    /// The column's title in a terminal's table, at most 12 characters.
    pub head: &'static str,
    /// The scenario that shows it.
    pub scenario: ScenarioKind,
    /// The producer the scenario runs with.
    pub producer: ProducerArg,
    /// The consumer's isolation level.
    pub isolation: IsolationArg,
}

/// The faults of the stores' matrix, in column order.
pub const FAULTS: [Fault; 6] = [
    Fault {
        name: "consumer-crash",
        title: "consumer crash",
        head: "crash",
        scenario: ScenarioKind::Ddia,
        producer: ProducerArg::NonIdempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "producer-retry",
        title: "producer retry",
        head: "retry",
        scenario: ScenarioKind::Payments,
        producer: ProducerArg::NonIdempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "producer-retry-idempotent",
        title: "retry, idem. producer",
        head: "retry",
        scenario: ScenarioKind::Payments,
        producer: ProducerArg::Idempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "application-resend",
        title: "app resend, idem. prod.",
        head: "app resend",
        scenario: ScenarioKind::Resend,
        producer: ProducerArg::Idempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "zombie-producer",
        title: "zombie producer",
        head: "zombie",
        scenario: ScenarioKind::Zombie,
        producer: ProducerArg::NonIdempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "late-retry",
        title: "retry 40 msgs late",
        head: "retry, late",
        scenario: ScenarioKind::LateRetry,
        producer: ProducerArg::NonIdempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
];

/// The transactional zombie, read at each isolation level: instance A's p42 sits in
/// the open transaction that B's start aborted.
pub const TXN_FAULTS: [Fault; 2] = [
    Fault {
        name: "zombie-transaction-read-uncommitted",
        title: "zombie txn, read_uncommitted",
        head: "zombie",
        scenario: ScenarioKind::Zombie,
        producer: ProducerArg::Transactional,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "zombie-transaction-read-committed",
        title: "zombie txn, read_committed",
        head: "zombie",
        scenario: ScenarioKind::Zombie,
        producer: ProducerArg::Transactional,
        isolation: IsolationArg::ReadCommitted,
    },
];

/// The gauges' faults: the DDIA consumer crash on readings, and an old reading that
/// arrives after the last.
pub const GAUGE_FAULTS: [Fault; 2] = [
    Fault {
        name: "consumer-crash",
        title: "consumer crash",
        head: "crash",
        scenario: ScenarioKind::Gauge,
        producer: ProducerArg::NonIdempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
    Fault {
        name: "late-reading",
        title: "late reading",
        head: "late reading",
        scenario: ScenarioKind::LateReading,
        producer: ProducerArg::NonIdempotent,
        isolation: IsolationArg::ReadUncommitted,
    },
];

/// The reports of `stores` against `faults`, a row per store.
pub fn table(
    stores: &[StoreKind],
    faults: &[Fault],
) -> anyhow::Result<Vec<(StoreKind, Vec<Report>)>> {
    let mut rows = Vec::new();
    for &store in stores {
        let mut cells = Vec::new();
        for f in faults {
            let args = ScenarioArgs {
                producer: f.producer,
                isolation: f.isolation,
                ..ScenarioArgs::default()
            };
            let loaded = select::load(Some(f.scenario), &args)?;
            cells.push(select::run(&loaded, store, WINDOW, false)?.report);
        }
        rows.push((store, cells));
    }
    Ok(rows)
}

/// A matrix as `idem matrix --json` and the playground give it, one serialisation for
/// both: its faults, and a row per store.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixReport {
    /// The faults, in column order.
    pub faults: Vec<FaultName>,
    /// A row per store.
    pub rows: Vec<MatrixRow>,
}

/// A fault's name and its column's title.
#[derive(Debug, Clone, Serialize)]
pub struct FaultName {
    /// The fault's name.
    pub name: &'static str,
    /// The column's title.
    pub title: &'static str,
}

/// One store's row.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixRow {
    /// The store's name.
    pub store: &'static str,
    /// A cell per fault, in column order.
    pub cells: Vec<MatrixCell>,
}

/// One store's run under one fault.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixCell {
    /// The fault's name.
    pub fault: &'static str,
    /// The scenario the run took.
    pub scenario: &'static str,
    /// The producer the run had.
    pub producer: String,
    /// The consumer's isolation level.
    pub isolation: &'static str,
    /// `exact`, `over` or `under`.
    pub verdict: &'static str,
    /// The store's total at the end.
    pub final_total: i64,
    /// What the total should be.
    pub true_total: i64,
    /// Journal records appended.
    pub flash_writes: u64,
    /// The run, as `idem run` and the playground take it.
    pub spec: RunSpec,
}

impl MatrixReport {
    /// The report of `rows`, the reports of [`table`] against `faults`.
    pub fn new(rows: &[(StoreKind, Vec<Report>)], faults: &[Fault]) -> Self {
        let cell = |store: StoreKind, f: &Fault, r: &Report| MatrixCell {
            fault: f.name,
            scenario: f.scenario.name(),
            producer: value_name(&f.producer),
            isolation: f.isolation.level().name(),
            verdict: Verdict::of(r.final_total, r.true_total).name(),
            final_total: r.final_total,
            true_total: r.true_total,
            flash_writes: r.flash.writes,
            spec: RunSpec {
                scenario: f.scenario.name().into(),
                store: Some(store.name().into()),
                producer: Some(value_name(&f.producer)),
                isolation: (f.isolation != IsolationArg::default())
                    .then(|| value_name(&f.isolation)),
                ..RunSpec::default()
            },
        };
        Self {
            faults: faults
                .iter()
                .map(|f| FaultName {
                    name: f.name,
                    title: f.title,
                })
                .collect(),
            rows: rows
                .iter()
                .map(|(store, cells)| MatrixRow {
                    store: store.name(),
                    cells: cells
                        .iter()
                        .zip(faults)
                        .map(|(r, f)| cell(*store, f, r))
                        .collect(),
                })
                .collect(),
        }
    }
}
