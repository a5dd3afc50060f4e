//! Temporary files removed on every path: on success, on error (a guard's drop) and on
//! SIGINT, SIGTERM or SIGHUP (a handler installed once in `main`). SIGKILL cannot be
//! caught; what it leaves is named so `ls` shows whose it is (`NAME.tmp.PID`).
//!
//! A command that owns child processes (`chaos`) asks to handle the signal itself: the
//! handler then only raises a flag, and the command kills its child, removes its files
//! and exits.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static STOP: AtomicBool = AtomicBool::new(false);
static DEFERRED: AtomicBool = AtomicBool::new(false);

/// The exit status of a run stopped by a signal (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// A run stopped by a signal; `main` exits with [`INTERRUPTED`].
#[derive(Debug, thiserror::Error)]
#[error("interrupted by a signal: the running consume was killed and temporary files removed")]
pub struct Interrupted;

/// Installs the signal handler; call once, first thing in `main`.
pub fn install() {
    // Failing to install it (another handler) leaves the default behaviour: no cleanup,
    // never a wrong result.
    let _ = ctrlc::set_handler(|| {
        STOP.store(true, Ordering::SeqCst);
        if !DEFERRED.load(Ordering::SeqCst) {
            remove_all();
            std::process::exit(i32::from(INTERRUPTED));
        }
    });
}

/// From now on the handler only raises the flag; the caller polls [`stop_requested`].
pub fn defer_signals() {
    DEFERRED.store(true, Ordering::SeqCst);
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn remove_all() {
    if let Ok(files) = FILES.lock() {
        for f in files.iter() {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// A file removed when the guard drops, unless [`Temp::keep`] is called first, and
/// when a signal stops the process.
#[derive(Debug)]
pub struct Temp {
    path: PathBuf,
    armed: bool,
}

impl Temp {
    /// Registers `path` (which may not exist yet) for removal.
    pub fn new(path: &Path) -> Self {
        if let Ok(mut files) = FILES.lock() {
            files.push(path.to_owned());
        }
        Self {
            path: path.to_owned(),
            armed: true,
        }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file is no longer temporary (it was renamed into place): do not remove it.
    pub fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Ok(mut files) = FILES.lock() {
            files.retain(|f| f != &self.path);
        }
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, then renamed
/// over `path`. A cut or full disk leaves `path` as it was, never half written.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let name = path.file_name().map_or_else(
        || std::ffi::OsString::from("out"),
        std::ffi::OsStr::to_os_string,
    );
    let mut tmp_name = name;
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = Temp::new(&path.with_file_name(tmp_name));
    let written = std::fs::File::create(tmp.path()).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    written
        .and_then(|()| std::fs::rename(tmp.path(), path))
        .map_err(|e| {
            anyhow::anyhow!(
                "writing {}: {e}; the file was left as it was",
                path.display()
            )
        })?;
    tmp.keep();
    Ok(())
}
