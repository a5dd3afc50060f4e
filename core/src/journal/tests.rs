// The journal's tests, run once for each build (`journal::tests`): `open_j`, `append` and
// `recent` are the blocking steps or the async ones, driven to completion.

use crate::testing::cuts::Trial;
use crate::testing::flash::{FlashError, MemFlash, PowerCut};

type F = MemFlash<4, 256>;
const REGION: Region = Region {
    start: 256,
    pages: 3,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, MaxSize)]
struct Rec {
    offset: u32,
    total: i64,
}

fn open(f: &mut F) -> (Journal<Rec>, Option<Rec>) {
    open_j(f, REGION, 7).unwrap()
}

#[test]
fn slot_holds_sequence_payload_and_crc() {
    assert_eq!(Journal::<Rec>::SLOT, 5 + 10 + 4 + 1);
    let (j, _) = open(&mut F::new());
    assert_eq!(j.slots_per_page(), (256 - 20) / 20);
}

/// On an 8-byte flash (an STM32L4's double-words) and a 32-byte one (an STM32H7's
/// flash words): the header's words and the payload padded to whole units, the check
/// word first in a unit of its own, its complement beside it, and every unit
/// programmed once (the strict flash refuses a second program).
#[test]
fn wide_write_units_get_a_check_unit_of_their_own() {
    assert_eq!(
        [1, 2, 4, 8, 16, 32].map(header_size),
        [20, 20, 20, 24, 32, 64]
    );
    assert_eq!(slot_size_on::<OffsetTotal>(8), 16);
    assert_eq!(slot_size_on::<OffsetTotal>(32), 64);
    let mut f = MemFlash::<3, 256, 8>::new();
    let region = Region { start: 0, pages: 2 };
    let (mut j, _) = open_j::<OffsetTotal, _>(&mut f, region, 7).unwrap();
    assert_eq!(j.slots_per_page(), (256 - 24) / 16);
    let r = OffsetTotal {
        offset: 3,
        total: -1,
    };
    append(&mut j, &mut f, &r).unwrap();
    let page = &f.pages()[0];
    assert_eq!(page[..4], MAGIC.to_le_bytes());
    assert_eq!(page[20..24], [0xFF; 4], "the header's CRC unit is padded");
    // The record: its length byte (two units before the check unit), its 8 bytes of
    // payload, padding, then the check unit.
    let record = &page[24..48];
    assert_eq!(record[..8], [2, 3, 0, 0, 0, 0xFF, 0xFF, 0xFF]);
    assert_eq!(record[8..16], [0xFF; 8]);
    let check = u32::from_le_bytes(record[16..20].try_into().unwrap());
    assert_eq!(record[20..24], (!check).to_le_bytes());
    // The header's three units (two of words, one for the CRC), then the record's three:
    // six programs, each once.
    assert_eq!(f.stats().word_writes, 6);
    assert_eq!(
        open_j::<OffsetTotal, _>(&mut f, region, 7).unwrap().1,
        Some(r)
    );
    let mut f = MemFlash::<3, 1024, 32>::new();
    let region = Region { start: 0, pages: 2 };
    let (mut j, _) = open_j::<OffsetTotal, _>(&mut f, region, 7).unwrap();
    assert_eq!(j.slots_per_page(), 15);
    append(&mut j, &mut f, &r).unwrap();
    assert_eq!(
        open_j::<OffsetTotal, _>(&mut f, region, 7).unwrap().1,
        Some(r)
    );
    // A journal is not read through another geometry: the slot size differs, and the
    // header says so.
    let image: Vec<u8> = f.pages().iter().flatten().copied().collect();
    let mut word = MemFlash::<3, 1024>::from_image(&image);
    assert!(matches!(
        open_j::<OffsetTotal, _>(&mut word, region, 7),
        Err(JournalError::Foreign { .. })
    ));
}

