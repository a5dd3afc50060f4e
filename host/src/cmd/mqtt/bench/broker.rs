//! The bench's Mosquitto: on a free port of 127.0.0.1 only, its database in a folder of
//! its own, at the in-flight limit a round asks for. It dies with the bench, whatever
//! kills the bench: it runs under a shell, in a process group of its own, that reads the
//! bench's end of a pipe; when that end closes (the bench exits, returns an error, is
//! interrupted or is killed with SIGKILL), the shell kills Mosquitto, waits for it and
//! removes the folders the bench named (the broker's and the images').

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

/// The longest Mosquitto takes to listen.
const START_LIMIT: Duration = Duration::from_secs(10);

/// The watchdog: Mosquitto in the background; at the end of its standard input, kill it,
/// wait for it and remove the folders (`$2` onwards).
const WATCHDOG: &str = r#"m="$1"; shift; "$m" -c "$1/bench.conf" 2>"$1/stderr" & pid=$!
while read -r _; do :; done
kill "$pid" 2>/dev/null; wait "$pid"; rm -rf -- "$@""#;

/// A running Mosquitto.
pub(super) struct Mosquitto {
    /// The shell that owns it.
    child: Child,
    /// Its standard input: closed, the shell stops Mosquitto.
    pipe: Option<ChildStdin>,
    /// `127.0.0.1:PORT`.
    pub(super) addr: String,
}

/// The Mosquitto to run: `--mosquitto`, else `$IDEM_MOSQUITTO`, else Debian's
/// `/usr/sbin/mosquitto`, else `mosquitto` on `PATH`.
pub(super) fn find(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let debian = Path::new("/usr/sbin/mosquitto");
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("IDEM_MOSQUITTO").map(PathBuf::from))
        .or_else(|| debian.is_file().then(|| debian.to_path_buf()))
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("mosquitto"))
                .find(|p| p.is_file())
        });
    match path {
        Some(p) if p.is_file() => Ok(p),
        Some(p) => Err(idem_lab::error::usage(format!(
            "the Mosquitto broker {} does not exist",
            p.display()
        ))),
        None => Err(idem_lab::error::usage(
            "no Mosquitto broker found: pass --mosquitto PATH or set IDEM_MOSQUITTO (on Debian: apt-get install mosquitto)",
        )),
    }
}

/// The configuration: the README's queue and persistence settings, `inflight` in
/// flight, nothing saved while the bench runs.
fn config(port: u16, dir: &Path, inflight: u16) -> String {
    format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nautosave_interval 3600\nmax_inflight_messages {inflight}\nmax_queued_messages 0\nmessage_size_limit 256\nuser root\nlog_dest file {}/mosquitto.log\n",
        dir.display(),
        dir.display()
    )
}

impl Mosquitto {
    /// Starts `mosquitto` with `inflight` in flight, its folder `dir` (made here),
    /// removed with `also` when it stops; returns once it accepts connections.
    pub(super) fn start(
        mosquitto: &Path,
        dir: &Path,
        inflight: u16,
        also: &[&Path],
    ) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("bench.conf"), config(port, dir, inflight))?;
        let child = Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .arg(mosquitto)
            .arg(dir)
            .args(also)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow!("cannot start sh to run Mosquitto ({e})"))?;
        let mut broker = Self {
            child,
            pipe: None,
            addr: format!("127.0.0.1:{port}"),
        };
        broker.pipe = broker.child.stdin.take();
        let started = Instant::now();
        while TcpStream::connect(&broker.addr).is_err() {
            if idem_host::cleanup::stop_requested() {
                return Err(idem_host::cleanup::Interrupted.into());
            }
            if started.elapsed() > START_LIMIT || broker.child.try_wait()?.is_some() {
                let said = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
                bail!(
                    "Mosquitto did not listen on {} within {} s: {}",
                    broker.addr,
                    START_LIMIT.as_secs(),
                    said.lines().last().unwrap_or("it printed nothing")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(broker)
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.flush();
        }
        // The pipe closed: the shell stops Mosquitto and removes the folders. Bounded: a
        // shell that did not finish in 10 s is killed with its group.
        let started = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && started.elapsed() < START_LIMIT {
            std::thread::sleep(Duration::from_millis(10));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
                .status();
            let _ = self.child.wait();
        }
    }
}
