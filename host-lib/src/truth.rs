//! A truth's one rule, for every source a grade reads from outside idem (a Kafka
//! partition read of its own, an MQTT publisher's truth file): each distinct message id
//! counted once, at its first amount. Ids are kept as their bytes, never a hash of them,
//! so no two can be taken for one.

use std::hash::{BuildHasher, RandomState};
use std::io::BufRead;
use std::path::Path;

use anyhow::Context;

use idem_lab::error::usage;

/// The longest id a [`KeySet`] keeps, in bytes: 16 MiB, past any broker's default
/// record size.
const MAX_KEY: usize = (1 << KEY_LEN_BITS) - 1;
const KEY_LEN_BITS: u32 = 24;

/// A set of keys as their bytes (never a hash of them), compact: each key once in one
/// buffer, and a table of where each starts and how long it is, packed into one word
/// (40 bits and 24), some 10 bytes a key besides its own (a `HashSet` of boxed keys takes
/// some 50).
#[derive(Debug, Default)]
struct KeySet {
    bytes: Vec<u8>,
    table: hashbrown::HashTable<u64>,
    hasher: RandomState,
}

/// Where a key lies in [`KeySet::bytes`].
fn span(packed: u64) -> std::ops::Range<usize> {
    let start = (packed >> KEY_LEN_BITS) as usize;
    start..start + (packed & MAX_KEY as u64) as usize
}

impl KeySet {
    /// Adds `key`; whether it was not there. A key longer than [`MAX_KEY`] is refused with
    /// its length.
    fn insert(&mut self, key: &[u8]) -> Result<bool, TruthError> {
        let Self {
            bytes,
            table,
            hasher,
        } = self;
        if key.len() > MAX_KEY {
            return Err(TruthError::IdTooLong(key.len()));
        }
        let hash = hasher.hash_one(key);
        if table.find(hash, |&p| &bytes[span(p)] == key).is_some() {
            return Ok(false);
        }
        let packed = ((bytes.len() as u64) << KEY_LEN_BITS) | key.len() as u64;
        bytes.extend_from_slice(key);
        let bytes = &*bytes;
        table.insert_unique(hash, packed, |&p| hasher.hash_one(&bytes[span(p)]));
        Ok(true)
    }

    /// How many keys it holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether it holds `key`.
    fn contains(&self, key: &[u8]) -> bool {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |&p| &self.bytes[span(p)] == key)
            .is_some()
    }

    /// Each key, in the order it was first added.
    fn in_order(&self) -> impl Iterator<Item = &[u8]> {
        let mut at: Vec<u64> = self.table.iter().copied().collect();
        at.sort_unstable();
        at.into_iter().map(|p| &self.bytes[span(p)])
    }
}

/// Ids shown of each kind of difference; the counts cover them all.
pub const SHOWN: usize = 5;

/// How the ids a run applied differ from a truth's: each count, and the first
/// [`SHOWN`] ids of each (in the truth's order, then the run's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdCounts {
    /// Truth ids never applied.
    pub missing: (u64, Vec<String>),
    /// Ids applied more than once: the applications past the first, and the ids.
    pub twice: (u64, Vec<String>),
    /// Applications of ids the truth does not hold (a message without an id among them).
    pub foreign: (u64, Vec<String>),
}

impl IdCounts {
    /// Compares `applied` (each application's id, in order) with the truth's ids.
    pub fn of(truth: &FirstAmounts, applied: &[Option<String>]) -> Self {
        let mut times: std::collections::HashMap<&[u8], u64> = std::collections::HashMap::new();
        let mut c = Self::default();
        let note = |(n, shown): &mut (u64, Vec<String>), id: &[u8], by: u64| {
            *n += by;
            if shown.len() < SHOWN {
                shown.push(String::from_utf8_lossy(id).into_owned());
            }
        };
        for id in applied {
            match id {
                Some(id) if truth.seen.contains(id.as_bytes()) => {
                    *times.entry(id.as_bytes()).or_default() += 1;
                }
                Some(id) => note(&mut c.foreign, id.as_bytes(), 1),
                None => note(&mut c.foreign, b"(no id)", 1),
            }
        }
        for id in truth.seen.in_order() {
            match times.get(id).copied().unwrap_or(0) {
                0 => note(&mut c.missing, id, 1),
                1 => {}
                n => note(&mut c.twice, id, n - 1),
            }
        }
        c
    }

    /// Whether the run applied every truth id once and nothing else.
    pub fn exact(&self) -> bool {
        self.missing.0 + self.twice.0 + self.foreign.0 == 0
    }

