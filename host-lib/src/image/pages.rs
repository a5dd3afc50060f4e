//! An image's flash seen with erase pages of `P` bytes, a whole number of the image's
//! own: a journal's erase size is its flash type's constant, and a file's page is the
//! image's choice. A journal on it enters a new page, with its erase and its header
//! (each needing a sync under `--sync checkpoint`), once every `P` bytes. A chip's page
//! is what it is; a file's is a choice, and a receiver that syncs once for a group of
//! records should not sync twice more every few records for a geometry it does not have
//! (an `mqtt consume` image has pages of [`super::MQTT_PAGE`] bytes, seen whole). An
//! erase of one page here erases (and counts) each of the image's pages in it.

use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};

use super::{FileFlash, FileFlashError, PAGE};

/// `flash` with erase pages of `P` bytes.
pub struct Pages<'a, const P: usize>(&'a mut FileFlash);

impl<'a, const P: usize> Pages<'a, P> {
    /// `flash` seen with pages of `P` bytes (a whole number of its own, or its erases
    /// fail as not aligned); its sync rules count a page header at the start of each.
    pub fn new(flash: &'a mut FileFlash) -> Self {
        const {
            assert!(
                P >= PAGE && P.is_multiple_of(PAGE),
                "whole pages of the image"
            )
        };
        flash.set_journal_page(P);
        Self(flash)
    }
}

impl<const P: usize> ErrorType for Pages<'_, P> {
    type Error = FileFlashError;
}

impl<const P: usize> ReadNorFlash for Pages<'_, P> {
    const READ_SIZE: usize = FileFlash::READ_SIZE;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.0.read(offset, bytes)
    }

    fn capacity(&self) -> usize {
        // Whole pages only: a tail shorter than `P` is not this flash's.
        self.0.capacity() / P * P
    }
}

impl<const P: usize> NorFlash for Pages<'_, P> {
    const WRITE_SIZE: usize = FileFlash::WRITE_SIZE;
    const ERASE_SIZE: usize = P;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        if !(from as usize).is_multiple_of(P) || !(to as usize).is_multiple_of(P) {
            return Err(FileFlashError::NotAligned);
        }
        if to as usize > self.capacity() {
            return Err(FileFlashError::OutOfBounds);
        }
        // One erase of the range: at most one sync before it.
        self.0.erase(from, to)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.0.write(offset, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{Image, Meta, SyncMode};
    use idem_core::journal::{Journal, Region};

    /// A journal of 32-byte records (36-byte slots) on 3 pages of 8 KiB: entering a page costs one sync
    /// before its erase and one after its header, every 8 KiB rather than every 1 KiB.
    #[test]
    fn a_journal_on_larger_pages_syncs_for_a_page_once_every_p_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta {
            scenario: "kafka:pages".into(),
            store: "naive".into(),
            events: 0,
            checkpoint_every: 0,
            window: 32,
            pages: 24,
            mqtt: None,
        };
        let mut image = Image::open_or_create(&dir.path().join("p.img"), &meta).unwrap();
        let journal = 0..24 * 1024;
        image.flash.set_sync(SyncMode::Checkpoint, vec![journal]);
        let region = Region { start: 0, pages: 3 };
        let (mut j, _) =
            Journal::<[u8; 32]>::open(&mut Pages::<8192>::new(&mut image.flash), region, 7)
                .unwrap();
        assert_eq!(j.slots_per_page(), (8192 - 20) / 36);
        // A record at its encoded size (journal format 3): its length byte and 32 bytes
        // in 9 words, then the check word: 40 bytes, 204 a page.
        let slots = (8192 - 20) / Journal::<[u8; 32]>::LARGEST as u32;
        assert_eq!(slots, 204);
        // Twice round the ring, the caller syncing after every 7th record (a group; no
        // page boundary falls on a group's end, so each erase finds records unsynced).
        for n in 0..6 * slots {
            j.append(&mut Pages::<8192>::new(&mut image.flash), &[n as u8; 32])
                .unwrap();
            if n % 7 == 6 {
                image.flash.sync().unwrap();
            }
        }
        // 6 pages entered: a header sync each, and an erase sync for each after the
        // first (the blank image's first erase finds nothing written); and one a group.
        let groups = u64::from(6 * slots / 7);
        assert_eq!(image.flash.syncs(), 6 + 5 + groups);
        assert_eq!(image.flash.erase_counts(), &[2; 24][..]);
    }
}
