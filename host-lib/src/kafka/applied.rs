//! The ids a `kafka consume --truth` image applied, in a log beside it (`IMAGE.ids`),
//! reconciled with the image's store records at each open, so that the grade compares
//! the set of ids in the image's total with the truth's, and a kill anywhere never
//! changes it.
//!
//! Each store writes its records at its own point: the naive, offset and message-id
//! stores one record for each applied (or rejected) event, the atomic store one at each
//! checkpoint for every event since the last. So each line names the record that will
//! hold its event by its rank among the records this run appends to the partition's
//! store journal (`k`: 1, 2, ...), and is written before the step that writes that
//! record:
//!
//! - `{"run":{"base":[12,0]}}`: a run began; each partition's newest store record then
//!   (its sequence number);
//! - `{"intent":{"p":0,"k":3,"o":41,"id":{"key":"p17"}}}`: the event at offset 41 was
//!   delivered, to be in the run's 3rd record (`"keyless"`: a payment without a key;
//!   `"gap"`: an offset with no payment, which is not graded);
//! - `{"undo":{"p":0,"k":3,"o":41}}`: that event was not applied (a duplicate skipped,
//!   or rejected): whatever record `k` is, it does not hold it;
//! - `{"first":{"p":0,"seq":14}}`: the run's first record of the partition is numbered
//!   14 (a record cut short before a kill makes the journal step over its slot, so the
//!   numbers need not follow the base);
//! - `{"kept":{"p":0,"id":"p17"}}` (`null`: keyless): an applied id settled at an
//!   earlier open; `{"lacking":5}`: records the log has no lines for.
//!
//! At open, with each partition's newest record `S`, the run's records in the image
//! are `S - first + 1` (without a `first` line, one if `S` passed the base): the
//! intents of those records, not undone, are kept, the rest dropped, and the file is
//! written again (kept ids, then a new `run` line) under a temporary name and renamed.
//! A record no line names (a log removed, an image from before it) counts as lacking,
//! and a lacking log grades on totals only, at best unproven.
//!
//! It lives here, beside the image, not in the engine's records: a store's record is
//! one fixed-size flash record (a board's too), and a run's set of ids grows with it.
//! The engine already hands the drive what the log needs: each step as it returns,
//! the count of records appended (`Consumer::records_written`), and each journal's
//! newest record's number.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// What a delivered event carries as its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Id {
    /// A record's key, its message id.
    Key(String),
    /// A payment without a key.
    Keyless,
    /// An offset with no payment (a marker, a record stepped over): never graded.
    Gap,
}

impl Id {
    /// The id of a payment keyed `key` (or keyless).
    pub fn of(key: Option<&[u8]>) -> Self {
        key.map_or(Self::Keyless, |k| {
            Self::Key(String::from_utf8_lossy(k).into_owned())
        })
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Kept { p: i32, id: Option<String> },
    Lacking(u64),
    Run { base: Vec<u32> },
    Intent { p: i32, k: u32, o: u64, id: Id },
    Undo { p: i32, k: u32, o: u64 },
    First { p: i32, seq: u32 },
}

/// An applied id: its partition and id (`None`: keyless).
type Applied = (i32, Option<String>);

/// What the log's lines, reconciled with the image's newest store records, say.
#[derive(Debug, Default, PartialEq, Eq)]
struct Reconciled {
    kept: Vec<Applied>,
    lacking: u64,
}

/// What a run's lines say of one partition.
#[derive(Debug, Default, Clone)]
struct RunPart {
    base: u32,
    first: Option<u32>,
}

/// Reconciles `lines` (in file order) with `newest`, each partition's newest store
/// record now.
fn reconcile(lines: &[Line], newest: &[u32]) -> Reconciled {
    let mut r = Reconciled::default();
    let mut run: Option<Vec<RunPart>> = None;
    for line in lines {
        match line {
            Line::Kept { p, id } => r.kept.push((*p, id.clone())),
            Line::Lacking(n) => r.lacking += n,
            Line::Run { base } => {
                run = Some(
                    base.iter()
                        .map(|&base| RunPart { base, first: None })
                        .collect(),
                );
            }
            Line::First { p, seq } => {
                if let Some(part) = run.as_mut().and_then(|r| r.get_mut(*p as usize)) {
                    part.first = Some(*seq);
                }
            }
            Line::Intent { .. } | Line::Undo { .. } => {}
        }
    }
    let Some(run) = run else {
        return r;
    };
    // The run's records each partition's journal holds.
    let held: Vec<u32> = run
        .iter()
        .enumerate()
        .map(|(p, part)| {
            let s = newest.get(p).copied().unwrap_or(0);
            match part.first {
                Some(f) => (s + 1).saturating_sub(f),
                None => u32::from(s > part.base),
            }
        })
        .collect();
    let undone: std::collections::HashSet<(i32, u32, u64)> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Undo { p, k, o } => Some((*p, *k, *o)),
            _ => None,
        })
        .collect();
    let mut named: std::collections::HashSet<(i32, u32)> = std::collections::HashSet::new();
    for line in lines {
        let Line::Intent { p, k, o, id } = line else {
            continue;
        };
        if *k > held.get(*p as usize).copied().unwrap_or(0) {
            continue;
        }
        named.insert((*p, *k));
        if undone.contains(&(*p, *k, *o)) {
            continue;
        }
        match id {
            Id::Key(key) => r.kept.push((*p, Some(key.clone()))),
            Id::Keyless => r.kept.push((*p, None)),
            Id::Gap => {}
        }
    }
    for (p, (part, &h)) in run.iter().zip(&held).enumerate() {
        let s = newest.get(p).copied().unwrap_or(0);
        // Records the run's lines do not name, and records before the run's base that
        // the journal lost (a power cut): the kept ids cannot be matched to them.
        let unnamed = (1..=h).filter(|k| !named.contains(&(p as i32, *k))).count() as u64;
        r.lacking += unnamed + u64::from(part.base.saturating_sub(s));
    }
    r
}

