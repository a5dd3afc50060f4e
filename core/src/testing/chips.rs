//! Each chip family's flash as the strict test flash: its write unit, its page (the unit
//! of an erase), and whether a unit may be programmed twice between erases
//! ([`Reprogram`]), as the HAL's driver declares them (`WRITE_SIZE`, `ERASE_SIZE`,
//! `MultiwriteNorFlash`), with a named constructor each, so a power-cut sweep runs on the
//! flash a firmware ships on.
//!
//! | family | flash | driver | unit | page | a unit programmed twice |
//! |---|---|---|---|---|---|
//! | nRF52840 | internal, NVMC | embassy-nrf 0.11 `Nvmc` | 4 B | 4 KiB | allowed ([`Reprogram::Any`], unbounded here; Nordic bounds the writes of a word between erases by nWRITE, whose nRF52840 figure was not read) |
//! | RP2040 | W25Q16JV, QSPI NOR | embassy-rp 0.10 `Flash` | 1 B | 4 KiB sector | allowed (bits only clear) |
//! | STM32L476 | internal, ECC | embassy-stm32 0.6 `Flash` | 8 B double word | 2 KiB | refused ([`Reprogram::Never`]) |
//! | STM32H743 | internal, ECC | embassy-stm32 0.6 `Flash` | 32 B flash word | 128 KiB sector | refused |
//! | ESP32-C3 | in-package SPI NOR | esp-storage 0.10 `FlashStorage` | 4 B | 4 KiB sector | allowed |
//!
//! The H7's sectors are on the heap ([`stm32h743`], feature `alloc`): two of them are
//! 256 KiB of cells and as much of program counts, cloned for every cut. The others hold
//! their pages inline ([`MemFlash`]).
//!
//! idem's journal needs a write unit of 1 to 32 bytes, a power of two, and a page that
//! holds its header and its largest record; each family here meets them. A flash that does not is
//! refused when the journal is built for it (a `const` assertion, error E0080):
//!
//! ```compile_fail,E0080
//! use idem_core::journal::{Journal, Region};
//! use idem_core::testing::flash::MemFlash;
//! // A flash programmed in 64-byte units.
//! type Wide = MemFlash<2, 4096, 64>;
//! let mut flash = Wide::new();
//! let _ = Journal::<u32>::open(&mut flash, Region { start: 0, pages: 2 }, 1);
//! ```
//!
//! and [`journal_fits`] says so in a sentence naming the flash and its unit (the same
//! build with a 32-byte unit compiles, and [`journal_fits`] takes it):
//!
//! ```
//! use idem_core::journal::{Journal, Region};
//! use idem_core::testing::chips::journal_fits;
//! use idem_core::testing::flash::MemFlash;
//! type Word32 = MemFlash<2, 4096, 32>;
//! let mut flash = Word32::new();
//! let _ = Journal::<u32>::open(&mut flash, Region { start: 0, pages: 2 }, 1);
//! assert!(journal_fits::<u32, Word32>().is_ok());
//! let refused = journal_fits::<u32, MemFlash<2, 4096, 64>>().unwrap_err();
//! assert_eq!(
//!     refused.to_string(),
//!     "idem's journal cannot live on idem_core::testing::flash::MemFlash<2, 4096, 64>: \
//!      it programs 64-byte units, and the journal needs 1, 2, 4, 8, 16 or 32"
//! );
//! ```

#[cfg(feature = "alloc")]
use super::flash::HeapFlash;
use super::flash::{MemFlash, Reprogram};
use crate::MaxSize;
use crate::journal::{MAX_WRITE_SIZE, header_size, largest_on, record_limit, write_unit};
use embedded_storage::nor_flash::NorFlash;

/// A chip family's flash: where it is, the driver a firmware reaches it through, and
/// the geometry and rule that driver declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The chip.
    pub chip: &'static str,
    /// The flash it keeps its data in.
    pub flash: &'static str,
    /// The HAL's flash driver.
    pub driver: &'static str,
    /// Bytes in a write unit (the driver's `WRITE_SIZE`).
    pub unit: usize,
    /// Bytes in a page or sector, the unit of an erase (the driver's `ERASE_SIZE`).
    pub page: usize,
    /// Whether a unit may be programmed again before an erase.
    pub reprogram: Reprogram,
}

/// The nRF52840's internal flash through its NVMC.
pub const NRF52840: Family = Family {
    chip: "nRF52840",
    flash: "internal flash (NVMC)",
    driver: "embassy-nrf 0.11 Nvmc",
    unit: 4,
    page: 4096,
    reprogram: Reprogram::Any,
};

