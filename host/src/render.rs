//! Turning core reports and traces into text for people and JSON for machines.

use idem_core::check::Verdict;
use idem_core::log::Offset;
use idem_core::sim::{Action, FlashUse, TraceStep};
use serde_json::{Value, json};

use crate::select::{Loaded, Outcome, StoreKind};

/// Offsets as inclusive runs: `40..49`, `0..1, 5`, or `none`.
pub fn ranges(offsets: &[Offset]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < offsets.len() {
        let start = offsets[i];
        let mut end = start;
        while i + 1 < offsets.len() && offsets[i + 1] == end + 1 {
            i += 1;
            end = offsets[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}..{end}")
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// A durable position (next offset to read) as the last offset it covers.
pub fn covered(next: Option<Offset>) -> Option<Offset> {
    next.and_then(|n| n.checked_sub(1))
}

/// The action's name in traces: `deliver`, `redeliver`, `apply`, `skip`, `commit`,
/// `recover`, or the crash point (`crash@effect:49`).
pub fn action_name(action: Action) -> String {
    match action {
        Action::Deliver { redelivery: false } => "deliver".into(),
        Action::Deliver { redelivery: true } => "redeliver".into(),
        Action::Apply => "apply".into(),
        Action::Skip => "skip".into(),
        Action::Prepare => "prepare".into(),
        Action::Commit => "commit".into(),
        Action::Crash(p) => p.to_string(),
        Action::Recover => "recover".into(),
    }
}

/// One trace step as a text line: step, offset, action, total, committed.
pub fn trace_line(t: &TraceStep) -> String {
    let offset = t.offset.map_or("-".into(), |o| o.to_string());
    let committed = covered(t.committed).map_or("none".into(), |o| o.to_string());
    let marker = match t.action {
        Action::Crash(_) => "  *** CRASH: RAM lost, flash kept ***".to_string(),
        Action::Recover => format!(
            "  recovered from flash, resume at {}",
            t.committed.unwrap_or(0)
        ),
        _ => String::new(),
    };
    format!(
        "{:>6}  {:>7}  {:<18} {:>7}  {:>9}{marker}",
        t.index,
        offset,
        action_name(t.action),
        t.total,
        committed
    )
}

/// The header of [`trace_line`]'s columns.
pub const TRACE_HEADER: &str = "  step   offset  action               total  committed";

/// One trace step as JSON.
pub fn trace_json(t: &TraceStep) -> Value {
    json!({
        "step": t.index,
        "offset": t.offset,
        "action": action_name(t.action),
        "total": t.total,
        "committed": covered(t.committed),
    })
}

/// Flash use as JSON.
pub fn flash_json(f: &FlashUse) -> Value {
    json!({ "writes": f.writes, "erases": f.erases, "bytes_written": f.bytes_written })
}

/// The verdict with its difference: `exact`, `over by 10`, `under by 4`.
pub fn verdict_text(v: Verdict) -> String {
    match v {
        Verdict::Exact => "exact".into(),
        Verdict::Over(d) => format!("over by {d}"),
        Verdict::Under(d) => format!("under by {d}"),
    }
}

/// The JSON object of `idem run --json`.
pub fn run_json(loaded: &Loaded, store: StoreKind, o: &Outcome) -> Value {
    let r = &o.report;
    let mut v = json!({
        "scenario": loaded.name(),
        "store": store.name(),
        "events": loaded.events(),
        "checkpoint_every": loaded.consumer().checkpoint_every,
        "crashes": loaded.crashes().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "true_total": r.true_total,
        "final_total": r.final_total,
        "verdict": Verdict::of(r.final_total, r.true_total).name(),
        "committed_at_crash": r.committed_at_crash,
        "redelivered": o.redelivered,
        "skipped": o.skipped,
        "lost": o.lost,
        "guarantee": match loaded.consumer().guarantee {
            idem_core::consumer::Guarantee::AtLeastOnce => "at-least-once",
            idem_core::consumer::Guarantee::AtMostOnce => "at-most-once",
        },
        "evicted": r.evicted,
        "anomalies": {
            "duplicate": r.anomalies.duplicate,
            "lost-write": r.anomalies.lost_write,
            "nonmonotonic": r.anomalies.nonmonotonic,
        },
        "delivered": r.delivered,
        "applied": r.applied,
        "flash": flash_json(&r.flash),
    });
    if let Some(trace) = &o.trace {
        v["trace"] = trace.iter().map(trace_json).collect();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compress_consecutive_offsets() {
        assert_eq!(ranges(&[40, 41, 42, 43, 44, 45, 46, 47, 48, 49]), "40..49");
        assert_eq!(ranges(&[0, 1, 5, 7, 8]), "0..1, 5, 7..8");
        assert_eq!(ranges(&[]), "none");
    }
}
