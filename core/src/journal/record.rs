//! PROTOTYPE (not wired into `Ring`): format 3's records at their encoded size, on the
//! unit grid of a page's data area, and a model test of the power-cut rules a ring built
//! on them must keep.
//!
//! A page's data area (after its header) is `cells` units ("cells") of `unit` bytes. A
//! record takes `ext` whole cells from cell `c`:
//!
//! - the head word: `ext`, its complement, and `back` (the sequence distance to the
//!   record that was newest when this one was written, 0 for none), then the postcard
//!   payload, padded with `0xFF` to whole cells;
//! - the check cell, last: CRC-32C over the sequence number and every byte before it
//!   (never all ones), and on units of 8 bytes or more its complement.
//!
//! The sequence number is not stored: it is the page's first (in its header) plus `c`,
//! so a record is valid only where it was written, and sequence numbers run on by
//! `cells` a page, as format 2's ran on by slots. The head cell is written alone first,
//! then the rest of the payload's cells, then the check cell.
//!
//! What a cut can leave at the cursor, and how the scan and the writer step over it:
//! - nothing programmed: the cell reads blank, the next record goes there;
//! - the head torn: `ext` and its complement disagree (a torn unit keeps some of the bits
//!   it was to clear set, and a bit set in `ext` is one cleared in its complement, so
//!   they agree only once both are programmed); only that cell was programmed, and the
//!   scan and the writer step one cell;
//! - the head whole, the rest cut: the record's check fails, and both step `ext` cells,
//!   over any all-ones payload cell that was programmed and still reads blank (so it is
//!   never programmed twice).

use super::{ERASED_WORD, check_word, crc32c};

/// Bytes of the head word.
pub(crate) const HEAD: usize = 4;

/// A record's head word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    /// Cells the record takes, head and check included (2 or more).
    pub ext: u8,
    /// Sequence distance back to the record that was newest when this one was written
    /// (0: none; `u16::MAX`: that far or farther).
    pub back: u16,
}

impl Head {
    pub(crate) fn word(self) -> u32 {
        u32::from(self.ext) | u32::from(!self.ext) << 8 | u32::from(self.back) << 16
    }

    /// The head a word reads as, when `ext` and its complement agree.
    pub(crate) fn read(word: u32) -> Option<Self> {
        let ext = word as u8;
        ((word >> 8) as u8 == !ext && ext >= 2).then_some(Self {
            ext,
            back: (word >> 16) as u16,
        })
    }
}

/// Cells a record of `len` payload bytes takes on units of `unit` bytes.
pub(crate) const fn extent(len: usize, unit: usize) -> usize {
    (HEAD + len).div_ceil(unit) + 1
}

/// Writes the record (head, payload, padding, check cell) for sequence number `seq` into
/// `out`; returns its length in bytes.
pub(crate) fn encode(out: &mut [u8], seq: u32, back: u16, payload: &[u8], unit: usize) -> usize {
    let ext = extent(payload.len(), unit);
    let check_at = (ext - 1) * unit;
    out[..ext * unit].fill(0xFF);
    out[..HEAD].copy_from_slice(
        &Head {
            ext: ext as u8,
            back,
        }
        .word()
        .to_le_bytes(),
    );
    out[HEAD..HEAD + payload.len()].copy_from_slice(payload);
    let check = check_word(crc_over(seq, &out[..check_at]), 0);
    out[check_at..check_at + 4].copy_from_slice(&check.to_le_bytes());
    if unit >= 8 {
        out[check_at + 4..check_at + 8].copy_from_slice(&(!check).to_le_bytes());
    }
    ext * unit
}

fn crc_over(seq: u32, bytes: &[u8]) -> u32 {
    let mut buf = [0u8; 4 + 520];
    buf[..4].copy_from_slice(&seq.to_le_bytes());
    buf[4..4 + bytes.len()].copy_from_slice(bytes);
    crc32c(&buf[..4 + bytes.len()])
}

/// What the scan finds at a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The cell reads all ones.
    Blank,
    /// A valid record, with its head.
    Record(Head),
    /// A head that agrees but a record whose check fails (a write cut short after its
    /// head, or damage): stepped over whole.
    Torn(Head),
    /// Neither blank nor a head (a head cut short, or damage): one cell.
    Garbage,
}