/// The RP2040's external QSPI NOR flash on a Pico, a Winbond W25Q16JV.
pub const RP2040: Family = Family {
    chip: "RP2040",
    flash: "W25Q16JV QSPI NOR flash",
    driver: "embassy-rp 0.10 Flash",
    unit: 1,
    page: 4096,
    reprogram: Reprogram::Any,
};

/// The STM32L476's internal flash: 8-byte double words, each programmed once under ECC.
pub const STM32L476: Family = Family {
    chip: "STM32L476",
    flash: "internal flash, ECC on each double word",
    driver: "embassy-stm32 0.6 Flash",
    unit: 8,
    page: 2048,
    reprogram: Reprogram::Never,
};

/// The STM32H743's internal flash: 32-byte flash words, each programmed once under ECC,
/// in 128 KiB sectors.
pub const STM32H743: Family = Family {
    chip: "STM32H743",
    flash: "internal flash, ECC on each flash word",
    driver: "embassy-stm32 0.6 Flash",
    unit: 32,
    page: 128 * 1024,
    reprogram: Reprogram::Never,
};

/// The ESP32-C3's SPI NOR flash, in its package on an ESP32-C3FH4, reached through the
/// ROM's functions.
pub const ESP32_C3: Family = Family {
    chip: "ESP32-C3",
    flash: "in-package SPI NOR flash",
    driver: "esp-storage 0.10 FlashStorage",
    unit: 4,
    page: 4096,
    reprogram: Reprogram::Any,
};

/// Every family, in the order of the table above.
pub const FAMILIES: [Family; 5] = [NRF52840, RP2040, STM32L476, STM32H743, ESP32_C3];

/// The nRF52840's flash, `PAGES` pages of it.
pub type Nrf52840<const PAGES: usize> = MemFlash<PAGES, 4096, 4>;
/// The RP2040's W25Q16JV, `PAGES` sectors of it.
pub type Rp2040<const PAGES: usize> = MemFlash<PAGES, 4096, 1>;
/// The STM32L476's flash, `PAGES` pages of it.
pub type Stm32l476<const PAGES: usize> = MemFlash<PAGES, 2048, 8>;
/// The STM32H743's flash, `PAGES` sectors of it, on the heap.
#[cfg(feature = "alloc")]
pub type Stm32h743<const PAGES: usize> = HeapFlash<PAGES, { 128 * 1024 }, 32>;
/// The ESP32-C3's flash, `PAGES` sectors of it.
pub type Esp32C3<const PAGES: usize> = MemFlash<PAGES, 4096, 4>;

/// A blank nRF52840 flash of `PAGES` pages ([`NRF52840`]).
pub const fn nrf52840<const PAGES: usize>() -> Nrf52840<PAGES> {
    MemFlash::new().with_reprogram(NRF52840.reprogram)
}

/// A blank RP2040 W25Q16JV of `PAGES` sectors ([`RP2040`]).
pub const fn rp2040<const PAGES: usize>() -> Rp2040<PAGES> {
    MemFlash::new().with_reprogram(RP2040.reprogram)
}

/// A blank STM32L476 flash of `PAGES` pages ([`STM32L476`]).
pub const fn stm32l476<const PAGES: usize>() -> Stm32l476<PAGES> {
    MemFlash::new().with_reprogram(STM32L476.reprogram)
}

/// A blank STM32H743 flash of `PAGES` sectors, on the heap ([`STM32H743`]).
#[cfg(feature = "alloc")]
pub fn stm32h743<const PAGES: usize>() -> Stm32h743<PAGES> {
    HeapFlash::new().with_reprogram(STM32H743.reprogram)
}

/// A blank ESP32-C3 flash of `PAGES` sectors ([`ESP32_C3`]).
pub const fn esp32_c3<const PAGES: usize>() -> Esp32C3<PAGES> {
    MemFlash::new().with_reprogram(ESP32_C3.reprogram)
}

/// Why idem's journal cannot live on a flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfit {
    /// The flash's type.
    pub flash: &'static str,
    /// Its write unit.
    pub unit: usize,
    /// Its page.
    pub page: usize,
    /// Which rule it breaks.
    pub rule: Rule,
}

/// A rule of the journal's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A write unit of 1, 2, 4, 8, 16 or 32 bytes.
    Unit,
    /// A largest record of at most [`MAX_SLOT_SIZE`](crate::journal::MAX_SLOT_SIZE) bytes
    /// and 255 units (its first byte counts its units before the check unit, and is never
    /// `0xFF`).
    Slot,
    /// A page of whole units that holds a header and the largest record.
    Page,
}

