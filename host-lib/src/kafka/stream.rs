//! A partition read as a stream, one record at a time in offset order, with nothing of
//! it kept but what a rule needs: [`Judge`] says what each record is (a payment, a bad
//! record stepped over, or a refusal), [`Window`] holds the records a consumer has not
//! yet moved past, as the core reads a live log, and [`TruthFold`] folds a second,
//! independent read into the true total: each distinct key once, at its first amount.

use crate::truth::FirstAmounts;

use super::applied::Id;
use idem_core::log::{Event, IdKey, Offset, Received};
use idem_payments::Message;

use super::record::{OnBadRecord, ReadRules, Skipped, checked, message};
// The record's rules, where `cmd::kafka` has always found them.
pub use super::record::place;
use super::trust::ReadFacts;
use idem_lab::error::usage;

/// What a record is to idem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged<'a> {
    /// A payment: its key when it is keyed (its message id), and its amount.
    Payment(Option<&'a [u8]>, i64),
    /// A bad record stepped over (`--on-bad-record skip`): a placeholder of amount 0.
    Skipped,
}

/// The rules over one partition read in offset order from offset 0: which records are
/// payments, which are stepped over, and which stop the read. Besides each record's own
/// rules it keeps the sum of the |amounts| read, which must stay within a 64-bit total.
/// Two reads of the same partition judge each record alike.
#[derive(Debug, Clone)]
pub struct Judge {
    rules: ReadRules,
    partition: i32,
    /// The sum of the |amounts| of the payments so far.
    sum: i64,
    /// The offset after the last record judged.
    next: Offset,
}

impl Judge {
    /// A judge of partition `partition`, from offset 0.
    pub fn new(partition: i32, rules: ReadRules) -> Self {
        Self {
            rules,
            partition,
            sum: 0,
            next: 0,
        }
    }

    /// The offset after the last record judged: where a read goes on.
    pub fn next(&self) -> Offset {
        self.next
    }

    /// Judges the record at `offset` of `topic`: `None` for one at or before a record
    /// judged already (a fetch can deliver it twice), a stepped-over record with why in
    /// `skipped`, or the refusal of a bad record under `--on-bad-record stop`.
    pub fn judge<'a>(
        &mut self,
        topic: &str,
        offset: Offset,
        key: Option<&'a [u8]>,
        value: Option<&[u8]>,
        skipped: &mut dyn FnMut(Skipped),
    ) -> anyhow::Result<Option<Judged<'a>>> {
        if offset < self.next {
            return Ok(None);
        }
        self.next = offset + 1;
        let p = self.partition;
        match checked(self.sum, key, value, &self.rules) {
            Ok((keyed, amount, s)) => {
                self.sum = s;
                Ok(Some(Judged::Payment(key.filter(|_| keyed), amount)))
            }
            Err(why) if self.rules.on_bad == OnBadRecord::Skip => {
                skipped(Skipped {
                    partition: p,
                    offset: offset as usize,
                    why,
                });
                Ok(Some(Judged::Skipped))
            }
            Err(why) => Err(usage(format!(
                "{topic} partition {p} offset {offset}: {why} (--on-bad-record skip steps over such records)"
            ))),
        }
    }
}

/// The records of one partition a consumer has not yet moved past, from its next offset
/// up to `end` (the end offset read when the run began), at consecutive offsets: an offset
/// with no record (a transaction marker, a record of an aborted transaction under
/// `read_committed`, a bad record stepped over) holds a placeholder of amount 0 with an id
/// of its own, so the consumer steps over it. Records at `end` or after are left for a
/// later run.
#[derive(Debug)]
pub struct Window {
    partition: i32,
    key: IdKey,
    events: Vec<Event<Message>>,
    /// Each event's id as the record carries it, beside `events`, when they are kept
    /// ([`Window::keeping_ids`]).
    ids: Option<Vec<Id>>,
    /// The offset after the last one held (or passed).
    next: Offset,
    end: Offset,
}

impl Window {
    /// An empty window of `partition` from offset `from` (the consumer's next) to `end`,
    /// its ids under `key`.
    pub fn new(partition: i32, key: IdKey, from: Offset, end: Offset) -> Self {
        Self {
            partition,
            key,
            events: Vec::new(),
            ids: None,
            next: from,
            end,
        }
    }

