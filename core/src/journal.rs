//! A journal of postcard records on NOR flash, each at its encoded size.
//!
//! A journal owns one [`Region`] of whole pages and writes its records round-robin
//! through it. Each page starts with a 20-byte header (magic, format version, the
//! largest record's extent, a tag naming what the journal holds, the sequence number of
//! the page's first record, and a CRC over the four words before it). A record (format
//! 3) is one byte that counts its write units before the check word, its postcard
//! payload, `0xFF` to whole units, then a check word in a unit of its own, written last;
//! the next record starts right after it, and a record that does not fit the rest of the
//! page goes to the next page. A reader reads a record whole from its first byte, with no
//! decoder: a page is read a 512-byte window at a time (on a hosted build, a window of the
//! largest record where that is longer). (On a flash that programs 8 to 32
//! bytes at a time, each unit once, as ECC flash does, the header's words are padded to
//! whole units and the check word's unit holds its complement too: [`header_size`],
//! [`slot_size_on`].) Sequence numbers run on, one per record, around the ring; a
//! record's number is not stored, but its check word is a CRC-32C over its bytes, its
//! offset in the page and its number, so a record is valid only where, and as what, it
//! was written. [`Journal::open`] scans the region once; the valid record with the
//! highest sequence number wins, and the write cursor stays in RAM after that, so an
//! append costs the record's units (plus a page erase and header when it enters a new
//! page).
//!
//! Format 2 gave every record a slot of the largest record's size, numbered by its
//! index. Its pages are still read, and a format-2 page being filled when a firmware of
//! format 3 first boots is filled in format 2 to its end; the next page entered is
//! format 3 ([`FORMAT_2`]).
//!
//! Crash safety: a record counts only once its check word is in place, so a crash between
//! any two flash operations leaves either the previous record or the new one as the
//! newest. A check word never reads erased (a CRC of `0xFFFF_FFFF` is stored with its
//! low bit cleared, and checked the same way). Bytes after the newest record that are
//! not blank (a write cut short) are stepped over by the next append, to the page's last
//! byte written, and take one sequence number; a record is blank-checked before it is
//! programmed, and a page is erased every time the cursor enters it (even one that reads
//! blank: interrupted erases can leave a page that reads all ones without being reliably
//! erased) and never while it holds the newest record. A page that is neither blank nor
//! valid (never written, or an erase cut short) is erased before use; before that,
//! recovery checks its records against the sequence numbers they would carry if they
//! were newer than the newest readable record (the number its damaged header still
//! reads, and those its place after the newest record's page gives, or with no readable
//! record the one of a first pass around the ring), and refuses the region if one is: a
//! damaged header must not roll a journal back. A record written after the journal
//! stepped over torn bytes says so in its check word ([`AFTER_TORN`]), so a write cut
//! short is told apart from a record lost later: past bytes that hold no record, the next
//! record is looked for at each write unit, under each of the [`HOLE_MAX`] numbers it can
//! carry, and the numbers it skips are exactly the ones its writer stepped over, or
//! records were lost there.
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

pub use crate::flash::{Region, ZeroOver, write_unit};

/// Marks a page as one of idem's journal pages. Neither all ones nor all zeros.
pub const MAGIC: u32 = 0x1DE5_0A7C;
/// The on-flash format of pages and records. A journal refuses pages of another version.
pub const FORMAT_VERSION: u16 = 3;
/// The format before: records in fixed slots of the largest record's size. Its pages are
/// still read, and a page of it that is being filled is filled in it (see the module's
/// documentation).
pub const FORMAT_2: u16 = 2;
/// Bytes of the page header on a flash whose write unit is at most a word (4 bytes): four
/// words, then the CRC word. See [`header_size`] for the others.
pub const HEADER_SIZE: usize = 20;

/// The largest write unit a journal supports: an STM32H7's 32-byte flash word.
pub const MAX_WRITE_SIZE: usize = 32;

/// Bytes of the page header on a flash that writes `write_size` bytes at a time: the four
/// header words padded to a whole unit, then the CRC word in a unit of its own (20 bytes
/// on a word flash, 24 on an 8-byte one, 64 on a 32-byte one).
pub const fn header_size(write_size: usize) -> usize {
    let unit = write_unit(write_size);
    16usize.div_ceil(unit) * unit + unit
}
/// The largest slot a journal supports (bounds the stack buffer used to write one):
/// 512 bytes on bare metal; 1,024 on a hosted build, whose records may be larger (an
/// MQTT receiver's of 32 places, its tombstones and a message-id window, in `idem mqtt
/// consume`'s image). A journal whose largest record is over 512 bytes is read by hosted
/// builds only.
#[cfg(target_os = "none")]
pub const MAX_SLOT_SIZE: usize = 512;
/// The largest slot a journal supports (bounds the stack buffer used to write one):
/// 512 bytes on bare metal; 1,024 on a hosted build, whose records may be larger (an
/// MQTT receiver's of 32 places, its tombstones and a message-id window, in `idem mqtt
/// consume`'s image). A journal whose largest record is over 512 bytes is read by hosted
/// builds only.
#[cfg(not(target_os = "none"))]
pub const MAX_SLOT_SIZE: usize = 1024;

