//! A consume's report, and the truth it is graded against: what `idem mqtt publish`
//! (or any publisher) sent, one JSON payment a line, each id counted once at its first
//! amount.

use std::io::Write;

use serde_json::json;

use idem_mqtt::client::Broken;

use super::{Asked, Tally};
use idem_host::truth::{FirstAmounts, IdCounts, TruthFile};

/// Each way the promise did not hold (`idem_mqtt::client::Broken`), in words.
fn broken(a: &Asked<'_>, t: &Tally) -> Vec<String> {
    let q = a.qos;
    t.f.broken
        .iter()
        .map(|b| match *b {
            Broken::SessionLost { identifiers: 0 } => "the broker answered session present 0 for a session this image had begun: it lost the session, and what it had queued for it".into(),
            Broken::SessionLost { identifiers } => format!(
                "the broker answered session present 0 while the image held {identifiers} QoS 2 identifiers: it lost the session"
            ),
            Broken::ForeignTopics(n) => format!(
                "{n} messages came on topics outside {} (the broker's session for this client id held another subscription): acknowledged and rejected",
                a.topic
            ),
            Broken::Downgraded { granted } => format!(
                "the broker granted QoS {} for a subscription at QoS {q}",
                granted.level()
            ),
            Broken::AtQos0(n) => format!(
                "{n} messages arrived at QoS 0 (as their publisher sent them), below --qos {q}: a kill loses any the broker had sent"
            ),
            Broken::AtQos1(n) => format!(
                "{n} messages arrived at QoS 1 (as their publisher sent them), below --qos {q}: the naive store applies a resent one again"
            ),
            Broken::IdentifiersInRam => "the identifiers were in RAM (--session ram) and this run resumed a stopped one: a message applied before the stop and resent after it is applied again".into(),
            Broken::Qos1WithoutDedup => "QoS 1 is at least once: the naive store applies a resent message again (the message-id store skips it)".into(),
        })
        .collect()
}

/// Each way the broker broke the rules of packet identifiers, counted, in words: the
/// receiver took each such PUBLISH for a resend of the message it holds and did not
/// apply it, so the ids grade the run (a message lost so is missing).
fn violations(t: &Tally) -> Vec<String> {
    let mut v = Vec::new();
    if t.f.held_identifier_reused > 0 {
        v.push(format!(
            "the broker sent {} PUBLISHes with DUP 0 under a QoS 2 packet identifier the receiver still held (a new message under an identifier not freed: a sender reuses one only after its PUBCOMP, MQTT 3.1.1 §2.3.1, and marks a resend DUP 1, §3.3.1.1); each was taken for a resend and not applied",
            t.f.held_identifier_reused
        ));
    }
    if t.f.publish_after_pubrel > 0 {
        v.push(format!(
            "the broker sent {} PUBLISHes under a packet identifier whose PUBREL it had already sent, the same message again (a sender never sends a PUBLISH again once it has sent its PUBREL, MQTT 3.1.1 §4.3.3); each was taken for a resend and not applied",
            t.f.publish_after_pubrel
        ));
    }
    v
}

/// A truth to grade against, and its ids where the run's applied ids are compared.
pub type Truth<'a> = (&'a TruthFile, Option<&'a FirstAmounts>);

/// The ids compared, where both sides have them; a doubt where the image's log lacks
/// some.
fn compare(t: &Tally, truth: Truth<'_>, broken: &mut Vec<String>) -> Option<IdCounts> {
    match (&t.ids, truth.1) {
        (Some(Ok(applied)), Some(ids)) => Some(IdCounts::of(ids, applied)),
        (Some(Err(lacking)), Some(_)) => {
            broken.push(format!(
                "the image's log of applied ids lacks {lacking} of the {} the image applied (a power cut inside a sync can keep records without their lines): graded on totals only",
                t.f.applied
            ));
            None
        }
        _ => None,
    }
}

/// The verdict: the ids' where they differ, else the totals'.
fn verdict(t: &Tally, tr: &TruthFile, ids: Option<&IdCounts>, broken: &[String]) -> &'static str {
    IdCounts::grade(ids, t.f.total, tr.total, !broken.is_empty())
}

