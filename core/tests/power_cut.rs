//! Power cuts in the middle of flash operations, on the strict in-memory flash.
//!
//! After every cut and recovery the journal must return the last acknowledged record or
//! the one in flight, never an older one and never garbage, and must never program a
//! write unit twice where the flash refuses it (the strict flash fails such an attempt,
//! and the test with it). Each journal test runs on three flashes of 1 KiB pages: a word
//! flash (4-byte writes, the micro:bit's nRF51 and nRF52), an 8-byte one (the STM32L4,
//! G0, G4, WB and U5, whose ECC allows one program per double-word) and a 32-byte one
//! (the STM32H7's flash word). The sweeps run again on each chip family's flash
//! (`idem_core::testing::chips`: its unit, page and rule on a second program), the
//! journal's and the consumer's (`power_cut/consumer.rs`), the H7's 128 KiB sectors on the
//! heap with a seeded sample of cuts.
//! Every journal case runs once over the blocking steps and once over the async ones. The
//! cut at every unit write and erase is the power-cut checker's
//! (`idem_core::testing::cuts`), in its four models. Counts are printed: run with
//! `--show-output` to see them.

/// The consumer's suite on each chip family's flash (blocking).
#[path = "power_cut/consumer.rs"]
mod consumer;

#[path = "support/offset_total.rs"]
mod offset_total;
use offset_total::OffsetTotal;

/// A journal just opened, and its newest record.
type Opened = (
    idem_core::journal::Journal<OffsetTotal>,
    Option<OffsetTotal>,
);

/// The cases on the blocking steps.
mod blocking {
    use super::Opened;
    use embedded_storage::nor_flash::NorFlash;

    fn open_j<Fl: NorFlash>(
        flash: &mut Fl,
        region: Region,
        tag: u32,
    ) -> Result<Opened, JournalError<Fl::Error>> {
        Journal::open(flash, region, tag)
    }

    fn append<Fl: NorFlash>(
        journal: &mut Journal<OffsetTotal>,
        flash: &mut Fl,
        record: &OffsetTotal,
    ) -> Result<(), JournalError<Fl::Error>> {
        journal.append(flash, record)
    }

    include!("power_cut/cases.rs");
}

/// The same cases on the async steps.
#[cfg(feature = "async")]
mod asynch {
    use super::Opened;
    use embassy_futures::block_on;
    use embedded_storage_async::nor_flash::NorFlash;

    fn open_j<Fl: NorFlash>(
        flash: &mut Fl,
        region: Region,
        tag: u32,
    ) -> Result<Opened, JournalError<Fl::Error>> {
        block_on(Journal::open_async(flash, region, tag))
    }

    fn append<Fl: NorFlash>(
        journal: &mut Journal<OffsetTotal>,
        flash: &mut Fl,
        record: &OffsetTotal,
    ) -> Result<(), JournalError<Fl::Error>> {
        block_on(journal.append_async(flash, record))
    }

    include!("power_cut/cases.rs");
}