/// The largest record a journal takes on a flash that writes `write_size` bytes at a
/// time: [`MAX_SLOT_SIZE`], and at most 255 units, since a record's first byte counts its
/// units before the check unit (at most 254, so a first byte is never `0xFF` and a
/// record's first unit never reads erased).
pub(crate) const fn record_limit(write_size: usize) -> usize {
    let units = 255 * write_unit(write_size);
    if units < MAX_SLOT_SIZE {
        units
    } else {
        MAX_SLOT_SIZE
    }
}

/// The largest page header: on a 32-byte flash word.
const MAX_HEADER: usize = header_size(MAX_WRITE_SIZE);

/// Records up to this size are written from a buffer of this size.
const SMALL_SLOT: usize = 64;

/// Bytes a reader reads at a time: the bare-metal [`MAX_SLOT_SIZE`]. A hosted build reads
/// the same windows (its reads are what a device's would be) unless its journal's largest
/// record is longer, and then a window of that record's length.
const WINDOW: usize = 512;

/// Bytes of one page read ahead: `bytes[..len]` hold page `page`'s records from byte
/// `off` on (past the header). A scan reads a page a window at a time, not a record at a
/// time; a record found valid is read from here.
#[derive(Debug)]
pub(crate) struct Window {
    bytes: [u8; MAX_SLOT_SIZE],
    page: u32,
    off: u32,
    len: u32,
    /// Where the payload of the record [`Journal::open`]'s scan found newest starts.
    body: usize,
}

impl Window {
    /// A window holding nothing.
    const fn new() -> Self {
        Self {
            bytes: [0; MAX_SLOT_SIZE],
            page: 0,
            off: 0,
            len: 0,
            body: 0,
        }
    }
}

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

/// The CRC-32C a record's check word holds, of its `bytes` before the check word, as
/// record number `seq`: for a format-2 record, over the four bytes of its number, then its
/// bytes (its slot places it); for a format-3 one, over its bytes, then its offset `at` in
/// its page, then its number, so a record is valid only where and as what it was written
/// ([`record_crcs`] takes the CRC of one place for several numbers).
#[cfg_attr(target_os = "none", inline(never))]
fn record_crc(bytes: &[u8], at: Option<u32>, seq: u32) -> u32 {
    let mut found = 0;
    record_crcs(bytes, at, (seq, 1), &mut |_, crc| {
        found = crc;
        true
    });
    found
}

/// The CRC ([`record_crc`]) of the record `bytes` at offset `at` (`None` in a format-2
/// page), for each of the `seqs.1` sequence numbers from `seqs.0` on, passed to `take`
/// until it returns `true`. A format-3 record's bytes are run through the CRC once, and
/// each number finishes a copy.
#[cfg_attr(target_os = "none", inline(never))]
fn record_crcs(
    bytes: &[u8],
    at: Option<u32>,
    seqs: (u32, u32),
    take: &mut dyn FnMut(u32, u32) -> bool,
) {
    let mut digest = CRC.digest();
    if let Some(at) = at {
        digest.update(bytes);
        digest.update(&at.to_le_bytes());
    }
    for i in 0..seqs.1 {
        let seq = seqs.0.wrapping_add(i);
        let mut each = digest.clone();
        each.update(&seq.to_le_bytes());
        if at.is_none() {
            each.update(bytes);
        }
        if take(seq, each.finalize()) {
            return;
        }
    }
}

/// The sequence number of a region's first record.
pub(crate) const FIRST_SEQ: u32 = 1;

/// The size in bytes of the slot that holds a record of type `T` on a flash whose write
/// unit is at most a word: the largest postcard encoding of `T` and a check word, rounded
/// up to a whole word.
pub const fn slot_size<T: MaxSize>() -> usize {
    slot_size_on::<T>(4)
}

/// The size in bytes of the slot that holds a record of type `T` on a flash that writes
/// `write_size` bytes at a time: the largest postcard encoding of `T` padded to whole
/// units, then the check word in a unit of its own. It names the record type in a page's
/// header, and is a format-2 page's slot.
pub const fn slot_size_on<T: MaxSize>(write_size: usize) -> usize {
    let unit = write_unit(write_size);
    T::POSTCARD_MAX_SIZE.div_ceil(unit) * unit + unit
}

