//! Nothing outside idem's own files is touched or served: `serve` inside its folder and
//! with a stalled client, targets that are not regular files (a FIFO, `/dev/full`, a
//! directory), planted symbolic links and unrelated temporaries, and what a lesson's
//! prompt reads. Each test builds its attack itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_fs::prelude::*;

mod common;
use common::{consume_ddia, idem};

/// The hang guard of every test here: a regression fails instead of hanging.
const GUARD: Duration = Duration::from_secs(30);

/// `mkfifo path`.
fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Runs `idem args` to its end (killed after [`GUARD`]): exit code and stderr.
fn run_guarded(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!("idem {args:?} still ran after {GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

/// `status`, `flash inspect` and `consume` on a named pipe: refused in one sentence
/// (`status` used to block forever opening it), and the pipe is still a pipe.
#[test]
fn a_fifo_is_refused_by_every_command_that_reads_an_image() {
    let dir = assert_fs::TempDir::new().unwrap();
    let fifo = dir.path().join("f.bin");
    mkfifo(&fifo);
    let expected = format!(
        "idem: {} is a named pipe (FIFO), not a flash image; it was left untouched\n",
        fifo.display()
    );
    let f = fifo.as_os_str();
    for args in [
        vec![os("status"), os("--flash"), f],
        vec![os("flash"), os("inspect"), f],
        vec![
            os("consume"),
            os("ddia"),
            os("--store"),
            os("offset"),
            os("--flash"),
            f,
        ],
    ] {
        assert_eq!(run_guarded(&args), (Some(2), expected.clone()), "{args:?}");
        assert!(is_fifo(&fifo), "{args:?} replaced the FIFO");
    }
}

/// `run --log` on a named pipe with no writer: refused in one sentence before it is
/// opened (it used to block forever in `open`); a process substitution's pipe is still
/// read as it arrives.
#[test]
fn run_log_refuses_a_named_pipe_and_reads_a_process_substitution() {
    let dir = assert_fs::TempDir::new().unwrap();
    let fifo = dir.path().join("events.jsonl");
    mkfifo(&fifo);
    let args = [
        os("run"),
        os("--log"),
        fifo.as_os_str(),
        os("--store"),
        os("naive"),
    ];
    assert_eq!(
        run_guarded(&args),
        (
            Some(2),
            format!(
                "idem: {} is a named pipe (FIFO), not an event file: give a regular file, or a process substitution (--log <(...))\n",
                fifo.display()
            )
        )
    );
    assert!(is_fifo(&fifo));
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} run --store naive --log <(printf '{{\"id\": \"p1\", \"producer\": 1, \"seq\": 0, \"amount\": 5}}\\n')",
            env!("CARGO_BIN_EXE_idem")
        ))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory is called a directory, by the readers of an image and by `plot --svg`
