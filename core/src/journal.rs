//! A journal of postcard records in fixed-size slots on NOR flash.
//!
//! A journal owns one [`Region`] of whole pages and writes its records round-robin
//! through it. Each page starts with a 20-byte header (magic, format version, slot size,
//! a tag naming what the journal holds, the sequence number of the page's first slot, and
//! a CRC over the four words before it). Each record fills one slot: the postcard payload
//! padded with `0xFF`, and a check word, written last in its own word write. (On a flash
//! that programs 8 to 32 bytes at a time, each unit once, as ECC flash does, the header's
//! words and a record's payload are padded to whole units and the check word gets a unit
//! of its own, with its complement beside it: [`header_size`], [`slot_size_on`].) A record's
//! sequence number is not stored in its slot (format 2; format 1 spent a word of every
//! slot on it): it is the page's first sequence number plus the slot's index, so the
//! numbers run on, one per slot, around the ring. The check word is a CRC-32C over the
//! sequence number and the payload, so a record is valid only at the position it was
//! written for. [`Journal::open`] scans the region once; the valid record with the
//! highest sequence number wins, and the write cursor stays in RAM after that, so an
//! append costs one slot write (plus a page erase and header when it enters a new page).
//!
//! Crash safety: a record counts only once its check word is in place, so a crash between
//! any two flash operations leaves either the previous record or the new one as the
//! newest. A check word never reads erased (a CRC of `0xFFFF_FFFF` is stored with its
//! low bit cleared, and checked the same way). A slot that is neither blank nor valid is
//! skipped whole (its sequence number goes unused), a slot is blank-checked before it is
//! programmed, and a page is erased every time the cursor enters it (even one that reads
//! blank: interrupted erases can leave a page that reads all ones without being reliably
//! erased) and never while it holds the newest record. A page that is neither blank nor
//! valid (never written, or an erase cut short) is erased before use; before that,
//! recovery checks its slots against the sequence numbers they would carry if they were
//! newer than the newest readable record (the number its damaged header still reads, and
//! the one its place after the newest record's page gives, or with no readable record
//! the one of a first pass around the ring), and refuses the region if one is: a damaged
//! header must not roll a journal back. A record written after the journal stepped over
//! torn slots says so in its check word ([`AFTER_TORN`]), so a write cut short is told
//! apart from a record lost later.
//!
//! It knows nothing of offsets or stores: those are [`crate::consumer`] and
//! [`crate::store`]. On its own it is a durable record of any state, updated with no
//! event at all: a setting, a calibration, a counter of boots.
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use idem_core::MaxSize;
//! use idem_core::journal::{Journal, Region};
//! use idem_core::testing::flash::MemFlash;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, MaxSize)]
//! struct Settings { brightness: u8, volume: u8 }
//!
//! type Flash = MemFlash<4, 1024>; // your chip's NorFlash driver here
//! let region = Region::of_pages::<Flash>(2, 2);
//! let mut flash = Flash::new();
//! let (mut settings, found) = Journal::<Settings>::open(&mut flash, region, 0x5E77).unwrap();
//! let mut now = found.unwrap_or_default(); // blank flash: the defaults
//! now.brightness = 7;
//! settings.append(&mut flash, &now).unwrap(); // durable once this returns
//! // ... a reset later:
//! let (_, found) = Journal::<Settings>::open(&mut flash, region, 0x5E77).unwrap();
//! assert_eq!(found, Some(Settings { brightness: 7, volume: 0 }));
//! # }
//! ```

use core::marker::PhantomData;

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Serialize, de::DeserializeOwned};

/// Marks a page as one of idem's journal pages. Neither all ones nor all zeros.
pub const MAGIC: u32 = 0x1DE5_0A7C;
/// The on-flash format of pages and records. A journal refuses pages of another version.
pub const FORMAT_VERSION: u16 = 2;
/// Bytes of the page header on a flash whose write unit is at most a word (4 bytes): four
/// words, then the CRC word. See [`header_size`] for the others.
pub const HEADER_SIZE: usize = 20;

/// The largest write unit a journal supports: an STM32H7's 32-byte flash word.
pub const MAX_WRITE_SIZE: usize = 32;

/// The unit a journal programs on a flash that writes `write_size` bytes at a time: a
/// word, or the flash's own unit when it is larger. Each unit is programmed once between
/// two erases, as ECC flash requires (an STM32L4 writes 8-byte double-words, an STM32H7
/// 32-byte flash words), so the check word of a record, written last, gets a unit of its
/// own.
pub const fn write_unit(write_size: usize) -> usize {
    if write_size < 4 { 4 } else { write_size }
}

/// Bytes of the page header on a flash that writes `write_size` bytes at a time: the four
/// header words padded to a whole unit, then the CRC word in a unit of its own (20 bytes
/// on a word flash, 24 on an 8-byte one, 64 on a 32-byte one).
pub const fn header_size(write_size: usize) -> usize {
    let unit = write_unit(write_size);
    16usize.div_ceil(unit) * unit + unit
}
/// The largest slot a journal supports (bounds the stack buffer used to write one).
pub const MAX_SLOT_SIZE: usize = 512;

/// The largest page header: on a 32-byte flash word.
const MAX_HEADER: usize = header_size(MAX_WRITE_SIZE);

/// Slots up to this size are written from a buffer of this size (plus the sequence word).
const SMALL_SLOT: usize = 64;

/// A slot as the journal handles it in RAM: the record's sequence number (never written
/// to flash, but covered by the check word), then the slot's bytes (payload, check word).
/// The check word is one CRC over the first `slot` bytes.
type SlotBuf = [u8; 4 + MAX_SLOT_SIZE];

/// CRC-32C. On bare metal it is computed bit by bit (no table: 1 KiB less flash, and a
/// slot is a few dozen bytes); hosted builds use sixteen 256-entry tables (slice-by-16,
/// 16 KiB of RAM) for speed, since the simulator and the sweeps append millions of
/// records. All give the same checksums, so images move freely between the two.
#[cfg(target_os = "none")]
const CRC: crc::Crc<u32, crc::NoTable> = crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISCSI);
#[cfg(not(target_os = "none"))]
const CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);
const ERASED_WORD: u32 = u32::MAX;

