//! Turning core reports and traces into text for people and JSON for machines.

use idem_core::consumer::covers_through;
use idem_core::log::Offset;
use idem_core::persist::Resolution;
use idem_sim::check::Verdict;
use idem_sim::producer::{BatchHeader, REMEMBERED_BATCHES};
use idem_sim::run::{Action, Report, TraceStep};
use idem_sim::scenario::{Landed, ProducerStep, SendKind};

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

/// `n` things, with the plural when `n` is not 1: `1 event`, `3 events`.
pub fn count(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// Offsets for people, named as offsets and counted: `none`, `offset 1 (1 event)`,
/// `offsets 40..49 (10 events)`.
pub fn offsets_text(offsets: &[Offset]) -> String {
    match offsets {
        [] => "none".into(),
        [o] => format!("offset {o} (1 event)"),
        _ => format!(
            "offsets {} ({})",
            ranges(offsets),
            count(offsets.len() as u64, "event")
        ),
    }
}

/// What recovery did with a prepared two-phase record, for people.
pub fn resolution_text(res: Resolution) -> String {
    match res {
        Resolution::RolledForward { next } => {
            format!("prepared record found, position committed: rolled forward, resumes at {next}")
        }
        Resolution::RolledBack { next } => {
            format!("prepared record found, position not committed: rolled back, resumes at {next}")
        }
    }
}

/// A durable position for people: "covers through 39, resumes at 40", or "nothing
/// covered, resumes at 0".
pub fn position_text(resume_at: Offset) -> String {
    match covers_through(resume_at) {
        Some(c) => format!("covers through {c}, resumes at {resume_at}"),
        None => format!("nothing covered, resumes at {resume_at}"),
    }
}

/// The action's name in traces: `deliver`, `redeliver`, `apply`, `skip`, `pass
/// (aborted)`, `commit`, `recover`, or the crash point (`crash@effect:49`).
pub fn action_name(action: Action) -> String {
    match action {
        Action::Deliver { redelivery: false } => "deliver".into(),
        Action::Deliver { redelivery: true } => "redeliver".into(),
        Action::Between => "between".into(),
        Action::Apply => "apply".into(),
        Action::Skip => "skip".into(),
        Action::Pass => "pass (aborted)".into(),
        Action::Prepare => "prepare".into(),
        Action::Commit => "commit".into(),
        Action::Crash(p) => p.to_string(),
        Action::Recover => "recover".into(),
    }
}

/// One trace step as a text line: step, offset, action, total, and where a restart
/// would resume.
pub fn trace_line(t: &TraceStep, producer: &[ProducerStep]) -> String {
    let offset = t.offset.map_or("-".into(), |o| o.to_string());
    let marker = match t.action {
        Action::Crash(_) => "  *** CRASH: RAM lost, flash kept ***".to_string(),
        Action::Recover => format!("  recovered from flash: {}", position_text(t.resume_at)),
        _ => String::new(),
    };
    let message = t
        .offset
        .and_then(|o| message_name(producer, o))
        .unwrap_or_default();
    format!(
        "{:>6}  {:>7}  {message:<7}  {:<18} {:>7}  {:>9}{marker}",
        t.index,
        offset,
        action_name(t.action),
        t.total,
        t.resume_at
    )
}

/// The header of [`trace_line`]'s columns.
pub const TRACE_HEADER: &str = "  step   offset  message  action               total  resume at";

/// The name of the message that landed at `offset`, from the producer side.
pub fn message_name(producer: &[ProducerStep], offset: Offset) -> Option<String> {
    producer
        .iter()
        .find(|p| p.landed == Landed::At(offset))
        .map(|p| p.name.to_string())
}

/// Who writes each number on an event, for the head of a producer trace.
pub const WHO_WRITES: &str =
    "  The broker writes the offset. The producer library writes a batch header (producer
  id, epoch, sequence), only with idempotence or transactions on, for the broker: no
  application reads it. The application writes the message id and its own numbering (instance,
  epoch, seq) in the payload, where a consumer can read them.";