/// A page of this journal whose header CRC word was damaged, with a record that
/// happens to hold that CRC at byte 32 (where a 32-byte flash keeps its CRC word):
/// the header's slot size is this journal's, so the page is damage, not another
/// journal's, and the region recovers.
#[test]
fn record_bytes_that_match_the_header_crc_do_not_make_a_page_foreign() {
    type Bytes = [u8; 16];
    // Record `i`, with `crc` in its payload's bytes 11 to 14.
    let rec = |i: u32, crc: Option<u32>| {
        let mut r = [0u8; 16];
        r[..4].copy_from_slice(&i.to_le_bytes());
        if let Some(crc) = crc {
            r[11..15].copy_from_slice(&crc.to_le_bytes());
        }
        r
    };
    let region = Region { start: 0, pages: 2 };
    let mut f = MemFlash::<2, 1024>::new();
    let (mut j, _) = open_j::<Bytes, _>(&mut f, region, 7).unwrap();
    let per_page = j.slots_per_page();
    append(&mut j, &mut f, &rec(1, None)).unwrap();
    let crc = u32::from_le_bytes(f.pages()[0][16..20].try_into().unwrap());
    let mut f = MemFlash::<2, 1024>::new();
    let (mut j, _) = open_j::<Bytes, _>(&mut f, region, 7).unwrap();
    // The first record starts at byte 20, its payload at 21: the payload's bytes 11 to
    // 14 are the page's 32 to 35. Records of 24 bytes, 41 a page: page 0 fills, and 12
    // go on in page 1.
    for i in 0..per_page + 3 {
        append(&mut j, &mut f, &rec(i + 1, (i == 0).then_some(crc))).unwrap();
    }
    let mut image: Vec<u8> = f.pages().iter().flatten().copied().collect();
    assert_eq!(image[32..36], crc.to_le_bytes());
    image[16] ^= 0x01;
    let mut f = MemFlash::<2, 1024>::from_image(&image);
    assert_eq!(
        open_j::<Bytes, _>(&mut f, region, 7).unwrap().1,
        Some(rec(per_page + 3, None))
    );
}

#[test]
fn an_offset_total_record_fits_12_bytes() {
    assert_eq!(Journal::<OffsetTotal>::SLOT, 12);
    let mut buf = [0u8; 16];
    let r = OffsetTotal {
        offset: u32::MAX,
        total: i32::MIN,
    };
    assert_eq!(postcard::to_slice(&r, &mut buf).unwrap().len(), 8);
}

#[test]
fn blank_flash_has_no_record_and_newest_wins_after_reopen() {
    let mut f = F::new();
    let (mut j, r) = open(&mut f);
    assert_eq!(r, None);
    for i in 0..100u32 {
        append(
            &mut j,
            &mut f,
            &Rec {
                offset: i,
                total: i64::from(i) * 3,
            },
        )
        .unwrap();
    }
    let (j2, r) = open(&mut f);
    assert_eq!(
        r,
        Some(Rec {
            offset: 99,
            total: 297
        })
    );
    assert_eq!(j2.cursor(), j.cursor());
    // 100 records of 8 bytes (2 of payload: the values are small), 29 to a page: the
    // region wrapped once (format 2's 20-byte slots, 11 to a page, took 9 erases).
    assert_eq!(f.stats().erases, 4);
    assert_eq!(
        f.page_erases()[0],
        0,
        "the page outside the region is untouched"
    );
}

#[test]
fn never_written_pages_are_unformatted_and_erased_before_use() {
    let mut f = F::filled(0);
    let (mut j, r) = open(&mut f);
    assert_eq!(r, None);
    append(
        &mut j,
        &mut f,
        &Rec {
            offset: 1,
            total: 1,
        },
    )
    .unwrap();
    assert_eq!(
        open(&mut f).1,
        Some(Rec {
            offset: 1,
            total: 1
        })
    );
}

#[test]
fn another_journal_is_refused_and_left_alone() {
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    append(
        &mut j,
        &mut f,
        &Rec {
            offset: 1,
            total: 1,
        },
    )
    .unwrap();
    let before = *f.pages();
    let e = open_j::<Rec, _>(&mut f, REGION, 8).unwrap_err();
    assert_eq!(
        e,
        JournalError::Foreign {
            page: 0,
            tag: 7,
            version: FORMAT_VERSION
        }
    );
    assert_eq!(f.pages(), &before);
}

/// The newest acknowledged record's offset, and the one in flight, in a sweep of appends.
type Acked = (Option<u32>, Option<u32>);

