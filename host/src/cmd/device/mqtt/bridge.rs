//! The host's end of the modem: the loop that carries bytes between the board's serial
//! link and the broker's socket, dials when the board asks, and resets it through QMP.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use idem_board::modem::{
    self, BootCounts, FromBoard, HostReader, QUIET_WAIT_MS, Relay, Report, SessionConfig, Socket,
    ToBoard,
};
use idem_board::timing::{HostTimer, QEMU_EFFECT_US};
use idem_mqtt::client::backoff_ms;
use idem_sim::rng::SplitMix64;

use super::tap::Tap;
use super::{Mqtt, hangup_words, refusal_words};
use crate::cmd::mqtt::link::{TRIES, dial};

/// The host's end of the modem.
pub(super) struct Bridge {
    pub(super) link: UnixStream,
    pub(super) reader: HostReader,
    pub(super) broker: String,
    pub(super) config: SessionConfig,
    pub(super) tcp: Option<TcpStream>,
    /// The broker's bytes not yet taken by the board.
    pub(super) relay: Relay,
    pub(super) tap: Tap,
    pub(super) targets: std::iter::Peekable<std::vec::IntoIter<u64>>,
    /// A reset is on its way and the board has not announced its next boot: the next
    /// target waits for it, so each reset lands on a boot that counted itself.
    pub(super) reset_pending: bool,
    pub(super) rng: SplitMix64,
    pub(super) idle: Duration,
    pub(super) timeout: Duration,
    pub(super) last_new: Instant,
    pub(super) last_empty: bool,
    pub(super) finishing: bool,
    pub(super) connections: u32,
    /// Connections the board closed for the broker's resend, over every boot.
    pub(super) resends: u32,
    /// The boot the board last announced.
    pub(super) boot: Option<u32>,
    /// A hello went out after a silence: the board's answer may find it unconfigured.
    pub(super) hello_after_silence: bool,
    /// Connections in a row that the broker closed or the board hung up, with no new id
    /// acknowledged (at QoS 0, no PUBLISH carried).
    pub(super) strikes: u32,
    /// This boot's counts, as the board last sent them.
    pub(super) counts: BootCounts,
    /// The counts of each earlier boot, as its last count frame said.
    pub(super) earlier: Vec<BootCounts>,
}

impl Bridge {
    pub(super) fn new(
        link: UnixStream,
        a: &Mqtt,
        config: SessionConfig,
        targets: Vec<u64>,
    ) -> Self {
        Self {
            link,
            reader: HostReader::in_domain(modem::DOMAIN),
            broker: a.broker.clone(),
            config,
            tcp: None,
            relay: Relay::default(),
            tap: Tap {
                asked: a.qos,
                protocol: a.protocol,
                ..Tap::default()
            },
            targets: targets.into_iter().peekable(),
            reset_pending: false,
            rng: SplitMix64::new(a.seed ^ 0x5EED),
            idle: Duration::from_millis(a.idle_ms),
            timeout: Duration::from_secs(a.timeout),
            last_new: Instant::now(),
            last_empty: false,
            finishing: false,
            connections: 0,
            resends: 0,
            boot: None,
            hello_after_silence: false,
            strikes: 0,
            counts: BootCounts::default(),
            earlier: Vec::new(),
        }
    }

