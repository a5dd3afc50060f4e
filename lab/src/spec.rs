//! A run described as data: what the playground sends, the CLI's `idem run` options
//! by name. [`run`] checks it as `idem run` checks its flags (same sentences) and returns
//! the shared [`RunReport`].

use crate::lesson::LessonRun;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::report::RunReport;
use crate::select::{
    self, FixArg, GuaranteeArg, IsolationArg, ProducerArg, ScenarioArgs, ScenarioKind, StoreKind,
    WINDOW,
};

/// One run, by the names `idem run` takes: `{"scenario": "ddia", "store": "naive",
/// "checkpoint_every": 10, "schedule": "crash@effect:49"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// The scenario (`ddia`, `payments`, ...).
    pub scenario: String,
    /// The store (`naive`, `offset`, ...); dual-write takes `fix` instead.
    #[serde(default)]
    pub store: Option<String>,
    /// The dual-write fix (`none`, `atomic`, `derive`, `split`).
    #[serde(default)]
    pub fix: Option<String>,
    /// The checkpoint interval K (the scenario's own when absent).
    #[serde(default)]
    pub checkpoint_every: Option<u64>,
    /// Events of +1 (ddia and gauge only).
    #[serde(default)]
    pub events: Option<u64>,
    /// Crash points in idem's grammar (`crash@effect:49,crash@commit:59`); absent: the
    /// scenario's own crash; empty or `none`: no crash.
    #[serde(default)]
    pub schedule: Option<String>,
    /// The producer (`non-idempotent`, `idempotent`, `transactional`, `no-retry`).
    #[serde(default)]
    pub producer: Option<String>,
    /// `at-least-once` (the default) or `at-most-once`.
    #[serde(default)]
    pub guarantee: Option<String>,
    /// The consumer's isolation level: `read-uncommitted` (the default) or
    /// `read-committed`.
    #[serde(default)]
    pub isolation: Option<String>,
    /// The message-id store's window (1 to 32).
    #[serde(default)]
    pub window: Option<usize>,
    /// The subscription's QoS, for `mqtt`.
    #[serde(default)]
    pub qos: Option<u8>,
    /// Where `mqtt`'s receiver keeps its packet identifiers: `flash` or `ram`.
    #[serde(default)]
    pub session: Option<String>,
    /// What `pump`'s controller does about a dose a reset may cut: `after`,
    /// `reassert` or `effects`.
    #[serde(default)]
    pub way: Option<String>,
    /// Keep every step (and the producer's sends) in the report.
    #[serde(default)]
    pub trace: bool,
}

/// The name of a choice as the CLI spells it (`non-idempotent`, `message-id`).
pub fn value_name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// Reads `name` as a value of `T`, or says which names there are.
fn named<T: ValueEnum>(what: &str, name: &str) -> anyhow::Result<T> {
    T::from_str(name, false).map_err(|_| {
        let names: Vec<String> = T::value_variants().iter().map(value_name).collect();
        usage(format!(
            "unknown {what} {name:?}: one of {}",
            names.join(", ")
        ))
    })
}

/// Reads `name` as one of the registry's stores, or says which names there are.
fn store_named(name: &str) -> anyhow::Result<StoreKind> {
    StoreKind::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = idem_payments::registry::STORES
            .iter()
            .map(|e| e.name)
            .collect();
        usage(format!(
            "unknown store {name:?}: one of {}",
            names.join(", ")
        ))
    })
}

impl RunSpec {
    /// The scenario options this spec gives.
    pub fn args(&self) -> anyhow::Result<(ScenarioKind, ScenarioArgs)> {
        let kind: ScenarioKind = named("scenario", &self.scenario)?;
        let fix = self
            .fix
            .as_deref()
            .map(|f| named::<FixArg>("fix", f))
            .transpose()?;
        let (schedule, no_crash) = match self.schedule.as_deref().map(str::trim) {
            None => (None, false),
            Some("" | "none") => (None, true),
            Some(s) => (Some(s.to_string()), false),
        };
        let args = ScenarioArgs {
            events: self.events,
            checkpoint_every: self.checkpoint_every,
            schedule,
            no_crash,
            window: self.window.unwrap_or(WINDOW),
            guarantee: match self.guarantee.as_deref() {
                Some(g) => named::<GuaranteeArg>("guarantee", g)?,
                None => GuaranteeArg::AtLeastOnce,
            },
            producer: match self.producer.as_deref() {
                Some(p) => named::<ProducerArg>("producer", p)?,
                None => ProducerArg::NonIdempotent,
            },
            isolation: match self.isolation.as_deref() {
                Some(i) => named::<IsolationArg>("isolation level", i)?,
                None => IsolationArg::ReadUncommitted,
            },
            fix,
            ..ScenarioArgs::default()
        };
        Ok((kind, args))
    }
}

