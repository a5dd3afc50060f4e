//! The setpoint table as the chips' examples run it (`idem_example_setpoints::chip`: four
//! pages, a checkpoint every 8 commands) on each chip family's flash, modelled by
//! idem-core's strict test flash with that family's write unit and page: each unit is
//! programmed once between two erases (the rule of the STM32s' ECC flash; the nRF52's
//! `Nvmc` and the QSPI and SPI flashes of the RP2040 and ESP32-C3 allow more, and the
//! journals do not need it).
//!
//! | family | unit | page | as the HAL's driver declares it |
//! |---|---|---|---|
//! | nRF52840, ESP32-C3 | 4 B | 4 KiB | embassy-nrf `Nvmc`, esp-storage `FlashStorage` |
//! | RP2040 | 1 B | 4 KiB | embassy-rp `Flash` (the journals program whole words) |
//! | STM32L476 | 8 B | 2 KiB | embassy-stm32 `Flash` |
//! | STM32H743 | 32 B | 128 KiB | embassy-stm32 `Flash` |
//!
//! The first three take a power cut at every unit write and every erase of a run (300
//! commands; 120 on the RP2040's, whose 1-byte units make every byte a place to cut), in
//! each of the power-cut checker's models, and a reset after every step: each trial ends
//! with the table a plain fold gives. The H7's sectors hold 511 of the table's records,
//! so a run that takes the table's journal round its two sectors takes 4,000 commands:
//! it takes a seeded sample of 200 cuts, the flash (1 MiB of model) on the stack of a
//! thread of its own (64 MiB), in about 3 s in release. Every boot's and every step's
//! flash operations are counted, with the 256-byte pages a QSPI or SPI NOR flash
//! programs for them: the most any boot took is what a reset costs (the examples'
//! READMEs multiply them by the datasheets' timings, from what
//! `cargo test --release --test chips -- --nocapture` prints).

use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use idem_core::consumer::{Consumer, Step};
use idem_core::log::{Event, Log, Received};
use idem_core::testing::cuts::{Plan, Seen, sweep};
use idem_core::testing::flash::{FlashStats, MemFlash, PowerCut};
use idem_core::testing::rng::SplitMix64;
use idem_example_setpoints::chip::{self, config, layout};
use idem_example_setpoints::{ACTUATORS, Command, outputs, store};

mod support;
use support::{commands, truth};

/// A QSPI or SPI NOR flash's program page: the RP2040's W25Q16JV and the ESP32-C3's.
const PROGRAM_PAGE: usize = 256;

/// What a boot asked of the flash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cost {
    /// Read calls.
    reads: u64,
    /// Bytes read.
    read_bytes: u64,
    /// Write calls.
    writes: u64,
    /// Write units programmed.
    units: u64,
    /// 256-byte program pages the writes touched: a QSPI or SPI NOR flash's page
    /// programs (embassy-rp programs each such page whole, padded with 0xFF).
    programs: u64,
    /// Pages erased.
    erases: u64,
}

impl Cost {
    /// Reads, bytes read, writes, units written, 256-byte pages programmed, erases.
    fn counts(self) -> [u64; 6] {
        [
            self.reads,
            self.read_bytes,
            self.writes,
            self.units,
            self.programs,
            self.erases,
        ]
    }

    /// Each count's largest of the two.
    fn max(self, o: Cost) -> Cost {
        Cost {
            reads: self.reads.max(o.reads),
            read_bytes: self.read_bytes.max(o.read_bytes),
            writes: self.writes.max(o.writes),
            units: self.units.max(o.units),
            programs: self.programs.max(o.programs),
            erases: self.erases.max(o.erases),
        }
    }
}

/// A flash that counts what is asked of it.
struct Counted<'f, F> {
    flash: &'f mut F,
    cost: Cost,
}

impl<F: ErrorType> ErrorType for Counted<'_, F> {
    type Error = F::Error;
}

impl<F: ReadNorFlash> ReadNorFlash for Counted<'_, F> {
    const READ_SIZE: usize = F::READ_SIZE;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        // esp-storage reads whole words only (its READ_SIZE is 4): every read is one.
        assert!(
            offset.is_multiple_of(4) && bytes.len().is_multiple_of(4),
            "a read of {} bytes at {offset:#x} is not whole words",
            bytes.len()
        );
        self.cost.reads += 1;
        self.cost.read_bytes += bytes.len() as u64;
        self.flash.read(offset, bytes)
    }
    fn capacity(&self) -> usize {
        self.flash.capacity()
    }
}

