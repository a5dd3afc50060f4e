//! The flash driver and the runtime, with no storage code.
#![no_std]
#![no_main]

use panic_halt as _;

#[cortex_m_rt::entry]
fn main() -> ! {
    let mut flash = idem_size::RamFlash::new();
    idem_size::touch_driver(&mut flash);
    loop {
        cortex_m::asm::nop();
    }
}
