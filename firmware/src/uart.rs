//! UART0 transmit, by register (the board support crate's UART hangs under QEMU: it
//! writes TXD before ENABLE). 115200 baud, 8N1; micro:bit v1 TX is P0.24, v2 TX is P0.06.

use core::ptr;

const UART0: usize = 0x4000_2000;
const STARTTX: usize = UART0 + 0x008;
const EVENTS_TXDRDY: usize = UART0 + 0x11C;
const ENABLE: usize = UART0 + 0x500;
const PSELTXD: usize = UART0 + 0x50C;
const TXD: usize = UART0 + 0x51C;
const BAUDRATE: usize = UART0 + 0x524;
const BAUD_115200: u32 = 0x01D7_E000;

#[cfg(not(feature = "v2"))]
const TX_PIN: u32 = 24;
#[cfg(feature = "v2")]
const TX_PIN: u32 = 6;

/// The transmitter, enabled and started.
pub struct Uart(());

fn write_reg(addr: usize, value: u32) {
    // SAFETY: every address passed here is one of UART0's documented registers above, and
    // the values are the ones the reference manual lists for them.
    unsafe { ptr::write_volatile(addr as *mut u32, value) }
}

impl Uart {
    /// Routes TX to the board's pin, sets 115200 baud, enables UART0 and starts TX
    /// (enable first: QEMU drops what is written while UART0 is disabled).
    pub fn init() -> Self {
        write_reg(PSELTXD, TX_PIN);
        write_reg(BAUDRATE, BAUD_115200);
        write_reg(ENABLE, 4);
        write_reg(STARTTX, 1);
        Self(())
    }

    /// Sends `bytes`, one at a time, waiting for each to leave.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            write_reg(TXD, u32::from(b));
            // SAFETY: EVENTS_TXDRDY is UART0's transmit-ready event register.
            while unsafe { ptr::read_volatile(EVENTS_TXDRDY as *const u32) } == 0 {}
            write_reg(EVENTS_TXDRDY, 0);
        }
    }
}
