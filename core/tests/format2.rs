//! Flash images in journal format 2 (every record in a slot of its type's largest size),
//! written by idem-core at format 2 and checked in (`tests/fixtures/format2-*.bin`), and
//! exactly what each holds when read back. A later format must read or migrate these
//! images to the same records and the same consumer, so the old format stays tested after
//! the code that wrote it is gone: `today_writes_these_images` pins the files to what the
//! format-2 code writes, and goes when the format moves (set `IDEM_WRITE_FIXTURES=1` to
//! write them again).
//!
//! - `format2-journal-u4.bin` and `format2-journal-u8.bin`: a journal of varint readings
//!   on 3 pages of 512 bytes (4-byte and 8-byte write units), 65 records, a write cut
//!   short and one record after it (which counts the torn slot), wrapped into page 0.
//! - `format2-window.bin`: a consumer of commands behind a message-id window of 8 on 4
//!   pages of 1 KiB (2 for positions, 2 for the store), cut once in a step, 100 events
//!   in: it resumes at 100 and skips resends of the ids in its window.

use idem_core::MaxSize;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
use idem_core::journal::{Journal, PageState, PageSummary, Region};
use idem_core::log::{Event, Received};
use idem_core::persist::Layout;
use idem_core::store::MessageIdWindow;
use idem_core::testing::flash::{MemFlash, PowerCut};
use serde::{Deserialize, Serialize};

#[path = "support/doses.rs"]
mod doses;
use doses::{Dose, PumpV1 as Pump};

/// A record of varints: its size on flash varies with its values (2 to 20 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
struct Reading {
    count: u64,
    total: i64,
}

/// The `i`-th reading appended.
fn reading(i: u64) -> Reading {
    Reading {
        count: i,
        total: (i * i * 37) as i64 - 5_000,
    }
}

type U4 = MemFlash<3, 512>;
type U8 = MemFlash<3, 512, 8>;
const REGION: Region = Region { start: 0, pages: 3 };
const TAG: u32 = 0x0F02_0001;
/// Readings appended before the cut, and one after it.
const READINGS: u64 = 65;

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}"))
}

/// Appends readings 0 to 64, cuts the next append in its first unit, powers on, opens
/// again and appends reading 65: format 2's image of it.
macro_rules! journal_image {
    ($flash:ty) => {{
        let mut flash = <$flash>::new();
        flash.seed_noise(0x0F02);
        let (mut j, _) = Journal::<Reading>::open(&mut flash, REGION, TAG).unwrap();
        for i in 0..READINGS {
            j.append(&mut flash, &reading(i)).unwrap();
        }
        flash.schedule_power_cut(PowerCut::AtWordWrite(1));
        assert!(j.append(&mut flash, &reading(999)).is_err());
        flash.power_on();
        let (mut j, _) = Journal::<Reading>::open(&mut flash, REGION, TAG).unwrap();
        j.append(&mut flash, &reading(READINGS)).unwrap();
        flash.pages().concat()
    }};
}

/// What a journal image holds, read as a person would check it: the newest record and
/// its sequence number, each page's summary, and the records from the newest back (count,
/// and whether each follows on from the one after it).
type Read = (
    Option<Reading>,
    Option<u32>,
    Vec<PageSummary>,
    Vec<(u64, bool)>,
);

macro_rules! read_journal {
    ($flash:ty, $image:expr) => {{
        let mut flash = <$flash>::from_image($image);
        let (j, newest) = Journal::<Reading>::open(&mut flash, REGION, TAG).unwrap();
        let pages = (0..REGION.pages)
            .map(|p| j.summarize(&mut flash, p).unwrap())
            .collect::<Vec<_>>();
        let mut back = Vec::new();
        j.recent(&mut flash, |_, r, adjacent| {
            back.push((r.count, adjacent));
            true
        })
        .unwrap();
        let read: Read = (newest, j.newest_seq(), pages, back);
        read
    }};
}

/// What a journal image of readings 0 to 65 must read as: reading 65 newest, numbered 67
/// (after the torn slot, 66); each page's valid, torn and blank slots and newest sequence
/// number; and the records from 65 back to the oldest still on flash (`oldest`), each
/// following on (65 over the torn slot it counts).
fn expected(pages: [(u32, u32, u32, u32); 3], oldest: u64) -> Read {
    let pages = pages.map(|(valid, torn, blank, newest)| PageSummary {
        state: PageState::Valid,
        valid,
        torn,
        blank,
        newest_seq: Some(newest),
    });
    let mut back = vec![(65, true)];
    back.extend((oldest..READINGS).rev().map(|i| (i, true)));
    (Some(reading(65)), Some(67), pages.to_vec(), back)
}

