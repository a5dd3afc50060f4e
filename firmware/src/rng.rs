//! The nRF RNG peripheral (nRF51 and nRF52833 alike, base `0x4000_D000`): the source of the
//! device's id key at the first boot of its storage. Bias correction (`CONFIG.DERCEN`) is
//! on, so each byte is uniform; the wait for each byte is bounded, and a generator that
//! never answers gives no key rather than a weak one.

use core::ptr;

const RNG: usize = 0x4000_D000;
const TASKS_START: usize = RNG;
const TASKS_STOP: usize = RNG + 0x004;
const EVENTS_VALRDY: usize = RNG + 0x100;
const CONFIG: usize = RNG + 0x504;
const VALUE: usize = RNG + 0x508;
/// CONFIG bit 0: bias correction.
const DERCEN: u32 = 1;

/// Polls of `EVENTS_VALRDY` before a byte is given up: a few hundred milliseconds at
/// 16 MHz, where a byte takes about 170 µs with bias correction.
const POLLS: u32 = 1_000_000;

/// Sixteen bytes from the RNG, or `None` if it stopped giving values.
pub fn key() -> Option<[u8; 16]> {
    // SAFETY: CONFIG and TASKS_START are the RNG's documented registers; enabling bias
    // correction and starting the generator touch nothing else.
    unsafe {
        ptr::write_volatile(CONFIG as *mut u32, DERCEN);
        ptr::write_volatile(TASKS_START as *mut u32, 1);
    }
    let mut key = [0u8; 16];
    for b in &mut key {
        let mut polls = POLLS;
        // SAFETY: EVENTS_VALRDY is the RNG's value-ready event register; reading it has
        // no side effect.
        while unsafe { ptr::read_volatile(EVENTS_VALRDY as *const u32) } == 0 {
            polls -= 1;
            if polls == 0 {
                return None;
            }
        }
        // SAFETY: clearing EVENTS_VALRDY arms the event for the next byte; VALUE holds
        // the byte the RNG generated last (read-only).
        unsafe {
            ptr::write_volatile(EVENTS_VALRDY as *mut u32, 0);
            *b = ptr::read_volatile(VALUE as *const u32) as u8;
        }
    }
    // SAFETY: TASKS_STOP stops the generator; nothing else uses it.
    unsafe { ptr::write_volatile(TASKS_STOP as *mut u32, 1) };
    Some(key)
}
