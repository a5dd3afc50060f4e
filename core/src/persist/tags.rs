//! The tags that mark a consumer's journals as its own (where they lie is [`Layout`]).

use super::*;

const POSITIONS_TAG: u32 = 0x5001_0000;

/// The tag of the position journal of a consumer laid out by `layout`.
pub const fn positions_tag(layout: &Layout) -> u32 {
    POSITIONS_TAG ^ layout.tag
}

/// The tag of the journal of store `S` laid out by `layout`.
pub const fn sink_tag<S: Store>(layout: &Layout) -> u32 {
    S::TAG ^ layout.tag
}
