//! When a flash kept in a file must be synced. A host writes an image through the page
//! cache: a write is visible at once but durable only once synced, and a power cut or a
//! kernel crash keeps any subset of the unsynced writes, in any order, one possibly torn
//! (`sim/tests/page_cache.rs` models exactly that, with these rules). The host adapts
//! them to its file (`sync_data`); the rules are the journal's and the stores' business,
//! so they live here.
//!
//! Under [`SyncMode::Checkpoint`], a sync comes:
//! - before a position commit when store records were written since the last sync (they
//!   are durable first), and after it (the host syncs before it reports the commit);
//! - before a page erase (records written since are durable before older ones go);
//! - after a page header (durable before any record in the page);
//! - for an appending store ([`idem_core::persist::Appended`]), before each new record (its
//!   state is rebuilt from several records, which must land in order), but not before
//!   the record's own CRC word.

use idem_core::journal::HEADER_SIZE;

/// When writes are synced (`--sync` on the command line).
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Around position commits, page erases and page headers, and before each record of
    /// an appending store (message-id, producer-seq): survives a power cut.
    #[default]
    Checkpoint,
    /// After every journal write and erase.
    EveryWrite,
    /// Never: survives a killed process, not a power cut. For experiments.
    None,
}

impl SyncMode {
    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Checkpoint => "checkpoint",
            Self::EveryWrite => "every-write",
            Self::None => "none",
        }
    }
}

/// Which journal a write or an erase touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// The consumer's position journal.
    Position,
    /// The journal of a store whose records must land in order
    /// ([`idem_core::persist::Persistence::ORDERED`]).
    OrderedStore,
    /// Any other store journal.
    Store,
}

/// The rules of one flash, and what was written since its last sync.
#[derive(Debug, Clone, Default)]
pub struct SyncRules {
    mode: SyncMode,
    /// Anything written since the last sync.
    dirty: bool,
    /// Anything written outside the position journal since the last sync.
    store_dirty: bool,
    /// Where the last write into an ordered store journal ended: a 4-byte write there is
    /// that record's CRC word, any other write a new record.
    ordered_end: Option<u32>,
}

impl SyncRules {
    /// Rules for `mode`, with nothing written yet.
    pub const fn new(mode: SyncMode) -> Self {
        Self {
            mode,
            dirty: false,
            store_dirty: false,
            ordered_end: None,
        }
    }

    /// The mode.
    pub const fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Whether to sync before writing `len` bytes at `offset` in `area`.
    pub fn before_write(&self, area: Area, offset: u32, len: usize) -> bool {
        let crc_word = len == 4 && self.ordered_end == Some(offset);
        let waits = match area {
            Area::Position => true,
            Area::OrderedStore => !crc_word,
            Area::Store => false,
        };
        self.mode == SyncMode::Checkpoint && waits && self.store_dirty
    }

    /// Records a write of `len` bytes at `offset` in `area`, on pages of `page` bytes;
    /// whether to sync now.
    pub fn after_write(&mut self, area: Area, offset: u32, len: usize, page: usize) -> bool {
        self.dirty = true;
        self.store_dirty |= area != Area::Position;
        self.ordered_end = (area == Area::OrderedStore).then(|| offset + len as u32);
        let header_done = (offset as usize + len) % page == HEADER_SIZE;
        match self.mode {
            SyncMode::Checkpoint => header_done,
            SyncMode::EveryWrite => true,
            SyncMode::None => false,
        }
    }

    /// Whether to sync before an erase.
    pub fn before_erase(&self) -> bool {
        self.mode == SyncMode::Checkpoint && self.dirty
    }

    /// Records an erase in `area`; whether to sync now.
    pub fn after_erase(&mut self, area: Area) -> bool {
        self.dirty = true;
        self.store_dirty |= area != Area::Position;
        self.mode == SyncMode::EveryWrite
    }

    /// Whether a sync now has anything to make durable (never under [`SyncMode::None`]).
    /// A host asks after each position commit, before it reports it.
    pub fn pending(&self) -> bool {
        self.dirty && self.mode != SyncMode::None
    }

    /// Records that everything written is durable.
    pub fn synced(&mut self) {
        self.dirty = false;
        self.store_dirty = false;
    }
}