    /// The same window, keeping each event's id as its record carries it (its key, as
    /// bytes), for a log of the ids applied.
    pub fn keeping_ids(self) -> Self {
        Self {
            ids: Some(Vec::new()),
            ..self
        }
    }

    /// The id of the event held at `offset` as its record carries it, when ids are kept.
    pub fn id_at(&self, offset: Offset) -> Option<&Id> {
        let first = self.events.first()?.offset;
        let i = usize::try_from(offset.checked_sub(first)?).ok()?;
        self.ids.as_ref()?.get(i)
    }

    /// The events held.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether it holds no event.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Whether it holds every offset up to its end.
    pub fn complete(&self) -> bool {
        self.next >= self.end
    }

    /// The end offset it reads to.
    pub fn end(&self) -> Offset {
        self.end
    }

    /// Reads on to `end` (a later end offset, under `--follow`).
    pub fn extend_to(&mut self, end: Offset) {
        self.end = self.end.max(end);
    }

    /// Holds the record at `offset`, as judged, after placeholders for any offsets before
    /// it that had no record. One before the window's next offset, or at its end or past
    /// it, is not held.
    pub fn push(&mut self, offset: Offset, judged: Judged<'_>) {
        if offset < self.next || offset >= self.end {
            return;
        }
        self.pass_to(offset);
        let (payload, id) = match judged {
            Judged::Payment(k, amount) => (
                message(&self.key, self.partition, offset, k, amount),
                Id::of(k),
            ),
            Judged::Skipped => (self.placeholder(offset), Id::Gap),
        };
        self.events.push(Event { offset, payload });
        if let Some(ids) = self.ids.as_mut() {
            ids.push(id);
        }
        self.next = offset + 1;
    }

    /// Judges the record at `offset` (as the broker numbers it) by `judge` and holds it
    /// ([`Window::push`]): its offset and what it was judged, unless `judge` has judged
    /// it already (or the offset is negative, which no record has). A record stepped
    /// over goes to `skipped` with why.
    pub fn take<'a>(
        &mut self,
        judge: &mut Judge,
        (topic, offset): (&str, i64),
        key: Option<&'a [u8]>,
        value: Option<&[u8]>,
        skipped: &mut dyn FnMut(Skipped),
    ) -> anyhow::Result<Option<(Offset, Judged<'a>)>> {
        let Ok(offset) = Offset::try_from(offset) else {
            return Ok(None);
        };
        let judged = judge.judge(topic, offset, key, value, skipped)?;
        if let Some(j) = judged {
            self.push(offset, j);
        }
        Ok(judged.map(|j| (offset, j)))
    }

    /// Placeholders up to `position` (not past the end): the fetch position moved past
    /// offsets with no record to deliver.
    pub fn pass_to(&mut self, position: Offset) {
        while self.next < position.min(self.end) {
            let offset = self.next;
            let payload = self.placeholder(offset);
            self.events.push(Event { offset, payload });
            if let Some(ids) = self.ids.as_mut() {
                ids.push(Id::Gap);
            }
            self.next += 1;
        }
    }

    fn placeholder(&self, offset: Offset) -> Message {
        message(&self.key, self.partition, offset, None, 0)
    }

    /// The events held, as the core reads a live log: its end is known once the window
    /// holds every offset up to it (the last checkpoint closes there).
    pub fn log(&self) -> Received<'_, Event<Message>> {
        Received::new(&self.events, self.complete().then_some(self.end))
    }

    /// The events held, as a log that ends at the last of them: a checkpoint closes
    /// there (a group's member, at each pause in a live stream).
    pub fn log_to_here(&self) -> Received<'_, Event<Message>> {
        Received::new(&self.events, Some(self.next))
    }

    /// Forgets the events before `next`, the consumer's next offset.
    pub fn consumed_to(&mut self, next: Offset) {
        let done = self.events.partition_point(|e| e.offset < next);
        self.events.drain(..done);
        if let Some(ids) = self.ids.as_mut() {
            ids.drain(..done);
        }
    }
}

