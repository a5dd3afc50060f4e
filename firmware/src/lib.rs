//! idem on a BBC micro:bit: the board glue the images share (the NVMC flash driver, the
//! UART, the timer, the host's link with its one receive loop, the stack's high-water
//! mark), and the RNG the receiving images draw their id key from. The images are
//! `idem-firmware` (the DDIA demo, src/main.rs), `idem-feed` (a consumer of the stream
//! the host feeds it, src/bin/feed.rs) and `idem-mqtt` (an MQTT subscriber whose modem
//! is the host, src/bin/mqtt.rs); every rule they follow is `idem_core`'s.
#![no_std]

pub mod link;
pub mod nvmc;
pub mod rng;
pub mod stack;
pub mod timer;
pub mod uart;

/// This image's id, stamped by build.rs: storage written by another image is erased.
pub const IMAGE_ID: u32 = parse(env!("IDEM_IMAGE_ID"));

const fn parse(s: &str) -> u32 {
    let b = s.as_bytes();
    let (mut i, mut n) = (0, 0u32);
    while i < b.len() {
        n = n.wrapping_mul(10).wrapping_add((b[i] - b'0') as u32);
        i += 1;
    }
    n
}