/// (which used to say "no idem header" and "Not a directory").
#[test]
fn a_directory_is_called_a_directory() {
    let dir = assert_fs::TempDir::new().unwrap();
    let d = dir.child("d");
    d.create_dir_all().unwrap();
    let name = d.path().display().to_string();
    for args in [
        vec!["status".to_string(), "--flash".into(), name.clone()],
        vec!["flash".into(), "inspect".into(), name.clone()],
    ] {
        idem().args(&args).assert().code(2).stderr(format!(
            "idem: {name} is a directory, not a flash image; it was left untouched\n"
        ));
    }
    for target in [name.clone(), format!("{name}/")] {
        idem()
            .args(["plot", "ddia", "--svg", &target])
            .assert()
            .code(2)
            .stderr(format!(
                "idem: {target} is a directory, not a regular file; it was left untouched\n"
            ));
    }
    let missing = format!("{name}/new/");
    idem()
        .args(["plot", "ddia", "--svg", &missing])
        .assert()
        .code(2)
        .stderr(format!(
            "idem: {missing} ends with /, so it names a directory, not a file; nothing was written\n"
        ));
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

/// `plot --svg` onto a FIFO or a character device: refused before anything is written,
/// and each is still what it was (they used to be replaced by a regular file).
#[test]
fn plot_never_replaces_a_fifo_or_a_device() {
    let dir = assert_fs::TempDir::new().unwrap();
    let fifo = dir.path().join("p.svg");
    mkfifo(&fifo);
    let (code, err) = run_guarded(&[os("plot"), os("ddia"), os("--svg"), fifo.as_os_str()]);
    assert_eq!(
        (code, err),
        (
            Some(2),
            format!(
                "idem: {} is a named pipe (FIFO), not a regular file; it was left untouched\n",
                fifo.display()
            )
        )
    );
    assert!(is_fifo(&fifo));
    // /dev/full through a link in our own folder: a regression replaces the link, not
    // the device, even when the tests run as root.
    let link = dir.path().join("full.svg");
    std::os::unix::fs::symlink("/dev/full", &link).unwrap();
    idem()
        .args(["plot", "ddia", "--svg"])
        .arg(&link)
        .assert()
        .code(2)
        .stderr(format!(
            "idem: {} is a character device, not a regular file; it was left untouched\n",
            link.display()
        ));
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    // /dev/full itself, where the tests cannot write /dev (as root a regression could
    // replace the device, so it is tried only as another user).
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    if !root {
        idem()
            .args(["plot", "ddia", "--svg", "/dev/full"])
            .assert()
            .code(2)
            .stderr(
                "idem: /dev/full is a character device, not a regular file; it was left untouched\n",
            );
    }
    assert!(
        std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "nothing else was written: {names:?}");
}

/// The pids the next processes will likely get (Linux hands them out in order).
fn next_pids(n: u32) -> std::ops::RangeInclusive<u32> {
    let last = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(std::process::id);
    last + 1..=last + n
}

/// Symbolic links planted at every name the old temporaries (`FILE.tmp.PID`, and
/// `STEM.tmp.PID` for an image) would have had for the next 300 processes: `plot` and
/// the creation of an image follow none of them, the file they point to is unchanged,
/// and the links are still there (they are not idem's).
#[test]
fn a_symlink_at_the_old_temporary_name_is_not_followed() {
    let dir = assert_fs::TempDir::new().unwrap();
    let victim = dir.child("victim.txt");
    victim.write_str("not idem's").unwrap();
    let mut planted = Vec::new();
    for pid in next_pids(300) {
        for name in [format!("p.svg.tmp.{pid}"), format!("f.tmp.{pid}")] {
            let link = dir.path().join(name);
            std::os::unix::fs::symlink(victim.path(), &link).unwrap();
            planted.push(link);
        }
    }
    let svg = dir.child("p.svg");
    idem()
        .args(["plot", "ddia", "--svg"])
        .arg(svg.path())
        .assert()
        .success();
    let image = dir.child("f.bin");
    consume_ddia("offset", image.path()).assert().success();
    victim.assert("not idem's");
    assert!(
        std::fs::read_to_string(svg.path())
            .unwrap()
            .starts_with("<svg")
    );
    assert!(std::fs::symlink_metadata(svg.path()).unwrap().is_file());
    assert_eq!(
        std::fs::metadata(image.path()).unwrap().len(),
        512 + 8 * 1024
    );
    for link in &planted {
        assert!(
            std::fs::symlink_metadata(link).unwrap().is_symlink(),
            "{}",
            link.display()
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        planted.len() + 3,
        "no temporary left behind"
    );
}

/// Creating an image removes nothing but its own temporary: files named like the old
/// temporaries of a dead process (`new.tmp.12345`) are someone else's and survive.
#[test]
fn unrelated_stem_tmp_files_survive_image_creation() {
    let dir = assert_fs::TempDir::new().unwrap();
    let others = [dir.child("new.tmp.12345"), dir.child("new.tmp.4000000")];
    for f in &others {
        f.write_str("someone's data").unwrap();
    }
    let image = dir.child("new.bin");
    consume_ddia("offset", image.path()).assert().success();
    for f in &others {
        f.assert("someone's data");
    }
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["new.bin", "new.tmp.12345", "new.tmp.4000000"]);
}

/// `idem serve` on a folder, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(dir: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["serve", "--port", "0", "--dir"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Self { child, port }
    }

    /// A GET of `path` on a fresh connection (bounded by [`GUARD`]): status and body.
    fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(GUARD)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut response = Vec::new();
        s.read_to_end(&mut response)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let end = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head");
        let head = String::from_utf8_lossy(&response[..end]).into_owned();
        let code = head.split(' ').nth(1).unwrap().parse().unwrap();
        (code, response[end + 4..].to_vec())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn served_folder(root: &Path) -> PathBuf {
    let served = root.join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::write(served.join("index.html"), "<p>the page</p>").unwrap();
    served
}