impl RunSpec {
    /// The `idem run` command line of this spec, for a person to paste.
    pub fn command(&self) -> String {
        let mut line = format!("idem run {}", self.scenario);
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                line += &format!(" --{name} {v}");
            }
        };
        flag("store", self.store.clone());
        flag("fix", self.fix.clone());
        flag("events", self.events.map(|n| n.to_string()));
        flag(
            "producer",
            self.producer
                .clone()
                .filter(|p| p != "non-idempotent" && p != "plain"),
        );
        flag(
            "checkpoint-every",
            self.checkpoint_every.map(|k| k.to_string()),
        );
        flag(
            "guarantee",
            self.guarantee.clone().filter(|g| g != "at-least-once"),
        );
        flag(
            "isolation",
            self.isolation.clone().filter(|i| i != "read-uncommitted"),
        );
        flag("window", self.window.map(|w| w.to_string()));
        flag("qos", self.qos.map(|q| q.to_string()));
        flag("session", self.session.clone());
        flag("way", self.way.clone());
        match self.schedule.as_deref().map(str::trim) {
            None => {}
            Some("" | "none") => line += " --no-crash",
            Some(s) => line += &format!(" --schedule {s}"),
        }
        if self.trace {
            line += " --trace";
        }
        line
    }
}

impl From<&LessonRun> for RunSpec {
    fn from(r: &LessonRun) -> Self {
        Self {
            scenario: r.scenario.into(),
            store: r.store.map(Into::into),
            fix: r.fix.map(Into::into),
            checkpoint_every: r.every,
            schedule: r.schedule.map(Into::into),
            producer: Some(r.producer.into()),
            guarantee: Some(r.guarantee.into()),
            isolation: Some(r.isolation.into()),
            qos: r.qos,
            session: r.session.map(Into::into),
            way: r.way.map(Into::into),
            ..Self::default()
        }
    }
}

/// Runs `spec` as `idem run` runs its flags; the report is `idem run --json`'s.
pub fn run(spec: &RunSpec) -> anyhow::Result<RunReport> {
    let (kind, args) = spec.args()?;
    let store = spec.store.as_deref().map(store_named).transpose()?;
    let choice = select::choose(Some(kind), store, args.fix)?;
    let loaded = select::load(Some(kind), &args)?;
    let o = select::run(&loaded, choice, args.window, spec.trace)?;
    select::ensure_every_crash_happened(&loaded, &o.report)?;
    Ok(RunReport::new(&loaded, choice, &o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_runs_as_idem_run_and_reads_back() {
        let spec = RunSpec {
            scenario: "ddia".into(),
            store: Some("offset".into()),
            schedule: Some("crash@effect:49,crash@effect:45#2".into()),
            trace: true,
            ..RunSpec::default()
        };
        assert_eq!(
            spec.command(),
            "idem run ddia --store offset --schedule crash@effect:49,crash@effect:45#2 --trace"
        );
        let report = run(&spec).unwrap();
        assert_eq!((report.final_total, report.true_total), (100, 100));
        assert_eq!(report.resume_at, Some(40));
        assert_eq!(report.skipped.len(), 16);
        let text = serde_json::to_string(&report).unwrap();
        let back: RunReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn no_crash_and_unknown_names() {
        let spec = RunSpec {
            scenario: "ddia".into(),
            store: Some("naive".into()),
            schedule: Some(String::new()),
            ..RunSpec::default()
        };
        assert_eq!(run(&spec).unwrap().final_total, 100);
        assert_eq!(spec.command(), "idem run ddia --store naive --no-crash");
        let bad = RunSpec {
            producer: Some("sloppy".into()),
            ..spec
        };
        assert_eq!(
            run(&bad).unwrap_err().to_string(),
            "unknown producer \"sloppy\": one of non-idempotent, idempotent, transactional, no-retry"
        );
    }
}
