// The power-cut cases, run once for each build (`tests/power_cut.rs`): `open_j` and
// `append` are the blocking steps or the async ones.

use crate::OffsetTotal;
use idem_core::journal::{Journal, JournalError, Region, header_size};
use idem_core::testing::chips;
use idem_core::testing::cuts::{Cuttable, Plan, Seen, sweep};
use idem_core::testing::flash::{FlashError, MemFlash, PowerCut};
use idem_core::testing::rng::SplitMix64;

/// Four pages of 1 KiB, written `W` bytes at a time.
type Flash<const W: usize> = MemFlash<4, 1024, W>;
const TAG: u32 = 0x7E57;

fn rec(i: u32) -> OffsetTotal {
    OffsetTotal {
        offset: i + 1,
        total: (i as i32).wrapping_mul(7),
    }
}

fn open<const W: usize>(
    f: &mut Flash<W>,
    pages: u32,
) -> (Journal<OffsetTotal>, Option<OffsetTotal>) {
    open_j(f, Region { start: 0, pages }, TAG).expect("recovery never fails on a flash it wrote")
}

/// Appends `rec(from..)` until `count` are acknowledged or the power fails; the last
/// acknowledged record and the one in flight when the power failed.
fn append_until_cut<const W: usize>(
    f: &mut Flash<W>,
    j: &mut Journal<OffsetTotal>,
    from: u32,
    count: u32,
) -> (u32, Option<u32>) {
    for i in from..from + count {
        match append(j, f, &rec(i)) {
            Ok(()) => {}
            Err(JournalError::Flash(FlashError::PowerCut)) => return (i, Some(i)),
            Err(e) => panic!("append {i}: {e:?}"),
        }
    }
    (from + count, None)
}

/// Checks what recovery found against what was acknowledged; returns the index the
/// next record should carry.
fn check(
    found: Option<OffsetTotal>,
    acked: Option<u32>,
    in_flight: Option<u32>,
    what: &str,
) -> u32 {
    let ok = found == acked.map(rec) || (in_flight.is_some() && found == in_flight.map(rec));
    assert!(
        ok,
        "{what}: acknowledged {acked:?}, in flight {in_flight:?}, recovered {found:?}"
    );
    found.map_or(0, |r| r.offset)
}

#[test]
fn a_cut_at_every_word_write_and_every_erase() {
    // Per model: torn, before a unit or an erase, a weak erase, a reset between appends.
    // The torn cuts are the 6,162 places this test cut before the checker (4,626 at
    // format 2, whose records had no length byte: 12 bytes, now 16).
    assert_eq!(
        every_cut::<4>(&Plan::new(), 500, &[2, 3, 4]),
        [6_162, 6_162, 27, 1_500]
    );
}

#[test]
fn a_second_cut_in_the_recovery_from_every_first_one() {
    // 200 commits on 2 pages, then 4 second cuts spread over each recovery.
    let plan = Plan::new().double_cuts(4);
    assert_eq!(every_cut::<4>(&plan, 200, &[2]), [4_120, 4_120, 14, 990]);
}

#[test]
fn a_cut_at_every_double_word_write_and_every_erase() {
    assert_eq!(
        every_cut::<8>(&Plan::new(), 500, &[2, 3, 4]),
        [4_656, 4_656, 39, 1_500]
    );
}

#[test]
fn a_cut_at_every_flash_word_write_and_every_erase() {
    assert_eq!(
        every_cut::<32>(&Plan::new(), 500, &[2, 3, 4]),
        [3_306, 3_306, 102, 1_500]
    );
}

// Each chip family's flash (`idem_core::testing::chips`): its unit, its page, and its rule
// on a unit programmed twice. Two pages each, enough commits to wrap the journal round
// them (three erases at least). The record's 8-byte payload fills whole units, so its
// length byte takes one more (journal format 3's one cost): format 2's slots made
// 2,118, 8,461 and 612 places, and 3 erases on the STM32L476 (now 4).

#[test]
fn every_cut_on_the_nrf52840s_and_the_esp32_c3s_flash() {
    // The same unit, page and rule (4 B, 4 KiB, programmed again allowed): one sweep.
    assert_eq!(
        (
            chips::NRF52840.unit,
            chips::NRF52840.page,
            chips::NRF52840.reprogram
        ),
        (
            chips::ESP32_C3.unit,
            chips::ESP32_C3.page,
            chips::ESP32_C3.reprogram
        )
    );
    assert_eq!(
        every_cut_on(chips::nrf52840::<2>, &Plan::new(), 700, &[2]),
        [2_818, 2_818, 3, 700]
    );
}

