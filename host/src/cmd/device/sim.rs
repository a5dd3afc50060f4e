//! `--port sim`: a board in this process. The board's own feed code (`idem_board::feed`'s
//! `Device`, what idem-feed runs) on a NOR flash in memory with the nRF51's 1 KiB pages,
//! behind a byte link: what the host sends is decoded and handled at once, and the
//! device's frames wait to be read. A planned crash reboots it from what its flash kept.
//! No line noise, no timing: the link model (`board/tests/feed_link.rs`) adds those.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use idem_board::feed::{
    DOMAIN, Device, DeviceReader, FEED_PAGES, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, FeedLayout,
    FromDevice, encode,
};
use idem_core::log::IdKey;
use idem_sim::flash::MemFlash;

/// The nRF51's page.
const PAGE: usize = 1024;
/// The feed's flash.
type Flash = MemFlash<{ FEED_PAGES as usize }, PAGE>;
/// The feed's region on it.
const LAYOUT: FeedLayout = FeedLayout {
    start: 0,
    page: PAGE as u32,
};
/// The RAM the device gives a consumer (idem-feed's `CONSUMER_RAM`).
const CONSUMER_RAM: usize = 1024;
/// The image's tag.
const TAG: u32 = 1;

/// A simulated board behind a byte link.
pub(super) struct SimBoard {
    flash: Box<Flash>,
    device: Device,
    reader: DeviceReader,
    out: VecDeque<u8>,
    /// The device failed: it sent why and answers nothing more, as the firmware halts.
    halted: bool,
}

fn new_key() -> Option<IdKey> {
    let mut key = [0u8; 16];
    getrandom::fill(&mut key).ok()?;
    Some(IdKey(key))
}

impl SimBoard {
    /// Boots a board on erased flash: its boot frame waits to be read.
    pub(super) fn boot() -> anyhow::Result<Self> {
        let mut flash = Box::new(Flash::new());
        let (device, boot) = Device::boot(&mut *flash, LAYOUT, TAG, CONSUMER_RAM, new_key)
            .map_err(|e| anyhow::anyhow!("booting the simulated board: {e:?}"))?;
        let mut board = Self {
            flash,
            device,
            reader: DeviceReader::in_domain(DOMAIN),
            out: VecDeque::new(),
            halted: false,
        };
        board.send(&boot)?;
        Ok(board)
    }

    fn send(&mut self, frame: &FromDevice) -> io::Result<()> {
        let mut scratch = [0u8; FROM_DEVICE_MAX + 4];
        let mut wire = [0u8; FROM_DEVICE_ENCODED];
        let bytes = encode(frame, &mut scratch, &mut wire)
            .map_err(|e| io::Error::other(format!("encoding a frame: {e}")))?;
        self.out.extend(bytes);
        Ok(())
    }

    /// Handles one byte from the host.
    fn hear(&mut self, b: u8) -> io::Result<()> {
        let msg = match self.reader.push(b) {
            None => return Ok(()),
            Some(Ok(msg)) => msg,
            Some(Err(_)) => {
                self.device.garbled += 1;
                return Ok(());
            }
        };
        match self.device.handle(&mut *self.flash, &msg) {
            Ok(reply) if reply.reset => {
                let (garbled, out_of_order) = (self.device.garbled, self.device.out_of_order);
                let (device, boot) =
                    Device::boot(&mut *self.flash, LAYOUT, TAG, CONSUMER_RAM, new_key)
                        .map_err(|e| io::Error::other(format!("rebooting: {e:?}")))?;
                self.device = device;
                (self.device.garbled, self.device.out_of_order) = (garbled, out_of_order);
                self.reader.reset();
                self.send(&boot)
            }
            Ok(reply) => reply.send.iter().try_for_each(|f| self.send(f)),
            Err(e) => {
                self.halted = true;
                self.send(&FromDevice::Failed(e.failure()))
            }
        }
    }
}

impl Read for SimBoard {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.out.is_empty() {
            // Nothing to say until the host speaks: as a quiet line's read times out.
            std::thread::sleep(std::time::Duration::from_millis(1));
            return Err(io::ErrorKind::TimedOut.into());
        }
        let n = buf.len().min(self.out.len());
        for (slot, b) in buf.iter_mut().zip(self.out.drain(..n)) {
            *slot = b;
        }
        Ok(n)
    }
}

impl Write for SimBoard {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.halted {
            for &b in buf {
                self.hear(b)?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
