//! A real Mosquitto broker and an MQTT client of another codebase (paho-mqtt), for the
//! tests of idem's MQTT consumer.
//!
//! [`Broker`] runs Mosquitto 2.0 with `tests/mosquitto/idem.conf.in` on a free port of
//! 127.0.0.1 only, its session database and log in a data directory of the test's own; it
//! is restarted gracefully, killed, started again or started afresh as a test needs, and
//! killed when dropped. [`paho`] runs `tests/clients/paho_mqtt.py` (publish, subscribe,
//! and a raw-socket QoS 2 probe). `.ci/run` installs both: Debian's `mosquitto` package
//! (`$IDEM_MOSQUITTO`, else `/usr/sbin/mosquitto`, else `mosquitto` on the `PATH`) and
//! paho-mqtt 2.2.0 in a virtualenv under `~/.cache/idem` (`$IDEM_PAHO_PYTHON` points
//! elsewhere). As for tansu and kafka-python, a missing one fails the test with a message
//! naming `.ci/run`; nothing is skipped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the broker has to listen after it is started, and to exit after SIGTERM.
const BOUND: Duration = Duration::from_secs(10);

/// The configuration template, with `@PORT@` and `@DIR@`.
fn template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mosquitto/idem.conf.in")
}

/// The Mosquitto binary: `$IDEM_MOSQUITTO`, else Debian's `/usr/sbin/mosquitto` (not on
/// the `PATH` of a user other than root), else `mosquitto` on the `PATH`.
pub fn mosquitto() -> PathBuf {
    std::env::var_os("IDEM_MOSQUITTO").map_or_else(
        || {
            let debian = PathBuf::from("/usr/sbin/mosquitto");
            if debian.exists() {
                debian
            } else {
                PathBuf::from("mosquitto")
            }
        },
        PathBuf::from,
    )
}

/// The Python with paho-mqtt that `.ci/run` installs, or `$IDEM_PAHO_PYTHON`, running
/// `tests/clients/paho_mqtt.py` with `args` (its subcommands are in its docstring).
pub fn paho_command(args: &[&str]) -> Command {
    let python = std::env::var_os("IDEM_PAHO_PYTHON").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/idem/paho-mqtt-2.2.0/bin/python")
        },
        PathBuf::from,
    );
    let mut c = Command::new(python);
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/paho_mqtt.py"))
        .args(args);
    c
}

/// Runs `tests/clients/paho_mqtt.py` with `args` to its end (each of its waits is
/// bounded) and returns its exit status and output; see [`paho_command`].
pub fn paho(args: &[&str]) -> Output {
    paho_command(args)
        .output()
        .expect("paho-mqtt in a virtualenv (.ci/run installs it, or set IDEM_PAHO_PYTHON)")
}

/// paho publishes `count` payments on `topic` at `qos` to the broker at `addr`, each
/// once, at paho's default of 20 unanswered at most, from seed 29: the truth file it
/// writes, `truth`.
pub fn paho_publish(addr: &str, topic: &str, qos: &str, count: usize, truth: &Path) {
    paho_publish_at(addr, topic, qos, count, truth, 20);
}