/// The largest format-3 record of type `T` on a flash that writes `write_size` bytes at a
/// time: its length byte and largest postcard encoding padded to whole units, then the
/// check unit. A journal of `T` builds only where this is at most [`MAX_SLOT_SIZE`].
pub const fn largest_on<T: MaxSize>(write_size: usize) -> usize {
    let unit = write_unit(write_size);
    (1 + T::POSTCARD_MAX_SIZE).div_ceil(unit) * unit + unit
}

/// XORed into the check word of a record written after the journal stepped over torn
/// slots (format 2) or a run of bytes holding no record (format 3), with the number of
/// sequence numbers it stepped over (1 to [`TORN_MAX`]: one a slot, one a run) in bits 1
/// to 4.
///
/// The mark is what tells a write cut short apart from a record lost later: the bytes of
/// a write cut short are stepped over by the next append after the restart, which says
/// so, and how many numbers it stepped over, in its own check word. A record damaged or
/// lost after it was written leaves a hole no newer record vouches for, or numbers more
/// than the vouching record counted (a write cut short right after it, then the record
/// lost). A slot of random bytes passes as a record with odds of 16 in 2^32 (1 in 2^32
/// without the mark); a format-3 record past a run is tried under [`HOLE_MAX`] numbers at
/// each write unit, with no mark or a mark of one, so 32 in 2^32 a unit tried. On a flash
/// whose write unit is 8 bytes or more, the check word's unit also holds its complement,
/// and the odds are 2^32 times smaller: a torn erase of a 1 KiB page on an 8-byte flash
/// has 62 slots that recovery checks against two sequence numbers each, and 100,000
/// random power cuts met a slot that passed the 32-bit check alone.
pub const AFTER_TORN: u32 = 0x5EA1_ED00;
/// The most steps over a check word counts; a count of `TORN_MAX` means that many or more.
pub const TORN_MAX: u32 = 15;
const TORN_BITS: u32 = TORN_MAX << 1;
/// The most sequence numbers a format-3 record found past bytes that hold none can be
/// ahead of the record before it (records lost there, and a run a writer stepped over):
/// each number tried multiplies the odds of a false record, so a hole of more lost
/// records hides the page's records after it, as lost too. A unit past such bytes is
/// tried only where its first byte counts a record that fits (one unit to the largest
/// record's), read from the page's window: the numbers cost CRC work, not reads.
pub const HOLE_MAX: u32 = 16;

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

/// The count of appends a journal handle keeps. 32 bits on bare metal, where a 64-bit
/// field in the journal (8-byte aligned, moved at every layer of recovery) cost 644 bytes
/// of Cortex-M0 code in idem-feed, and where a flash wears out long before 2^32 appends
/// (at 20,000 cycles a page, 256 KiB of 1 KiB pages take 5,120,000 erases, some 420
/// million 12-byte records); 64 bits on a host.
#[cfg(target_os = "none")]
type Count = u32;
#[cfg(not(target_os = "none"))]
type Count = u64;

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
    /// [`Journal::open_migrating`] was asked to migrate from a tag to itself: a new
    /// encoding takes a new tag, or its records would be read as the old. Nothing was
    /// read or changed.
    SameTag {
        /// The tag given for both.
        tag: u32,
    },
}

impl<E: core::fmt::Display> core::fmt::Display for JournalError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Flash(e) => write!(f, "flash error: {e}"),
            Self::BadRegion => {
                f.write_str("journal region must be at least two whole pages inside the flash")
            }
            Self::Foreign { page, version, .. }
                if *version != FORMAT_VERSION && *version != FORMAT_2 =>
            {
                write!(
                    f,
                    "page {page} holds a journal in format {version}, and this idem reads formats {FORMAT_2} and {FORMAT_VERSION} only"
                )
            }
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
            Self::SameTag { tag } => write!(
                f,
                "a journal cannot migrate from tag {tag:#010x} to itself: a new encoding takes a new tag"
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
    /// A valid header of the other journal while [`Journal::open_migrating`] scans a
    /// region that holds two (the old one's pages, erased before it returns, or a new
    /// one's header left by a migration cut short). [`Journal::page_state`] and
    /// [`Journal::summarize`] never report it.
    Stale,
}

/// What one page of a journal holds, for inspection (for an unformatted page too: valid
/// records there are what a damaged header hides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSummary {
    /// Blank, valid or unformatted.
    pub state: PageState,
    /// Valid records.
    pub valid: u32,
    /// In a format-2 page, slots neither blank nor valid; in a format-3 page, runs of
    /// bytes that hold no record (a write cut short, or records voided).
    pub torn: u32,
    /// In a format-2 page, blank slots; in a format-3 page, records of the largest size
    /// that still fit after its last byte written.
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

