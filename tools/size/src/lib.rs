//! A flash driver over RAM, the same for every binary, so that the difference in code
//! size between the binaries is the storage code alone. `black_box` keeps the optimiser
//! from deleting the work.
#![no_std]

use core::hint::black_box;
use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// Four 1 KiB pages of pretend flash.
pub struct RamFlash {
    mem: [u8; 4096],
}

/// The driver's only error: an access out of bounds.
#[derive(Debug, Clone, Copy)]
pub struct OutOfBounds;

impl NorFlashError for OutOfBounds {
    fn kind(&self) -> NorFlashErrorKind {
        NorFlashErrorKind::OutOfBounds
    }
}

impl RamFlash {
    /// Erased flash.
    pub fn new() -> Self {
        Self {
            mem: black_box([0xFF; 4096]),
        }
    }
    fn range(&self, offset: u32, len: usize) -> Result<core::ops::Range<usize>, OutOfBounds> {
        let start = offset as usize;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= self.mem.len())
            .ok_or(OutOfBounds)?;
        Ok(start..end)
    }
}

impl Default for RamFlash {
    fn default() -> Self {
        Self::new()
    }
}

impl ErrorType for RamFlash {
    type Error = OutOfBounds;
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), OutOfBounds> {
        let r = self.range(offset, bytes.len())?;
        bytes.copy_from_slice(black_box(&self.mem[r]));
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 1024;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), OutOfBounds> {
        let r = self.range(from, (to - from) as usize)?;
        black_box(&mut self.mem[r]).fill(0xFF);
        Ok(())
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), OutOfBounds> {
        let r = self.range(offset, bytes.len())?;
        for (m, b) in black_box(&mut self.mem[r]).iter_mut().zip(bytes) {
            *m &= *b;
        }
        Ok(())
    }
}

impl embedded_storage_async::nor_flash::ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;
    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), OutOfBounds> {
        ReadNorFlash::read(self, offset, bytes)
    }
    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl embedded_storage_async::nor_flash::NorFlash for RamFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 1024;
    async fn erase(&mut self, from: u32, to: u32) -> Result<(), OutOfBounds> {
        NorFlash::erase(self, from, to)
    }
    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), OutOfBounds> {
        NorFlash::write(self, offset, bytes)
    }
}

/// Exercises the driver alone: the baseline every other binary is measured against.
pub fn touch_driver(flash: &mut RamFlash) {
    let mut b = [0u8; 16];
    let _ = NorFlash::erase(flash, 0, 1024);
    let _ = NorFlash::write(flash, black_box(0), &b);
    let _ = ReadNorFlash::read(flash, black_box(0), &mut b);
    black_box(b);
}
