//! `idem device feed` against a fake board: the core's own `Device` on a `MemFlash`,
//! behind a unix socket or a pty, with a filter that turns its honest frames into lies or
//! a hang-up. Each lie is named in one sentence with exit 1; a board that held a prefix
//! of the stream before this host connected ends `unverified`; a link that closes
//! mid-stream (a unix socket, a pty whose other end closes) is "the board's link closed
//! at offset N", exit 1, never a silent exit 0; and so is `idem monitor`'s pty.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem_board::feed::{
    DOMAIN, Device, DeviceReader, FEED_PAGES, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, FeedLayout,
    FromDevice, ToDevice, WireEvent, encode,
};
use idem_board::wire::{self, Frame, Totals};
use idem_core::log::{IdKey, MessageId};
use idem_sim::flash::MemFlash;
use serde_json::Value;

type Flash = MemFlash<{ FEED_PAGES as usize }, 1024>;
const LAYOUT: FeedLayout = FeedLayout {
    start: 0,
    page: 1024,
};
/// The longest any fake board or CLI run may take.
const LIMIT: Duration = Duration::from_secs(30);

/// The stream every test feeds: 20 events of +1, a checkpoint every 10, batches of 8.
const STREAM: [&str; 9] = [
    "ddia",
    "--events",
    "20",
    "--store",
    "offset",
    "--checkpoint-every",
    "10",
    "--timeout",
    "30",
];

/// A fake board's key.
const KEY: IdKey = IdKey(*b"a fake board key");

/// A board: its flash, the device in its RAM, and the events it was sent.
struct Board {
    flash: Flash,
    device: Device,
    sent: Vec<WireEvent>,
}

impl Board {
    fn new() -> Self {
        let mut flash = Flash::new();
        let (device, _) = Device::boot(&mut flash, LAYOUT, 1, 4096, || Some(KEY)).unwrap();
        Self {
            flash,
            device,
            sent: Vec::new(),
        }
    }

    /// A reset: RAM lost, the flash kept.
    fn reset(&mut self) {
        let (device, _) = Device::boot(&mut self.flash, LAYOUT, 1, 4096, || {
            unreachable!("the key is in flash")
        })
        .unwrap();
        self.device = device;
    }
}

/// What the fake board does with one frame its honest device would send.
enum Say {
    /// Send these instead.
    Send(Vec<FromDevice>),
    /// Close the link instead.
    HangUp,
}

fn honest(f: &FromDevice) -> Say {
    Say::Send(vec![*f])
}

/// Honest up to the `n`-th ack (from 1), which it sends; then it hangs up.
fn hang_up_after_ack(n: u32) -> impl FnMut(&FromDevice) -> Say + Send {
    let mut acks = 0;
    move |f| {
        if acks == n {
            return Say::HangUp;
        }
        if let FromDevice::Ack { .. } = f {
            acks += 1;
        }
        honest(f)
    }
}

trait Link: Read + Write {}
impl<T: Read + Write> Link for T {}

fn write_frame(link: &mut dyn Link, f: &FromDevice) {
    let mut scratch = [0u8; FROM_DEVICE_MAX + 4];
    let mut out = [0u8; FROM_DEVICE_ENCODED];
    let bytes = encode(f, &mut scratch, &mut out).unwrap();
    // The host may have gone (it refused a lie): that ends the board too.
    let _ = link.write_all(bytes).and_then(|()| link.flush());
}

/// Runs `board` on `link` until the host leaves or `lie` hangs up: its boot frame
/// first, then each of the host's frames handled by the device, each reply through `lie`.
fn serve(link: &mut dyn Link, board: &mut Board, lie: &mut dyn FnMut(&FromDevice) -> Say) {
    let started = Instant::now();
    let boot = board.device.boot_frame();
    let mut pending = vec![boot];
    let mut reader = DeviceReader::in_domain(DOMAIN);
    let mut buf = [0u8; 256];
    loop {
        for f in pending.drain(..) {
            match lie(&f) {
                Say::Send(frames) => frames.iter().for_each(|f| write_frame(link, f)),
                Say::HangUp => return,
            }
        }
        assert!(started.elapsed() < LIMIT, "the fake board ran too long");
        let n = match link.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => continue,
            Err(_) => return,
        };
        for &b in &buf[..n] {
            if let Some(Ok(msg)) = reader.push(b) {
                if let ToDevice::Events { events, .. } = &msg {
                    board.sent.extend(events.iter().copied());
                }
                let reply = board.device.handle(&mut board.flash, &msg).unwrap();
                pending.extend(reply.send.iter().copied());
            }
        }
    }
}

