//! `idem serve`: the playground's static files on 127.0.0.1, for local use. A teacher
//! can host the same folder on any static web server instead; nothing is fetched from
//! elsewhere.
//!
//! A small HTTP/1.1 server over `std::net`, one request a connection, one thread a
//! connection up to [`CONNECTIONS`] at once (one more is answered 503 and closed).
//! Every connection runs against deadlines, not only timeouts per read: its whole
//! request head must arrive within [`HEAD_DEADLINE`] of its acceptance or it is
//! answered 408 and closed (RFC 9110 §15.5.9), so a client that sends a byte now and
//! then (a slow-loris) holds one thread for a few seconds, never the page; its whole
//! response must go within [`DEADLINE`], and no write may stall longer than [`TIMEOUT`].
//! (tiny_http, used before, starts a thread per connection without bound and gives no
//! access to the socket's timeouts.) A request is served only when its path, resolved
//! to a canonical path (symbolic links followed), is a regular file under the canonical
//! served folder; anything else is 404.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;

use idem_lab::error::usage;

/// Connections served at once; one more is answered 503 (RFC 9110 §15.6.4) and closed.
pub const CONNECTIONS: usize = 64;
/// The longest a client may take to send its whole request head, from its connection's
/// acceptance: a head still incomplete then is answered 408 and the connection closed.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// The longest one write to a client may block (a client that reads nothing).
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The longest one response may take in all (a client reading a byte now and then).
pub const DEADLINE: Duration = Duration::from_secs(60);
/// The longest request head read (request line and headers); a longer one is 431.
const MAX_HEAD: usize = 16 * 1024;
/// How long a connection refused with a status is still read (and what it sends
/// discarded) after the answer, so that a byte arriving late does not make the close a
/// reset that destroys the answer before the client reads it (RFC 9112 §9.6).
const LINGER: Duration = Duration::from_secs(1);

/// Serve the playground (the folder `bash web/build.sh` makes) on 127.0.0.1.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The port; 0 picks a free one (the line printed says which).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The folder of the built page.
    #[arg(long, value_name = "DIR", default_value = "web/dist")]
    dir: PathBuf,
}

/// The content type of a file the page is made of.
fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// The file a request path names under `root` (canonical): `/` is `index.html`; a query
/// is ignored; a path that climbs out, or that resolves (through a symbolic link) to
/// anything outside `root` or to anything but a regular file, names nothing.
fn resolve(root: &Path, url: &str) -> Option<PathBuf> {
    let path = url.split(['?', '#']).next().unwrap_or("/");
    let rel = Path::new(path.trim_start_matches('/'));
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let file = if path.ends_with('/') {
        root.join(rel).join("index.html")
    } else {
        root.join(rel)
    };
    let real = file.canonicalize().ok()?;
    (real.starts_with(root) && real.is_file()).then_some(real)
}

/// A response's status line and a short body.
fn status(code: u16) -> (&'static str, &'static str) {
    match code {
        400 => ("400 Bad Request", "bad request"),
        405 => ("405 Method Not Allowed", "only GET and HEAD"),
        408 => ("408 Request Timeout", "the request did not arrive in time"),
        431 => (
            "431 Request Header Fields Too Large",
            "the request head is too long",
        ),
        503 => ("503 Service Unavailable", "too many connections; try again"),
        _ => ("404 Not Found", "not found"),
    }
}

/// Where a request head ends in `buf` (after its blank line), if it has.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    crlf.into_iter().chain(lf).min()
}

/// The method and the target of a request head, or `None` if it is not HTTP's.
fn request_line(head: &[u8]) -> Option<(String, String)> {
    let line = std::str::from_utf8(head).ok()?.lines().next()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    parts
        .next()?
        .starts_with("HTTP/")
        .then_some((method, target))
}

/// Reads one request head from `stream` by `deadline` (each read waits only as long as
/// is left): the method and the target, or the status that refuses it (400 not HTTP,
/// 408 not whole by the deadline, 431 too long), or `None` when the client hung up.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<(String, String), Option<u16>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&buf) {
            return request_line(&buf[..end]).ok_or(Some(400));
        }
        if buf.len() >= MAX_HEAD {
            return Err(Some(431));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Some(408));
        }
        stream.set_read_timeout(Some(left)).map_err(|_| None)?;
        let room = chunk.len().min(MAX_HEAD - buf.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Err(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Some(408));
            }
            Err(_) => return Err(None),
        }
    }
}

/// Writes all of `bytes` by `deadline`, no write blocking longer than [`TIMEOUT`].
fn write_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left.min(TIMEOUT)))?;
        match stream.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Answers one connection: one request, one response, then the connection closes.
fn handle(root: &Path, mut stream: TcpStream) -> std::io::Result<()> {
    let accepted = Instant::now();
    let deadline = accepted + DEADLINE;
    let (method, target) = match read_head(&mut stream, accepted + HEAD_DEADLINE) {
        Ok(head) => head,
        Err(Some(code)) => return refuse(&mut stream, code, deadline),
        Err(None) => return Ok(()),
    };
    let head = method == "HEAD";
    if method != "GET" && !head {
        return respond_status(&mut stream, 405, !head, deadline);
    }
    let opened = resolve(root, &target).and_then(|f| {
        let file = std::fs::File::open(&f).ok()?;
        let len = file.metadata().ok().filter(|m| m.is_file())?.len();
        Some((f, file, len))
    });
    let Some((path, file, len)) = opened else {
        return respond_status(&mut stream, 404, !head, deadline);
    };
    let head_text = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n",
        content_type(&path)
    );
    write_by(&mut stream, head_text.as_bytes(), deadline)?;
    if !head {
        let mut file = file.take(len);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            write_by(&mut stream, &buf[..n], deadline)?;
        }
    }
    stream.flush()
}