/// The log's lines, up to the first that does not end or does not parse (a write a
/// kill cut short).
fn read_lines(file: File) -> std::io::Result<Vec<Line>> {
    let mut lines = Vec::new();
    let mut r = BufReader::new(file);
    let mut text = String::new();
    loop {
        text.clear();
        if r.read_line(&mut text)? == 0 || !text.ends_with('\n') {
            break;
        }
        match serde_json::from_str::<Line>(&text) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    Ok(lines)
}

/// An intent of this run, in memory.
#[derive(Debug)]
struct Intent {
    p: i32,
    k: u32,
    o: u64,
    id: Id,
    undone: bool,
}

/// The log of the ids an image applied, open for a run.
pub struct AppliedLog {
    file: std::io::BufWriter<File>,
    path: PathBuf,
    kept: Vec<Applied>,
    lacking: u64,
    /// Each partition's store records appended this run.
    records: Vec<u32>,
    intents: Vec<Intent>,
    /// Sync at each checkpoint; `each`: before every step that writes a record too.
    sync: bool,
    each: bool,
}

impl AppliedLog {
    /// The log's path beside `image`.
    pub fn path_of(image: &Path) -> PathBuf {
        let mut p = image.as_os_str().to_owned();
        p.push(".ids");
        PathBuf::from(p)
    }

    /// Removes the log beside `image` (a run that does not keep it would leave it out
    /// of step).
    pub fn remove(image: &Path) -> anyhow::Result<()> {
        let path = Self::path_of(image);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(anyhow::anyhow!("removing {}: {e}", path.display()))
            }
            _ => Ok(()),
        }
    }

    /// Opens the log of `image`, whose partitions' newest store records are `newest`;
    /// `fresh` when the image was just made (a log left there is emptied). `sync`: the
    /// log is synced before each checkpoint's; `each`: before each record's write too.
    pub fn open(
        image: &Path,
        newest: &[u32],
        fresh: bool,
        (sync, each): (bool, bool),
    ) -> anyhow::Result<Self> {
        let path = Self::path_of(image);
        let name = path.display().to_string();
        let there = crate::files::regular_or_missing(&path, "a log of applied ids")?;
        let r = match there {
            Some(_) if !fresh => {
                let file = File::open(&path).with_context(|| format!("opening {name}"))?;
                let lines = read_lines(file).with_context(|| format!("reading {name}"))?;
                reconcile(&lines, newest)
            }
            // No log of an image that holds records: their ids are unknown.
            _ => Reconciled {
                kept: Vec::new(),
                lacking: newest.iter().map(|&s| u64::from(s)).sum(),
            },
        };
        let mut tmp = crate::files::temporary_beside(&path)
            .with_context(|| format!("writing {name} (its temporary file)"))?;
        {
            let mut w = std::io::BufWriter::new(tmp.file());
            let mut put = |l: &Line| -> anyhow::Result<()> {
                writeln!(w, "{}", serde_json::to_string(l)?)?;
                Ok(())
            };
            for (p, id) in &r.kept {
                put(&Line::Kept {
                    p: *p,
                    id: id.clone(),
                })?;
            }
            if r.lacking > 0 {
                put(&Line::Lacking(r.lacking))?;
            }
            put(&Line::Run {
                base: newest.to_vec(),
            })?;
            w.flush().with_context(|| format!("writing {name}"))?;
        }
        if sync {
            tmp.file()
                .sync_data()
                .with_context(|| format!("syncing {name}"))?;
        }
        tmp.persist(&path)
            .with_context(|| format!("writing {name}"))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {name}"))?;
        Ok(Self {
            file: std::io::BufWriter::new(file),
            path,
            kept: r.kept,
            lacking: r.lacking,
            records: vec![0; newest.len()],
            intents: Vec::new(),
            sync,
            each,
        })
    }

    fn put(&mut self, line: &Line) -> anyhow::Result<()> {
        let mut text = serde_json::to_string(line)?;
        text.push('\n');
        // Handed to the file at once: the record this line names may be written next.
        self.file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.flush())
            .with_context(|| format!("writing {} (the disk full?)", self.path.display()))
    }

    /// Makes the lines written durable (unless the image is not synced either).
    pub fn sync(&mut self) -> anyhow::Result<()> {
        if self.sync {
            (self.file.get_ref().sync_data())
                .with_context(|| format!("syncing {}", self.path.display()))?;
        }
        Ok(())
    }

    /// The event at offset `o` of partition `p`, carrying `id`, was delivered: the next
    /// record appended to the partition's store journal will hold it, unless
    /// [`AppliedLog::not_applied`] follows.
    pub fn delivered(&mut self, p: i32, o: u64, id: Id) -> anyhow::Result<()> {
        let k = self.records[p as usize] + 1;
        self.put(&Line::Intent {
            p,
            k,
            o,
            id: id.clone(),
        })?;
        if self.each {
            self.sync()?;
        }
        self.intents.push(Intent {
            p,
            k,
            o,
            id,
            undone: false,
        });
        Ok(())
    }

    /// The event at offset `o` of partition `p`, delivered last, was not applied (a
    /// duplicate skipped, or rejected): no record holds its effect.
    pub fn not_applied(&mut self, p: i32, o: u64) -> anyhow::Result<()> {
        let Some(i) = self.intents.iter_mut().rev().find(|i| i.p == p && i.o == o) else {
            return Ok(());
        };
        i.undone = true;
        let k = i.k;
        self.put(&Line::Undo { p, k, o })
    }

    /// Partition `p`'s store journal got `records` more; `newest` reads its newest
    /// record's number (asked once a run, at its first).
    pub fn recorded(
        &mut self,
        p: i32,
        records: u32,
        newest: impl FnOnce() -> anyhow::Result<u32>,
    ) -> anyhow::Result<()> {
        if records == 0 {
            return Ok(());
        }
        let before = self.records[p as usize];
        self.records[p as usize] += records;
        if before == 0 {
            let seq = newest()?.wrapping_sub(records - 1);
            self.put(&Line::First { p, seq })?;
        }
        Ok(())
    }

    /// The ids applied, in order: those kept from earlier runs, then this run's, each
    /// in a record written; `Err(n)` when the log lacks the ids of `n` records.
    pub fn applied(&self) -> Result<Vec<Option<String>>, u64> {
        if self.lacking > 0 {
            return Err(self.lacking);
        }
        let run = self
            .intents
            .iter()
            .filter(|i| !i.undone && i.k <= self.records[i.p as usize] && i.id != Id::Gap);
        Ok(self
            .kept
            .iter()
            .map(|(_, id)| id.clone())
            .chain(run.map(|i| match &i.id {
                Id::Key(k) => Some(k.clone()),
                _ => None,
            }))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(p: i32, k: u32, o: u64, id: &str) -> Line {
        let id = match id {
            "" => Id::Keyless,
            "-" => Id::Gap,
            k => Id::Key(k.into()),
        };
        Line::Intent { p, k, o, id }
    }

    fn kept(r: &Reconciled) -> Vec<Option<&str>> {
        r.kept.iter().map(|(_, id)| id.as_deref()).collect()
    }

    #[test]
    fn a_record_per_effect_keeps_the_intents_its_journal_holds() {
        // Partition 0 at record 4 when the run began; p2 was skipped (no record), p3
        // went to the run's 2nd record, p4's record was never written.
        let lines = [
            Line::Kept {
                p: 0,
                id: Some("p0".into()),
            },
            Line::Run { base: vec![4, 0] },
            intent(0, 1, 10, "p1"),
            Line::First { p: 0, seq: 5 },
            intent(0, 2, 11, "p2"),
            Line::Undo { p: 0, k: 2, o: 11 },
            intent(0, 2, 12, "p3"),
            intent(1, 1, 0, "-"),
            Line::First { p: 1, seq: 1 },
            intent(0, 3, 13, "p4"),
        ];
        let r = reconcile(&lines, &[6, 1]);
        assert_eq!(kept(&r), [Some("p0"), Some("p1"), Some("p3")]);
        assert_eq!(r.lacking, 0);
        // The record of p4 written too: kept.
        let r = reconcile(&lines, &[7, 1]);
        assert_eq!(kept(&r), [Some("p0"), Some("p1"), Some("p3"), Some("p4")]);
        // Killed before the first record's `first` line: one record, if the journal
        // passed the base.
        let cut = &lines[..3];
        assert_eq!(kept(&reconcile(cut, &[5, 0])), [Some("p0"), Some("p1")]);
        assert_eq!(kept(&reconcile(cut, &[4, 0])), [Some("p0")]);
        // A torn slot stepped over: the first record is numbered 6, not 5.
        let torn = [
            Line::Run { base: vec![4] },
            intent(0, 1, 10, "p1"),
            Line::First { p: 0, seq: 6 },
            intent(0, 2, 11, "p2"),
        ];
        assert_eq!(kept(&reconcile(&torn, &[6])), [Some("p1")]);
        assert_eq!(reconcile(&torn, &[6]).lacking, 0);
    }

    #[test]
    fn a_record_per_checkpoint_keeps_its_whole_batch() {
        let lines = [
            Line::Run { base: vec![2] },
            intent(0, 1, 20, "a"),
            intent(0, 1, 21, ""),
            Line::First { p: 0, seq: 3 },
            intent(0, 2, 22, "c"),
            intent(0, 2, 23, "d"),
        ];
        assert_eq!(kept(&reconcile(&lines, &[3])), [Some("a"), None]);
        assert_eq!(
            kept(&reconcile(&lines, &[4])),
            [Some("a"), None, Some("c"), Some("d")]
        );
    }

    #[test]
    fn records_no_line_names_are_lacking() {
        // The journal holds three records of the run; the log names two.
        let lines = [
            Line::Run { base: vec![0] },
            intent(0, 1, 0, "a"),
            Line::First { p: 0, seq: 1 },
            intent(0, 2, 1, "b"),
        ];
        let r = reconcile(&lines, &[3]);
        assert_eq!((kept(&r), r.lacking), (vec![Some("a"), Some("b")], 1));
        // A journal behind the run's base (a power cut lost records).
        assert_eq!(reconcile(&lines, &[0]).lacking, 0);
        let later = [Line::Run { base: vec![5] }];
        assert_eq!(reconcile(&later, &[3]).lacking, 2);
        // Lacking counts carry over.
        assert_eq!(reconcile(&[Line::Lacking(4)], &[9]).lacking, 4);
    }

    #[test]
    fn the_log_is_rewritten_at_open_and_a_cut_line_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("k.img");
        let mut log = AppliedLog::open(&image, &[0], true, (true, false)).unwrap();
        log.delivered(0, 0, Id::of(Some(b"p17"))).unwrap();
        log.recorded(0, 1, || Ok(1)).unwrap();
        log.delivered(0, 1, Id::of(Some(b"p17"))).unwrap();
        log.not_applied(0, 1).unwrap();
        log.delivered(0, 2, Id::of(Some(b"p18"))).unwrap();
        log.recorded(0, 1, || Ok(2)).unwrap();
        log.delivered(0, 3, Id::of(None)).unwrap();
        assert_eq!(
            log.applied(),
            Ok(vec![Some("p17".into()), Some("p18".into())])
        );
        drop(log);
        let path = AppliedLog::path_of(&image);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"intent\":{\"p\":0,\"k\":3,");
        std::fs::write(&path, text).unwrap();
        // The journal holds both records: the third intent's was never written.
        let log = AppliedLog::open(&image, &[2], false, (true, false)).unwrap();
        assert_eq!(
            log.applied(),
            Ok(vec![Some("p17".into()), Some("p18".into())])
        );
        drop(log);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"kept\":{\"p\":0,\"id\":\"p17\"}}\n{\"kept\":{\"p\":0,\"id\":\"p18\"}}\n{\"run\":{\"base\":[2]}}\n"
        );
        // An image with records and no log: lacking them all.
        AppliedLog::remove(&image).unwrap();
        let log = AppliedLog::open(&image, &[2], false, (false, false)).unwrap();
        assert_eq!(log.applied(), Err(2));
        // A fresh image empties the log.
        let log = AppliedLog::open(&image, &[0], true, (false, false)).unwrap();
        assert_eq!(log.applied(), Ok(vec![]));
    }
}
