//! idem's journal: recover, then commit (offset, total) records.
#![no_std]
#![no_main]

use core::hint::black_box;
use idem_core::journal::{Journal, Region};
use offset_total::OffsetTotal;
use panic_halt as _;

#[path = "../../../../core/tests/support/offset_total.rs"]
mod offset_total;

#[cortex_m_rt::entry]
fn main() -> ! {
    let mut flash = idem_size::RamFlash::new();
    idem_size::touch_driver(&mut flash);
    let region = Region { start: 0, pages: 4 };
    if let Ok((mut journal, newest)) = Journal::<OffsetTotal>::open(&mut flash, region, 1) {
        let mut rec = newest.unwrap_or_default();
        for _ in 0..black_box(1000u32) {
            rec.offset += 1;
            rec.total += 1;
            black_box(journal.append(&mut flash, &rec).is_ok());
        }
    }
    loop {
        cortex_m::asm::nop();
    }
}