/// CRC-32C of `bytes`. One copy on bare metal, where it is small but slow enough that
/// inlining it at each of its four callers costs flash for nothing.
#[cfg_attr(target_os = "none", inline(never))]
fn crc32c(bytes: &[u8]) -> u32 {
    CRC.checksum(bytes)
}

/// The sequence number of a region's first record.
const FIRST_SEQ: u32 = 1;

/// The size in bytes of the slot that holds a record of type `T` on a flash whose write
/// unit is at most a word: the largest postcard encoding of `T` and a check word, rounded
/// up to a whole word.
pub const fn slot_size<T: MaxSize>() -> usize {
    slot_size_on::<T>(4)
}

/// The size in bytes of the slot that holds a record of type `T` on a flash that writes
/// `write_size` bytes at a time: the largest postcard encoding of `T` padded to whole
/// units, then the check word in a unit of its own.
pub const fn slot_size_on<T: MaxSize>(write_size: usize) -> usize {
    let unit = write_unit(write_size);
    T::POSTCARD_MAX_SIZE.div_ceil(unit) * unit + unit
}

/// XORed into the check word of a record written after the journal stepped over torn
/// slots, with the number of those slots (1 to [`TORN_MAX`]) in bits 1 to 4.
///
/// The mark is what tells a write cut short apart from a record lost later: the slot of a
/// write cut short is stepped over by the next append after the restart, which says so,
/// and how many slots it stepped over, in its own check word. A record damaged after it
/// was written leaves a hole no newer record vouches for, or one slot more than the
/// vouching record counted (a write cut short right after it, then the record damaged).
/// A slot of random bytes passes as a record with odds of 16 in 2^32 (1 in 2^32 without
/// the mark). On a flash whose write unit is 8 bytes or more, the check word's unit also
/// holds its complement, and the odds are 16 in 2^64: a torn erase of a 1 KiB page on an
/// 8-byte flash has 62 slots that recovery checks against two sequence numbers each, and
/// 100,000 random power cuts met a slot that passed the 32-bit check alone.
pub const AFTER_TORN: u32 = 0x5EA1_ED00;
/// The most torn slots a check word counts; a count of `TORN_MAX` means that many or more.
pub const TORN_MAX: u32 = 15;
const TORN_BITS: u32 = TORN_MAX << 1;

/// What a check word is XORed with for a record written over `torn` torn slots.
const fn torn_mark(torn: u32) -> u32 {
    if torn == 0 {
        0
    } else {
        AFTER_TORN | (if torn < TORN_MAX { torn } else { TORN_MAX } << 1)
    }
}

/// The check word for `crc`, the CRC-32C over a record's sequence number (little-endian)
/// and its slot bytes before the check word: XOR [`AFTER_TORN`] and the count when the
/// journal stepped over `torn` slots to write it, and never `0xFFFF_FFFF` (which would
/// read as a word never written: such a value is stored with its low bit cleared).
const fn check_word(crc: u32, torn: u32) -> u32 {
    let check = crc ^ torn_mark(torn);
    if check == ERASED_WORD {
        check & !1
    } else {
        check
    }
}

/// A compact (offset, total) record: fixed-width little-endian fields, 8 bytes of
/// payload, so its slot is 12 bytes (payload, check word). Use it where a counter with a
/// 32-bit range is enough and flash wear matters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OffsetTotal {
    /// Next offset to read.
    #[serde(with = "postcard::fixint::le")]
    pub offset: u32,
    /// The running total.
    #[serde(with = "postcard::fixint::le")]
    pub total: i32,
}

impl MaxSize for OffsetTotal {
    const POSTCARD_MAX_SIZE: usize = 8;
}

/// The count of appends a journal handle keeps. 32 bits on bare metal, where a 64-bit
/// field in the journal (8-byte aligned, moved at every layer of recovery) cost 644 bytes
/// of Cortex-M0 code in idem-feed, and where a flash wears out long before 2^32 appends
/// (at 20,000 cycles a page, 256 KiB of 1 KiB pages take 5,120,000 erases, some 420
/// million 12-byte records); 64 bits on a host.
#[cfg(target_os = "none")]
type Count = u32;
#[cfg(not(target_os = "none"))]
type Count = u64;

/// A run of whole flash pages given to one journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte address of the first page; a multiple of the page size.
    pub start: u32,
    /// How many pages; at least 2.
    pub pages: u32,
}

impl Region {
    /// The `pages` pages from page `first` on, in the pages of the flash `F`
    /// (`ERASE_SIZE` bytes each): a region made from page numbers, never from byte
    /// addresses worked out by hand.
    pub const fn of_pages<F: NorFlash>(first: u32, pages: u32) -> Self {
        Self {
            start: first * F::ERASE_SIZE as u32,
            pages,
        }
    }

    /// The `pages` pages right after this region, on the flash `F`.
    pub const fn next<F: NorFlash>(&self, pages: u32) -> Self {
        Self {
            start: self.end::<F>(),
            pages,
        }
    }

    /// The byte address just past the region's last page, on the flash `F`.
    pub const fn end<F: NorFlash>(&self) -> u32 {
        self.start + self.pages * F::ERASE_SIZE as u32
    }
}

/// What a journal can fail with; `E` is the flash driver's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum JournalError<E> {
    /// The flash driver failed (including a power cut).
    Flash(E),
    /// The region is not made of at least two whole pages inside the flash.
    BadRegion,
    /// A page carries a valid header of another journal: another format version, slot
    /// size or tag. Nothing was changed.
    Foreign {
        /// Page index inside the region.
        page: u32,
        /// The tag found in the header.
        tag: u32,
        /// The format version found in the header.
        version: u16,
    },
    /// The newest record has a valid CRC but does not decode as this journal's type.
    Decode,
    /// The record did not fit its slot (a `MaxSize` that understates the encoding).
    Encode,
    /// No blank slot could be found without erasing the page of the newest record.
    NoSpace,
    /// The page at byte `address` has a damaged header but holds a record newer than
    /// every readable one: recovering without it would lose committed data. Nothing was
    /// changed.
    Damaged {
        /// Byte address of the page in the flash.
        address: u32,
    },
}

