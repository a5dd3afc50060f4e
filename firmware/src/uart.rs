//! UART0, by register (the board support crate's UART hangs under QEMU: it writes TXD
//! before ENABLE). 115200 baud, 8N1, no flow control (the micro:bit's USB bridge wires
//! none); micro:bit v1 TX is P0.24 and RX P0.25, v2 TX is P0.06 and RX P1.08. The
//! receiver holds 6 bytes in hardware; what arrives while they are not read is lost.

use core::ptr;

const UART0: usize = 0x4000_2000;
const STARTRX: usize = UART0; // offset 0x000
const STARTTX: usize = UART0 + 0x008;
const EVENTS_RXDRDY: usize = UART0 + 0x108;
const PSELRXD: usize = UART0 + 0x514;
const RXD: usize = UART0 + 0x518;
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
#[cfg(not(feature = "v2"))]
const RX_PIN: u32 = 25;
/// P1.08: port 1 is bit 5 of the pin select.
#[cfg(feature = "v2")]
const RX_PIN: u32 = (1 << 5) | 8;

/// UART0, enabled; the transmitter started (the receiver when asked).
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

impl Uart {
    /// Routes RX to the board's pin and starts the receiver (the pin is selected while
    /// UART0 is disabled, as the reference manual asks, then both directions restart).
    pub fn start_rx(&mut self) {
        write_reg(ENABLE, 0);
        write_reg(PSELRXD, RX_PIN);
        write_reg(ENABLE, 4);
        write_reg(STARTTX, 1);
        write_reg(STARTRX, 1);
    }

    /// The next received byte, if one is waiting.
    pub fn read(&mut self) -> Option<u8> {
        // SAFETY: EVENTS_RXDRDY is UART0's receive-ready event register.
        if unsafe { ptr::read_volatile(EVENTS_RXDRDY as *const u32) } == 0 {
            return None;
        }
        // The event first, then RXD: reading RXD takes the next byte from the FIFO, which
        // raises the event again.
        write_reg(EVENTS_RXDRDY, 0);
        // SAFETY: RXD is UART0's receive register; reading it pops one byte.
        Some(unsafe { ptr::read_volatile(RXD as *const u32) } as u8)
    }
}
