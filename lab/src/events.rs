//! Reads a user's log from a JSON Lines file: one message a line,
//! `{"id": "p17", "producer": 1, "seq": 0, "amount": 5}` (`epoch` optional, default 0).
//! `producer`, `epoch` and `seq` are the application's own numbering of its sends; with
//! an idempotent or transactional producer the library's batch header is made from
//! them as for the built-in scenarios ([`ProducerMode::header`]).
//!
//! The ids are the user's bytes. A store knows them by a keyed 64-bit hash
//! ([`MessageId::keyed`]); the truth that grades the store knows them by their bytes, so
//! a verdict never rests on the hash it grades.

use std::collections::HashMap;
use std::path::Path;

use std::io::{BufRead, Read};

use anyhow::Context;
use idem_core::log::{IdKey, Log, MessageId, Offset};
use idem_payments::{LogError, Message, Payment, Truth, VecLog};
use idem_sim::producer::{Appended, IdempotentLog};
use idem_sim::scenario::ProducerMode;
use serde::Deserialize;

use crate::error::usage;

/// How many events a log file may hold.
pub const FILE_LOG_CAPACITY: usize = 4096;

/// A log read from a file: the messages that landed, with each one's id as the file
/// gave it. Which offset carries a message's first occurrence, and the true total of
/// every prefix, are computed from the ids' bytes when the file is read.
#[derive(Debug, Clone)]
pub struct FileLog {
    log: VecLog<FILE_LOG_CAPACITY>,
    ids: Vec<String>,
    /// `canonical[o]`: the first offset whose id has the bytes of offset `o`'s.
    canonical: Vec<Offset>,
    /// `truth[n]`: the true total of the first `n` events.
    truth: Vec<i64>,
}

impl FileLog {
    /// The id of the event at `offset`, as the file wrote it.
    pub fn id_text(&self, offset: Offset) -> Option<&str> {
        self.ids
            .get(usize::try_from(offset).ok()?)
            .map(String::as_str)
    }

    /// The true total of each prefix: `truth_by_prefix()[n]` for the first `n` events.
    pub fn truth_by_prefix(&self) -> &[i64] {
        &self.truth
    }
}

impl Log<Message> for FileLog {
    fn end(&self) -> Option<Offset> {
        self.log.end()
    }

    fn get(&self, offset: Offset) -> Option<Payment> {
        self.log.get(offset)
    }
}

impl Truth for FileLog {
    fn true_total_before(&self, end: Offset) -> i64 {
        let n = usize::try_from(end)
            .unwrap_or(usize::MAX)
            .min(self.ids.len());
        self.truth.get(n).copied().unwrap_or(0)
    }

    fn ids_distinct(&self) -> bool {
        self.canonical
            .iter()
            .enumerate()
            .all(|(o, &c)| c == o as u64)
    }

    fn canonical(&self, offset: Offset) -> Offset {
        usize::try_from(offset)
            .ok()
            .and_then(|o| self.canonical.get(o))
            .copied()
            .unwrap_or(offset)
    }
}

/// A key for one run of the simulator, unknown to whoever wrote the file: 128 bits from
/// std's `RandomState`, which the operating system seeds at process start.
pub fn run_key() -> IdKey {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    let mut key = [0u8; 16];
    for (i, half) in key.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    IdKey(key)
}

/// How many producers an idempotent producer's log remembers for a file.
pub const FILE_PRODUCERS: usize = 8;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    producer: u32,
    #[serde(default)]
    epoch: u16,
    seq: u32,
    amount: i64,
}

