//! `idem device qemu`: the feed firmware under QEMU, fed through its serial socket, with
//! resets at seeded instants through QMP.

use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_board::feed::BATCH;
use idem_board::timing::QEMU_EFFECT_US;
use idem_core::log::Offset;
use idem_sim::rng::SplitMix64;

use super::Qemu;
use super::feed::{POLL, feed};
use super::report::report;
use idem_lab::error::usage;

pub(super) struct QemuRun {
    child: Child,
    /// A folder of this run's own (created exclusively, under a name nobody can
    /// predict), removed with its sockets after QEMU is stopped.
    _dir: tempfile::TempDir,
}

impl Drop for QemuRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for a unix socket QEMU creates.
fn connect_socket(path: &Path, child: &mut Child) -> anyhow::Result<UnixStream> {
    let started = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                if let Some(status) = child.try_wait()? {
                    anyhow::bail!("qemu-system-arm exited ({status}) before it opened its sockets");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => anyhow::bail!("QEMU's socket {}: {e}", path.display()),
        }
    }
}

/// The ELF of the firmware's `bin`: `given`, or built from firmware/ with the qemu
/// feature.
pub(super) fn firmware_elf(bin: &str, given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(elf) = given {
        if !elf.is_file() {
            return Err(usage(format!("{} does not exist", elf.display())));
        }
        // QEMU would only say so by closing the board's socket.
        let mut magic = [0u8; 4];
        let is_elf = std::fs::File::open(elf)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok_and(|()| magic == *b"\x7fELF");
        if !is_elf {
            return Err(usage(format!("{} is not an ELF file", elf.display())));
        }
        return Ok(elf.to_path_buf());
    }
    let dir = Path::new("firmware");
    if !dir.join("Cargo.toml").is_file() {
        return Err(usage(
            "run from idem's source tree (firmware/ builds the image), or give --elf FILE",
        ));
    }
    let status = Command::new("cargo")
        .current_dir(dir)
        .args(["build", "--release", "--quiet", "--bin", bin])
        .args(["--features", "qemu", "--target-dir"])
        // Relative to firmware/, where cargo runs.
        .arg("target/feed-qemu")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .status()
        .context("running cargo to build the firmware")?;
    if !status.success() {
        anyhow::bail!("building the {bin} firmware failed");
    }
    Ok(dir
        .join("target/feed-qemu/thumbv6m-none-eabi/release")
        .join(bin))
}

impl Qemu {
    pub(super) fn run(self) -> anyhow::Result<ExitCode> {
        let stream = self.stream.load()?;
        let events = stream.events.len() as u64;
        // Targets leave the last batch alone (when the stream has more than one), so each
        // reset lands before the board's done frame.
        let span = if events > BATCH as u64 {
            events - BATCH as u64
        } else {
            events
        };
        if u64::from(self.resets) > span {
            return Err(usage(format!(
                "--resets {}: at most {span} for this stream (one per offset, the last batch's aside)",
                self.resets
            )));
        }
        let elf = firmware_elf("idem-feed", self.elf.as_deref())?;
        let (run, qmp, mut link) = start(&elf)?;
        let finished = Arc::new(AtomicBool::new(false));
        let landed = Arc::new(AtomicU32::new(0));
        let reset = resetter(qmp, &finished, &landed);
        let mut rng = SplitMix64::new(self.seed);
        let mut targets = reset_targets(&mut rng, self.resets, 0, span - 1)
            .into_iter()
            .peekable();
        let mut on_batch = |from: Offset, len: u64| {
            // One reset a batch: the next target, if this batch holds it, or at once if
            // the stream already passed it (two shared a batch and the first reset
            // landed after that batch's checkpoint).
            if let Some(&t) = targets.peek()
                && t < from + len
            {
                targets.next();
                let delay = Duration::from_micros(
                    t.saturating_sub(from) * QEMU_EFFECT_US
                        + rng.range(QEMU_EFFECT_US / 10, QEMU_EFFECT_US * 9 / 10),
                );
                let reset = reset.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    reset();
                });
            }
        };
        if std::io::stdin().is_terminal() && !self.stream.json {
            reset_by_hand(reset.clone());
        }
        let result = feed(
            &mut link,
            &stream,
            &self.stream,
            &mut on_batch,
            self.stream.json,
        );
        finished.store(true, Ordering::SeqCst);
        let seen = result?;
        let landed = landed.load(Ordering::SeqCst);
        drop(run);
        report(&stream, &self.stream, &seen, Some(landed))
    }
}

