//! sequential-storage's map with one key: fetch, then store (offset, total) values.
#![no_std]
#![no_main]

use core::hint::black_box;
use panic_halt as _;
use sequential_storage::cache::Cache;
use sequential_storage::map::{MapConfig, MapStorage, SerializationError, Value};

#[derive(Clone, Copy, Default)]
struct Rec {
    offset: u32,
    total: i32,
}

impl Value<'_> for Rec {
    fn serialize_into(&self, buffer: &mut [u8]) -> Result<usize, SerializationError> {
        let b = buffer
            .get_mut(..8)
            .ok_or(SerializationError::BufferTooSmall)?;
        b[..4].copy_from_slice(&self.offset.to_le_bytes());
        b[4..].copy_from_slice(&self.total.to_le_bytes());
        Ok(8)
    }
    fn deserialize_from(buffer: &[u8]) -> Result<(Self, usize), SerializationError> {
        let b = buffer.get(..8).ok_or(SerializationError::InvalidFormat)?;
        let offset = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let total = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        Ok((Rec { offset, total }, 8))
    }
}

#[cortex_m_rt::entry]
fn main() -> ! {
    let mut flash = idem_size::RamFlash::new();
    idem_size::touch_driver(&mut flash);
    let mut map = MapStorage::<u8, _, _>::new(
        flash,
        const { MapConfig::new(0..4096) },
        Cache::new_uncached(),
    );
    let mut buf = [0u8; 32];
    embassy_futures::block_on(async {
        let mut rec = map
            .fetch_item::<Rec>(&mut buf, &0)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        for _ in 0..black_box(1000u32) {
            rec.offset += 1;
            rec.total += 1;
            black_box(map.store_item(&mut buf, &0, &rec).await.is_ok());
        }
    });
    loop {
        cortex_m::asm::nop();
    }
}