    /// The verdict the ids give, when they differ: over (applied past the truth), under
    /// (missing), or both.
    pub fn verdict(&self) -> Option<&'static str> {
        let over = self.twice.0 + self.foreign.0 > 0;
        match (self.missing.0 > 0, over) {
            (true, true) => Some("over and under"),
            (true, false) => Some("under"),
            (false, true) => Some("over"),
            (false, false) => None,
        }
    }

    /// The verdict of a run whose total is `total` against a truth of `truth`, with the
    /// ids compared (`ids`, none where a side lacks them): the ids' verdict where they
    /// differ; else the totals', `exact` only when `doubted` is not (a doubt about the
    /// run, or ids that could not be compared), `unproven` then.
    pub fn grade(ids: Option<&Self>, total: i64, truth: i64, doubted: bool) -> &'static str {
        if let Some(v) = ids.and_then(Self::verdict) {
            return v;
        }
        match total.cmp(&truth) {
            std::cmp::Ordering::Equal if doubted => "unproven",
            std::cmp::Ordering::Equal => "exact",
            std::cmp::Ordering::Greater => "over",
            std::cmp::Ordering::Less => "under",
        }
    }

    /// The differences in words: `1 missing (p1); 1 not in the truth (zz)`.
    pub fn words(&self) -> String {
        let part = |(n, shown): &(u64, Vec<String>), what: &str| {
            let more = if shown.len() == SHOWN && *n > SHOWN as u64 {
                ", ..."
            } else {
                ""
            };
            format!("{n} {what} ({}{more})", shown.join(", "))
        };
        [
            (&self.missing, "missing"),
            (&self.twice, "applied again"),
            (&self.foreign, "not in the truth"),
        ]
        .into_iter()
        .filter(|(k, _)| k.0 > 0)
        .map(|(k, w)| part(k, w))
        .collect::<Vec<_>>()
        .join("; ")
    }

    /// As JSON: each count and its first ids.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "missing": self.missing.0, "missing_first": self.missing.1,
            "applied_again": self.twice.0, "applied_again_first": self.twice.1,
            "not_in_truth": self.foreign.0, "not_in_truth_first": self.foreign.1,
        })
    }
}

/// Why a message could not be counted into a truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruthError {
    /// The total would pass 64 bits.
    Overflow,
    /// An id of this many bytes, longer than idem keeps.
    IdTooLong(usize),
}

impl std::fmt::Display for TruthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Overflow => f.write_str("the true total passes 64 bits"),
            Self::IdTooLong(n) => write!(
                f,
                "a message id of {n} bytes is longer than the {MAX_KEY} bytes idem keeps of one"
            ),
        }
    }
}

/// Each distinct id's first amount, summed.
#[derive(Debug, Default)]
pub struct FirstAmounts {
    seen: KeySet,
    total: i64,
    messages: u64,
}

impl FirstAmounts {
    /// Counts `amount` unless `id` was counted before (a message with no id is a message
    /// of its own); whether it counted.
    pub fn add(&mut self, id: Option<&[u8]>, amount: i64) -> Result<bool, TruthError> {
        if let Some(id) = id
            && !self.seen.insert(id)?
        {
            return Ok(false);
        }
        self.total = self.total.checked_add(amount).ok_or(TruthError::Overflow)?;
        self.messages += 1;
        Ok(true)
    }

    /// The true total.
    pub fn total(&self) -> i64 {
        self.total
    }

    /// The messages counted: distinct ids, and each message without one.
    pub fn messages(&self) -> u64 {
        self.messages
    }
}

/// The longest line a truth file may hold, in bytes: a payment with an id of
/// `MAX_KEY` bytes fits, and a file with no line end is refused instead of read whole.
pub const MAX_LINE: usize = MAX_KEY + 1024;

/// The first line of a truth file that idem writes: `{"idem_truth": 1, "writer": "mqtt
/// publish", "qos": 2}` (`qos` only from an MQTT publisher). A file that starts with it
/// must end with [`End`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Head {
    /// The format's version: 1.
    idem_truth: u32,
    /// The command that wrote it.
    writer: String,
    /// The QoS it published at (MQTT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qos: Option<u8>,
}

/// The last line of a truth file that idem writes, once its writer finished:
/// `{"idem_truth_end": 3}`, the payment lines above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct End {
    idem_truth_end: u64,
}

