//! An `embedded_storage` NOR-flash driver for the nRF NVMC, over idem's storage pages.
//!
//! The nRF51 (micro:bit v1) and nRF52833 (v2) share the NVMC register layout; they differ
//! in page size. Offsets given to the driver count from the start of the storage pages.
//! Writes are whole 32-bit words (a byte or half-word write to flash faults the chip).

use core::ptr;

use core::sync::atomic::{AtomicBool, Ordering};
use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash, check_erase, check_read,
    check_write,
};

use idem_board::demo::DEMO_PAGES;
use idem_board::feed::FEED_PAGES;

/// The flash page size.
#[cfg(not(feature = "v2"))]
pub const PAGE: usize = 1024;
/// The flash page size.
#[cfg(feature = "v2")]
pub const PAGE: usize = 4096;

/// First byte of the storage pages (`_storage_start` in memory.x).
#[cfg(not(feature = "v2"))]
pub const STORAGE_START: u32 = 0x0003_D800;
/// First byte of the storage pages (`_storage_start` in memory.x).
#[cfg(feature = "v2")]
pub const STORAGE_START: u32 = 0x0007_6000;

const NVMC: usize = 0x4001_E000;
const READY: usize = NVMC + 0x400;
const CONFIG: usize = NVMC + 0x504;
const ERASEPAGE: usize = NVMC + 0x508;
const CONFIG_READ: u32 = 0;
const CONFIG_WRITE: u32 = 1;
const CONFIG_ERASE: u32 = 2;

/// The driver's only errors: alignment and bounds, as `embedded_storage` checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error(NorFlashErrorKind);

impl NorFlashError for Error {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

impl From<NorFlashErrorKind> for Error {
    fn from(kind: NorFlashErrorKind) -> Self {
        Self(kind)
    }
}

/// The NVMC, owning the storage pages.
pub struct Nvmc(());

/// Whether the one driver has been handed out.
static TAKEN: AtomicBool = AtomicBool::new(false);

impl Nvmc {
    /// The driver, once: there is one NVMC, so a second call gets `None`.
    pub fn take() -> Option<Self> {
        cortex_m::interrupt::free(|_| {
            if TAKEN.load(Ordering::Relaxed) {
                return None;
            }
            TAKEN.store(true, Ordering::Relaxed);
            Some(Self(()))
        })
    }

    fn set_config(&mut self, mode: u32) {
        // SAFETY: CONFIG is the NVMC's documented mode register; writing 0, 1 or 2 selects
        // read-only, write or erase mode and has no other effect.
        unsafe { ptr::write_volatile(CONFIG as *mut u32, mode) };
        self.wait_ready();
    }

    fn wait_ready(&self) {
        // SAFETY: READY is a read-only status register of the NVMC.
        while unsafe { ptr::read_volatile(READY as *const u32) } & 1 == 0 {}
    }
}

impl ErrorType for Nvmc {
    type Error = Error;
}

impl ReadNorFlash for Nvmc {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Error> {
        check_read(self, offset, bytes.len())?;
        for (i, b) in bytes.iter_mut().enumerate() {
            let addr = STORAGE_START as usize + offset as usize + i;
            // SAFETY: check_read kept the address inside the storage pages, which are
            // memory-mapped flash that memory.x keeps out of the program.
            *b = unsafe { ptr::read_volatile(addr as *const u8) };
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        // Both images use the same storage pages (memory.x keeps 10 out of the program).
        const PAGES: u32 = if DEMO_PAGES > FEED_PAGES {
            DEMO_PAGES
        } else {
            FEED_PAGES
        };
        PAGES as usize * PAGE
    }
}

impl NorFlash for Nvmc {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Error> {
        check_erase(self, from, to)?;
        self.set_config(CONFIG_ERASE);
        for page in (from..to).step_by(PAGE) {
            // SAFETY: ERASEPAGE takes the address of a page to erase; check_erase kept it
            // page-aligned and inside the storage pages, which hold no program code.
            unsafe { ptr::write_volatile(ERASEPAGE as *mut u32, STORAGE_START + page) };
            self.wait_ready();
        }
        self.set_config(CONFIG_READ);
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Error> {
        check_write(self, offset, bytes.len())?;
        self.set_config(CONFIG_WRITE);
        for (i, word) in bytes.chunks_exact(4).enumerate() {
            let addr = STORAGE_START as usize + offset as usize + 4 * i;
            let value = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            // SAFETY: in write mode the NVMC programs a word-aligned flash word with a
            // 32-bit store; check_write kept the address word-aligned and inside storage.
            unsafe { ptr::write_volatile(addr as *mut u32, value) };
            self.wait_ready();
        }
        self.set_config(CONFIG_READ);
        Ok(())
    }
}