#[test]
fn every_cut_on_the_rp2040s_flash() {
    // 1-byte units: the journal's 4-byte words are 4 places to cut each.
    assert_eq!(
        every_cut_on(chips::rp2040::<2>, &Plan::new(), 700, &[2]),
        [11_263, 11_263, 3, 700]
    );
}

#[test]
fn every_cut_on_the_stm32l476s_flash() {
    assert_eq!(
        every_cut_on(chips::stm32l476::<2>, &Plan::new(), 300, &[2]),
        [916, 916, 4, 300]
    );
}

#[test]
fn a_seeded_sample_of_cuts_on_the_stm32h743s_sectors() {
    // Two sectors of 128 KiB hold 2,047 slots of 64 B each: 4,100 commits wrap them.
    // A sample of 400 first cuts a model, drawn from the plan's seed, of the 8,206 unit
    // writes, 3 erases and 4,100 steps of the run (a full sweep is 20,521 trials).
    assert_eq!(
        every_cut_on(
            chips::stm32h743::<2>,
            &Plan::new().sample(400).seed(0x4743),
            4_100,
            &[2]
        ),
        [400, 400, 3, 400]
    );
}

/// What the journal has acknowledged (the next record's index), and the record in flight.
#[derive(Default)]
struct Acked {
    next: u32,
    in_flight: Option<u32>,
}

/// Cuts power at every unit write and every erase of `commits` commits, on each count of
/// pages, as `plan` says (every model of the power-cut checker), and judges every boot:
/// it finds the last acknowledged record or the one in flight, and the journal goes on to
/// the last commit. How many trials each model ran.
fn every_cut<const W: usize>(plan: &Plan, commits: u32, pages: &[u32]) -> [u64; 4] {
    every_cut_on(Flash::<W>::new, plan, commits, pages)
}

/// [`every_cut`] on the flashes `fresh` makes.
fn every_cut_on<F: NorFlash<Error = FlashError> + Cuttable>(
    fresh: impl Fn() -> F,
    plan: &Plan,
    commits: u32,
    pages: &[u32],
) -> [u64; 4] {
    let w = F::WRITE_SIZE;
    let mut trials = [0; 4];
    for &pages in pages {
        let found = sweep(
            plan,
            || (fresh(), Acked::default()),
            |f, _| open_j(f, Region { start: 0, pages }, TAG),
            |(j, newest), f, acked| {
                let i = newest.map_or(0, |r| r.offset);
                if i == commits {
                    return Ok(None);
                }
                acked.in_flight = Some(i);
                append(j, f, &rec(i))?;
                (*newest, acked.next, acked.in_flight) = (Some(rec(i)), i + 1, None);
                Ok(Some(i))
            },
            |_, acked, seen| match seen {
                Seen::Booted((_, found)) => {
                    let last = acked.next.checked_sub(1).map(rec);
                    let ok = *found == last
                        || (acked.in_flight.is_some() && *found == acked.in_flight.map(rec));
                    if !ok {
                        return Err(format!(
                            "acknowledged {last:?}, in flight {:?}, recovered {found:?}",
                            acked.in_flight
                        ));
                    }
                    // What a boot found is durable: the next cut must not lose it.
                    (acked.next, acked.in_flight) = (found.map_or(0, |r| r.offset), None);
                    Ok(())
                }
                Seen::Stepped(_) => Ok(()),
                Seen::Ended if acked.next == commits => Ok(()),
                Seen::Failed(e) => Err(format!("{e:?}")),
                _ => Err(format!("ended at {}", acked.next)),
            },
        );
        let r = found.reference;
        println!(
            "{w}-byte writes, {pages} pages of {} B: {commits} commits, {} unit writes and {} erases; trials a model (torn, clean, weak erase, reset): {:?}",
            F::ERASE_SIZE,
            r.unit_writes,
            r.erases,
            found.models.each_ref().map(|t| t.trials)
        );
        assert!(
            r.erases >= 3,
            "{pages} pages: the run must wrap so erases are cut too"
        );
        if let Err(refused) = found.all_right() {
            panic!("{w}-byte writes, {pages} pages: {refused}");
        }
        for (sum, tally) in trials.iter_mut().zip(&found.models) {
            *sum += tally.trials;
        }
    }
    println!("{w}-byte writes: power cuts checked a model: {trials:?}");
    trials
}

#[test]
fn a_hundred_thousand_random_cuts() {
    random_cuts::<4>(100_000);
}

#[test]
fn random_cuts_on_double_words() {
    random_cuts::<8>(100_000);
}

#[test]
fn random_cuts_on_flash_words() {
    random_cuts::<32>(100_000);
}