/// The untyped part of a journal: its pages, record sizes, sequence and cursor.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    region: Region,
    /// A format-2 page's slot (named in every page's header).
    slot: u32,
    /// The largest format-3 record's extent.
    largest: u32,
    /// Records of the largest size in one page (a format-2 page's slots), worked out at
    /// compile time per record type (no run-time division, which would pull a software
    /// divider into a Cortex-M0 image).
    per_page: u32,
    /// Bytes of a page after its header.
    data: u32,
    tag: u32,
    /// The sequence number of the record the cursor writes next.
    cursor_seq: u32,
    /// Byte offset of the cursor in its page's records (past the header).
    cursor_off: u32,
    /// The cursor's page is a format-2 page being filled in format 2.
    cursor_v2: bool,
    newest: Option<SlotAddr>,
    /// Byte offset of the newest record in its page's records.
    newest_off: u32,
    newest_seq: u32,
    cursor: SlotAddr,
    cursor_page_ready: bool,
    /// The cursor's page was erased by this ring and every byte from the cursor on has
    /// been left alone since: they are blank without reading them.
    cursor_page_fresh: bool,
    appended: Count,
}

impl<T: Serialize + DeserializeOwned + MaxSize> Journal<T> {
    /// Bytes of one slot of this journal on a flash whose write unit is at most a word
    /// (the nRF51 and nRF52 of the micro:bit); [`Journal::slot_on`] for any flash.
    pub const SLOT: usize = slot_size::<T>();

    /// Bytes of one slot of this journal on the flash `F`.
    pub const fn slot_on<F: NorFlash>() -> usize {
        slot_size_on::<T>(F::WRITE_SIZE)
    }

    /// Bytes of this journal's largest format-3 record on a flash whose write unit is at
    /// most a word: its length byte and largest encoding in whole words, then the check
    /// word (a record takes what it encodes to, up to this).
    pub const LARGEST: usize = largest_on::<T>(4);

    crate::io::doors! { in Self;
        /// Scans `region` and returns the journal with its cursor after the newest valid
        /// record, and that record (`None` on a blank or unformatted region). Reads only.
        pub fn open | open_async [F] flash F
            (flash: &mut F, region: Region, tag: u32)
            -> Result<(Self, Option<T>), JournalError<F::Error>>
            => open(flash, region, tag);

        /// [`Journal::open`] for a firmware whose record changed encoding: `region` may
        /// still hold the journal of `Old` records that an earlier firmware kept under
        /// `old_tag`. With no record of this journal there, its newest `Old` record (only the
        /// newest: older ones are not carried over) is passed to `migrate`, and what that
        /// returns is appended as this journal's first record, in the page after the old
        /// record's, its sequence number following the old one. Then the old journal's pages
        /// are erased. The `bool` is `true` when this call wrote the migrated record; a boot
        /// cut short while the old pages were erased leaves the next one `false` with the
        /// migrated record, so hang no one-time work on it.
        ///
        /// A power cut anywhere leaves the old record or the migrated one: until the
        /// migrated record is written, the next open migrates again. Never an old record
        /// decoded as a new one, and never a new one as old: an earlier firmware opening the
        /// region finds this journal's pages foreign ([`JournalError::Foreign`]), from the
        /// first page the migration has entered on. So once a migration has started, going
        /// back to the old firmware is not safe: one that answers `Foreign` by starting over
        /// erases a record that may not have been migrated yet. Call it at every boot of the
        /// firmware that migrates; each call reads every page's header once more than
        /// [`Journal::open`] (to find pages of the old journal left by a cut). `old_tag` must
        /// differ from `tag` ([`JournalError::SameTag`]). One call migrates one step: a
        /// region two encodings behind is `Foreign`.
        ///
        /// ```
        /// # #[cfg(feature = "testing")] {
        /// use idem_core::MaxSize;
        /// use idem_core::journal::{Journal, Region};
        /// use idem_core::testing::flash::MemFlash;
        /// use serde::{Deserialize, Serialize};
        ///
        /// // The settings record of the firmware in the field, under its tag...
        /// #[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, MaxSize)]
        /// struct Settings { brightness: u8, volume: u8 }
        /// // ...and the next firmware's, with a field more: a new encoding, a new tag.
        /// #[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, MaxSize)]
        /// struct Settings2 { brightness: u8, volume: u8, contrast: u8 }
        ///
        /// type Flash = MemFlash<4, 1024>; // your chip's NorFlash driver here
        /// let region = Region::of_pages::<Flash>(2, 2);
        /// let mut flash = Flash::new();
        /// let (mut old, _) = Journal::<Settings>::open(&mut flash, region, 0x5E77).unwrap();
        /// old.append(&mut flash, &Settings { brightness: 7, volume: 3 }).unwrap();
        /// // The update boots:
        /// let to_new = |s: Settings| Settings2 { brightness: s.brightness, volume: s.volume, contrast: 50 };
        /// let (_, found, migrated) =
        ///     Journal::open_migrating(&mut flash, region, 0x5E78, 0x5E77, to_new).unwrap();
        /// assert_eq!(found, Some(Settings2 { brightness: 7, volume: 3, contrast: 50 }));
        /// assert!(migrated);
        /// // The old firmware, flashed back, refuses the new records rather than misread them.
        /// assert!(Journal::<Settings>::open(&mut flash, region, 0x5E77).is_err());
        /// # }
        /// ```
        pub fn open_migrating | open_migrating_async [Old, F] flash F
            (flash: &mut F, region: Region, tag: u32, old_tag: u32, migrate: impl FnOnce(Old) -> T)
            -> Result<(Self, Option<T>, bool), JournalError<F::Error>>
            where [Old: Serialize + DeserializeOwned + MaxSize,]
            => open_migrating(flash, region, tag, old_tag, migrate);

        /// Appends `record` as the new newest record. `Ok` only once its CRC word is written.
        pub fn append | append_async [F] flash F
            (&mut self, flash: &mut F, record: &T)
            -> Result<(), JournalError<F::Error>>
            => append_view(self, flash, record);
    }