/// The true total of a partition up to an end offset, folded from a read of its own:
/// each distinct key (as bytes, never a hash of it) counted once with the amount of its
/// first record, each keyless record as its own message, stepped-over records excluded.
/// Records fetched at the end offset or past it are counted as read but not folded.
#[derive(Debug)]
pub struct TruthFold {
    judge: Judge,
    end: Offset,
    seen: FirstAmounts,
    /// Distinct offsets fetched.
    pub records_read: u64,
    /// The highest offset fetched.
    pub highest: Option<Offset>,
    /// The records stepped over, in offset order.
    pub skipped: Vec<Skipped>,
}

impl TruthFold {
    /// A fold of `partition` up to `end`, judged by `rules`.
    pub fn new(partition: i32, rules: ReadRules, end: Offset) -> Self {
        Self {
            judge: Judge::new(partition, rules),
            end,
            seen: FirstAmounts::default(),
            records_read: 0,
            highest: None,
            skipped: Vec::new(),
        }
    }

    /// The true total.
    pub fn total(&self) -> i64 {
        self.seen.total()
    }

    /// Whether every offset before its end has been read (`position`: the fetch
    /// position, past offsets with no record to deliver).
    pub fn reached(&self, position: Option<Offset>) -> bool {
        let read = self.highest.map_or(0, |h| h + 1).max(position.unwrap_or(0));
        read >= self.end
    }