    /// Carries bytes until the board reports, after the idle end.
    pub(super) fn run(
        &mut self,
        reset: &(impl Fn() + Clone + Send + 'static),
    ) -> anyhow::Result<Report> {
        let started = Instant::now();
        let clock = || started.elapsed().as_micros() as u64;
        // The feed's silences (idem_board::timing): a hello after a silence, since a boot
        // frame cut by a reset, or sent before QEMU's socket had a reader, is lost.
        let mut timer = HostTimer::new(clock());
        let mut heard = Instant::now();
        let mut buf = [0u8; 512];
        let mut hellos = 1;
        self.tell(&ToBoard::Hello {
            version: modem::VERSION,
        })?;
        loop {
            self.deadlines(started, heard)?;
            let n = self.read_link(&mut buf)?;
            for &byte in &buf[..n] {
                let frame = self.reader.push(byte);
                // Frames that keep failing from a board never heard, after a hello an
                // idem-mqtt board would have answered: another image (the feed's
                // frames fail this link's CRC domain).
                if self.boot.is_none() && hellos > 1 && self.reader.skipped >= 3 {
                    bail!(
                        "the board sends frames that are not idem-mqtt's ({} so far, none of its own): is the ELF another idem image? Build idem-mqtt (cd firmware && cargo build --release --features qemu --bin idem-mqtt)",
                        self.reader.skipped
                    );
                }
                if let Some(Ok(msg)) = frame {
                    heard = Instant::now();
                    timer.heard(clock());
                    if let Some(report) = self.on_board(msg, reset)? {
                        return Ok(report);
                    }
                }
            }
            if timer.hello_due(clock()) {
                hellos += 1;
                self.hello_after_silence = true;
                self.tell(&ToBoard::Hello {
                    version: modem::VERSION,
                })?;
            }
            if self.tap.subscribed
                && !self.finishing
                && self.last_empty
                && self.last_new.elapsed() >= self.idle
            {
                self.finishing = true;
                self.tell(&ToBoard::Finish)?;
            }
        }
    }

    /// The run's deadline, and the board's silence.
    fn deadlines(&self, started: Instant, heard: Instant) -> anyhow::Result<()> {
        if started.elapsed() > self.timeout {
            bail!(
                "the board did not finish within {} s",
                self.timeout.as_secs()
            );
        }
        if heard.elapsed() > Duration::from_secs(10) {
            bail!(
                "the board said nothing for 10 s (is the ELF idem-mqtt's, built with --features qemu?)"
            );
        }
        Ok(())
    }

    /// What the board's serial link holds, after at most its read timeout.
    fn read_link(&mut self, buf: &mut [u8]) -> anyhow::Result<usize> {
        match self.link.read(buf) {
            Ok(0) => bail!("QEMU closed the board's serial link"),
            Ok(n) => Ok(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(0),
            Err(e) => bail!("the board's serial link failed: {e}"),
        }
    }

    fn on_board(
        &mut self,
        msg: FromBoard,
        reset: &(impl Fn() + Clone + Send + 'static),
    ) -> anyhow::Result<Option<Report>> {
        if std::env::var_os("IDEM_TRACE").is_some() {
            eprintln!("board: {msg:?}");
        }
        match msg {
            FromBoard::Boot { version, .. } if version != modem::VERSION => {
                bail!(
                    "the board speaks protocol version {version}, this host {}",
                    modem::VERSION
                )
            }
            // The same boot again: its answer to a hello that crossed its boot frame, or
            // to a hello after a silence, when the configuration may have been lost: a
            // board off line and silent configured again (it dials at once when it has
            // its configuration).
            // A board on line is never silent for a hello's wait, so one that answers
            // such a hello lost a Dial or a Connected, or the finish: each is asked
            // again. The configuration itself is in its flash.
            FromBoard::Boot { boots, .. } if self.boot == Some(boots) => {
                if std::mem::take(&mut self.hello_after_silence) {
                    if self.finishing {
                        self.tell(&ToBoard::Finish)?;
                    } else {
                        self.configure()?;
                    }
                }
            }
            FromBoard::Boot { boots, .. } => self.booted(boots)?,
            FromBoard::Dial => self.dial()?,
            FromBoard::Pull { at, max } => self.pull(at, max, reset)?,
            FromBoard::Send(bytes) => {
                let before = self.tap.acknowledged.len();
                self.tap.sent(&bytes);
                if self.tap.acknowledged.len() > before {
                    self.strikes = 0;
                }
                // An acknowledgement is the board's progress, as a PUBLISH carried is
                // the broker's: a board that drains what waited for a place while the
                // broker has nothing new to send is not idle.
                if matches!(bytes.first(), Some(0x40 | 0x50 | 0x70)) {
                    self.last_new = Instant::now();
                }
                if let Some(tcp) = &mut self.tcp
                    && tcp.write_all(&bytes).is_err()
                {
                    self.tcp = None;
                }
            }
            // Not a fault: the board asks for the broker's resend of what it left
            // unanswered with every place taken (idem_mqtt::client::Client::resend_due).
            FromBoard::Hangup(idem_board::modem::Hangup::Resend) => {
                self.last_new = Instant::now();
                self.resends += 1;
                self.closed_by_broker();
                self.hang_up();
            }
            FromBoard::Hangup(why) => {
                let why = hangup_words(why);
                eprintln!("device mqtt: the board hung up: {why}");
                self.hang_up();
                self.strike(format!("the board hung up: {why}"))?;
            }
            FromBoard::Counts { handled, counts } => self.counted(handled, counts),
            FromBoard::Report(r) => return Ok(Some(r)),
            FromBoard::Refused(why) => bail!("the board refused: {}", refusal_words(why)),
            FromBoard::Failed(why) => bail!("the board stopped: its {why:?} failed"),
        }
        Ok(None)
    }

    /// A new boot: the last one's counts are final, and what it took; its connection
    /// is dropped, and the board is configured again.
    fn booted(&mut self, boots: u32) -> anyhow::Result<()> {
        if self.boot.is_some() {
            self.earlier.push(std::mem::take(&mut self.counts));
        }
        self.tap.booted();
        self.boot = Some(boots);
        self.reset_pending = false;
        self.hang_up();
        self.configure()
    }

    /// The board's counts of this boot, and the bytes of this connection its packets
    /// took: what the host saw it take is the PUBLISHes within them.
    fn counted(&mut self, handled: u32, counts: BootCounts) {
        self.tap.taken_through(handled);
        self.counts = counts;
    }

    /// A connection ended by the broker or by the board's refusal of what the broker
    /// sent: after [`TRIES`] in a row with no PUBLISH carried, one sentence.
    fn strike(&mut self, why: String) -> anyhow::Result<()> {
        self.strikes += 1;
        // The session's backoff before the board dials again.
        std::thread::sleep(Duration::from_millis(u64::from(backoff_ms(self.strikes))));
        if self.strikes >= TRIES {
            bail!(
                "{why}, {} connections in a row with no new message acknowledged; the run stops ungraded",
                self.strikes
            );
        }
        Ok(())
    }

    fn configure(&mut self) -> anyhow::Result<()> {
        let configure = ToBoard::Configure {
            version: modem::VERSION,
            config: self.config.clone(),
        };
        self.tell(&configure)
    }

    /// After the board's DISCONNECT: waits, a second at most, for the broker to close
    /// the connection (MQTT 3.1.1 §3.14.4), so that it has read every acknowledgement
    /// before the next connection's CONNECT (one that overtakes them makes the broker
    /// close this connection as a session takeover, with those unread).
    fn closed_by_broker(&mut self) {
        let Some(tcp) = &mut self.tcp else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut chunk = [0u8; 4096];
        while deadline > Instant::now() {
            match tcp.read(&mut chunk) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
    }

    fn hang_up(&mut self) {
        if let Some(tcp) = self.tcp.take() {
            let _ = tcp.shutdown(std::net::Shutdown::Both);
        }
    }

    fn dial(&mut self) -> anyhow::Result<()> {
        self.hang_up();
        if self.finishing {
            return Ok(());
        }
        let tcp = dial(&self.broker)?;
        tcp.set_read_timeout(Some(Duration::from_millis(u64::from(QUIET_WAIT_MS))))?;
        self.tcp = Some(tcp);
        self.connections += 1;
        self.relay.connected();
        self.tap.connected();
        self.tell(&ToBoard::Connected)
    }

    /// Answers a pull: the bytes from `at`, at most `max`, after a bounded wait for some
    /// (`idem_board::modem::Relay`).
    fn pull(
        &mut self,
        at: u32,
        max: u8,
        reset: &(impl Fn() + Clone + Send + 'static),
    ) -> anyhow::Result<()> {
        let Some(tcp) = &mut self.tcp else {
            return self.tell(&ToBoard::Closed);
        };
        if self.finishing {
            // A pull after the finish: it crossed the finish, or the finish was lost on
            // the line. Finish again; nothing more is read from the broker.
            return self.tell(&ToBoard::Finish);
        }
        let (answer, new) = self.relay.answer(at, max, |buf| match tcp.read(buf) {
            Ok(0) => Socket::Closed,
            Ok(n) => Socket::Bytes(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Socket::Bytes(0)
            }
            Err(_) => Socket::Closed,
        });
        match &answer {
            ToBoard::Closed => {
                self.tcp = None;
                self.strike("the broker closed the connection".to_string())?;
            }
            ToBoard::Bytes { bytes, .. } => {
                self.last_empty = bytes.is_empty();
                let publishes = self.tap.carried(&bytes[bytes.len() - new..]);
                if publishes > 0 {
                    // At QoS 0 nothing is acknowledged: a PUBLISH carried is progress.
                    if self.config.qos == 0 {
                        self.strikes = 0;
                    }
                    self.last_new = Instant::now();
                    self.reset_if_due(reset);
                }
            }
            _ => {}
        }
        self.tell(&answer)
    }

    /// Resets the board, a few milliseconds on, when the PUBLISHes carried reach a
    /// target. One reset at a time: two targets one answer passes (or one reached
    /// before the last reset landed) would otherwise reset a board twice within
    /// milliseconds, the second before it counted its boot in its flash; the next
    /// target fires at the first PUBLISH carried after the board booted again.
    fn reset_if_due(&mut self, reset: &(impl Fn() + Clone + Send + 'static)) {
        if self.reset_pending {
            return;
        }
        if self.targets.next_if(|&t| t <= self.tap.publishes).is_some() {
            self.reset_pending = true;
            // Within two of the board's record times (its pause before an ack under
            // QEMU): before, between or after the record and its acknowledgement.
            let delay = Duration::from_micros(self.rng.range(0, 2 * QEMU_EFFECT_US));
            let reset = reset.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                reset();
            });
        }
    }

    fn tell(&mut self, msg: &ToBoard) -> anyhow::Result<()> {
        let mut scratch = [0u8; modem::TO_BOARD_MAX + 4];
        let mut out = [0u8; modem::TO_BOARD_ENCODED];
        let bytes = modem::encode(msg, &mut scratch, &mut out)
            .map_err(|e| anyhow!("encoding {msg:?}: {e:?}"))?;
        self.link
            .write_all(bytes)
            .map_err(|e| anyhow!("the board's serial link failed: {e}"))
    }
}