/// A boot of a sweep of appends found the record at offset `found`: the newest
/// acknowledged one, or the one in flight, which is durable from then on.
fn booted(trial: &Trial, acked: &mut Acked, found: Option<u32>) -> Result<(), Trial> {
    let ok = found == acked.0 || (acked.1.is_some() && found == acked.1);
    *acked = (found, None);
    ok.then_some(()).ok_or(*trial)
}

/// A step of a sweep of appends: the record after the newest (`rec` of its offset),
/// until `count` are in; the offset it appended.
fn append_next<T, Fl>(
    count: u32,
    rec: impl Fn(u32) -> T,
    offset: impl Fn(&T) -> u32,
) -> impl FnMut(&mut Opened<T>, &mut Fl, &mut Acked) -> Result<Option<u32>, JournalError<FlashError>>
where
    T: Serialize + DeserializeOwned + MaxSize,
    Fl: Flash + embedded_storage::nor_flash::ErrorType<Error = FlashError>,
{
    move |(j, newest), f, acked| {
        let i = newest.as_ref().map_or(0, |r| offset(r) + 1);
        if i == count {
            return Ok(None);
        }
        acked.1 = Some(i);
        let r = rec(i);
        append(j, f, &r)?;
        (*newest, *acked) = (Some(r), (Some(i), None));
        Ok(Some(i))
    }
}

#[test]
fn a_cut_at_every_write_and_erase_keeps_the_last_acknowledged_record() {
    // The power-cut checker over 60 appends: every word write and erase cut torn and cut
    // before it, every erase left weakly erased, a reset after each append; every boot
    // finds the last acknowledged record or the one in flight, and the journal goes on.
    use crate::testing::cuts::{Plan, Seen, sweep};
    let rec = |i: u32| Rec {
        offset: i,
        total: i64::from(i),
    };
    let found = sweep(
        &Plan::new(),
        || (F::new(), Acked::default()),
        |f, _| open_j::<Rec, _>(f, REGION, 7),
        append_next(60, rec, |r| r.offset),
        |trial, acked, seen| match seen {
            Seen::Booted((_, r)) => booted(trial, acked, r.map(|r| r.offset)),
            Seen::Stepped(_) => Ok(()),
            Seen::Ended if acked.0 == Some(59) => Ok(()),
            _ => Err(*trial),
        },
    );
    let r = found.reference;
    // Two writes a record (its payload's unit, its check word), 8 bytes each: 29 a
    // page, so 3 pages entered (format 2's 20-byte slots: 330 writes, 6 erases).
    assert_eq!((r.steps, r.unit_writes, r.erases), (60, 135, 3));
    assert_eq!(found.reference_wrong, None);
    let tallies = found.models.map(|t| (t.trials, t.first_wrong, t.missed));
    assert_eq!(
        tallies,
        [(138, None, 0), (138, None, 0), (3, None, 0), (60, None, 0)]
    );
}

fn append_n(f: &mut F, j: &mut Journal<Rec>, from: u32, n: u32) {
    for i in from..from + n {
        append(
            j,
            f,
            &Rec {
                offset: i,
                total: i64::from(i),
            },
        )
        .unwrap();
    }
}

/// `Journal::recent` over every record: (sequence number, offset, adjacent).
fn walk(f: &mut F, j: &Journal<Rec>) -> Vec<(u32, u32, bool)> {
    let mut seen = Vec::new();
    recent(j, f, |seq, rec, adjacent| {
        seen.push((seq, rec.offset, adjacent));
        true
    })
    .unwrap();
    seen
}

fn image(f: &F) -> Vec<u8> {
    f.pages().iter().flatten().copied().collect()
}

#[test]
fn sequence_numbers_run_on_one_per_record_around_the_ring() {
    // 8-byte records (the values are small), 29 a page, 3 pages: 100 records wrap the
    // ring once.
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    append_n(&mut f, &mut j, 0, 100);
    assert_eq!(j.newest_seq(), Some(100));
    let seen = walk(&mut f, &j);
    // The page being written holds 13 records; the two before it 29 each.
    assert_eq!(seen.len(), 71);
    assert!(
        seen.iter()
            .all(|&(seq, offset, adj)| seq == offset + 1 && adj)
    );
    let (j2, r) = open(&mut f);
    assert_eq!(
        (j2.newest_seq(), r.map(|r| r.offset)),
        (Some(100), Some(99))
    );
}

