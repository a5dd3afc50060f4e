//! The setpoint table on a Raspberry Pi Pico: examples/setpoints' application
//! (`idem_example_setpoints::chip::run`) in the top 4 sectors of its 2 MiB QSPI flash,
//! through embassy-rp's blocking flash driver (1-byte writes padded to 256-byte page
//! programs, 4 KiB sector erases). While the flash erases or programs, execute-in-place
//! stops: the driver runs the operation from RAM with interrupts off and core 1 paused,
//! so the chip does nothing else for the length of a page program or a sector erase
//! (README.md, "What a reset costs").
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use defmt_rtt as _;
use embassy_rp::flash::{Blocking, ERASE_SIZE, Flash};
use idem_example_setpoints::chip;
use panic_probe as _;

/// The Pico's flash: 2 MiB.
const FLASH_SIZE: usize = 2 * 1024 * 1024;
/// The first of the table's sectors: flash offset 0x1FC000 (memory.x).
const FIRST: u32 = (FLASH_SIZE / ERASE_SIZE) as u32 - chip::PAGES;

type Pico = Flash<'static, embassy_rp::peripherals::FLASH, Blocking, FLASH_SIZE>;

// The journals' geometry rules on this flash, checked when the firmware is built.
const _: () = assert!(
    chip::fits::<Pico>(),
    "idem's journals do not fit the RP2040's QSPI flash as embassy-rp drives it (1-byte writes, 4 KiB sectors)"
);

#[entry]
fn main() -> ! {
    let p = embassy_rp::init(Default::default());
    let flash = Pico::new_blocking(p.FLASH);
    // The same application on sequential-storage's map (feature `map`), for its size.
    #[cfg(feature = "map")]
    let setpoints = chip::map::run(flash, FIRST);
    #[cfg(not(feature = "map"))]
    let setpoints = chip::run(&mut { flash }, FIRST).ok();
    match setpoints {
        Some(setpoints) => defmt::info!("drive the outputs: {}", setpoints),
        None => defmt::error!("the flash failed: the table stays as the last boot left it"),
    }
    loop {
        cortex_m::asm::wfi();
    }
}