/// `cuts` power cuts at random unit writes and erases, in random models, spread over 2, 3
/// and 4 pages.
fn random_cuts<const W: usize>(cuts: u32) {
    let cuts_total = cuts;
    let mut rng = SplitMix64::new(0x1DE5_C075);
    let mut checked = 0;
    for pages in [2u32, 3, 4] {
        let mut f = Flash::<W>::new();
        f.seed_noise(u64::from(pages));
        let (mut j, _) = open(&mut f, pages);
        let mut acked: Option<u32> = None;
        let mut next = 0;
        let share = cuts_total / 3 + u32::from(pages == 4) * (cuts_total % 3);
        for _ in 0..share {
            // Each cut torn or clean; an erase cut torn, clean or weak (the checker's
            // models, at random places).
            let n = rng.range(1, 200);
            f.schedule_power_cut(match rng.range(0, 1) {
                0 => PowerCut::AtWordWrite(n),
                _ => PowerCut::BeforeWordWrite(n),
            });
            if rng.range(0, 3) == 0 {
                let n = rng.range(1, 2);
                f.schedule_power_cut(match rng.range(0, 2) {
                    0 => PowerCut::AtErase(n),
                    1 => PowerCut::BeforeErase(n),
                    _ => PowerCut::WeakErase(n),
                });
            }
            let (stop, in_flight) = append_until_cut(&mut f, &mut j, next, 1000);
            if stop > next {
                acked = Some(stop - 1);
            }
            f.power_on();
            let (j2, found) = open(&mut f, pages);
            j = j2;
            next = check(
                found,
                acked,
                in_flight,
                &format!("{pages} pages, cut {checked}"),
            );
            acked = next.checked_sub(1);
            checked += 1;
        }
        println!(
            "{W}-byte writes, {pages} pages: {share} random cuts, {} unit writes, {} erases",
            f.stats().word_writes,
            f.stats().erases
        );
    }
    println!("{W}-byte writes: random power cuts checked: {checked} (seed 0x1DE5C075)");
    assert_eq!(checked, cuts_total);
}

#[test]
fn wear_is_level_over_a_million_commits() {
    // Records of 16 bytes (a length byte and 8 of payload in three words, a check word):
    // 62 fit a 1 KiB page after its 20-byte header; every page is erased as the cursor
    // enters it, the first one included: 16,130 erases, 1.012 times the floor of
    // 15,936.3 (1,000,000 x 16 B over 1,004 B). Format 2's 12-byte slots (no length byte;
    // 83 a page, which `slots_per_page` still counts) took 12,049, format 1's 16-byte
    // ones 15,874: a record whose encoding fills whole units pays a unit for its length.
    assert_eq!(wear::<4>(), (16, 83, 16_130));
}

#[test]
fn wear_is_level_on_double_words() {
    // The length byte and the payload's 8 bytes in two double-words, then the check word
    // in one of its own: 24-byte records, 41 after a 24-byte header (format 2's 16-byte
    // slots, 62 a page: 16,130 erases).
    assert_eq!(wear::<8>(), (24, 62, 24_391));
}

#[test]
fn wear_is_level_on_flash_words() {
    // A 32-byte unit for the length byte and the payload and one for the check word:
    // 64-byte records, 15 after a 64-byte header. An H7's 128 KiB sectors hold 2,047 of them.
    assert_eq!(wear::<32>(), (64, 15, 66_667));
}

/// A million commits on 4 pages: the record size, the format-2 slots per page and the erases, after
/// checking that every page wore alike and that the erases stay within 5 % of the floor
/// (the commits' bytes over the bytes a page has after its header).
fn wear<const W: usize>() -> (usize, u32, u64) {
    const COMMITS: u32 = 1_000_000;
    let mut f = Flash::<W>::new();
    let (mut j, _) = open(&mut f, 4);
    append_until_cut(&mut f, &mut j, 0, COMMITS);
    let erases = f.page_erases();
    let (lo, hi) = (*erases.iter().min().unwrap(), *erases.iter().max().unwrap());
    // A record: its length byte and 8 bytes of payload in whole units, then the check
    // unit (format 3; a format-2 slot, `Journal::slot_on`, has no length byte).
    let unit = W.max(4);
    let slot = (1 + 8usize).div_ceil(unit) * unit + unit;
    let floor = f64::from(COMMITS) * slot as f64 / (1024 - header_size(W)) as f64;
    println!("{W}-byte writes: erases per page over {COMMITS} commits: {erases:?}");
    println!(
        "{W}-byte writes: {} erases; floor (commits x {slot} B over the {} B after each header): {floor:.1}",
        f.stats().erases,
        1024 - header_size(W)
    );
    assert!(
        f64::from(hi - lo) <= 0.05 * f64::from(hi),
        "erase counts {erases:?} differ by more than 5 %"
    );
    assert!(f.stats().erases as f64 <= 1.05 * floor);
    (slot, j.slots_per_page(), f.stats().erases)
}
