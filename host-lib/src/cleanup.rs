//! Temporary files removed on every path: on success, on error (a guard's drop) and on
//! SIGINT, SIGTERM or SIGHUP (a handler installed once in `main`). Only paths this
//! process registered are ever removed. SIGKILL cannot be caught: what it leaves is
//! named so `ls` shows whose it is (`NAME.XXXXXXXX.idem-tmp`, see `files`), and idem
//! never removes such a file later, since nothing proves that it made it.
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

/// A path the signal handler removes while the guard lives; dropping the guard only
/// takes it off the list (the file's owner, such as a `tempfile::NamedTempFile`,
/// removes it itself).
#[derive(Debug)]
pub struct Registered {
    path: PathBuf,
}

impl Registered {
    /// Registers `path` for removal by the signal handler.
    pub fn new(path: &Path) -> Self {
        if let Ok(mut files) = FILES.lock() {
            files.push(path.to_owned());
        }
        Self {
            path: path.to_owned(),
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut files) = FILES.lock()
            && let Some(i) = files.iter().position(|f| f == &self.path)
        {
            files.swap_remove(i);
        }
    }
}