impl<E: core::fmt::Display> core::fmt::Display for JournalError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Flash(e) => write!(f, "flash error: {e}"),
            Self::BadRegion => {
                f.write_str("journal region must be at least two whole pages inside the flash")
            }
            Self::Foreign { page, version, .. } if *version != FORMAT_VERSION => write!(
                f,
                "page {page} holds a journal in format {version}, and this idem reads format {FORMAT_VERSION} only"
            ),
            Self::Foreign { page, tag, version } => write!(
                f,
                "page {page} belongs to another journal (tag {tag:#010x}, format version {version})"
            ),
            Self::Decode => f.write_str("the newest journal record does not decode"),
            Self::Encode => f.write_str("a record does not fit its journal slot"),
            Self::NoSpace => f.write_str("no blank journal slot is left"),
            Self::Damaged { address } => write!(
                f,
                "the journal page at flash address {address:#x} has a damaged header but holds its newest record"
            ),
        }
    }
}

impl<E: core::fmt::Display + core::fmt::Debug> core::error::Error for JournalError<E> {}

/// What the recovery scan found in one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// Every byte reads `0xFF`.
    Blank,
    /// A valid header of this journal.
    Valid,
    /// Neither blank nor a valid header: erased before use.
    Unformatted,
}

/// What one page of a journal holds, for inspection (for an unformatted page too: valid
/// records there are what a damaged header hides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSummary {
    /// Blank, valid or unformatted.
    pub state: PageState,
    /// Slots holding a valid record.
    pub valid: u32,
    /// Slots neither blank nor valid (a write cut short).
    pub torn: u32,
    /// Blank slots.
    pub blank: u32,
    /// The highest sequence number among the valid records.
    pub newest_seq: Option<u32>,
}

/// Where a slot is: page index inside the region and slot index inside the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotAddr {
    /// Page index inside the region.
    pub page: u32,
    /// Slot index inside the page.
    pub slot: u32,
}

/// A typed journal of `T` records over a [`Region`] of a [`NorFlash`].
///
/// The journal keeps only its cursor in RAM; every call takes the flash, so several
/// journals can share one flash driver. Only encoding and decoding depend on `T`: the
/// scan, the slot walk and the page format are one `Ring` for every record type, so a
/// firmware with five journals carries that code once.
#[derive(Debug, Clone)]
pub struct Journal<T> {
    ring: Ring,
    _record: PhantomData<fn() -> T>,
}

/// The untyped part of a journal: its pages, slot size, sequence and cursor.
#[derive(Debug, Clone)]
struct Ring {
    region: Region,
    slot: u32,
    /// Slots in one page, worked out at compile time per record type (no run-time
    /// division, which would pull a software divider into a Cortex-M0 image).
    per_page: u32,
    tag: u32,
    /// The sequence number of the cursor's page's first slot (of the page it will enter,
    /// when it is not ready).
    cursor_base: u32,
    newest: Option<SlotAddr>,
    newest_seq: u32,
    cursor: SlotAddr,
    cursor_page_ready: bool,
    /// The cursor's page was erased by this ring and every slot from the cursor on has
    /// been left alone since: they are blank without reading them.
    cursor_page_fresh: bool,
    appended: Count,
    /// Made by [`Journal::for_inspection`]: never writes.
    inspect_only: bool,
}

impl<T: Serialize + DeserializeOwned + MaxSize> Journal<T> {
    /// Bytes of one slot of this journal on a flash whose write unit is at most a word
    /// (the nRF51 and nRF52 of the micro:bit); [`Journal::slot_on`] for any flash.
    pub const SLOT: usize = slot_size::<T>();

    /// Bytes of one slot of this journal on the flash `F`.
    pub const fn slot_on<F: NorFlash>() -> usize {
        slot_size_on::<T>(F::WRITE_SIZE)
    }

    /// Scans `region` and returns the journal with its cursor after the newest valid
    /// record, and that record (`None` on a blank or unformatted region). Reads only.
    pub fn open<F: NorFlash>(
        flash: &mut F,
        region: Region,
        tag: u32,
    ) -> Result<(Self, Option<T>), JournalError<F::Error>> {
        const {
            assert!(
                F::WRITE_SIZE.is_power_of_two() && F::WRITE_SIZE <= MAX_WRITE_SIZE,
                "idem's journal needs a flash whose WRITE_SIZE is 1, 2, 4, 8, 16 or 32 bytes"
            );
            assert!(
                Self::slot_on::<F>() <= MAX_SLOT_SIZE,
                "journal record too large for a slot"
            );
            assert!(
                F::ERASE_SIZE.is_multiple_of(write_unit(F::WRITE_SIZE))
                    && header_size(F::WRITE_SIZE) + Self::slot_on::<F>() <= F::ERASE_SIZE,
                "journal slot larger than a page of this flash (ERASE_SIZE)"
            );
        }
        let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
        let (ring, found) = Ring::open(flash, region, tag, Self::geometry::<F>(), &mut buf)?;
        let record = if found {
            let payload = &buf[4..4 + Self::slot_on::<F>() - write_unit(F::WRITE_SIZE)];
            Some(
                postcard::take_from_bytes(payload)
                    .map_err(|_| JournalError::Decode)?
                    .0,
            )
        } else {
            None
        };
        Ok((
            Self {
                ring,
                _record: PhantomData,
            },
            record,
        ))
    }

    /// Appends `record` as the new newest record. `Ok` only once its CRC word is written.
    pub fn append<F: NorFlash>(
        &mut self,
        flash: &mut F,
        record: &T,
    ) -> Result<(), JournalError<F::Error>> {
        self.append_view(flash, record)
    }

    /// Appends a value that encodes exactly as a `T` (a struct of borrowed fields beside
    /// the owned one), so a large record need not be cloned to be written.
    pub(crate) fn append_view<F: NorFlash, V: Serialize + ?Sized>(
        &mut self,
        flash: &mut F,
        record: &V,
    ) -> Result<(), JournalError<F::Error>> {
        // A journal of small records fills a small buffer: clearing a whole
        // `MAX_SLOT_SIZE` one cost a 512-byte memset per append (44 instructions of 674 in
        // the callgrind profile). `SLOT` is a constant, so only one branch is compiled.
        let (slot, unit) = (Self::slot_on::<F>(), write_unit(F::WRITE_SIZE));
        if slot <= SMALL_SLOT {
            let mut buf = [0xFFu8; 4 + SMALL_SLOT];
            postcard::to_slice(record, &mut buf[4..4 + slot - unit])
                .map_err(|_| JournalError::Encode)?;
            self.ring.append(flash, &mut buf[..4 + slot])
        } else {
            let mut buf = [0xFFu8; 4 + MAX_SLOT_SIZE];
            postcard::to_slice(record, &mut buf[4..4 + slot - unit])
                .map_err(|_| JournalError::Encode)?;
            self.ring.append(flash, &mut buf[..4 + slot])
        }
    }

