//! Reads a user's log from a JSON Lines file: one message a line,
//! `{"id": "p17", "producer": 1, "seq": 1, "amount": 5}` (`epoch` optional, default 0).

use std::path::Path;

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

/// Parses `text` (the contents of `name`) into a log; the first bad line is refused
/// with its line number. With an idempotent producer each line is a send: a repeated
/// sequence (a retry) and a fenced epoch (a zombie) do not land; a gap is refused.
pub fn parse(name: &str, text: &str, mode: ProducerMode) -> anyhow::Result<Box<FileLog>> {
    let mut plain = Box::new(FileLog::new());
    let mut idempotent = Box::new(IdempotentLog::<FileLog, FILE_PRODUCERS>::new(FileLog::new()));
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(line)
            .map_err(|e| usage(format!("{name} line {}: not an event ({e})", i + 1)))?;
        let message = Message {
            id: MessageId::from_key(l.id.as_bytes()),
            producer: l.producer,
            epoch: l.epoch,
            seq: l.seq,
            amount: l.amount,
        };
        let landed = match mode {
            ProducerMode::Plain => plain.append(message),
            ProducerMode::Idempotent => idempotent.append(message),
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
        ProducerMode::Plain => plain,
        ProducerMode::Idempotent => Box::new(idempotent.into_inner()),
    })
}

/// Reads and parses the file at `path`.
pub fn load(path: &Path, mode: ProducerMode) -> anyhow::Result<Box<FileLog>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading event file {}", path.display()))?;
    parse(&path.display().to_string(), &text, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::Log;

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
