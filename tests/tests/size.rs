//! The board images stay within their flash and RAM targets (BENCHMARKS.md, "Firmware
//! size"): the demo's text within 16 KiB, idem-feed's (all six stores in one image) within
//! 24 KiB, static RAM within 4 KiB for both; idem-mqtt's (an MQTT subscriber with its
//! session in flash) within 48 KiB and 8 KiB. Sizes are counted as `llvm-size` counts them:
//! text is every allocated section that is not writable (vector table, code, read-only
//! data), static RAM every allocated writable one (`.data`, `.bss`).

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection, SectionFlags};

fn firmware_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware")
}

/// Text and static RAM of an ELF, in bytes.
fn sizes(elf: &Path) -> (u64, u64) {
    let bytes = std::fs::read(elf).expect("the image was built");
    let file = object::File::parse(&*bytes).expect("an ELF file");
    let (mut text, mut ram) = (0, 0);
    for section in file.sections() {
        let SectionFlags::Elf { sh_flags, .. } = section.flags() else {
            panic!("not an ELF section");
        };
        let alloc = sh_flags.contains(object::elf::SHF_ALLOC);
        let write = sh_flags.contains(object::elf::SHF_WRITE);
        match (alloc, write) {
            (true, false) => text += section.size(),
            (true, true) => ram += section.size(),
            _ => {}
        }
    }
    (text, ram)
}

#[test]
fn the_board_images_fit_their_targets() {
    // The board build (no QEMU pacing, no semihosting), as `cargo build --release` in
    // firmware/ makes it.
    let target_dir = firmware_dir().join("target").join("size");
    let status = Command::new(env!("CARGO"))
        .current_dir(firmware_dir())
        .args([
            "build",
            "--release",
            "--quiet",
            "--locked",
            "--bins",
            "--target-dir",
        ])
        .arg(&target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the board images failed");
    let release = target_dir.join("thumbv6m-none-eabi/release");
    for (image, text_limit, ram_limit) in [
        ("idem-firmware", 16 * 1024, 4096),
        ("idem-feed", 24 * 1024, 4096),
        // The MQTT subscriber keeps its session, packet buffer and held-back PUBLISHes
        // in a static (a PUBLISH of at most idem_board::modem::MAX_PACKET bytes).
        ("idem-mqtt", 48 * 1024, 8 * 1024),
    ] {
        let (text, ram) = sizes(&release.join(image));
        println!(
            "{image}: text {text} B (limit {text_limit}), static RAM {ram} B (limit {ram_limit})"
        );
        assert!(text > 4096, "{image}: {text} B of text is not an image");
        assert!(
            text <= text_limit,
            "{image}: text {text} B > {text_limit} B"
        );
        assert!(
            ram <= ram_limit,
            "{image}: static RAM {ram} B > {ram_limit} B"
        );
    }
    // The session lives in a static, so the figure counts it: more than the 4 bytes
    // of the images that keep their state on the stack.
    let (_, ram) = sizes(&release.join("idem-mqtt"));
    assert!(
        ram > 1024,
        "idem-mqtt: {ram} B of static RAM holds no session"
    );
}
