//! A journal of postcard records in fixed-size slots on NOR flash.
//!
//! A journal owns one [`Region`] of whole pages and writes its records round-robin
//! through it. Each page starts with a 16-byte header (magic, format version, slot size,
//! a tag naming what the journal holds, and a CRC over the three words before it). Each
//! record fills one slot: a sequence number, the postcard payload padded with `0xFF`,
//! and a CRC-32 over both, written last in its own word write. [`Journal::open`] scans
//! the region once; the valid record with the highest sequence number wins, and the
//! write cursor stays in RAM after that, so an append costs one slot write (plus a page
//! erase and header when it enters a new page).
//!
//! Crash safety: a record counts only once its CRC word is in place, so a crash between
//! any two flash operations leaves either the previous record or the new one as the
//! newest. A slot that is neither blank nor valid is skipped whole, a slot is
//! blank-checked before it is programmed, and a page is erased every time the cursor
//! enters it (even one that reads blank: interrupted erases can leave a page that reads
//! all ones without being reliably erased) and never while it holds the newest record.
//! A page that is neither blank nor valid (never written, or an erase cut short) holds
//! no record and is erased before use.
//!
//! It knows nothing of offsets or stores: those are [`crate::consumer`] and
//! [`crate::store`].

use core::marker::PhantomData;

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Serialize, de::DeserializeOwned};

/// Marks a page as one of idem's journal pages. Neither all ones nor all zeros.
pub const MAGIC: u32 = 0x1DE5_0A7C;
/// The on-flash format of pages and records. A journal refuses pages of another version.
pub const FORMAT_VERSION: u16 = 1;
/// Bytes of the page header.
pub const HEADER_SIZE: usize = 16;
/// The largest slot a journal supports (bounds the stack buffer used to write one).
pub const MAX_SLOT_SIZE: usize = 512;

/// Slots up to this size are written from a buffer of this size.
const SMALL_SLOT: usize = 64;

/// CRC-32C. On bare metal it is computed bit by bit (no table: 1 KiB less flash, and a
/// slot is a few dozen bytes); hosted builds use sixteen 256-entry tables (slice-by-16,
/// 16 KiB of RAM) for speed, since the simulator and the sweeps append millions of
/// records. All give the same checksums, so images move freely between the two.
#[cfg(target_os = "none")]
const CRC: crc::Crc<u32, crc::NoTable> = crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISCSI);
#[cfg(not(target_os = "none"))]
const CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);
const ERASED_WORD: u32 = u32::MAX;

/// The size in bytes of the slot that holds a record of type `T`: a sequence word, the
/// largest postcard encoding of `T`, and a CRC word, rounded up to a whole word.
pub const fn slot_size<T: MaxSize>() -> usize {
    (4 + T::POSTCARD_MAX_SIZE + 4).div_ceil(4) * 4
}

/// A compact (offset, total) record: fixed-width little-endian fields, 8 bytes of
/// payload, so its slot is 16 bytes (sequence, payload, CRC). Use it where a counter
/// with a 32-bit range is enough and flash wear matters.
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

/// A run of whole flash pages given to one journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte address of the first page; a multiple of the page size.
    pub start: u32,
    /// How many pages; at least 2.
    pub pages: u32,
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
    next_seq: u32,
    newest: Option<SlotAddr>,
    cursor: SlotAddr,
    cursor_page_ready: bool,
    /// The cursor's page was erased by this ring and every slot from the cursor on has
    /// been left alone since: they are blank without reading them.
    cursor_page_fresh: bool,
    appended: u64,
    /// Made by [`Journal::for_inspection`]: never writes.
    inspect_only: bool,
}

impl<T: Serialize + DeserializeOwned + MaxSize> Journal<T> {
    /// Bytes of one slot of this journal.
    pub const SLOT: usize = slot_size::<T>();

