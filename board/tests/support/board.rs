//! The board's flash as the feed's tests model it: the nRF51's 1 KiB pages, the feed's
//! region from address 0 (shared by `feed_link.rs` and `timing.rs`).

use idem_board::feed::{FEED_PAGES, FeedLayout};
use idem_sim::flash::MemFlash;

/// The nRF51's page.
pub const PAGE: usize = 1024;
/// The feed's pages of flash.
pub type Flash = MemFlash<{ FEED_PAGES as usize }, PAGE>;
/// The feed's region on it.
pub const LAYOUT: FeedLayout = FeedLayout {
    start: 0,
    page: PAGE as u32,
};