    /// The slot size and slots per page on the flash `F`, worked out at compile time.
    const fn geometry<F: NorFlash>() -> Geometry {
        Geometry {
            slot: Self::slot_on::<F>() as u32,
            per_page: ((F::ERASE_SIZE - header_size(F::WRITE_SIZE)) / Self::slot_on::<F>()) as u32,
        }
    }

    /// A handle on `region` for [`Journal::summarize`] and [`Journal::page_state`] only,
    /// without the scan [`Journal::open`] does (which refuses a damaged journal). Reads
    /// nothing; appending through it is refused.
    pub fn for_inspection<F: NorFlash>(region: Region, tag: u32) -> Self {
        Self {
            ring: Ring::new(region, tag, Self::geometry::<F>(), true),
            _record: PhantomData,
        }
    }

    /// What page `page` of the region holds.
    pub fn summarize<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<PageSummary, JournalError<F::Error>> {
        self.ring.summarize(flash, page)
    }

    /// The sequence number of the newest record, if any.
    pub fn newest_seq(&self) -> Option<u32> {
        self.ring.newest.map(|_| self.ring.newest_seq)
    }

    /// Visits the valid records from the newest back, newest first, while `visit`
    /// returns `true`: the records a store rebuilds its state from
    /// ([`crate::persist::Appended`]). Each comes with its sequence number and whether it
    /// follows on from the record visited last: in the slot right before it, or with only
    /// torn slots between that the newer record was written over (writes cut short, see
    /// [`AFTER_TORN`]); either way none can have been lost there. Slots that hold no valid
    /// record are stepped over; the walk stops at a page that is not this journal's or
    /// after a full turn of the ring.
    pub fn recent<F: NorFlash>(
        &self,
        flash: &mut F,
        mut visit: impl FnMut(u32, T, bool) -> bool,
    ) -> Result<(), JournalError<F::Error>> {
        let mut failed = false;
        self.ring.walk_back(
            flash,
            &mut |seq, body, adjacent| match postcard::from_bytes::<T>(body) {
                Ok(record) => visit(seq, record, adjacent),
                Err(_) => {
                    failed = true;
                    false
                }
            },
        )?;
        if failed {
            return Err(JournalError::Decode);
        }
        Ok(())
    }

    /// Records appended through this handle since it was opened.
    // A conversion on bare metal, where the count is 32 bits.
    #[allow(clippy::useless_conversion)]
    pub fn appended(&self) -> u64 {
        u64::from(self.ring.appended)
    }

    /// Where the newest valid record is, if any.
    pub fn newest(&self) -> Option<SlotAddr> {
        self.ring.newest
    }

    /// The slot the next append will try first.
    pub fn cursor(&self) -> SlotAddr {
        self.ring.cursor
    }

    /// Slots in one page.
    pub fn slots_per_page(&self) -> u32 {
        self.ring.slots_per_page()
    }

    /// Classifies page `page` of the region; a valid header of another journal is an error.
    pub fn page_state<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<PageState, JournalError<F::Error>> {
        self.ring.page_state(flash, page)
    }
}

/// A journal's page layout on one flash: slot size and slots per page. The write unit and
/// the header size are constants of the flash type (`unit::<F>()`, `header::<F>()`), so
/// a firmware with one flash compiles them in, as it did when every unit was a word.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    slot: u32,
    per_page: u32,
}

/// The unit a journal programs on the flash `F` ([`write_unit`]).
const fn unit<F: NorFlash>() -> usize {
    write_unit(F::WRITE_SIZE)
}

/// Bytes of a page header on the flash `F` ([`header_size`]).
const fn header<F: NorFlash>() -> u32 {
    header_size(F::WRITE_SIZE) as u32
}

impl Ring {
    /// A ring on `region` with the layout `geometry`, before any scan.
    fn new(region: Region, tag: u32, geometry: Geometry, inspect_only: bool) -> Self {
        Self {
            region,
            slot: geometry.slot,
            per_page: geometry.per_page,
            tag,
            cursor_base: FIRST_SEQ,
            newest: None,
            newest_seq: 0,
            cursor: SlotAddr { page: 0, slot: 0 },
            cursor_page_ready: false,
            cursor_page_fresh: false,
            appended: 0,
            inspect_only,
        }
    }

