//! Frames from a device to the host: what the firmware prints on its UART and the host's
//! `idem monitor` reads back.
//!
//! A frame is the postcard encoding of a [`Frame`] followed by its CRC-32, COBS-encoded
//! and ended by a `0x00` byte. COBS keeps `0x00` out of the body, so a reader that starts
//! mid-stream, or meets garbage, resynchronises at the next `0x00`; the CRC rejects a
//! frame damaged on the line. [`Decoder`] counts what it had to skip.

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

/// The three sinks of the demo device, side by side.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct Totals {
    /// `total += 1`.
    pub naive: i64,
    /// Offset-stamped.
    pub offset: i64,
    /// Atomic checkpoint (as of its last checkpoint, plus effects in RAM).
    pub atomic: i64,
}

/// One message from the device.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub enum Frame {
    /// The device booted and recovered from flash.
    Boot {
        /// How many times it has booted since its storage was formatted (this one included).
        boots: u32,
        /// Where the consumer shared by the naive and offset sinks resumes.
        resume: u64,
        /// Where the atomic sink's consumer resumes.
        resume_atomic: u64,
        /// The sinks' totals as recovered.
        totals: Totals,
    },
    /// An event was applied (by whichever consumers had it next).
    Progress {
        /// The offset.
        offset: u64,
        /// The sinks' totals after it.
        totals: Totals,
    },
    /// Every consumer reached the end of the log.
    Done {
        /// Boots so far.
        boots: u32,
        /// The final totals.
        totals: Totals,
        /// What an exact sink ends at.
        true_total: i64,
    },
    /// Device statistics (not part of the run's story).
    Stats {
        /// The most stack the firmware has used, in bytes.
        stack_bytes: u32,
    },
}

/// Bytes of the longest encoded frame, delimiter included.
pub const MAX_ENCODED: usize = encoded_len(Frame::POSTCARD_MAX_SIZE);

const CRC: crc::Crc<u32, crc::NoTable> = crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISO_HDLC);

/// What the decoder skipped or could not read.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A frame longer than any valid one: skipped to the next delimiter.
    TooLong,
    /// Not valid COBS.
    Cobs,
    /// The CRC did not match: damaged on the line.
    Crc,
    /// The CRC matched but the body is not a frame.
    Decode,
    /// The output buffer is too small.
    Encode,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::TooLong => "a frame longer than any valid one",
            Self::Cobs => "a frame that is not valid COBS",
            Self::Crc => "a frame whose CRC does not match",
            Self::Decode => "a frame that does not decode",
            Self::Encode => "the frame does not fit the buffer",
        })
    }
}

impl core::error::Error for WireError {}

/// Bytes of the longest encoded message whose postcard body is at most `max_body` bytes:
/// the CRC, COBS's overhead and the delimiter.
pub const fn encoded_len(max_body: usize) -> usize {
    (max_body + 4) * 255 / 254 + 3
}

/// Encodes any message as a frame into `out`: postcard into `scratch` (at least the
/// body's size plus 4 for the CRC), then COBS and the `0x00` delimiter. Returns the bytes.
pub fn encode_with<'a, T: Serialize>(
    msg: &T,
    scratch: &mut [u8],
    out: &'a mut [u8],
) -> Result<&'a [u8], WireError> {
    encode_in(msg, &[], scratch, out)
}

/// [`encode_with`] for a protocol of its own: the CRC covers `domain` before the body,
/// so a frame of another protocol (another domain) fails the CRC instead of decoding as
/// a message it is not (postcard is not self-describing).
pub fn encode_in<'a, T: Serialize>(
    msg: &T,
    domain: &[u8],
    scratch: &mut [u8],
    out: &'a mut [u8],
) -> Result<&'a [u8], WireError> {
    let room = scratch.len().checked_sub(4).ok_or(WireError::Encode)?;
    let n = postcard::to_slice(msg, &mut scratch[..room])
        .map_err(|_| WireError::Encode)?
        .len();
    let crc = checksum(domain, &scratch[..n]);
    scratch[n..n + 4].copy_from_slice(&crc.to_le_bytes());
    let last = out.len().checked_sub(1).ok_or(WireError::Encode)?;
    let len =
        cobs::try_encode(&scratch[..n + 4], &mut out[..last]).map_err(|_| WireError::Encode)?;
    out[len] = 0;
    Ok(&out[..=len])
}

fn checksum(domain: &[u8], body: &[u8]) -> u32 {
    let mut d = CRC.digest();
    d.update(domain);
    d.update(body);
    d.finalize()
}

/// Encodes `frame` into `out`: COBS bytes and the `0x00` delimiter. Returns them.
pub fn encode<'a>(frame: &Frame, out: &'a mut [u8; MAX_ENCODED]) -> Result<&'a [u8], WireError> {
    let mut raw = [0u8; Frame::POSTCARD_MAX_SIZE + 4];
    encode_with(frame, &mut raw, out)
}

/// Reassembles messages of type `T` from a byte stream, in a buffer of `N` bytes (at
/// least [`encoded_len`] of `T`'s largest body).
#[derive(Debug, Clone)]
pub struct Reader<T, const N: usize> {
    buf: [u8; N],
    len: usize,
    overflowed: bool,
    /// Frames that could not be read and were skipped.
    pub skipped: u32,
    domain: &'static [u8],
    _message: core::marker::PhantomData<fn() -> T>,
}

