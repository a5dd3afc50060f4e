//! The bench's broker: tansu with its libSQL engine, on a free port of 127.0.0.1 only, in
//! a temporary directory of its own. It dies with the bench, whatever kills the bench: it
//! runs under a shell, in a process group of its own, that reads the bench's end of a
//! pipe; when that end closes (the bench returns, fails, is interrupted or is killed with
//! SIGKILL, which no handler sees), the shell kills tansu and the reader then running
//! (its process group, named in the file [`READER`](super::child::READER) of the bench's
//! work folder), waits for tansu and removes the folders the bench named (the broker's
//! and the runs').

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::child::{kill_group, wait_bounded};
use idem_lab::error::usage;

/// The longest tansu takes to listen.
const START_LIMIT: Duration = Duration::from_secs(20);

/// The longest the shell takes to stop tansu and remove the folders, once the pipe
/// closed; past it, its group is killed.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The watchdog: tansu (`$1`, listening on `$2`) in the background; at the end of its
/// standard input, the reader's group named in `$3/reader.pgid` and tansu killed, tansu
/// waited for, and the folders (`$3` onwards) removed.
const WATCHDOG: &str = r#"t="$1"; u="$2"; shift 2
"$t" broker --listener-url "$u" --advertised-listener-url "$u" --storage-engine sqlite://tansu.db & pid=$!
while read -r _; do :; done
g=$(cat "$1/reader.pgid" 2>/dev/null) && [ -n "$g" ] && kill -s KILL -- "-$g" 2>/dev/null
kill -s KILL "$pid" 2>/dev/null; wait "$pid"; rm -rf -- "$@""#;

/// A running tansu.
pub(super) struct Tansu {
    /// The shell that owns tansu, the leader of their process group.
    child: Child,
    /// Its standard input: closed, the shell stops tansu and removes the folders.
    pipe: Option<ChildStdin>,
    /// Where tansu listens: `127.0.0.1:PORT`.
    pub(super) brokers: String,
    /// The broker's working directory (its `tansu.db` and log).
    dir: tempfile::TempDir,
}

/// The tansu to run: `--tansu`, else `$IDEM_TANSU`, else `tansu` on `PATH`.
pub(super) fn find_tansu(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("IDEM_TANSU").map(PathBuf::from))
        .or_else(|| on_path("tansu"))
        .ok_or_else(|| {
            usage("no tansu broker found: pass --tansu PATH or set IDEM_TANSU (tansu 0.6.0, `cargo install tansu --version 0.6.0 --locked --features libsql`)")
        })?;
    if !path.is_file() {
        return Err(usage(format!(
            "the tansu broker {} does not exist",
            path.display()
        )));
    }
    Ok(path)
}

/// `name` in a directory of `PATH`.
pub(super) fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Tansu {
    /// Starts `tansu broker` on a free port of 127.0.0.1 with `sqlite://tansu.db` (the
    /// path is relative to the broker's working directory: its temporary one); `work`,
    /// the bench's work folder, is removed with the broker's when it stops. Returns once
    /// it accepts connections.
    pub(super) fn start(tansu: &Path, work: &Path) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = tempfile::Builder::new()
            .prefix("idem-bench-tansu-")
            .tempdir()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("tansu.log"))?;
        let mut child = Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .arg(tansu)
            .arg(&url)
            .arg(work)
            .arg(dir.path())
            // Nothing of the caller's reaches it through its environment variables.
            .env_remove("SCHEMA_REGISTRY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .current_dir(dir.path())
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start sh to run tansu ({e})"))?;
        let pipe = child.stdin.take();
        let mut broker = Self {
            child,
            pipe,
            brokers: format!("127.0.0.1:{port}"),
            dir,
        };
        let started = Instant::now();
        while TcpStream::connect(&broker.brokers).is_err() {
            if let Some(status) = broker.child.try_wait()? {
                anyhow::bail!(
                    "tansu exited at start ({status}): {}",
                    broker.last_log_line()
                );
            }
            if idem_host::cleanup::stop_requested() {
                return Err(idem_host::cleanup::Interrupted.into());
            }
            anyhow::ensure!(
                started.elapsed() < START_LIMIT,
                "tansu did not listen on {} within {} s: {}",
                broker.brokers,
                START_LIMIT.as_secs(),
                broker.last_log_line()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(broker)
    }

    /// The last line tansu printed, for an error.
    fn last_log_line(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tansu.log"))
            .ok()
            .and_then(|l| l.lines().last().map(str::to_string))
            .unwrap_or_else(|| "it printed nothing".into())
    }

    /// `e`, or that tansu stopped listening (and what it said last), when it did.
    pub(super) fn explain(&mut self, e: anyhow::Error) -> anyhow::Error {
        if TcpStream::connect(&self.brokers).is_ok() {
            return e;
        }
        anyhow::anyhow!(
            "tansu no longer listens on {} ({}), so {e:#}",
            self.brokers,
            self.last_log_line()
        )
    }

    /// tansu's `--version`, e.g. `tansu 0.6.0`.
    pub(super) fn version(tansu: &Path) -> anyhow::Result<String> {
        let mut child = Command::new(tansu)
            .arg("--version")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| usage(format!("cannot run {} ({e})", tansu.display())))?;
        wait_bounded(&mut child, Duration::from_secs(10), "tansu --version")?;
        let out = child.wait_with_output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.flush();
        }
        // The pipe closed: the shell stops tansu and removes the folders. Bounded: a
        // shell that did not finish is killed with its group.
        let started = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && started.elapsed() < STOP_LIMIT {
            std::thread::sleep(Duration::from_millis(10));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            kill_group(&mut self.child);
        }
    }
}
