//! The C side's flash: a table of callbacks and its geometry, checked against the
//! journal's rules at open, and seen by the journal as an `embedded_storage` `NorFlash`.
//!
//! The journal's page is [`IDEM_PAGE`] bytes whatever the chip's: a page of the journal
//! is erased as the chip's pages inside it, one callback each. Its write unit is 4 bytes
//! on a flash that programs 1, 2 or 4 at a time, and 32 on one that programs 8, 16 or 32
//! (a multiple of the chip's unit, each programmed once between erases). So the library
//! holds two builds of the receive path, not one per chip.

use core::ffi::{c_int, c_void};

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use idem_core::journal::Region;

/// The journal's page in bytes: the chip's erase size must divide it.
pub const IDEM_PAGE: u32 = 4096;

/// Reads `len` bytes at byte address `addr` into `buf`; 0 once done, anything else a
/// failure.
pub type IdemReadFn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, addr: u32, buf: *mut u8, len: usize) -> c_int>;
/// Programs `len` bytes at `addr` (aligned to the write size, a whole number of units,
/// each blank); 0 once they are programmed, anything else a failure.
pub type IdemWriteFn = Option<
    unsafe extern "C" fn(ctx: *mut c_void, addr: u32, bytes: *const u8, len: usize) -> c_int,
>;
/// Erases the chip's page at `addr` (a multiple of the erase size); 0 once it reads all
/// 0xFF, anything else a failure.
pub type IdemEraseFn = Option<unsafe extern "C" fn(ctx: *mut c_void, addr: u32) -> c_int>;
/// Makes every write and erase so far durable (a file's `fdatasync`); 0 once done.
pub type IdemSyncFn = Option<unsafe extern "C" fn(ctx: *mut c_void) -> c_int>;

/// The flash the receiver keeps its journal on: the C side's callbacks and geometry.
/// Copied at `idem_open`; the callbacks and `ctx` must stay valid while the receiver is
/// used.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct idem_flash {
    /// Passed to every callback.
    pub ctx: *mut c_void,
    /// Reads bytes; required.
    pub read: IdemReadFn,
    /// Programs bytes; required. A write that returns 0 has programmed them.
    pub write: IdemWriteFn,
    /// Erases one of the chip's pages; required. An erase that returns 0 has erased it.
    pub erase: IdemEraseFn,
    /// Makes writes durable, once a call's records are written and before any
    /// acknowledgement they allow is handed out; NULL on a NOR flash whose writes are
    /// durable when they return.
    pub sync: IdemSyncFn,
    /// Bytes the callbacks address, from 0.
    pub capacity: u32,
    /// The chip's write unit in bytes: a power of two, at most 32.
    pub write_size: u32,
    /// The chip's erase unit in bytes: a power of two from `write_size` up to
    /// `IDEM_PAGE`.
    pub erase_size: u32,
    /// Where the journal's region starts: a multiple of `IDEM_PAGE`.
    pub region_start: u32,
    /// The region's size: at least two `IDEM_PAGE`s, a multiple of it, inside
    /// `capacity`.
    pub region_size: u32,
}

/// The journal's write unit for a chip's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// 4 bytes (a chip of 1, 2 or 4).
    Four,
    /// 32 bytes (a chip of 8, 16 or 32).
    ThirtyTwo,
}

/// Why a geometry cannot hold the journal, in words.
pub fn check(f: &idem_flash) -> Result<(Unit, Region), &'static str> {
    if f.read.is_none() || f.write.is_none() || f.erase.is_none() {
        return Err("the read, write and erase callbacks are all required");
    }
    let unit = match f.write_size {
        1 | 2 | 4 => Unit::Four,
        8 | 16 | 32 => Unit::ThirtyTwo,
        _ => return Err("the write size must be a power of two from 1 to 32 bytes"),
    };
    if !f.erase_size.is_power_of_two() || f.erase_size < f.write_size || f.erase_size > IDEM_PAGE {
        return Err("the erase size must be a power of two from the write size up to 4096 bytes");
    }
    if !f.region_start.is_multiple_of(IDEM_PAGE) || !f.region_size.is_multiple_of(IDEM_PAGE) {
        return Err("the region's start and size must be multiples of 4096 bytes");
    }
    if f.region_size < 2 * IDEM_PAGE {
        return Err("the region must hold at least two pages of 4096 bytes");
    }
    if u64::from(f.region_start) + u64::from(f.region_size) > u64::from(f.capacity) {
        return Err("the region runs past the flash's capacity");
    }
    let region = Region {
        start: f.region_start,
        pages: f.region_size / IDEM_PAGE,
    };
    Ok((unit, region))
}

/// Which callback failed, and what it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// `read`.
    Read(c_int),
    /// `write`.
    Write(c_int),
    /// `erase`.
    Erase(c_int),
    /// An address or length outside the flash (a bug, never the C side's).
    Bounds,
}

impl NorFlashError for Failed {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            Self::Bounds => NorFlashErrorKind::OutOfBounds,
            _ => NorFlashErrorKind::Other,
        }
    }
}

/// The table as a `NorFlash` with the journal's write unit `W` and page [`IDEM_PAGE`].
pub struct CFlash<'a, const W: usize> {
    /// The C side's table, checked by [`check`].
    pub table: &'a idem_flash,
}

impl<const W: usize> ErrorType for CFlash<'_, W> {
    type Error = Failed;
}

impl<const W: usize> ReadNorFlash for CFlash<'_, W> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Failed> {
        embedded_storage::nor_flash::check_read(self, offset, bytes.len())
            .map_err(|_| Failed::Bounds)?;
        let read = self.table.read.ok_or(Failed::Read(-1))?;
        // SAFETY: `read` is the C side's callback, checked non-null at open; it writes at
        // most `bytes.len()` bytes into `bytes`, a valid buffer of that length.
        match unsafe { read(self.table.ctx, offset, bytes.as_mut_ptr(), bytes.len()) } {
            0 => Ok(()),
            rc => Err(Failed::Read(rc)),
        }
    }

    fn capacity(&self) -> usize {
        self.table.capacity as usize
    }
}

impl<const W: usize> NorFlash for CFlash<'_, W> {
    const WRITE_SIZE: usize = W;
    const ERASE_SIZE: usize = IDEM_PAGE as usize;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Failed> {
        embedded_storage::nor_flash::check_erase(self, from, to).map_err(|_| Failed::Bounds)?;
        let erase = self.table.erase.ok_or(Failed::Erase(-1))?;
        let mut at = from;
        while at < to {
            // SAFETY: `erase` is the C side's callback, checked non-null at open; it
            // takes only an address.
            match unsafe { erase(self.table.ctx, at) } {
                0 => at += self.table.erase_size,
                rc => return Err(Failed::Erase(rc)),
            }
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Failed> {
        embedded_storage::nor_flash::check_write(self, offset, bytes.len())
            .map_err(|_| Failed::Bounds)?;
        let write = self.table.write.ok_or(Failed::Write(-1))?;
        // SAFETY: `write` is the C side's callback, checked non-null at open; it reads
        // `bytes.len()` bytes from `bytes`, a valid buffer of that length.
        match unsafe { write(self.table.ctx, offset, bytes.as_ptr(), bytes.len()) } {
            0 => Ok(()),
            rc => Err(Failed::Write(rc)),
        }
    }
}
