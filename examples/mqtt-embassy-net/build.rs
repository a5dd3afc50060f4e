//! The nRF52840 binary links with cortex-m-rt's link.x, defmt's defmt.x and the chip's
//! memory map.
use std::{env, fs, path::PathBuf};

fn main() {
    if env::var_os("CARGO_FEATURE_BOARD").is_some() {
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        fs::copy("memory.x", out.join("memory.x")).expect("memory.x is next to build.rs");
        println!("cargo:rustc-link-search={}", out.display());
        for script in ["--nmagic", "-Tlink.x", "-Tdefmt.x"] {
            println!("cargo:rustc-link-arg-bins={script}");
        }
    }
    println!("cargo:rerun-if-changed=memory.x");
}
