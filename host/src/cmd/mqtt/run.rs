//! `idem run mqtt`: one run of the MQTT receiver in the simulator, against a broker that
//! keeps the session (`idem_mqtt::sim`): 30 payments p0..p29, 4 in flight, and one device
//! reset after p14's record, before its acknowledgement goes out.

use std::io::Write;
use std::process::ExitCode;

use idem_mqtt::codec::QoS;
use idem_mqtt::receiver::{Ack, Decided, Keep, Release};
use idem_mqtt::sim::{self, Flash, Reset, Step, ToDevice};
use idem_sim::check::Verdict;
use idem_sim::payment::Sum;
use idem_sim::registry::{self, SumStoreJob};
use serde_json::json;

use crate::select::{StoreKind, WINDOW};

/// The message after whose record the device resets.
pub const RESET_AFTER: usize = 14;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct MqttRun {
    /// The store.
    pub store: StoreKind,
    /// The subscription's QoS.
    pub qos: QoS,
    /// The identifiers in RAM (`--session ram`).
    pub ram: bool,
    /// Print every step.
    pub trace: bool,
    /// Print JSON.
    pub json: bool,
}

/// One step, as the report shows it.
struct Line {
    sent: String,
    did: String,
    total: i64,
    applied: Option<usize>,
}

struct Job(MqttRun);

impl SumStoreJob for Job {
    /// The run's end, with the store's total as its state, and its steps.
    type Out = (sim::End<i64>, Vec<Line>);
    fn call<S: Sum + Send + Sync>(self, store: S) -> Self::Out {
        let r = self.0;
        let keep = if r.ram { Keep::Ram } else { Keep::Flash };
        let setup = sim::Setup {
            lose_session: false,
            ..sim::setup((r.qos, keep, Release::Now))
        };
        let mut lines = Vec::new();
        let reset = Some(Reset::AfterMessage(RESET_AFTER));
        let end = sim::run_traced(&mut Flash::new(), store, setup, reset, &mut |s: Step<
            S::State,
        >| {
            lines.push(line(&s, S::total(&s.state)));
        });
        (end.map(|state| S::total(&state)), lines)
    }
}

fn line<T>(s: &Step<T>, total: i64) -> Line {
    let (sent, message) = match s.packet {
        Some(ToDevice::Publish {
            qos,
            pid,
            dup,
            message,
        }) => {
            let id = if qos == QoS::AtMostOnce {
                String::new()
            } else {
                format!(" (id {pid}{})", if dup { ", DUP 1" } else { "" })
            };
            (format!("PUBLISH p{message}{id}"), Some(message))
        }
        Some(ToDevice::Pubrel(pid)) => (format!("PUBREL {pid}"), None),
        None => ("(quiet)".into(), None),
    };
    let mut did = match s.decided {
        Some(Decided::Applied) => "applied".to_string(),
        Some(Decided::Skipped) => "skipped: a message id it holds".into(),
        Some(Decided::Held) => "held: nothing applied".into(),
        Some(Decided::Rejected) => "rejected".into(),
        Some(Decided::Retained) => "retained: not applied".into(),
        None if s.records > 0 => "released".into(),
        None if s.held => "released in RAM".into(),
        None => "not held: nothing to forget".into(),
    };
    if s.records > 0 {
        did += ", a record";
    }
    if s.reset {
        did += "; RESET";
    }
    for _ in 0..s.completed {
        did += ", PUBCOMP";
    }
    match s.ack {
        Some(Ack::Puback(pid)) => did += &format!(", PUBACK {pid}"),
        Some(Ack::Pubrec(pid)) => did += &format!(", PUBREC {pid}"),
        None => {}
    }
    let applied = (s.decided == Some(Decided::Applied))
        .then_some(message)
        .flatten();
    Line {
        sent,
        did,
        total,
        applied,
    }
}