/// Under a producer trace with transactions: where idem's offsets differ from Kafka's.
pub const NO_MARKERS: &str =
    "  (Kafka also writes a commit or abort marker at an offset of its own after each
  transaction, which no application receives; idem keeps each record's transaction state
  beside it, so these offsets have no gaps.)";

/// The batch header the producer library wrote, in words.
pub fn header_text(h: Option<BatchHeader>) -> String {
    match h {
        None => "batch: no producer id (Kafka stores -1)".into(),
        Some(h) => format!(
            "batch: producer id {} epoch {} sequence {}",
            h.producer_id, h.epoch, h.sequence
        ),
    }
}

/// One send of the producer side for people, on two lines: what was sent and what the
/// broker did (`send p17 (5) -> offset 0`, `ack lost; retry p17 -> already at offset 0:
/// ...`), then, indented, the numbers the application and the producer library put on
/// it.
pub fn producer_line(p: &ProducerStep) -> String {
    let m = &p.message;
    let what = match p.kind {
        SendKind::Send => format!("send {} ({})", p.name, m.amount),
        SendKind::Retry => format!("ack lost; retry {}", p.name),
        SendKind::Resend => format!("send {} ({}) again, a new send call", p.name, m.amount),
        SendKind::Stalled => format!("the stalled send of {} ({}) arrives late", p.name, m.amount),
        SendKind::Lost => format!("send {} ({})", p.name, m.amount),
        SendKind::Uncommitted => format!(
            "send {} ({}), then stall before the commit",
            p.name, m.amount
        ),
        SendKind::LateCommit => format!("the stalled commit of {} arrives late", p.name),
    };
    let who = match (p.kind, p.header) {
        (SendKind::LateCommit, Some(h)) => format!(
            "the commit (EndTxn) is from producer id {} epoch {}",
            h.producer_id, h.epoch
        ),
        _ => format!(
            "payload: instance {} epoch {} seq {}; {}",
            m.producer,
            m.epoch,
            m.seq,
            header_text(p.header)
        ),
    };
    let id = p.header.map_or(0, |h| h.producer_id);
    let outcome = match p.landed {
        Landed::At(o) if p.kind == SendKind::Uncommitted => format!(
            "-> offset {o}, in an open transaction\n      a read_committed consumer reads only the offsets before {} (the last stable\n      offset) until that transaction commits or aborts",
            p.stable_end
        ),
        Landed::At(o) if p.transactional => format!("-> offset {o}, committed"),
        Landed::At(o) => format!("-> offset {o}"),
        Landed::Committed => "-> committed".to_string(),
        Landed::Already(o) => format!(
            "-> already at offset {o}: answered with success and that offset, nothing appended"
        ),
        Landed::OlderDuplicate => format!(
            "-> not appended: older than the {REMEMBERED_BATCHES} batches the broker remembers for producer id {id}, it fails the sequence check (OUT_OF_ORDER_SEQUENCE_NUMBER)"
        ),
        Landed::Fenced { current } => {
            format!("-> fenced: rejected, producer id {id} is at epoch {current} now")
        }
        Landed::Never => "-> lost before the log; this producer never retries".to_string(),
    };
    let aborted = p.aborted.map_or(String::new(), |o| {
        format!(
            "\n      before it, this instance's start (initTransactions) bumped the epoch and aborted\n      the open transaction of producer id {id} at offset {o}"
        )
    });
    format!("{what} {outcome}\n      {who}{aborted}")
}

/// The verdict of a run: `diverged` when its two views disagree at the end, else the
/// total's.
pub fn verdict_name(r: &Report) -> &'static str {
    match r.views {
        Some((total, index)) if total != index => "diverged",
        _ => Verdict::of(r.final_total, r.true_total).name(),
    }
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
