//! A strict in-memory NOR flash, for the simulator and for tests.
//!
//! [`MemFlash`] implements [`embedded_storage::nor_flash::NorFlash`] with the rules of
//! real NOR flash and fails loudly where real flash would fail silently: an erase sets
//! a page to `0xFF`, a write can only clear bits, a write unit programmed twice between
//! two erases is an error unless the flash allows it ([`Reprogram`]: an STM32L4 programs
//! each 8-byte double-word once under ECC, an STM32H7 each 32-byte flash word; a SPI NOR
//! flash takes any number of programs, each clearing bits), and every access is checked
//! for alignment and bounds. The write unit is a parameter, 4 bytes unless told (any
//! power of two up to 256). It counts unit writes, erases and bytes programmed (per page
//! too), and it can lose power at a chosen unit write or page erase, in one of three ways
//! ([`PowerCut`]): in the middle of it (the torn unit or page is left with undefined,
//! pseudo-random and reproducible, contents), right before it (every unit before it
//! programmed, it untouched), or, for an erase, at the end of it, leaving a page that
//! reads all `0xFF` but is weakly erased, so that a program of it is refused until it is
//! erased again. Every later access fails until [`MemFlash::power_on`].
//! [`crate::testing::cuts`] sweeps a cut of each kind over every operation of a run.
//!
//! [`MemFlash`] holds its pages inline (no allocation: it builds for a firmware target);
//! `HeapFlash` (feature `alloc`) is the same flash with its pages on the heap, for
//! geometries too large for a stack, an STM32H7's 128 KiB sectors. Each chip family's
//! flash, its unit, page and rule, is in [`crate::testing::chips`].
//!
//! It owns no journal logic: that lives in [`crate::journal`].

#[cfg(feature = "alloc")]
use super::alloc;
use crate::testing::rng::SplitMix64;
use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// The write unit a [`MemFlash`] has unless told: one 32-bit word, as on the nRF51 and
/// nRF52 of the micro:bit.
pub const WORD: usize = 4;

/// The largest write unit a [`MemFlash`] takes.
pub const MAX_UNIT: usize = 256;

/// What a [`MemFlash`] refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlashError {
    /// An address or length is not a multiple of the write unit or page size.
    NotAligned,
    /// An access falls outside the flash.
    OutOfBounds,
    /// A write unit (a word, unless the flash was made with another) was programmed a
    /// second time without an erase in between, which the flash's [`Reprogram`] rule
    /// refuses.
    UnitWrittenTwice {
        /// Byte address of the unit.
        address: u32,
    },
    /// Power was lost before or during this operation; it did not complete.
    PowerCut,
    /// A write unit of a page whose erase was cut short, though it reads all `0xFF`: a
    /// program of it is refused until the page is erased again ([`PowerCut::WeakErase`]).
    WeaklyErased {
        /// Byte address of the unit.
        address: u32,
    },
}

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            Self::NotAligned => NorFlashErrorKind::NotAligned,
            Self::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            Self::UnitWrittenTwice { .. } | Self::PowerCut | Self::WeaklyErased { .. } => {
                NorFlashErrorKind::Other
            }
        }
    }
}

impl From<NorFlashErrorKind> for FlashError {
    fn from(kind: NorFlashErrorKind) -> Self {
        match kind {
            NorFlashErrorKind::NotAligned => Self::NotAligned,
            _ => Self::OutOfBounds,
        }
    }
}

impl core::fmt::Display for FlashError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotAligned => {
                f.write_str("flash access is not aligned to the write unit or the page")
            }
            Self::OutOfBounds => f.write_str("flash access is out of bounds"),
            Self::UnitWrittenTwice { address } => {
                write!(
                    f,
                    "flash write unit at {address:#x} programmed twice without an erase"
                )
            }
            Self::PowerCut => f.write_str("power was cut during a flash operation"),
            Self::WeaklyErased { address } => write!(
                f,
                "flash write unit at {address:#x} is in a page whose erase was cut short: erase it again before programming it"
            ),
        }
    }
}

impl core::error::Error for FlashError {}

/// How many times a flash lets a write unit be programmed between two erases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reprogram {
    /// `NorFlash`'s contract: a write programs each unit once between erases, and
    /// [`crate::journal::ZeroOver`] may program it once more, to zeros (the flash a
    /// `MemFlash` is unless told).
    #[default]
    ToZero,
    /// Once, by any call: a flash with ECC over each unit (an STM32L4's double word, an
    /// STM32H7's flash word), where a second program corrupts the unit's check bits.
    Never,
    /// Any number of times, each clearing bits, the unit reading the AND of them
    /// (`MultiwriteNorFlash`: a SPI or QSPI NOR flash, an nRF52's NVMC within its limit).
    Any,
}

/// The checks of a strict NOR flash of one geometry: the rules [`MemFlash`] keeps, for
/// any other flash (a file, say) to keep too. Every access stays in bounds; a read may
/// start anywhere, a write covers whole write units and an erase whole pages; a unit is
/// programmed only while it is erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NorRules {
    /// Bytes in the flash.
    pub capacity: usize,
    /// Bytes in a write unit.
    pub write_unit: usize,
    /// Bytes in a page, the unit of an erase.
    pub page: usize,
}

