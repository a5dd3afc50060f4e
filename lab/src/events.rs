//! Reads a user's log from a JSON Lines file: one message a line,
//! `{"id": "p17", "producer": 1, "seq": 1, "amount": 5}` (`epoch` optional, default 0).

use std::path::Path;

use std::io::{BufRead, Read};

use anyhow::Context;
use idem_core::lab::scenario::ProducerMode;
use idem_core::log::{AppendLog, LogError, Message, MessageId, VecLog};
use idem_core::producer::IdempotentLog;
use serde::Deserialize;

use crate::error::usage;

/// How many events a log file may hold.
pub const FILE_LOG_CAPACITY: usize = 4096;

/// A log read from a file.
pub type FileLog = VecLog<FILE_LOG_CAPACITY>;

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
/// that could not be read) is refused with its line number. With an idempotent producer each line is a send: a repeated
/// sequence (a retry) and a fenced epoch (a zombie) do not land; a gap is refused.
fn parse_lines(
    name: &str,
    lines: impl Iterator<Item = Result<String, String>>,
    mode: ProducerMode,
) -> anyhow::Result<Box<FileLog>> {
    let mut plain = Box::new(FileLog::new());
    let mut idempotent = Box::new(IdempotentLog::<FileLog, FILE_PRODUCERS>::new(FileLog::new()));
    // The sum of |amount| bounds every total a replay-free run can reach.
    let mut magnitude: u64 = 0;
    for (i, line) in lines.enumerate() {
        let line = line.map_err(|e| usage(format!("{name} line {}: {e}", i + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(&line)
            .map_err(|e| usage(format!("{name} line {}: not an event ({e})", i + 1)))?;
        magnitude = magnitude
            .checked_add(l.amount.unsigned_abs())
            .filter(|&m| m <= i64::MAX as u64)
            .ok_or_else(|| {
                usage(format!(
                    "{name} line {}: the amounts add up past what a 64-bit total holds ({})",
                    i + 1,
                    i64::MAX
                ))
            })?;
        let message = Message {
            id: MessageId::from_key(l.id.as_bytes()),
            producer: l.producer,
            epoch: l.epoch,
            seq: l.seq,
            amount: l.amount,
        };
        let landed = match mode {
            // A file holds what landed: without retries that is a plain log.
            ProducerMode::Plain | ProducerMode::NoRetry => plain.append(message),
            ProducerMode::Idempotent | ProducerMode::Transactional => idempotent.append(message),
        };
        match landed {
            Ok(_) | Err(LogError::Duplicate { .. } | LogError::Fenced { .. }) => {}
            Err(LogError::Full { capacity }) => {
                return Err(usage(format!(
                    "{name} line {}: the log holds at most {capacity} events",
                    i + 1
                )));
            }
            Err(other) => return Err(usage(format!("{name} line {}: {other}", i + 1))),
        }
    }
    Ok(match mode {
        ProducerMode::Plain | ProducerMode::NoRetry => plain,
        ProducerMode::Idempotent | ProducerMode::Transactional => Box::new(idempotent.into_inner()),
    })
}

/// The longest line an event file may have, in bytes.
pub const MAX_LINE: usize = 1024;

/// Reads and parses the file at `path` as it is read: a line longer than [`MAX_LINE`],
/// text that is not UTF-8, or more lines than a log holds events stop the read, so
/// `/dev/zero` or a huge file is refused after at most one log's worth of input.
pub fn load(path: &Path, mode: ProducerMode) -> anyhow::Result<Box<FileLog>> {
    let name = path.display().to_string();
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
    parse_lines(&name, lines, mode)
}

/// The most lines an event file may have (blank lines included).
pub const MAX_LINES: usize = 2 * FILE_LOG_CAPACITY;

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::Log;

    fn parse(name: &str, text: &str, mode: ProducerMode) -> anyhow::Result<Box<FileLog>> {
        parse_lines(name, text.lines().map(|l| Ok(l.to_string())), mode)
    }

    #[test]
    fn amounts_that_would_overflow_a_total_are_refused() {
        let text = "{\"id\":\"a\",\"producer\":1,\"seq\":1,\"amount\":9223372036854775807}\n{\"id\":\"b\",\"producer\":1,\"seq\":2,\"amount\":9223372036854775807}\n";
        let e = parse("big.jsonl", text, ProducerMode::Plain).unwrap_err();
        assert_eq!(
            e.to_string(),
            "big.jsonl line 2: the amounts add up past what a 64-bit total holds (9223372036854775807)"
        );
        assert!(e.is::<crate::error::Usage>());
    }

    #[test]
    fn parses_events_and_counts_ids_once() {
        let text = "{\"id\":\"p17\",\"producer\":1,\"seq\":1,\"amount\":5}\n\n{\"id\":\"p17\",\"producer\":1,\"seq\":1,\"amount\":5}\n";
        let log = parse("x", text, ProducerMode::Plain).unwrap();
        assert_eq!((log.len(), log.true_total()), (2, 5));
        let log = parse("x", text, ProducerMode::Idempotent).unwrap();
        assert_eq!(log.len(), 1, "an idempotent producer's retry does not land");
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        let e = parse(
            "f.jsonl",
            "{\"id\":\"a\",\"producer\":1,\"seq\":1,\"amount\":1}\n{\"id\":\"b\"}\n",
            ProducerMode::Plain,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("f.jsonl line 2: not an event"),
            "{e}"
        );
        assert!(e.is::<crate::error::Usage>());
    }
}
