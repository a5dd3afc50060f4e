//! The setpoint table on an ESP32-C3: examples/setpoints' application
//! (`idem_example_setpoints::chip::run`) in the `setpoints` partition of its SPI flash
//! (partitions.csv: 4 sectors of 4 KiB from 0x110000, after the application's), through
//! esp-storage's blocking `FlashStorage` on esp-hal. Each read, write and erase goes
//! through the chip's ROM functions, which run with the flash cache off: nothing executes
//! from flash while they do, and there is no async flash on the C3 to yield during them.
#![no_std]
#![no_main]

use esp_hal::main;
use esp_println as _;
use esp_storage::FlashStorage;
use idem_example_setpoints::chip;

esp_bootloader_esp_idf::esp_app_desc!();

/// The first of the table's sectors: the `setpoints` partition at 0x110000.
const FIRST: u32 = 0x11_0000 / FlashStorage::SECTOR_SIZE;

const _: () = assert!(
    chip::fits::<FlashStorage<'static>>(),
    "idem's journals do not fit the ESP32-C3's SPI flash as esp-storage drives it (4-byte words, 4 KiB sectors)"
);

#[main]
fn main() -> ! {
    let p = esp_hal::init(esp_hal::Config::default());
    let flash = FlashStorage::new(p.FLASH);
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
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    defmt::error!("panic");
    loop {
        core::hint::spin_loop();
    }
}