/// Answers `code` to a request that was not read whole, then closes in stages: the
/// write side first, then what the client still sends is read and dropped for at most
/// [`LINGER`], so its answer is not lost to a reset.
fn refuse(stream: &mut TcpStream, code: u16, deadline: Instant) -> std::io::Result<()> {
    respond_status(stream, code, true, deadline)?;
    stream.shutdown(Shutdown::Write)?;
    let until = Instant::now() + LINGER;
    let mut sink = [0u8; 1024];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Ok(()),
        }
    }
}

fn respond_status(
    stream: &mut TcpStream,
    code: u16,
    body: bool,
    deadline: Instant,
) -> std::io::Result<()> {
    let (line, text) = status(code);
    let retry = if code == 503 {
        "Retry-After: 1\r\n"
    } else {
        ""
    };
    let mut response = format!(
        "HTTP/1.1 {line}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{retry}Connection: close\r\n\r\n",
        text.len()
    );
    if body {
        response.push_str(text);
    }
    write_by(stream, response.as_bytes(), deadline)
}

/// Connections open now, counted down when a connection's guard drops.
struct Open<'a>(&'a AtomicUsize);

impl<'a> Open<'a> {
    /// One more open connection, or `None` when [`CONNECTIONS`] are.
    fn take(count: &'a AtomicUsize) -> Option<Self> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < CONNECTIONS).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(count))
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads and drops what a nonblocking `stream` holds now (at most a head's worth).
fn drain(stream: &mut TcpStream) {
    let mut sink = [0u8; 4096];
    for _ in 0..MAX_HEAD / sink.len() {
        if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// Connections answered 503, kept open a little (at most [`CONNECTIONS`] of them, for
/// [`LINGER`]) so the request a client sends after its connection is not unread when
/// it closes: a close with data unread is a reset, which can destroy the answer before
/// the client reads it (RFC 9112 §9.6).
#[derive(Default)]
struct Refused(std::collections::VecDeque<(Instant, TcpStream)>);

impl Refused {
    /// Answers 503 on `stream` without blocking the accepting thread: the answer goes
    /// into the fresh socket's empty send buffer, and the write side closes.
    fn refuse(&mut self, mut stream: TcpStream) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        drain(&mut stream);
        let _ = respond_status(&mut stream, 503, true, Instant::now() + TIMEOUT);
        let _ = stream.shutdown(Shutdown::Write);
        if self.0.len() == CONNECTIONS {
            self.close_oldest();
        }
        self.0.push_back((Instant::now(), stream));
    }

    /// Closes the refused connections kept longer than [`LINGER`].
    fn close_old(&mut self) {
        while self.0.front().is_some_and(|(at, _)| at.elapsed() >= LINGER) {
            self.close_oldest();
        }
    }

    fn close_oldest(&mut self) {
        if let Some((_, mut stream)) = self.0.pop_front() {
            drain(&mut stream);
        }
    }
}

/// Accepts connections until the process ends, each answered on a thread of its own
/// while fewer than [`CONNECTIONS`] are open, and 503 at once otherwise.
fn accept_loop(listener: &TcpListener, root: &Path) {
    let open = AtomicUsize::new(0);
    let mut refused = Refused::default();
    std::thread::scope(|s| {
        loop {
            let accepted = listener.accept();
            refused.close_old();
            let stream = match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors, say: wait a little, keep serving.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let Some(guard) = Open::take(&open) else {
                refused.refuse(stream);
                continue;
            };
            // A client that hung up or stalled is its own business; a thread the
            // system refuses closes its connection (the closure drops it), no more.
            let _ = std::thread::Builder::new().spawn_scoped(s, move || {
                let _ = handle(root, stream);
                drop(guard);
            });
        }
    });
}

impl Cmd {
    /// Runs the command: serves until interrupted.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if !self.dir.join("index.html").is_file() {
            return Err(usage(format!(
                "{} has no index.html: build the page first with `bash web/build.sh`",
                self.dir.display()
            )));
        }
        let root = self
            .dir
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", self.dir.display()))?;
        let listener = TcpListener::bind(("127.0.0.1", self.port)).map_err(|e| {
            usage(format!(
                "cannot listen on 127.0.0.1:{} ({e}); choose another with --port",
                self.port
            ))
        })?;
        let port = listener.local_addr().map_or(self.port, |a| a.port());
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "serving {} at http://127.0.0.1:{port}/ (Ctrl-C stops)",
            self.dir.display()
        )?;
        out.flush()?;
        drop(out);
        accept_loop(&listener, &root);
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_folder() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .canonicalize()
            .unwrap();
        assert_eq!(
            resolve(&root, "/Cargo.toml?x=1"),
            Some(root.join("Cargo.toml"))
        );
        assert_eq!(resolve(&root, "/../Cargo.toml"), None);
        assert_eq!(resolve(&root, "/src/../Cargo.toml"), None);
        assert_eq!(resolve(&root, "/no-such-file"), None);
        assert_eq!(resolve(&root, "/src"), None, "a folder is not a file");
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nrest"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\n"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(
            request_line(b"GET /app.js HTTP/1.1\r\n\r\n"),
            Some(("GET".into(), "/app.js".into()))
        );
        assert_eq!(request_line(b"GET /app.js\r\n\r\n"), None);
        assert_eq!(request_line(b"GET / SMTP/1.0\r\n\r\n"), None);
    }
}