/// On a terminal: `r` then Enter resets the board.
fn reset_by_hand(reset: impl Fn() + Send + 'static) {
    eprintln!("board: type r then Enter to reset it");
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if line.trim() == "r" {
                reset();
            }
        }
    });
}

/// Starts QEMU on `elf` with its serial port and QMP on sockets of a folder of its own,
/// and connects to both: the run, QMP (capabilities negotiated, replies drained) and the
/// board's serial link.
pub(super) fn start(elf: &Path) -> anyhow::Result<(QemuRun, UnixStream, UnixStream)> {
    let dir = tempfile::Builder::new()
        .prefix("idem-qemu-")
        .tempdir()
        .context("creating a temporary folder for QEMU's sockets")?;
    let (uart, qmp) = (dir.path().join("uart.sock"), dir.path().join("qmp.sock"));
    let child = Command::new("qemu-system-arm")
        .args(["-M", "microbit", "-display", "none", "-monitor", "none"])
        .arg("-chardev")
        .arg(format!(
            "socket,id=uart,path={},server=on,wait=off",
            uart.display()
        ))
        .args(["-serial", "chardev:uart"])
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", qmp.display()))
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            usage(format!(
                "cannot start qemu-system-arm ({e}); install it (apt-get install qemu-system-arm)"
            ))
        })?;
    let mut run = QemuRun { child, _dir: dir };
    let mut qmp = connect_socket(&qmp, &mut run.child)?;
    let link = connect_socket(&uart, &mut run.child)?;
    link.set_read_timeout(Some(POLL))?;
    qmp.write_all(b"{\"execute\": \"qmp_capabilities\"}\n")?;
    let mut replies = qmp.try_clone()?;
    std::thread::spawn(move || std::io::copy(&mut replies, &mut std::io::sink()));
    Ok((run, qmp, link))
}

/// A reset through QMP's system_reset, until the feed has `finished`; `landed` counts
/// the resets sent.
pub(super) fn resetter(
    qmp: UnixStream,
    finished: &Arc<AtomicBool>,
    landed: &Arc<AtomicU32>,
) -> impl Fn() + Clone + Send + 'static {
    let qmp = Arc::new(Mutex::new(qmp));
    let landed = Arc::clone(landed);
    let finished = Arc::clone(finished);
    move || {
        if !finished.load(Ordering::SeqCst)
            && let Ok(mut q) = qmp.lock()
            && q.write_all(b"{\"execute\": \"system_reset\"}\n").is_ok()
        {
            landed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The resets: at seeded offsets spread over the stream, each fired while the board
/// applies the batch that holds its offset, about when it applies that offset (the QEMU
/// build takes 5 ms an effect, as a board's flash would): after some effects of the
/// batch, before its ack. Each target lies past the one before, so the stream moves on
/// between resets. Drawn in `low..=high`, distinct, sorted (`idem device mqtt` draws
/// its counts of PUBLISHes the same way).
pub(super) fn reset_targets(rng: &mut SplitMix64, resets: u32, low: u64, high: u64) -> Vec<Offset> {
    let mut targets: Vec<Offset> = Vec::new();
    while targets.len() < resets as usize {
        let t = rng.range(low, high);
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    targets.sort_unstable();
    targets
}
