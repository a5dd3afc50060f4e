//! An image file's header: read and checked, and written when an image is made.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::*;

/// An image's header as read from its file.
pub(super) struct Header(pub(super) [u8; HEADER as usize]);

impl Header {
    /// The header of `file` (`len` bytes long), refused unless it is an idem header of
    /// this format with its checksum.
    pub(super) fn read(file: &File, len: u64, path: &Path) -> anyhow::Result<Self> {
        let name = path.display();
        let mut header = Self([0u8; HEADER as usize]);
        if len < HEADER || file.read_exact_at(&mut header.0, 0).is_err() || &header.0[..8] != MAGIC
        {
            return Err(usage(format!(
                "{name} is not an idem flash image (no idem header); it was left untouched"
            )));
        }
        match header.word(8) {
            // Format 4 differs only in an MQTT image (refused by `Image::open`).
            4 | VERSION => {}
            old @ 1..VERSION => {
                let lacking = if old < 3 {
                    "the image's own message-id key"
                } else {
                    "an MQTT session's fields and the marks of where its promise broke"
                };
                return Err(usage(format!(
                    "{name} was written by an older idem (image format {old}, without {lacking}; this one reads format {VERSION}): it was left untouched, start a new image"
                )));
            }
            other => {
                return Err(usage(format!(
                    "{name} has image format version {other}; this idem reads version {VERSION}; it was left untouched"
                )));
            }
        }
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&header.0[..HEADER_CRC_AT]);
        if crc != header.word(HEADER_CRC_AT) {
            return Err(usage(format!(
                "{name} has a damaged header (its checksum does not match); it was left untouched"
            )));
        }
        Ok(header)
    }

    /// The little-endian word at byte `i`.
    pub(super) fn word(&self, i: usize) -> u32 {
        u32::from_le_bytes([self.0[i], self.0[i + 1], self.0[i + 2], self.0[i + 3]])
    }

    /// The run the header describes, checked against the geometry it gives.
    pub(super) fn meta(&self, path: &Path) -> anyhow::Result<Meta> {
        let name = path.display();
        let meta_len = self.word(20) as usize;
        let meta: Meta = (meta_len <= META_MAX)
            .then(|| serde_json::from_slice(&self.0[META_AT..META_AT + meta_len]).ok())
            .flatten()
            .ok_or_else(|| {
                usage(format!(
                    "{name} has a damaged header; it was left untouched"
                ))
            })?;
        let (page, pages) = (self.word(12), self.word(16));
        if self.word(8) < VERSION && meta.has_ids() {
            return Err(usage(format!(
                "{name} was written by an older idem (image format {}, with its log of applied ids in a file of its own and pages of {PAGE} bytes; this one reads format {VERSION}, the log inside the image): it was left untouched, start a new image",
                self.word(8)
            )));
        }
        let need = meta.pages_needed().ok_or_else(|| {
            usage(format!(
                "{name} has a damaged header (its run would need {} pages; idem uses 2 to {MAX_PAGES}); it was left untouched",
                meta.pages
            ))
        })?;
        let want = meta.page();
        if page as usize != want || pages != need {
            return Err(usage(format!(
                "{name} has {pages} pages of {page} bytes, but {} needs {need} pages of {want} bytes; it was left untouched",
                meta.describe()
            )));
        }
        if meta.pages != pages {
            return Err(usage(format!(
                "{name} has a damaged header (it says both {pages} and {} pages); it was left untouched",
                meta.pages
            )));
        }
        Ok(meta)
    }
}

pub(super) fn create(path: &Path, meta: &Meta) -> anyhow::Result<()> {
    meta.fits()?;
    let json = serde_json::to_vec(meta)?;
    anyhow::ensure!(
        meta.pages_needed() == Some(meta.pages),
        "an image of {} cannot have {} pages: idem makes images of 2 to {MAX_PAGES} pages, {PAGES} for a scenario",
        meta.describe(),
        meta.pages
    );
    let mut key = [0u8; 16];
    getrandom::fill(&mut key).map_err(|e| {
        anyhow::anyhow!(
            "creating flash image {}: the operating system gave no random key ({e}); nothing was created",
            path.display()
        )
    })?;
    let mut header = vec![0u8; HEADER as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(meta.page() as u32).to_le_bytes());
    header[16..20].copy_from_slice(&meta.pages.to_le_bytes());
    header[20..24].copy_from_slice(&(json.len() as u32).to_le_bytes());
    header[META_AT..META_AT + json.len()].copy_from_slice(&json);
    header[KEY_AT..KEY_AT + 16].copy_from_slice(&key);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&header[..HEADER_CRC_AT]);
    header[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    let failed = |e: std::io::Error| {
        anyhow::anyhow!(
            "creating flash image {}: {e}; nothing was created",
            path.display()
        )
    };
    let mut tmp = crate::files::temporary_beside(path).map_err(failed)?;
    let ids = if meta.has_ids() { IDS_STEP as usize } else { 0 };
    write_new(tmp.file(), &header, meta.pages as usize * meta.page(), ids).map_err(failed)?;
    // Linked, never renamed over: of two processes creating one image, one creates it
    // and the other (finding the name taken) opens that one, and finds it locked,
    // instead of replacing the file under the first.
    tmp.persist_new(path).map(drop).map_err(failed)
}

/// Writes a new image into `f`: `header`, then `flash` bytes of erased flash, then `ids`
/// bytes of an empty log of ids (zeros), synced.
fn write_new(f: &mut File, header: &[u8], flash: usize, ids: usize) -> std::io::Result<()> {
    f.write_all(header)?;
    f.write_all(&vec![0xFF; flash])?;
    f.write_all(&vec![0; ids])?;
    f.sync_all()
}
