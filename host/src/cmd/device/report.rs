//! What a feed reports: the board's total against the truth, as text or JSON.

use std::io::Write;
use std::process::ExitCode;

use idem_core::log::Offset;
use idem_sim::check::Verdict;
use serde_json::json;

use super::{Seen, Stream, StreamArgs};
use idem_lab::render;

/// What the board's done frame gives: its boots, final total and durable position, and
/// the offsets `0..n` this host did not deliver, if any.
type Done = (u32, i64, Offset, Option<Offset>);

/// Prints the feed's report (text, or JSON with `--json`); `resets`, the resets done
/// through QMP, if any. Fails (exit 1) when the total cannot be graded.
pub(super) fn report(
    stream: &Stream,
    args: &StreamArgs,
    seen: &Seen,
    resets: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let Some(done) = seen.done else {
        anyhow::bail!("the board never reported done");
    };
    let undelivered = done.3;
    let mut out = std::io::stdout().lock();
    if args.json {
        let v = json_report(stream, args, seen, done, resets);
        writeln!(out, "{v}")?;
    } else {
        text_report(&mut out, stream, seen, done, resets)?;
    }
    out.flush()?;
    if let Some(n) = undelivered {
        eprintln!("idem: {}", undelivered_text(n));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The report of `--json`.
fn json_report(
    stream: &Stream,
    args: &StreamArgs,
    seen: &Seen,
    (boots, total, durable, undelivered): Done,
    resets: Option<u32>,
) -> serde_json::Value {
    // Graded only when this host delivered every offset the board applied.
    let verdict_name = if undelivered.is_some() {
        "unverified"
    } else {
        Verdict::of(total, stream.true_total).name()
    };
    let mut v = json!({
        "scenario": stream.name,
        "store": stream.config.store.name(),
        "events": stream.events.len(),
        "checkpoint_every": stream.config.checkpoint_every,
        "crash_after": stream.config.crash_after,
        "true_total": stream.true_total,
        "final_total": total,
        "verdict": verdict_name,
        "durable": durable,
        "boots": boots,
        "resumes": seen.resumes,
        "batches": seen.batches,
        "resends": seen.resends,
        "garbled": seen.garbled,
        "out_of_order": seen.out_of_order,
        "stack_bytes": seen.stack_bytes,
        "hellos": seen.hellos,
    });
    if let Some(n) = resets {
        v["resets"] = n.into();
    }
    if args.garble.is_some() {
        v["damaged_on_purpose"] = seen.injected.into();
    }
    if let Some(n) = undelivered {
        v["undelivered"] = json!({ "first": 0, "last": n - 1 });
    }
    #[cfg(feature = "kafka")]
    if let Some(b) = &stream.bridge {
        v["group_commits"] = seen.group_commits.clone().into();
        v["group_offset_was"] = b.group_was.into();
    }
    v
}

/// The report as text.
fn text_report(
    out: &mut impl Write,
    stream: &Stream,
    seen: &Seen,
    (boots, total, _, undelivered): Done,
    resets: Option<u32>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "board: {} with the {} store, {}, checkpoint every {}{}",
        stream.name,
        stream.config.store.name(),
        render::count(stream.events.len() as u64, "event"),
        stream.config.checkpoint_every,
        stream
            .config
            .crash_after
            .map_or(String::new(), |o| format!(", a reset after offset {o}"))
    )?;
    writeln!(
        out,
        "  final total        {total} ({})",
        if undelivered.is_some() {
            "unverified".to_string()
        } else {
            Verdict::of(total, stream.true_total).to_string()
        }
    )?;
    writeln!(out, "  true total         {}", stream.true_total)?;
    let resumes: Vec<String> = seen.resumes.iter().map(ToString::to_string).collect();
    writeln!(
        out,
        "  boots              {boots}; resumed at {} (each from its own flash)",
        resumes.join(", ")
    )?;
    if let Some(n) = resets {
        writeln!(out, "  resets through QMP {n}")?;
    }
    writeln!(
        out,
        "  batches sent       {} ({} again, when the board asked again)",
        seen.batches, seen.resends
    )?;
    writeln!(
        out,
        "  dropped by board   {} garbled frames, {} out-of-order batches",
        seen.garbled, seen.out_of_order
    )?;
    if seen.stack_bytes > 1 {
        writeln!(out, "  stack high-water   {} bytes", seen.stack_bytes)?;
    }
    #[cfg(feature = "kafka")]
    if let Some(b) = &stream.bridge {
        writeln!(
            out,
            "  kafka group        committed {} after the board's checkpoints (it was {})",
            seen.group_commits
                .last()
                .map_or("nothing".into(), ToString::to_string),
            b.group_was.map_or("unset".into(), |o| o.to_string())
        )?;
    }
    Ok(())
}

/// Why a done frame is not graded: offsets `0..n` came to the board before this host.
fn undelivered_text(n: Offset) -> String {
    let which = if n == 1 {
        "offset 0".to_string()
    } else {
        format!("offsets 0..{}", n - 1)
    };
    format!(
        "unverified: this host did not deliver {which} (the board held them before this host first heard from it: a restarted host or bridge), so its total is not graded"
    )
}