/// Symbolic links inside the served folder to a file outside it, to a sibling folder
/// and to /etc/passwd: all 404 (they used to be served). A file of the folder is 200.
/// The server listens on 127.0.0.1 only.
#[test]
fn serve_serves_only_files_inside_its_folder() {
    let dir = assert_fs::TempDir::new().unwrap();
    let served = served_folder(dir.path());
    std::fs::write(served.join("app.js"), "let x = 1;").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    let sibling = dir.path().join("served-private");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("notes.txt"), "private").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), served.join("secret.txt")).unwrap();
    std::os::unix::fs::symlink("../served-private", served.join("private")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", served.join("passwd")).unwrap();
    std::os::unix::fs::symlink("app.js", served.join("link.js")).unwrap();
    mkfifo(&served.join("pipe"));
    let server = Server::start(&served);
    assert_eq!(server.get("/"), (200, b"<p>the page</p>".to_vec()));
    assert_eq!(server.get("/app.js"), (200, b"let x = 1;".to_vec()));
    assert_eq!(
        server.get("/link.js"),
        (200, b"let x = 1;".to_vec()),
        "a link that stays inside is served"
    );
    for path in [
        "/secret.txt",
        "/private/notes.txt",
        "/private/",
        "/passwd",
        "/pipe",
        "/../secret.txt",
        "/nothing",
    ] {
        assert_eq!(server.get(path), (404, b"not found".to_vec()), "{path}");
    }
    // /proc/net/tcp: the listening socket (state 0A) on our port is bound to 127.0.0.1.
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let listening: Vec<&str> = table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local = *f.get(1)?;
            (f.get(3) == Some(&"0A") && local.ends_with(&format!(":{:04X}", server.port)))
                .then_some(local)
        })
        .collect();
    assert_eq!(listening, [format!("0100007F:{:04X}", server.port)]);
}

/// Three clients ask for a large file and never read: another client still gets its
/// page at once (a single-threaded server waited on the first one forever).
#[test]
fn a_client_that_never_reads_does_not_stall_the_others() {
    let dir = assert_fs::TempDir::new().unwrap();
    let served = served_folder(dir.path());
    // Far more than the sockets' buffers hold.
    std::fs::write(served.join("big.bin"), vec![0u8; 64 << 20]).unwrap();
    let server = Server::start(&served);
    let stalled: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    // Give the server time to fill those sockets and block writing to them.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.get("/"), (200, b"<p>the page</p>".to_vec()));
    drop(stalled);
}

/// The bytes waiting on `s` without taking them (a peek that waits 10 ms): `Some(0)`
/// when the server closed it, `None` when nothing came and it is open. A read timeout
/// rather than a nonblocking socket, so that a clone of `s` on another thread can look
/// at the same time.
fn waiting(s: &TcpStream) -> Option<usize> {
    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let mut buf = [0u8; 256];
    match s.peek(&mut buf) {
        Ok(n) => Some(n),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("peek: {e}"),
    }
}

/// What the server answered on `s`, read to its close (bounded by [`GUARD`]).
fn answer(mut s: TcpStream) -> String {
    s.set_read_timeout(Some(GUARD)).unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).unwrap();
    String::from_utf8(response).unwrap()
}

