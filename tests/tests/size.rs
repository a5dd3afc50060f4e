//! The board images stay within their flash and RAM targets (BENCHMARKS.md, "Firmware
//! size"): the demo's text within 16 KiB, idem-feed's (all six stores in one image) within
//! 27 KiB, static RAM within 4 KiB for both; idem-mqtt's (an MQTT subscriber with its
//! session in flash) within 51 KiB and 8 KiB. Sizes are counted as `llvm-size` counts them:
//! text is every allocated section that is not writable (vector table, code, read-only
//! data), static RAM every allocated writable one (`.data`, `.bss`). Each image's text is
//! printed against the figure BENCHMARKS.md records for it; a difference is printed, not
//! failed (the limits fail), so the table can be brought up to date.

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

/// The text of `image`'s micro:bit v1 board build as BENCHMARKS.md's "Firmware size"
/// table records it: the row whose cells are the image's name in backticks, `v1 board`
/// and the text (`24,320 B`).
fn recorded(benchmarks: &str, image: &str) -> Option<u64> {
    let section = benchmarks
        .split("\n## ")
        .find(|s| s.starts_with("Firmware size"))?;
    let name = format!("`{image}`");
    section.lines().find_map(|line| {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        match cells[..] {
            ["", first, "v1 board", text, ..] if first == name => {
                text.strip_suffix(" B")?.replace(',', "").parse().ok()
            }
            _ => None,
        }
    })
}

/// `n` with a comma every three digits, as BENCHMARKS.md writes it.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn the_recorded_figures_are_read_from_the_firmware_table() {
    let page = "# Benchmarks\n\n## Other\n\n| `idem-feed` | v1 board | 1 B | 1 B |\n\n\
                ## Firmware size (`cargo test`)\n\n| image | build | text | static RAM |\n\
                |---|---|---:|---:|\n| `idem-feed` | v1 QEMU | 24,376 B | 4 B |\n\
                | `idem-feed` | v1 board | 24,320 B | 4 B |\n| `idem-mqtt` | v1 board | 936 B | 1,156 B |\n";
    assert_eq!(recorded(page, "idem-feed"), Some(24_320));
    assert_eq!(recorded(page, "idem-mqtt"), Some(936));
    assert_eq!(recorded(page, "idem-firmware"), None);
    assert_eq!(grouped(24_320), "24,320");
    assert_eq!(grouped(936), "936");
    assert_eq!(grouped(1_234_567), "1,234,567");
}

#[test]
fn the_board_images_fit_their_targets() {
    let benchmarks = std::fs::read_to_string(firmware_dir().join("../BENCHMARKS.md"))
        .expect("BENCHMARKS.md is read");
    // The board build (no QEMU pacing, no semihosting), as `cargo build --release` in
    // firmware/ makes it, in the same place: after the quick stage's firmware step this
    // build has nothing left to do. (The QEMU tests build into directories of their own
    // under firmware/target.)
    let target_dir = firmware_dir().join("target");
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
        // 24 KiB until journal format 3 (24,336 B in format 2, 26,868 B in format 3:
        // its windowed reads, records at their encoded size and both formats read).
        ("idem-feed", 27 * 1024, 4096),
        // The MQTT subscriber keeps its session, packet buffer and held-back PUBLISHes
        // in a static (a PUBLISH of at most idem_board::modem::MAX_PACKET bytes). 48 KiB
        // until the receiver's tombstones (47,420 B before them, 49,920 B with them), 49
        // KiB until journal format 3 (49,884 B before it, 51,980 B with it).
        ("idem-mqtt", 51 * 1024, 8 * 1024),
    ] {
        let (text, ram) = sizes(&release.join(image));
        let Some(before) = recorded(&benchmarks, image) else {
            panic!("BENCHMARKS.md's \"Firmware size\" table has no v1 board row for {image}");
        };
        let change = match text.cmp(&before) {
            std::cmp::Ordering::Equal => "the same".to_string(),
            std::cmp::Ordering::Greater => format!("+{} B", grouped(text - before)),
            std::cmp::Ordering::Less => format!("-{} B", grouped(before - text)),
        };
        println!(
            "{image}: text {} B, BENCHMARKS.md {} B: {change} (limit {}); static RAM {} B (limit {})",
            grouped(text),
            grouped(before),
            grouped(text_limit),
            grouped(ram),
            grouped(ram_limit),
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