impl<F: NorFlash> NorFlash for Counted<'_, F> {
    const WRITE_SIZE: usize = F::WRITE_SIZE;
    const ERASE_SIZE: usize = F::ERASE_SIZE;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.cost.erases += u64::from((to - from) / F::ERASE_SIZE as u32);
        self.flash.erase(from, to)
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.cost.writes += 1;
        self.cost.units += (bytes.len() / F::WRITE_SIZE) as u64;
        if let Some(last) = (offset as usize + bytes.len()).checked_sub(1) {
            self.cost.programs += (last / PROGRAM_PAGE - offset as usize / PROGRAM_PAGE + 1) as u64;
        }
        self.flash.write(offset, bytes)
    }
}

type Opened<F> = Result<
    Consumer<idem_example_setpoints::Exactly>,
    idem_core::consumer::ErrorOf<F, idem_example_setpoints::Exactly>,
>;

/// One step of the consumer `c`, counting its flash operations into `worst`.
fn step<F: NorFlash, L: Log<Command> + ?Sized>(
    c: &mut Consumer<idem_example_setpoints::Exactly>,
    flash: &mut F,
    log: &L,
    worst: &mut Cost,
) -> Result<Step<Command>, idem_core::consumer::ErrorOf<F, idem_example_setpoints::Exactly>> {
    let mut counted = Counted {
        flash,
        cost: Cost::default(),
    };
    let stepped = c.step(&mut counted, log);
    *worst = worst.max(counted.cost);
    stepped
}

/// Opens the table as `chip::run` does, counting the boot's flash operations into `worst`.
fn boot<F: NorFlash>(flash: &mut F, worst: &mut Cost) -> Opened<F> {
    let mut counted = Counted {
        flash,
        cost: Cost::default(),
    };
    let opened = Consumer::open(&mut counted, layout::<Counted<F>>(0), store(), config());
    *worst = worst.max(counted.cost);
    opened
}

/// What a trial keeps outside the flash: the table it ended with, and the most a boot
/// and a step asked of the flash.
#[derive(Default)]
struct World {
    ended: Option<([i16; ACTUATORS], u32)>,
    worst: Worst,
}

/// The most a boot, and a step, asked of the flash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Worst {
    boot: Cost,
    step: Cost,
}

impl Worst {
    fn max(self, o: Worst) -> Worst {
        Worst {
            boot: self.boot.max(o.boot),
            step: self.step.max(o.step),
        }
    }
}

/// What a sweep found: the reference run's steps, unit writes and erases, the trials of
/// each model, and the most a boot and a step asked of the flash ([`Cost::counts`]).
#[derive(Debug, PartialEq, Eq)]
struct Swept {
    reference: [u64; 3],
    trials: [u64; 4],
    boot: [u64; 6],
    step: [u64; 6],
}

/// Every cut of `n` commands on a flash of 4 pages of `PAGE` bytes in units of `UNIT`.
fn every_cut<const PAGE: usize, const UNIT: usize>(n: u64) -> Swept {
    let events = commands(n);
    let (table, rejected) = truth(&events);
    let stream = Received::new(&events, Some(n));
    let mut worst = Worst::default();
    let found = sweep(
        &Plan::new(),
        || (MemFlash::<4, PAGE, UNIT>::new(), World::default()),
        |flash, world| boot(flash, &mut world.worst.boot),
        |c, flash, world| match step(c, flash, &stream, &mut world.worst.step)? {
            Step::Done => {
                world.ended = Some((outputs(c.state()), c.rejected()));
                Ok(None)
            }
            step => Ok(Some(step)),
        },
        |_, world, seen| {
            worst = worst.max(world.worst);
            match seen {
                Seen::Ended if world.ended != Some((table.setpoints, rejected)) => {
                    Err(format!("ended with {:?}", world.ended))
                }
                Seen::Failed(e) => Err(format!("{e:?}")),
                Seen::Stuck => Err("stuck".into()),
                _ => Ok(()),
            }
        },
    );
    found.assert_all_right();
    let r = found.reference;
    let swept = Swept {
        reference: [r.steps, r.unit_writes, r.erases],
        trials: found.models.each_ref().map(|t| t.trials),
        boot: worst.boot.counts(),
        step: worst.step.counts(),
    };
    println!("{UNIT} B units, {PAGE} B pages: {swept:?}");
    swept
}

