//! The frame decoder over arbitrary bytes: see `board/tests/support/wire.rs`.
#![no_main]

#[path = "../../tests/support/wire.rs"]
mod wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::check_stream(data));