/// Parses the lines of `name`, as they are read, into a log; the first bad line (or one
/// that could not be read) is refused with its line number. With an idempotent producer
/// each line is a send: a repeated sequence (a retry) and a fenced epoch (a zombie) do
/// not land; a gap is refused. `id_of` turns an id's bytes into the store's
/// [`MessageId`]; two different ids that it maps to one value are refused by name.
fn parse_lines(
    name: &str,
    lines: impl Iterator<Item = Result<String, String>>,
    mode: ProducerMode,
    id_of: impl Fn(&[u8]) -> MessageId,
) -> anyhow::Result<Box<FileLog>> {
    let mut broker =
        Box::new(IdempotentLog::<VecLog<FILE_LOG_CAPACITY>, FILE_PRODUCERS>::new(VecLog::new()));
    let mut producer_ids = heapless::Vec::<(u32, u16), FILE_PRODUCERS>::new();
    let mut ids = Ids::default();
    let mut totals = Totals::default();
    for (i, line) in lines.enumerate() {
        let n = i + 1;
        let at = |what: String| usage(format!("{name} line {n}: {what}"));
        let line = line.map_err(&at)?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(&line).map_err(|e| at(format!("not an event ({e})")))?;
        let id = id_of(l.id.as_bytes());
        ids.check_distinct(name, n, id, &l.id)?;
        let message = Message {
            id,
            producer: l.producer,
            epoch: l.epoch,
            seq: l.seq,
            amount: l.amount,
        };
        let Some(offset) = land(&mut broker, &mut producer_ids, mode, message).map_err(at)? else {
            continue;
        };
        totals.add(&l, offset).map_err(at)?;
    }
    Ok(Box::new(FileLog {
        log: broker.into_inner(),
        ids: totals.ids,
        canonical: totals.canonical,
        truth: totals.truth,
    }))
}

/// Each distinct 64-bit message id and the id (by its bytes) and line that first had it.
#[derive(Default)]
struct Ids(HashMap<MessageId, (String, usize)>);

impl Ids {
    /// Refuses line `n`'s `text` if another id's bytes already have its `id`.
    fn check_distinct(
        &mut self,
        name: &str,
        n: usize,
        id: MessageId,
        text: &str,
    ) -> anyhow::Result<()> {
        match self.0.get(&id) {
            Some((other, line)) if other != text => Err(usage(format!(
                "{name} lines {line} and {n}: the different ids {} and {} share one 64-bit message id under this run's key, so the message-id store would take one for the other (for ids nobody chose against the key, a chance of about n²/2⁶⁵ for n ids)",
                quote(other),
                quote(text)
            ))),
            Some(_) => Ok(()),
            None => {
                self.0.insert(id, (text.to_owned(), n));
                Ok(())
            }
        }
    }
}

/// Sends `message` to the broker as `mode`'s producer would: its offset if it landed,
/// None if the broker dropped it as a duplicate or a fenced epoch's; why it was refused.
fn land(
    broker: &mut IdempotentLog<VecLog<FILE_LOG_CAPACITY>, FILE_PRODUCERS>,
    producer_ids: &mut heapless::Vec<(u32, u16), FILE_PRODUCERS>,
    mode: ProducerMode,
    message: Message,
) -> Result<Option<Offset>, String> {
    // Without idempotence each line lands; with it, the broker checks the header the
    // producer library writes for it.
    let landed = mode
        .header(&message, producer_ids)
        .and_then(|header| match header {
            None => broker.append_unchecked(message).map(Some),
            Some(h) => broker.append_batch(h, message).map(|a| match a {
                Appended::At(offset) => Some(offset),
                Appended::Already(_) | Appended::OlderDuplicate => None,
            }),
        });
    match landed {
        Ok(Some(offset)) => Ok(Some(offset)),
        Ok(None) | Err(LogError::Fenced { .. }) => Ok(None),
        Err(LogError::Full { capacity }) => Err(format!("the log holds at most {capacity} events")),
        Err(other) => Err(other.to_string()),
    }
}

/// What the landed events add up to: each offset's id, its first occurrence and the true
/// total of every prefix.
struct Totals {
    ids: Vec<String>,
    canonical: Vec<Offset>,
    truth: Vec<i64>,
    /// Each distinct id (by its bytes): its first offset.
    first: HashMap<String, Offset>,
    /// The total a run that applies each landed event once reaches after each offset.
    running: i64,
}

impl Default for Totals {
    fn default() -> Self {
        Self {
            ids: Vec::new(),
            canonical: Vec::new(),
            truth: vec![0],
            first: HashMap::new(),
            running: 0,
        }
    }
}

impl Totals {
    /// Counts the event `l` that landed at `offset`.
    fn add(&mut self, l: &Line, offset: Offset) -> Result<(), String> {
        // What can overflow: the running total of a replay-free run, and the true total
        // (each id's first amount). A replay past that is the store's typed error.
        let past = |what: &str, total: i64| {
            format!(
                "at offset {offset} the {what} {total} plus {} passes what a 64-bit total holds ({} to {})",
                l.amount,
                i64::MIN,
                i64::MAX
            )
        };
        self.running = self
            .running
            .checked_add(l.amount)
            .ok_or_else(|| past("running total", self.running))?;
        let last = *self.truth.last().unwrap_or(&0);
        let (c, t) = match self.first.get(&l.id) {
            Some(&c) => (c, last),
            None => {
                let t = last
                    .checked_add(l.amount)
                    .ok_or_else(|| past("true total", last))?;
                self.first.insert(l.id.clone(), offset);
                (offset, t)
            }
        };
        self.canonical.push(c);
        self.truth.push(t);
        self.ids.push(l.id.clone());
        Ok(())
    }
}