#[test]
fn a_damaged_header_over_the_newest_records_is_refused_wherever_it_is_hit() {
    // 40 records: page 0 full (1..=29), page 1 holds 30..=40. Flip each bit of page
    // 1's header: the magic, the version and slot word, the tag, the first sequence
    // number, the CRC. Each must refuse (or, for a tag or version that then reads as
    // another valid journal, call the page foreign), never fall back to 29.
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    append_n(&mut f, &mut j, 0, 40);
    let clean = image(&f);
    let header = 256 + 256; // region start + page 1
    for byte in header..header + HEADER_SIZE {
        for bit in 0..8 {
            let mut damaged = clean.clone();
            damaged[byte] ^= 1 << bit;
            let mut g = F::from_image(&damaged);
            match open_j::<Rec, _>(&mut g, REGION, 7) {
                Err(JournalError::Damaged { address }) => assert_eq!(address, 512),
                Err(JournalError::Foreign { .. }) => {}
                other => panic!("byte {byte} bit {bit}: {:?}", other.map(|o| o.1)),
            }
            assert_eq!(image(&g), damaged, "a refused image is left as it was");
        }
    }
}

#[test]
fn a_write_cut_short_is_stepped_over_and_vouched_for_a_lost_record_is_not() {
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    append_n(&mut f, &mut j, 0, 3);
    // The fourth append is cut in its first word write: its slot is torn.
    f.schedule_power_cut(PowerCut::AtWordWrite(1));
    assert!(
        append(
            &mut j,
            &mut f,
            &Rec {
                offset: 3,
                total: 3
            }
        )
        .is_err()
    );
    f.power_on();
    let (mut j, r) = open(&mut f);
    assert_eq!(r.map(|r| r.offset), Some(2));
    append_n(&mut f, &mut j, 10, 2);
    // Sequence 4 is the torn slot; record 5 was written over it and says so.
    assert_eq!(
        walk(&mut f, &j),
        [
            (6, 11, true),
            (5, 10, true),
            (3, 2, true),
            (2, 1, true),
            (1, 0, true)
        ]
    );
    // Record 2 (sequence 2) damaged after it was written: nothing vouches for the
    // hole, and the walk says so. (Each record takes 8 bytes: the values are small.)
    let mut damaged = image(&f);
    damaged[256 + HEADER_SIZE + 8] ^= 1;
    let mut g = F::from_image(&damaged);
    let (j, _) = open(&mut g);
    assert_eq!(
        walk(&mut g, &j),
        [(6, 11, true), (5, 10, true), (3, 2, true), (1, 0, false)]
    );
    // Record 3 (sequence 3), the one right before the torn unit, damaged: record 5
    // vouches for one run stepped over (sequence 4), the walk finds two numbers missing
    // (3 and 4), and says so. The records after keep their numbers: their check words
    // cover them.
    let mut damaged = image(&f);
    damaged[256 + HEADER_SIZE + 16] ^= 1;
    let mut g = F::from_image(&damaged);
    let (j, _) = open(&mut g);
    assert_eq!(
        walk(&mut g, &j),
        [(6, 11, true), (5, 10, true), (2, 1, false), (1, 0, true)]
    );
}

