//! The adapter's order, without a broker: a scripted connection and a flash that logs its
//! writes into one timeline, so that every acknowledgement is seen after the record that
//! allows it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use embassy_futures::block_on;
use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use idem_core::journal::Region;
use idem_core::testing::flash::{FlashError, MemFlash};
use idem_example_mqtt_embassy_net::{End, Got, JOURNAL_PAGES, Seen, Session, Settings, Transport};
use idem_mqtt::receiver::Decided;

const SETTINGS: Settings<'static> = Settings {
    client_id: "idem-embassy-net",
    filter: "idem/payments",
    tag: 0x6E52_4D51,
};

const REGION: Region = Region {
    start: 0,
    pages: JOURNAL_PAGES,
};

/// What happened, in order: flash writes (consecutive ones as one), packets sent by
/// their first byte.
type Timeline = Rc<RefCell<Vec<&'static str>>>;

/// What the flash was asked for since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Asked {
    reads: u64,
    read_bytes: u64,
    words: u64,
    erases: u64,
}

/// The strict test flash, its writes noted in the timeline, every call counted.
struct Logged {
    flash: MemFlash<4, 4096>,
    timeline: Timeline,
    asked: Rc<Cell<Asked>>,
}

impl Logged {
    fn new(timeline: &Timeline) -> Self {
        Self {
            flash: MemFlash::new(),
            timeline: timeline.clone(),
            asked: Rc::default(),
        }
    }

    fn count(&self, f: impl FnOnce(&mut Asked)) {
        let mut a = self.asked.get();
        f(&mut a);
        self.asked.set(a);
    }
}

impl ErrorType for Logged {
    type Error = FlashError;
}

impl ReadNorFlash for Logged {
    const READ_SIZE: usize = 1;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        self.count(|a| (a.reads, a.read_bytes) = (a.reads + 1, a.read_bytes + bytes.len() as u64));
        self.flash.read(offset, bytes)
    }
    fn capacity(&self) -> usize {
        self.flash.capacity()
    }
}

impl NorFlash for Logged {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 4096;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        self.count(|a| a.erases += 1);
        self.timeline.borrow_mut().push("erase");
        self.flash.erase(from, to)
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        self.count(|a| a.words += bytes.len() as u64 / 4);
        let mut t = self.timeline.borrow_mut();
        if t.last() != Some(&"record") {
            t.push("record");
        }
        self.flash.write(offset, bytes)
    }
}

/// The broker's side, scripted: each read takes the next chunk; then the peer closes.
struct Script {
    chunks: Vec<Vec<u8>>,
    timeline: Timeline,
    sent: Vec<u8>,
    /// The flash's counts, at the last packet sent.
    asked: Rc<Cell<Asked>>,
    last: Asked,
    /// The most erases and words written between two packets sent.
    worst: (u64, u64),
}

impl Script {
    fn new(chunks: Vec<Vec<u8>>, flash: &Logged) -> Self {
        Self {
            chunks,
            timeline: flash.timeline.clone(),
            sent: Vec::new(),
            asked: flash.asked.clone(),
            last: Asked::default(),
            worst: (0, 0),
        }
    }
}

impl Transport for Script {
    type Error = ();

    async fn read(&mut self, buf: &mut [u8]) -> Result<Got, ()> {
        if self.chunks.is_empty() {
            return Ok(Got::Closed);
        }
        let chunk = self.chunks.remove(0);
        buf[..chunk.len()].copy_from_slice(&chunk);
        Ok(Got::Bytes(chunk.len()))
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), ()> {
        let name = match bytes[0] >> 4 {
            1 => "CONNECT",
            8 => "SUBSCRIBE",
            5 => "PUBREC",
            7 => "PUBCOMP",
            _ => "other",
        };
        self.timeline.borrow_mut().push(name);
        self.sent.extend_from_slice(bytes);
        let now = self.asked.get();
        let step = (now.erases - self.last.erases, now.words - self.last.words);
        self.worst = self.worst.max(step);
        self.last = now;
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), ()> {
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        0
    }
}

