//! The flash of an image: a NOR flash with a file behind it, sharing the simulator's
//! checks (`idem_sim::flash::NorRules`, the rules of its in-memory flash), with an erase
//! counter per page in the header, writes that reach the disk when the `--sync` rules
//! say, and for `mqtt consume` its log of applied ids after the flash, made durable by
//! the same syncs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use idem_core::journal::ZeroOver;
use idem_sim::flash::{FlashError, NorRules};
use idem_sim::sync::{Area, SyncMode, SyncRules};

use super::ids::IdsArea;
use super::{COUNTERS_AT, HEADER, MARKS_AT, PAGE};

/// Why a file flash operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FileFlashError {
    /// Not word- or page-aligned.
    #[error("a flash access that is not word- or page-aligned")]
    NotAligned,
    /// Outside the flash.
    #[error("a flash access outside the image")]
    OutOfBounds,
    /// A word that does not read erased was programmed again.
    #[error("the word at address {address} was programmed twice without an erase")]
    WordWrittenTwice {
        /// Byte address of the word.
        address: u32,
    },
    /// The file could not be read or written.
    #[error("the image file could not be read or written: {0}")]
    Io(std::io::ErrorKind),
}

impl NorFlashError for FileFlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            Self::NotAligned => NorFlashErrorKind::NotAligned,
            Self::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            _ => NorFlashErrorKind::Other,
        }
    }
}

/// What the shared checks refused. They never cut power: any other refusal reads as an
/// access outside the image.
impl From<FlashError> for FileFlashError {
    fn from(e: FlashError) -> Self {
        match e {
            FlashError::NotAligned => Self::NotAligned,
            FlashError::UnitWrittenTwice { address } => Self::WordWrittenTwice { address },
            _ => Self::OutOfBounds,
        }
    }
}

impl From<std::io::Error> for FileFlashError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e.kind())
    }
}

/// A NOR flash in a file: erase writes `0xFF`, a word can be programmed only while it
/// reads erased, and programming only clears bits; accesses are checked as the
/// simulator's flash checks them ([`NorRules`]).
///
/// It reads from a copy of the flash in memory (an image is 192 KiB at most) and writes
/// through to the file in the order of the writes, at each sync point the `--sync` rules
/// name and at each [`FileFlash::sync`] (before any commit is reported), contiguous writes
/// as one: a process killed in between leaves the file with a prefix of its writes, as
/// if it had been killed earlier, and nothing it reported is lost.
#[derive(Debug)]
pub struct FileFlash {
    file: File,
    /// The flash's bytes, as written so far.
    mem: Vec<u8>,
    /// The writes not yet in the file, in order: (address, length), contiguous ones
    /// joined.
    unwritten: Vec<(u32, u32)>,
    pages: u32,
    /// The image's page: [`PAGE`], or a whole number of them ([`super::MQTT_PAGE`]).
    page: usize,
    erases: Vec<u32>,
    /// When writes reach the disk: the core's rules (`idem_sim::sync`).
    sync: SyncRules,
    /// The position journals' byte ranges.
    positions: Vec<std::ops::Range<u32>>,
    syncs: u64,
    /// The header's word of marks.
    marks: u32,
    /// The page a journal on this flash sees ([`super::Pages`]), whose header the sync
    /// rules know by its end.
    journal_page: usize,
    /// Bytes put in the file: programmed, erased (a page of `0xFF` each), and the log
    /// of ids' lines and the zeros it grew by.
    written: u64,
    /// The log of applied ids after the flash (`mqtt consume`'s images).
    ids: Option<IdsArea>,
    /// Lines of the log written since the last sync.
    ids_unsynced: bool,
}

impl FileFlash {
    /// The flash of an open image file of `pages` pages of `page` bytes, with its erase
    /// counters, in a file `len` bytes long (what follows the flash is its log of
    /// ids); writes reach the disk at each checkpoint until told otherwise.
    pub(super) fn new(
        file: File,
        (pages, page): (u32, usize),
        erases: Vec<u32>,
        marks: u32,
        len: u64,
    ) -> std::io::Result<Self> {
        let mut mem = vec![0xFF; pages as usize * page];
        file.read_exact_at(&mut mem, HEADER)?;
        let end = HEADER + mem.len() as u64;
        Ok(Self {
            file,
            mem,
            unwritten: Vec::new(),
            pages,
            page,
            erases,
            sync: SyncRules::new(SyncMode::Checkpoint),
            positions: Vec::new(),
            syncs: 0,
            marks,
            journal_page: page,
            written: 0,
            ids: (len > end).then(|| IdsArea::new(end, len - end)),
            ids_unsynced: false,
        })
    }

