// The power-cut cases, run once for each build (`tests/power_cut.rs`): `open_j` and
// `append` are the blocking steps or the async ones.

use idem_core::journal::{Journal, JournalError, OffsetTotal, Region, header_size};
use idem_core::testing::flash::{FlashError, FlashStats, MemFlash, PowerCut};
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
    assert_eq!(every_cut::<4>(), 4_626);
}

#[test]
fn a_cut_at_every_double_word_write_and_every_erase() {
    assert_eq!(every_cut::<8>(), 3_108);
}

#[test]
fn a_cut_at_every_flash_word_write_and_every_erase() {
    assert_eq!(every_cut::<32>(), 3_306);
}

/// Cuts power once at every unit write and every erase of 500 commits, on 2, 3 and 4
/// pages; how many cuts were checked.
fn every_cut<const W: usize>() -> usize {
    const COMMITS: u32 = 500;
    let mut total = 0;
    for pages in [2, 3, 4] {
        let mut reference = Flash::<W>::new();
        let (mut j, _) = open(&mut reference, pages);
        append_until_cut(&mut reference, &mut j, 0, COMMITS);
        let stats = reference.stats();
        let (writes, erases) = (stats.word_writes, stats.erases);
        let cuts: Vec<PowerCut> = stats.cuts_since(FlashStats::default()).collect();
        for (n, cut) in cuts.iter().enumerate() {
            let mut f = Flash::<W>::new();
            f.seed_noise(n as u64);
            f.schedule_power_cut(*cut);
            let (mut j, _) = open(&mut f, pages);
            let (next, in_flight) = append_until_cut(&mut f, &mut j, 0, COMMITS);
            assert!(in_flight.is_some(), "{cut:?} never happened");
            f.power_on();
            let (mut j, found) = open(&mut f, pages);
            let acked = next.checked_sub(1);
            let resume = check(found, acked, in_flight, &format!("{pages} pages, {cut:?}"));
            // The journal keeps working: three more commits, and the newest wins.
            append_until_cut(&mut f, &mut j, resume, 3);
            assert_eq!(
                open(&mut f, pages).1,
                Some(rec(resume + 2)),
                "{pages} pages, {cut:?}: after recovery"
            );
        }
        println!(
            "{W}-byte writes, {pages} pages: {COMMITS} commits, {writes} unit writes and {erases} erases, each cut once"
        );
        assert!(
            erases >= 3,
            "{pages} pages: the run must wrap so erases are cut too"
        );
        total += cuts.len();
    }
    println!("{W}-byte writes: exhaustive power cuts checked: {total}");
    total
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

/// `cuts` power cuts at random unit writes and erases, spread over 2, 3 and 4 pages.
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
            f.schedule_power_cut(PowerCut::AtWordWrite(rng.range(1, 200)));
            if rng.range(0, 3) == 0 {
                f.schedule_power_cut(PowerCut::AtErase(rng.range(1, 2)));
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
    // 83 slots of 12 bytes (8 of payload, a check word) fit a 1 KiB page after its
    // 20-byte header; every page is erased as the cursor enters it, the first one
    // included: 12,049 erases, 1.028 times the floor of 11,718.75 (1,000,000 x 12 B of
    // 1 KiB pages). Format 1's 16-byte slots took 15,874.
    assert_eq!(wear::<4>(), (12, 83, 12_049));
}

#[test]
fn wear_is_level_on_double_words() {
    // The payload's 8 bytes, then the check word in a double-word of its own: 16-byte
    // slots, 62 of them after a 24-byte header.
    assert_eq!(wear::<8>(), (16, 62, 16_130));
}

#[test]
fn wear_is_level_on_flash_words() {
    // A 32-byte unit for the payload and one for the check word: 64-byte slots, 15 after
    // a 64-byte header. An H7's 128 KiB sectors hold 2,047 of them.
    assert_eq!(wear::<32>(), (64, 15, 66_667));
}

/// A million commits on 4 pages: the slot size, the slots per page and the erases, after
/// checking that every page wore alike and that the erases stay within 5 % of the floor
/// (the commits' bytes over the bytes a page has after its header).
fn wear<const W: usize>() -> (usize, u32, u64) {
    const COMMITS: u32 = 1_000_000;
    let mut f = Flash::<W>::new();
    let (mut j, _) = open(&mut f, 4);
    append_until_cut(&mut f, &mut j, 0, COMMITS);
    let erases = f.page_erases();
    let (lo, hi) = (*erases.iter().min().unwrap(), *erases.iter().max().unwrap());
    let slot = Journal::<OffsetTotal>::slot_on::<Flash<W>>();
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
