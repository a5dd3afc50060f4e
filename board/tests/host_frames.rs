//! The `host` fuzz target's property (see `tests/support/host.rs`) as a plain test: the
//! host's parsing of the board's frames, driven by arbitrary device frames, never panics,
//! and grades a done frame only when it delivered every offset of the stream and the
//! device acknowledged them all durable. Over the checked-in corpus and 20,000 seeded
//! scripts, from honest devices to ones that lie at every step.

#[path = "support/host.rs"]
mod host;

use host::{Seen, check_script};
use idem_sim::rng::SplitMix64;

#[test]
fn the_host_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/host");
    let mut total = Seen::default();
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("the corpus is checked in") {
        let s = check_script(&std::fs::read(entry.unwrap().path()).unwrap());
        total.graded += s.graded;
        total.unverified += s.unverified;
        n += 1;
    }
    println!("host corpus inputs checked: {n}, {total:?}");
    assert!(n >= 3, "corpus has {n} inputs");
    assert_eq!((total.graded, total.unverified), (1, 1), "{total:?}");
}

#[test]
fn seeded_scripts_of_honest_and_lying_devices() {
    let mut rng = SplitMix64::new(0x0B0A_2D00);
    let mut total = Seen::default();
    for _ in 0..20_000 {
        // How often this device answers honestly: from always to one step in eight.
        let honest = rng.range(1, 8);
        let len = rng.range(1, 160) as usize;
        let mut script = vec![rng.next_u64() as u8];
        if rng.range(0, 3) == 0 {
            // A boot frame that holds the stream mid-way: a restarted host.
            let resume = rng.range(1, u64::from(script[0] % 40)) as u8;
            script.extend([0, 1, rng.next_u64() as u8, 1, 7, resume, 0]);
        }
        while script.len() < len {
            if rng.range(1, 8) <= honest {
                script.push(9); // the honest answer
            } else {
                script.push(rng.next_u64() as u8);
            }
        }
        let s = check_script(&script);
        total.graded += s.graded;
        total.unverified += s.unverified;
        total.refused += s.refused;
    }
    println!("20,000 scripts: {total:?}");
    // The property was not vacuous: honest runs were graded, restarted ones ended
    // unverified, and lies were refused (the rest ran out of script first).
    assert_eq!(
        total,
        Seen {
            graded: 7_611,
            unverified: 2_787,
            refused: 7_963
        }
    );
}