    /// Writes what is not yet in the file, in order: the log's lines first, so no
    /// record reaches the file before the line of the id it applies.
    fn write_through(&mut self) -> Result<(), FileFlashError> {
        if let Some(ids) = &mut self.ids {
            self.written += ids.write_through(&self.file)?;
        }
        for (at, len) in std::mem::take(&mut self.unwritten) {
            let bytes = &self.mem[at as usize..(at + len) as usize];
            self.file.write_all_at(bytes, HEADER + u64::from(at))?;
            self.written += u64::from(len);
        }
        Ok(())
    }
}

impl Drop for FileFlash {
    /// A flash dropped (its run ended or failed) leaves the file holding every write.
    fn drop(&mut self) {
        let _ = self.write_through();
    }
}

impl FileFlash {
    /// Sets when writes reach the disk; `positions` are the position journals' byte
    /// ranges.
    pub fn set_sync(&mut self, mode: SyncMode, positions: Vec<std::ops::Range<u32>>) {
        self.sync = SyncRules::new(mode);
        self.positions = positions;
    }

    /// The page a journal on this flash sees, a whole number of the image's
    /// ([`super::Pages`]).
    pub(super) fn set_journal_page(&mut self, bytes: usize) {
        self.journal_page = bytes;
    }

    /// Puts every write so far in the file and makes it durable (`sync_data`), unless the
    /// mode is `none`. Call it after a position commit, before reporting it.
    pub fn sync(&mut self) -> Result<(), FileFlashError> {
        self.write_through()?;
        let ids = std::mem::take(&mut self.ids_unsynced) && self.sync.mode() != SyncMode::None;
        if self.sync.pending() || ids {
            let started = Instant::now();
            self.file.sync_data()?;
            SYNC_TIMES.record(started.elapsed());
            self.sync.synced();
            self.syncs += 1;
        }
        Ok(())
    }

    /// Which journal the byte at `offset` belongs to.
    fn area(&self, offset: u32) -> Area {
        if self.positions.iter().any(|r| r.contains(&offset)) {
            Area::Position
        } else {
            Area::Store
        }
    }

    /// The checks of this flash: its pages, in words of 4 bytes.
    fn rules(&self) -> NorRules {
        NorRules {
            capacity: self.capacity(),
            write_unit: Self::WRITE_SIZE,
            page: self.page,
        }
    }

    /// The header's marks: bits runs set and none clears (what they mean is the
    /// command's).
    pub fn marks(&self) -> u32 {
        self.marks
    }

    /// Sets `bits` among the marks, durably (`sync_data`, whatever the mode: a mark is
    /// rare, and a verdict rests on it; not counted in [`FileFlash::syncs`]). Writes
    /// nothing when they are all set already.
    pub fn mark(&mut self, bits: u32) -> Result<(), FileFlashError> {
        if bits & !self.marks == 0 {
            return Ok(());
        }
        self.marks |= bits;
        self.file
            .write_all_at(&self.marks.to_le_bytes(), MARKS_AT)?;
        self.file.sync_data()?;
        Ok(())
    }

    /// Bytes put in the file's flash so far: programmed, and erased.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// `sync_data` calls made so far.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// The `sync_data` calls of every image this process opened, and how long they took
    /// (`kafka consume` and `mqtt consume` open one image).
    pub fn process_syncs() -> SyncSummary {
        SYNC_TIMES.summary()
    }

    /// Pages in the flash.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// The log of ids' bytes as the file holds them (lines, then zeros); `None` for an
    /// image without one.
    pub fn ids_read(&self) -> Option<std::io::Result<Vec<u8>>> {
        self.ids.as_ref().map(|ids| ids.read(&self.file))
    }

