//! Which records of a partition read idem trusts, steps over or refuses: a record's
//! payment, the partition as the core reads a log, and when a read has reached the
//! broker's end offset.

use std::collections::HashMap;

use idem_core::log::{Event, IdKey, Log, MessageId, Offset};
use idem_payments::{Message, Truth};

use idem_lab::error::usage;

use super::record::{checked, message, place};
// The record's rules, where `cmd::kafka` has always found them.
pub use super::record::Payment;
pub use super::record::{Keyless, OnBadRecord, ReadRules, Skipped};

/// The most records idem reads from one partition (each kept in memory with its key and
/// value for the report).
pub const MAX_RECORDS: usize = 1 << 20;

/// A record as read: its message, its key's bytes (none for a keyless record) and its
/// value.
pub type Record = (Message, Option<Vec<u8>>, String);

/// A partition's records, as the core reads a log: by offset, from 0 to the last record
/// read. An offset with no record (a transaction marker, a compacted or skipped record)
/// holds a record of amount 0 with an id of its own, so the consumer steps over it.
///
/// A record's message id is its key under `key` (the image's own). The truth knows a
/// message by its key's bytes, not by that hash: `first` maps each key to the first
/// offset that carries it.
pub struct PartitionLog {
    /// The partition.
    pub partition: i32,
    key: IdKey,
    /// Each record, by offset.
    pub records: Vec<Option<Record>>,
    first: HashMap<Vec<u8>, usize>,
}

impl PartitionLog {
    /// An empty read of partition `p`, its ids under `key`.
    pub fn new(partition: i32, key: IdKey) -> Self {
        Self {
            partition,
            key,
            records: Vec::new(),
            first: HashMap::new(),
        }
    }

    /// The message idem applies for a placeholder at `offset` of partition `p`.
    fn placeholder(&self, offset: usize) -> Message {
        Message {
            id: self.offset_id(offset),
            producer: 0,
            epoch: 0,
            seq: offset as u32 + 1,
            amount: 0,
        }
    }

    /// The id of a record by its place: partition and offset (a keyless record with
    /// `--keyless offset`, a placeholder). It is the hash of a NUL byte and the place,
    /// which no printable key spells.
    fn offset_id(&self, offset: usize) -> MessageId {
        MessageId::keyed(&self.key, &self.place(offset))
    }

    /// The bytes of a place's id ([`super::record::place`]).
    fn place(&self, offset: usize) -> Vec<u8> {
        place(self.partition, offset as Offset)
    }
}

impl Log<Message> for PartitionLog {
    fn end(&self) -> Option<Offset> {
        Some(self.records.len() as u64)
    }

    fn get(&self, offset: Offset) -> Option<Event<Message>> {
        let i = usize::try_from(offset).ok()?;
        let payload = match self.records.get(i)? {
            Some((m, _, _)) => *m,
            None => self.placeholder(i),
        };
        Some(Event { offset, payload })
    }
}

impl Truth for PartitionLog {
    /// The first offset with this record's key bytes (keyless records and placeholders
    /// are their own message).
    fn canonical(&self, offset: Offset) -> Offset {
        match usize::try_from(offset)
            .ok()
            .and_then(|i| self.records.get(i))
        {
            Some(Some((_, Some(k), _))) => self.first.get(k).map_or(offset, |&i| i as Offset),
            _ => offset,
        }
    }
}

/// One partition as read: its log and what the broker said about it.
pub struct PartitionRead {
    /// The records read, by offset.
    pub log: PartitionLog,
    /// The broker's end offset (ListOffsets, latest), asked once reading was done.
    pub end_offset: i64,
    /// Records fetched (distinct offsets).
    pub records_read: u64,
    /// Records stepped over with `--on-bad-record skip`.
    pub skipped: Vec<Skipped>,
    /// The sum of the |amounts| read: kept under a 64-bit total.
    pub sum: i64,
}

/// What a read of a partition found, for the report.
#[derive(Debug, Clone, Default)]
pub struct ReadFacts {
    /// Records fetched (distinct offsets).
    pub records_read: u64,
    /// The broker's end offset (ListOffsets, latest), asked once reading was done.
    pub end_offset: i64,
    /// The highest offset fetched.
    pub highest: Option<u64>,
    /// Records stepped over with `--on-bad-record skip`.
    pub skipped: Vec<Skipped>,
}