#[test]
fn writes_cut_short_twice_in_a_row_are_counted() {
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    append_n(&mut f, &mut j, 0, 2);
    // Two restarts, each cutting the next append in its first word write: the
    // second one writes past the first one's torn slot, and is torn itself.
    for _ in 0..2 {
        f.schedule_power_cut(PowerCut::AtWordWrite(1));
        assert!(
            append(
                &mut j,
                &mut f,
                &Rec {
                    offset: 99,
                    total: 0
                }
            )
            .is_err()
        );
        f.power_on();
        j = open(&mut f).0;
    }
    append_n(&mut f, &mut j, 10, 1);
    // Two units torn, one after the other: one run, sequence 3, which record 4 was
    // written over, and it follows on from record 2.
    assert_eq!(
        walk(&mut f, &j),
        [(4, 10, true), (2, 1, true), (1, 0, true)]
    );
    // Its check word carries the count: CRC-32C over its bytes before the check word (the
    // payload's unit), where it is (offset 64 in the page's records) and its sequence
    // number (4), XOR the mark with one run stepped over (1) in bits 1 to 4. It is at
    // offset 64: the second torn unit was at 40, and a step over runs a largest record
    // (20 bytes) past the last byte written (44), since a write cut short may have
    // programmed units that read erased past it.
    let at = 256 + HEADER_SIZE + 64;
    let record = &image(&f)[at..at + 8];
    let (body, check) = record.split_at(4);
    let crc32c = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let mut digest = crc32c.digest();
    digest.update(body);
    digest.update(&64u32.to_le_bytes());
    digest.update(&4u32.to_le_bytes());
    assert_eq!(
        u32::from_le_bytes(check.try_into().unwrap()),
        digest.finalize() ^ 0x5EA1_ED00 ^ (1 << 1)
    );
}

#[test]
fn a_format_1_page_is_refused_and_left_alone() {
    // A format 1 header: magic, version 1 and slot size 24, tag 7, CRC of those
    // three words; then a format 1 slot (sequence 1, payload, CRC).
    let mut bytes = vec![0xFFu8; 4 * 256];
    let page = &mut bytes[256..512];
    page[..4].copy_from_slice(&MAGIC.to_le_bytes());
    page[4..8].copy_from_slice(&(1u32 | (24 << 16)).to_le_bytes());
    page[8..12].copy_from_slice(&7u32.to_le_bytes());
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&page[..12]);
    page[12..16].copy_from_slice(&crc.to_le_bytes());
    page[16..20].copy_from_slice(&1u32.to_le_bytes());
    page[20..22].copy_from_slice(&[5, 5]);
    let mut f = F::from_image(&bytes);
    let e = open_j::<Rec, _>(&mut f, REGION, 7).unwrap_err();
    assert_eq!(
        e,
        JournalError::Foreign {
            page: 0,
            tag: 7,
            version: 1
        }
    );
    assert_eq!(
        e.to_string(),
        "page 0 holds a journal in format 1, and this idem reads formats 2 and 3 only"
    );
    assert_eq!(image(&f), bytes);
}

/// A record whose first bytes are all ones, as a value can encode (postcard writes a
/// fixed array as its bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, MaxSize)]
struct Ones {
    head: [u8; 8],
    offset: u32,
}

/// The power-cut checker over 40 appends of records that begin with eight bytes of ones,
/// on a flash of `U`-byte units: every boot finds the last acknowledged record or the one
/// in flight, and the journal goes on to the 40th. A unit programmed with all ones still
/// reads erased: a slot cut just after one read blank, and the next append programmed
/// that unit a second time, which the strict flash (and an ECC flash) refuses. The trials
/// of each model.
fn all_ones_units_survive_a_cut_at_every_write<const U: usize>() -> [u64; 4] {
    use crate::testing::cuts::{Plan, Seen, sweep};
    let region = Region { start: 0, pages: 3 };
    let rec = |offset| Ones {
        head: [0xFF; 8],
        offset,
    };
    let found = sweep(
        &Plan::new(),
        || (MemFlash::<4, 256, U>::new(), Acked::default()),
        |f, _| open_j::<Ones, _>(f, region, 7),
        append_next(40, rec, |r| r.offset),
        |trial, acked, seen| match seen {
            Seen::Booted((_, r)) => booted(trial, acked, r.map(|r| r.offset)),
            Seen::Stepped(_) => Ok(()),
            Seen::Ended if acked.0 == Some(39) => Ok(()),
            _ => Err(*trial),
        },
    );
    assert_eq!(found.reference_wrong, None, "{U}-byte units");
    for tally in &found.models {
        assert_eq!(
            (tally.first_wrong, tally.missed),
            (None, 0),
            "{U}-byte units"
        );
    }
    found.models.map(|t| t.trials)
}

