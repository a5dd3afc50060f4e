//! `idem serve`: the playground's static files on 127.0.0.1, for local use. A teacher
//! can host the same folder on any static web server instead; nothing is fetched from
//! elsewhere.
//!
//! A small HTTP/1.1 server over `std::net`, one request a connection: a fixed pool of
//! [`WORKERS`] threads takes connections, each with read and write timeouts, so a
//! client that never reads (or never finishes its request) holds one worker for at
//! most [`TIMEOUT`] a read or write, never the others. (tiny_http, used before, starts a
//! thread per connection without bound and gives no access to the socket's timeouts.)
//! A request is served only when its path, resolved to a canonical path (symbolic links
//! followed), is a regular file under the canonical served folder; anything else is 404.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use crate::error::usage;

/// Connections served at once; the others wait in the kernel's backlog.
pub const WORKERS: usize = 8;
/// The longest a read from or a write to a client may block.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The longest one response may take in all (a client reading a byte now and then).
const DEADLINE: Duration = Duration::from_secs(60);
/// The longest request head read (request line and headers).
const MAX_HEAD: u64 = 16 * 1024;

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
        _ => ("404 Not Found", "not found"),
    }
}

/// Reads one request head from `stream`: the method and the target, or `None` for
/// something that is not an HTTP request (or took longer than the timeout).
fn read_head(stream: &TcpStream, started: Instant) -> Option<(String, String)> {
    let mut reader = BufReader::new(stream.take(MAX_HEAD));
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    parts.next()?.starts_with("HTTP/").then_some(())?;
    // The headers, up to the blank line; none of them matters here.
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        if h == "\r\n" || h == "\n" {
            return Some((method, target));
        }
        if started.elapsed() > DEADLINE {
            return None;
        }
    }
}

/// Answers one connection: one request, one response, then the connection closes.
fn handle(root: &Path, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let started = Instant::now();
    let Some((method, target)) = read_head(&stream, started) else {
        return respond_status(&mut stream, 400, true);
    };
    let head = method == "HEAD";
    if method != "GET" && !head {
        return respond_status(&mut stream, 405, !head);
    }
    let opened = resolve(root, &target).and_then(|f| {
        let file = std::fs::File::open(&f).ok()?;
        let len = file.metadata().ok().filter(|m| m.is_file())?.len();
        Some((f, file, len))
    });
    let Some((path, file, len)) = opened else {
        return respond_status(&mut stream, 404, !head);
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n",
        content_type(&path)
    )?;
    if !head {
        let mut file = file.take(len);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if started.elapsed() > DEADLINE {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            stream.write_all(&buf[..n])?;
        }
    }
    stream.flush()
}

fn respond_status(stream: &mut TcpStream, code: u16, body: bool) -> std::io::Result<()> {
    let (line, text) = status(code);
    write!(
        stream,
        "HTTP/1.1 {line}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    )?;
    if body {
        stream.write_all(text.as_bytes())?;
    }
    stream.flush()
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
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                s.spawn(|| {
                    loop {
                        match listener.accept() {
                            // A client that hung up or stalled is its own business.
                            Ok((stream, _)) => {
                                let _ = handle(&root, stream);
                            }
                            // Out of descriptors, say: wait a little, keep serving.
                            Err(_) => std::thread::sleep(Duration::from_millis(50)),
                        }
                    }
                });
            }
        });
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
}