impl NorRules {
    /// A read of `len` bytes at `offset`: in bounds.
    pub fn read(&self, offset: u32, len: usize) -> Result<(), FlashError> {
        self.slice(1, offset, len)
    }

    /// An erase of the bytes `from..to`: in bounds, and whole pages.
    pub fn erase(&self, from: u32, to: u32) -> Result<(), FlashError> {
        let (from, to) = (from as usize, to as usize);
        if from > to || to > self.capacity {
            return Err(FlashError::OutOfBounds);
        }
        if !from.is_multiple_of(self.page) || !to.is_multiple_of(self.page) {
            return Err(FlashError::NotAligned);
        }
        Ok(())
    }

    /// A write of `len` bytes at `offset`: in bounds, and whole write units.
    pub fn write(&self, offset: u32, len: usize) -> Result<(), FlashError> {
        self.slice(self.write_unit, offset, len)
    }

    /// Programming the write unit at byte `address`, `programmed` once already since its
    /// page's last erase: refused if it was.
    pub fn program(&self, address: u32, programmed: bool) -> Result<(), FlashError> {
        if programmed {
            return Err(FlashError::UnitWrittenTwice { address });
        }
        Ok(())
    }

    /// A write at `offset` over `current`, the bytes that range reads now (a flash that
    /// keeps no record of what it programmed): each unit must read erased (all `0xFF`).
    pub fn write_over(&self, offset: u32, current: &[u8]) -> Result<(), FlashError> {
        for (i, unit) in current.chunks(self.write_unit).enumerate() {
            let address = offset + (i * self.write_unit) as u32;
            self.program(address, unit.iter().any(|&b| b != 0xFF))?;
        }
        Ok(())
    }

    /// `len` bytes at `offset`, both multiples of `align`, within the flash.
    fn slice(&self, align: usize, offset: u32, len: usize) -> Result<(), FlashError> {
        let offset = offset as usize;
        if len > self.capacity || offset > self.capacity - len {
            return Err(FlashError::OutOfBounds);
        }
        if !offset.is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(FlashError::NotAligned);
        }
        Ok(())
    }
}

/// A power cut scheduled on a [`MemFlash`], counted from the moment it is armed. A cut at
/// a write and a cut at an erase can be armed together; the first to come happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerCut {
    /// Power fails in the middle of the n-th unit write (1-based; a unit is a word unless
    /// the flash was made with another): it clears some of the bits it was to clear, at
    /// least one, and the unit counts as programmed.
    AtWordWrite(u64),
    /// Power fails in the middle of the n-th page erase (1-based): bits of the page drift
    /// towards 1 at random, and the page must be erased again before any unit of it is
    /// programmed.
    AtErase(u64),
    /// Power fails right before the n-th unit write: every unit before it is programmed,
    /// it and every unit after it untouched (a chip that programs unit by unit, losing
    /// power between two units of one write).
    BeforeWordWrite(u64),
    /// Power fails right before the n-th page erase: the page is untouched.
    BeforeErase(u64),
    /// Power fails at the end of the n-th page erase: the page reads all `0xFF`, but it
    /// was not fully erased, and a program of any unit of it is refused
    /// ([`FlashError::WeaklyErased`]) until it is erased again.
    WeakErase(u64),
}

/// A power cut at a hardware action the program marked ([`MemFlash::act`]), counted
/// from the moment it is armed: RAM is lost there and no flash operation is interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionCut {
    /// Power fails right before the n-th action (1-based): it does not run.
    Before(u64),
    /// Power fails right after the n-th action: it ran, nothing after it does.
    After(u64),
}

/// How an armed cut leaves the operation it falls on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutStyle {
    Torn,
    Before,
    Weak,
}

/// Operation counters of a [`MemFlash`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Write units programmed (a torn one counts).
    pub word_writes: u64,
    /// Pages erased (a torn erase counts).
    pub erases: u64,
    /// Bytes programmed.
    pub bytes_written: u64,
}

impl FlashStats {
    /// A cut at each unit write and each erase counted between `before` and these
    /// counters, in that order: every point a power cut can fall in that stretch of a
    /// reference run (`FlashStats::default()` for the whole run), each as counted from a
    /// blank flash.
    pub fn cuts_since(self, before: FlashStats) -> impl Iterator<Item = PowerCut> {
        (before.word_writes + 1..=self.word_writes)
            .map(PowerCut::AtWordWrite)
            .chain((before.erases + 1..=self.erases).map(PowerCut::AtErase))
    }
}

/// Everything of a strict flash of `PAGES` pages but its cells: the counters, the armed
/// cuts, the power, the noise of torn contents and the rule on programs. The steps are
/// written once here, over the cells as flat slices, for [`MemFlash`] and `HeapFlash`.
#[derive(Clone)]
struct State<const PAGES: usize> {
    rules: NorRules,
    reprogram: Reprogram,
    page_erases: [u32; PAGES],
    page_bytes: [u64; PAGES],
    /// Pages whose erase was cut at its end ([`PowerCut::WeakErase`]).
    weak: [bool; PAGES],
    stats: FlashStats,
    cut_write: Option<(u64, CutStyle)>,
    cut_erase: Option<(u64, CutStyle)>,
    cut_action: Option<ActionCut>,
    /// Hardware actions marked ([`MemFlash::act`]) since creation.
    actions: u64,
    powered: bool,
    noise: SplitMix64,
}