/// [`paho_publish`] with at most `inflight` unanswered (a broker's
/// `max_inflight_messages` below paho's 20 closes a publisher past it).
pub fn paho_publish_at(
    addr: &str,
    topic: &str,
    qos: &str,
    count: usize,
    truth: &Path,
    inflight: u16,
) {
    let inflight = inflight.to_string();
    let out = paho(&[
        "publish",
        "--broker",
        addr,
        "--topic",
        topic,
        "--qos",
        qos,
        "--count",
        &count.to_string(),
        "--seed",
        "29",
        "--truth",
        truth.to_str().expect("a UTF-8 path"),
        "--inflight",
        &inflight,
    ]);
    assert!(
        out.status.success(),
        "paho publish: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory of a test's own under the system's temporary directory, empty when made;
/// removed when dropped, unless the thread is panicking (a failed test leaves its broker's
/// database and log to read).
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// `idem-mosquitto-PID-NAME` in the temporary directory, emptied.
    pub fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("idem-mosquitto-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("left for reading: {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A Mosquitto broker of one test, on a free port of 127.0.0.1, with its session database
/// (`mosquitto.db`), its configuration (`idem.conf`) and its log (`mosquitto.log`, and
/// `mosquitto.stderr` for what it prints before the log is open) in one data directory.
/// Dropped, it is killed and waited for; the directory stays (see [`Scratch`]).
pub struct Broker {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    overrides: Vec<(String, String)>,
}

impl Broker {
    /// Starts a broker with `tests/mosquitto/idem.conf.in` in `dir` (created if missing),
    /// on a free port, and waits until it accepts a TCP connection.
    ///
    /// # Panics
    ///
    /// If the broker cannot be started or does not listen within 10 s (with the tail of
    /// its log).
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, &[])
    }

    /// [`Broker::start`] with some options of the template set otherwise: each
    /// `(option, value)` replaces the template's line of that option, or is added.
    pub fn start_with(dir: &Path, overrides: &[(&str, &str)]) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut b = Self {
            child: None,
            port,
            dir: dir.to_path_buf(),
            overrides: overrides
                .iter()
                .map(|&(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        b.start_again();
        b
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its log so far (`mosquitto.stderr`, then `mosquitto.log`).
    pub fn log(&self) -> String {
        let read = |name| std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        read("mosquitto.stderr") + &read("mosquitto.log")
    }

    /// The packet identifiers under which the broker sent `client` a QoS 2 PUBLISH again
    /// after it had sent that identifier's PUBREL, before the PUBCOMP came back: MQTT
    /// 3.1.1 §4.3.3 (and MQTT 5's) says the sender "MUST NOT re-send the PUBLISH once it
    /// has sent the corresponding PUBREL packet". Read from the log, where `log_type all`
    /// (tests/mosquitto/idem.conf.in) names every packet. Mosquitto 2.0.11 does it when a
    /// write fails while it sends its PUBRELs again at a reconnection: the messages whose
    /// PUBREL it did not write go back to their PUBLISH at the next connection
    /// (`db__message_reconnect_reset_outgoing`, src/database.c; the
    /// mqtt-embassy-net example's README has the counts).
    pub fn publish_after_pubrel(&self, client: &str) -> std::collections::BTreeSet<u32> {
        let mut released = std::collections::BTreeSet::new();
        let mut resent = std::collections::BTreeSet::new();
        let mid = |rest: &str| -> Option<u32> {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        let (publish, pubrel, pubcomp) = (
            format!("Sending PUBLISH to {client} (d1, q2, "),
            format!("Sending PUBREL to {client} (m"),
            format!("Received PUBCOMP from {client} (Mid: "),
        );
        for line in self.log().lines() {
            if let Some(at) = line.find(&publish) {
                let rest = &line[at + publish.len()..];
                let m = rest.find(", m").and_then(|i| mid(&rest[i + 3..]));
                if let Some(m) = m.filter(|m| released.contains(m)) {
                    resent.insert(m);
                }
            } else if let Some(at) = line.find(&pubrel) {
                released.extend(mid(&line[at + pubrel.len()..]));
            } else if let Some(m) = line
                .find(&pubcomp)
                .and_then(|at| mid(&line[at + pubcomp.len()..]))
            {
                released.remove(&m);
            }
        }
        resent
    }

    /// The payments whose PUBLISH the broker sent `client` again after its PUBREL
    /// ([`Broker::publish_after_pubrel`]), for a session subscribed before paho published
    /// `p0`, `p1`, ... in order: its identifiers run 1, 2, ... in that order, so
    /// identifier n carries `p{n-1}`.
    pub fn payments_sent_after_pubrel(&self, client: &str) -> std::collections::BTreeSet<String> {
        let ids = self.publish_after_pubrel(client).into_iter();
        ids.map(|n| format!("p{}", n - 1)).collect()
    }

    /// The last 30 lines of [`Broker::log`].
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Whether it is running (not stopped, killed or exited by itself).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Starts it again, after [`Broker::kill`] or [`Broker::stop_graceful`], on the same
    /// port and in the same data directory, and waits until it accepts a TCP connection.
    ///
    /// # Panics
    ///
    /// If it is running, or as [`Broker::start`].
    pub fn start_again(&mut self) {
        assert!(!self.running(), "the broker on {} is running", self.addr());
        std::fs::create_dir_all(&self.dir).unwrap();
        let config = self.dir.join("idem.conf");
        std::fs::write(&config, self.config()).unwrap();
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("mosquitto.stderr"))
            .unwrap();
        let child = Command::new(mosquitto())
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("Mosquitto (.ci/run installs Debian's package, or set IDEM_MOSQUITTO)");
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(self.addr()).is_err() {
            if !self.running() {
                panic!(
                    "mosquitto exited instead of listening on {}:\n{}",
                    self.addr(),
                    self.log_tail()
                );
            }
            if started.elapsed() > BOUND {
                panic!(
                    "mosquitto did not listen on {} within {BOUND:?}:\n{}",
                    self.addr(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends it SIGTERM and waits (at most 10 s) until it exits: it saves its database
    /// first.
    pub fn stop_graceful(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if child.try_wait().unwrap().is_none() {
            let sent = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("the kill command");
            assert!(sent.success(), "kill -TERM {}", child.id());
        }
        let started = Instant::now();
        while self.running() {
            if started.elapsed() > BOUND {
                panic!(
                    "mosquitto did not exit within {BOUND:?} of SIGTERM:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = None;
    }

    /// [`Broker::stop_graceful`], then [`Broker::start_again`]: same port, same data
    /// directory, its sessions read back from the database it saved.
    pub fn restart_graceful(&mut self) {
        self.stop_graceful();
        self.start_again();
    }

    /// Kills it with SIGKILL and waits for it: what it had not saved is lost (it saves
    /// every 2 s; see [`Broker::wait_for_save`]).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it (SIGTERM) and starts it on the same port with the empty data directory
    /// `new_dir` (created if missing): every session is lost, as on a new broker.
    pub fn fresh(&mut self, new_dir: &Path) {
        self.stop_graceful();
        self.dir = new_dir.to_path_buf();
        self.start_again();
    }

    /// Waits (at most 10 s) until the broker has saved its database after this call
    /// (every 2 s: `autosave_interval 1`, and Mosquitto saves once the interval is
    /// exceeded): what it held when this was called is then on disk.
    ///
    /// The saved file's modification time tells: a save writes `mosquitto.db.new` and
    /// renames it, between two of the broker's exchanges with its clients; a file written
    /// after this call was begun after every exchange that ended before it. (The kernel's
    /// file times may lag its clock by a tick: a save just after the call may be missed,
    /// and the next one waited for.)
    pub fn wait_for_save(&self) {
        let called = std::time::SystemTime::now();
        let db = self.dir.join("mosquitto.db");
        let started = Instant::now();
        while std::fs::metadata(&db)
            .and_then(|m| m.modified())
            .map_or(true, |t| t < called)
        {
            assert!(
                started.elapsed() < BOUND,
                "mosquitto did not save its database within {BOUND:?}:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The template with the port, the data directory and the overrides.
    fn config(&self) -> String {
        let text = std::fs::read_to_string(template()).unwrap();
        let text = text
            .replace("@PORT@", &self.port.to_string())
            .replace("@DIR@", &self.dir.to_string_lossy());
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for (option, value) in &self.overrides {
            let line = format!("{option} {value}");
            match lines
                .iter_mut()
                .find(|l| l.split_whitespace().next() == Some(option.as_str()))
            {
                Some(l) => *l = line,
                None => lines.push(line),
            }
        }
        lines.join("\n") + "\n"
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}