/// A QoS 2 PUBLISH of `payload` on idem/payments under identifier `pid`.
fn publish(pid: u16, payload: &[u8]) -> Vec<u8> {
    let topic = b"idem/payments";
    let mut p = vec![
        0x34,
        (2 + topic.len() + 2 + payload.len()) as u8,
        0,
        topic.len() as u8,
    ];
    p.extend_from_slice(topic);
    p.extend_from_slice(&pid.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

#[test]
fn each_acknowledgement_leaves_after_its_record() {
    let timeline = Timeline::default();
    let mut flash = Logged::new(&timeline);
    let mut session = Session::open(&mut flash, REGION, SETTINGS).unwrap();
    let first = publish(7, br#"{"id": "p1", "amount": 5}"#);
    // The PUBLISH split across two reads, a PUBREL and a second PUBLISH in one.
    let mut second = vec![0x62, 2, 0, 7];
    second.extend(publish(8, br#"{"id": "p2", "amount": 3}"#));
    let chunks = vec![
        vec![0x20, 2, 0, 0, 0x90, 3, 0, 1, 2],
        first[..10].to_vec(),
        first[10..].to_vec(),
        second,
        vec![0x62, 2, 0, 8],
    ];
    let mut link = Script::new(chunks, &flash);
    let mut decided = Vec::new();
    let mut seen = |s: Seen<'_>| {
        if let Seen::Decided(pid, d) = s {
            decided.push((pid, d));
        }
    };
    let end = block_on(session.connection(&mut flash, &mut link, &mut seen));
    assert_eq!(end, End::Closed);
    assert_eq!(
        decided,
        [(Some(7), Decided::Applied), (Some(8), Decided::Applied)]
    );
    assert_eq!(
        *timeline.borrow(),
        [
            "CONNECT",
            "SUBSCRIBE",
            "erase",
            "record",
            "PUBREC",
            "record",
            "PUBCOMP",
            "record",
            "PUBREC",
            "record",
            "PUBCOMP"
        ]
    );
    assert_eq!(
        link.sent[link.sent.len() - 16..],
        [0x50, 2, 0, 7, 0x70, 2, 0, 7, 0x50, 2, 0, 8, 0x70, 2, 0, 8]
    );
    // After a reset: the total and the identifiers the flash holds.
    let again = Session::open(&mut flash, REGION, SETTINGS).unwrap();
    assert_eq!((again.total(), again.figures().applied), (8, 2));
    assert!(again.client().receiver().held().is_empty());
}

/// The counts a reset costs on the nRF52840's geometry (4-byte words, 4 KiB pages, the
/// 4-page journal), for its README's times: 300 QoS 2 payments, each PUBLISH and PUBREL
/// a read of its own, then a boot on the journal they leave.
#[test]
fn what_a_step_and_a_boot_ask_of_the_flash() {
    let timeline = Timeline::default();
    let mut flash = Logged::new(&timeline);
    let mut session = Session::open(&mut flash, REGION, SETTINGS).unwrap();
    let mut chunks = vec![vec![0x20, 2, 0, 0, 0x90, 3, 0, 1, 2]];
    for i in 0..300u16 {
        let pid = i % 64 + 1;
        chunks.push(publish(
            pid,
            format!(r#"{{"id": "p{i}", "amount": 1}}"#).as_bytes(),
        ));
        chunks.push(vec![0x62, 2, 0, pid as u8]);
    }
    let mut link = Script::new(chunks, &flash);
    let end = block_on(session.connection(&mut flash, &mut link, &mut |_| {}));
    assert_eq!(end, End::Closed);
    assert_eq!(session.total(), 300);
    let run = flash.asked.get();
    let again = Session::open(&mut flash, REGION, SETTINGS).unwrap();
    let boot = flash.asked.get();
    assert_eq!(again.total(), 300);
    let booted = (
        boot.reads - run.reads,
        boot.read_bytes - run.read_bytes,
        boot.words - run.words,
    );
    println!(
        "300 payments: {} word writes, {} erases; the worst step (erases, words) {:?}; a boot (reads, bytes, words) {booted:?}",
        run.words, run.erases, link.worst
    );
    // Journal format 3, records at their encoded size (format 2's slots: 19,900 words
    // and 20 erases, the worst step 38 words, a boot 129 reads of 16,132 B). A boot reads
    // a page 512 bytes at a time: fewer reads, more bytes.
    assert_eq!((run.words, run.erases), (9_791, 10));
    assert_eq!(link.worst, (1, 22));
    assert_eq!(booted, (52, 22_688, 0));
}
