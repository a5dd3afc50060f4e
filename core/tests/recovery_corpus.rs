//! The `recover` fuzz target's property (see `tests/support/recovery.rs`) as a plain
//! test: over the checked-in corpus and over 20,000 seeded images made by corrupting
//! real journal images (torn bytes, flipped bits, zeroed and erased runs).

#[path = "support/recovery.rs"]
mod recovery;

use idem_core::journal::Journal;
use idem_core::testing::rng::SplitMix64;
use recovery::{OffsetTotal, REGION, TAG, check_input, check_recovery};

#[test]
fn recovery_over_the_fuzz_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/recover");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("the corpus is checked in") {
        check_input(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    println!("corpus inputs checked: {n}");
    assert!(n >= 20, "corpus has {n} inputs");
}

#[test]
fn recovery_over_corrupted_journal_images() {
    let mut rng = SplitMix64::new(0x00C0_FFEE);
    const IMAGES: u32 = 20_000;
    for _ in 0..IMAGES {
        let mut flash = recovery::FuzzFlash::new();
        let (mut j, _) = Journal::<OffsetTotal>::open(&mut flash, REGION, TAG).unwrap();
        for i in 0..rng.range(0, 60) as u32 {
            j.append(
                &mut flash,
                &OffsetTotal {
                    offset: i,
                    total: i as i32,
                },
            )
            .unwrap();
        }
        let mut image: Vec<u8> = flash.pages().iter().flatten().copied().collect();
        for _ in 0..rng.range(1, 6) {
            let at = rng.range(0, image.len() as u64 - 1) as usize;
            let len = rng.range(1, 24) as usize;
            let end = (at + len).min(image.len());
            match rng.range(0, 3) {
                0 => image[at] ^= 1 << rng.range(0, 7),
                1 => image[at..end].fill(0),
                2 => image[at..end].fill(0xFF),
                _ => image[at..end]
                    .iter_mut()
                    .for_each(|b| *b = rng.next_u64() as u8),
            }
        }
        check_recovery(&image);
    }
    println!("corrupted images checked: {IMAGES} (seed 0xC0FFEE)");
}