    /// Scans `region` and returns the journal with its cursor after the newest valid
    /// record, and that record (`None` on a blank or unformatted region). Reads only.
    pub fn open<F: NorFlash>(
        flash: &mut F,
        region: Region,
        tag: u32,
    ) -> Result<(Self, Option<T>), JournalError<F::Error>> {
        const {
            assert!(
                Self::SLOT <= MAX_SLOT_SIZE,
                "journal record too large for a slot"
            );
            assert!(
                F::WRITE_SIZE <= 4 && 4 % F::WRITE_SIZE == 0,
                "journal needs word writes"
            );
            assert!(
                HEADER_SIZE + Self::SLOT <= F::ERASE_SIZE,
                "journal slot larger than a page"
            );
        }
        let mut buf = [0u8; MAX_SLOT_SIZE];
        let (ring, found) = Ring::open(flash, region, tag, Self::geometry::<F>(), &mut buf)?;
        let record = if found {
            let payload = &buf[4..Self::SLOT - 4];
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
        if Self::SLOT <= SMALL_SLOT {
            let mut buf = [0xFFu8; SMALL_SLOT];
            postcard::to_slice(record, &mut buf[4..Self::SLOT - 4])
                .map_err(|_| JournalError::Encode)?;
            self.ring.append(flash, &mut buf[..Self::SLOT])
        } else {
            let mut buf = [0xFFu8; MAX_SLOT_SIZE];
            postcard::to_slice(record, &mut buf[4..Self::SLOT - 4])
                .map_err(|_| JournalError::Encode)?;
            self.ring.append(flash, &mut buf[..Self::SLOT])
        }
    }

    /// The slot size and slots per page on the flash `F`, worked out at compile time.
    const fn geometry<F: NorFlash>() -> (u32, u32) {
        (
            Self::SLOT as u32,
            ((F::ERASE_SIZE - HEADER_SIZE) / Self::SLOT) as u32,
        )
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
        self.ring.newest.map(|_| self.ring.next_seq.wrapping_sub(1))
    }

    /// Visits the valid records from the newest back, newest first, while `visit`
    /// returns `true`: the records a store rebuilds its state from
    /// ([`crate::persist::Appended`]). Each comes with its sequence number and whether it
    /// sits in the slot right before the record visited last (no slot without a valid
    /// record between them: none can have been lost there, even where the sequence skips
    /// a number, which an append does when a CRC would read erased). Slots that hold no
    /// valid record (torn) are stepped over; the walk stops at a page that is not this
    /// journal's or after a full turn of the ring.
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
    pub fn appended(&self) -> u64 {
        self.ring.appended
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

impl Ring {
    /// A ring on `region` with slots `(size, per page)`, before any scan.
    fn new(region: Region, tag: u32, (slot, per_page): (u32, u32), inspect_only: bool) -> Self {
        Self {
            region,
            slot,
            per_page,
            tag,
            next_seq: 1,
            newest: None,
            cursor: SlotAddr { page: 0, slot: 0 },
            cursor_page_ready: false,
            cursor_page_fresh: false,
            appended: 0,
            inspect_only,
        }
    }

    /// Scans `region` of slots `(size, per page)`: the ring with its cursor after the
    /// newest valid record, and whether there is one (then `buf` holds its slot).
    fn open<F: NorFlash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        (slot, per_page): (u32, u32),
        buf: &mut [u8; MAX_SLOT_SIZE],
    ) -> Result<(Self, bool), JournalError<F::Error>> {
        let page_size = F::ERASE_SIZE as u32;
        let end = u64::from(region.start) + u64::from(region.pages) * u64::from(page_size);
        if region.pages < 2
            || !(region.start as usize).is_multiple_of(F::ERASE_SIZE)
            || end > flash.capacity() as u64
        {
            return Err(JournalError::BadRegion);
        }
        let mut r = Self::new(region, tag, (slot, per_page), false);
        let mut newest: Option<(u32, SlotAddr)> = None;
        // The newest record found in a page whose header does not read valid.
        let mut stray: Option<(u32, u32)> = None;
        let mut first_valid_page = None;
        for page in 0..region.pages {
            let state = r.page_state(flash, page)?;
            if state == PageState::Blank {
                continue;
            }
            if state == PageState::Valid {
                first_valid_page.get_or_insert(page);
            }
            for slot in 0..r.slots_per_page() {
                let at = SlotAddr { page, slot };
                let Some(seq) = r.read_slot(flash, at, buf)? else {
                    continue;
                };
                if state == PageState::Valid {
                    if newest.is_none_or(|(s, _)| seq > s) {
                        newest = Some((seq, at));
                    }
                } else if stray.is_none_or(|(s, _)| seq > s) {
                    stray = Some((seq, page));
                }
            }
        }
        // An erase cut short leaves a page unformatted, but only ever one that held older
        // records (the page of the newest record is never erased). A record newer than
        // every readable one in such a page means its header was damaged afterwards:
        // recovering without it would roll the journal back.
        if let Some((seq, page)) = stray
            && newest.is_none_or(|(s, _)| seq > s)
        {
            return Err(JournalError::Damaged {
                address: region.start + page * page_size,
            });
        }
        match newest {
            Some((seq, at)) => {
                r.next_seq = seq.wrapping_add(1);
                r.newest = Some(at);
                r.cursor = r.after(at);
                r.cursor_page_ready = r.cursor.page == at.page;
                r.read_slot(flash, at, buf)?;
                Ok((r, true))
            }
            None => {
                if let Some(page) = first_valid_page {
                    r.cursor = SlotAddr { page, slot: 0 };
                    r.cursor_page_ready = true;
                }
                Ok((r, false))
            }
        }
    }

    /// Writes the slot in `buf` (one slot long, the payload in place, padded with `0xFF`)
    /// as the new newest record: fills in its sequence and CRC words, then programs it at
    /// the cursor. Inlined into each typed journal's append, so a host build sees the
    /// slot size as a constant (the firmware, built for size, keeps one copy).
    #[inline]
    fn append<F: NorFlash>(
        &mut self,
        flash: &mut F,
        buf: &mut [u8],
    ) -> Result<(), JournalError<F::Error>> {
        let slot = buf.len();
        if self.inspect_only {
            return Err(JournalError::NoSpace);
        }
        // Never write a sequence or CRC word that reads erased: such a slot is not valid.
        let crc = loop {
            if self.next_seq == ERASED_WORD {
                self.next_seq = 1;
            }
            buf[..4].copy_from_slice(&self.next_seq.to_le_bytes());
            let crc = CRC.checksum(&buf[..slot - 4]);
            if crc != ERASED_WORD {
                break crc;
            }
            self.next_seq = self.next_seq.wrapping_add(1);
        };
        buf[slot - 4..slot].copy_from_slice(&crc.to_le_bytes());

        let attempts = self.region.pages * self.slots_per_page() + 1;
        for _ in 0..attempts {
            if !self.cursor_page_ready {
                self.enter_page(flash, self.cursor.page)?;
            }
            let addr = self.slot_address::<F>(self.cursor);
            // A page this ring erased holds nothing past the cursor: no need to read the
            // slot back (88 of 674 instructions a commit in the callgrind profile). A page
            // found at recovery may hold a torn write: read it.
            if self.cursor_page_fresh || blank(flash, addr, slot as u32)? {
                // A failed write may leave the slot half programmed: until both words are
                // written, the page counts as not fresh (slots are read again).
                let fresh = core::mem::take(&mut self.cursor_page_fresh);
                flash
                    .write(addr, &buf[..slot - 4])
                    .map_err(JournalError::Flash)?;
                flash
                    .write(addr + slot as u32 - 4, &buf[slot - 4..slot])
                    .map_err(JournalError::Flash)?;
                self.cursor_page_fresh = fresh;
                self.newest = Some(self.cursor);
                self.next_seq = self.next_seq.wrapping_add(1);
                self.appended += 1;
                self.advance();
                return Ok(());
            }
            // Not blank (a torn write from before a crash): skip the slot whole.
            self.advance();
        }
        Err(JournalError::NoSpace)
    }

    fn summarize<F: NorFlash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> Result<PageSummary, JournalError<F::Error>> {
        let state = self.page_state(flash, page)?;
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
        // An unformatted page is counted too: records in it are damage to show.
        let mut buf = [0u8; MAX_SLOT_SIZE];
        for slot in 0..self.slots_per_page() {
            match self.read_slot(flash, SlotAddr { page, slot }, &mut buf)? {
                Some(seq) => {
                    sum.valid += 1;
                    sum.newest_seq = Some(sum.newest_seq.map_or(seq, |s| s.max(seq)));
                }
                None if buf[..self.slot as usize].iter().all(|&b| b == 0xFF) => sum.blank += 1,
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
        let base = self.region.start + page * (F::ERASE_SIZE as u32);
        let mut h = [0u8; HEADER_SIZE];
        flash.read(base, &mut h).map_err(JournalError::Flash)?;
        if h.iter().all(|&b| b == 0xFF) {
            let rest = base + HEADER_SIZE as u32;
            return Ok(
                if blank(flash, rest, (F::ERASE_SIZE as u32) - HEADER_SIZE as u32)? {
                    PageState::Blank
                } else {
                    PageState::Unformatted
                },
            );
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if word(0) != MAGIC || CRC.checksum(&h[..12]) != word(12) {
            return Ok(PageState::Unformatted);
        }
        let version = (word(4) & 0xFFFF) as u16;
        let slot = word(4) >> 16;
        if version != FORMAT_VERSION || slot != self.slot || word(8) != self.tag {
            return Err(JournalError::Foreign {
                page,
                tag: word(8),
                version,
            });
        }
        Ok(PageState::Valid)
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
        // Whether every slot since the record visited last held a valid record.
        let mut adjacent = true;
        let slot = (self.slot as usize).clamp(8, MAX_SLOT_SIZE);
        let mut buf = [0u8; MAX_SLOT_SIZE];
        let mut checked = None;
        for _ in 0..self.region.pages * self.slots_per_page() {
            if checked != Some(at.page) {
                if self.page_state(flash, at.page)? != PageState::Valid {
                    break;
                }
                checked = Some(at.page);
            }
            match self.read_slot(flash, at, &mut buf)? {
                Some(seq) if !visit(seq, &buf[4..slot - 4], adjacent) => break,
                Some(_) => adjacent = true,
                None => adjacent = false,
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

    /// Reads the slot at `at` into `buf`; its sequence number when it holds a valid record.
    fn read_slot<F: NorFlash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        buf: &mut [u8; MAX_SLOT_SIZE],
    ) -> Result<Option<u32>, JournalError<F::Error>> {
        // A slot holds at least its sequence and CRC words, and fits the buffer.
        let slot = (self.slot as usize).clamp(8, MAX_SLOT_SIZE);
        let bytes = &mut buf[..slot];
        flash
            .read(self.slot_address::<F>(at), bytes)
            .map_err(JournalError::Flash)?;
        let (body, tail) = bytes.split_at(slot - 4);
        let seq = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        let crc = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        // A sequence or CRC word that reads erased was never written, whatever the CRC
        // says: CRC-32C over four 0xFF bytes and zeros is itself 0xFFFF_FFFF.
        if seq == ERASED_WORD || crc == ERASED_WORD || CRC.checksum(body) != crc {
            return Ok(None);
        }
        Ok(Some(seq))
    }

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
        let crc = CRC.checksum(&h[..12]);
        h[12..].copy_from_slice(&crc.to_le_bytes());
        flash.write(base, &h[..12]).map_err(JournalError::Flash)?;
        flash
            .write(base + 12, &h[12..])
            .map_err(JournalError::Flash)?;
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

    fn advance(&mut self) {
        let next = self.after(self.cursor);
        self.cursor_page_ready = next.page == self.cursor.page;
        // Still fresh while the cursor stays in the page this ring erased.
        self.cursor_page_fresh &= self.cursor_page_ready;
        self.cursor = next;
    }

    fn slot_address<F: NorFlash>(&self, at: SlotAddr) -> u32 {
        self.region.start
            + at.page * (F::ERASE_SIZE as u32)
            + HEADER_SIZE as u32
            + at.slot * self.slot
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

#[cfg(all(test, feature = "lab"))]
mod tests {
    use super::*;
    use crate::lab::flash::{FlashError, MemFlash, PowerCut};

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
        assert_eq!(Journal::<Rec>::SLOT, 4 + 5 + 10 + 4 + 1);
        let (j, _) = open(&mut F::new());
        assert_eq!(j.slots_per_page(), (256 - 16) / 24);
    }

    #[test]
    fn an_offset_total_record_fits_16_bytes() {
        assert_eq!(Journal::<OffsetTotal>::SLOT, 16);
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
        // 100 records over 10-slot pages: the region wrapped several times.
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
}