/// What a producer sent, as its truth file says: one JSON payment a line
/// (`{"id": "p17", "payer": "ada", "amount": 5}`), every send (resends included), each
/// id counted once at its first amount. `idem mqtt publish --truth` and `idem kafka
/// produce --truth` write one with a first line (`Head`) and a last (`End`): such a
/// file without its last line is one whose writer stopped, and is refused. A file from
/// another writer (a hand-made one, paho, kafka-python) is payment lines only.
/// `consume --truth` grades against it, a truth that does not come from the read it
/// grades.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruthFile {
    /// Each id's first amount, summed.
    pub total: i64,
    /// Distinct ids.
    pub ids: u64,
    /// Lines: every send, resends included.
    pub sent: u64,
    /// Written by `idem mqtt publish` at QoS 0: a line at each send, which nothing
    /// confirms arrived, so a run graded on it is at best unproven.
    pub unconfirmed: bool,
}

/// A line of a truth file.
enum Line<'a> {
    Payment(&'a str, i64),
    Head(Head),
    End(End),
}

/// Reads one line of at most [`MAX_LINE`] bytes into `line`; `Ok(false)` at the file's
/// end.
fn read_line(
    file: &mut impl BufRead,
    line: &mut Vec<u8>,
    path: &Path,
    n: u64,
) -> anyhow::Result<bool> {
    use std::io::Read as _;
    line.clear();
    let got = file
        .by_ref()
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', line)
        .with_context(|| format!("reading the truth file {}", path.display()))?;
    if line.len() > MAX_LINE {
        return Err(usage(format!(
            "line {n} of {} is longer than the {MAX_LINE} bytes a truth line may hold (a file with no line end?)",
            path.display()
        )));
    }
    Ok(got > 0)
}

/// What a line is; one sentence for a line that is none of a truth's.
fn parse<'a>(line: &'a [u8], path: &Path, n: u64) -> anyhow::Result<Line<'a>> {
    if let Ok((id, amount)) = idem_mqtt::payments::id_and_amount(line) {
        return Ok(Line::Payment(id, amount));
    }
    if let Ok(head) = serde_json::from_slice::<Head>(line) {
        return Ok(Line::Head(head));
    }
    if let Ok(end) = serde_json::from_slice::<End>(line) {
        return Ok(Line::End(end));
    }
    Err(usage(format!(
        "line {n} of {} is not a payment ({{\"id\": \"p17\", \"payer\": \"ada\", \"amount\": 5}})",
        path.display()
    )))
}

impl TruthFile {
    /// Reads a truth file, a line at a time (only the ids stay in memory); a line that is
    /// not a payment is refused with its number, and so is a file idem wrote that lacks
    /// its end line. A path that is not a regular file (a named pipe) is refused before it
    /// is opened.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        Self::read_ids(path).map(|(t, _)| t)
    }

    /// [`TruthFile::read`], and each id's first amount.
    pub fn read_ids(path: &Path) -> anyhow::Result<(Self, FirstAmounts)> {
        let name = path.display();
        let file = crate::files::open_regular(path, false, "a truth file")?;
        let mut file = std::io::BufReader::new(file);
        let mut first = FirstAmounts::default();
        let (mut sent, mut n, mut line) = (0, 0, Vec::new());
        let (mut head, mut end): (Option<Head>, Option<End>) = (None, None);
        while read_line(&mut file, &mut line, path, n + 1)? {
            n += 1;
            if line.trim_ascii().is_empty() {
                continue;
            }
            if let Some(e) = end {
                return Err(usage(format!(
                    "line {n} of {name} follows its end line ({} payments): the file was appended to after idem finished it",
                    e.idem_truth_end
                )));
            }
            match parse(line.trim_ascii(), path, n)? {
                Line::Payment(id, amount) => {
                    sent += 1;
                    first
                        .add(Some(id.as_bytes()), amount)
                        .map_err(|e| usage(format!("{name}, line {n}: {e}")))?;
                }
                Line::Head(h) if sent == 0 && head.is_none() => head = Some(h),
                Line::Head(_) => {
                    return Err(usage(format!(
                        "line {n} of {name} is the first line of another truth file: two files joined?"
                    )));
                }
                Line::End(e) => end = Some(e),
            }
        }
        Self::check_ends(path, head.as_ref(), end, sent)?;
        let truth = Self {
            total: first.total(),
            ids: first.messages(),
            sent,
            unconfirmed: head.is_some_and(|h| h.qos == Some(0)),
        };
        Ok((truth, first))
    }

    /// A file idem wrote has its end line, which counts its payments; a file from another
    /// writer has neither.
    fn check_ends(
        path: &Path,
        head: Option<&Head>,
        end: Option<End>,
        sent: u64,
    ) -> anyhow::Result<()> {
        let name = path.display();
        match (head, end) {
            (None, None) => Ok(()),
            (Some(h), None) => Err(usage(format!(
                "{name} was written by idem {} and has no end line: its writer stopped before it finished, so it may lack what was sent; publish again",
                h.writer
            ))),
            (None, Some(_)) => Err(usage(format!(
                "{name} has idem's end line but not its first line: part of the file is missing"
            ))),
            (Some(_), Some(e)) if e.idem_truth_end != sent => Err(usage(format!(
                "{name} holds {sent} payments and its end line says {}: lines were lost or added",
                e.idem_truth_end
            ))),
            (Some(_), Some(_)) => Ok(()),
        }
    }
}