    /// Keeps the log's first `kept` bytes of `bytes` (as [`FileFlash::ids_read`] gave
    /// them) and zeroes the rest, durably unless the mode is `none`, before any new
    /// line can take the place of one dropped.
    pub fn ids_keep(&mut self, bytes: &[u8], kept: u64) -> Result<(), FileFlashError> {
        let ids = self.ids.as_mut().ok_or(FileFlashError::OutOfBounds)?;
        if ids.keep(&self.file, bytes, kept)? && self.sync.mode() != SyncMode::None {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Adds a line to the log: in the file before any flash write that follows, durable
    /// with the next [`FileFlash::sync`]. A full disk fails here (the log grows in
    /// steps of [`super::IDS_STEP`]), before anything of the line's group is written.
    pub fn ids_push(&mut self, line: &[u8]) -> std::io::Result<()> {
        let ids = (self.ids.as_mut()).ok_or(std::io::ErrorKind::Unsupported)?;
        self.written += ids.push(&self.file, line)?;
        self.ids_unsynced = true;
        Ok(())
    }

    /// Puts the log's lines pushed so far in the file, and nothing else.
    pub fn ids_write(&mut self) -> Result<(), FileFlashError> {
        if let Some(ids) = &mut self.ids {
            self.written += ids.write_through(&self.file)?;
        }
        Ok(())
    }

    /// How many times each page was erased since the image was created.
    pub fn erase_counts(&self) -> &[u32] {
        &self.erases
    }
}

impl ErrorType for FileFlash {
    type Error = FileFlashError;
}

impl ReadNorFlash for FileFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.rules().read(offset, bytes.len())?;
        let at = offset as usize;
        bytes.copy_from_slice(&self.mem[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.pages as usize * self.page
    }
}

impl NorFlash for FileFlash {
    const WRITE_SIZE: usize = 4;
    /// The smallest page an image has: an image of larger pages ([`super::MQTT_PAGE`])
    /// erases only whole ones of its own, and a journal sees them through [`super::Pages`].
    const ERASE_SIZE: usize = PAGE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.rules().erase(from, to)?;
        if self.sync.before_erase() {
            self.sync()?;
        }
        self.write_through()?;
        let size = self.page;
        for page in from / size as u32..to / size as u32 {
            let at = page as usize * size;
            self.mem[at..at + size].fill(0xFF);
            self.file
                .write_all_at(&vec![0xFF; size], HEADER + (page as usize * size) as u64)?;
            self.written += size as u64;
            // Saturates: a counter stuck at u32::MAX still says "worn out", never 0.
            self.erases[page as usize] = self.erases[page as usize].saturating_add(1);
            let count = self.erases[page as usize].to_le_bytes();
            self.file
                .write_all_at(&count, COUNTERS_AT + 4 * u64::from(page))?;
        }
        if self.sync.after_erase(self.area(from)) {
            self.sync()?;
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.rules().write(offset, bytes.len())?;
        let at = offset as usize;
        self.rules()
            .write_over(offset, &self.mem[at..at + bytes.len()])?;
        self.program(offset, bytes)
    }
}

/// A file's bytes can be programmed again, to zero: recovery voids an appending store's
/// records that a cut left after a hole (`idem_core::persist::Sinks::void_in_doubt`).
impl ZeroOver for FileFlash {
    fn zero_over(&mut self, offset: u32, len: usize) -> Result<(), Self::Error> {
        self.rules().write(offset, len)?;
        self.program(offset, &vec![0; len])
    }
}

impl FileFlash {
    /// Programs `bytes` at `offset`, checked, with the syncs the rules ask for around it.
    fn program(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FileFlashError> {
        let at = offset as usize;
        let area = self.area(offset);
        if self.sync.before_write(area) {
            self.sync()?;
        }
        self.mem[at..at + bytes.len()].copy_from_slice(bytes);
        let len = bytes.len() as u32;
        match self.unwritten.last_mut() {
            Some((last, n)) if *last + *n == offset => *n += len,
            _ => self.unwritten.push((offset, len)),
        }
        if (self.sync).after_write(area, offset, bytes.len(), self.journal_page) {
            self.sync()?;
        }
        Ok(())
    }
}

/// How many `sync_data` calls and their median latency ([`FileFlash::process_syncs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncSummary {
    /// `sync_data` calls.
    pub count: u64,
    /// Their median latency in microseconds, to within 1/32 (`None` without a call).
    pub median_us: Option<u64>,
}

/// Sub-buckets per power of two of [`SyncTimes`]: a bucket is at most 1/16 of its lower
/// bound wide.
const SUB_BUCKETS: u64 = 16;

/// Latencies in microseconds, kept in fixed memory: below 16 µs one bucket per
/// microsecond, above it 16 buckets per power of two.
#[derive(Debug)]
struct SyncTimes([AtomicU64; 976]);

/// Every image's syncs in this process.
static SYNC_TIMES: SyncTimes = SyncTimes::new();

impl SyncTimes {
    const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; 976])
    }

    /// The bucket of `us` microseconds.
    fn bucket(us: u64) -> usize {
        if us < SUB_BUCKETS {
            return us as usize;
        }
        let octave = u64::from(63 - us.leading_zeros()) - 4;
        (SUB_BUCKETS + octave * SUB_BUCKETS + ((us >> octave) & (SUB_BUCKETS - 1))) as usize
    }

    /// The middle of bucket `b`, in microseconds.
    fn middle(b: usize) -> u64 {
        let b = b as u64;
        if b < SUB_BUCKETS {
            return b;
        }
        let (octave, sub) = (
            (b - SUB_BUCKETS) / SUB_BUCKETS,
            (b - SUB_BUCKETS) % SUB_BUCKETS,
        );
        ((SUB_BUCKETS + sub) << octave) + (1 << octave) / 2
    }

    fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.0[Self::bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    fn summary(&self) -> SyncSummary {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let count: u64 = counts.iter().sum();
        let mut seen = 0;
        let median_us = counts.iter().position(|&c| {
            seen += c;
            count > 0 && seen >= count.div_ceil(2)
        });
        SyncSummary {
            count,
            median_us: median_us.map(Self::middle),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log of ids' lines reach the file before any flash write that follows them,
    /// the writes a page erase inside a group puts through included, and one sync makes
    /// lines and records durable; the log grows by a step of zeros when full.
    #[test]
    fn the_log_of_ids_reaches_the_file_first_and_shares_the_images_syncs() {
        use crate::image::{IDS_STEP, Image, MQTT_PAGE};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.img");
        let meta = crate::image::tests::mqtt_meta(2);
        let mut image = Image::open_or_create(&path, &meta).unwrap();
        let f = &mut image.flash;
        let journal = 0..2 * MQTT_PAGE as u32;
        f.set_sync(SyncMode::Checkpoint, vec![journal]);
        let log_at = HEADER as usize + 2 * MQTT_PAGE;
        let file = |at: usize, n: usize| std::fs::read(&path).unwrap()[at..at + n].to_vec();
        // A line, then a record: the line reaches the file alone, the record stays
        // in memory until the image's sync or a page erase.
        f.ids_push(b"one\n").unwrap();
        f.write(64, &[0; 4]).unwrap();
        f.ids_write().unwrap();
        assert_eq!(file(log_at, 4), b"one\n");
        assert_eq!(file(HEADER as usize + 64, 4), [0xFF; 4]);
        f.ids_push(b"two\n").unwrap();
        f.erase(MQTT_PAGE as u32, 2 * MQTT_PAGE as u32).unwrap();
        assert_eq!(file(log_at, 8), b"one\ntwo\n", "before the erase");
        assert_eq!(file(HEADER as usize + 64, 4), [0; 4]);
        assert_eq!(f.syncs(), 1, "one sync before the erase, for both");
        // The group's own sync: the erase; nothing left after it.
        f.sync().unwrap();
        f.sync().unwrap();
        assert_eq!(f.syncs(), 2);
        // A line alone is synced too.
        f.ids_push(b"three\n").unwrap();
        f.sync().unwrap();
        assert_eq!(f.syncs(), 3);
        // Past the log's first step, the file grows by one step of zeros.
        let long = vec![b'x'; IDS_STEP as usize];
        let written = f.written();
        f.ids_push(&long).unwrap();
        assert_eq!(f.written() - written, IDS_STEP);
        let len = HEADER + 2 * MQTT_PAGE as u64 + 2 * IDS_STEP;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        f.sync().unwrap();
        assert_eq!(f.written() - written, 2 * IDS_STEP);
    }

    #[test]
    fn a_latency_lands_in_a_bucket_whose_middle_is_within_1_32_of_it() {
        for us in (0..5000).chain([1 << 20, 123_456_789, u64::MAX / 3, u64::MAX]) {
            let b = SyncTimes::bucket(us);
            assert!(b < 976, "{us}");
            let m = SyncTimes::middle(b);
            assert!(us.abs_diff(m) <= us / 32, "{us} µs: bucket {b}, middle {m}");
        }
    }

    #[test]
    fn the_median_is_the_middle_latency() {
        let t = SyncTimes::new();
        assert_eq!(
            t.summary(),
            SyncSummary {
                count: 0,
                median_us: None
            }
        );
        for us in [100, 3000, 5, 101, 102] {
            t.record(Duration::from_micros(us));
        }
        let s = t.summary();
        assert_eq!(s.count, 5);
        assert_eq!(s.median_us, Some(102), "100, 101 and 102 share a bucket");
    }
}
