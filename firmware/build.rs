//! Picks the board's memory.x, links with cortex-m-rt's link.x, and stamps the image with
//! an id: a build from changed sources is a new image, and starts from clean storage.
use std::time::{SystemTime, UNIX_EPOCH};
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let memory = if env::var_os("CARGO_FEATURE_V2").is_some() {
        "memory-v2.x"
    } else {
        "memory-v1.x"
    };
    fs::copy(memory, out.join("memory.x")).expect("the memory files are next to build.rs");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    let id = env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    println!("cargo:rustc-env=IDEM_IMAGE_ID={}", id as u32);
    for f in ["memory-v1.x", "memory-v2.x", "src", "../core/src"] {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
}