#[test]
fn a_format_2_journal_on_4_byte_units_reads_back_exactly() {
    // 24-byte slots (20 B at most and the check word), 20 to a page after the 20-byte
    // header: 65 records fill pages 0 to 2 and 5 slots more, in page 0 again (its first
    // pass erased); the torn slot is the 6th, reading 65 the 7th, and readings 20 to 64
    // are still on flash.
    assert_eq!(Journal::<Reading>::SLOT, 24);
    let image = std::fs::read(fixture("format2-journal-u4.bin")).unwrap();
    let pages = [(6, 1, 13, 67), (20, 0, 0, 40), (20, 0, 0, 60)];
    assert_eq!(read_journal!(U4, &image), expected(pages, 20));
}

#[test]
fn a_format_2_journal_on_8_byte_units_reads_back_exactly() {
    // 32-byte slots (20 B padded to 24, the check word's unit), 15 to a page after the
    // 24-byte header: 65 records go round the ring once and 20 slots more, into page 1
    // again (the torn slot is its 6th); readings 30 to 64 are still on flash.
    assert_eq!(Journal::<Reading>::slot_on::<U8>(), 32);
    let image = std::fs::read(fixture("format2-journal-u8.bin")).unwrap();
    let pages = [(15, 0, 0, 60), (6, 1, 8, 67), (15, 0, 0, 45)];
    assert_eq!(read_journal!(U8, &image), expected(pages, 30));
}

type Pumps = MemFlash<4, 1024>;
const LAYOUT: Layout = Layout::from_pages::<Pumps>(0, 2, 2, 0x0F02);
const W: usize = 8;

fn window() -> MessageIdWindow<Pump, W> {
    MessageIdWindow::new(Pump, W).unwrap()
}

fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(4).unwrap())
}

/// The steps to offset 60, a cut in the third unit write after, a boot, and the steps to
/// offset 100: format 2's image of it.
fn window_image() -> Vec<u8> {
    let events = doses::commands(100);
    let stream = Received::new(&events, Some(100));
    let mut flash = Pumps::new();
    flash.seed_noise(0x0F02);
    let mut c = Consumer::open(&mut flash, LAYOUT, window(), config()).unwrap();
    while c.resume_at() < 60 {
        c.step(&mut flash, &stream).unwrap();
    }
    flash.schedule_power_cut(PowerCut::AtWordWrite(3));
    while c.step(&mut flash, &stream).is_ok() {}
    flash.power_on();
    let mut c = Consumer::open(&mut flash, LAYOUT, window(), config()).unwrap();
    c.run(&mut flash, &stream).unwrap();
    flash.pages().concat()
}

#[test]
fn a_format_2_window_resumes_and_skips_the_resends_after_it() {
    let image = std::fs::read(fixture("format2-window.bin")).unwrap();
    let mut flash = Pumps::from_image(&image);
    let mut c = Consumer::open(&mut flash, LAYOUT, window(), config()).unwrap();
    assert_eq!(c.resume_at(), 100);
    // Offsets 0 to 99: 75 new ids, 15 of them of 5 ml (rejected), 60 dosed.
    assert_eq!((c.state().state, c.rejected()), (150, 15));
    let window: Vec<u64> = c.state().seen.iter().map(|id| id.0).collect();
    assert_eq!(window, vec![189, 190, 192, 193, 194, 196, 197, 198]);
    // Then the gateway resends 198 (4 ml) and 189 (rejected) from the image's window,
    // and sends 300 (2 ml): only 300 is applied.
    let mut events = doses::commands(100);
    for (offset, id, ml) in [(100, 198, 4), (101, 189, 5), (102, 300, 2)] {
        events.push(Event {
            offset,
            payload: Dose { id, ml },
        });
    }
    c.run(&mut flash, &Received::new(&events, Some(103)))
        .unwrap();
    assert_eq!((c.state().state, c.rejected()), (152, 15));
}

#[test]
fn today_writes_these_images() {
    let images = [
        ("format2-journal-u4.bin", journal_image!(U4)),
        ("format2-journal-u8.bin", journal_image!(U8)),
        ("format2-window.bin", window_image()),
    ];
    for (name, image) in images {
        if std::env::var_os("IDEM_WRITE_FIXTURES").is_some() {
            std::fs::create_dir_all(fixture("")).unwrap();
            std::fs::write(fixture(name), &image).unwrap();
        }
        assert!(
            std::fs::read(fixture(name)).unwrap() == image,
            "{name} differs from what format 2 writes"
        );
    }
}
