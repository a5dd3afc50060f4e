//! Links with cortex-m-rt's link.x, embassy-rp's link-rp.x (the second-stage
//! bootloader's section) and defmt.x, and the Pico's memory map (memory.x).
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::copy("memory.x", out.join("memory.x")).expect("memory.x is next to build.rs");
    println!("cargo:rustc-link-search={}", out.display());
    for script in ["--nmagic", "-Tlink.x", "-Tlink-rp.x", "-Tdefmt.x"] {
        println!("cargo:rustc-link-arg-bins={script}");
    }
    println!("cargo:rerun-if-changed=memory.x");
}