impl Found {
    /// Cells the scan and the writer step over it.
    pub(crate) fn step(self) -> usize {
        match self {
            Self::Record(h) | Self::Torn(h) => usize::from(h.ext),
            Self::Blank | Self::Garbage => 1,
        }
    }
}

/// What cell `cell` of a page's data area `data` (`unit`-byte cells) holds, for a page
/// whose first sequence number is `base`.
pub(crate) fn at(data: &[u8], cell: usize, unit: usize, base: u32) -> Found {
    let cells = data.len() / unit;
    let head = &data[cell * unit..(cell + 1) * unit];
    if head.iter().all(|&b| b == 0xFF) {
        return Found::Blank;
    }
    let Some(h) = Head::read(u32::from_le_bytes([head[0], head[1], head[2], head[3]])) else {
        return Found::Garbage;
    };
    if cell + usize::from(h.ext) > cells {
        return Found::Garbage;
    }
    let bytes = &data[cell * unit..(cell + usize::from(h.ext)) * unit];
    let c = bytes.len() - unit;
    let check = u32::from_le_bytes([bytes[c], bytes[c + 1], bytes[c + 2], bytes[c + 3]]);
    let valid = check != ERASED_WORD
        && (unit < 8
            || u32::from_le_bytes([bytes[c + 4], bytes[c + 5], bytes[c + 6], bytes[c + 7]])
                == !check)
        && check == check_word(crc_over(base.wrapping_add(cell as u32), &bytes[..c]), 0);
    if valid {
        Found::Record(h)
    } else {
        Found::Torn(h)
    }
}