/// `id` quoted for a message, cut to its first 40 characters.
fn quote(id: &str) -> String {
    match id.char_indices().nth(40) {
        Some((cut, _)) => format!("{:?}...", &id[..cut]),
        None => format!("{id:?}"),
    }
}

/// The longest line an event file may have, in bytes.
pub const MAX_LINE: usize = 1024;

/// Whether `path` is a FIFO with a path of its own (not a process substitution's
/// /dev/fd/N, for which `realpath` finds no path).
#[cfg(unix)]
fn is_named_pipe(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
        && std::fs::canonicalize(path).is_ok()
}

/// No FIFOs outside Unix (the playground reads no files).
#[cfg(not(unix))]
fn is_named_pipe(_: &Path) -> bool {
    false
}

/// Reads and parses the file at `path` as it is read: a line longer than [`MAX_LINE`],
/// text that is not UTF-8, or more lines than a log holds events stop the read, so
/// `/dev/zero` or a huge file is refused after at most one log's worth of input.
///
/// Ids become message ids under `key` (see [`run_key`]).
pub fn load(path: &Path, mode: ProducerMode, key: &IdKey) -> anyhow::Result<Box<FileLog>> {
    let name = path.display().to_string();
    // A pipe is read as it arrives (`--log <(...)`), a directory is named as one. A
    // named pipe (one with a path of its own: `realpath` finds it, where it finds no
    // path for a process substitution's /dev/fd/N) is refused before it is opened:
    // opening one blocks until a writer comes, which may be never.
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(usage(format!("{name} is a directory, not an event file")));
    }
    if is_named_pipe(path) {
        return Err(usage(format!(
            "{name} is a named pipe (FIFO), not an event file: give a regular file, or a process substitution (--log <(...))"
        )));
    }
    let file = std::fs::File::open(path)
        .with_context(|| format!("reading event file {name}"))
        .map_err(|e| usage(format!("{e:#}")))?;
    let mut reader = std::io::BufReader::new(file);
    let mut read = 0;
    // One line at a time, each checked as it is read: the parse stops at the first
    // refusal, having held at most one line.
    let lines = std::iter::from_fn(move || {
        let mut buf = Vec::new();
        let n = match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(n) => n,
            Err(e) => return Some(Err(format!("could not be read ({e})"))),
        };
        if n == 0 {
            return None;
        }
        read += 1;
        Some(if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
            Err(format!(
                "longer than {MAX_LINE} bytes; an event file holds one short JSON object a line"
            ))
        } else if read > MAX_LINES {
            Err(format!(
                "more than {MAX_LINES} lines; a log holds at most {FILE_LOG_CAPACITY} events"
            ))
        } else {
            String::from_utf8(buf)
                .map(|l| l.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|_| "not UTF-8 text (is this a binary file?)".to_string())
        })
    });
    parse_lines(&name, lines, mode, |id| MessageId::keyed(key, id))
}

/// The most lines an event file may have (blank lines included).
pub const MAX_LINES: usize = 2 * FILE_LOG_CAPACITY;

#[cfg(test)]
mod tests {
    use super::*;
    use idem_payments::Truth;

    fn parse(name: &str, text: &str, mode: ProducerMode) -> anyhow::Result<Box<FileLog>> {
        let key = run_key();
        parse_with(name, text, mode, |id| MessageId::keyed(&key, id))
    }

    fn parse_with(
        name: &str,
        text: &str,
        mode: ProducerMode,
        id_of: impl Fn(&[u8]) -> MessageId,
    ) -> anyhow::Result<Box<FileLog>> {
        parse_lines(name, text.lines().map(|l| Ok(l.to_string())), mode, id_of)
    }

    fn line(id: &str, seq: u32, amount: i64) -> String {
        format!("{{\"id\":\"{id}\",\"producer\":1,\"seq\":{seq},\"amount\":{amount}}}\n")
    }

