//! A board's storage, for each of its images (the [`crate::demo`] and the
//! [`crate::feed`]): a run of flash pages from a start, cut into journal regions, whose
//! first two pages hold the image's own record with its boot counter. A boot opens that
//! record first; storage another image wrote (its record's tag is not this image's) is
//! erased whole before anything is read from it, so a freshly flashed image starts
//! clean and a reset keeps its state.

use embedded_storage::nor_flash::NorFlash;
use idem_core::MaxSize;
use idem_core::journal::{Journal, JournalError, Region};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where a board's journals live: the storage's first byte and the flash's page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoardLayout {
    /// First byte of the storage (page-aligned).
    pub start: u32,
    /// The flash page size.
    pub page: u32,
}

/// Pages of the storage that the image's own record takes, from its first page.
pub const RECORD_PAGES: u32 = 2;

impl BoardLayout {
    /// `pages` pages from page `first` of the storage.
    pub const fn pages(&self, first: u32, pages: u32) -> Region {
        Region {
            start: self.start + first * self.page,
            pages,
        }
    }
}

/// An image's own record: it counts the boots of its storage.
pub trait CountsBoots: Serialize + DeserializeOwned + MaxSize {
    /// Counts one more boot.
    fn count_boot(&mut self);
}

/// An image's record journal and its newest record, as [`open`] finds them.
pub type Opened<R> = (Journal<R>, Option<R>);

/// Opens the record journal of the image whose record is tagged `tag`, in the storage
/// of `pages` pages at `layout`: storage another image wrote is erased whole first.
/// Returns the journal and its newest record (`None`: a storage never booted); the
/// caller counts the boot ([`CountsBoots::count_boot`]) and appends the record before it
/// reads anything else.
pub fn open<R, F>(
    flash: &mut F,
    layout: BoardLayout,
    pages: u32,
    tag: u32,
) -> Result<Opened<R>, JournalError<F::Error>>
where
    R: CountsBoots,
    F: NorFlash,
{
    let region = layout.pages(0, RECORD_PAGES);
    match Journal::<R>::open(flash, region, tag) {
        Err(JournalError::Foreign { .. }) => {
            let end = layout.start + pages * layout.page;
            flash
                .erase(layout.start, end)
                .map_err(JournalError::Flash)?;
            Journal::open(flash, region, tag)
        }
        other => other,
    }
}
