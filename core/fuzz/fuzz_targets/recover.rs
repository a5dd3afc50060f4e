//! Recovery over arbitrary flash bytes: see `core/tests/support/recovery.rs`.
#![no_main]

#[path = "../../tests/support/recovery.rs"]
mod recovery;

libfuzzer_sys::fuzz_target!(|data: &[u8]| recovery::check_input(data));
