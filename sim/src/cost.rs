//! What a run's flash use costs on a real part: the nRF51's flash timing and endurance,
//! in one place. On a micro:bit the cost that matters is flash time and wear, not CPU.
//!
//! Sources: Nordic's nRF51 Series Reference Manual (NVMC) and the nRF51822 product
//! specification: a 4-byte word write takes at most about 46 µs and a 1 KiB page erase
//! about 22 ms; the SoftDevice documentation budgets 48 µs per word write, which is the
//! figure used here. A page is rated for 20,000 erase cycles.

use crate::run::FlashUse;

/// Time to program one 4-byte word, in µs.
pub const NRF51_WORD_WRITE_US: f64 = 48.0;
/// Time to erase one 1 KiB page, in µs.
pub const NRF51_PAGE_ERASE_US: f64 = 22_000.0;
/// Erase cycles a page is rated for.
pub const NRF51_ERASE_CYCLES: f64 = 20_000.0;
/// The pages of the partition a lifetime is counted for.
pub const LIFETIME_PAGES: f64 = 2.0;

/// A run's flash use per log event, and what it means on an nRF51.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlashCost {
    /// Bytes programmed per event.
    pub bytes_per_event: f64,
    /// Pages erased per event.
    pub erases_per_event: f64,
    /// Modeled nRF51 flash time per event, in µs: every word write and erase.
    pub nrf51_us_per_event: f64,
    /// Events a 2-page partition lasts before its pages reach their rated erase cycles
    /// (`None` when the run erased nothing).
    pub lifetime_events: Option<u64>,
}

impl FlashCost {
    /// The cost of `use_` spread over `events` log events (`None` for a run without
    /// events).
    pub fn of(use_: &FlashUse, events: u64) -> Option<Self> {
        if events == 0 {
            return None;
        }
        let n = events as f64;
        let bytes = use_.bytes_written as f64 / n;
        let erases = use_.erases as f64 / n;
        let us = (bytes / 4.0) * NRF51_WORD_WRITE_US + erases * NRF51_PAGE_ERASE_US;
        let lifetime =
            (use_.erases > 0).then(|| (LIFETIME_PAGES * NRF51_ERASE_CYCLES / erases) as u64);
        Some(Self {
            bytes_per_event: bytes,
            erases_per_event: erases,
            nrf51_us_per_event: us,
            lifetime_events: lifetime,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_id_figures_of_the_ddia_run() {
        // 36,216 bytes and 51 erases over 100 events: 15.6 ms an event, and a 2-page
        // partition lasts 78,431 events.
        let use_ = FlashUse {
            writes: 0,
            erases: 51,
            bytes_written: 36_216,
        };
        let c = FlashCost::of(&use_, 100).unwrap();
        assert_eq!(c.bytes_per_event, 362.16);
        assert_eq!(c.erases_per_event, 0.51);
        assert_eq!(c.nrf51_us_per_event, 15_565.92);
        assert_eq!(c.lifetime_events, Some(78_431));
        assert_eq!(FlashCost::of(&use_, 0), None);
        assert_eq!(
            FlashCost::of(&FlashUse::default(), 5)
                .unwrap()
                .lifetime_events,
            None
        );
    }
}
