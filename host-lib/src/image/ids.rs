//! The log of applied ids an `mqtt consume` image keeps in its own file, after its flash:
//! lines of text (what they say is the command's), then zeros. It is written ahead in
//! steps of [`IDS_STEP`] bytes of zeros, so that a sync of new lines rarely has a file
//! size to make durable with them; a line goes to the file before any flash write that
//! follows it (`FileFlash::write_through` writes the lines first), and the image's one
//! sync makes both durable. It does not decide anything: the receiver's record does.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::IDS_STEP;

/// The log's place in the file, and the lines not yet written there.
#[derive(Debug)]
pub(super) struct IdsArea {
    /// Where it starts in the file.
    at: u64,
    /// Its bytes in the file, lines and zeros.
    len: u64,
    /// Bytes of lines in the file.
    used: u64,
    /// Lines pushed and not yet in the file.
    pending: Vec<u8>,
}

impl IdsArea {
    /// The log from byte `at` of the file, `len` bytes long; its lines are read and kept
    /// with [`IdsArea::keep`].
    pub(super) fn new(at: u64, len: u64) -> Self {
        Self {
            at,
            len,
            used: 0,
            pending: Vec::new(),
        }
    }

    /// The log's bytes as the file holds them.
    pub(super) fn read(&self, file: &File) -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0; self.len as usize];
        file.read_exact_at(&mut bytes, self.at)?;
        Ok(bytes)
    }

    /// Keeps the first `kept` bytes of `bytes` (the log as read) and zeroes what follows
    /// them up to the last byte that is not zero; whether it zeroed anything (the caller
    /// makes that durable before any new line can take the place of a dropped one).
    pub(super) fn keep(&mut self, file: &File, bytes: &[u8], kept: u64) -> std::io::Result<bool> {
        self.used = kept;
        let end = bytes
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |i| i as u64 + 1);
        if end <= kept {
            return Ok(false);
        }
        file.write_all_at(&vec![0; (end - kept) as usize], self.at + kept)?;
        Ok(true)
    }

    /// Adds `line`, in memory until the next [`IdsArea::write_through`]; when the log's
    /// room would not hold it, the file grows first by a step of zeros (a full disk
    /// fails here, before anything of the line's group is written). The bytes the
    /// growth wrote.
    pub(super) fn push(&mut self, file: &File, line: &[u8]) -> std::io::Result<u64> {
        let need = self.used + (self.pending.len() + line.len()) as u64;
        let mut grown = 0;
        while need > self.len + grown {
            grown += IDS_STEP;
        }
        if grown > 0 {
            file.write_all_at(&vec![0; grown as usize], self.at + self.len)?;
            self.len += grown;
        }
        self.pending.extend_from_slice(line);
        Ok(grown)
    }

    /// Writes the lines pushed into the file, in one write; the bytes written.
    pub(super) fn write_through(&mut self, file: &File) -> std::io::Result<u64> {
        if self.pending.is_empty() {
            return Ok(0);
        }
        file.write_all_at(&self.pending, self.at + self.used)?;
        let n = self.pending.len() as u64;
        self.used += n;
        self.pending.clear();
        Ok(n)
    }
}
