//! `idem run mqtt`: one run of the MQTT receiver in the simulator, against a broker that
//! keeps the session (`idem_mqtt::sim`): 30 payments p0..p29, 4 in flight at QoS 1 and 2
//! (at QoS 0, with no acknowledgement and so no in-flight limit, all 30 written at once),
//! and one device reset after p14's record, before its acknowledgement goes out.

use std::io::Write;
use std::process::ExitCode;

use idem_lab::mqtt::{self, MqttOutcome, RESET_AFTER};
use idem_mqtt::codec::QoS;
use idem_sim::check::Verdict;
use serde_json::json;

use idem_lab::select::StoreKind;

/// What to run, and how to print it.
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

/// Runs it and prints the report.
pub fn run(r: MqttRun) -> anyhow::Result<ExitCode> {
    let outcome = mqtt::run(mqtt::MqttRun {
        store: r.store,
        qos: r.qos,
        ram: r.ram,
    })?;
    let names = |ps: &[usize]| ps.iter().map(|i| format!("p{i}")).collect::<Vec<_>>();
    let report = Report {
        twice: names(&outcome.twice),
        lost: names(&outcome.lost),
        outcome,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if r.json {
        json_report(&mut out, &r, &report)?;
    } else {
        text_report(&mut out, &r, &report)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

struct Report {
    outcome: MqttOutcome,
    twice: Vec<String>,
    lost: Vec<String>,
}

fn json_report(out: &mut impl Write, r: &MqttRun, report: &Report) -> anyhow::Result<()> {
    let p = &report.outcome;
    let session = if r.ram { "ram" } else { "flash" };
    let mut v = json!({
        "scenario": "mqtt", "store": r.store.name(), "qos": r.qos.level(), "session": session,
        "messages": mqtt::MESSAGES, "in_flight": in_flight(r.qos), "reset_after": format!("p{RESET_AFTER}"),
        "true_total": p.truth, "final_total": p.end.state,
        "verdict": Verdict::of(p.end.state, p.truth).name(),
        "resets": p.end.resets, "records": p.end.records, "resent": p.end.resent,
        "applied_twice": report.twice, "lost": report.lost,
    });
    if r.trace {
        v["trace"] = p.lines.iter().enumerate().map(|(i, l)| json!({"step": i + 1, "broker": l.sent, "device": l.did, "total": l.total})).collect();
    }
    writeln!(out, "{v}")?;
    Ok(())
}

/// The broker's in-flight limit at `qos`: none at QoS 0, which has no acknowledgement
/// to wait for (MQTT 3.1.1 §4.3.1), so the broker writes all 30 at once.
fn in_flight(qos: QoS) -> Option<usize> {
    (qos != QoS::AtMostOnce).then_some(idem_mqtt::sim::setup(idem_mqtt::sim::ROWS[1]).limit)
}

fn text_report(out: &mut impl Write, r: &MqttRun, report: &Report) -> anyhow::Result<()> {
    let p = &report.outcome;
    let (total, truth) = (p.end.state, p.truth);
    let (kept, ack) = match (r.qos, r.ram) {
        (QoS::AtMostOnce, _) => ("no acknowledgement", ""),
        (QoS::AtLeastOnce, _) => ("no identifiers kept", " and before its PUBACK"),
        (QoS::ExactlyOnce, true) => ("the identifiers in RAM", " and before its PUBREC"),
        (QoS::ExactlyOnce, false) => ("the identifiers in flash", " and before its PUBREC"),
    };
    let flight = match in_flight(r.qos) {
        Some(n) => format!("{n} in flight"),
        None => "all 30 written at once (QoS 0 has no in-flight limit)".into(),
    };
    writeln!(
        out,
        "mqtt: 30 payments p0..p29 ({truth} in all) at QoS {} to the {} store\n{flight}; {kept}\nthe device resets once, after p{RESET_AFTER}'s record{ack}",
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
    if !report.twice.is_empty() {
        writeln!(out, "  applied twice: {}", report.twice.join(", "))?;
    }
    if !report.lost.is_empty() {
        writeln!(out, "  never applied: {}", report.lost.join(", "))?;
    }
    Ok(())
}
