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
use crate::error::usage;
use crate::render;

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
    let mut host = Host::new(stream.config);
    let mut reader = HostReader::in_domain(DOMAIN);
    let mut noise = args.garble.map(SplitMix64::new);
    let mut seen = Seen::default();
    let started = Instant::now();
    let limit = Duration::from_secs(args.timeout);
    // The feed's timing policy, on microseconds since the start.
    let clock = || started.elapsed().as_micros() as u64;
    let mut timer = HostTimer::new(0);
    let mut buf = [0u8; 512];
    let mut paced: Option<(Instant, ToDevice, bool)> = None;
    let mut last_pull_resend = false;
    let mut heard_any = false;
    let say = |line: String| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    loop {
        // The stats frame follows the done frame; wait a little for it.
        if timer.finished(clock(), seen.stack_bytes > 0) {
            return Ok(seen);
        }
        if started.elapsed() > limit {
            let at = seen
                .acked
                .map_or("nothing acknowledged".to_string(), |(a, d, t)| {
                    format!("applied up to {a}, durable {d}, total {t}")
                });
            anyhow::bail!(
                "the board did not finish within {} s ({at}; {} boots seen)",
                args.timeout,
                seen.boots
            );
        }
        let n = match link.read(&mut buf) {
            // After the done frame, only the stats frame was still to come.
            Ok(0) if seen.done.is_some() => return Ok(seen),
            Ok(0) => anyhow::bail!("the board's link closed at offset {}", host.position()),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(_) if seen.done.is_some() => return Ok(seen),
            Err(e) => return Err(link_error(&e, host.position())),
        };
        for &b in &buf[..n] {
            let Some(Ok(msg)) = reader.push(b) else {
                // Noise at connect (a frame cut in half) is not enough: frames keep
                // failing after a hello that a feed board would have answered.
                if !heard_any && seen.hellos > 0 && reader.skipped >= 3 {
                    anyhow::bail!(
                        "the board sends frames that are not idem-feed's ({} so far, none of its own): is it running the demo image? Flash idem-feed (cd firmware && cargo run --release --bin idem-feed)",
                        reader.skipped
                    );
                }
                continue;
            };
            heard_any = true;
            timer.heard(clock());
            let (heard, reply) = host
                .on_message(&msg, stream)
                .map_err(|e: HostError| anyhow::anyhow!("{e}"))?;
            match heard {
                Heard::Booted { boots, resume } => {
                    if reply.is_some() {
                        seen.boots = seen.boots.max(boots);
                        say(format!(
                            "board: boot {boots}; its flash says it resumes at {resume}"
                        ));
                    }
                }
                Heard::Pulled { resend, .. } => last_pull_resend = resend,
                Heard::Unconfirmed => {}
                Heard::Done {
                    boots,
                    total,
                    durable,
                    undelivered,
                    advanced,
                } => {
                    if let (Some(durable), Some(bridge)) = (advanced, &stream.bridge) {
                        bridge.commit(durable)?;
                        seen.group_commits.push(durable);
                    }
                    seen.done = Some((boots, total, durable, undelivered));
                    seen.boots = seen.boots.max(boots);
                    timer.done(clock());
                }
                Heard::Report { said, advanced } => {
                    if let (Some(durable), Some(bridge)) = (advanced, &stream.bridge) {
                        // The group gets only what the board acknowledged as durable.
                        bridge.commit(durable)?;
                        seen.group_commits.push(durable);
                    }
                    match said {
                        FromDevice::Ready { resume, total, .. } => {
                            seen.resumes.push(resume);
                            say(format!(
                                "board: consuming {} from offset {resume} (total {total})",
                                stream.name
                            ));
                        }
                        FromDevice::Ack {
                            applied,
                            durable,
                            total,
                        } => {
                            if seen.acked.is_none_or(|(_, d, _)| d != durable) {
                                say(format!(
                                    "board: {}; applied up to {}, total {total}",
                                    render::position_text(durable),
                                    applied.saturating_sub(1)
                                ));
                            }
                            seen.acked = Some((applied, durable, total));
                        }
                        FromDevice::Stats {
                            garbled,
                            out_of_order,
                            stack_bytes,
                        } => {
                            (seen.garbled, seen.out_of_order) = (garbled, out_of_order);
                            seen.stack_bytes = stack_bytes.max(1);
                        }
                        _ => {}
                    }
                }
            }
            if let Some(m) = reply {
                if let ToDevice::Events { events, .. } = &m
                    && args.pace_ms > 0
                {
                    // Paced: the batch goes out later; the board's repeated pull for
                    // the same batch meanwhile is the same request, not a new one.
                    if paced.is_none() {
                        let due = Instant::now()
                            + Duration::from_millis(args.pace_ms * events.len() as u64);
                        paced = Some((due, m, last_pull_resend));
                    }
                    continue;
                }
                if matches!(m, ToDevice::Events { .. }) {
                    seen.batches += 1;
                    seen.resends += u64::from(last_pull_resend);
                }
                send(link, &m, &mut noise, &mut seen)
                    .map_err(|e| link_error(&e, host.position()))?;
                if let ToDevice::Events { events, .. } = &m
                    && let Some(first) = events.first()
                {
                    on_batch(first.offset, events.len() as u64);
                }
            }
        }
        if let Some((due, ..)) = &paced
            && Instant::now() >= *due
            && let Some((_, m, resend)) = paced.take()
        {
            seen.batches += 1;
            seen.resends += u64::from(resend);
            send(link, &m, &mut noise, &mut seen).map_err(|e| link_error(&e, host.position()))?;
            if let ToDevice::Events { events, .. } = &m
                && let Some(first) = events.first()
            {
                on_batch(first.offset, events.len() as u64);
            }
        }
        if timer.hello_due(clock()) {
            // Nothing heard: the board booted before we connected, or lost its
            // configuration. Who is there?
            seen.hellos += 1;
            let hello = host.hello();
            send(link, &hello, &mut None, &mut seen)
                .map_err(|e| link_error(&e, host.position()))?;
        }
    }
}