/// A flash's cells, borrowed: its bytes, and at the first byte of each unit how many
/// times the unit was programmed since its page's last erase.
struct Cells<'a> {
    data: &'a mut [u8],
    programs: &'a mut [u8],
}

impl<const PAGES: usize> State<PAGES> {
    const fn new(rules: NorRules) -> Self {
        Self {
            rules,
            reprogram: Reprogram::ToZero,
            page_erases: [0; PAGES],
            page_bytes: [0; PAGES],
            weak: [false; PAGES],
            stats: FlashStats {
                word_writes: 0,
                erases: 0,
                bytes_written: 0,
            },
            cut_write: None,
            cut_erase: None,
            cut_action: None,
            actions: 0,
            powered: true,
            noise: SplitMix64::new(0x1DE5),
        }
    }

    fn schedule(&mut self, cut: PowerCut) {
        match cut {
            PowerCut::AtWordWrite(n) => self.cut_write = Some((n, CutStyle::Torn)),
            PowerCut::BeforeWordWrite(n) => self.cut_write = Some((n, CutStyle::Before)),
            PowerCut::AtErase(n) => self.cut_erase = Some((n, CutStyle::Torn)),
            PowerCut::BeforeErase(n) => self.cut_erase = Some((n, CutStyle::Before)),
            PowerCut::WeakErase(n) => self.cut_erase = Some((n, CutStyle::Weak)),
        }
    }

    /// Counts one operation against the armed cut; how it is cut when it is the one.
    fn tick(&mut self, erase: bool) -> Option<CutStyle> {
        let cut = if erase {
            &mut self.cut_erase
        } else {
            &mut self.cut_write
        };
        match cut {
            Some((n, style)) => {
                *n = n.saturating_sub(1);
                (*n == 0).then_some(*style)
            }
            None => None,
        }
    }

    /// Runs a marked hardware action unless the power is off or an armed action cut
    /// falls before it; a cut armed after it falls once it ran.
    fn act<T>(&mut self, action: impl FnOnce() -> T) -> Option<T> {
        if !self.powered {
            return None;
        }
        self.actions += 1;
        let (n, after) = match &mut self.cut_action {
            Some(ActionCut::Before(n)) => (n, false),
            Some(ActionCut::After(n)) => (n, true),
            None => return Some(action()),
        };
        *n = n.saturating_sub(1);
        match (*n == 0, after) {
            (false, _) => Some(action()),
            (true, false) => {
                self.lose_power();
                None
            }
            (true, true) => {
                let done = action();
                self.lose_power();
                Some(done)
            }
        }
    }

    fn lose_power(&mut self) -> FlashError {
        (self.cut_write, self.cut_erase, self.cut_action) = (None, None, None);
        self.powered = false;
        FlashError::PowerCut
    }

    /// Refuses a program of the unit at byte `address` (programmed `times` since its
    /// page's erase) that the rule or a weak erase forbids; `zero` for a program to zeros.
    fn check_program(&self, address: usize, times: u8, zero: bool) -> Result<(), FlashError> {
        let refused = match self.reprogram {
            Reprogram::Any => false,
            Reprogram::ToZero => times > 0 && !zero,
            Reprogram::Never => times > 0,
        };
        self.rules.program(address as u32, refused)?;
        if self.weak[address / self.rules.page] {
            return Err(FlashError::WeaklyErased {
                address: address as u32,
            });
        }
        Ok(())
    }

    /// Counts a program of the unit at byte `address`.
    fn programmed(&mut self, cells: &mut Cells<'_>, address: usize) {
        let unit = self.rules.write_unit;
        cells.programs[address] = cells.programs[address].saturating_add(1);
        self.stats.word_writes += 1;
        self.stats.bytes_written += unit as u64;
        self.page_bytes[address / self.rules.page] += unit as u64;
    }

    fn read(&self, data: &[u8], offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        if !self.powered {
            return Err(FlashError::PowerCut);
        }
        self.rules.read(offset, bytes.len())?;
        bytes.copy_from_slice(&data[offset as usize..offset as usize + bytes.len()]);
        Ok(())
    }

    fn erase(&mut self, cells: Cells<'_>, from: u32, to: u32) -> Result<(), FlashError> {
        if !self.powered {
            return Err(FlashError::PowerCut);
        }
        self.rules.erase(from, to)?;
        let (size, unit) = (self.rules.page, self.rules.write_unit);
        for page in (from as usize / size)..(to as usize / size) {
            let cut = self.tick(true);
            if cut == Some(CutStyle::Before) {
                return Err(self.lose_power());
            }
            self.stats.erases += 1;
            self.page_erases[page] += 1;
            let cells_of = page * size..(page + 1) * size;
            if cut == Some(CutStyle::Torn) {
                // Undefined contents: bits drift towards 1 at random and the page must be
                // erased again before any word of it can be programmed.
                // One draw per 4 bytes, whatever the unit, so a word flash tears as it
                // always has (the sweeps' seeds give the same images).
                let mut drift = 0;
                for (i, b) in cells.data[cells_of.clone()].iter_mut().enumerate() {
                    if i % 4 == 0 {
                        drift = self.noise.next_u64() as u32;
                    }
                    *b |= (drift >> (8 * (i % 4))) as u8;
                }
                for w in cells_of.step_by(unit) {
                    cells.programs[w] = cells.programs[w].max(1);
                }
                return Err(self.lose_power());
            }
            cells.data[cells_of.clone()].fill(0xFF);
            cells.programs[cells_of].fill(0);
            // Cut at its end: it reads erased, and is not.
            self.weak[page] = cut == Some(CutStyle::Weak);
            if self.weak[page] {
                return Err(self.lose_power());
            }
        }
        Ok(())
    }

