//! Loading the log a run consumes: a built-in scenario or the user's JSON Lines file,
//! with the user's checkpoint interval and crash plan.

use idem_core::consumer::{CheckpointEvery, ConsumerConfig, Guarantee};
use idem_payments::crash::{CrashPoint, MAX_CRASHES, parse_schedule};
use idem_payments::ddia;
use idem_payments::{GaugeLog, GeneratedLog};
use idem_payments::{Payment, Truth};
use idem_sim::scenario::{self, LostSends, ProducerStep, SMALL_LOG, Scenario};
use idem_sim::txn::{Isolation, TxnLog};

use super::args::{GuaranteeArg, ScenarioArgs, ScenarioKind};
use crate::error::usage;
use crate::events::{self, FileLog};

/// A scenario ready to run, whatever its log.
pub enum Loaded {
    /// A generated workload.
    Generated(Box<Scenario<GeneratedLog>>),
    /// A small built-in log.
    Small(Box<Scenario<TxnLog<SMALL_LOG>>>),
    /// The user's log file.
    File(Box<Scenario<FileLog>>),
    /// A gauge's readings.
    Gauge(Box<Scenario<GaugeLog>>),
}

impl Loaded {
    /// The scenario's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Generated(s) => s.name,
            Self::Small(s) => s.name,
            Self::File(s) => s.name,
            Self::Gauge(s) => s.name,
        }
    }

    /// Events in the log.
    pub fn events(&self) -> u64 {
        match self {
            Self::Generated(s) => s.log.len(),
            Self::Small(s) => s.log.len(),
            Self::File(s) => s.log.len(),
            Self::Gauge(s) => s.log.len(),
        }
    }

    /// The true total of the first `end` events, for every `end` from 0 to the log's
    /// length.
    pub fn truth_by_prefix(&self) -> Vec<i64> {
        fn prefix<L: Truth>(log: &L) -> Vec<i64> {
            (0..=log.len()).map(|n| log.true_total_before(n)).collect()
        }
        match self {
            Self::Generated(s) => prefix(&s.log),
            Self::Small(s) => prefix(&s.log),
            Self::File(s) => s.log.truth_by_prefix().to_vec(),
            Self::Gauge(s) => prefix(&s.log),
        }
    }

    /// The id of the event at `offset` as the user's file wrote it (a `--log` file
    /// only; the built-in scenarios' ids are idem's own).
    pub fn id_text(&self, offset: u64) -> Option<&str> {
        match self {
            Self::File(s) => s.log.id_text(offset),
            _ => None,
        }
    }

    /// Every event of the log, in offset order.
    pub fn all_events(&self) -> Vec<Payment> {
        fn all<L: Truth>(log: &L) -> Vec<Payment> {
            (0..log.len()).filter_map(|o| log.get(o)).collect()
        }
        match self {
            Self::Generated(s) => all(&s.log),
            Self::Small(s) => all(&s.log),
            Self::File(s) => all(&s.log),
            Self::Gauge(s) => all(&s.log),
        }
    }

    /// Consumer settings.
    pub fn consumer(&self) -> ConsumerConfig {
        match self {
            Self::Generated(s) => s.consumer,
            Self::Small(s) => s.consumer,
            Self::File(s) => s.consumer,
            Self::Gauge(s) => s.consumer,
        }
    }

    /// What the producer side did, send by send (built-in small scenarios only).
    pub fn producer(&self) -> &[ProducerStep] {
        match self {
            Self::Small(s) => &s.producer,
            _ => &[],
        }
    }

    /// The consumer's isolation level (only a built-in log of a transactional
    /// producer holds records it changes).
    pub fn isolation(&self) -> Isolation {
        match self {
            Self::Generated(s) => s.isolation,
            Self::Small(s) => s.isolation,
            Self::File(s) => s.isolation,
            Self::Gauge(s) => s.isolation,
        }
    }

    /// Sends the application made that never reached the log.
    pub fn lost_sends(&self) -> &LostSends {
        match self {
            Self::Generated(s) => &s.lost_sends,
            Self::Small(s) => &s.lost_sends,
            Self::File(s) => &s.lost_sends,
            Self::Gauge(s) => &s.lost_sends,
        }
    }

    /// The crash plan.
    pub fn crashes(&self) -> &[CrashPoint] {
        match self {
            Self::Generated(s) => &s.crashes,
            Self::Small(s) => &s.crashes,
            Self::File(s) => &s.crashes,
            Self::Gauge(s) => &s.crashes,
        }
    }
}

/// The most events a generated log may have: the checker's capacity (one bit per offset),
/// which also keeps a sweep's snapshots (about 120 bytes per event) well inside 2 GiB.
pub const MAX_EVENTS: u64 = idem_sim::run::DefaultApplied::CAPACITY;

