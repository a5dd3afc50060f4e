//! What `kafka consume` prints: a line per partition and the verdict, or one JSON object.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use super::client::ISOLATION_LEVEL;
use super::partition::SharedOut;
use idem_host::kafka::group::TakeAction;
use idem_host::kafka::trust::Skipped;
use idem_host::kafka::verdict::{self, UNVERIFIED, verdict};
use idem_host::truth::{FirstAmounts, IdCounts, TruthFile};
use idem_lab::error::usage;
use idem_lab::render::count;
use idem_lab::select::StoreKind;

/// What a consume is graded against: a truth file (`--truth`) and its ids, or each
/// partition's read of its own.
#[derive(Debug, Clone, Copy)]
pub(super) struct Graded<'a>(Option<(&'a TruthFile, &'a Path)>, Option<&'a FirstAmounts>);

/// The ids applied against a truth file's.
enum Ids {
    /// Graded by a read of the topic: no ids compared.
    Read,
    /// Compared.
    Compared(IdCounts),
    /// The log of ids beside the image lacks the ids of this many of its records.
    Lacking(u64),
}

impl<'a> Graded<'a> {
    /// Against `file` and its ids (read from `path`) when there is one.
    pub(super) fn new(file: Option<&'a (TruthFile, FirstAmounts)>, path: Option<&'a Path>) -> Self {
        Self(file.map(|(f, _)| f).zip(path), file.map(|(_, ids)| ids))
    }

    /// The ids `applied` (in order), or the records whose ids the log lacks, against
    /// the truth's.
    fn compare(self, applied: Option<&Result<Vec<Option<String>>, u64>>) -> Ids {
        match (self.1, applied) {
            (Some(truth), Some(Ok(applied))) => Ids::Compared(IdCounts::of(truth, applied)),
            (Some(_), Some(Err(n))) => Ids::Lacking(*n),
            _ => Ids::Read,
        }
    }

    /// What the true total counts, in words.
    fn counts(self) -> String {
        match self.0 {
            Some((f, path)) => format!(
                "of the {} in {}",
                count(f.ids, "distinct id"),
                path.display()
            ),
            None => "of the distinct message ids read".into(),
        }
    }

    fn json(self) -> serde_json::Value {
        match self.0 {
            Some((f, path)) => json!({
                "file": path.display().to_string(), "ids": f.ids, "sent": f.sent,
            }),
            None => json!("read"),
        }
    }
}

/// Prints what `kafka consume` ended with; exit 1 when the broker's end offsets cannot be
/// trusted.
pub(super) fn report(
    out: &mut impl Write,
    topic: &str,
    store: StoreKind,
    consumed: &SharedOut,
    graded: Graded<'_>,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let results = &consumed.results;
    let past_64_bits = || {
        usage(format!(
            "{topic}: the partitions' totals add up past a 64-bit total"
        ))
    };
    let total = verdict::sum(results.iter().map(|r| r.total)).ok_or_else(past_64_bits)?;
    let truth = match graded.0 {
        Some((file, _)) => file.total,
        None => verdict::sum(results.iter().map(|r| r.true_total.unwrap_or(0)))
            .ok_or_else(past_64_bits)?,
    };
    let ids = graded.compare(consumed.applied.as_ref());
    let verdict = match &ids {
        _ if results.iter().any(|r| r.read.short_read()) => UNVERIFIED,
        Ids::Read => verdict(std::iter::empty(), total, truth),
        Ids::Compared(c) => IdCounts::grade(Some(c), total, truth, false),
        Ids::Lacking(_) => IdCounts::grade(None, total, truth, true),
    };
    let skipped: Vec<&Skipped> = results.iter().flat_map(|r| &r.read.skipped).collect();
    if json_out {
        let syncs = idem_host::image::FileFlash::process_syncs();
        let v = json!({
            "topic": topic,
            "store": store.name(),
            "isolation_level": ISOLATION_LEVEL,
            "total": total,
            "true_total": truth,
            "truth": graded.json(),
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
            "ids": match &ids {
                Ids::Compared(c) => c.json(),
                _ => json!(null),
            },
            "ids_lacking": match ids {
                Ids::Lacking(n) => json!(n),
                _ => json!(null),
            },
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
            (total, truth, verdict, graded, &ids),
        )?;
    }
    Ok(if verdict == UNVERIFIED {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// What the ids say, as text: how they differ from the truth's, or why they were not
/// compared.
fn ids_text(out: &mut impl Write, ids: &Ids) -> anyhow::Result<()> {
    match ids {
        Ids::Compared(c) if !c.exact() => writeln!(out, "ids against the truth: {}", c.words())?,
        Ids::Lacking(n) => writeln!(
            out,
            "the log of applied ids beside the image lacks the ids of {} (an image consumed without --truth, or the log removed): graded on totals only",
            count(*n, "store record")
        )?,
        _ => {}
    }
    Ok(())
}

/// The partitions a group's member took (and how) and lost, as text.
fn rebalances(out: &mut impl Write, consumed: &SharedOut) -> anyhow::Result<()> {
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
    Ok(())
}

/// The report as text; `figures`: the total, the true total, the verdict and what the true
/// total counts.
fn text(
    out: &mut impl Write,
    topic: &str,
    store: StoreKind,
    consumed: &SharedOut,
    skipped: &[&Skipped],
    (total, truth, verdict, graded, ids): (i64, i64, &str, Graded<'_>, &Ids),
) -> anyhow::Result<()> {
    rebalances(out, consumed)?;
    for r in &consumed.results {
        let p = r.partition;
        writeln!(
            out,
            "partition {p}: {} read, the broker's end offset {}, next offset {}, total {}{}",
            count(r.read.records_read, "record"),
            r.read.end_offset,
            r.next_offset,
            r.total,
            r.true_total
                .map(|t| format!(" (true total {t})"))
                .unwrap_or_default()
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
        "{topic} with the {} store: total {total}, true total {truth} {}{excluded}: {verdict}",
        store.name(),
        graded.counts()
    )?;
    ids_text(out, ids)?;
    writeln!(
        out,
        "(read with isolation.level={ISOLATION_LEVEL}, librdkafka's default; the Java client and kafka-python default to read_uncommitted)"
    )?;
    Ok(())
}