fn idem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_idem"))
}

/// `idem device feed STREAM --json --port unix:...` against `board` behind a unix
/// socket, each frame it sends through `lie`.
fn feed(board: &mut Board, lie: impl FnMut(&FromDevice) -> Say + Send) -> Output {
    feed_args(board, &STREAM, lie)
}

/// [`feed`] of the stream `stream`.
fn feed_args(
    board: &mut Board,
    stream: &[&str],
    mut lie: impl FnMut(&FromDevice) -> Say + Send,
) -> Output {
    let dir = assert_fs::TempDir::new().unwrap();
    let path = dir.path().join("board.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let started = Instant::now();
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        assert!(started.elapsed() < LIMIT, "idem never connected");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            serve(&mut conn, board, &mut lie);
        });
        idem()
            .args(["device", "feed"])
            .args(stream)
            .args(["--json", "--port"])
            .arg(format!("unix:{}", path.display()))
            .output()
            .unwrap()
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// A done frame of a 20-event stream: its length and durable position as given.
fn done(events: u64, durable: u64) -> FromDevice {
    FromDevice::Done {
        boots: 1,
        total: 20,
        events,
        durable,
    }
}

#[test]
fn an_honest_board_is_graded_exact() {
    let out = feed(&mut Board::new(), honest);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (&v["verdict"], &v["final_total"], &v["durable"]),
        (&"exact".into(), &20.into(), &20.into())
    );
    assert!(v.get("undelivered").is_none(), "{v}");
}

#[test]
fn a_log_file_goes_out_keyed_under_the_board_key() {
    let dir = assert_fs::TempDir::new().unwrap();
    let log = dir.path().join("payments.jsonl");
    std::fs::write(
        &log,
        "{\"id\":\"p17\",\"producer\":1,\"seq\":1,\"amount\":5}\n\
         {\"id\":\"p17\",\"producer\":1,\"seq\":2,\"amount\":5}\n\
         {\"id\":\"p18\",\"producer\":1,\"seq\":3,\"amount\":3}\n",
    )
    .unwrap();
    let mut board = Board::new();
    let log = log.display().to_string();
    let out = feed_args(
        &mut board,
        &["--log", &log, "--store", "message-id", "--timeout", "30"],
        honest,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (&v["final_total"], &v["verdict"]),
        (&8.into(), &"exact".into())
    );
    let ids: Vec<u64> = board.sent.iter().map(|e| e.payload.id.0).collect();
    let keyed = |id: &[u8]| MessageId::keyed(&KEY, id).0;
    assert_eq!(ids, [keyed(b"p17"), keyed(b"p17"), keyed(b"p18")]);
    assert_ne!(ids[0], MessageId::keyed(&IdKey::PUBLIC, b"p17").0);
}

