//! Pacing with TIMER0 (QEMU is not cycle-accurate: a busy loop would not keep time).

use core::ptr;

const TIMER0: usize = 0x4000_8000;
const TASKS_START: usize = TIMER0; // offset 0x000
const TASKS_STOP: usize = TIMER0 + 0x004;
const TASKS_CLEAR: usize = TIMER0 + 0x00C;
const EVENTS_COMPARE0: usize = TIMER0 + 0x140;
const MODE: usize = TIMER0 + 0x504;
const BITMODE: usize = TIMER0 + 0x508;
const PRESCALER: usize = TIMER0 + 0x510;
const CC0: usize = TIMER0 + 0x540;

fn write_reg(addr: usize, value: u32) {
    // SAFETY: every address passed here is one of TIMER0's documented registers above.
    unsafe { ptr::write_volatile(addr as *mut u32, value) }
}

/// TIMER0 as a 1 MHz, 32-bit timer.
pub struct Timer(());

impl Timer {
    /// Timer mode, 32 bits, 16 MHz / 2^4 = 1 MHz.
    pub fn init() -> Self {
        write_reg(MODE, 0);
        write_reg(BITMODE, 3);
        write_reg(PRESCALER, 4);
        Self(())
    }

    /// Waits `ms` milliseconds.
    pub fn delay_ms(&self, ms: u32) {
        self.start_ms(ms);
        while !self.expired() {}
        write_reg(TASKS_STOP, 1);
    }

    /// Starts a deadline `ms` milliseconds from now (replacing any earlier one).
    pub fn start_ms(&self, ms: u32) {
        write_reg(TASKS_STOP, 1);
        write_reg(TASKS_CLEAR, 1);
        write_reg(CC0, ms.saturating_mul(1000));
        write_reg(EVENTS_COMPARE0, 0);
        write_reg(TASKS_START, 1);
    }

    /// Whether the deadline of [`Timer::start_ms`] has passed.
    pub fn expired(&self) -> bool {
        // SAFETY: EVENTS_COMPARE0 is TIMER0's compare event register.
        unsafe { ptr::read_volatile(EVENTS_COMPARE0 as *const u32) != 0 }
    }
}
