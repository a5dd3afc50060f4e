//! The feed loop: the link to the board, its frames both ways, and the answers to the
//! board's pulls from the position it announces.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use idem_board::feed::{
    DOMAIN, FromDevice, Heard, Host, HostError, HostReader, TO_DEVICE_ENCODED, TO_DEVICE_MAX,
    ToDevice, encode,
};
use idem_board::timing::HostTimer;
use idem_core::log::Offset;
use idem_sim::rng::SplitMix64;

use super::{Seen, Stream, StreamArgs};
use idem_lab::error::usage;
use idem_lab::render;

/// A byte link to the board.
pub(super) trait Link: Read + Write + Send {}
impl<T: Read + Write + Send> Link for T {}

/// How long a read waits before the loop looks at its timers.
pub(super) const POLL: Duration = Duration::from_millis(20);

pub(super) fn connect(port: &str, baud: u32) -> anyhow::Result<Box<dyn Link>> {
    if port == "sim" {
        return Ok(Box::new(super::sim::SimBoard::boot()?));
    }
    if let Some(path) = port.strip_prefix("unix:") {
        let s = UnixStream::connect(path)
            .map_err(|e| usage(format!("cannot connect to {path} ({e})")))?;
        s.set_read_timeout(Some(POLL))?;
        return Ok(Box::new(s));
    }
    if let Some(addr) = port.strip_prefix("tcp:") {
        let s = std::net::TcpStream::connect(addr)
            .map_err(|e| usage(format!("cannot connect to {addr} ({e})")))?;
        s.set_read_timeout(Some(POLL))?;
        s.set_nodelay(true)?;
        return Ok(Box::new(s));
    }
    if !Path::new(port).exists() {
        return Err(usage(format!(
            "{port} does not exist: give the board's serial port (such as /dev/ttyACM0), a pty, unix:PATH, tcp:HOST:PORT or sim"
        )));
    }
    let p = serialport::new(port, baud)
        .timeout(POLL)
        .open()
        .map_err(|e| usage(format!("{port} is not a serial port ({e})")))?;
    Ok(Box::new(p))
}

/// What a failed read or write of the board's link says, at `offset` (where the board
/// reads next): never an I/O error, so that `main` does not take a hang-up (which
/// `serialport` reports as a broken pipe) for a closed standard output.
fn link_error(e: &std::io::Error, offset: Offset) -> anyhow::Error {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    if matches!(
        e.kind(),
        BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof
    ) {
        anyhow::anyhow!("the board's link closed at offset {offset}")
    } else {
        anyhow::anyhow!("the board's link failed at offset {offset}: {e}")
    }
}

/// Writes a frame, damaging the line on purpose when asked (`--garble`).
fn send(
    link: &mut dyn Link,
    msg: &ToDevice,
    noise: &mut Option<SplitMix64>,
    seen: &mut Seen,
) -> std::io::Result<()> {
    let mut scratch = [0u8; TO_DEVICE_MAX + 4];
    let mut out = [0u8; TO_DEVICE_ENCODED];
    let bytes = encode(msg, &mut scratch, &mut out)
        .map_err(|e| std::io::Error::other(format!("encoding a frame: {e}")))?;
    let mut bytes = bytes.to_vec();
    if let Some(rng) = noise.as_mut() {
        if rng.range(0, 2) == 0 {
            // Garbage, then a delimiter: a frame of its own that does not decode.
            let n = rng.range(1, 24) as usize;
            let garbage: Vec<u8> = (0..n).map(|_| (rng.next_u64() as u8) | 1).collect();
            link.write_all(&garbage)?;
            link.write_all(&[0])?;
            seen.injected += 1;
        }
        if rng.range(0, 9) == 0 && bytes.len() > 2 {
            let i = rng.range(0, bytes.len() as u64 - 2) as usize;
            bytes[i] ^= 1 << (rng.next_u64() % 8);
            seen.injected += 1;
        }
    }
    link.write_all(&bytes)?;
    link.flush()?;
    Ok(())
}

/// Feeds `stream` to the board on `link` until it reports done (or the time runs out).
/// `on_batch` is called with each batch's first offset and length once it is sent.
pub(super) fn feed(
    link: &mut dyn Link,
    stream: &Stream,
    args: &StreamArgs,
    on_batch: &mut dyn FnMut(Offset, u64),
    quiet: bool,
) -> anyhow::Result<Seen> {
    let mut feed = Feed::new(stream, args, quiet);
    let mut buf = [0u8; 512];
    loop {
        // The stats frame follows the done frame; wait a little for it.
        if feed.timer.finished(feed.clock(), feed.seen.stack_bytes > 0) {
            return Ok(feed.seen);
        }
        feed.check_time()?;
        let Some(n) = feed.read(link, &mut buf)? else {
            return Ok(feed.seen);
        };
        for &b in &buf[..n] {
            if let Some(reply) = feed.take(b)? {
                feed.answer(link, reply, on_batch)?;
            }
        }
        feed.send_paced(link, on_batch)?;
        feed.hello_if_due(link)?;
    }
}