/// The report as one JSON object.
fn json_report(
    a: &Asked<'_>,
    t: &Tally,
    broken: &[String],
    graded: Option<(&TruthFile, &str, u64)>,
    ids: Option<&IdCounts>,
) -> serde_json::Value {
    let records_per_message = (t.f.decided > 0).then(|| t.f.records as f64 / t.f.decided as f64);
    let mut v = json!({
        "store": a.store,
        "qos": a.qos,
        "session": if a.session_ram { "ram" } else { "flash" },
        "final_total": t.f.total,
        "applied": t.f.applied,
        "duplicates_skipped": t.f.skipped,
        "held_again": t.f.held_again,
        "rejected": t.f.rejected,
        "redeliveries": t.f.redeliveries,
        "retained": t.f.retained,
        "session_present": t.f.session_present,
        "lost_identifiers": t.f.lost_identifiers,
        "new_sessions": t.f.new_sessions,
        "granted": t.f.granted,
        "received_at_qos": t.f.received_at,
        "foreign_topic": t.f.foreign,
        "resumed": t.f.resumed,
        "records": t.f.records,
        "messages": t.f.decided,
        "records_per_message": records_per_message,
        "syncs": t.syncs,
        "unanswered": t.f.unanswered,
        "resend_reconnects": t.f.resend_reconnects,
        "held_identifier_reused": t.f.held_identifier_reused,
        "publish_after_pubrel": t.f.publish_after_pubrel,
        "broker_violations": violations(t),
        "promise_broken": broken,
    });
    for (k, x) in &a.extra {
        v[*k] = x.clone();
    }
    if let Some((tr, verdict, dups)) = graded {
        v["true_total"] = json!(tr.total);
        v["true_ids"] = json!(tr.ids);
        v["duplicates_applied"] = json!(dups);
        v["verdict"] = json!(verdict);
        v["ids"] = ids.map_or(json!(null), IdCounts::json);
    }
    v
}

/// The text report's first lines: the store, the QoS and the counts.
fn text_head(out: &mut impl Write, a: &Asked<'_>, t: &Tally) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} store, QoS {}, session in {}: total {} ({} applied, {} skipped as duplicates, {} rejected)",
        a.command,
        a.store,
        a.qos,
        if a.session_ram { "RAM" } else { "flash" },
        t.f.total,
        t.f.applied,
        t.f.skipped,
        t.f.rejected
    )?;
    writeln!(
        out,
        "  {}: {} messages, {} records, {} resent by the broker (DUP 1), {} held and not applied again, {} retained and not applied; session present {}",
        a.counts,
        t.f.decided,
        t.f.records,
        t.f.redeliveries,
        t.f.held_again,
        t.f.retained,
        u8::from(t.f.session_present)
    )?;
    if t.f.unanswered > 0 {
        writeln!(
            out,
            "  {} left unanswered with every place taken, sent again by the broker after {} reconnections",
            t.f.unanswered, t.f.resend_reconnects
        )?;
    }
    Ok(())
}

/// Prints the report, as text or JSON.
pub fn print(a: &Asked<'_>, t: &Tally, truth: Option<Truth<'_>>) -> anyhow::Result<()> {
    let mut broken = broken(a, t);
    broken.extend(t.earlier.iter().cloned());
    broken.extend(a.doubts.iter().cloned());
    if truth.is_some_and(|(tr, _)| tr.unconfirmed) {
        broken.push("the truth was published at QoS 0: its lines were written as sent, and nothing confirms the broker took them".into());
    }
    let ids = truth.and_then(|tr| compare(t, tr, &mut broken));
    let graded = truth.map(|(tr, _)| {
        let verdict = verdict(t, tr, ids.as_ref(), &broken);
        let dups = match &ids {
            Some(c) => c.twice.0,
            None => u64::from(t.f.applied).saturating_sub(tr.ids),
        };
        (tr, verdict, dups)
    });
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json_report(a, t, &broken, graded, ids.as_ref());
        writeln!(out, "{v}")?;
        return Ok(());
    }
    text_head(&mut out, a, t)?;
    for line in &a.lines {
        writeln!(out, "  {line}")?;
    }
    if let Some((tr, verdict, dups)) = graded {
        writeln!(
            out,
            "  true total {} ({} ids): {verdict}, {dups} duplicates applied",
            tr.total, tr.ids
        )?;
        if let Some(c) = ids.as_ref().filter(|c| !c.exact()) {
            writeln!(out, "  ids against the truth: {}", c.words())?;
        }
    }
    for v in violations(t) {
        writeln!(out, "  broker violation: {v}")?;
    }
    for b in &broken {
        writeln!(out, "  promise broken: {b}")?;
    }
    Ok(())
}