/// A truth file being written: under a temporary name beside its path
/// (`NAME.XXXXXXXX.idem-tmp`), with `Head` first; [`TruthWriter::finish`] adds
/// `End`, syncs it and renames it into place. Whatever stops the writer before then
/// leaves no file under the truth's name (an earlier one is removed at the start), so
/// no consumer is graded against a truth that was never finished.
pub struct TruthWriter {
    tmp: std::io::BufWriter<crate::files::Temporary>,
    path: std::path::PathBuf,
    lines: u64,
}

impl TruthWriter {
    /// Starts the truth file at `path` for the command `writer` (publishing at `qos`
    /// when MQTT): refuses a path that is not a regular file, removes a truth already
    /// there, and writes the first line to a temporary file beside it.
    pub fn create(path: &Path, writer: &str, qos: Option<u8>) -> anyhow::Result<Self> {
        let name = path.display();
        crate::files::check_target(path)?;
        let tmp = crate::files::temporary_beside(path)
            .with_context(|| format!("creating the truth file {name} (its temporary file)"))?;
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(anyhow::anyhow!(
                    "removing the earlier truth file {name}: {e}"
                ));
            }
            _ => {}
        }
        let mut w = Self {
            tmp: std::io::BufWriter::new(tmp),
            path: path.to_path_buf(),
            lines: 0,
        };
        let head = Head {
            idem_truth: 1,
            writer: writer.to_string(),
            qos,
        };
        let head = serde_json::to_string(&head)?;
        w.put(&head)?;
        // In the file at once: a writer killed before its first payment leaves a file
        // that says whose it is, refused for its missing end line, not an empty one
        // that reads as a truth of nothing sent.
        w.flush()?;
        Ok(w)
    }

    fn put(&mut self, line: &str) -> anyhow::Result<()> {
        use std::io::Write as _;
        writeln!(self.tmp, "{line}").with_context(|| {
            format!(
                "writing the truth file {} after {} payments (the disk full?)",
                self.path.display(),
                self.lines
            )
        })
    }

    /// Writes one payment line, as sent (`{"id": "p17", "payer": "ada", "amount": 5}`).
    pub fn line(&mut self, payment: &str) -> anyhow::Result<()> {
        self.put(payment)?;
        self.lines += 1;
        Ok(())
    }

    /// Writes the payment `id` of `payer` and `amount`, as JSON in the payload's order.
    pub fn payment(&mut self, id: &str, payer: &str, amount: i64) -> anyhow::Result<()> {
        let text = |s: &str| serde_json::to_string(s);
        let (id, payer) = (text(id)?, text(payer)?);
        self.line(&format!(
            r#"{{"id": {id}, "payer": {payer}, "amount": {amount}}}"#
        ))
    }

    /// Hands what is buffered to the file, so a line written stays written.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        use std::io::Write as _;
        self.tmp.flush().with_context(|| {
            format!(
                "writing the truth file {} (the disk full?)",
                self.path.display()
            )
        })
    }

    /// Writes the end line, syncs and renames the file into place; the payment lines.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        let end = serde_json::to_string(&End {
            idem_truth_end: self.lines,
        })?;
        self.put(&end)?;
        let name = self.path.display().to_string();
        let mut tmp = self
            .tmp
            .into_inner()
            .map_err(|e| anyhow::anyhow!("writing the truth file {name}: {}", e.error()))?;
        tmp.file()
            .sync_all()
            .and_then(|()| tmp.persist(&self.path))
            .with_context(|| format!("writing the truth file {name}"))?;
        Ok(self.lines)
    }
}

#[cfg(test)]
mod tests;