    /// Scans `region` laid out as `geometry`: the ring with its cursor after the newest
    /// valid record, and whether there is one (then `buf` holds its slot).
    fn open<F: NorFlash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        geometry: Geometry,
        buf: &mut SlotBuf,
    ) -> Result<(Self, bool), JournalError<F::Error>> {
        let page_size = F::ERASE_SIZE as u32;
        let end = u64::from(region.start) + u64::from(region.pages) * u64::from(page_size);
        if region.pages < 2
            || !(region.start as usize).is_multiple_of(F::ERASE_SIZE)
            || end > flash.capacity() as u64
        {
            return Err(JournalError::BadRegion);
        }
        let per_page = geometry.per_page;
        let mut r = Self::new(region, tag, geometry, false);
        // The newest record: its sequence number, slot and page's first sequence number.
        let mut newest: Option<(u32, SlotAddr, u32)> = None;
        // Valid pages first, then the pages whose header does not read valid. An erase
        // cut short leaves a page unformatted, but only ever one that held older records
        // (the page of the newest record is never erased). A record newer than every
        // readable one in such a page means its header was damaged afterwards:
        // recovering without it would roll the journal back. Without its header a slot's
        // sequence number is unknown, so it is checked against each number it would carry
        // if it were newer: the first sequence number the damaged header still reads, and
        // the one the page has when it comes after the newest record's page in the ring
        // (with no valid page, the one of a first pass around the ring). A slot of random
        // bytes passes one of them with odds of about 2 in 2^32.
        for pass in [PageState::Valid, PageState::Unformatted] {
            for page in 0..region.pages {
                let (state, read_base) = r.header(flash, page)?;
                if state != pass {
                    continue;
                }
                let after_newest = newest.map_or(
                    FIRST_SEQ.wrapping_add(page.wrapping_mul(per_page)),
                    |(_, at, base)| {
                        let ahead = if page > at.page {
                            page - at.page
                        } else {
                            page + region.pages - at.page
                        };
                        base.wrapping_add(ahead.wrapping_mul(per_page))
                    },
                );
                let mut base = read_base;
                loop {
                    for slot in 0..per_page {
                        let at = SlotAddr { page, slot };
                        if let Some(seq) = r.read_slot(flash, at, base, buf)?
                            && newest.is_none_or(|(s, _, _)| seq > s)
                        {
                            if pass != PageState::Valid {
                                return Err(JournalError::Damaged {
                                    address: region.start + page * page_size,
                                });
                            }
                            newest = Some((seq, at, base));
                        }
                    }
                    if pass == PageState::Valid || base == after_newest {
                        break;
                    }
                    base = after_newest;
                }
            }
        }
        match newest {
            Some((seq, at, base)) => {
                r.newest_seq = seq;
                r.newest = Some(at);
                r.cursor = r.after(at);
                r.cursor_page_ready = r.cursor.page == at.page;
                r.cursor_base = if r.cursor_page_ready {
                    base
                } else {
                    base.wrapping_add(per_page)
                };
                r.read_slot(flash, at, base, buf)?;
                Ok((r, true))
            }
            // No record: the first append erases page 0 and starts there, at the first
            // sequence number (a header without records is worth one erase, not a rule).
            None => Ok((r, false)),
        }
    }

    /// Writes the slot in `buf` (four bytes for the sequence number, then one slot, the
    /// payload in place, padded with `0xFF`) as the new newest record: fills in its
    /// sequence number and check word, then programs the slot at the cursor: the payload's
    /// units first, then the check word's.
    /// Inlined into each typed journal's append, so a host build sees the slot size as a
    /// constant (the firmware, built for size, keeps one copy).
    #[inline]
    fn append<F: NorFlash>(
        &mut self,
        flash: &mut F,
        buf: &mut [u8],
    ) -> Result<(), JournalError<F::Error>> {
        let slot = buf.len() - 4;
        // Where the check word starts in `buf`: after the sequence number and the
        // payload's units.
        let check_at = buf.len() - unit::<F>();
        if self.inspect_only {
            return Err(JournalError::NoSpace);
        }
        let attempts = self.region.pages * self.slots_per_page() + 1;
        // Each pass that does not write steps over one torn slot: the pass number is how
        // many this append has stepped over (the first since a restart, after a write that
        // was cut, counts them all).
        for stepped_over in 0..attempts {
            if !self.cursor_page_ready {
                self.enter_page(flash, self.cursor.page)?;
            }
            let addr = self.slot_address::<F>(self.cursor);
            // A page this ring erased holds nothing past the cursor: no need to read the
            // slot back (88 of 674 instructions a commit in the callgrind profile). A page
            // found at recovery may hold a torn write: read it.
            if self.cursor_page_fresh || blank(flash, addr, slot as u32)? {
                let seq = self.cursor_base.wrapping_add(self.cursor.slot);
                buf[..4].copy_from_slice(&seq.to_le_bytes());
                let check = check_word(crc32c(&buf[..check_at]), stepped_over);
                buf[check_at..][..4].copy_from_slice(&check.to_le_bytes());
                if unit::<F>() >= 8 {
                    // A wide unit has room for the complement: 32 more check bits.
                    buf[check_at + 4..check_at + 8].copy_from_slice(&(!check).to_le_bytes());
                }
                // A failed write may leave the slot half programmed: until both writes
                // are done, the page counts as not fresh (slots are read again).
                let fresh = core::mem::take(&mut self.cursor_page_fresh);
                flash
                    .write(addr, &buf[4..check_at])
                    .map_err(JournalError::Flash)?;
                flash
                    .write(addr + (check_at - 4) as u32, &buf[check_at..])
                    .map_err(JournalError::Flash)?;
                self.cursor_page_fresh = fresh;
                self.newest = Some(self.cursor);
                self.newest_seq = seq;
                self.appended += 1;
                self.advance();
                return Ok(());
            }
            // Not blank (a torn write from before a crash): skip the slot whole, and say
            // so in the record that follows.
            self.advance();
        }
        Err(JournalError::NoSpace)
    }

    fn summarize<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<PageSummary, JournalError<F::Error>> {
        let (state, base) = self.header(flash, page)?;
        let mut sum = PageSummary {
            state,
            valid: 0,
            torn: 0,
            blank: 0,
            newest_seq: None,
        };
        if state == PageState::Blank {
            return Ok(sum);
        }
        // An unformatted page is counted too, with the first sequence number its header
        // still reads: records in it are damage to show.
        let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
        for slot in 0..self.slots_per_page() {
            match self.read_slot(flash, SlotAddr { page, slot }, base, &mut buf)? {
                Some(seq) => {
                    sum.valid += 1;
                    sum.newest_seq = Some(sum.newest_seq.map_or(seq, |s| s.max(seq)));
                }
                None if buf[4..4 + self.slot as usize].iter().all(|&b| b == 0xFF) => sum.blank += 1,
                None => sum.torn += 1,
            }
        }
        Ok(sum)
    }

    fn slots_per_page(&self) -> u32 {
        self.per_page
    }

    fn page_state<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<PageState, JournalError<F::Error>> {
        Ok(self.header(flash, page)?.0)
    }

    /// Classifies page `page`, with the first sequence number its header reads (valid or
    /// not); a valid header of another journal is an error.
    fn header<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<(PageState, u32), JournalError<F::Error>> {
        let base = self.region.start + page * (F::ERASE_SIZE as u32);
        // The four header words, then the CRC word, which starts the header's last unit
        // (right after them on a word flash: one read).
        let mut h = [0u8; HEADER_SIZE];
        let crc_at = header::<F>() - unit::<F>() as u32;
        if crc_at == 16 {
            flash.read(base, &mut h).map_err(JournalError::Flash)?;
        } else {
            flash
                .read(base, &mut h[..16])
                .map_err(JournalError::Flash)?;
            flash
                .read(base + crc_at, &mut h[16..])
                .map_err(JournalError::Flash)?;
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let first_seq = word(12);
        if h.iter().all(|&b| b == 0xFF) {
            // Past the CRC word on a word flash; on a wider one, the padding too.
            let rest = base + if crc_at == 16 { 20 } else { 16 };
            let state = if blank(flash, rest, base + F::ERASE_SIZE as u32 - rest)? {
                PageState::Blank
            } else {
                PageState::Unformatted
            };
            return Ok((state, first_seq));
        }
        let version = (word(4) & 0xFFFF) as u16;
        // Format 1's header was 16 bytes, its CRC in the fourth word: a page written by it
        // is another journal's, not damage to erase.
        if word(0) == MAGIC && version == 1 && crc32c(&h[..12]) == word(12) {
            return Err(JournalError::Foreign {
                page,
                tag: word(8),
                version,
            });
        }
        if word(0) != MAGIC || crc32c(&h[..16]) != word(16) {
            // A journal written on a flash of another write unit has its CRC word where
            // that unit puts it (at 16 up to 16-byte units, at 32 on 32-byte ones), and
            // another slot size (the same record takes a different slot on each unit):
            // another journal's page, not damage to erase. A page of this journal whose
            // CRC word was damaged says this slot size, so record bytes that happen to
            // match its CRC cannot make it foreign.
            let at = if crc_at == 16 { 32 } else { 16 };
            if word(0) == MAGIC && word(4) >> 16 != self.slot && at + 4 <= F::ERASE_SIZE as u32 {
                let mut other = [0u8; 4];
                flash
                    .read(base + at, &mut other)
                    .map_err(JournalError::Flash)?;
                if u32::from_le_bytes(other) == crc32c(&h[..16]) {
                    return Err(JournalError::Foreign {
                        page,
                        tag: word(8),
                        version,
                    });
                }
            }
            return Ok((PageState::Unformatted, first_seq));
        }
        let slot = word(4) >> 16;
        if version != FORMAT_VERSION || slot != self.slot || word(8) != self.tag {
            return Err(JournalError::Foreign {
                page,
                tag: word(8),
                version,
            });
        }
        Ok((PageState::Valid, first_seq))
    }

    /// See [`Journal::recent`]: `visit` gets each valid record's sequence number and
    /// payload bytes, newest first.
    fn walk_back<F: NorFlash>(
        &self,
        flash: &mut F,
        visit: &mut dyn FnMut(u32, &[u8], bool) -> bool,
    ) -> Result<(), JournalError<F::Error>> {
        let Some(mut at) = self.newest else {
            return Ok(());
        };
        // Whether every slot since the record visited last held a valid record, or that
        // record was written over exactly the torn slots between.
        let slot = (self.slot as usize).clamp(4, MAX_SLOT_SIZE);
        let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
        let mut checked = None;
        let mut base = 0;
        // The torn slots the record visited last was written over, and the slots without a
        // valid record met since.
        let (mut vouched, mut gap) = (0, 0);
        for _ in 0..self.region.pages * self.slots_per_page() {
            if checked != Some(at.page) {
                let (state, first_seq) = self.header(flash, at.page)?;
                if state != PageState::Valid {
                    break;
                }
                checked = Some(at.page);
                base = first_seq;
            }
            match self.read_record(flash, at, base, &mut buf)? {
                Some((seq, _))
                    if !visit(
                        seq,
                        &buf[4..4 + slot - unit::<F>().min(slot)],
                        gap == vouched || (vouched == TORN_MAX && gap > TORN_MAX),
                    ) =>
                {
                    break;
                }
                Some((_, torn)) => (vouched, gap) = (torn, 0),
                None => gap += 1,
            }
            at = if at.slot > 0 {
                SlotAddr {
                    page: at.page,
                    slot: at.slot - 1,
                }
            } else {
                SlotAddr {
                    page: at.page.checked_sub(1).unwrap_or(self.region.pages - 1),
                    slot: self.slots_per_page() - 1,
                }
            };
        }
        Ok(())
    }

    /// Reads the slot at `at`, in a page whose first sequence number is `base`, into
    /// `buf`; its sequence number when it holds a valid record.
    fn read_slot<F: NorFlash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        base: u32,
        buf: &mut SlotBuf,
    ) -> Result<Option<u32>, JournalError<F::Error>> {
        Ok(self.read_record(flash, at, base, buf)?.map(|(seq, _)| seq))
    }

    /// [`Ring::read_slot`], and how many torn slots were stepped over to write the record
    /// (as its check word counts them).
    fn read_record<F: NorFlash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        base: u32,
        buf: &mut SlotBuf,
    ) -> Result<Option<(u32, u32)>, JournalError<F::Error>> {
        // A slot holds at least its check word, and fits the buffer.
        let slot = (self.slot as usize).clamp(4, MAX_SLOT_SIZE);
        flash
            .read(self.slot_address::<F>(at), &mut buf[4..4 + slot])
            .map_err(JournalError::Flash)?;
        let seq = base.wrapping_add(at.slot);
        buf[..4].copy_from_slice(&seq.to_le_bytes());
        // The check word starts the slot's last unit (`slot` is at least one unit).
        let c = 4 + slot - unit::<F>().min(slot);
        let check = u32::from_le_bytes([buf[c], buf[c + 1], buf[c + 2], buf[c + 3]]);
        // A check word that reads erased was never written (`check_word` never is one).
        if check == ERASED_WORD {
            return Ok(None);
        }
        if unit::<F>() >= 8
            && u32::from_le_bytes([buf[c + 4], buf[c + 5], buf[c + 6], buf[c + 7]]) != !check
        {
            return Ok(None);
        }
        // `check_word` in reverse: the stored word is the CRC, or the CRC XOR the mark, with
        // the low bit cleared where that made `0xFFFF_FFFF`.
        let sealed = if check == ERASED_WORD & !1 { !1 } else { !0 };
        let mark = (crc32c(&buf[..c]) ^ check) & sealed;
        let torn = (mark & TORN_BITS) >> 1;
        Ok((mark == torn_mark(torn)).then_some((seq, torn)))
    }

    // Out of line on bare metal: it runs once a page, and inlined into each append it
    // cost 564 bytes of Cortex-M0 code in `tools/size` (with `advance`, 628).
    #[cfg_attr(target_os = "none", inline(never))]
    fn enter_page<F: NorFlash>(
        &mut self,
        flash: &mut F,
        page: u32,
    ) -> Result<(), JournalError<F::Error>> {
        if self.newest.is_some_and(|n| n.page == page) {
            return Err(JournalError::NoSpace);
        }
        let base = self.region.start + page * (F::ERASE_SIZE as u32);
        // Refuse another journal's page; then erase even a page that reads blank: after
        // interrupted erases a page can read all ones without being reliably erased.
        self.page_state(flash, page)?;
        flash
            .erase(base, base + (F::ERASE_SIZE as u32))
            .map_err(JournalError::Flash)?;
        let mut h = [0u8; HEADER_SIZE];
        h[..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&(u32::from(FORMAT_VERSION) | (self.slot << 16)).to_le_bytes());
        h[8..12].copy_from_slice(&self.tag.to_le_bytes());
        h[12..16].copy_from_slice(&self.cursor_base.to_le_bytes());
        let crc = crc32c(&h[..16]);
        h[16..].copy_from_slice(&crc.to_le_bytes());
        if unit::<F>() == 4 {
            flash.write(base, &h[..16]).map_err(JournalError::Flash)?;
            flash
                .write(base + 16, &h[16..])
                .map_err(JournalError::Flash)?;
        } else {
            // Each part padded with 0xFF to whole units, the CRC word's unit last.
            let mut padded = [0xFFu8; MAX_HEADER];
            let crc_at = header::<F>() as usize - unit::<F>();
            padded[..16].copy_from_slice(&h[..16]);
            padded[crc_at..crc_at + 4].copy_from_slice(&h[16..]);
            flash
                .write(base, &padded[..crc_at])
                .map_err(JournalError::Flash)?;
            flash
                .write(
                    base + crc_at as u32,
                    &padded[crc_at..header::<F>() as usize],
                )
                .map_err(JournalError::Flash)?;
        }
        self.cursor = SlotAddr { page, slot: 0 };
        self.cursor_page_ready = true;
        self.cursor_page_fresh = true;
        Ok(())
    }

    fn after(&self, at: SlotAddr) -> SlotAddr {
        if at.slot + 1 < self.slots_per_page() {
            SlotAddr {
                page: at.page,
                slot: at.slot + 1,
            }
        } else {
            SlotAddr {
                page: if at.page + 1 == self.region.pages {
                    0
                } else {
                    at.page + 1
                },
                slot: 0,
            }
        }
    }

    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn advance(&mut self) {
        let next = self.after(self.cursor);
        self.cursor_page_ready = next.page == self.cursor.page;
        if !self.cursor_page_ready {
            // The numbers run on into the next page: one per slot around the ring.
            self.cursor_base = self.cursor_base.wrapping_add(self.per_page);
        }
        // Still fresh while the cursor stays in the page this ring erased.
        self.cursor_page_fresh &= self.cursor_page_ready;
        self.cursor = next;
    }

    fn slot_address<F: NorFlash>(&self, at: SlotAddr) -> u32 {
        self.region.start + at.page * (F::ERASE_SIZE as u32) + header::<F>() + at.slot * self.slot
    }
}