    #[test]
    fn only_totals_that_can_overflow_are_refused_and_the_offset_is_named() {
        let p = 1i64 << 62;
        let text = [line("a", 1, p), line("b", 2, -p), line("c", 3, p)].concat();
        let log = parse("x", &text, ProducerMode::NonIdempotent).unwrap();
        assert_eq!(log.true_total(), p, "a sum of 2^62 fits");
        let log = parse("x", &line("a", 1, i64::MIN), ProducerMode::NonIdempotent).unwrap();
        assert_eq!(log.true_total(), i64::MIN, "a single i64::MIN is a total");
        let text = [line("a", 1, p), line("b", 2, p), line("c", 3, p)].concat();
        let e = parse("big.jsonl", &text, ProducerMode::NonIdempotent).unwrap_err();
        assert_eq!(
            e.to_string(),
            "big.jsonl line 2: at offset 1 the running total 4611686018427387904 plus 4611686018427387904 passes what a 64-bit total holds (-9223372036854775808 to 9223372036854775807)"
        );
        // The running total fits (a repeat of a cancels it) but the truth, which counts a
        // once, does not.
        let text = [
            line("a", 1, i64::MAX),
            line("a", 2, -i64::MAX),
            line("b", 3, 1),
        ]
        .concat();
        let e = parse("t.jsonl", &text, ProducerMode::NonIdempotent).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.jsonl line 3: at offset 2 the true total 9223372036854775807 plus 1 passes what a 64-bit total holds (-9223372036854775808 to 9223372036854775807)"
        );
    }

    #[test]
    fn the_truth_counts_ids_by_their_bytes_and_a_shared_hash_is_refused_by_name() {
        // A hash that keeps only the first byte: "p17" and "p18" share it.
        let weak = |id: &[u8]| MessageId(u64::from(id[0]));
        let text = [line("p17", 1, 5), line("p18", 2, 7)].concat();
        let e = parse_with("c.jsonl", &text, ProducerMode::NonIdempotent, weak).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "c.jsonl lines 1 and 2: the different ids \"p17\" and \"p18\" share one 64-bit message id under this run's key"
            ),
            "{e}"
        );
        // Under the run's key they are two messages, and the truth says 12.
        let log = parse("c.jsonl", &text, ProducerMode::NonIdempotent).unwrap();
        assert_eq!((log.true_total(), log.canonical(1)), (12, 1));
        assert_eq!(log.id_text(1), Some("p18"));
    }

    #[test]
    fn amounts_that_would_overflow_a_total_are_refused() {
        let text = "{\"id\":\"a\",\"producer\":1,\"seq\":1,\"amount\":9223372036854775807}\n{\"id\":\"b\",\"producer\":1,\"seq\":2,\"amount\":9223372036854775807}\n";
        let e = parse("big.jsonl", text, ProducerMode::NonIdempotent).unwrap_err();
        assert_eq!(
            e.to_string(),
            "big.jsonl line 2: at offset 1 the running total 9223372036854775807 plus 9223372036854775807 passes what a 64-bit total holds (-9223372036854775808 to 9223372036854775807)"
        );
        assert!(e.is::<crate::error::Usage>());
    }

    #[test]
    fn parses_events_and_counts_ids_once() {
        let text = "{\"id\":\"p17\",\"producer\":1,\"seq\":0,\"amount\":5}\n\n{\"id\":\"p17\",\"producer\":1,\"seq\":0,\"amount\":5}\n";
        let log = parse("x", text, ProducerMode::NonIdempotent).unwrap();
        assert_eq!((log.len(), log.true_total()), (2, 5));
        let log = parse("x", text, ProducerMode::Idempotent).unwrap();
        assert_eq!(log.len(), 1, "an idempotent producer's retry does not land");
        let late = "{\"id\":\"p17\",\"producer\":1,\"seq\":1,\"amount\":5}\n";
        let e = parse("late.jsonl", late, ProducerMode::Idempotent).unwrap_err();
        assert_eq!(
            e.to_string(),
            "late.jsonl line 1: producer id 1000 sent sequence 1 where the broker expected 0 (sequences start at 0 for each producer id and epoch): a gap, rejected"
        );
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        let e = parse(
            "f.jsonl",
            "{\"id\":\"a\",\"producer\":1,\"seq\":1,\"amount\":1}\n{\"id\":\"b\"}\n",
            ProducerMode::NonIdempotent,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("f.jsonl line 2: not an event"),
            "{e}"
        );
        assert!(e.is::<crate::error::Usage>());
    }
}
