//! The `wire` fuzz target's property (see `tests/support/wire.rs`) as a plain test: over
//! the checked-in corpus (frames a firmware sent under QEMU, cut, damaged and mixed with
//! garbage) and over 20,000 seeded streams of frames, garbage and flipped bits.

#[path = "support/wire.rs"]
mod wire;

use idem_board::wire::{Frame, MAX_ENCODED, Totals, encode};
use idem_sim::rng::SplitMix64;
use wire::check_stream;

#[test]
fn decoding_the_fuzz_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/wire");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("the corpus is checked in") {
        check_stream(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    println!("wire corpus inputs checked: {n}");
    assert!(n >= 6, "corpus has {n} inputs");
}

#[test]
fn decoding_seeded_streams() {
    let mut rng = SplitMix64::new(0x0057_12EA);
    let mut decoded = 0u64;
    for _ in 0..20_000 {
        let mut stream = Vec::new();
        for _ in 0..rng.range(0, 6) {
            match rng.range(0, 3) {
                0 => {
                    let frame = Frame::Progress {
                        offset: rng.next_u64() >> rng.range(0, 63),
                        totals: Totals {
                            naive: rng.next_u64() as i64,
                            offset: rng.range(0, 200) as i64,
                            atomic: -(rng.range(0, 200) as i64),
                        },
                    };
                    let mut out = [0u8; MAX_ENCODED];
                    stream.extend_from_slice(encode(&frame, &mut out).unwrap());
                    decoded += 1;
                }
                1 => {
                    for _ in 0..rng.range(0, 80) {
                        stream.push(rng.next_u64() as u8);
                    }
                }
                _ => {
                    if !stream.is_empty() {
                        let at = rng.range(0, stream.len() as u64 - 1) as usize;
                        stream[at] ^= 1 << rng.range(0, 7);
                    }
                }
            }
        }
        check_stream(&stream);
    }
    assert!(decoded > 10_000, "the streams held frames: {decoded}");
}