#[test]
fn each_lie_of_the_board_is_named_with_exit_1() {
    type Lie = Box<dyn FnMut(&FromDevice) -> Say + Send>;
    // After the first ready: `then`, and nothing of what the honest device sends next.
    fn after_ready(then: Vec<FromDevice>) -> Lie {
        let mut lied = false;
        Box::new(move |f| match f {
            FromDevice::Ready { .. } if !lied => {
                lied = true;
                let mut all = vec![*f];
                all.extend(then.iter().copied());
                Say::Send(all)
            }
            _ if lied => Say::Send(vec![]),
            _ => honest(f),
        })
    }
    // The n-th ack (from 1) replaced by `with`, and nothing after it.
    fn at_ack(n: u32, with: Vec<FromDevice>) -> Lie {
        let (mut acks, mut lied) = (0, false);
        Box::new(move |f| {
            if lied {
                return Say::Send(vec![]);
            }
            if let FromDevice::Ack { .. } = f {
                acks += 1;
                if acks == n {
                    lied = true;
                    return Say::Send(with.clone());
                }
            }
            honest(f)
        })
    }
    let ack16 = FromDevice::Ack {
        applied: 16,
        durable: 10,
        total: 16,
    };
    // A boot frame that holds this stream, at 0: its checkpoint at 10 lost. (It names
    // the stream: taken from an honest board's flash once that consumed it.)
    let mut board = Board::new();
    let out = feed(&mut board, honest);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut lost = board.device.boot_frame();
    if let FromDevice::Boot { boots, resume, .. } = &mut lost {
        (*boots, *resume) = (2, 0);
    }
    let cases: Vec<(&str, Lie, &str)> = vec![
        (
            "ready, then done with no event delivered",
            after_ready(vec![done(20, 20)]),
            "the board claims every offset below 20 is durable, but this host delivered no offsets",
        ),
        (
            "done with durable 3",
            after_ready(vec![done(20, 3)]),
            "the board claims every offset below 3 is durable, but this host delivered no offsets",
        ),
        (
            "done with durable u64::MAX",
            after_ready(vec![done(20, u64::MAX)]),
            "the board claims every offset below 18446744073709551615 is durable, but this host delivered no offsets",
        ),
        (
            "ready at u64::MAX",
            Box::new(|f| match f {
                FromDevice::Ready { stream, total, .. } => Say::Send(vec![FromDevice::Ready {
                    stream: *stream,
                    resume: u64::MAX,
                    total: *total,
                }]),
                _ => honest(f),
            }),
            "the device resumes at offset 18446744073709551615 but the stream has 20 events: its flash holds a longer stream under the same id",
        ),
        (
            "an ack of offsets never delivered",
            at_ack(
                1,
                vec![FromDevice::Ack {
                    applied: 12,
                    durable: 10,
                    total: 12,
                }],
            ),
            "the board claims it applied every offset below 12, but this host delivered only offsets 0..7",
        ),
        (
            "done before the end",
            at_ack(2, vec![ack16, done(20, 10)]),
            "the board claims it is done with only the offsets below 10 durable, but the stream has 20 events",
        ),
        (
            "done with another length",
            Box::new(|f| match f {
                FromDevice::Done { durable, .. } => Say::Send(vec![done(21, *durable)]),
                _ => honest(f),
            }),
            "the board claims it is done with a stream of 21 events, but the stream has 20",
        ),
        (
            "a reset that lost a checkpoint",
            at_ack(2, vec![ack16, lost]),
            "the board resumes at offset 0 from its flash, which holds this stream, but it had acknowledged every offset below 10 durable: it lost a checkpoint",
        ),
    ];
    for (what, lie, sentence) in cases {
        let out = feed(&mut Board::new(), lie);
        assert_eq!(
            (out.status.code(), stderr(&out)),
            (Some(1), format!("idem: {sentence}\n")),
            "{what}"
        );
        assert!(out.stdout.is_empty(), "{what}: no verdict is printed");
    }
}

#[test]
fn a_board_that_held_a_prefix_before_this_host_is_unverified() {
    let mut board = Board::new();
    // The first host: the link closes after the checkpoint at 10 (applied up to 15).
    let out = feed(&mut board, hang_up_after_ack(2));
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            "idem: the board's link closed at offset 16\n".to_string()
        )
    );
    assert!(out.stdout.is_empty());
    // The board resets; a second host connects: the board resumes at 10 from its flash,
    // and this host never delivered 0..9.
    board.reset();
    let out = feed(&mut board, honest);
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            "idem: unverified: this host did not deliver offsets 0..9 (the board held them before this host first heard from it: a restarted host or bridge), so its total is not graded\n".to_string()
        )
    );
    let v = json(&out);
    assert_eq!(
        (&v["verdict"], &v["final_total"], &v["resumes"]),
        (&"unverified".into(), &20.into(), &serde_json::json!([10]))
    );
    assert_eq!(v["undelivered"], serde_json::json!({"first": 0, "last": 9}));
}

