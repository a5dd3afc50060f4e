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
//! - after a page header (durable before any record in the page).
//!
//! An appending store ([`idem_core::persist::Appended`]) rebuilds its state from several
//! records, which a cut can bring back with a hole among those written since the last
//! sync. Its records are not synced one by one: before recovery the host voids the ones
//! after such a hole ([`idem_core::persist::Sinks::void_in_doubt`]) and syncs the zeros,
//! and their effects are replayed from the durable position like any unwritten effect.

use idem_core::journal::HEADER_SIZE;

/// When writes are synced (`--sync` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Around position commits, page erases and page headers: survives a power cut.
    #[default]
    Checkpoint,
    /// After every journal write and erase.
    EveryWrite,
    /// Never: survives a killed process, not a power cut. For experiments.
    None,
}

impl SyncMode {
    /// Every mode, in the command line's order.
    pub const ALL: [SyncMode; 3] = [Self::Checkpoint, Self::EveryWrite, Self::None];

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
    /// A store's journal.
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
}

impl SyncRules {
    /// Rules for `mode`, with nothing written yet.
    pub const fn new(mode: SyncMode) -> Self {
        Self {
            mode,
            dirty: false,
            store_dirty: false,
        }
    }

    /// The mode.
    pub const fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Whether to sync before a write in `area`: before a position commit, when store
    /// records were written since the last sync.
    pub fn before_write(&self, area: Area) -> bool {
        self.mode == SyncMode::Checkpoint && area == Area::Position && self.store_dirty
    }

    /// Records a write of `len` bytes at `offset` in `area`, on pages of `page` bytes;
    /// whether to sync now.
    pub fn after_write(&mut self, area: Area, offset: u32, len: usize, page: usize) -> bool {
        self.dirty = true;
        self.store_dirty |= area != Area::Position;
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