    /// A handle on `region` before any scan: for an [`Inspector`], and for tests that
    /// append nothing (its cursor is not after the newest record).
    pub(crate) fn unscanned<F: NorFlash>(region: Region, tag: u32) -> Self {
        Self {
            ring: Ring::new(region, tag, geometry_of::<T>(F::WRITE_SIZE, F::ERASE_SIZE)),
            _record: PhantomData,
        }
    }

    crate::io::doors! { in Self;
        /// What page `page` of the region holds.
        pub fn summarize | summarize_async [F] flash F
            (&self, flash: &mut F, page: u32)
            -> Result<PageSummary, JournalError<F::Error>>
            => summarize(self, flash, page);
    }

    /// The sequence number of the newest record, if any.
    pub fn newest_seq(&self) -> Option<u32> {
        self.ring.newest.map(|_| self.ring.newest_seq)
    }

    crate::io::doors! { in Self;
        /// Visits the valid records from the newest back, newest first, while `visit`
        /// returns `true`: the records a store rebuilds its state from
        /// ([`crate::persist::Appended`]). Each comes with its sequence number and whether it
        /// follows on from the record visited last: numbered right before it, or with only
        /// numbers between that the newer record's writer stepped over (writes cut short, see
        /// [`AFTER_TORN`]); either way none can have been lost there. Bytes that hold no valid
        /// record are stepped over; the walk stops at a page that is not this journal's or
        /// after a full turn of the ring.
        pub fn recent | recent_async [F] flash F
            (&self, flash: &mut F, visit: impl FnMut(u32, T, bool) -> bool)
            -> Result<(), JournalError<F::Error>>
            => recent(self, flash, visit);
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

    /// The byte offset of the newest valid record in its page, past the page header (a
    /// format-3 record is where the ones before it ended, not at a slot), if any.
    pub fn newest_offset(&self) -> Option<u32> {
        self.ring.newest.map(|_| self.ring.newest_off)
    }

    /// The slot the next append will try first.
    pub fn cursor(&self) -> SlotAddr {
        self.ring.cursor
    }

    /// Records of the largest size one page holds (the slots of a format-2 page): the
    /// fewest records a page takes. A format-3 page holds more when they encode shorter.
    pub fn slots_per_page(&self) -> u32 {
        self.ring.slots_per_page()
    }

    /// How many records of the largest size still fit in the cursor's page (0 when the
    /// next append enters a new page).
    pub fn room(&self) -> u32 {
        self.ring.room()
    }

    crate::io::doors! { in Self;
        /// Classifies page `page` of the region; a valid header of another journal is an error.
        pub fn page_state | page_state_async [F] flash F
            (&self, flash: &mut F, page: u32)
            -> Result<PageState, JournalError<F::Error>>
            => page_state(self, flash, page);
    }
}

impl<T> Journal<T> {
    /// Voids every record newer than the one numbered `keep`: the bytes from the oldest
    /// of them to the end of the newest are programmed to zero (in each page, where they
    /// are not all blank), so they read as a write cut short, which the next append steps
    /// over and counts ([`AFTER_TORN`]). Returns how many
    /// valid records it voided. The handle is consumed: open the journal again to go on.
    ///
    /// It is for a storage that can keep a later write and lose an earlier one (a file
    /// under a page cache): there, records written since the last sync can come back with
    /// a hole among them, and the ones after the hole must go before anything is written
    /// in it. A cut while voiding leaves some of them valid, and the same call voids them
    /// again. The caller makes the zeros durable before the journal is written again.
    pub fn void_after<F: ZeroOver>(
        self,
        flash: &mut F,
        keep: u32,
    ) -> Result<u32, JournalError<F::Error>> {
        use blocking::RingIo;
        let ring = &self.ring;
        let Some(newest) = ring.newest else {
            return Ok(0);
        };
        let newer = ring.newest_seq.wrapping_sub(keep);
        let (mut first, mut count, mut end) = (None, 0u32, None);
        ring.walk_back(flash, &mut |f, _, _| {
            end = end.or(Some(f.off + f.len));
            if ring.newest_seq.wrapping_sub(f.seq) >= newer {
                return false;
            }
            first = Some(*f);
            count += 1;
            true
        })?;
        let (Some(first), Some(end)) = (first, end) else {
            return Ok(0);
        };
        // Every byte from the oldest of them to the end of the newest, page by page: the
        // records, and the runs of torn bytes between them.
        let (mut page, mut from) = (first.at.page, first.off);
        loop {
            let to = if page == newest.page {
                end
            } else {
                ring.tail(flash, page, &mut [0; 64])?
            };
            let addr = ring.address::<F>(page, from);
            if to > from && !blocking::blank(flash, addr, to - from)? {
                flash
                    .zero_over(addr, (to - from) as usize)
                    .map_err(JournalError::Flash)?;
            }
            if page == newest.page {
                return Ok(count);
            }
            (page, from) = (ring.page_after(page), 0);
        }
    }
}

/// A journal just opened, and its newest record.
type Opened<T> = (Journal<T>, Option<T>);

/// A journal just opened, its newest record, and whether the open migrated it.
type Migrated<T> = (Journal<T>, Option<T>, bool);

/// [`Migrated`], and whether pages of the old journal remain.
type MigratedMany<T> = (Journal<T>, Option<T>, bool, bool);

/// A journal's page layout on one flash: its largest record in each format and how many
/// format-2 slots a page holds. The write unit and the header size are
/// constants of the flash type (`unit::<F>()`, `header::<F>()`), so a firmware with one
/// flash compiles them in, as it did when every unit was a word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    slot: u32,
    largest: u32,
    per_page: u32,
    data: u32,
}