/// The cell at or after `from` where a record of `ext` cells can be written: the first
/// on the scan's steps whose `ext` cells all read blank; `None` when none is left.
pub(crate) fn place(data: &[u8], from: usize, ext: usize, unit: usize) -> Option<usize> {
    let cells = data.len() / unit;
    let mut c = from;
    while c + ext <= cells {
        if data[c * unit..(c + ext) * unit].iter().all(|&b| b == 0xFF) {
            return Some(c);
        }
        c += at(data, c, unit, 0).step();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng::SplitMix64;

    /// A page's data area, programmed unit by unit as NOR is: each cell once, a cut
    /// leaving the cell it falls on torn (some of its bits to clear still set, at least
    /// one cleared) or untouched, and every cell after it untouched.
    struct Page {
        data: Vec<u8>,
        programmed: Vec<bool>,
        unit: usize,
    }

    impl Page {
        fn new(cells: usize, unit: usize) -> Self {
            Self {
                data: vec![0xFF; cells * unit],
                programmed: vec![false; cells],
                unit,
            }
        }

        /// Programs `bytes` from cell `cell`; `cut` is the cell index within the write
        /// where power fails (torn or clean), if it does. Returns whether it completed.
        fn write(
            &mut self,
            cell: usize,
            bytes: &[u8],
            cut: Option<(usize, bool)>,
            rng: &mut SplitMix64,
        ) -> bool {
            for (i, chunk) in bytes.chunks(self.unit).enumerate() {
                let c = cell + i;
                assert!(!self.programmed[c], "cell {c} programmed twice");
                let to = &mut self.data[c * self.unit..(c + 1) * self.unit];
                if let Some((at, torn)) = cut
                    && at == i
                {
                    if torn {
                        // Clear a random nonempty subset of the bits to clear.
                        let mut cleared = false;
                        for (b, &t) in to.iter_mut().zip(chunk) {
                            let mask = !t & rng.next_u64() as u8;
                            cleared |= mask != 0;
                            *b &= !mask;
                        }
                        if !cleared
                            && let Some((b, &t)) =
                                to.iter_mut().zip(chunk).find(|(_, t)| **t != 0xFF)
                        {
                            *b &= !(!t & (!t).wrapping_neg());
                        }
                        self.programmed[c] = true;
                    }
                    return false;
                }
                to.copy_from_slice(chunk);
                self.programmed[c] = true;
            }
            true
        }
    }

    /// Appends records of random sizes and bytes (runs of 0xFF among them) to one page,
    /// cutting one append in three at a random unit, torn or clean, and after each cut
    /// "reboots": scans the page, finds the newest record and places the next after it.
    /// Never a cell programmed twice; the valid records are exactly the appends that
    /// completed, each at its sequence number, each `back` leading to the one before.
    fn model(unit: usize, cells: usize, seed: u64) -> (u32, u32) {
        let mut rng = SplitMix64::new(seed);
        let mut page = Page::new(cells, unit);
        let base = 1000u32;
        let mut done: Vec<(usize, Vec<u8>)> = Vec::new();
        let (mut cursor, mut cuts) = (0usize, 0u32);
        let mut buf = [0u8; 600];
        loop {
            let len = rng.range(0, 40) as usize;
            let payload: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.range(0, 3) == 0 {
                        0xFF
                    } else {
                        rng.next_u64() as u8
                    }
                })
                .collect();
            let ext = extent(len, unit);
            let Some(c) = place(&page.data, cursor, ext, unit) else {
                break;
            };
            let back = done.last().map_or(0, |(p, _)| (c - p) as u16);
            let n = encode(&mut buf, base + c as u32, back, &payload, unit);
            let cut = (rng.range(0, 2) == 0)
                .then(|| (rng.range(0, ext as u64 - 1) as usize, rng.range(0, 1) == 0));
            // The head cell alone, then the rest.
            let head_ok = page.write(c, &buf[..unit], cut.filter(|(i, _)| *i == 0), &mut rng);
            let ok = head_ok
                && page.write(
                    c + 1,
                    &buf[unit..n],
                    cut.filter(|(i, _)| *i > 0).map(|(i, t)| (i - 1, t)),
                    &mut rng,
                );
            if ok {
                done.push((c, payload));
                cursor = c + ext;
            } else {
                // A torn check cell can end with every bit it was to clear cleared: the
                // record is whole, and counts (its append was not acknowledged, but it
                // is a record written, never a fake one).
                if let Found::Record(_) = at(&page.data, c, unit, base) {
                    done.push((c, payload.clone()));
                }
                cuts += 1;
                // Reboot: the scan's newest valid record, the cursor after it.
                let mut c = 0;
                let mut newest = None;
                while c < cells {
                    let f = at(&page.data, c, unit, base);
                    if let Found::Record(h) = f {
                        newest = Some((c, h));
                    }
                    c += f.step();
                }
                cursor = newest.map_or(0, |(c, h)| c + usize::from(h.ext));
            }
        }
        // The scan finds exactly the completed records, in order, each linked back.
        let mut found = Vec::new();
        let mut c = 0;
        while c < cells {
            let f = at(&page.data, c, unit, base);
            if let Found::Record(h) = f {
                let payload = &page.data[c * unit + HEAD..c * unit + HEAD + found_len(&done, c)];
                found.push((c, payload.to_vec(), h.back));
            }
            c += f.step();
        }
        let expected: Vec<_> = done
            .iter()
            .enumerate()
            .map(|(i, (c, p))| {
                (
                    *c,
                    p.clone(),
                    if i == 0 {
                        0
                    } else {
                        (c - done[i - 1].0) as u16
                    },
                )
            })
            .collect();
        assert_eq!(found, expected, "unit {unit}, seed {seed}");
        (done.len() as u32, cuts)
    }

    fn found_len(done: &[(usize, Vec<u8>)], c: usize) -> usize {
        done.iter()
            .find(|(d, _)| *d == c)
            .map_or(0, |(_, p)| p.len())
    }

    #[test]
    fn cuts_never_program_a_cell_twice_nor_lose_or_fake_a_record() {
        let mut totals = Vec::new();
        for unit in [4, 8, 16, 32] {
            let (mut records, mut cuts) = (0, 0);
            for seed in 0..200 {
                let (r, c) = model(unit, 4076 / unit, seed);
                records += r;
                cuts += c;
            }
            totals.push((unit, records, cuts));
        }
        // Records written and cuts, over 200 page fills of 4,076 bytes a unit size.
        assert_eq!(
            totals,
            [
                (4, 19_232, 9_593),
                (8, 16_397, 8_165),
                (16, 12_577, 6_147),
                (32, 8_322, 4_058)
            ]
        );
    }
}
