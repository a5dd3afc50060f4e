//! The bench's broker: tansu with its libSQL engine, on a free port of 127.0.0.1 only, in
//! a temporary directory of its own; dropped, it is killed and the directory removed.
//! Its lifetime is bounded even if the bench itself is killed: it runs under
//! `timeout -s KILL`, in a process group of its own that the bench kills whole.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::child::{kill_group, wait_bounded};
use crate::error::usage;

/// The longest tansu takes to listen.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A running tansu.
pub(super) struct Tansu {
    /// `timeout`, with tansu its child, both in the process group `timeout`'s id names.
    child: Child,
    /// Where tansu listens: `127.0.0.1:PORT`.
    pub(super) brokers: String,
    /// The broker's working directory (its `tansu.db`), removed on drop.
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
    /// path is relative to the broker's working directory: its temporary one), killed
    /// after `lifetime` at the latest; returns once it accepts connections.
    pub(super) fn start(tansu: &Path, lifetime: Duration) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = tempfile::Builder::new()
            .prefix("idem-bench-tansu-")
            .tempdir()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("tansu.log"))?;
        let child = Command::new("timeout")
            .args(["-s", "KILL", &format!("{}s", lifetime.as_secs().max(1))])
            .arg(tansu)
            .args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            // Nothing of the caller's reaches it through its environment variables.
            .env_remove("SCHEMA_REGISTRY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .current_dir(dir.path())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start `timeout` to run tansu ({e})"))?;
        let mut broker = Self {
            child,
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
            if crate::cleanup::stop_requested() {
                return Err(crate::cleanup::Interrupted.into());
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

    /// `e`, or that tansu exited (and what it said last), when it did.
    pub(super) fn explain(&mut self, e: anyhow::Error) -> anyhow::Error {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                anyhow::anyhow!(
                    "tansu exited ({status}: {}), so {e:#}",
                    self.last_log_line()
                )
            }
            _ => e,
        }
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
        kill_group(&mut self.child);
    }
}
