//! The same setpoint table on sequential-storage 8.0.2's map, for the size comparison
//! (BENCHMARKS.md, "An adopter's store"): one item holds the setpoints, the window of the
//! last 16 command ids, the count of rejected commands and the next offset, stored after
//! each new command (a duplicate is skipped without a write), as idem's store writes one
//! record. sequential-storage is async-only: it
//! runs under `embassy_futures::block_on`, on the same RAM flash stand-in.
#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use embassy_futures::block_on;
use idem_example_setpoints::{ACTUATORS, Command, RANGE, WINDOW};
use panic_halt as _;
use sequential_storage::cache::Cache;
use sequential_storage::map::{MapConfig, MapStorage, SerializationError, Value};
use serde::{Deserialize, Serialize};

#[path = "../board/ram_flash.rs"]
mod ram_flash;
use ram_flash::{PAGE, PAGES, RamFlash};

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

#[entry]
fn main() -> ! {
    let flash = RamFlash([0xFF; PAGE * PAGES]);
    let range = const { MapConfig::new(0..(PAGE * PAGES) as u32) };
    let mut map = MapStorage::<u8, _, _>::new(flash, range, Cache::new_uncached());
    let commands: [Command; 4] = core::array::from_fn(|o| Command {
        id: black_box(o as u64 % 3),
        actuator: black_box(o as u8),
        setpoint: black_box(100 * o as i16),
    });
    let mut buf = [0u8; 256];
    block_on(async {
        let Ok(found) = map.fetch_item::<Rec>(&mut buf, &0).await else {
            panic!("the map is damaged");
        };
        let mut rec = found.unwrap_or_default();
        black_box(rec.setpoints); // re-assert at boot
        while let Some(c) = commands.get(rec.next as usize) {
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
            if map.store_item(&mut buf, &0, &rec).await.is_err() {
                panic!("the flash failed");
            }
            black_box(rec.setpoints);
        }
    });
    loop {
        cortex_m::asm::wfi();
    }
}