    fn write(&mut self, mut cells: Cells<'_>, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        if !self.powered {
            return Err(FlashError::PowerCut);
        }
        self.rules.write(offset, bytes.len())?;
        let unit_size = self.rules.write_unit;
        for (i, unit) in bytes.chunks_exact(unit_size).enumerate() {
            let a = offset as usize + i * unit_size;
            self.check_program(a, cells.programs[a], false)?;
            let cut = self.tick(false);
            if cut == Some(CutStyle::Before) {
                return Err(self.lose_power());
            }
            let torn = cut.is_some();
            self.programmed(&mut cells, a);
            // A write can only clear bits; a torn one clears only some of them, and at
            // least one (the model's assumption: a started program is visible).
            // The bits a torn write leaves alone: one draw per 4 bytes, as a word flash
            // always drew them.
            let mut keep = [0u8; MAX_UNIT];
            let keep = &mut keep[..unit_size];
            if torn {
                for chunk in keep.chunks_mut(4) {
                    let noise = (self.noise.next_u64() as u32).to_le_bytes();
                    chunk.copy_from_slice(&noise[..chunk.len()]);
                }
            }
            let cells_of = &mut cells.data[a..a + unit_size];
            let mut cleared_some = false;
            for ((cell, &new), keep) in cells_of.iter_mut().zip(unit).zip(keep.iter()) {
                let old = *cell;
                *cell = old & (new | keep);
                cleared_some |= *cell != old;
            }
            if torn
                && !cleared_some
                && let Some((cell, new)) =
                    cells_of.iter_mut().zip(unit).find(|(c, n)| **c & !**n != 0)
            {
                *cell &= !(1 << (*cell & !new).trailing_zeros());
            }
            if torn {
                return Err(self.lose_power());
            }
        }
        Ok(())
    }

    fn zero_over(
        &mut self,
        mut cells: Cells<'_>,
        offset: u32,
        len: usize,
    ) -> Result<(), FlashError> {
        if !self.powered {
            return Err(FlashError::PowerCut);
        }
        self.rules.write(offset, len)?;
        let unit = self.rules.write_unit;
        for a in (offset as usize..offset as usize + len).step_by(unit) {
            self.check_program(a, cells.programs[a], true)?;
            let cut = self.tick(false);
            if cut == Some(CutStyle::Before) {
                return Err(self.lose_power());
            }
            self.programmed(&mut cells, a);
            if cut.is_some() {
                for chunk in cells.data[a..a + unit].chunks_mut(4) {
                    let noise = (self.noise.next_u64() as u32).to_le_bytes();
                    for (cell, keep) in chunk.iter_mut().zip(noise) {
                        *cell &= keep;
                    }
                }
                return Err(self.lose_power());
            }
            cells.data[a..a + unit].fill(0);
        }
        Ok(())
    }
}

/// Marks as programmed every unit of `data` that does not read all `0xFF` (a flash made
/// from an image or a fill).
fn count_programmed(data: &[u8], programs: &mut [u8], unit: usize) {
    for (w, bytes) in data.chunks(unit).enumerate() {
        programs[w * unit] = u8::from(bytes.iter().any(|&b| b != 0xFF));
    }
}

/// The checks of a flash's geometry, at build time.
const fn geometry_ok(pages: usize, page: usize, unit: usize) {
    assert!(
        pages > 0
            && unit.is_power_of_two()
            && unit <= MAX_UNIT
            && page > 0
            && page.is_multiple_of(unit),
        "MemFlash needs at least one page, a write unit that is a power of two up to 256 bytes, and a page size that is a multiple of it"
    );
}

/// A strict NOR flash of `PAGES` pages of `PAGE` bytes, programmed in units of `UNIT`
/// bytes (a 4-byte word unless told), each unit once between two erases unless its
/// [`Reprogram`] rule says otherwise. Its pages are inline: a flash of a few pages of a
/// few KiB, on any target; `HeapFlash` (feature `alloc`) for larger ones.
#[derive(Clone)]
pub struct MemFlash<const PAGES: usize, const PAGE: usize, const UNIT: usize = WORD> {
    data: [[u8; PAGE]; PAGES],
    /// At the first byte of every unit, the programs since its page's last erase.
    programs: [[u8; PAGE]; PAGES],
    state: State<PAGES>,
}

impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> Default
    for MemFlash<PAGES, PAGE, UNIT>
{
    fn default() -> Self {
        Self::new()
    }
}

impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> MemFlash<PAGES, PAGE, UNIT> {
    const GEOMETRY_OK: () = geometry_ok(PAGES, PAGE, UNIT);

    /// A flash that has just been erased: every byte reads `0xFF`.
    pub const fn new() -> Self {
        let () = Self::GEOMETRY_OK;
        Self {
            data: [[0xFF; PAGE]; PAGES],
            programs: [[0; PAGE]; PAGES],
            state: State::new(Self::RULES),
        }
    }

    /// The same flash under the rule `reprogram` ([`Reprogram::ToZero`] unless told).
    pub const fn with_reprogram(mut self, reprogram: Reprogram) -> Self {
        self.state.reprogram = reprogram;
        self
    }

    /// A flash whose every byte reads `fill`, as if never written (QEMU's never-written
    /// pages read `0x00`). Every unit counts as programmed: it must be erased before use.
    pub const fn filled(fill: u8) -> Self {
        let mut f = Self::new();
        f.data = [[fill; PAGE]; PAGES];
        if fill != 0xFF {
            f.programs = [[1; PAGE]; PAGES];
        }
        f
    }

    /// A flash holding `image` (shorter images are padded with `0xFF`, longer ones cut).
    /// Every unit that does not read all `0xFF` counts as programmed.
    pub fn from_image(image: &[u8]) -> Self {
        let mut f = Self::new();
        let n = image.len().min(PAGES * PAGE);
        f.data.as_flattened_mut()[..n].copy_from_slice(&image[..n]);
        count_programmed(f.data.as_flattened(), f.programs.as_flattened_mut(), UNIT);
        f
    }

    /// The raw contents, page by page.
    pub fn pages(&self) -> &[[u8; PAGE]; PAGES] {
        &self.data
    }

    fn cells(&mut self) -> (Cells<'_>, &mut State<PAGES>) {
        let cells = Cells {
            data: self.data.as_flattened_mut(),
            programs: self.programs.as_flattened_mut(),
        };
        (cells, &mut self.state)
    }

    fn bytes(&self) -> &[u8] {
        self.data.as_flattened()
    }
}

/// A strict NOR flash like [`MemFlash`] whose pages are on the heap (feature `alloc`):
/// for a geometry too large to build on a stack and clone for every cut, an STM32H7's
/// 128 KiB sectors. The same rules, counters and cuts.
#[cfg(feature = "alloc")]
#[derive(Clone)]
pub struct HeapFlash<const PAGES: usize, const PAGE: usize, const UNIT: usize = WORD> {
    data: alloc::boxed::Box<[u8]>,
    /// At the first byte of every unit, the programs since its page's last erase.
    programs: alloc::boxed::Box<[u8]>,
    state: State<PAGES>,
}