#[test]
fn leading_units_of_all_ones_are_left_erased() {
    // Every unit write and erase of the 40 appends (703 at 1-byte units, 140 at 8-byte
    // ones), each cut torn and cut before it, each erase left weakly erased, and a reset
    // after each append. (In format 3 a record starts with its length byte, so its units
    // of ones come after it and are programmed: 383 and 100 unit writes before.)
    assert_eq!(
        all_ones_units_survive_a_cut_at_every_write::<1>(),
        [703, 703, 3, 40]
    );
    assert_eq!(
        all_ones_units_survive_a_cut_at_every_write::<8>(),
        [140, 140, 5, 40]
    );
}

/// A record of the next firmware: `Rec` with a field more, under another tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, MaxSize)]
struct Rec2 {
    offset: u32,
    total: i64,
    scale: u16,
}

const OLD_TAG: u32 = 7;
const NEW_TAG: u32 = 8;

fn to_rec2(old: Rec) -> Rec2 {
    Rec2 {
        offset: old.offset,
        total: old.total,
        scale: 100,
    }
}

/// 25 records of the old firmware's journal, around the ring of 3 pages.
fn old_image() -> F {
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    for i in 0..25u32 {
        append(
            &mut j,
            &mut f,
            &Rec {
                offset: i,
                total: i64::from(i) * 10,
            },
        )
        .unwrap();
    }
    f
}

#[test]
fn a_record_of_the_old_encoding_is_migrated_once_and_never_read_as_new() {
    let mut f = old_image();
    // Opened as the new record without the old tag: refused, never decoded.
    assert!(matches!(
        open_j::<Rec2, _>(&mut f, REGION, NEW_TAG),
        Err(JournalError::Foreign { tag: OLD_TAG, .. })
    ));
    let (mut j, r, migrated) = migrate_j(&mut f, REGION, NEW_TAG, OLD_TAG, to_rec2).unwrap();
    let first = Rec2 {
        offset: 24,
        total: 240,
        scale: 100,
    };
    assert_eq!((r, migrated), (Some(first), true));
    // Its sequence number follows the old newest record's.
    assert_eq!(j.newest_seq(), Some(FIRST_SEQ + 25));
    // The old journal's pages are erased: the plain open reads the new journal, and the
    // old firmware, flashed back, finds it foreign.
    assert_eq!(
        open_j::<Rec2, _>(&mut f, REGION, NEW_TAG).unwrap().1,
        Some(first)
    );
    assert!(matches!(
        open_j::<Rec, _>(&mut f, REGION, OLD_TAG),
        Err(JournalError::Foreign { tag: NEW_TAG, .. })
    ));
    // The next open finds the migrated record and migrates nothing.
    let (_, r, migrated) = migrate_j(&mut f, REGION, NEW_TAG, OLD_TAG, to_rec2).unwrap();
    assert_eq!((r, migrated), (Some(first), false));
    // The ring goes on: records of 8 bytes while the offset takes one byte (100 to 127),
    // of 12 after: the migrated page takes 28 after the migrated record's 12 bytes, the
    // two others 19 each in turn (an erase each before use), and the 67th to 85th
    // appends go back to the migrated page (a third).
    let erases = f.stats().erases;
    for i in 0..85u32 {
        let next = Rec2 {
            offset: 100 + i,
            total: 0,
            scale: 1,
        };
        append(&mut j, &mut f, &next).unwrap();
    }
    assert_eq!(f.stats().erases - erases, 3);
    let (_, r, migrated) = migrate_j(&mut f, REGION, NEW_TAG, OLD_TAG, to_rec2).unwrap();
    assert_eq!((r.map(|r| r.offset), migrated), (Some(184), false));
    assert_eq!(
        open_j::<Rec2, _>(&mut f, REGION, NEW_TAG)
            .unwrap()
            .1
            .map(|r| r.offset),
        Some(184)
    );
    assert!(matches!(
        open_j::<Rec, _>(&mut f, REGION, OLD_TAG),
        Err(JournalError::Foreign { tag: NEW_TAG, .. })
    ));
    // A migration from a tag to itself would read old records as new: refused.
    assert!(matches!(
        migrate_j::<Rec2, Rec, _>(&mut f, REGION, NEW_TAG, NEW_TAG, to_rec2),
        Err(JournalError::SameTag { tag: NEW_TAG })
    ));
    // A blank region has nothing to migrate.
    let (_, r, migrated) =
        migrate_j::<Rec2, Rec, _>(&mut F::new(), REGION, NEW_TAG, OLD_TAG, to_rec2).unwrap();
    assert_eq!((r, migrated), (None, false));
}

