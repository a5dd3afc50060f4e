//! The property shared by the `recover` fuzz target and the corpus test: recovery over
//! arbitrary flash bytes never panics, never returns a record whose CRC does not
//! match, and leaves a journal that can append without programming a word twice (or
//! refuses the image as foreign or damaged).

#[path = "offset_total.rs"]
mod offset_total;
use idem_core::journal::{HEADER_SIZE, Journal, JournalError, Region};
use idem_core::testing::flash::{FlashError, MemFlash};
pub use offset_total::OffsetTotal;

/// Pages of 256 bytes keep inputs small for the fuzzer.
pub type FuzzFlash = MemFlash<3, 256>;
/// The region the property opens.
pub const REGION: Region = Region { start: 0, pages: 3 };
/// The tag the property opens with.
pub const TAG: u32 = 0xF022;

/// Interprets a fuzzer input: an even first byte means the rest is a raw flash image; an
/// odd one means a real journal image (`data[1] % 64` appends) corrupted by the ops that
/// follow, four bytes each: kind, position (two bytes), length or value.
pub fn check_input(data: &[u8]) {
    match data.first() {
        None => check_recovery(&[]),
        Some(b) if b % 2 == 0 => check_recovery(&data[1..]),
        Some(_) => {
            let mut flash = FuzzFlash::new();
            let (mut j, _) =
                Journal::<OffsetTotal>::open(&mut flash, REGION, TAG).expect("blank flash opens");
            for i in 0..u32::from(data.get(1).copied().unwrap_or(0) % 64) {
                j.append(
                    &mut flash,
                    &OffsetTotal {
                        offset: i,
                        total: i as i32,
                    },
                )
                .expect("append on a sound journal");
            }
            let mut image: Vec<u8> = flash.pages().iter().flatten().copied().collect();
            for op in data.get(2..).unwrap_or_default().chunks_exact(4) {
                let at = usize::from(u16::from_le_bytes([op[1], op[2]])) % image.len();
                let end = (at + usize::from(op[3] % 32) + 1).min(image.len());
                match op[0] % 4 {
                    0 => image[at] ^= 1 << (op[3] % 8),
                    1 => image[at..end].fill(0),
                    2 => image[at..end].fill(0xFF),
                    _ => image[at] = op[3],
                }
            }
            check_recovery(&image);
        }
    }
}

/// Checks the property on `image`; panics (a finding) when it does not hold.
pub fn check_recovery(image: &[u8]) {
    let mut flash = FuzzFlash::from_image(image);
    let (mut journal, record) = match Journal::<OffsetTotal>::open(&mut flash, REGION, TAG) {
        Ok(opened) => opened,
        // Refusals: another journal's page, or a damaged header over the newest record.
        Err(JournalError::Foreign { .. } | JournalError::Damaged { .. }) => return,
        Err(e) => panic!("recovery failed: {e:?}"),
    };
    if let Some(record) = record {
        let at = journal.newest().expect("a record comes from a page");
        let off = journal.newest_offset().expect("and an offset in it") as usize;
        let page = &flash.pages()[at.page as usize];
        let rest = &page[HEADER_SIZE + off..];
        let base = u32::from_le_bytes(page[12..16].try_into().unwrap());
        // Format 2: a slot of the largest size, its check word over its sequence number
        // (the page's first, header bytes 12..16, plus its index) and the payload. Format
        // 3: a byte counting the record's words before its check word, the payload and
        // padding to those words, then the check word, over those words, the record's
        // offset and the sequence number the journal reports for it. Either way a CRC-32C, a CRC that would read erased stored with
        // its low bit cleared.
        let crc32c = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
        let mut digest = crc32c.digest();
        let seq = journal.newest_seq().expect("a record has a number");
        let format = u16::from_le_bytes([page[4], page[5]]);
        let (payload_at, body, tail) = if format == 2 {
            digest.update(&(base + at.slot).to_le_bytes());
            (0, Journal::<OffsetTotal>::SLOT - 4, Vec::new())
        } else {
            assert_eq!(format, 3, "a format-2 or format-3 page");
            let mut tail = (off as u32).to_le_bytes().to_vec();
            tail.extend(seq.to_le_bytes());
            (1, usize::from(rest[0]) * 4, tail)
        };
        let bytes = &rest[..body + 4];
        digest.update(&bytes[..body]);
        digest.update(&tail);
        // A record written after the journal stepped over k torn slots or runs (1 to 15)
        // has its CRC XOR 0x5EA1_ED00 XOR k << 1.
        let seal = |crc: u32| if crc == u32::MAX { crc - 1 } else { crc };
        let crc = digest.finalize();
        let stored = u32::from_le_bytes(bytes[body..].try_into().unwrap());
        assert!(
            stored == seal(crc) || (1..=15).any(|k| stored == seal(crc ^ 0x5EA1_ED00 ^ (k << 1))),
            "returned a record whose CRC does not match"
        );
        let payload: OffsetTotal =
            postcard::from_bytes(&bytes[payload_at..body]).expect("payload decodes");
        assert_eq!(
            payload, record,
            "returned a record other than the newest one on flash"
        );
    }
    let next = OffsetTotal {
        offset: 7,
        total: 7,
    };
    match journal.append(&mut flash, &next) {
        Ok(()) => {}
        Err(JournalError::Flash(FlashError::UnitWrittenTwice { address })) => {
            panic!("programmed the word at {address:#x} twice")
        }
        Err(JournalError::Foreign { .. }) => return,
        Err(e) => panic!("append after recovery failed: {e:?}"),
    }
    let (_, again) = Journal::<OffsetTotal>::open(&mut flash, REGION, TAG).expect("reopen");
    assert_eq!(again, Some(next), "the appended record is the newest");
}