#[cfg(feature = "alloc")]
impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> Default
    for HeapFlash<PAGES, PAGE, UNIT>
{
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "alloc")]
impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> HeapFlash<PAGES, PAGE, UNIT> {
    const GEOMETRY_OK: () = geometry_ok(PAGES, PAGE, UNIT);

    /// A flash that has just been erased: every byte reads `0xFF`.
    pub fn new() -> Self {
        let () = Self::GEOMETRY_OK;
        Self {
            data: alloc::vec![0xFF; PAGES * PAGE].into_boxed_slice(),
            programs: alloc::vec![0; PAGES * PAGE].into_boxed_slice(),
            state: State::new(Self::RULES),
        }
    }

    /// The same flash under the rule `reprogram` ([`Reprogram::ToZero`] unless told).
    pub fn with_reprogram(mut self, reprogram: Reprogram) -> Self {
        self.state.reprogram = reprogram;
        self
    }

    /// A flash holding `image` (shorter images are padded with `0xFF`, longer ones cut).
    /// Every unit that does not read all `0xFF` counts as programmed.
    pub fn from_image(image: &[u8]) -> Self {
        let mut f = Self::new();
        let n = image.len().min(PAGES * PAGE);
        f.data[..n].copy_from_slice(&image[..n]);
        count_programmed(&f.data, &mut f.programs, UNIT);
        f
    }

    fn cells(&mut self) -> (Cells<'_>, &mut State<PAGES>) {
        let cells = Cells {
            data: &mut self.data,
            programs: &mut self.programs,
        };
        (cells, &mut self.state)
    }

    /// The raw contents, `PAGES` pages of `PAGE` bytes one after the other.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

/// What [`MemFlash`] and `HeapFlash` share, written once: their rules, counters, cuts, and
/// the `NorFlash` traits over [`State`]'s steps.
macro_rules! strict_flash {
    ($flash:ident) => {
        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> $flash<PAGES, PAGE, UNIT> {
            /// The checks this flash keeps.
            pub const RULES: NorRules = NorRules {
                capacity: PAGES * PAGE,
                write_unit: UNIT,
                page: PAGE,
            };

            /// Its rule on programming a unit twice between erases.
            pub fn reprogram(&self) -> Reprogram {
                self.state.reprogram
            }

            /// Arms a power cut, counted from now. A write cut and an erase cut can be
            /// armed together (the first to come happens); arming one replaces the earlier
            /// one of its kind.
            pub fn schedule_power_cut(&mut self, cut: PowerCut) {
                self.state.schedule(cut);
            }

            /// Disarms every scheduled power cut that has not happened yet.
            pub fn cancel_power_cut(&mut self) {
                let state = &mut self.state;
                (state.cut_write, state.cut_erase, state.cut_action) = (None, None, None);
            }

            /// Arms a power cut at a hardware action, counted from now (replacing an
            /// armed one): see [`Self::act`].
            pub fn schedule_action_cut(&mut self, cut: ActionCut) {
                self.state.cut_action = Some(cut);
            }

            /// Runs `action`, a move of the hardware outside the flash (a valve opened,
            /// a dose pumped), as a place a power cut can fall: `None` without running
            /// it when the power is off or an armed [`ActionCut::Before`] falls on it;
            /// an armed [`ActionCut::After`] cuts the power once it ran. A program
            /// tested with [`crate::testing::cuts`] runs each action through this, or
            /// the checker never cuts between the action and the flash writes around it.
            pub fn act<T>(&mut self, action: impl FnOnce() -> T) -> Option<T> {
                self.state.act(action)
            }

            /// Hardware actions run through [`Self::act`] since creation (a cut one
            /// counts).
            pub fn actions(&self) -> u64 {
                self.state.actions
            }

            /// Whether power is on (no cut has happened since the last [`Self::power_on`]).
            pub fn is_powered(&self) -> bool {
                self.state.powered
            }

            /// Restores power after a cut. The contents are what the cut left.
            pub fn power_on(&mut self) {
                self.state.powered = true;
            }

            /// Seeds the generator of torn contents, so a run with power cuts is
            /// reproducible.
            pub fn seed_noise(&mut self, seed: u64) {
                self.state.noise = SplitMix64::new(seed);
            }

            /// The operation counters since creation.
            pub fn stats(&self) -> FlashStats {
                self.state.stats
            }

            /// How many times each page has been erased.
            pub fn page_erases(&self) -> &[u32; PAGES] {
                &self.state.page_erases
            }

            /// How many bytes have been programmed into each page.
            pub fn page_bytes_written(&self) -> &[u64; PAGES] {
                &self.state.page_bytes
            }
        }

        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> core::fmt::Debug
            for $flash<PAGES, PAGE, UNIT>
        {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($flash))
                    .field("pages", &PAGES)
                    .field("page_size", &PAGE)
                    .field("write_size", &UNIT)
                    .field("reprogram", &self.state.reprogram)
                    .field("stats", &self.state.stats)
                    .field("powered", &self.state.powered)
                    .finish_non_exhaustive()
            }
        }

        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> ErrorType
            for $flash<PAGES, PAGE, UNIT>
        {
            type Error = FlashError;
        }

        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> ReadNorFlash
            for $flash<PAGES, PAGE, UNIT>
        {
            const READ_SIZE: usize = 1;

            fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
                self.state.read(self.bytes(), offset, bytes)
            }

            fn capacity(&self) -> usize {
                PAGES * PAGE
            }
        }

        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> NorFlash
            for $flash<PAGES, PAGE, UNIT>
        {
            const WRITE_SIZE: usize = UNIT;
            const ERASE_SIZE: usize = PAGE;

            fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
                let (cells, state) = self.cells();
                state.erase(cells, from, to)
            }

            fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
                let (cells, state) = self.cells();
                state.write(cells, offset, bytes)
            }
        }

        /// The same flash for the async engine (feature `async`): each step completes at
        /// once, with the blocking rules and power cuts.
        #[cfg(feature = "async")]
        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize>
            embedded_storage_async::nor_flash::ReadNorFlash for $flash<PAGES, PAGE, UNIT>
        {
            const READ_SIZE: usize = 1;

            async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
                ReadNorFlash::read(self, offset, bytes)
            }

            fn capacity(&self) -> usize {
                PAGES * PAGE
            }
        }

        /// The same flash for the async engine (feature `async`).
        #[cfg(feature = "async")]
        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize>
            embedded_storage_async::nor_flash::NorFlash for $flash<PAGES, PAGE, UNIT>
        {
            const WRITE_SIZE: usize = UNIT;
            const ERASE_SIZE: usize = PAGE;

            async fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
                NorFlash::erase(self, from, to)
            }

            async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
                NorFlash::write(self, offset, bytes)
            }
        }

        /// Zeroing a unit is one more program of it (counted as a unit write), refused
        /// under [`Reprogram::Never`] when the unit was programmed; a cut in the middle
        /// clears only some of its bits, as a torn write does.
        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize> crate::journal::ZeroOver
            for $flash<PAGES, PAGE, UNIT>
        {
            fn zero_over(&mut self, offset: u32, len: usize) -> Result<(), Self::Error> {
                let (cells, state) = self.cells();
                state.zero_over(cells, offset, len)
            }
        }

        impl<const PAGES: usize, const PAGE: usize, const UNIT: usize>
            crate::testing::cuts::Cuttable for $flash<PAGES, PAGE, UNIT>
        {
            fn arm(&mut self, cut: PowerCut) {
                self.schedule_power_cut(cut);
            }
            fn powered(&self) -> bool {
                self.is_powered()
            }
            fn restore(&mut self) {
                self.power_on();
            }
            fn counts(&self) -> FlashStats {
                self.stats()
            }
            fn seed(&mut self, seed: u64) {
                self.seed_noise(seed);
            }
            fn arm_action(&mut self, cut: ActionCut) {
                self.schedule_action_cut(cut);
            }
            fn act<T>(&mut self, action: impl FnOnce() -> T) -> Option<T> {
                $flash::act(self, action)
            }
            fn actions(&self) -> u64 {
                $flash::actions(self)
            }
        }
    };
}