/// Waits until process `pid` has `path` open.
fn wait_until_open(pid: u32, path: &str) {
    let started = Instant::now();
    loop {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == Path::new(path)));
        if open {
            return;
        }
        assert!(started.elapsed() < LIMIT, "idem never opened {path}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A pty: the end a fake board holds, the other end (held until idem opened it, so that
/// the board's end does not read a hang-up before), and the path idem opens. Both ends
/// are duplicated close-on-exec: `pair` opens them without, and an end that leaked into
/// idem would keep the pty from ever hanging up.
fn pty() -> (serialport::TTYPort, serialport::TTYPort, String) {
    let (master, slave) = serialport::TTYPort::pair().expect("a pty");
    let name = serialport::SerialPort::name(&slave).expect("the pty's path");
    (
        master.try_clone_native().unwrap(),
        slave.try_clone_native().unwrap(),
        name,
    )
}

fn finish(child: Child) -> Output {
    let started = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("idem did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_pty_that_hangs_up_mid_stream_is_exit_1_for_feed() {
    let (mut master, slave, name) = pty();
    let child = idem()
        .args(["device", "feed"])
        .args(STREAM)
        .args(["--json", "--port", &name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_open(child.id(), &name);
    drop(slave);
    serve(&mut master, &mut Board::new(), &mut hang_up_after_ack(2));
    // Let idem read the last frames (a hang-up discards what is still unread), then close.
    std::thread::sleep(Duration::from_millis(300));
    drop(master);
    let out = finish(child);
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            "idem: the board's link closed at offset 16\n".to_string()
        )
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_pty_that_hangs_up_before_done_is_exit_1_for_monitor() {
    let (mut master, slave, name) = pty();
    let child = idem()
        .args(["monitor", "--json", &name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_open(child.id(), &name);
    drop(slave);
    let totals = Totals {
        naive: 1,
        offset: 1,
        atomic: 1,
    };
    let mut frames = vec![Frame::Boot {
        boots: 1,
        resume: 0,
        resume_atomic: 0,
        totals: Totals::default(),
    }];
    frames.extend((0..5).map(|offset| Frame::Progress { offset, totals }));
    for f in &frames {
        let mut buf = [0u8; wire::MAX_ENCODED];
        master
            .write_all(wire::encode(f, &mut buf).unwrap())
            .unwrap();
    }
    master.flush().unwrap();
    // Let the monitor read them, then hang up.
    std::thread::sleep(Duration::from_millis(300));
    drop(master);
    let out = finish(child);
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            "idem: the board's link closed at offset 5\n".to_string()
        )
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 6);
}

#[test]
fn a_closed_standard_output_still_ends_quietly() {
    // The other half of the rule: a reader that leaves (`idem monitor ... | head`) is
    // its choice, exit 0 and nothing said. 400 KB of output, far past a pipe's buffer,
    // to a pipe whose reading end is closed at once.
    let dir = assert_fs::TempDir::new().unwrap();
    let file = dir.path().join("uart.bin");
    let mut bytes = Vec::new();
    for offset in 0..5_000 {
        let mut buf = [0u8; wire::MAX_ENCODED];
        let f = Frame::Progress {
            offset,
            totals: Totals::default(),
        };
        bytes.extend_from_slice(wire::encode(&f, &mut buf).unwrap());
    }
    std::fs::write(&file, bytes).unwrap();
    let mut child = idem()
        .args(["monitor", "--json"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = finish(child);
    assert_eq!((out.status.code(), stderr(&out)), (Some(0), String::new()));
}

/// `--port sim`: the board's own feed code in this process. A reset after offset 42
/// resumes at 40, the last position its flash committed: the naive store applies 40..42
/// twice, the offset store skips them.
#[test]
fn a_simulated_board_resumes_from_its_own_flash() {
    for (store, total, verdict) in [("naive", 103, "over"), ("offset", 100, "exact")] {
        let out = idem()
            .args(["device", "feed", "ddia", "--store", store, "--port", "sim"])
            .args(["--crash-after", "42", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{store}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(
            (
                v["final_total"].as_i64(),
                v["true_total"].as_i64(),
                v["verdict"].as_str(),
                v["boots"].as_u64(),
            ),
            (Some(total), Some(100), Some(verdict), Some(2)),
            "{store}: {v}"
        );
        assert_eq!(v["resumes"], serde_json::json!([0, 40]), "{store}: {v}");
    }
}
