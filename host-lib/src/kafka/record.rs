//! One record of a partition, apart from the others: what idem reads in it (a payment,
//! keyed or not, checked against the read's rules), the message it applies for it (its
//! id from its key, or from its place), and why a record is stepped over. The rules of a
//! read (`ReadRules`) live here too: both the whole read ([`super::trust`]) and the
//! stream ([`super::stream`]) judge a record by them.

use std::time::Duration;

use idem_core::log::{IdKey, MessageId, Offset};
use idem_payments::Message;
use serde::{Deserialize, Serialize};

/// A record's value, as `idem kafka produce` writes it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    /// Who pays.
    pub payer: String,
    /// How much.
    pub amount: i64,
}

/// What to do with a record that is not a payment idem can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBadRecord {
    /// Stop with exit 2, naming the partition and offset.
    Stop,
    /// Step over it (its offset counts as consumed), name it, and go on.
    Skip,
}

/// What a record without a key means to the message-id store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyless {
    /// It has no message id: a bad record.
    Refuse,
    /// Its id is its partition and offset (a resend of it is then not caught).
    Offset,
}

/// How partitions are read.
#[derive(Debug, Clone, Copy)]
pub struct ReadRules {
    /// Keep reading until the fetches return nothing new for this long.
    pub idle: Duration,
    /// Give up when the end offset has not been reached after this long.
    pub deadline: Duration,
    /// What a record that is not a payment does to the read.
    pub on_bad: OnBadRecord,
    /// What a record without a key means.
    pub keyless: Keyless,
    /// Whether the store dedups by message id (keyless records matter to it).
    pub by_id: bool,
    /// `--follow`: a stop request ends a read instead of failing it.
    pub follow: bool,
}

impl ReadRules {
    /// The lab's: every record is a payment with a key.
    pub const LAB: Self = Self {
        idle: Duration::from_millis(300),
        deadline: Duration::from_secs(30),
        on_bad: OnBadRecord::Stop,
        keyless: Keyless::Refuse,
        by_id: true,
        follow: false,
    };

    /// `kafka consume`'s: a quiet period of `idle_ms` milliseconds, and 30 s more than
    /// that to reach the end offset.
    pub fn consume(
        idle_ms: u64,
        on_bad: OnBadRecord,
        keyless: Keyless,
        by_id: bool,
        follow: bool,
    ) -> Self {
        let idle = Duration::from_millis(idle_ms);
        Self {
            idle,
            deadline: Duration::from_secs(30) + idle,
            on_bad,
            keyless,
            by_id,
            follow,
        }
    }

    /// Whether a read whose next offset to fetch is `next` is done: it has reached the
    /// broker's end offset `end` and nothing new came for `quiet`. An end offset alone
    /// is not trusted (a broker can report one short of the records it serves).
    pub fn done(&self, next: i64, end: i64, quiet: Duration) -> bool {
        next >= end.max(0) && quiet >= self.idle
    }

    /// Whether a read that has gone on for `elapsed` without being done is given up.
    pub fn overdue(&self, elapsed: Duration) -> bool {
        elapsed >= self.deadline
    }
}

/// A record idem stepped over, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: usize,
    /// Why it is no payment idem applies.
    pub why: String,
}

/// A record's value as idem reads it: the payer is checked to be a string and not kept.
#[derive(Deserialize)]
struct PaymentRef<'a> {
    #[serde(borrow)]
    #[allow(dead_code)] // read to check it is there, never used
    payer: std::borrow::Cow<'a, str>,
    amount: i64,
}

/// Reads a record's payment: whether it is keyed and its amount, or a sentence saying
/// why it is none. The payer is checked to be a string, and not copied.
pub fn payment_of(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    rules: &ReadRules,
) -> Result<(bool, i64), String> {
    let value = value.ok_or("the record has no value (null)")?;
    let pay: PaymentRef<'_> =
        serde_json::from_slice(value).map_err(|e| format!("not a payment ({e})"))?;
    let keyed = key.is_some();
    if !keyed && rules.by_id && rules.keyless == Keyless::Refuse {
        return Err(
            "the record has no key, so no message id for the message-id store (--keyless offset takes its partition and offset as its id)"
                .into(),
        );
    }
    Ok((keyed, pay.amount))
}

/// A record's payment ([`payment_of`]) after payments whose |amounts| add up to `sum`:
/// whether it is keyed, its amount and the new sum, or why it is none (one whose amount
/// takes the sum past a 64-bit total, too).
pub fn checked(
    sum: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    rules: &ReadRules,
) -> Result<(bool, i64, i64), String> {
    let (keyed, amount) = payment_of(key, value, rules)?;
    sum.checked_add(amount.checked_abs().unwrap_or(i64::MAX))
        .map(|s| (keyed, amount, s))
        .ok_or_else(|| {
            format!("its amount {amount} takes the partition's amounts past a 64-bit total")
        })
}

/// The bytes of a place's id: a NUL byte, the partition, `@`, the offset (no printable
/// key spells it).
pub fn place(partition: i32, offset: Offset) -> Vec<u8> {
    format!("\0{partition}@{offset}").into_bytes()
}

/// The message idem applies for the record at `offset` of `partition`: its id is its
/// key under `key` when it is keyed (`id_key`), else the hash of its place.
pub fn message(
    key: &IdKey,
    partition: i32,
    offset: Offset,
    id_key: Option<&[u8]>,
    amount: i64,
) -> Message {
    match id_key {
        Some(k) => message_of(key, k, offset, amount),
        None => message_of(key, &place(partition, offset), offset, amount),
    }
}

/// The message idem applies for the record at `offset` whose id is made of `id_bytes`
/// (its key, or its place), under `key`.
pub fn message_of(key: &IdKey, id_bytes: &[u8], offset: Offset, amount: i64) -> Message {
    Message {
        id: MessageId::keyed(key, id_bytes),
        producer: 0,
        epoch: 0,
        seq: offset as u32 + 1,
        amount,
    }
}
