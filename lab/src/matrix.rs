//! The matrix: every store against every fault (the runs that show each), for `idem
//! matrix` and the playground.

use idem_sim::run::Report;

use crate::select::{
    self, IsolationArg, ProducerArg, ScenarioArgs, ScenarioKind, StoreKind, WINDOW_CAPACITY,
};

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
            cells.push(select::run(&loaded, store, WINDOW_CAPACITY, false)?.report);
        }
        rows.push((store, cells));
    }
    Ok(rows)
}