/// The layout of a journal of `T` on a flash of this write unit and page size, worked
/// out at compile time.
const fn geometry_of<T: MaxSize>(write_size: usize, erase_size: usize) -> Geometry {
    let slot = slot_size_on::<T>(write_size);
    Geometry {
        slot: slot as u32,
        largest: largest_on::<T>(write_size) as u32,
        per_page: ((erase_size - header_size(write_size)) / slot) as u32,
        data: (erase_size - header_size(write_size)) as u32,
    }
}

/// The flash steps over `embedded_storage`'s blocking `NorFlash`.
pub(crate) mod blocking {
    use super::*;
    use crate::io::blocking::*;
    include!("journal/io.rs");
}

/// The flash steps over `embedded_storage_async`'s `NorFlash`.
// `io!` and `body!` spell what `async fn` would: one source for both builds.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
pub(crate) mod asynch {
    use super::*;
    use crate::io::asynch::*;
    include!("journal/io.rs");
}

/// A journal's pages read for inspection, a damaged journal's too: what each page holds
/// and where the newest record is, with no `append` (a journal that can write comes only
/// from [`Journal::open`], after its scan). Made by [`Inspector::new`], without a scan,
/// or from an opened [`Journal`].
pub struct Inspector<T> {
    journal: Journal<T>,
}

impl<T: Serialize + DeserializeOwned + MaxSize> Inspector<T> {
    /// An inspector of `region` on the flash `F`, without the scan [`Journal::open`] does
    /// (which refuses a damaged journal). Reads nothing; knows no newest record.
    pub fn new<F: NorFlash>(region: Region, tag: u32) -> Self {
        Self {
            journal: Journal::unscanned::<F>(region, tag),
        }
    }

    crate::io::doors! { in Self;
        /// What page `page` of the region holds ([`Journal::summarize`]).
        pub fn summarize | summarize_async [F] flash F
            (&self, flash: &mut F, page: u32)
            -> Result<PageSummary, JournalError<F::Error>>
            => summarize(&self.journal, flash, page);
    }

    /// Classifies page `page` of the region ([`Journal::page_state`]).
    pub fn page_state<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<PageState, JournalError<F::Error>> {
        self.journal.page_state(flash, page)
    }

    /// Where the newest valid record is, if the journal was opened and holds one.
    pub fn newest(&self) -> Option<SlotAddr> {
        self.journal.newest()
    }

    /// The sequence number of the newest record, if the journal was opened and holds one.
    pub fn newest_seq(&self) -> Option<u32> {
        self.journal.newest_seq()
    }