/// Reassembles the device's [`Frame`]s.
pub type Decoder = Reader<Frame, MAX_ENCODED>;

impl<T: serde::de::DeserializeOwned, const N: usize> Default for Reader<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: serde::de::DeserializeOwned, const N: usize> Reader<T, N> {
    /// A reader waiting for the first delimiter-terminated frame.
    pub const fn new() -> Self {
        Self::in_domain(&[])
    }

    /// A reader of frames encoded with [`encode_in`] in `domain`.
    pub const fn in_domain(domain: &'static [u8]) -> Self {
        Self {
            buf: [0; N],
            len: 0,
            overflowed: false,
            skipped: 0,
            domain,
            _message: core::marker::PhantomData,
        }
    }

    /// Feeds one byte; a message (or why one was skipped) when a delimiter ends it.
    pub fn push(&mut self, byte: u8) -> Option<Result<T, WireError>> {
        if byte != 0 {
            if self.len < self.buf.len() {
                self.buf[self.len] = byte;
                self.len += 1;
            } else {
                self.overflowed = true;
            }
            return None;
        }
        let (len, overflowed) = (self.len, self.overflowed);
        self.len = 0;
        self.overflowed = false;
        if len == 0 {
            return None; // an empty frame: delimiters in a row
        }
        let result = if overflowed {
            Err(WireError::TooLong)
        } else {
            Self::read(self.domain, &mut self.buf[..len])
        };
        if result.is_err() {
            self.skipped += 1;
        }
        Some(result)
    }

    /// Forgets a partly received frame (after a silence: what came before it is stale).
    pub fn reset(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn read(domain: &[u8], bytes: &mut [u8]) -> Result<T, WireError> {
        let n = cobs::decode_in_place(bytes).map_err(|_| WireError::Cobs)?;
        if n < 4 {
            return Err(WireError::Crc);
        }
        let (body, crc) = bytes[..n].split_at(n - 4);
        if checksum(domain, body).to_le_bytes() != *crc {
            return Err(WireError::Crc);
        }
        postcard::from_bytes(body).map_err(|_| WireError::Decode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames() -> [Frame; 4] {
        let totals = Totals {
            naive: 110,
            offset: 100,
            atomic: -5,
        };
        [
            Frame::Boot {
                boots: 2,
                resume: 40,
                resume_atomic: 40,
                totals,
            },
            Frame::Progress {
                offset: u64::MAX,
                totals,
            },
            Frame::Done {
                boots: 2,
                totals,
                true_total: 100,
            },
            Frame::Stats { stack_bytes: 1234 },
        ]
    }

    #[test]
    fn frames_round_trip_through_garbage() {
        let mut stream = heapless::Vec::<u8, 512>::new();
        stream.extend_from_slice(&[0x13, 0x37, 0xFF]).unwrap(); // garbage before the first delimiter
        stream.push(0).unwrap();
        for f in frames() {
            let mut out = [0u8; MAX_ENCODED];
            let bytes = encode(&f, &mut out).unwrap();
            assert!(bytes[..bytes.len() - 1].iter().all(|&b| b != 0));
            stream.extend_from_slice(bytes).unwrap();
        }
        // A damaged frame: one bit flipped in the body.
        let mut out = [0u8; MAX_ENCODED];
        let mut bad: heapless::Vec<u8, MAX_ENCODED> =
            heapless::Vec::from_slice(encode(&frames()[0], &mut out).unwrap()).unwrap();
        bad[3] ^= 0x10;
        stream.extend_from_slice(&bad).unwrap();
        let mut d = Decoder::new();
        let mut got = heapless::Vec::<Frame, 8>::new();
        for &b in &stream {
            if let Some(Ok(f)) = d.push(b) {
                got.push(f).unwrap();
            }
        }
        assert_eq!(&got[..], &frames()[..]);
        assert_eq!(d.skipped, 2, "the garbage and the damaged frame");
    }

    #[test]
    fn an_endless_frame_is_skipped_not_buffered() {
        let mut d = Decoder::new();
        for _ in 0..10 * MAX_ENCODED {
            assert_eq!(d.push(7), None);
        }
        assert_eq!(d.push(0), Some(Err(WireError::TooLong)));
        assert_eq!(d.skipped, 1);
    }

    #[test]
    fn a_frame_of_another_protocol_fails_the_crc() {
        let mut out = [0u8; MAX_ENCODED];
        let demo = encode(&frames()[0], &mut out).unwrap();
        let mut feed = Reader::<Frame, MAX_ENCODED>::in_domain(b"idem-feed");
        let got: heapless::Vec<_, 2> = demo.iter().filter_map(|&b| feed.push(b)).collect();
        assert_eq!(&got[..], &[Err(WireError::Crc)]);
        let mut scratch = [0u8; Frame::POSTCARD_MAX_SIZE + 4];
        let mut out = [0u8; MAX_ENCODED];
        let own = encode_in(&frames()[0], b"idem-feed", &mut scratch, &mut out).unwrap();
        let got: heapless::Vec<_, 2> = own.iter().filter_map(|&b| feed.push(b)).collect();
        assert_eq!(&got[..], &[Ok(frames()[0])]);
    }
}
