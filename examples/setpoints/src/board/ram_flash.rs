//! NOR flash in RAM for the Cortex-M0 binaries: a stand-in for the chip's NVMC driver,
//! blocking and async, so that both binaries measure their storage crate, not a driver.

use embedded_storage::nor_flash::{ErrorType, NorFlash, NorFlashErrorKind, ReadNorFlash};

pub const PAGE: usize = 1024;
pub const PAGES: usize = 6;

/// NOR flash in RAM: bits only go from 1 to 0 between erases.
pub struct RamFlash(pub [u8; PAGE * PAGES]);

impl ErrorType for RamFlash {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let at = offset as usize;
        let from = self
            .0
            .get(at..at + bytes.len())
            .ok_or(NorFlashErrorKind::OutOfBounds)?;
        bytes.copy_from_slice(from);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.0.len()
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let range = self.0.get_mut(from as usize..to as usize);
        range.ok_or(NorFlashErrorKind::OutOfBounds)?.fill(0xFF);
        Ok(())
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        let at = offset as usize;
        let to = self
            .0
            .get_mut(at..at + bytes.len())
            .ok_or(NorFlashErrorKind::OutOfBounds)?;
        to.iter_mut().zip(bytes).for_each(|(t, b)| *t &= b);
        Ok(())
    }
}

impl embedded_storage_async::nor_flash::ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;
    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        ReadNorFlash::read(self, offset, bytes)
    }
    fn capacity(&self) -> usize {
        self.0.len()
    }
}

impl embedded_storage_async::nor_flash::NorFlash for RamFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;
    async fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        NorFlash::erase(self, from, to)
    }
    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        NorFlash::write(self, offset, bytes)
    }
}
