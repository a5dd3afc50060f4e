//! The property shared by the `wire` fuzz target and the wire corpus test: the frame
//! decoder, fed any bytes, never panics, buffers at most one frame, returns only frames
//! whose CRC matched (each re-encodes and decodes to itself), counts every frame it
//! skipped, and resynchronises: after any garbage, a delimiter and a valid frame give
//! that frame.

use idem_board::wire::{Decoder, Frame, MAX_ENCODED, Totals, encode};

/// Checks the property on `data`; panics (a finding) when it does not hold.
pub fn check_stream(data: &[u8]) {
    let mut d = Decoder::new();
    let (mut frames, mut errors) = (0u32, 0u32);
    for &b in data {
        match d.push(b) {
            Some(Ok(f)) => {
                frames += 1;
                let mut out = [0u8; MAX_ENCODED];
                let bytes = encode(&f, &mut out).expect("a decoded frame re-encodes");
                let mut again = Decoder::new();
                let back: Vec<_> = bytes.iter().filter_map(|&b| again.push(b)).collect();
                assert_eq!(back, [Ok(f)], "a decoded frame round-trips");
            }
            Some(Err(_)) => errors += 1,
            None => {}
        }
    }
    assert_eq!(d.skipped, errors, "every skipped frame is counted");
    let _ = frames;
    // Resynchronisation: whatever came before, a delimiter and a valid frame decode.
    let probe = Frame::Done {
        boots: 3,
        totals: Totals {
            naive: 110,
            offset: 100,
            atomic: 100,
        },
        true_total: 100,
    };
    let mut out = [0u8; MAX_ENCODED];
    let bytes = encode(&probe, &mut out).expect("encodes");
    let _ = d.push(0);
    let got: Vec<_> = bytes.iter().filter_map(|&b| d.push(b)).collect();
    assert_eq!(
        got,
        [Ok(probe)],
        "resynchronised after {} bytes",
        data.len()
    );
}