/// Whether the `len` bytes at `addr` all read erased (`0xFF`); read in small chunks.
fn blank<F: NorFlash>(flash: &mut F, addr: u32, len: u32) -> Result<bool, JournalError<F::Error>> {
    let mut chunk = [0u8; 64];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(64) as usize;
        flash
            .read(addr + at, &mut chunk[..n])
            .map_err(JournalError::Flash)?;
        if chunk[..n].iter().any(|&b| b != 0xFF) {
            return Ok(false);
        }
        at += n as u32;
    }
    Ok(true)
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
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
        Journal::open(f, REGION, 7).unwrap()
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
        let (mut j, _) = Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap();
        assert_eq!(j.slots_per_page(), (256 - 24) / 16);
        let r = OffsetTotal {
            offset: 3,
            total: -1,
        };
        j.append(&mut f, &r).unwrap();
        let page = &f.pages()[0];
        assert_eq!(page[..4], MAGIC.to_le_bytes());
        assert_eq!(page[20..24], [0xFF; 4], "the header's CRC unit is padded");
        let slot = &page[24..40];
        assert_eq!(slot[..8], [3, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
        let check = u32::from_le_bytes(slot[8..12].try_into().unwrap());
        assert_eq!(slot[12..16], (!check).to_le_bytes());
        // The header's three units (two of words, one for the CRC), then the slot's two:
        // five programs, each once.
        assert_eq!(f.stats().word_writes, 5);
        assert_eq!(
            Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap().1,
            Some(r)
        );
        let mut f = MemFlash::<3, 1024, 32>::new();
        let region = Region { start: 0, pages: 2 };
        let (mut j, _) = Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap();
        assert_eq!(j.slots_per_page(), 15);
        j.append(&mut f, &r).unwrap();
        assert_eq!(
            Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap().1,
            Some(r)
        );
        // A journal is not read through another geometry: the slot size differs, and the
        // header says so.
        let image: Vec<u8> = f.pages().iter().flatten().copied().collect();
        let mut word = MemFlash::<3, 1024>::from_image(&image);
        assert!(matches!(
            Journal::<OffsetTotal>::open(&mut word, region, 7),
            Err(JournalError::Foreign { .. })
        ));
    }

    /// A page of this journal whose header CRC word was damaged, with a record that
    /// happens to hold that CRC at byte 32 (where a 32-byte flash keeps its CRC word):
    /// the header's slot size is this journal's, so the page is damage, not another
    /// journal's, and the region recovers.
    #[test]
    fn record_bytes_that_match_the_header_crc_do_not_make_a_page_foreign() {
        let region = Region { start: 0, pages: 2 };
        let mut f = MemFlash::<2, 1024>::new();
        let (mut j, _) = Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap();
        let per_page = j.slots_per_page();
        j.append(
            &mut f,
            &OffsetTotal {
                offset: 1,
                total: 0,
            },
        )
        .unwrap();
        let crc = u32::from_le_bytes(f.pages()[0][16..20].try_into().unwrap());
        let mut f = MemFlash::<2, 1024>::new();
        let (mut j, _) = Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap();
        // Slot 1 starts at byte 20 + 12 = 32.
        for i in 0..per_page + 3 {
            let offset = if i == 1 { crc } else { i + 1 };
            j.append(
                &mut f,
                &OffsetTotal {
                    offset,
                    total: i as i32,
                },
            )
            .unwrap();
        }
        let mut image: Vec<u8> = f.pages().iter().flatten().copied().collect();
        assert_eq!(image[32..36], crc.to_le_bytes());
        image[16] ^= 0x01;
        let mut f = MemFlash::<2, 1024>::from_image(&image);
        let newest = per_page + 3;
        assert_eq!(
            Journal::<OffsetTotal>::open(&mut f, region, 7).unwrap().1,
            Some(OffsetTotal {
                offset: newest,
                total: newest as i32 - 1
            })
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
            j.append(
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
        // 100 records over 11-slot pages: the region wrapped several times.
        assert!(f.stats().erases >= 7, "erases: {}", f.stats().erases);
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
        j.append(
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
        j.append(
            &mut f,
            &Rec {
                offset: 1,
                total: 1,
            },
        )
        .unwrap();
        let before = *f.pages();
        let e = Journal::<Rec>::open(&mut f, REGION, 8).unwrap_err();
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

    #[test]
    fn a_cut_at_every_write_and_erase_keeps_the_last_acknowledged_record() {
        // Every word write and every erase of 60 appends, each cut once.
        let mut reference = F::new();
        let (mut j, _) = open(&mut reference);
        for i in 0..60u32 {
            j.append(
                &mut reference,
                &Rec {
                    offset: i,
                    total: i64::from(i),
                },
            )
            .unwrap();
        }
        let stats = reference.stats();
        let cuts = (1..=stats.word_writes)
            .map(PowerCut::AtWordWrite)
            .chain((1..=stats.erases).map(PowerCut::AtErase));
        let mut checked = 0;
        for cut in cuts {
            let mut f = F::new();
            f.seed_noise(checked);
            f.schedule_power_cut(cut);
            let (mut j, _) = open(&mut f);
            let mut acked = None;
            for i in 0..60u32 {
                match j.append(
                    &mut f,
                    &Rec {
                        offset: i,
                        total: i64::from(i),
                    },
                ) {
                    Ok(()) => acked = Some(i),
                    Err(JournalError::Flash(FlashError::PowerCut)) => break,
                    Err(e) => panic!("{cut:?}: {e:?}"),
                }
            }
            f.power_on();
            let (mut j, r) = open(&mut f);
            let got = r.map(|r| r.offset);
            let in_flight = acked.map_or(0, |a| a + 1);
            assert!(
                got == acked || got == Some(in_flight),
                "{cut:?}: acked {acked:?}, recovered {got:?}"
            );
            // The journal keeps working after recovery, and the next record wins.
            j.append(
                &mut f,
                &Rec {
                    offset: 1000,
                    total: 0,
                },
            )
            .unwrap();
            assert_eq!(open(&mut f).1.map(|r| r.offset), Some(1000));
            checked += 1;
        }
        assert_eq!(checked, stats.word_writes + stats.erases);
    }

    fn append_n(f: &mut F, j: &mut Journal<Rec>, from: u32, n: u32) {
        for i in from..from + n {
            j.append(
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
        j.recent(f, |seq, rec, adjacent| {
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
    fn sequence_numbers_run_on_one_per_slot_around_the_ring() {
        // 11 slots a page, 3 pages: 40 records wrap the ring once.
        let mut f = F::new();
        let (mut j, _) = open(&mut f);
        append_n(&mut f, &mut j, 0, 40);
        assert_eq!(j.newest_seq(), Some(40));
        let seen = walk(&mut f, &j);
        // The page being written holds 7 records; the two before it 11 each.
        assert_eq!(seen.len(), 29);
        assert!(
            seen.iter()
                .all(|&(seq, offset, adj)| seq == offset + 1 && adj)
        );
        let (j2, r) = open(&mut f);
        assert_eq!((j2.newest_seq(), r.map(|r| r.offset)), (Some(40), Some(39)));
    }

    #[test]
    fn a_damaged_header_over_the_newest_records_is_refused_wherever_it_is_hit() {
        // 15 records: page 0 full (1..=11), page 1 holds 12..=15. Flip each bit of page
        // 1's header: the magic, the version and slot word, the tag, the first sequence
        // number, the CRC. Each must refuse (or, for a tag or version that then reads as
        // another valid journal, call the page foreign), never fall back to 11.
        let mut f = F::new();
        let (mut j, _) = open(&mut f);
        append_n(&mut f, &mut j, 0, 15);
        let clean = image(&f);
        let header = 256 + 256; // region start + page 1
        for byte in header..header + HEADER_SIZE {
            for bit in 0..8 {
                let mut damaged = clean.clone();
                damaged[byte] ^= 1 << bit;
                let mut g = F::from_image(&damaged);
                match Journal::<Rec>::open(&mut g, REGION, 7) {
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
            j.append(
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
        // hole, and the walk says so.
        let mut damaged = image(&f);
        damaged[256 + HEADER_SIZE + Journal::<Rec>::SLOT] ^= 1;
        let mut g = F::from_image(&damaged);
        let (j, _) = open(&mut g);
        assert_eq!(
            walk(&mut g, &j),
            [(6, 11, true), (5, 10, true), (3, 2, true), (1, 0, false)]
        );
        // Record 3 (sequence 3), the one right before the torn slot, damaged: record 5
        // vouches for one torn slot, the walk finds two, and says so.
        let mut damaged = image(&f);
        damaged[256 + HEADER_SIZE + 2 * Journal::<Rec>::SLOT] ^= 1;
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
                j.append(
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
        // Sequences 3 and 4 torn; record 5 counts two and follows on from record 2.
        assert_eq!(
            walk(&mut f, &j),
            [(5, 10, true), (2, 1, true), (1, 0, true)]
        );
        // Its check word carries the count: CRC-32C over the sequence number and the
        // payload, XOR the mark with 2 in bits 1 to 4.
        let at = 256 + HEADER_SIZE + 4 * Journal::<Rec>::SLOT;
        let slot = &image(&f)[at..at + Journal::<Rec>::SLOT];
        let (body, check) = slot.split_at(Journal::<Rec>::SLOT - 4);
        let crc32c = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
        let mut digest = crc32c.digest();
        digest.update(&5u32.to_le_bytes());
        digest.update(body);
        assert_eq!(
            u32::from_le_bytes(check.try_into().unwrap()),
            digest.finalize() ^ 0x5EA1_ED00 ^ (2 << 1)
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
        let e = Journal::<Rec>::open(&mut f, REGION, 7).unwrap_err();
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
            "page 0 holds a journal in format 1, and this idem reads format 2 only"
        );
        assert_eq!(image(&f), bytes);
    }
}