    /// The byte offset of the newest record in its page ([`Journal::newest_offset`]).
    pub fn newest_offset(&self) -> Option<u32> {
        self.journal.newest_offset()
    }

    /// Records of the largest size one page holds ([`Journal::slots_per_page`]).
    pub fn slots_per_page(&self) -> u32 {
        self.journal.slots_per_page()
    }
}

impl<T> From<Journal<T>> for Inspector<T> {
    fn from(journal: Journal<T>) -> Self {
        Self { journal }
    }
}

impl Region {
    /// Whether the region is at least two whole pages of `erase_size` bytes inside a flash
    /// of `capacity` bytes.
    // Called once, from `Ring::open`, and inlined there as it was written before.
    #[inline(always)]
    fn fits(&self, erase_size: usize, capacity: usize) -> bool {
        let end = u64::from(self.start) + u64::from(self.pages) * erase_size as u64;
        self.pages >= 2
            && (self.start as usize).is_multiple_of(erase_size)
            && end <= capacity as u64
    }
}

impl Ring {
    /// A ring on `region` with the layout `geometry`, before any scan.
    fn new(region: Region, tag: u32, geometry: Geometry) -> Self {
        Self {
            region,
            slot: geometry.slot,
            largest: geometry.largest,
            per_page: geometry.per_page,
            data: geometry.data,
            tag,
            cursor_seq: FIRST_SEQ,
            cursor_off: 0,
            cursor_v2: false,
            newest: None,
            newest_off: 0,
            newest_seq: 0,
            cursor: SlotAddr { page: 0, slot: 0 },
            cursor_page_ready: false,
            cursor_page_fresh: false,
            appended: 0,
        }
    }

    fn slots_per_page(&self) -> u32 {
        self.per_page
    }

    /// The page after `page` in the ring.
    fn page_after(&self, page: u32) -> u32 {
        if page + 1 == self.region.pages {
            0
        } else {
            page + 1
        }
    }

    /// The first sequence numbers page `page` can have when it comes after the page of
    /// the newest record (`newest`: the record, and its page's first sequence number and
    /// format) in the ring: the first of them and how many run on from it. With no record,
    /// the one of a first pass around the ring of full format-2 pages. A format-2 page is
    /// filled to its last slot, so the pages after it start a whole page of numbers on. A
    /// format-3 page holds as many records as their sizes allow, and the page after it
    /// starts right after its last record: the newest, or one more for each record lost
    /// from the room after it (at most one a write unit of that room).
    // Called once, from `Ring::open`, and inlined there as it was written before.
    #[inline(always)]
    fn base_after(&self, newest: Option<(Found, u32, bool)>, page: u32, unit: u32) -> (u32, u32) {
        let Some((found, base, v2)) = newest else {
            return (FIRST_SEQ.wrapping_add(page.wrapping_mul(self.per_page)), 1);
        };
        if !v2 {
            let room = self.data.saturating_sub(found.off + found.len);
            return (found.seq.wrapping_add(1), 1 + room / unit);
        }
        let at = found.at;
        let ahead = if page > at.page {
            page - at.page
        } else {
            page + self.region.pages - at.page
        };
        (base.wrapping_add(ahead.wrapping_mul(self.per_page)), 1)
    }

    /// Takes `found`, in a page of format 2 when `v2`, as the newest record, and puts the
    /// cursor after it: in its page when there is room left (a format-2 page is
    /// filled slot by slot to its end; a format-3 page takes records until the next does
    /// not fit), else at the start of the next page.
    // Called once, from `Ring::open`, and inlined there as it was written before.
    #[inline(always)]
    fn settle(&mut self, found: &Found, v2: bool) {
        self.newest_seq = found.seq;
        self.newest = Some(found.at);
        self.newest_off = found.off;
        self.cursor_seq = found.seq.wrapping_add(1);
        self.cursor_off = found.off + found.len;
        self.cursor = SlotAddr {
            page: found.at.page,
            slot: found.at.slot + 1,
        };
        self.cursor_page_ready = !v2 || found.at.slot + 1 < self.per_page;
        self.cursor_v2 = v2 && self.cursor_page_ready;
        if !self.cursor_page_ready {
            self.cursor = SlotAddr {
                page: self.page_after(found.at.page),
                slot: 0,
            };
        }
    }

    /// Moves the cursor one record on: past a format-2 slot, or past a format-3 record of
    /// `len` bytes (or the run of bytes a write cut short left, to `len`).
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn advance(&mut self, len: u32) {
        self.cursor_seq = self.cursor_seq.wrapping_add(1);
        self.cursor_off += len;
        self.cursor.slot += 1;
        if self.cursor_v2 && self.cursor.slot == self.per_page {
            self.turn_page();
        }
    }