#[test]
fn every_cut_on_the_nrf52840s_and_the_esp32_c3s_flash_ends_exact() {
    let swept = every_cut::<4096, 4>(300);
    // Journal format 3 (records at their encoded size, a length byte first; in format
    // 2's slots: [638, 4_418, 6], [4_424, 4_424, 6, 638], boot [739, 33_148, ..], step
    // [66, 4_160, 4, 21, 4, 1]). A boot reads a page 512 bytes at a time, and a page's
    // blank end from the page's end back: fewer reads, more bytes.
    let (reference, trials) = ([638, 2_407, 4], [2_411, 2_411, 4, 638]);
    let (boot, step) = ([520, 53_368, 0, 0, 0, 0], [68, 4_260, 4, 14, 4, 1]);
    assert_eq!(
        swept,
        Swept {
            reference,
            trials,
            boot,
            step
        }
    );
}

#[test]
fn every_cut_on_the_rp2040s_flash_ends_exact() {
    let swept = every_cut::<4096, 1>(120);
    // Journal format 3 (format 2: [255, 7_204, 3], [7_207, 7_207, 3, 255], boot [739,
    // 33_148, ..], step [66, 4_160, 4, 84, 4, 1]).
    let (reference, trials) = ([255, 3_780, 2], [3_782, 3_782, 2, 255]);
    let (boot, step) = ([520, 49_692, 0, 0, 0, 0], [66, 4_132, 4, 48, 4, 1]);
    assert_eq!(
        swept,
        Swept {
            reference,
            trials,
            boot,
            step
        }
    );
}

#[test]
fn every_cut_on_the_stm32l476s_flash_ends_exact() {
    let swept = every_cut::<2048, 8>(300);
    // Journal format 3 (format 2: [638, 2_525, 11], [2_536, 2_536, 11, 638], boot [330,
    // 16_844, ..], step [34, 2_112, 4, 12, 4, 1]).
    let (reference, trials) = ([638, 1_393, 7], [1_400, 1_400, 7, 638]);
    let (boot, step) = ([264, 29_836, 0, 0, 0, 0], [36, 2_216, 4, 8, 4, 1]);
    assert_eq!(
        swept,
        Swept {
            reference,
            trials,
            boot,
            step
        }
    );
}

/// The H7: 4 sectors of 128 KiB in 32-byte flash words.
type H7 = MemFlash<4, { 128 * 1024 }, 32>;

/// One run of `events` from a blank H7 flash with `cut` armed: the table it ends with
/// after the cut and as many reboots as it takes, the most a boot asked of the flash, and
/// the flash's counts.
fn h7_run(
    events: &[Event<Command>],
    cut: Option<PowerCut>,
) -> (([i16; ACTUATORS], u32), Worst, FlashStats) {
    let stream = Received::new(events, Some(events.len() as u64));
    let mut flash = H7::new();
    let mut worst = Worst::default();
    if let Some(cut) = cut {
        flash.schedule_power_cut(cut);
    }
    loop {
        flash.power_on();
        let Ok(mut c) = boot(&mut flash, &mut worst.boot) else {
            assert!(!flash.is_powered(), "a boot failed with the power on");
            continue;
        };
        loop {
            match step(&mut c, &mut flash, &stream, &mut worst.step) {
                Ok(Step::Done) => {
                    return ((outputs(c.state()), c.rejected()), worst, flash.stats());
                }
                Ok(_) => {}
                Err(e) => {
                    assert!(
                        !flash.is_powered(),
                        "a step failed with the power on: {e:?}"
                    );
                    break;
                }
            }
        }
    }
}

