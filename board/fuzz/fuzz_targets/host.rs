//! The host's end of the feed protocol over arbitrary device frames: see
//! `board/tests/support/host.rs`.
#![no_main]

#[path = "../../tests/support/host.rs"]
mod host;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    host::check_script(data);
});
