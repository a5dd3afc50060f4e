//! The files a person names on the command line: what kind of file a path is, checked
//! before it is opened, and writing one whole or not at all. Every command that opens a
//! user's path for idem's own data (a flash image, a picture) goes through here, so a
//! named pipe never blocks a read, a device or a directory is never replaced by a write,
//! and a temporary file is never one that idem did not create. What a file holds is the
//! caller's business (`image` reads images); event files and serial ports, which may
//! be pipes and devices by design, are opened by their own modules.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::Path;

use crate::cleanup;
use idem_lab::error::usage;

/// What a file that is not a regular file is, in words.
fn kind(m: &Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// The one sentence for a path that is not a regular file: `X is a named pipe (FIFO),
/// not a flash image; it was left untouched`.
fn refusal(path: &Path, m: &Metadata, what: &str) -> Option<anyhow::Error> {
    kind(m).map(|k| {
        let k = if k.starts_with("not ") {
            k.to_string()
        } else {
            format!("{k}, not {what}")
        };
        usage(format!("{} is {k}; it was left untouched", path.display()))
    })
}

/// Checks what `path` is without opening it (a symbolic link is followed): `Ok(None)`
/// when nothing is there, `Ok(Some(_))` for a regular file, and one sentence (exit 2)
/// naming anything else (`what` says what was expected: "a flash image").
pub fn regular_or_missing(path: &Path, what: &str) -> anyhow::Result<Option<Metadata>> {
    match std::fs::metadata(path) {
        Ok(m) => match refusal(path, &m, what) {
            Some(e) => Err(e),
            None => Ok(Some(m)),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    }
}

/// Opens the regular file at `path` to read (and to write when `write`), after checking
/// its type, so a named pipe is refused instead of blocking the open. A missing file is
/// "X does not exist" (exit 2). The file opened is checked again (`fstat`), so a path
/// swapped for another kind of file between the check and the open is refused too.
pub fn open_regular(path: &Path, write: bool, what: &str) -> anyhow::Result<File> {
    let name = path.display();
    let Some(before) = regular_or_missing(path, what)? else {
        return Err(usage(format!("{name} does not exist")));
    };
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                usage(format!("{name} does not exist"))
            } else {
                anyhow::anyhow!("opening {name}: {e}")
            }
        })?;
    let opened = file
        .metadata()
        .map_err(|e| anyhow::anyhow!("reading {name}: {e}"))?;
    if let Some(e) = refusal(path, &opened, what) {
        return Err(e);
    }
    if (opened.dev(), opened.ino()) != (before.dev(), before.ino()) {
        return Err(anyhow::anyhow!(
            "{name} was replaced while idem opened it; it was left untouched"
        ));
    }
    Ok(file)
}

/// Checks that idem may write a file at `path`: nothing is there yet, or a regular file
/// that the write will replace. A directory, a named pipe or a device (`/dev/full`) is
/// refused in one sentence (exit 2) and never replaced; so is a name that ends with `/`.
pub fn check_target(path: &Path) -> anyhow::Result<()> {
    let there = regular_or_missing(path, "a regular file")?;
    if there.is_none() && path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(usage(format!(
            "{} ends with /, so it names a directory, not a file; nothing was written",
            path.display()
        )));
    }
    Ok(())
}

/// The folder a file at `path` lives in (`.` for a bare name).
pub fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new temporary file beside `path`, created exclusively (`O_EXCL`) under a name no
/// one can predict (`NAME.XXXXXXXX.idem-tmp`, so `ls` shows whose it is), and registered
/// with [`cleanup`] so a signal removes it. Dropping it removes it; only a SIGKILL
/// leaves it behind, and then idem never removes it itself, since nothing proves it is
/// idem's.
pub fn temporary_beside(path: &Path) -> std::io::Result<Temporary> {
    let name = path.file_name().map_or_else(
        || std::ffi::OsString::from("idem"),
        std::ffi::OsStr::to_os_string,
    );
    let mut prefix = name;
    prefix.push(".");
    let file = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".idem-tmp")
        .rand_bytes(8)
        .tempfile_in(folder(path))?;
    let registered = cleanup::Registered::new(file.path());
    Ok(Temporary {
        file,
        _registered: registered,
    })
}

/// A temporary file of this process: see [`temporary_beside`].
#[derive(Debug)]
pub struct Temporary {
    // Dropped first: the file is removed before it leaves the signal handler's list.
    file: tempfile::NamedTempFile,
    _registered: cleanup::Registered,
}

impl Temporary {
    /// The open file.
    pub fn file(&mut self) -> &mut File {
        self.file.as_file_mut()
    }

    /// Renames it over `path` (replacing a regular file there).
    pub fn persist(self, path: &Path) -> std::io::Result<()> {
        let Self { file, _registered } = self;
        file.persist(path).map(drop).map_err(|e| e.error)
    }

    /// Links it into place at `path` only if nothing is there: `Ok(false)` when a file
    /// already was (this one is then removed, the other left as it was).
    pub fn persist_new(self, path: &Path) -> std::io::Result<bool> {
        let Self { file, _registered } = self;
        match file.persist_noclobber(path) {
            Ok(_) => Ok(true),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e.error),
        }
    }
}

impl std::io::Write for Temporary {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file().flush()
    }
}

/// Writes `bytes` to `path` whole: a temporary file beside it (see
/// [`temporary_beside`]), synced, then renamed over `path`. A full disk or a cut leaves
/// `path` as it was, never half written; a target that is not a regular file is
/// refused before anything is written.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    check_target(path)?;
    let name = path.display();
    let mut tmp = temporary_beside(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            usage(format!(
                "{name}: the folder {} does not exist; nothing was written",
                folder(path).display()
            ))
        } else {
            anyhow::anyhow!("writing {name}: {e}; the file was left as it was")
        }
    })?;
    tmp.file()
        .write_all(bytes)
        .and_then(|()| tmp.file().sync_all())
        .and_then(|()| tmp.persist(path))
        .map_err(|e| anyhow::anyhow!("writing {name}: {e}; the file was left as it was"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_is_removed_unless_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("p.svg");
        let tmp = temporary_beside(&target).unwrap();
        let name = tmp
            .file
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("p.svg.") && name.ends_with(".idem-tmp"),
            "{name}"
        );
        let at = tmp.file.path().to_owned();
        drop(tmp);
        assert!(!at.exists());
        write_atomically(&target, b"one").unwrap();
        write_atomically(&target, b"two").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let tmp = temporary_beside(&target).unwrap();
        assert!(
            !tmp.persist_new(&target).unwrap(),
            "an existing file is kept"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["p.svg"]);
    }

    #[test]
    fn what_is_not_a_regular_file_is_named() {
        let e = check_target(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/dev/null is a character device, not a regular file; it was left untouched"
        );
        let e = open_regular(Path::new("/"), false, "a flash image")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/ is a directory, not a flash image; it was left untouched"
        );
        let e = check_target(Path::new("x/")).unwrap_err().to_string();
        assert_eq!(
            e,
            "x/ ends with /, so it names a directory, not a file; nothing was written"
        );
    }
}