    /// Puts the cursor at the start of the next page, to enter (erase) before its first
    /// write. The sequence numbers run on there.
    fn turn_page(&mut self) {
        self.cursor = SlotAddr {
            page: self.page_after(self.cursor.page),
            slot: 0,
        };
        self.cursor_off = 0;
        self.cursor_v2 = false;
        self.cursor_page_ready = false;
        self.cursor_page_fresh = false;
    }

    /// Puts the cursor at the start of page `page`, to enter (erase) before its first
    /// write, its first record numbered `seq` (a migration's first page).
    fn restart_at(&mut self, page: u32, seq: u32) {
        self.cursor = SlotAddr { page, slot: 0 };
        self.cursor_off = 0;
        self.cursor_v2 = false;
        self.cursor_page_ready = false;
        self.cursor_seq = seq;
    }

    /// How many records of the largest size still fit after the cursor in its page.
    fn room(&self) -> u32 {
        if !self.cursor_page_ready {
            return 0;
        }
        if self.cursor_v2 {
            return self.per_page - self.cursor.slot;
        }
        let (mut room, mut fit) = (self.data.saturating_sub(self.cursor_off), 0);
        while room >= self.largest {
            room -= self.largest;
            fit += 1;
        }
        fit
    }
}

/// A valid record a page scan found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found {
    /// Its sequence number.
    seq: u32,
    /// Its page, and its place among the page's records (each run of bytes a write cut
    /// short left counts as one).
    at: SlotAddr,
    /// Byte offset in the page's records (past the header).
    off: u32,
    /// Bytes it takes: payload, padding and check unit (a format-2 page's slot).
    len: u32,
    /// The torn slots (format 2) or write units (format 3) its writer stepped over
    /// ([`AFTER_TORN`]).
    torn: u32,
}

#[cfg(all(test, feature = "testing"))]
#[path = "../tests/support/offset_total.rs"]
mod offset_total;
#[cfg(all(test, feature = "testing"))]
use offset_total::OffsetTotal;

#[cfg(all(test, feature = "testing"))]
mod tests {
    /// The tests on the blocking steps.
    mod blocking {
        use super::super::*;
        use embedded_storage::nor_flash::NorFlash as Flash;

        fn open_j<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
            flash: &mut F,
            region: Region,
            tag: u32,
        ) -> Result<Opened<T>, JournalError<F::Error>> {
            Journal::open(flash, region, tag)
        }

        fn append<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
            journal: &mut Journal<T>,
            flash: &mut F,
            record: &T,
        ) -> Result<(), JournalError<F::Error>> {
            journal.append(flash, record)
        }

        fn recent<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
            journal: &Journal<T>,
            flash: &mut F,
            visit: impl FnMut(u32, T, bool) -> bool,
        ) -> Result<(), JournalError<F::Error>> {
            journal.recent(flash, visit)
        }

        fn migrate_j<T, Old, F: Flash>(
            flash: &mut F,
            region: Region,
            tag: u32,
            old_tag: u32,
            migrate: impl FnOnce(Old) -> T,
        ) -> Result<Migrated<T>, JournalError<F::Error>>
        where
            T: Serialize + DeserializeOwned + MaxSize,
            Old: Serialize + DeserializeOwned + MaxSize,
        {
            Journal::open_migrating(flash, region, tag, old_tag, migrate)
        }

        include!("journal/tests.rs");
    }

    /// The same tests on the async steps.
    #[cfg(feature = "async")]
    mod asynch {
        use super::super::*;
        use embassy_futures::block_on;
        use embedded_storage_async::nor_flash::NorFlash as Flash;

        fn open_j<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
            flash: &mut F,
            region: Region,
            tag: u32,
        ) -> Result<Opened<T>, JournalError<F::Error>> {
            block_on(Journal::open_async(flash, region, tag))
        }

        fn append<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
            journal: &mut Journal<T>,
            flash: &mut F,
            record: &T,
        ) -> Result<(), JournalError<F::Error>> {
            block_on(journal.append_async(flash, record))
        }

        fn recent<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
            journal: &Journal<T>,
            flash: &mut F,
            visit: impl FnMut(u32, T, bool) -> bool,
        ) -> Result<(), JournalError<F::Error>> {
            block_on(journal.recent_async(flash, visit))
        }

        fn migrate_j<T, Old, F: Flash>(
            flash: &mut F,
            region: Region,
            tag: u32,
            old_tag: u32,
            migrate: impl FnOnce(Old) -> T,
        ) -> Result<Migrated<T>, JournalError<F::Error>>
        where
            T: Serialize + DeserializeOwned + MaxSize,
            Old: Serialize + DeserializeOwned + MaxSize,
        {
            block_on(Journal::open_migrating_async(
                flash, region, tag, old_tag, migrate,
            ))
        }

        include!("journal/tests.rs");
    }
}