/// What the migrating firmware has had acknowledged (the newest record's offset: the old
/// journal's 24 until a new record is), and the record in flight.
#[derive(Default)]
struct Migrating {
    acked: Option<u32>,
    in_flight: Option<u32>,
}

/// The migrating boot's journal, the record it returned, and what a plain open of the new
/// journal reads right after it.
type Booted = (Journal<Rec2>, Option<Rec2>, Option<Rec2>);

#[test]
fn a_cut_anywhere_in_a_migration_leaves_the_old_record_or_the_new() {
    // The power-cut checker over the migrating boot and the 30 appends after it, from the
    // old firmware's image: each unit write and erase cut torn and cut cleanly before it,
    // each erase left weakly erased, a reset after each append; after each, the region
    // opens again with the old record migrated or the newest new one acknowledged (or the
    // one in flight), nothing of the old journal left, and goes on.
    let image = old_image();
    let found = crate::testing::cuts::sweep(
        &crate::testing::cuts::Plan::new(),
        || (image.clone(), Migrating::default()),
        |f, _| {
            let (j, r, _) = migrate_j(f, REGION, NEW_TAG, OLD_TAG, to_rec2)?;
            let plain = open_j::<Rec2, _>(f, REGION, NEW_TAG)?.1;
            Ok::<Booted, JournalError<FlashError>>((j, r, plain))
        },
        |(j, newest, _), f, world| {
            let next = match newest.map(|r| r.offset) {
                Some(129) => return Ok(None),
                Some(24) | None => 100,
                Some(a) => a + 1,
            };
            world.in_flight = Some(next);
            let rec = Rec2 {
                offset: next,
                total: 0,
                scale: 1,
            };
            append(j, f, &rec)?;
            (*newest, world.acked, world.in_flight) = (Some(rec), Some(next), None);
            Ok(Some(next))
        },
        |trial, world, seen| match seen {
            crate::testing::cuts::Seen::Booted((_, r, plain)) => {
                let got = r.map(|r| r.offset);
                let ok = (got == world.acked.or(Some(24)) || got == world.in_flight)
                    && (got != Some(24) || r.map(|r| (r.total, r.scale)) == Some((240, 100)))
                    && plain == r;
                (world.acked, world.in_flight) = (got, None);
                ok.then_some(()).ok_or(*trial)
            }
            crate::testing::cuts::Seen::Stepped(_) => Ok(()),
            crate::testing::cuts::Seen::Ended if world.acked == Some(129) => Ok(()),
            _ => Err(*trial),
        },
    );
    assert_eq!(found.reference_wrong, None);
    let r = found.reference;
    // The 213 places the sweep cut before the checker.
    assert_eq!((r.steps, r.unit_writes, r.erases), (30, 75, 4));
    let tallies = found.models.map(|t| (t.trials, t.first_wrong, t.missed));
    assert_eq!(
        tallies,
        [(79, None, 0), (79, None, 0), (4, None, 0), (30, None, 0)]
    );
}

/// A cut that kept records 5 and 6 and lost 4 (a file under a page cache): voiding after
/// 3 zeroes 5 and 6, the journal reopens at 3, the next append fills 4's slot, and the one
/// after steps over the two zeroed slots and says so, so the records follow on again.
#[test]
fn voiding_after_a_hole_leaves_records_that_follow_on() {
    let mut f = F::new();
    let (mut j, _) = open(&mut f);
    let rec = |n: u32| Rec {
        offset: n,
        total: i64::from(n) * 10,
    };
    for n in 1..=6 {
        append(&mut j, &mut f, &rec(n)).unwrap();
    }
    // Record 4 back to erased, as if its write never reached the disk (each record
    // takes 8 bytes: the values are small).
    let mut image: Vec<u8> = f.pages().iter().flatten().copied().collect();
    let fourth = REGION.start as usize + HEADER_SIZE + 3 * 8;
    image[fourth..fourth + 8].fill(0xFF);
    let mut f = F::from_image(&image);
    let (j, newest) = open(&mut f);
    assert_eq!((j.newest_seq(), newest), (Some(6), Some(rec(6))));
    assert_eq!(j.void_after(&mut f, 3).unwrap(), 2);
    let (mut j, newest) = open(&mut f);
    assert_eq!((j.newest_seq(), newest), (Some(3), Some(rec(3))));
    append(&mut j, &mut f, &rec(4)).unwrap();
    append(&mut j, &mut f, &rec(5)).unwrap();
    // Record 4 goes where the lost one was (blank); record 5 steps over the two voided
    // ones (one run of 4 units, one sequence number) and says so.
    let (j, newest) = open(&mut f);
    assert_eq!((j.newest_seq(), newest), (Some(6), Some(rec(5))));
    let mut seen = Vec::new();
    recent(&j, &mut f, |seq, r, adjacent| {
        seen.push((seq, r.offset, adjacent));
        true
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            (6, 5, true),
            (4, 4, true),
            (3, 3, true),
            (2, 2, true),
            (1, 1, true)
        ]
    );
    // Nothing after the newest: voiding after it writes nothing.
    assert_eq!(j.void_after(&mut f, 6).unwrap(), 0);
}