/// Builds the scenario the user asked for; impossible choices are usage errors.
pub fn load(kind: Option<ScenarioKind>, a: &ScenarioArgs) -> anyhow::Result<Loaded> {
    if a.events.is_some() && !kind.is_some_and(ScenarioKind::takes_events) {
        return Err(usage(
            "--events applies to the ddia and gauge scenarios only",
        ));
    }
    Ok(match (kind, &a.log) {
        (Some(_), Some(_)) => return Err(usage("give either a scenario or --log FILE, not both")),
        (None, None) => {
            return Err(usage(
                "name a scenario (ddia, worked-example, payments, same-amount, resend, zombie, late-retry, dual-write, gauge, late-reading) or give --log FILE",
            ));
        }
        (Some(ScenarioKind::Mqtt), None) => {
            return Err(usage(
                "mqtt has no log of offsets: `idem run mqtt` and `idem matrix --source mqtt` run it",
            ));
        }
        (Some(ScenarioKind::Pump), None) => {
            return Err(usage(
                "pump has no payments to sum: `idem run pump --way after|reassert|effects` runs it",
            ));
        }
        (Some(ScenarioKind::Ddia), None) => {
            let events = a.events.unwrap_or(ddia::EVENTS);
            check_events(events)?;
            let base = scenario::ddia(events, ddia::CHECKPOINT_EVERY, None)
                .map_err(|e| usage(e.to_string()))?;
            let default = [CrashPoint::after_effect(ddia::CRASH_AFTER)];
            Loaded::Generated(Box::new(configure(base, &default, a)?))
        }
        (Some(ScenarioKind::Gauge), None) => {
            let events = a.events.unwrap_or(ddia::EVENTS);
            check_events(events)?;
            let base = scenario::gauge(events, ddia::CHECKPOINT_EVERY, None)
                .map_err(|e| usage(e.to_string()))?;
            let default = [CrashPoint::after_effect(ddia::CRASH_AFTER)];
            Loaded::Gauge(Box::new(configure(base, &default, a)?))
        }
        (Some(ScenarioKind::LateReading), None) => {
            let base = scenario::late_reading().map_err(|e| usage(e.to_string()))?;
            Loaded::Gauge(Box::new(configure(base, &[], a)?))
        }
        (Some(ScenarioKind::WorkedExample), None) => {
            let base = scenario::worked_example().map_err(|e| usage(e.to_string()))?;
            let default = base.crashes.clone();
            Loaded::Small(Box::new(configure(isolated(base, a), &default, a)?))
        }
        (Some(kind), None) => {
            let mode = a.producer.mode();
            let base = match kind {
                ScenarioKind::Payments => scenario::payments(mode),
                ScenarioKind::SameAmount => scenario::same_amount(mode),
                ScenarioKind::Resend => scenario::resend(mode),
                ScenarioKind::Zombie => scenario::zombie(mode),
                ScenarioKind::LateRetry => scenario::late_retry(mode),
                ScenarioKind::DualWrite => scenario::dual_write(),
                ScenarioKind::Ddia
                | ScenarioKind::WorkedExample
                | ScenarioKind::Gauge
                | ScenarioKind::LateReading
                | ScenarioKind::Mqtt
                | ScenarioKind::Pump => scenario::worked_example(),
            }
            .map_err(|e| usage(e.to_string()))?;
            let default = match (kind, a.fix) {
                (ScenarioKind::DualWrite, Some(fix)) => vec![fix.default_crash()],
                _ => base.crashes.to_vec(),
            };
            Loaded::Small(Box::new(configure(isolated(base, a), &default, a)?))
        }
        (None, Some(path)) => {
            let key = a.id_key.unwrap_or_else(events::run_key);
            let log = *events::load(path, a.producer.mode(), &key)?;
            let base = Scenario::new("log", log, ConsumerConfig::every(ddia::CHECKPOINT_EVERY));
            Loaded::File(Box::new(configure(base, &[], a)?))
        }
    })
}

/// `base` read at the user's isolation level.
fn isolated(base: Scenario<TxnLog<SMALL_LOG>>, a: &ScenarioArgs) -> Scenario<TxnLog<SMALL_LOG>> {
    Scenario {
        log: base.log.with_isolation(a.isolation.level()),
        ..base
    }
}

/// Refuses a generated log longer than [`MAX_EVENTS`].
fn check_events(events: u64) -> anyhow::Result<()> {
    if events > MAX_EVENTS {
        return Err(usage(format!(
            "--events {events}: idem runs logs of up to {MAX_EVENTS} events (the checker follows each one)"
        )));
    }
    Ok(())
}

/// Applies the user's checkpoint interval and crash choice to `base`; `default` is the
/// crash plan when the user chose none.
fn configure<L: Truth>(
    base: Scenario<L>,
    default: &[CrashPoint],
    a: &ScenarioArgs,
) -> anyhow::Result<Scenario<L>> {
    let mut consumer = base.consumer;
    if let Some(k) = a.checkpoint_every {
        consumer.checkpoint_every = CheckpointEvery::new(k)
            .ok_or_else(|| usage("the checkpoint interval must be at least 1 event"))?;
    }
    consumer.guarantee = match a.guarantee {
        GuaranteeArg::AtLeastOnce => Guarantee::AtLeastOnce,
        GuaranteeArg::AtMostOnce => Guarantee::AtMostOnce,
    };
    let crashes = match (&a.schedule, a.no_crash, a.crash_after) {
        (Some(text), _, _) => {
            let mut points = [CrashPoint::after_effect(0); MAX_CRASHES];
            let n = parse_schedule(text, &mut points)
                .map_err(|e| usage(format!("--schedule {}: {e}", quote_short(text))))?;
            points[..n].to_vec()
        }
        (None, true, _) => Vec::new(),
        (None, false, Some(o)) => vec![CrashPoint::after_effect(o)],
        (None, false, None) => default.to_vec(),
    };
    let (lost_sends, producer) = (base.lost_sends.clone(), base.producer.clone());
    let mut s = Scenario::new(base.name, base.log, consumer)
        .with_crashes(&crashes)
        .map_err(|e| usage(e.to_string()))?;
    s.lost_sends = lost_sends;
    s.producer = producer;
    s.isolation = a.isolation.level();
    Ok(s)
}

/// `text` quoted for a message, cut to its first 60 characters.
fn quote_short(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!(
            "{:?}... ({} characters)",
            &text[..cut],
            text.chars().count()
        ),
        None => format!("{text:?}"),
    }
}
