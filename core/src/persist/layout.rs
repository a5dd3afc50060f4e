//! Where a consumer keeps its journals, and the tags that mark them as its own.

use super::*;

/// Where a consumer keeps its journals, and the tag that marks them as this
/// application's (a different tag, or another store, is refused as foreign).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The consumer's position journal (unused by a [`Checkpoint`] store).
    pub positions: Region,
    /// The store's journal ([`Pair`] splits it in two halves, one per sink).
    pub sink: Region,
    /// Mixed into every journal's tag: an application, scenario or image id.
    pub tag: u32,
}

impl Layout {
    crate::io::doors! { const in Self;
        /// Both journals side by side from page `first` of the flash `F`: `positions` pages
        /// for the position journal, then `sink` pages for the store's (at least 2 each; a
        /// [`Pair`] needs 4 for its sink, 2 per half). Made from page numbers and
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
        /// state carries its own position ([`Checkpoint`], the atomic checkpoint): 2 pages
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

const POSITIONS_TAG: u32 = 0x5001_0000;

/// The tag of the position journal of a consumer laid out by `layout`.
pub const fn positions_tag(layout: &Layout) -> u32 {
    POSITIONS_TAG ^ layout.tag
}

/// The tag of the journal of store `S` laid out by `layout`.
pub const fn sink_tag<S: Store>(layout: &Layout) -> u32 {
    S::TAG ^ layout.tag
}
