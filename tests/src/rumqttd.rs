//! A second MQTT broker from another codebase, rumqttd 0.20 (crates.io), for the tests
//! of idem's MQTT consumer: idem depends on the protocol, not on one broker's habits.
//!
//! [`Rumqttd`] runs rumqttd with `tests/rumqttd/idem.toml.in` on two free ports of
//! 127.0.0.1 only, MQTT 3.1.1 on one and MQTT 5 on the other (rumqttd speaks one protocol
//! a listener), its log in a data directory of the test's own; it is killed when dropped.
//! rumqttd keeps its sessions in memory and has no persistence, so there is no restart
//! here: a broker started again has forgotten every session. `.ci/setup` installs it
//! under `~/.cache/idem/rumqttd-0.20.0` (`$IDEM_RUMQTTD` points elsewhere); a missing
//! one fails the test with a message naming `.ci/run`, nothing is skipped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the broker has to listen on both ports after it is started.
const BOUND: Duration = Duration::from_secs(10);

/// The rumqttd binary: `$IDEM_RUMQTTD`, else the one `.ci/setup` installs.
pub fn rumqttd() -> PathBuf {
    std::env::var_os("IDEM_RUMQTTD").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/idem/rumqttd-0.20.0/bin/rumqttd")
        },
        PathBuf::from,
    )
}

/// A free port of 127.0.0.1 (free when asked: the broker binds it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A rumqttd broker of one test, its configuration (`idem.toml`) and its log
/// (`rumqttd.log`, what it prints at `-v`: connections, disconnections and the errors it
/// names) in one data directory. Dropped, it is killed and waited for.
pub struct Rumqttd {
    child: Child,
    ports: [u16; 2],
    dir: PathBuf,
}

impl Rumqttd {
    /// Starts rumqttd with `tests/rumqttd/idem.toml.in` in `dir` (created if missing), on
    /// two free ports, and waits until both accept a TCP connection.
    ///
    /// # Panics
    ///
    /// If rumqttd cannot be started or does not listen within 10 s (with its log).
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let ports = [free_port(), free_port()];
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("rumqttd/idem.toml.in");
        let config = std::fs::read_to_string(template)
            .unwrap()
            .replace("@PORT4@", &ports[0].to_string())
            .replace("@PORT5@", &ports[1].to_string());
        let path = dir.join("idem.toml");
        std::fs::write(&path, config).unwrap();
        let log = std::fs::File::create(dir.join("rumqttd.log")).unwrap();
        let child = Command::new(rumqttd())
            .arg("--config")
            .arg(&path)
            .args(["--quiet", "-v"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("rumqttd (.ci/run installs it, or set IDEM_RUMQTTD)");
        let mut b = Self {
            child,
            ports,
            dir: dir.to_path_buf(),
        };
        let started = Instant::now();
        for port in ports {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    b.child.try_wait().unwrap().is_none(),
                    "rumqttd exited instead of listening on 127.0.0.1:{port}:\n{}",
                    b.log()
                );
                assert!(
                    started.elapsed() < BOUND,
                    "rumqttd did not listen on 127.0.0.1:{port} within {BOUND:?}:\n{}",
                    b.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        b
    }

    /// `127.0.0.1:PORT` of its MQTT 3.1.1 listener.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.ports[0])
    }

    /// `127.0.0.1:PORT` of its MQTT 5 listener.
    pub fn addr_v5(&self) -> String {
        format!("127.0.0.1:{}", self.ports[1])
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("rumqttd.log")).unwrap_or_default()
    }
}

impl Drop for Rumqttd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