/// Records lost from the middle of a page (back to erased, as a write that never reached
/// the disk), two and then three in a row: the records after the hole keep the sequence
/// numbers they were written with (their check words cover them), and the walk says the
/// hole is not vouched for.
#[test]
fn records_after_a_hole_of_lost_records_keep_their_numbers() {
    for lost in [2u32, 3] {
        let mut f = F::new();
        let (mut j, _) = open(&mut f);
        append_n(&mut f, &mut j, 0, 9);
        // Records 4 to 3 + `lost` (8 bytes each: the values are small) back to erased.
        let mut damaged = image(&f);
        let from = REGION.start as usize + HEADER_SIZE + 3 * 8;
        damaged[from..from + 8 * lost as usize].fill(0xFF);
        let mut g = F::from_image(&damaged);
        let (j, newest) = open(&mut g);
        assert_eq!(
            (j.newest_seq(), newest.map(|r| r.offset)),
            (Some(9), Some(8))
        );
        let after: Vec<_> = (4 + lost..=9).rev().map(|s| (s, s - 1, true)).collect();
        let mut expected = after;
        expected.extend([(3, 2, false), (2, 1, true), (1, 0, true)]);
        assert_eq!(walk(&mut g, &j), expected, "{lost} records lost");
    }
}

/// A record whose last payload units are all ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, MaxSize)]
struct OnesAfter {
    offset: u8,
    ones: [u8; 8],
}

/// A write cut right before its check word, after units of all ones: those units are
/// programmed and still read erased, past the page's last byte that does not. The next
/// append steps over every unit the cut write can have programmed (to a largest record
/// past that byte), so none is programmed twice (the strict flash refuses it, as an ECC
/// flash does), and its record vouches for the number it stepped over.
#[test]
fn units_of_ones_a_write_cut_short_programmed_are_not_programmed_again() {
    let mut f = F::new();
    let (mut j, _) = open_j::<OnesAfter, _>(&mut f, REGION, 9).unwrap();
    let rec = |offset| OnesAfter {
        offset,
        ones: [0xFF; 8],
    };
    for i in 0..2 {
        append(&mut j, &mut f, &rec(i)).unwrap();
    }
    // The third record's units: its length byte and offset, then two of ones and
    // padding; the cut falls right before its fourth, the check word's.
    f.schedule_power_cut(PowerCut::BeforeWordWrite(4));
    assert!(append(&mut j, &mut f, &rec(2)).is_err());
    f.power_on();
    let (mut j, r) = open_j::<OnesAfter, _>(&mut f, REGION, 9).unwrap();
    assert_eq!(r, Some(rec(1)));
    append(&mut j, &mut f, &rec(3)).unwrap();
    let (j, r) = open_j::<OnesAfter, _>(&mut f, REGION, 9).unwrap();
    assert_eq!(r, Some(rec(3)));
    let mut seen = Vec::new();
    recent(&j, &mut f, |seq, r: OnesAfter, follows| {
        seen.push((seq, r.offset, follows));
        true
    })
    .unwrap();
    assert_eq!(seen, [(4, 3, true), (2, 1, true), (1, 0, true)]);
}