    /// Folds the record at `offset` of `topic`.
    pub fn ingest(
        &mut self,
        topic: &str,
        offset: Offset,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> anyhow::Result<()> {
        let skipped = &mut self.skipped;
        let Some(judged) = self
            .judge
            .judge(topic, offset, key, value, &mut |s| skipped.push(s))?
        else {
            return Ok(());
        };
        self.records_read += 1;
        self.highest = Some(offset);
        if offset >= self.end {
            return Ok(());
        }
        if let Judged::Payment(k, amount) = judged {
            // Within 64 bits: the judge keeps the sum of |amounts| there.
            self.seen
                .add(k, amount)
                .map_err(|e| anyhow::anyhow!("at offset {offset}: {e}"))?;
        }
        Ok(())
    }

    /// What the read found, with the broker's end offset asked once it was done.
    pub fn facts(self, end_offset: i64) -> ReadFacts {
        ReadFacts {
            records_read: self.records_read,
            end_offset,
            highest: self.highest,
            skipped: self.skipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::record::{Keyless, payment_of};
    use idem_core::log::{Log, MessageId};

    const ADA: &[u8] = br#"{"payer":"ada","amount":5}"#;
    const BO: &[u8] = br#"{"payer":"bo","amount":3}"#;

    fn rules(on_bad: OnBadRecord) -> ReadRules {
        ReadRules {
            on_bad,
            keyless: Keyless::Offset,
            by_id: true,
            ..ReadRules::LAB
        }
    }

    #[test]
    fn the_truth_counts_each_key_once_and_keyless_records_each() {
        let mut t = TruthFold::new(0, rules(OnBadRecord::Skip), 6);
        for (o, k, v) in [
            (0, Some(&b"p17"[..]), Some(ADA)),
            (1, Some(b"p17"), Some(ADA)),
            (2, None, Some(BO)),
            (3, None, Some(BO)),
            (4, Some(b"p18"), Some(&b"oops"[..])),
            (5, Some(b"p18"), Some(BO)),
            // Past the end: read, not folded.
            (6, Some(b"p19"), Some(ADA)),
        ] {
            t.ingest("t", o, k, v).unwrap();
        }
        t.ingest("t", 5, Some(b"p18"), Some(BO)).unwrap(); // fetched twice
        assert_eq!(t.total(), 5 + 3 + 3 + 3);
        assert_eq!((t.records_read, t.highest), (7, Some(6)));
        assert_eq!(t.skipped.len(), 1);
        assert_eq!(t.skipped[0].offset, 4);
        let facts = t.facts(6);
        assert!(facts.short_read());
        assert!(
            !ReadFacts {
                end_offset: 7,
                ..facts
            }
            .short_read()
        );
    }

    #[test]
    fn a_bad_record_stops_the_read_with_its_place() {
        let mut t = TruthFold::new(2, rules(OnBadRecord::Stop), 10);
        t.ingest("t", 0, Some(b"a"), Some(ADA)).unwrap();
        let e = t.ingest("t", 1, Some(b"b"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t partition 2 offset 1: the record has no value (null) (--on-bad-record skip steps over such records)"
        );
        let big = format!(r#"{{"payer":"ada","amount":{}}}"#, i64::MAX);
        let mut o = TruthFold::new(0, rules(OnBadRecord::Stop), 10);
        o.ingest("o", 0, Some(b"a"), Some(big.as_bytes())).unwrap();
        let e = o
            .ingest("o", 1, Some(b"b"), Some(big.as_bytes()))
            .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "o partition 0 offset 1: its amount 9223372036854775807 takes the partition's amounts past a 64-bit total"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_payment_needs_a_string_payer_and_an_amount() {
        let r = rules(OnBadRecord::Stop);
        assert_eq!(payment_of(Some(b"k"), Some(ADA), &r), Ok((true, 5)));
        let escaped = br#"{"payer":"a\"da","amount":-2}"#;
        assert_eq!(payment_of(None, Some(escaped), &r), Ok((false, -2)));
        let number = payment_of(Some(b"k"), Some(br#"{"payer":7,"amount":1}"#), &r);
        assert!(number.unwrap_err().starts_with("not a payment ("));
        let refuse = ReadRules {
            keyless: Keyless::Refuse,
            ..r
        };
        assert!(
            payment_of(None, Some(ADA), &refuse)
                .unwrap_err()
                .starts_with("the record has no key")
        );
    }

    #[test]
    fn a_window_keeps_each_events_id_when_asked() {
        let mut w = Window::new(0, IdKey::PUBLIC, 3, 8).keeping_ids();
        w.push(3, Judged::Payment(Some(b"a"), 5));
        w.push(5, Judged::Payment(None, 4));
        w.push(6, Judged::Skipped);
        let ids: Vec<Option<&Id>> = (2..8).map(|o| w.id_at(o)).collect();
        let a = Id::Key("a".into());
        assert_eq!(
            ids,
            [
                None,
                Some(&a),
                Some(&Id::Gap),
                Some(&Id::Keyless),
                Some(&Id::Gap),
                None
            ]
        );
        w.consumed_to(5);
        assert_eq!((w.id_at(4), w.id_at(5)), (None, Some(&Id::Keyless)));
    }

    #[test]
    fn a_window_fills_gaps_and_stops_at_its_end() {
        let mut w = Window::new(1, IdKey::PUBLIC, 3, 8);
        w.push(2, Judged::Payment(Some(b"old"), 9)); // before the consumer's position
        w.push(3, Judged::Payment(Some(b"a"), 5));
        w.push(5, Judged::Payment(None, 4)); // offset 4: a marker
        w.push(6, Judged::Skipped);
        assert!(!w.complete());
        assert_eq!(w.log().end(), None, "the end is not reached");
        w.pass_to(9); // the position passed a marker at 7
        w.push(8, Judged::Payment(Some(b"late"), 1)); // past the end
        assert!(w.complete());
        let log = w.log();
        assert_eq!(log.end(), Some(8));
        let amounts: Vec<i64> = (3..8).map(|o| log.get(o).unwrap().payload.amount).collect();
        assert_eq!(amounts, [5, 0, 4, 0, 0]);
        assert_eq!(
            log.get(3).unwrap().payload.id,
            MessageId::keyed(&IdKey::PUBLIC, b"a")
        );
        assert_eq!(
            log.get(5).unwrap().payload.id,
            MessageId::keyed(&IdKey::PUBLIC, &place(1, 5))
        );
        assert_ne!(
            log.get(4).unwrap().payload.id,
            log.get(7).unwrap().payload.id
        );
        w.consumed_to(6);
        assert_eq!(w.len(), 2);
        assert_eq!(w.id_at(6), None, "ids are not kept unless asked");
        assert_eq!(w.log().get(6).map(|e| e.offset), Some(6));
        assert_eq!(w.log().get(5), None);
    }
}
