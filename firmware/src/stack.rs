//! The stack's high-water mark: paint the free RAM at boot, and later find how far the
//! stack has written into it.

use core::ptr;

const PAINT: u32 = 0xA5A5_A5A5;
/// Bytes below the current stack pointer left unpainted (the painting code's own frame).
const MARGIN: usize = 64;

unsafe extern "C" {
    /// End of the statics (start of free RAM), from cortex-m-rt's link.x.
    static mut __sheap: u32;
    /// Top of the stack, from cortex-m-rt's link.x.
    static _stack_start: u32;
}

fn bounds() -> (usize, usize) {
    (
        &raw const __sheap as usize,
        &raw const _stack_start as usize,
    )
}

/// Paints the free RAM between the statics and the current stack pointer.
pub fn paint() {
    let (low, _) = bounds();
    let sp = cortex_m::register::msp::read() as usize - MARGIN;
    let mut at = low;
    while at + 4 <= sp {
        // SAFETY: [low, sp) is RAM between the end of the statics and the live stack, not
        // used by anything yet at boot; the writes are word-aligned (link.x aligns __sheap).
        unsafe { ptr::write_volatile(at as *mut u32, PAINT) };
        at += 4;
    }
}

/// The most stack used since [`paint`], in bytes.
pub fn used() -> u32 {
    let (low, top) = bounds();
    let mut at = low;
    // SAFETY: reads of the painted region, word-aligned, inside RAM.
    while at < top && unsafe { ptr::read_volatile(at as *const u32) } == PAINT {
        at += 4;
    }
    (top - at) as u32
}
