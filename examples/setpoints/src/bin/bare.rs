//! The runtime alone (cortex-m-rt, panic-halt, the vector table): what the other two
//! binaries' sizes are counted over (BENCHMARKS.md, "An adopter's store").
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use panic_halt as _;

#[entry]
fn main() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}
