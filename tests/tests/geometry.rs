//! A firmware author's crate whose flash driver programs 64 bytes at a time, which idem's
//! journal does not support: `cargo build` fails with one sentence, and rustc's note
//! names the flash type. The crate is written here, outside the workspace, and depends on
//! idem-core as an adopter's would (`default-features = false`).

use std::path::Path;
use std::process::Command;

const MAIN: &str = r#"
use embedded_storage::nor_flash::{ErrorType, NorFlash, NorFlashErrorKind, ReadNorFlash};
use idem_core::journal::{Journal, Region};

struct WideFlash;

impl ErrorType for WideFlash {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for WideFlash {
    const READ_SIZE: usize = 1;
    fn read(&mut self, _: u32, _: &mut [u8]) -> Result<(), Self::Error> {
        Ok(())
    }
    fn capacity(&self) -> usize {
        1 << 20
    }
}

impl NorFlash for WideFlash {
    const WRITE_SIZE: usize = 64;
    const ERASE_SIZE: usize = 4096;
    fn erase(&mut self, _: u32, _: u32) -> Result<(), Self::Error> {
        Ok(())
    }
    fn write(&mut self, _: u32, _: &[u8]) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn main() {
    let region = Region::of_pages::<WideFlash>(0, 2);
    let _ = Journal::<u32>::open(&mut WideFlash, region, 1);
}
"#;

#[test]
fn an_unsupported_write_size_fails_the_build_naming_the_flash() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("target").join("geometry-adopter");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let core = root.join("core").canonicalize().unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"wide-flash\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nidem-core = {{ path = {:?}, default-features = false }}\n\
             embedded-storage = \"0.3.2\"\n\n[workspace]\n",
            core.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), MAIN).unwrap();
    // The workspace's lock pins the same versions, so the build needs no network.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let out = Command::new(env!("CARGO"))
        .current_dir(&dir)
        .args(["build", "--offline", "--quiet", "--color", "never"])
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the build must fail:\n{stderr}");
    assert!(
        stderr.contains(
            "idem's journal needs a flash whose WRITE_SIZE is 1, 2, 4, 8, 16 or 32 bytes"
        ),
        "{stderr}"
    );
    assert!(
        // The journal's open step over the blocking flash, for the record type and the
        // flash the adopter named.
        stderr.contains("journal::blocking::open::<u32, WideFlash>"),
        "rustc's note names the flash type:\n{stderr}"
    );
}