#[test]
fn a_sample_of_cuts_on_the_stm32h743s_sectors_ends_exact() {
    let run = || {
        let events = commands(4_000);
        let expected = truth(&events);
        let (ended, clean, stats) = h7_run(&events, None);
        assert_eq!(ended, (expected.0.setpoints, expected.1));
        let mut rng = SplitMix64::new(0x4743);
        let mut worst = clean;
        for _ in 0..200 {
            let cut = match rng.next_u64() % 5 {
                0 => PowerCut::AtWordWrite(1 + rng.next_u64() % stats.word_writes),
                1 => PowerCut::BeforeWordWrite(1 + rng.next_u64() % stats.word_writes),
                2 => PowerCut::AtErase(1 + rng.next_u64() % stats.erases),
                3 => PowerCut::BeforeErase(1 + rng.next_u64() % stats.erases),
                _ => PowerCut::WeakErase(1 + rng.next_u64() % stats.erases),
            };
            let (ended, cost, _) = h7_run(&events, Some(cut));
            assert_eq!(ended, (expected.0.setpoints, expected.1), "{cut:?}");
            worst = worst.max(cost);
        }
        (stats, worst)
    };
    let (stats, worst) = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(run)
        .unwrap()
        .join()
        .unwrap();
    println!("32 B units, 128 KiB sectors: {stats:?}, worst boot {worst:?}");
    // Journal format 3 (format 2: 11_613 and 4).
    assert_eq!((stats.word_writes, stats.erases), (8_076, 3));
    // Format 2: boot [16_400, 1_049_112, ..].
    assert_eq!(worst.boot.counts(), [16_400, 1_255_540, 0, 0, 0, 0]);
    // Format 2: step [2_050, 131_076, 4, 5, 4, 1].
    assert_eq!(worst.step.counts(), [2_050, 131_076, 4, 4, 4, 1]);
}

/// The examples refuse a flash the journals cannot use; these are the families' units
/// and pages, and two that fail.
#[test]
fn the_geometry_rules_accept_each_family_and_refuse_a_64_byte_unit() {
    assert!(chip::fits::<MemFlash<4, 4096, 4>>());
    assert!(chip::fits::<MemFlash<4, 4096, 1>>());
    assert!(chip::fits::<MemFlash<4, 2048, 8>>());
    assert!(chip::fits::<H7>());
    assert!(!chip::fits::<Unit<64, 4096>>(), "a 64-byte unit");
    assert!(
        !chip::fits::<Unit<32, 256>>(),
        "a page smaller than header and slot"
    );
}

/// A flash with a unit and page of its own, for the rules only: never read or written.
struct Unit<const U: usize, const P: usize>;

impl<const U: usize, const P: usize> ErrorType for Unit<U, P> {
    type Error = core::convert::Infallible;
}

impl<const U: usize, const P: usize> ReadNorFlash for Unit<U, P> {
    const READ_SIZE: usize = 1;
    fn read(&mut self, _: u32, _: &mut [u8]) -> Result<(), Self::Error> {
        unreachable!("the rules are constants")
    }
    fn capacity(&self) -> usize {
        4 * P
    }
}

impl<const U: usize, const P: usize> NorFlash for Unit<U, P> {
    const WRITE_SIZE: usize = U;
    const ERASE_SIZE: usize = P;
    fn erase(&mut self, _: u32, _: u32) -> Result<(), Self::Error> {
        unreachable!("the rules are constants")
    }
    fn write(&mut self, _: u32, _: &[u8]) -> Result<(), Self::Error> {
        unreachable!("the rules are constants")
    }
}

/// What the chips' examples do at every boot: the log applied once, whatever came before
/// on the flash (a blank one, the last boot's table, pages of garbage or of zeros).
#[test]
fn the_chips_run_applies_the_log_once_on_any_flash() {
    type Flash = MemFlash<4, 4096, 8>;
    let expected = [250, -40, 0, 0, 0, 0, 0, 0];
    let mut flash = Flash::new();
    assert_eq!(chip::run(&mut flash, 0).ok(), Some(expected));
    let written = flash.stats();
    assert_eq!(
        chip::run(&mut flash, 0).ok(),
        Some(expected),
        "a second boot"
    );
    assert_eq!(
        flash.stats(),
        written,
        "a boot after the end writes nothing"
    );
    let mut rng = SplitMix64::new(0xBAD);
    let garbage: Vec<u8> = (0..4 * 4096).map(|_| rng.next_u64() as u8).collect();
    for image in [garbage, vec![0; 4 * 4096]] {
        let mut flash = Flash::from_image(&image);
        assert_eq!(chip::run(&mut flash, 0).ok(), Some(expected));
    }
}
