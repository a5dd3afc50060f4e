//! What idem asks of a flash beyond `embedded-storage`'s `NorFlash`, and where its
//! journals lie on it: the unit it programs ([`write_unit`]), a run of whole pages
//! ([`Region`]), a consumer's two journals ([`Layout`]), and a flash that can program a
//! written unit once more, to zeros ([`ZeroOver`]). The floor under the journal, the
//! policies and the test flash: it imports nothing of idem's but the doors (`crate::io`).
//! Its items are named where they are used: `journal::{Region, ZeroOver, write_unit}`,
//! `persist::Layout`.

use embedded_storage::nor_flash::NorFlash;

/// The unit a journal programs on a flash that writes `write_size` bytes at a time: a
/// word, or the flash's own unit when it is larger. Each unit is programmed once between
/// two erases, as ECC flash requires (an STM32L4 writes 8-byte double-words, an STM32H7
/// 32-byte flash words), so the check word of a record, written last, gets a unit of its
/// own.
pub const fn write_unit(write_size: usize) -> usize {
    if write_size < 4 { 4 } else { write_size }
}

/// A run of whole flash pages given to one journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte address of the first page; a multiple of the page size.
    pub start: u32,
    /// How many pages; at least 2.
    pub pages: u32,
}

impl Region {
    crate::io::doors! { const in Self;
        /// The `pages` pages from page `first` on, in the pages of the flash `F`
        /// (`ERASE_SIZE` bytes each): a region made from page numbers, never from byte
        /// addresses worked out by hand.
        pub const fn of_pages | of_pages_async ("A firmware whose driver is async only \
            (embassy's) needs no blocking `NorFlash` to lay out its journals.")
            [F] flash F (first: u32, pages: u32) -> Self
            => Self { start: first * F::ERASE_SIZE as u32, pages };

        /// The `pages` pages right after this region, on the flash `F`.
        pub const fn next | next_async [F] flash F (&self, pages: u32) -> Self
            => Self { start: self.start + self.pages * F::ERASE_SIZE as u32, pages };

        /// The byte address just past the region's last page, on the flash `F`.
        pub const fn end | end_async [F] flash F (&self) -> u32
            => self.start + self.pages * F::ERASE_SIZE as u32;
    }
}

/// Where a consumer keeps its journals, and the tag that marks them as this
/// application's (a different tag, or another store, is refused as foreign).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The consumer's position journal (unused by a [`Checkpoint`](crate::persist::Checkpoint) store).
    pub positions: Region,
    /// The store's journal ([`Pair`](crate::persist::Pair) splits it in two halves, one per sink).
    pub sink: Region,
    /// Mixed into every journal's tag: an application, scenario or image id.
    pub tag: u32,
}

impl Layout {
    crate::io::doors! { const in Self;
        /// Both journals side by side from page `first` of the flash `F`: `positions` pages
        /// for the position journal, then `sink` pages for the store's (at least 2 each; a
        /// [`Pair`](crate::persist::Pair) needs 4 for its sink, 2 per half). Made from page numbers and
        /// `ERASE_SIZE`, never from byte addresses worked out by hand.
        ///
        /// An async-only driver (embassy's) has `Layout::from_pages_async` (feature `async`):
        ///
        /// ```
        /// # #[cfg(all(feature = "async", feature = "testing"))] {
        /// use idem_core::persist::Layout;
        /// use idem_core::testing::flash::MemFlash;
        ///
        /// type Flash = MemFlash<4, 4096>; // your async chip driver here
        /// let layout = Layout::from_pages_async::<Flash>(0, 2, 2, 0x0001);
        /// assert_eq!((layout.positions.start, layout.sink.start, layout.sink.pages), (0, 8192, 2));
        /// assert_eq!(layout, Layout::from_pages::<Flash>(0, 2, 2, 0x0001));
        /// # }
        /// ```
        pub const fn from_pages | from_pages_async [F] flash F
            (first: u32, positions: u32, sink: u32, tag: u32) -> Self
            => Self::side_by_side(F::ERASE_SIZE as u32, first, positions, sink, tag);

        /// One journal of `pages` pages from page `first` of the flash `F`, for a store whose
        /// state carries its own position ([`Checkpoint`](crate::persist::Checkpoint), the atomic checkpoint): 2 pages
        /// where two journals take 4. A store that needs the position journal refuses this
        /// layout at [`crate::consumer::Consumer::open`] (`JournalError::BadRegion`: its
        /// position region has no pages).
        pub const fn one_region | one_region_async [F] flash F
            (first: u32, pages: u32, tag: u32) -> Self
            => Self::alone(F::ERASE_SIZE as u32, first, pages, tag);
    }

    /// [`Layout::from_pages`] on pages of `erase` bytes.
    const fn side_by_side(erase: u32, first: u32, positions: u32, sink: u32, tag: u32) -> Self {
        let positions = Region {
            start: first * erase,
            pages: positions,
        };
        Self {
            positions,
            sink: Region {
                start: positions.start + positions.pages * erase,
                pages: sink,
            },
            tag,
        }
    }

    /// [`Layout::one_region`] on pages of `erase` bytes.
    const fn alone(erase: u32, first: u32, pages: u32, tag: u32) -> Self {
        let sink = Region {
            start: first * erase,
            pages,
        };
        Self {
            positions: Region {
                start: sink.start,
                pages: 0,
            },
            sink,
            tag,
        }
    }
}

/// A flash on which a write unit already programmed since its page's erase can be
/// programmed once more, to all zeros: NOR's AND, which the nRF51 and nRF52 allow (a word
/// may be written twice between erases) and a file image does. `embedded-storage`'s
/// `NorFlash` forbids a second write and its `MultiwriteNorFlash` allows any, so this is
/// the narrower promise [`Journal::void_after`](crate::journal::Journal::void_after) needs, spelt out. An ECC flash that
/// refuses a second program of a unit (an STM32H7) must not implement it.
pub trait ZeroOver: NorFlash {
    /// Programs the `len` bytes at `offset` (whole write units) to zero, whether or not
    /// they were programmed since the erase. A cut can leave some of their bits still set.
    fn zero_over(&mut self, offset: u32, len: usize) -> Result<(), Self::Error>;
}
