//! The chips' application on sequential-storage 8.0.2's map, for the size comparison
//! (BENCHMARKS.md, "Chips"), as `src/bin/map.rs` is on the Cortex-M0: one item holds the
//! setpoints, the window of the last 16 command ids, the count of rejected commands and
//! the next offset, stored after each new command of [`LOG`](super::LOG) (a duplicate is
//! skipped without a write). sequential-storage is async only: the chip's blocking driver
//! runs through embassy-embedded-hal's `BlockingAsync`, polled by
//! `embassy_futures::block_on`, with no cache.

use embassy_embedded_hal::adapter::BlockingAsync;
use embassy_futures::block_on;
use embedded_storage::nor_flash::NorFlash;
use sequential_storage::cache::Cache;
use sequential_storage::map::{MapConfig, MapStorage, SerializationError, Value};
use serde::{Deserialize, Serialize};

use super::{LOG, PAGES};
use crate::{ACTUATORS, RANGE, WINDOW};

/// The whole state, in one item.
#[derive(Default, Serialize, Deserialize)]
struct Rec {
    setpoints: [i16; ACTUATORS],
    seen: heapless::Vec<u64, WINDOW>,
    rejected: u32,
    next: u64,
}

impl Value<'_> for Rec {
    fn serialize_into(&self, buffer: &mut [u8]) -> Result<usize, SerializationError> {
        let used =
            postcard::to_slice(self, buffer).map_err(|_| SerializationError::BufferTooSmall)?;
        Ok(used.len())
    }
    fn deserialize_from(buffer: &[u8]) -> Result<(Self, usize), SerializationError> {
        let (rec, rest) =
            postcard::take_from_bytes(buffer).map_err(|_| SerializationError::InvalidFormat)?;
        Ok((rec, buffer.len() - rest.len()))
    }
}

/// Recovers the table from the [`PAGES`] pages of `flash` from page `first` on and applies
/// the rest of [`LOG`]: the setpoints, or `None` when the map or the flash failed.
pub fn run<F: NorFlash>(flash: F, first: u32) -> Option<[i16; ACTUATORS]> {
    let page = F::ERASE_SIZE as u32;
    let range = MapConfig::new(first * page..(first + PAGES) * page);
    let mut map =
        MapStorage::<u8, _, _>::new(BlockingAsync::new(flash), range, Cache::new_uncached());
    let mut buf = [0u8; 256];
    block_on(async {
        let mut rec = map
            .fetch_item::<Rec>(&mut buf, &0)
            .await
            .ok()?
            .unwrap_or_default();
        while let Some(e) = LOG.get(rec.next as usize) {
            let c = e.payload;
            rec.next += 1;
            if rec.seen.contains(&c.id) {
                continue;
            }
            if rec.seen.is_full() {
                rec.seen.remove(0);
            }
            let _ = rec.seen.push(c.id);
            match usize::from(c.actuator) {
                a if a < ACTUATORS && RANGE.contains(&c.setpoint) => rec.setpoints[a] = c.setpoint,
                _ => rec.rejected += 1,
            }
            map.store_item(&mut buf, &0, &rec).await.ok()?;
        }
        Some(rec.setpoints)
    })
}
