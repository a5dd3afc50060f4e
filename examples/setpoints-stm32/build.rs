//! Links with cortex-m-rt's link.x and defmt.x, and the chip's memory map: memory-l476.x
//! or memory-h743.x, as the feature chooses.
use std::{env, fs, path::PathBuf};

fn main() {
    let map = match (
        env::var_os("CARGO_FEATURE_L476"),
        env::var_os("CARGO_FEATURE_H743"),
    ) {
        (Some(_), None) => "memory-l476.x",
        (None, Some(_)) => "memory-h743.x",
        _ => {
            eprintln!("build with exactly one chip's feature: --features l476 or --features h743");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::copy(map, out.join("memory.x")).expect("the memory maps are next to build.rs");
    println!("cargo:rustc-link-search={}", out.display());
    for script in ["-Tlink.x", "-Tdefmt.x"] {
        println!("cargo:rustc-link-arg-bins={script}");
    }
    println!("cargo:rerun-if-changed={map}");
}