impl core::fmt::Display for Unfit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let Self {
            flash, unit, page, ..
        } = self;
        write!(f, "idem's journal cannot live on {flash}: ")?;
        match self.rule {
            Rule::Unit => write!(
                f,
                "it programs {unit}-byte units, and the journal needs 1, 2, 4, 8, 16 or 32"
            ),
            Rule::Slot => write!(
                f,
                "its largest record takes more than {} bytes on its {unit}-byte units",
                record_limit(*unit)
            ),
            Rule::Page => write!(
                f,
                "its {page}-byte pages do not hold a page header and a record in {unit}-byte units"
            ),
        }
    }
}

impl core::error::Error for Unfit {}

/// Whether a journal of `T` can live on the flash `F`, the rules the journal asserts when
/// it is built for them, said in a sentence naming the flash and its unit.
pub fn journal_fits<T: MaxSize, F: NorFlash>() -> Result<(), Unfit> {
    let (unit, page) = (F::WRITE_SIZE, F::ERASE_SIZE);
    let unfit = |rule| {
        Err(Unfit {
            flash: core::any::type_name::<F>(),
            unit,
            page,
            rule,
        })
    };
    if !unit.is_power_of_two() || unit > MAX_WRITE_SIZE {
        return unfit(Rule::Unit);
    }
    let slot = largest_on::<T>(unit);
    if slot > record_limit(unit) {
        return unfit(Rule::Slot);
    }
    if !page.is_multiple_of(write_unit(unit)) || header_size(unit) + slot > page {
        return unfit(Rule::Page);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::MAX_SLOT_SIZE;

    /// Each constructor's geometry and rule are its family's.
    #[test]
    fn each_constructor_is_its_familys_flash() {
        fn of<F: NorFlash>(reprogram: Reprogram) -> (usize, usize, Reprogram) {
            (F::WRITE_SIZE, F::ERASE_SIZE, reprogram)
        }
        let flashes = [
            of::<Nrf52840<2>>(nrf52840::<2>().reprogram()),
            of::<Rp2040<2>>(rp2040::<2>().reprogram()),
            of::<Stm32l476<2>>(stm32l476::<2>().reprogram()),
            of::<Stm32h743<2>>(stm32h743::<2>().reprogram()),
            of::<Esp32C3<2>>(esp32_c3::<2>().reprogram()),
        ];
        assert_eq!(flashes, FAMILIES.map(|f| (f.unit, f.page, f.reprogram)));
        assert_eq!(
            FAMILIES.map(|f| f.reprogram),
            [
                Reprogram::Any,
                Reprogram::Any,
                Reprogram::Never,
                Reprogram::Never,
                Reprogram::Any
            ]
        );
    }

    #[test]
    fn the_journal_fits_every_family_and_refuses_what_breaks_its_rules() {
        type Record = (u32, i32);
        assert_eq!(journal_fits::<Record, Nrf52840<2>>(), Ok(()));
        assert_eq!(journal_fits::<Record, Rp2040<2>>(), Ok(()));
        assert_eq!(journal_fits::<Record, Stm32l476<2>>(), Ok(()));
        assert_eq!(journal_fits::<Record, Stm32h743<2>>(), Ok(()));
        assert_eq!(journal_fits::<Record, Esp32C3<2>>(), Ok(()));
        let wide = journal_fits::<Record, MemFlash<2, 4096, 64>>().unwrap_err();
        assert_eq!((wide.unit, wide.rule), (64, Rule::Unit));
        // A 64-byte page of 32-byte units: a 64-byte header and a 64-byte record do not fit.
        let small = journal_fits::<Record, MemFlash<2, 64, 32>>().unwrap_err();
        assert_eq!(
            small.to_string(),
            "idem's journal cannot live on idem_core::testing::flash::MemFlash<2, 64, 32>: \
             its 64-byte pages do not hold a page header and a record in 32-byte units"
        );
        // Past the largest record: 512 bytes on bare metal, 1,024 on a hosted build, and
        // 255 units (a first byte of 0xFF would count 255 units before the check unit).
        let big = journal_fits::<[u8; 1100], Nrf52840<2>>().unwrap_err();
        assert_eq!(
            big.to_string(),
            format!(
                "idem's journal cannot live on idem_core::testing::flash::MemFlash<2, 4096, 4>: \
                 its largest record takes more than {} bytes on its 4-byte units",
                MAX_SLOT_SIZE.min(1020)
            )
        );
        // A hosted build: 1,015 bytes and the length byte fill 254 units, the check word
        // one more (1,020 bytes); 1,018 would take 255 before the check unit.
        assert_eq!(journal_fits::<[u8; 1015], Nrf52840<2>>(), Ok(()));
        let edge = journal_fits::<[u8; 1018], Nrf52840<2>>().unwrap_err();
        assert_eq!((edge.unit, edge.rule), (4, Rule::Slot));
    }
}
