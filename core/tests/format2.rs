//! Flash images in journal format 2 (every record in a slot of its type's largest size),
//! written by idem-core at format 2 (before format 3 packed records at their encoded
//! size) and checked in (`tests/fixtures/format2-*.bin`), and exactly what each holds
//! when read back by today's code, which reads format 2 and goes on writing it in a page
//! of it being filled. A test pinned the files to what the format-2 code wrote until the
//! format moved; the code that wrote them is in the history, at format 2.
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
use idem_core::persist::{AppendedRecord, Layout, sink_tag};
use idem_core::store::MessageIdWindow;
use idem_core::testing::cuts::{Plan, Seen, sweep};
use idem_core::testing::flash::MemFlash;
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

/// Offsets in `format2-window-spread.bin`.
const SPREAD: u64 = 110;
/// Commands after them: two resends and 20 new ones.
const AFTER: u64 = 22;

/// The gateway's stream for the spread image: offsets 0 to 109 as the image consumed
/// them, then resends of the newest and the oldest id of its window (by [`model`]), and
/// 20 new commands, 400 to 419 (1 to 4 ml): enough to fill the format-2 page and go on
/// into a format-3 one.
fn after_the_image() -> Vec<Event<Dose>> {
    let mut events = doses::commands(SPREAD);
    let (_, _, window) = model(&events);
    let ml = |id: u64| {
        events
            .iter()
            .find(|e| e.payload.id == id)
            .unwrap()
            .payload
            .ml
    };
    let mut more = vec![
        (window[W - 1], ml(window[W - 1])),
        (window[0], ml(window[0])),
    ];
    more.extend((0..20).map(|i| (400 + i, i as u32 % 4 + 1)));
    for (i, (id, ml)) in more.into_iter().enumerate() {
        events.push(Event {
            offset: SPREAD + i as u64,
            payload: Dose { id, ml },
        });
    }
    events
}

/// What the pump must hold after `events`, worked out here without the engine: the
/// millilitres dosed, the commands rejected, and the window of the last `W` new ids
/// (oldest first; a rejected id enters it too, a resend of an id in it is skipped).
fn model(events: &[Event<Dose>]) -> (u64, u32, Vec<u64>) {
    let (mut ml, mut rejected, mut window) = (0, 0, Vec::new());
    for e in events {
        if window.contains(&e.payload.id) {
            continue;
        }
        if window.len() == W {
            window.remove(0);
        }
        window.push(e.payload.id);
        if e.payload.ml < 5 {
            ml += u64::from(e.payload.ml);
        } else {
            rejected += 1;
        }
    }
    (ml, rejected, window)
}

/// What a consumer holds, as [`model`] says it.
fn held(c: &Consumer<MessageIdWindow<Pump, W>>) -> (u64, u32, Vec<u64>) {
    let window = c.state().seen.iter().map(|id| id.0).collect();
    (c.state().state, c.rejected(), window)
}

/// `format2-window-spread.bin`, made by idem-core at format 2 (commit 88eef9f) as
/// `format2-window.bin` was but run to offset 110: its window's 8 ids on both of the
/// store's pages (the newest record in slot 3 of page 0, the ring wrapped), taken up by
/// today's code (format 3) and swept with a power cut at every unit write and erase of
/// the boot that resumes it and of its steps, in every model: every boot resumes at 110
/// or later with the state of the commands up to some offset from there on (nothing
/// lost, the window whole), and every run ends exact, the two resends skipped and each
/// new command dosed once. The new code goes on filling the format-2 page in format 2,
/// so the other page, which holds the window's older ids, is erased only when the ring
/// reaches it, with the window long moved on; the records after that are format 3.
#[test]
fn a_format_2_window_on_both_pages_loses_nothing_at_any_cut_of_the_update() {
    let image = std::fs::read(fixture("format2-window-spread.bin")).unwrap();
    // The window's newest record is in slot 3 of its page: its older records are in the
    // other page.
    let mut flash = Pumps::from_image(&image);
    let tag = sink_tag::<MessageIdWindow<Pump, W>>(&LAYOUT);
    let (sink, _) =
        Journal::<AppendedRecord<MessageIdWindow<Pump, W>>>::open(&mut flash, LAYOUT.sink, tag)
            .unwrap();
    let newest = sink.newest().unwrap();
    assert!((newest.slot as usize) < W - 1, "{newest:?}");
    let events = after_the_image();
    let end = SPREAD + AFTER;
    let stream = Received::new(&events, Some(end));
    let image_holds = model(&events[..SPREAD as usize]);
    let mut opened = Consumer::open(&mut flash, LAYOUT, window(), config()).unwrap();
    assert_eq!(
        (opened.resume_at(), held(&opened)),
        (SPREAD, image_holds.clone())
    );
    // The two resends are skipped, 400 to 419 are dosed: 50 ml more.
    opened.run(&mut flash, &stream).unwrap();
    let (ml, rejected, _) = held(&opened);
    assert_eq!((ml, rejected), (image_holds.0 + 50, image_holds.1));
    // A state is exact when it is that of the commands up to some offset from the
    // durable position on (effects written after the last commit are replayed, and the
    // window skips them).
    let exact = |from: u64, held: &(u64, u32, Vec<u64>)| {
        (from.max(SPREAD)..=end).any(|k| *held == model(&events[..k as usize]))
    };
    let found = sweep(
        &Plan::new(),
        || (Pumps::from_image(&image), None),
        |flash, _| Consumer::open(flash, LAYOUT, window(), config()),
        |c, flash, last| {
            if c.resume_at() == end {
                return Ok(None);
            }
            c.step(flash, &stream)?;
            *last = Some(held(c));
            Ok(Some(held(c)))
        },
        |_, last, seen| match seen {
            Seen::Booted(c) if c.resume_at() >= SPREAD && exact(c.resume_at(), &held(c)) => {
                *last = Some(held(c));
                Ok(())
            }
            Seen::Stepped(held) if exact(SPREAD, held) => Ok(()),
            Seen::Ended if *last == Some(model(&events)) => Ok(()),
            _ => Err("lost or doubled"),
        },
    );
    let r = found.reference;
    assert_eq!(found.reference_wrong, None);
    assert_eq!(found.wrong(), 0);
    // 50 steps, 253 unit writes and one erase: the store's records go on in the
    // format-2 page to its end, then its other page is erased and takes format 3.
    assert_eq!((r.steps, r.unit_writes, r.erases), (50, 253, 1));
    let tallies = found.models.map(|t| (t.trials, t.first_wrong, t.missed));
    // Each unit write and erase cut torn and cut before it, the erase left weakly
    // erased, and a reset after each step: none wrong.
    assert_eq!(
        tallies,
        [(254, None, 0), (254, None, 0), (1, None, 0), (50, None, 0)]
    );
}