strict_flash!(MemFlash);
#[cfg(feature = "alloc")]
strict_flash!(HeapFlash);

#[cfg(test)]
mod tests {
    use super::*;

    type F = MemFlash<2, 64>;

    #[test]
    fn erase_sets_ff_and_writes_only_clear_bits() {
        let mut f = F::filled(0x00);
        f.erase(0, 64).unwrap();
        let mut buf = [0u8; 8];
        f.read(0, &mut buf).unwrap();
        assert_eq!(buf, [0xFF; 8]);
        f.write(0, &[0x0F, 0xF0, 0x00, 0xFF]).unwrap();
        f.read(0, &mut buf[..4]).unwrap();
        assert_eq!(buf[..4], [0x0F, 0xF0, 0x00, 0xFF]);
        assert_eq!(
            f.stats(),
            FlashStats {
                word_writes: 1,
                erases: 1,
                bytes_written: 4
            }
        );
        assert_eq!(f.page_erases(), &[1, 0]);
    }

    #[test]
    fn a_word_written_twice_is_an_error() {
        let mut f = F::new();
        f.write(4, &[0xFF; 4]).unwrap();
        assert_eq!(
            f.write(4, &[0; 4]),
            Err(FlashError::UnitWrittenTwice { address: 4 })
        );
        f.erase(0, 64).unwrap();
        f.write(4, &[0; 4]).unwrap();
    }

    #[test]
    fn never_written_flash_must_be_erased_first() {
        let mut f = F::filled(0);
        assert_eq!(
            f.write(64, &[0; 4]),
            Err(FlashError::UnitWrittenTwice { address: 64 })
        );
    }

    #[test]
    fn alignment_and_bounds_are_checked() {
        let mut f = F::new();
        assert_eq!(f.write(2, &[0; 4]), Err(FlashError::NotAligned));
        assert_eq!(f.write(0, &[0; 3]), Err(FlashError::NotAligned));
        assert_eq!(f.write(128, &[0; 4]), Err(FlashError::OutOfBounds));
        assert_eq!(f.erase(0, 32), Err(FlashError::NotAligned));
        assert_eq!(f.erase(0, 192), Err(FlashError::OutOfBounds));
        let mut b = [0u8; 2];
        assert_eq!(f.read(127, &mut b), Err(FlashError::OutOfBounds));
    }

    #[test]
    fn a_cut_tears_the_chosen_word_and_stops_everything_after() {
        let mut f = F::new();
        f.seed_noise(7);
        f.schedule_power_cut(PowerCut::AtWordWrite(2));
        assert_eq!(f.write(0, &[0; 12]), Err(FlashError::PowerCut));
        let mut buf = [0u8; 12];
        assert_eq!(f.read(0, &mut buf), Err(FlashError::PowerCut));
        f.power_on();
        f.read(0, &mut buf).unwrap();
        assert_eq!(buf[..4], [0; 4]);
        assert_eq!(buf[8..], [0xFF; 4], "the word after the cut is untouched");
        assert_eq!(f.stats().word_writes, 2);
        // The torn word cannot be programmed again before an erase.
        assert_eq!(
            f.write(4, &[0; 4]),
            Err(FlashError::UnitWrittenTwice { address: 4 })
        );
    }

    #[test]
    fn a_cut_during_erase_leaves_a_page_that_must_be_erased_again() {
        let mut f = F::new();
        f.write(0, &[0; 8]).unwrap();
        f.schedule_power_cut(PowerCut::AtErase(1));
        assert_eq!(f.erase(0, 64), Err(FlashError::PowerCut));
        f.power_on();
        assert!(matches!(
            f.write(8, &[0; 4]),
            Err(FlashError::UnitWrittenTwice { .. })
        ));
        f.erase(0, 64).unwrap();
        f.write(8, &[0; 4]).unwrap();
        assert_eq!(f.stats().erases, 2);
    }

    #[test]
    fn a_cut_before_a_unit_leaves_the_units_before_it_written_and_it_untouched() {
        let mut f = F::new();
        f.schedule_power_cut(PowerCut::BeforeWordWrite(3));
        assert_eq!(f.write(0, &[0; 16]), Err(FlashError::PowerCut));
        f.power_on();
        let mut buf = [0u8; 16];
        f.read(0, &mut buf).unwrap();
        assert_eq!(buf[..8], [0; 8]);
        assert_eq!(buf[8..], [0xFF; 8]);
        assert_eq!(f.stats().word_writes, 2);
        // The untouched unit is still blank: it can be programmed.
        f.write(8, &[0; 4]).unwrap();
        // A cut before an erase leaves the page as it was.
        f.schedule_power_cut(PowerCut::BeforeErase(1));
        assert_eq!(f.erase(0, 64), Err(FlashError::PowerCut));
        f.power_on();
        f.read(0, &mut buf).unwrap();
        assert_eq!(buf[..12], [0; 12]);
        assert_eq!(f.stats().erases, 0);
    }

