//! The setpoint table on an STM32 whose flash is programmed under ECC, each unit once
//! between two erases: examples/setpoints' application (`idem_example_setpoints::chip::run`)
//! in the top 4 pages of the chip's flash, through embassy-stm32's blocking flash driver.
//! On the STM32L476 a unit is a 64-bit double word and a page 2 KiB; on the STM32H743 a
//! unit is a 256-bit flash word and a page a 128 KiB sector. idem's journals program each
//! unit once (a record's payload in whole units, its check word in a unit of its own), so
//! both meet the rule; a flash whose unit or page the journals cannot use stops the build
//! at the assertion below.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use defmt_rtt as _;
use embassy_stm32::flash::{Blocking, FLASH_SIZE, Flash, MAX_ERASE_SIZE};
use idem_example_setpoints::chip;
use panic_probe as _;

/// The first of the table's pages: the top 4 of the flash (memory-l476.x, memory-h743.x).
const FIRST: u32 = (FLASH_SIZE / MAX_ERASE_SIZE) as u32 - chip::PAGES;

#[cfg(feature = "l476")]
const _: () = assert!(
    chip::fits::<Flash<'static, Blocking>>(),
    "idem's journals do not fit the STM32L476's flash (64-bit double words under ECC, 2 KiB pages)"
);

#[cfg(feature = "h743")]
const _: () = assert!(
    chip::fits::<Flash<'static, Blocking>>(),
    "idem's journals do not fit the STM32H743's flash (256-bit flash words under ECC, 128 KiB sectors)"
);

#[entry]
fn main() -> ! {
    let p = embassy_stm32::init(Default::default());
    let flash = Flash::new_blocking(p.FLASH);
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
