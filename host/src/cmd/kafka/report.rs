//! What `kafka consume` prints: a line per partition and the verdict, or one JSON object.

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use super::client::ISOLATION_LEVEL;
use super::consume::PartitionResult;
use super::shared::SharedOut;
use crate::error::usage;
use crate::kafka::group::TakeAction;
use crate::kafka::trust::Skipped;
use crate::kafka::verdict::{self, UNVERIFIED, verdict};
use crate::render::count;
use crate::select::StoreKind;

/// Prints what `kafka consume` ended with; exit 1 when the broker's end offsets cannot be
/// trusted.
pub(super) fn report(
    out: &mut impl Write,
    topic: &str,
    store: StoreKind,
    consumed: &SharedOut,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let results = &consumed.results;
    let sum = |f: fn(&PartitionResult) -> i64| {
        verdict::sum(results.iter().map(f)).ok_or_else(|| {
            usage(format!(
                "{topic}: the partitions' totals add up past a 64-bit total"
            ))
        })
    };
    let (total, truth) = (sum(|r| r.total)?, sum(|r| r.true_total)?);
    let verdict = verdict(results.iter().map(|r| r.read.short_read()), total, truth);
    let skipped: Vec<&Skipped> = results.iter().flat_map(|r| &r.read.skipped).collect();
    if json_out {
        let syncs = crate::image::FileFlash::process_syncs();
        let v = json!({
            "topic": topic,
            "store": store.name(),
            "isolation_level": ISOLATION_LEVEL,
            "total": total,
            "true_total": truth,
            "verdict": verdict,
            "next_offsets": results.iter().map(|r| r.next_offset).collect::<Vec<_>>(),
            "partitions": results.iter().map(|r| json!({
                "partition": r.partition,
                "records_read": r.read.records_read,
                "end_offset": r.read.end_offset,
                "short_read": r.read.short_read(),
                "next_offset": r.next_offset,
                "total": r.total,
                "true_total": r.true_total,
                "group_offset_was": r.group_was,
            })).collect::<Vec<_>>(),
            "skipped_records": skipped,
            "taken": consumed.taken,
            "released": consumed.released,
            "syncs": syncs.count,
            "sync_median_us": syncs.median_us,
        });
        writeln!(out, "{v}")?;
    } else {
        text(
            out,
            topic,
            store,
            consumed,
            &skipped,
            (total, truth, verdict),
        )?;
    }
    Ok(if verdict == UNVERIFIED {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The report as text; `figures`: the total, the true total and the verdict.
fn text(
    out: &mut impl Write,
    topic: &str,
    store: StoreKind,
    consumed: &SharedOut,
    skipped: &[&Skipped],
    (total, truth, verdict): (i64, i64, &str),
) -> anyhow::Result<()> {
    for t in &consumed.taken {
        writeln!(
            out,
            "took partition {}: the group's offset {}, this image's {}: {}",
            t.partition,
            t.group_offset,
            t.image_offset,
            match t.action {
                TakeAction::Kept => "kept the image's state",
                TakeAction::Rebuilt =>
                    "erased it and folded the partition again up to the group's offset",
            }
        )?;
    }
    for p in &consumed.released {
        writeln!(out, "lost partition {p} to a rebalance")?;
    }
    for r in &consumed.results {
        let p = r.partition;
        writeln!(
            out,
            "partition {p}: {} read, the broker's end offset {}, next offset {}, total {} (true total {})",
            count(r.read.records_read, "record"),
            r.read.end_offset,
            r.next_offset,
            r.total,
            r.true_total
        )?;
        if r.read.short_read() {
            writeln!(
                out,
                "  warning: records were fetched up to offset {}, past the broker's end offset {}: the broker's own count is short",
                r.read.highest.unwrap_or_default(),
                r.read.end_offset
            )?;
        }
        if let Some(n) = r.group_was {
            writeln!(
                out,
                "  note: the group's committed offset was {n}; the flash image's position is the truth, and the group now has a copy of it"
            )?;
        }
    }
    for s in skipped {
        writeln!(
            out,
            "skipped partition {} offset {}: {}",
            s.partition, s.offset, s.why
        )?;
    }
    let excluded = if skipped.is_empty() {
        String::new()
    } else {
        format!(
            ", excluding {}",
            count(skipped.len() as u64, "skipped record")
        )
    };
    writeln!(
        out,
        "{topic} with the {} store: total {total}, true total {truth} of the distinct message ids read{excluded}: {verdict}",
        store.name()
    )?;
    writeln!(
        out,
        "(read with isolation.level={ISOLATION_LEVEL}, librdkafka's default; the Java client and kafka-python default to read_uncommitted)"
    )?;
    Ok(())
}