    #[test]
    fn a_weak_erase_reads_blank_and_refuses_a_program_until_erased_again() {
        let mut f = F::new();
        f.write(64, &[0; 8]).unwrap();
        f.schedule_power_cut(PowerCut::WeakErase(1));
        assert_eq!(f.erase(64, 128), Err(FlashError::PowerCut));
        f.power_on();
        let mut buf = [0u8; 64];
        f.read(64, &mut buf).unwrap();
        assert_eq!(buf, [0xFF; 64]);
        assert_eq!(
            f.write(72, &[0; 4]),
            Err(FlashError::WeaklyErased { address: 72 })
        );
        // The other page is not touched by it.
        f.write(0, &[0; 4]).unwrap();
        f.erase(64, 128).unwrap();
        f.write(72, &[0; 4]).unwrap();
        assert_eq!((f.stats().erases, f.stats().word_writes), (2, 4));
    }

    #[test]
    fn the_rules_are_embedded_storages_checks_for_any_geometry() {
        use embedded_storage::nor_flash::{check_erase, check_read, check_write};
        type G = MemFlash<2, 64, 8>;
        let f = G::new();
        let kind = |r: Result<(), FlashError>| r.map_err(|e| e.kind());
        let mut checked = 0;
        for offset in (0..140).step_by(2) {
            for len in (0..140).step_by(2) {
                assert_eq!(
                    kind(G::RULES.read(offset, len)),
                    check_read(&f, offset, len)
                );
                assert_eq!(
                    kind(G::RULES.write(offset, len)),
                    check_write(&f, offset, len)
                );
                let to = len as u32;
                assert_eq!(
                    kind(G::RULES.erase(offset, to)),
                    check_erase(&f, offset, to)
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 70 * 70);
        assert_eq!(G::RULES.write(8, 16), Ok(()));
        assert_eq!(G::RULES.write(4, 8), Err(FlashError::NotAligned));
        assert_eq!(G::RULES.write(120, 16), Err(FlashError::OutOfBounds));
        assert_eq!(G::RULES.erase(64, 128), Ok(()));
        assert_eq!(G::RULES.erase(0, 32), Err(FlashError::NotAligned));
    }

    #[test]
    fn each_rule_on_a_second_program() {
        use crate::journal::ZeroOver;
        let first = [0x0F, 0xFF, 0xFF, 0xFF];
        // Any: the unit reads the AND of its programs.
        let mut f = F::new().with_reprogram(Reprogram::Any);
        f.write(0, &first).unwrap();
        f.write(0, &[0xF3, 0x00, 0xFF, 0xFF]).unwrap();
        let mut buf = [0u8; 4];
        f.read(0, &mut buf).unwrap();
        assert_eq!((buf, f.stats().word_writes), ([0x03, 0, 0xFF, 0xFF], 2));
        // ToZero (the default): a second write refused, a zeroing allowed.
        let mut f = F::new();
        f.write(0, &first).unwrap();
        assert_eq!(
            f.write(0, &first),
            Err(FlashError::UnitWrittenTwice { address: 0 })
        );
        f.zero_over(0, 4).unwrap();
        // Never (ECC): the zeroing refused too; a blank unit still zeroed.
        let mut f = F::new().with_reprogram(Reprogram::Never);
        f.write(0, &first).unwrap();
        assert_eq!(
            f.zero_over(0, 4),
            Err(FlashError::UnitWrittenTwice { address: 0 })
        );
        f.zero_over(4, 4).unwrap();
        f.read(0, &mut buf).unwrap();
        assert_eq!(buf, first);
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn the_heap_flash_does_what_the_inline_one_does() {
        type H = HeapFlash<2, 64>;
        fn run<G: NorFlash<Error = FlashError>>(f: &mut G, cut: &mut dyn FnMut(&mut G, PowerCut)) {
            cut(f, PowerCut::AtWordWrite(3));
            assert_eq!(f.write(0, &[0x5A; 16]), Err(FlashError::PowerCut));
        }
        let mut m = F::new();
        m.seed_noise(9);
        run(&mut m, &mut |f, c| f.schedule_power_cut(c));
        m.power_on();
        m.schedule_power_cut(PowerCut::AtErase(1));
        assert_eq!(m.erase(64, 128), Err(FlashError::PowerCut));
        let mut h = H::new();
        h.seed_noise(9);
        run(&mut h, &mut |f, c| f.schedule_power_cut(c));
        h.power_on();
        h.schedule_power_cut(PowerCut::AtErase(1));
        assert_eq!(h.erase(64, 128), Err(FlashError::PowerCut));
        assert_eq!(h.bytes(), m.pages().as_flattened());
        assert_eq!((h.stats(), h.page_erases()), (m.stats(), m.page_erases()));
        assert_eq!(H::from_image(h.bytes()).bytes(), h.bytes());
        h.power_on();
        assert_eq!(
            h.write(64, &[0; 4]),
            Err(FlashError::UnitWrittenTwice { address: 64 })
        );
    }

    #[test]
    fn a_write_over_programmed_bytes_names_the_first_programmed_unit() {
        let rules = NorRules {
            capacity: 1024,
            write_unit: 4,
            page: 256,
        };
        let mut current = [0xFF; 12];
        assert_eq!(rules.write_over(100, &current), Ok(()));
        current[9] = 0xFE;
        current[5] = 0x00;
        assert_eq!(
            rules.write_over(100, &current),
            Err(FlashError::UnitWrittenTwice { address: 104 })
        );
        assert_eq!(
            rules.program(8, true),
            Err(FlashError::UnitWrittenTwice { address: 8 })
        );
        assert_eq!(rules.program(8, false), Ok(()));
    }
}
