//! The benches' and the power-cut tests' record: (offset, total) in fixed-width
//! little-endian fields, 8 bytes of payload, so its slot is 12 bytes (payload, check
//! word). A fixture, not idem-core's API: included by `#[path]` where it is used.

/// A compact (offset, total) record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffsetTotal {
    /// Next offset to read.
    #[serde(with = "postcard::fixint::le")]
    pub offset: u32,
    /// The running total.
    #[serde(with = "postcard::fixint::le")]
    pub total: i32,
}

impl postcard::experimental::max_size::MaxSize for OffsetTotal {
    const POSTCARD_MAX_SIZE: usize = 8;
}