/// A feed under way: the host's end of the protocol, the timers, and what was seen.
struct Feed<'a> {
    stream: &'a Stream,
    args: &'a StreamArgs,
    quiet: bool,
    host: Host,
    reader: HostReader,
    /// The line's damage on purpose (`--garble`).
    noise: Option<SplitMix64>,
    seen: Seen,
    started: Instant,
    timer: HostTimer,
    /// A batch held back by `--pace`: when it is due, the batch, and whether its pull
    /// was a resend.
    paced: Option<(Instant, ToDevice, bool)>,
    last_pull_resend: bool,
    /// Whether one frame of the board's own decoded.
    heard_any: bool,
}

impl<'a> Feed<'a> {
    fn new(stream: &'a Stream, args: &'a StreamArgs, quiet: bool) -> Self {
        Self {
            stream,
            args,
            quiet,
            host: Host::new(stream.config),
            reader: HostReader::in_domain(DOMAIN),
            noise: args.garble.map(SplitMix64::new),
            seen: Seen::default(),
            started: Instant::now(),
            timer: HostTimer::new(0),
            paced: None,
            last_pull_resend: false,
            heard_any: false,
        }
    }

    /// The feed's timing policy runs on microseconds since the start.
    fn clock(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Tells a person on standard error, unless quiet.
    fn say(&self, line: String) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    /// Fails once the feed has run longer than `--timeout`.
    fn check_time(&self) -> anyhow::Result<()> {
        if self.started.elapsed() <= Duration::from_secs(self.args.timeout) {
            return Ok(());
        }
        let at = self
            .seen
            .acked
            .map_or("nothing acknowledged".to_string(), |(a, d, t)| {
                format!("applied up to {a}, durable {d}, total {t}")
            });
        anyhow::bail!(
            "the board did not finish within {} s ({at}; {} boots seen)",
            self.args.timeout,
            self.seen.boots
        );
    }

    /// Reads what the link holds: how many bytes (0 when the read timed out), or `None`
    /// when the link ended after the done frame (only the stats frame was still to come).
    fn read(&self, link: &mut dyn Link, buf: &mut [u8]) -> anyhow::Result<Option<usize>> {
        use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
        match link.read(buf) {
            Ok(0) if self.seen.done.is_some() => Ok(None),
            Ok(0) => anyhow::bail!("the board's link closed at offset {}", self.host.position()),
            Ok(n) => Ok(Some(n)),
            Err(e) if matches!(e.kind(), TimedOut | WouldBlock | Interrupted) => Ok(Some(0)),
            Err(_) if self.seen.done.is_some() => Ok(None),
            Err(e) => Err(link_error(&e, self.host.position())),
        }
    }

    /// Takes one byte from the board: the answer to send, when it completes a frame.
    fn take(&mut self, b: u8) -> anyhow::Result<Option<ToDevice>> {
        let Some(Ok(msg)) = self.reader.push(b) else {
            // Noise at connect (a frame cut in half) is not enough: frames keep
            // failing after a hello that a feed board would have answered.
            if !self.heard_any && self.seen.hellos > 0 && self.reader.skipped >= 3 {
                anyhow::bail!(
                    "the board sends frames that are not idem-feed's ({} so far, none of its own): is it running the demo image? Flash idem-feed (cd firmware && cargo run --release --bin idem-feed)",
                    self.reader.skipped
                );
            }
            return Ok(None);
        };
        self.heard_any = true;
        self.timer.heard(self.clock());
        let (heard, reply) = self
            .host
            .on_message(&msg, self.stream)
            .map_err(|e: HostError| anyhow::anyhow!("{e}"))?;
        self.note(heard, reply.is_some())?;
        Ok(reply)
    }

    /// Notes what the host heard; `answered` when it has an answer to send.
    fn note(&mut self, heard: Heard, answered: bool) -> anyhow::Result<()> {
        match heard {
            Heard::Booted { boots, resume } => {
                if answered {
                    self.seen.boots = self.seen.boots.max(boots);
                    self.say(format!(
                        "board: boot {boots}; its flash says it resumes at {resume}"
                    ));
                }
            }
            Heard::Pulled { resend, .. } => self.last_pull_resend = resend,
            Heard::Unconfirmed => {}
            Heard::Done {
                boots,
                total,
                durable,
                undelivered,
                advanced,
            } => {
                self.commit(advanced)?;
                self.seen.done = Some((boots, total, durable, undelivered));
                self.seen.boots = self.seen.boots.max(boots);
                self.timer.done(self.clock());
            }
            Heard::Report { said, advanced } => {
                self.commit(advanced)?;
                self.note_report(said);
            }
        }
        Ok(())
    }

    /// Commits to the Kafka group, when there is one, a durable position the board
    /// acknowledged that moved past every earlier one: the group gets only that.
    fn commit(&mut self, advanced: Option<Offset>) -> anyhow::Result<()> {
        if let (Some(durable), Some(bridge)) = (advanced, &self.stream.bridge) {
            bridge.commit(durable)?;
            self.seen.group_commits.push(durable);
        }
        Ok(())
    }

    /// Notes a report the board sent: ready, an ack or its stats.
    fn note_report(&mut self, said: FromDevice) {
        match said {
            FromDevice::Ready { resume, total, .. } => {
                self.seen.resumes.push(resume);
                self.say(format!(
                    "board: consuming {} from offset {resume} (total {total})",
                    self.stream.name
                ));
            }
            FromDevice::Ack {
                applied,
                durable,
                total,
            } => {
                if self.seen.acked.is_none_or(|(_, d, _)| d != durable) {
                    self.say(format!(
                        "board: {}; applied up to {}, total {total}",
                        render::position_text(durable),
                        applied.saturating_sub(1)
                    ));
                }
                self.seen.acked = Some((applied, durable, total));
            }
            FromDevice::Stats {
                garbled,
                out_of_order,
                stack_bytes,
            } => {
                (self.seen.garbled, self.seen.out_of_order) = (garbled, out_of_order);
                self.seen.stack_bytes = stack_bytes.max(1);
            }
            _ => {}
        }
    }

    /// Sends the host's answer, or holds a batch back when the feed is paced.
    fn answer(
        &mut self,
        link: &mut dyn Link,
        reply: ToDevice,
        on_batch: &mut dyn FnMut(Offset, u64),
    ) -> anyhow::Result<()> {
        if let ToDevice::Events { events, .. } = &reply
            && self.args.pace_ms > 0
        {
            // Paced: the batch goes out later; the board's repeated pull for the same
            // batch meanwhile is the same request, not a new one.
            if self.paced.is_none() {
                let due =
                    Instant::now() + Duration::from_millis(self.args.pace_ms * events.len() as u64);
                self.paced = Some((due, reply, self.last_pull_resend));
            }
            return Ok(());
        }
        self.deliver(link, &reply, self.last_pull_resend, on_batch)
    }

    /// Sends the batch held back by `--pace`, once it is due.
    fn send_paced(
        &mut self,
        link: &mut dyn Link,
        on_batch: &mut dyn FnMut(Offset, u64),
    ) -> anyhow::Result<()> {
        if let Some((due, ..)) = &self.paced
            && Instant::now() >= *due
            && let Some((_, m, resend)) = self.paced.take()
        {
            self.deliver(link, &m, resend, on_batch)?;
        }
        Ok(())
    }

    /// Sends `m`, counting a batch (and a resend, when its pull was one) and telling
    /// `on_batch`.
    fn deliver(
        &mut self,
        link: &mut dyn Link,
        m: &ToDevice,
        resend: bool,
        on_batch: &mut dyn FnMut(Offset, u64),
    ) -> anyhow::Result<()> {
        if matches!(m, ToDevice::Events { .. }) {
            self.seen.batches += 1;
            self.seen.resends += u64::from(resend);
        }
        send(link, m, &mut self.noise, &mut self.seen)
            .map_err(|e| link_error(&e, self.host.position()))?;
        if let ToDevice::Events { events, .. } = m
            && let Some(first) = events.first()
        {
            on_batch(first.offset, events.len() as u64);
        }
        Ok(())
    }

    /// Says hello when nothing was heard for a while: the board booted before we
    /// connected, or lost its configuration. Who is there?
    fn hello_if_due(&mut self, link: &mut dyn Link) -> anyhow::Result<()> {
        if self.timer.hello_due(self.clock()) {
            self.seen.hellos += 1;
            let hello = self.host.hello();
            send(link, &hello, &mut None, &mut self.seen)
                .map_err(|e| link_error(&e, self.host.position()))?;
        }
        Ok(())
    }
}