/// Runs it and prints the report.
pub fn run(r: MqttRun) -> anyhow::Result<ExitCode> {
    // The store was checked against the scenario as every run's is (`select::check_pair`).
    crate::select::check_pair(Some(crate::select::ScenarioKind::Mqtt), r.store)?;
    let (end, lines) = registry::with_mqtt_store(r.store, WINDOW, Job(r))
        .ok_or_else(|| anyhow::anyhow!("the {} store does not run on MQTT", r.store.name()))?
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let truth = sim::true_total(30);
    let mut times = [0usize; 30];
    for i in lines.iter().filter_map(|l| l.applied) {
        times[i] += 1;
    }
    let twice: Vec<String> = (0..30)
        .filter(|&i| times[i] > 1)
        .map(|i| format!("p{i}"))
        .collect();
    let lost: Vec<String> = (0..30)
        .filter(|&i| times[i] == 0)
        .map(|i| format!("p{i}"))
        .collect();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let report = Report {
        truth,
        end,
        lines,
        twice,
        lost,
    };
    if r.json {
        json_report(&mut out, &r, &report)?;
    } else {
        text_report(&mut out, &r, &report)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

struct Report {
    truth: i64,
    /// The run's end, the store's total as its state.
    end: sim::End<i64>,
    lines: Vec<Line>,
    twice: Vec<String>,
    lost: Vec<String>,
}

fn json_report(out: &mut impl Write, r: &MqttRun, p: &Report) -> anyhow::Result<()> {
    let session = if r.ram { "ram" } else { "flash" };
    let mut v = json!({
        "scenario": "mqtt", "store": r.store.name(), "qos": r.qos.level(), "session": session,
        "messages": 30, "in_flight": 4, "reset_after": format!("p{RESET_AFTER}"),
        "true_total": p.truth, "final_total": p.end.state,
        "verdict": Verdict::of(p.end.state, p.truth).name(),
        "resets": p.end.resets, "records": p.end.records, "resent": p.end.resent,
        "applied_twice": p.twice, "lost": p.lost,
    });
    if r.trace {
        v["trace"] = p.lines.iter().enumerate().map(|(i, l)| json!({"step": i + 1, "broker": l.sent, "device": l.did, "total": l.total})).collect();
    }
    writeln!(out, "{v}")?;
    Ok(())
}

fn text_report(out: &mut impl Write, r: &MqttRun, p: &Report) -> anyhow::Result<()> {
    let (total, truth) = (p.end.state, p.truth);
    let (kept, ack) = match (r.qos, r.ram) {
        (QoS::AtMostOnce, _) => ("no acknowledgement", "(QoS 0 sends none)"),
        (QoS::AtLeastOnce, _) => ("no identifiers kept", "and before its PUBACK"),
        (QoS::ExactlyOnce, true) => ("the identifiers in RAM", "and before its PUBREC"),
        (QoS::ExactlyOnce, false) => ("the identifiers in flash", "and before its PUBREC"),
    };
    writeln!(
        out,
        "mqtt: 30 payments p0..p29 ({truth} in all) at QoS {} to the {} store, 4 in flight,\n{kept}; the device resets once, after p{RESET_AFTER}'s record {ack}",
        r.qos.level(),
        r.store.name(),
    )?;
    if r.trace {
        writeln!(
            out,
            "\nstep  broker sends               device                                       total"
        )?;
        for (i, l) in p.lines.iter().enumerate() {
            writeln!(out, "{:<5} {:<26} {:<44} {}", i + 1, l.sent, l.did, l.total)?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "final total  {total} (true total {truth}, {})",
        Verdict::of(total, truth)
    )?;
    writeln!(
        out,
        "  the broker sent {} PUBLISHes again (DUP 1) after the reset; {} records",
        p.end.resent, p.end.records
    )?;
    if !p.twice.is_empty() {
        writeln!(out, "  applied twice: {}", p.twice.join(", "))?;
    }
    if !p.lost.is_empty() {
        writeln!(out, "  never applied: {}", p.lost.join(", "))?;
    }
    Ok(())
}