impl ReadFacts {
    /// Records were fetched at or past the broker's end offset: the broker's count of
    /// its own partition is short, so no verdict built on it can be trusted.
    pub fn short_read(&self) -> bool {
        self.highest.is_some_and(|h| h as i64 >= self.end_offset)
    }
}

impl PartitionRead {
    /// What this read found.
    pub fn facts(&self) -> ReadFacts {
        ReadFacts {
            records_read: self.records_read,
            end_offset: self.end_offset,
            highest: self.log.len().checked_sub(1),
            skipped: self.skipped.clone(),
        }
    }

    /// A read of partition `p` with nothing in it yet, its ids under `key`.
    pub fn new(partition: i32, key: IdKey) -> Self {
        Self {
            log: PartitionLog::new(partition, key),
            end_offset: 0,
            records_read: 0,
            skipped: Vec::new(),
            sum: 0,
        }
    }

    /// Adds the record at `offset` of `topic` with `key` and `value` (a record it already
    /// holds is ignored); whether it was new. A bad record is skipped by name or
    /// refused, as `rules` say.
    pub fn ingest(
        &mut self,
        topic: &str,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        rules: &ReadRules,
    ) -> anyhow::Result<bool> {
        let p = self.log.partition;
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        anyhow::ensure!(
            offset < MAX_RECORDS,
            idem_lab::error::Usage(format!(
                "{topic} partition {p} has a record at offset {offset}; idem reads up to {MAX_RECORDS} records a partition"
            ))
        );
        let records = &mut self.log.records;
        if records.len() <= offset {
            records.resize(offset + 1, None);
        }
        if records[offset].is_some() || self.skipped.iter().any(|s| s.offset == offset) {
            return Ok(false);
        }
        self.records_read += 1;
        match checked(self.sum, key, value, rules) {
            Ok((keyed, amount, s)) => {
                self.sum = s;
                let log = &mut self.log;
                let id_key = key.filter(|_| keyed);
                if let Some(k) = id_key {
                    let first = log.first.entry(k.to_vec()).or_insert(offset);
                    *first = (*first).min(offset);
                }
                let m = message(&log.key, p, offset as Offset, id_key, amount);
                log.records[offset] = Some((
                    m,
                    id_key.map(<[u8]>::to_vec),
                    String::from_utf8_lossy(value.unwrap_or_default()).into_owned(),
                ));
            }
            Err(why) if rules.on_bad == OnBadRecord::Skip => self.skipped.push(Skipped {
                partition: p,
                offset,
                why,
            }),
            Err(why) => {
                return Err(usage(format!(
                    "{topic} partition {p} offset {offset}: {why} (--on-bad-record skip steps over such records)"
                )));
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::payment_of as payment;
    use super::*;
    use std::time::Duration;

    const ADA: &[u8] = br#"{"payer":"ada","amount":5}"#;
    const BO: &[u8] = br#"{"payer":"bo","amount":3}"#;

    fn rules(on_bad: OnBadRecord, keyless: Keyless, by_id: bool) -> ReadRules {
        ReadRules {
            on_bad,
            keyless,
            by_id,
            ..ReadRules::LAB
        }
    }

    fn read() -> PartitionRead {
        PartitionRead::new(2, IdKey::PUBLIC)
    }

    #[test]
    fn a_payment_is_its_amount_and_whether_it_is_keyed() {
        let r = rules(OnBadRecord::Stop, Keyless::Refuse, false);
        assert_eq!(payment(Some(b"p17"), Some(ADA), &r), Ok((true, 5)));
        assert_eq!(payment(None, Some(BO), &r), Ok((false, 3)));
        let negative = br#"{"payer":"cy","amount":-4}"#;
        assert_eq!(payment(Some(b"p1"), Some(negative), &r), Ok((true, -4)));
    }

    #[test]
    fn a_record_that_is_no_payment_says_why() {
        let r = rules(OnBadRecord::Stop, Keyless::Refuse, false);
        assert_eq!(
            payment(Some(b"k"), None, &r),
            Err("the record has no value (null)".into())
        );
        let not_json = payment(Some(b"k"), Some(b"hello"), &r).unwrap_err();
        assert!(not_json.starts_with("not a payment ("), "{not_json}");
        let no_amount = payment(Some(b"k"), Some(br#"{"payer":"ada"}"#), &r).unwrap_err();
        assert!(no_amount.contains("missing field `amount`"), "{no_amount}");
    }

    #[test]
    fn a_keyless_record_is_refused_only_by_an_id_store_that_refuses_it() {
        let refuse = rules(OnBadRecord::Stop, Keyless::Refuse, true);
        let why = payment(None, Some(ADA), &refuse).unwrap_err();
        assert!(why.starts_with("the record has no key"), "{why}");
        let by_place = rules(OnBadRecord::Stop, Keyless::Offset, true);
        assert_eq!(payment(None, Some(ADA), &by_place), Ok((false, 5)));
        let no_ids = rules(OnBadRecord::Stop, Keyless::Refuse, false);
        assert_eq!(payment(None, Some(ADA), &no_ids), Ok((false, 5)));
    }

    #[test]
    fn a_bad_record_is_skipped_by_name_under_skip() {
        let r = rules(OnBadRecord::Skip, Keyless::Refuse, false);
        let mut read = read();
        assert!(read.ingest("t", 0, Some(b"p1"), Some(ADA), &r).unwrap());
        assert!(read.ingest("t", 1, Some(b"p2"), Some(b"oops"), &r).unwrap());
        assert!(read.ingest("t", 2, Some(b"p3"), Some(BO), &r).unwrap());
        assert_eq!(read.records_read, 3);
        assert_eq!(read.skipped.len(), 1);
        assert_eq!((read.skipped[0].partition, read.skipped[0].offset), (2, 1));
        assert!(read.log.records[1].is_none());
        assert_eq!(read.sum, 8);
        // The skipped offset is a placeholder of amount 0: the truth excludes it.
        assert_eq!(read.log.true_total(), 8);
        assert_eq!(read.log.get(1).map(|e| e.payload.amount), Some(0));
    }

    #[test]
    fn a_bad_record_is_refused_under_stop() {
        let r = rules(OnBadRecord::Stop, Keyless::Refuse, false);
        let mut read = read();
        let e = read.ingest("t", 4, Some(b"p1"), None, &r).unwrap_err();
        assert!(e.is::<idem_lab::error::Usage>());
        assert_eq!(
            e.to_string(),
            "t partition 2 offset 4: the record has no value (null) (--on-bad-record skip steps over such records)"
        );
        assert!(read.skipped.is_empty());
        assert_eq!(read.records_read, 1);
    }

    #[test]
    fn a_record_read_twice_counts_once() {
        let r = rules(OnBadRecord::Skip, Keyless::Refuse, false);
        let mut read = read();
        assert!(read.ingest("t", 0, Some(b"p1"), Some(ADA), &r).unwrap());
        assert!(!read.ingest("t", 0, Some(b"p1"), Some(ADA), &r).unwrap());
        assert!(read.ingest("t", 1, None, None, &r).unwrap());
        assert!(!read.ingest("t", 1, None, None, &r).unwrap());
        assert_eq!((read.records_read, read.skipped.len(), read.sum), (2, 1, 5));
    }

    #[test]
    fn amounts_past_a_64_bit_total_are_a_bad_record() {
        let r = rules(OnBadRecord::Skip, Keyless::Refuse, false);
        let mut read = read();
        let big = format!(r#"{{"payer":"ada","amount":{}}}"#, i64::MAX - 1);
        assert!(
            read.ingest("t", 0, Some(b"a"), Some(big.as_bytes()), &r)
                .unwrap()
        );
        assert!(read.ingest("t", 1, Some(b"b"), Some(BO), &r).unwrap());
        assert_eq!(read.sum, i64::MAX - 1);
        assert_eq!(
            read.skipped[0].why,
            "its amount 3 takes the partition's amounts past a 64-bit total"
        );
        let min = format!(r#"{{"payer":"ada","amount":{}}}"#, i64::MIN);
        let mut other = PartitionRead::new(0, IdKey::PUBLIC);
        assert!(
            other
                .ingest("t", 0, Some(b"a"), Some(min.as_bytes()), &r)
                .unwrap()
        );
        assert_eq!(other.sum, i64::MAX, "|i64::MIN| counts as i64::MAX");
        assert!(other.ingest("t", 1, Some(b"b"), Some(BO), &r).unwrap());
        assert_eq!(other.skipped.len(), 1);
    }

    #[test]
    fn a_record_past_the_most_a_partition_holds_is_refused() {
        let r = rules(OnBadRecord::Skip, Keyless::Refuse, false);
        let mut read = read();
        let e = read
            .ingest("t", MAX_RECORDS as i64, Some(b"a"), Some(ADA), &r)
            .unwrap_err();
        assert!(e.is::<idem_lab::error::Usage>());
        assert_eq!(
            e.to_string(),
            "t partition 2 has a record at offset 1048576; idem reads up to 1048576 records a partition"
        );
        assert_eq!((read.records_read, read.log.len()), (0, 0));
    }

    #[test]
    fn the_truth_counts_each_key_once_at_its_first_offset() {
        let r = rules(OnBadRecord::Stop, Keyless::Offset, true);
        let mut read = read();
        // Out of order: the resend at 3 arrives before its original at 1.
        for (o, k, v) in [
            (3, Some(&b"p17"[..]), ADA),
            (1, Some(b"p17"), ADA),
            (4, Some(b"p18"), BO),
            (5, None, BO),
            (6, None, BO),
        ] {
            assert!(read.ingest("t", o, k, Some(v), &r).unwrap());
        }
        let log = &read.log;
        assert_eq!(log.len(), 7);
        assert_eq!(log.canonical(3), 1);
        assert_eq!(log.canonical(1), 1);
        assert_eq!(log.canonical(6), 6, "a keyless record is its own message");
        assert_eq!(log.canonical(0), 0, "a placeholder is its own message");
        // p17 once (5), p18 (3), two keyless records (3 + 3).
        assert_eq!(log.true_total(), 14);
        assert_eq!(read.sum, 19);
        let id = |o: Offset| log.get(o).map(|e| e.payload.id);
        assert_eq!(id(1), id(3));
        assert_ne!(id(5), id(6));
        assert_eq!(id(1), Some(MessageId::keyed(&IdKey::PUBLIC, b"p17")));
        assert_eq!(id(5), Some(MessageId::keyed(&IdKey::PUBLIC, b"\x002@5")));
    }

    #[test]
    fn an_id_is_made_of_the_key_or_the_place() {
        let r = rules(OnBadRecord::Stop, Keyless::Offset, true);
        let mut read = read();
        assert!(read.ingest("t", 1, Some(b"p9"), Some(ADA), &r).unwrap());
        assert!(read.ingest("t", 2, None, Some(ADA), &r).unwrap());
        let id = |o| read.log.get(o).unwrap().payload.id;
        assert_eq!(id(0), MessageId::keyed(&IdKey::PUBLIC, b"\x002@0"));
        assert_eq!(id(1), MessageId::keyed(&IdKey::PUBLIC, b"p9"));
        assert_eq!(id(2), MessageId::keyed(&IdKey::PUBLIC, b"\x002@2"));
        let placeholder = read.log.get(0).unwrap().payload;
        assert_eq!((placeholder.seq, placeholder.amount), (1, 0));
        assert_eq!(read.log.get(2).unwrap().payload.seq, 3);
        assert_eq!(
            read.log.records[2].as_ref().unwrap().2,
            r#"{"payer":"ada","amount":5}"#
        );
        assert!(read.log.get(3).is_none());
    }

    #[test]
    fn a_read_past_the_end_offset_is_short() {
        let r = rules(OnBadRecord::Stop, Keyless::Refuse, false);
        let mut read = read();
        for o in 0..3 {
            assert!(read.ingest("t", o, Some(b"k"), Some(ADA), &r).unwrap());
        }
        read.end_offset = 3;
        assert!(!read.facts().short_read());
        read.end_offset = 2;
        assert!(read.facts().short_read());
    }

    #[test]
    fn a_read_is_done_at_the_end_offset_after_the_quiet_period() {
        let r = ReadRules::LAB;
        let idle = Duration::from_millis(300);
        assert!(r.done(10, 10, idle));
        assert!(r.done(11, 10, idle));
        assert!(!r.done(9, 10, Duration::from_secs(5)), "short of the end");
        assert!(!r.done(10, 10, Duration::from_millis(299)), "not quiet yet");
        assert!(r.done(0, -1, idle), "no end offset: nothing to reach");
        assert!(!r.overdue(Duration::from_millis(29_999)));
        assert!(r.overdue(Duration::from_secs(30)));
    }

    #[test]
    fn a_consume_gives_30_s_more_than_its_quiet_period() {
        let r = ReadRules::consume(1500, OnBadRecord::Skip, Keyless::Offset, false, true);
        assert_eq!(r.deadline, Duration::from_millis(31_500));
        assert_eq!(r.idle, Duration::from_millis(1500));
        assert_eq!(
            (r.on_bad, r.keyless, r.by_id, r.follow),
            (OnBadRecord::Skip, Keyless::Offset, false, true)
        );
    }
}