const SLOW_HEAD: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// A slow-loris: eight clients (as many as the server once had workers) each send their
/// request head a byte every two seconds, and go on while another client asks for the
/// page. That client gets it while all eight are still open, and each of the eight is
/// then answered 408 and closed at the head's deadline (5 s), before its head is whole:
/// the deadline is on the whole head, not on each read (a byte every two seconds used
/// to hold a worker for 60 s, and eight of them the page).
#[test]
fn slow_clients_do_not_stop_the_page() {
    let dir = assert_fs::TempDir::new().unwrap();
    let server = Server::start(&served_folder(dir.path()));
    let mut slow: Vec<(TcpStream, usize)> = (0..8)
        .map(|_| (TcpStream::connect(("127.0.0.1", server.port)).unwrap(), 0))
        .collect();
    let started = Instant::now();
    let (page, open) = std::thread::scope(|scope| {
        let mut normal = None;
        // At most one byte every two seconds for each, bounded by the head's length and
        // by the guard; a client stops sending once the server has answered it.
        while slow
            .iter()
            .any(|(s, sent)| *sent < SLOW_HEAD.len() && waiting(s).is_none())
        {
            assert!(
                started.elapsed() < GUARD,
                "the slow clients were never closed"
            );
            for (s, sent) in &mut slow {
                if *sent < SLOW_HEAD.len() && waiting(s).is_none() {
                    s.write_all(&SLOW_HEAD[*sent..*sent + 1]).unwrap();
                    *sent += 1;
                }
            }
            if normal.is_none() && slow.iter().all(|(_, sent)| *sent >= 2) {
                let looks: Vec<TcpStream> =
                    slow.iter().map(|(s, _)| s.try_clone().unwrap()).collect();
                let server = &server;
                normal = Some(scope.spawn(move || {
                    let page = server.get("/");
                    (page, looks.iter().filter(|s| waiting(s).is_none()).count())
                }));
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        normal.expect("the normal client asked").join().unwrap()
    });
    assert_eq!(page, (200, b"<p>the page</p>".to_vec()));
    assert_eq!(
        open, 8,
        "the page was served while the eight held their connections"
    );
    for (s, sent) in slow {
        assert!(
            sent < SLOW_HEAD.len(),
            "a head sent whole ({sent} bytes) was waited for"
        );
        let text = answer(s);
        assert!(
            text.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
    }
    // And the page is served as before.
    assert_eq!(server.get("/"), (200, b"<p>the page</p>".to_vec()));
}

/// Sixty-four connections that send nothing fill the server: the sixty-fifth is told so
/// (503 with Retry-After), not left waiting or dropped; once they are gone, the page is
/// served again.
#[test]
fn a_full_server_answers_503() {
    let dir = assert_fs::TempDir::new().unwrap();
    let server = Server::start(&served_folder(dir.path()));
    let idle: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    let (code, body) = server.get("/");
    assert_eq!(
        (code, String::from_utf8(body).unwrap()),
        (503, "too many connections; try again".to_string())
    );
    for s in &idle {
        assert_eq!(waiting(s), None, "an idle connection was closed early");
    }
    drop(idle);
    // The threads notice the hang-ups at once; a few tries cover their scheduling.
    let page = (0..50).find_map(|_| {
        let got = server.get("/");
        (got.0 == 200).then_some(got).or_else(|| {
            std::thread::sleep(Duration::from_millis(100));
            None
        })
    });
    assert_eq!(page, Some((200, b"<p>the page</p>".to_vec())));
}

/// Runs `idem lesson ddia` in a pseudo-terminal (util-linux `script`) in non-canonical
/// mode without echo, so a line of any length reaches it whole; types `input`; returns
/// the screen.
fn lesson_at_a_terminal(input: Vec<u8>) -> String {
    let command = format!(
        "stty -icanon -echo; exec {} lesson ddia",
        env!("CARGO_BIN_EXE_idem")
    );
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs a command in a pseudo-terminal");
    let mut stdin = child.stdin.take().unwrap();
    // Held open until the lesson ends: `script` stops passing input on once its own
    // input ends, even input it has read.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
        stdin
    });
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut screen = Vec::new();
        let _ = stdout.read_to_end(&mut screen);
        screen
    });
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > GUARD {
            let _ = child.kill();
            panic!("the lesson did not stop at q");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(writer.join().unwrap());
    String::from_utf8_lossy(&reader.join().unwrap()).into_owned()
}

/// At a lesson's prompt, a byte that is not UTF-8 asks again (it used to end the lesson
/// with "stream did not contain valid UTF-8"); a 1 MB answer is refused by its length
/// and a 10 kB one is shortened in the message, never echoed whole.
#[test]
fn a_lesson_prompt_asks_again_and_never_echoes_a_huge_answer() {
    let mut input = b"\xff\n0\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 1 << 20));
    input.push(b'\n');
    input.extend(std::iter::repeat_n(b'x', 10_000));
    input.extend_from_slice(b"\nq\n");
    let screen = lesson_at_a_terminal(input);
    assert!(
        screen.contains("   that answer is not UTF-8 text; try again"),
        "{screen}"
    );
    assert!(screen.contains("you said 0; it is 40."), "{screen}");
    assert!(
        screen.contains(
            "   that answer is 1048576 bytes long, more than the 16384 an answer may have; try again"
        ),
        "{screen}"
    );
    assert!(
        screen.contains(
            "[... 9893 characters left out ...]xxxxxxxx\" is not an offset or a range such as 3..7; try again"
        ),
        "{screen}"
    );
    assert!(screen.contains("score: 0/1"), "{screen}");
    assert!(screen.len() < 8_000, "{} bytes on the screen", screen.len());
}

/// `--answers` with a 100 kB answer: one short sentence, exit 2.
#[test]
fn a_huge_given_answer_is_shortened_in_the_error() {
    let answers = format!("{};1;2;3;4;5;6;7;8;9;10;no;no", "9".repeat(100_000));
    let out = idem()
        .args(["lesson", "ddia", "--answers", &answers])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    // The message's first 100 characters and its last 50, and what was left out: a
    // number too large for a whole number is named as such.
    assert_eq!(
        err,
        format!(
            "idem: --answers, answer 1: {}[... 99883 characters left out ...]{} is too large for any figure here\n",
            "9".repeat(100),
            "9".repeat(17)
        )
    );
}
