//! What the yardstick bench and the `commit_profile` example share: the strict flash seen
//! through the async traits sequential-storage takes, and the yardstick's record.
#![allow(dead_code)] // each user takes its part

#[path = "../../tests/support/offset_total.rs"]
mod offset_total;
use idem_core::testing::flash::{FlashError, MemFlash};
pub use offset_total::OffsetTotal;
use sequential_storage::map::{SerializationError, Value};

/// The flash both journals run on: 4 pages of 1 KiB.
pub type Flash = MemFlash<4, 1024>;

/// The same flash, seen through the async traits sequential-storage takes.
pub struct Async(pub Flash);

impl embedded_storage_async::nor_flash::ErrorType for Async {
    type Error = FlashError;
}

impl embedded_storage_async::nor_flash::ReadNorFlash for Async {
    const READ_SIZE: usize = 1;
    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        embedded_storage::nor_flash::ReadNorFlash::read(&mut self.0, offset, bytes)
    }
    fn capacity(&self) -> usize {
        4 * 1024
    }
}

impl embedded_storage_async::nor_flash::NorFlash for Async {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 1024;
    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        embedded_storage::nor_flash::NorFlash::erase(&mut self.0, from, to)
    }
    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        embedded_storage::nor_flash::NorFlash::write(&mut self.0, offset, bytes)
    }
}

/// The record, as a sequential-storage value: the same 8 fixed bytes idem stores.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Rec(pub OffsetTotal);

impl Value<'_> for Rec {
    fn serialize_into(&self, buffer: &mut [u8]) -> Result<usize, SerializationError> {
        let b = buffer
            .get_mut(..8)
            .ok_or(SerializationError::BufferTooSmall)?;
        b[..4].copy_from_slice(&self.0.offset.to_le_bytes());
        b[4..].copy_from_slice(&self.0.total.to_le_bytes());
        Ok(8)
    }
    fn deserialize_from(buffer: &[u8]) -> Result<(Self, usize), SerializationError> {
        let b: &[u8; 8] = buffer
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or(SerializationError::InvalidFormat)?;
        let offset = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let total = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        Ok((Rec(OffsetTotal { offset, total }), 8))
    }
}

pub fn rec(i: u32) -> OffsetTotal {
    OffsetTotal {
        offset: i + 1,
        total: i as i32,
    }
}
