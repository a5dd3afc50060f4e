//! A truth's one rule, for every source a grade reads from outside idem (a Kafka
//! partition read of its own, an MQTT publisher's truth file): each distinct message id
//! counted once, at its first amount. Ids are kept as their bytes, never a hash of them,
//! so no two can be taken for one.

use std::hash::{BuildHasher, RandomState};
use std::io::BufRead;
use std::path::Path;

use anyhow::Context;

use crate::error::usage;

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

/// What a producer sent, as its truth file says: one JSON payment a line
/// (`{"id": "p17", "payer": "ada", "amount": 5}`), every send (resends included), each
/// id counted once at its first amount. `idem mqtt publish --truth` and `idem kafka
/// produce --truth` write one; `consume --truth` grades against it, a truth that does not
/// come from the read it grades.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruthFile {
    /// Each id's first amount, summed.
    pub total: i64,
    /// Distinct ids.
    pub ids: u64,
    /// Lines: every send, resends included.
    pub sent: u64,
}

impl TruthFile {
    /// Reads a truth file, a line at a time (only the ids stay in memory); a line that is
    /// not a payment is refused with its number.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let reading = || format!("reading the truth file {}", path.display());
        let file = std::fs::File::open(path).with_context(reading)?;
        let mut file = std::io::BufReader::new(file);
        let mut first = FirstAmounts::default();
        let (mut sent, mut n, mut line) = (0, 0, Vec::new());
        loop {
            line.clear();
            if file.read_until(b'\n', &mut line).with_context(reading)? == 0 {
                break;
            }
            n += 1;
            if line.trim_ascii().is_empty() {
                continue;
            }
            let (id, amount) = idem_mqtt::payments::id_and_amount(line.trim_ascii()).map_err(|_| {
                usage(format!(
                    "line {n} of {} is not a payment ({{\"id\": \"p17\", \"payer\": \"ada\", \"amount\": 5}})",
                    path.display()
                ))
            })?;
            sent += 1;
            first
                .add(Some(id.as_bytes()), amount)
                .map_err(|e| usage(format!("{}, line {n}: {e}", path.display())))?;
        }
        Ok(Self {
            total: first.total(),
            ids: first.messages(),
            sent,
        })
    }
}

/// Writes one line of a truth file: the payment `id` of `payer` and `amount`, as JSON in
/// the payload's order (`{"id": "p17", "payer": "ada", "amount": 5}`).
#[cfg(feature = "kafka")]
pub fn write_line(
    out: &mut impl std::io::Write,
    id: &str,
    payer: &str,
    amount: i64,
) -> std::io::Result<()> {
    let text = |s: &str| serde_json::to_string(s).map_err(std::io::Error::other);
    let (id, payer) = (text(id)?, text(payer)?);
    writeln!(
        out,
        r#"{{"id": {id}, "payer": {payer}, "amount": {amount}}}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_set_holds_each_key_once_by_its_bytes() {
        let mut keys = KeySet::default();
        let many: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        for k in &many {
            assert_eq!(keys.insert(k.as_bytes()), Ok(true));
        }
        let mut insert = |k: &[u8]| keys.insert(k).unwrap();
        assert!(!insert(b"k17") && !insert(b"k4999"));
        assert!(insert(b"k5000") && insert(b"") && !insert(b""));
        assert!(insert(b"k1\0") && insert(b"\0k1"));
        assert_eq!(keys.len(), 5004);
        let long = vec![7u8; MAX_KEY + 1];
        assert_eq!(keys.insert(&long), Err(TruthError::IdTooLong(MAX_KEY + 1)));
        assert_eq!(keys.insert(&long[..MAX_KEY]), Ok(true));
        assert_eq!(keys.insert(&long[..MAX_KEY]), Ok(false));
    }

    #[test]
    fn each_id_counts_once_at_its_first_amount() {
        let mut t = FirstAmounts::default();
        assert_eq!(t.add(Some(b"p17"), 5), Ok(true));
        assert_eq!(t.add(Some(b"p17"), 9), Ok(false));
        assert_eq!(t.add(None, 3), Ok(true));
        assert_eq!(t.add(None, 3), Ok(true));
        assert_eq!((t.total(), t.messages()), (11, 3));
        assert_eq!(t.add(Some(b"big"), i64::MAX), Err(TruthError::Overflow));
    }
}
