//! The board's adapter ([`Session::connection`] over the [`Transport`] trait) on the host:
//! a std `TcpStream` to Mosquitto on 127.0.0.1 (started here, tests/src/mosquitto.rs),
//! the session's journal on idem-core's strict test flash, and resets at seeded points of
//! the connection: before an acknowledgement is written (its record on the flash), before
//! bytes are read, and power cuts in the middle of a flash word write. After each, the
//! session is opened again from what the flash holds, as a board boots.
//!
//! The truth is paho's (tests/clients/paho_mqtt.py writes a line as the broker completes
//! each PUBLISH), not the session's: every payment applied once, none twice, none
//! foreign, and the total on the flash the truth's sum.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use embassy_futures::block_on;
use idem_core::journal::Region;
use idem_core::testing::flash::{FlashError, MemFlash, PowerCut};
use idem_example_mqtt_embassy_net::{
    End, Got, JOURNAL_PAGES, QUIET_MS, Seen, Session, Settings, Transport,
};
use idem_mqtt::receiver::Decided;
use idem_tests::mosquitto::{Broker, Scratch, paho_publish};

const TOPIC: &str = "idem/payments";

const SETTINGS: Settings<'static> = Settings {
    client_id: "idem-embassy-net",
    filter: TOPIC,
    tag: 0x6E52_4D51,
};

/// The journal's 4 pages of 4 KiB, 4-byte words: the nRF52840's geometry.
type Flash = MemFlash<4, 4096>;

const REGION: Region = Region {
    start: 0,
    pages: JOURNAL_PAGES,
};

/// Quiet reads in a row after which the test ends a connection: the broker has nothing
/// more to send.
const QUIETS_TO_END: u32 = 3;

/// Where a connection is cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Before the session's `n`th write: the records of what it acknowledges are on the
    /// flash, the acknowledgement never leaves.
    Write(u32),
    /// Before the session's `n`th read.
    Read(u32),
    /// Power lost in the middle of the flash's `n`th word write from now.
    Flash(u64),
}

#[derive(Debug)]
enum LinkError {
    Io(std::io::Error),
    /// The test's reset.
    Reset,
    /// The broker has been quiet for [`QUIETS_TO_END`] reads.
    Done,
}

/// A std `TcpStream` as the session's transport.
struct StdLink {
    stream: TcpStream,
    start: Instant,
    writes: u32,
    reads: u32,
    quiets: u32,
    cut: Option<Cut>,
}

impl StdLink {
    fn connect(addr: &str, cut: Option<Cut>) -> Self {
        let stream = TcpStream::connect(addr).expect("the broker listens");
        stream
            .set_read_timeout(Some(Duration::from_millis(QUIET_MS)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            start: Instant::now(),
            writes: 0,
            reads: 0,
            quiets: 0,
            cut,
        }
    }
}

impl Transport for StdLink {
    type Error = LinkError;

    async fn read(&mut self, buf: &mut [u8]) -> Result<Got, LinkError> {
        self.reads += 1;
        if self.cut == Some(Cut::Read(self.reads)) {
            return Err(LinkError::Reset);
        }
        match self.stream.read(buf) {
            Ok(0) => Ok(Got::Closed),
            Ok(n) => {
                self.quiets = 0;
                Ok(Got::Bytes(n))
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                self.quiets += 1;
                if self.quiets >= QUIETS_TO_END {
                    return Err(LinkError::Done);
                }
                Ok(Got::Quiet)
            }
            Err(e) => Err(LinkError::Io(e)),
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.writes += 1;
        if self.cut == Some(Cut::Write(self.writes)) {
            return Err(LinkError::Reset);
        }
        self.stream.write_all(bytes).map_err(LinkError::Io)
    }

    async fn flush(&mut self) -> Result<(), LinkError> {
        self.stream.flush().map_err(LinkError::Io)
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// The seeded cuts: `count` of them, each kind in turn.
fn cuts(count: usize, seed: u64) -> Vec<Cut> {
    let mut x = seed;
    let mut next = |below: u64| {
        // SplitMix64's step: enough spread for a schedule.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % below + 1
    };
    (0..count)
        .map(|i| match i % 3 {
            0 => Cut::Write(next(24) as u32 + 2),
            1 => Cut::Read(next(24) as u32 + 2),
            _ => Cut::Flash(next(60)),
        })
        .collect()
}

/// One boot: the session opened from the flash, one connection, its end.
fn boot(
    flash: &mut Flash,
    addr: &str,
    cut: Option<Cut>,
    applied: &mut Vec<String>,
) -> End<LinkError, FlashError> {
    flash.power_on();
    let mut session = Session::open(flash, REGION, SETTINGS).expect("the journal opens");
    if let Some(Cut::Flash(n)) = cut {
        flash.schedule_power_cut(PowerCut::AtWordWrite(n));
    }
    let mut link = StdLink::connect(addr, cut);
    // Each PUBLISH's id by its packet identifier as it arrives: one that waits for a
    // place is decided later, under the identifier it came with.
    let mut ids = HashMap::new();
    let mut seen = |s: Seen<'_>| match s {
        Seen::Arrived(p) => {
            let (id, _) = idem_mqtt::payments::id_and_amount(p.payload).expect("a payment");
            ids.insert(p.pid, id.to_string());
        }
        Seen::Decided(pid, Decided::Applied) => applied.push(ids[&pid].clone()),
        Seen::Decided(..) => {}
    };
    let end = block_on(session.connection(flash, &mut link, &mut seen));
    flash.cancel_power_cut();
    end
}

#[test]
fn every_payment_is_applied_once_across_resets_over_the_adapter() {
    let scratch = Scratch::new("embassy-net");
    // Mosquitto's stock in-flight limit, 20 (tests/mosquitto/idem.conf.in), past the
    // session's 8 places: what the broker sends past them waits in the session's slots.
    let broker = Broker::start(&scratch.join("broker"));
    let addr = broker.addr();
    let mut flash = Box::new(Flash::new());
    flash.seed_noise(48);
    let mut applied = Vec::new();

    // The first connection subscribes; the broker keeps the session (clean session 0)
    // and queues what is published while nobody is connected.
    let first = boot(&mut flash, &addr, None, &mut applied);
    assert!(
        matches!(first, End::Transport(LinkError::Done)),
        "{first:?}"
    );
    let truth = scratch.join("truth.jsonl");
    paho_publish(&addr, TOPIC, "2", 400, &truth);

    let schedule = cuts(24, 48);
    let started = Instant::now();
    let mut resets = 0;
    let mut boots = 1;
    for cut in schedule
        .iter()
        .copied()
        .map(Some)
        .chain(std::iter::repeat(None))
    {
        assert!(
            boots < 200 && started.elapsed() < Duration::from_secs(120),
            "{boots} boots"
        );
        let end = boot(&mut flash, &addr, cut, &mut applied);
        boots += 1;
        match end {
            End::Transport(LinkError::Reset) | End::Flash(_) => resets += 1,
            End::Transport(LinkError::Done) if cut.is_none() => break,
            End::Transport(LinkError::Io(e)) => eprintln!("boot {boots}: {e}"),
            _ => {}
        }
    }

    // The truth: paho's lines, each a payment the broker completed.
    let text = std::fs::read_to_string(&truth).unwrap();
    let mut want = HashMap::new();
    let mut amounts = HashMap::new();
    let mut sum = 0;
    for line in text.lines() {
        let (id, amount) = idem_mqtt::payments::id_and_amount(line.as_bytes()).unwrap();
        want.insert(id.to_string(), 0);
        amounts.insert(id.to_string(), amount);
        sum += amount;
    }
    assert_eq!(want.len(), 400);
    for id in &applied {
        *want
            .get_mut(id)
            .unwrap_or_else(|| panic!("{id} is no payment published")) += 1;
    }
    let twice: Vec<_> = want.iter().filter(|(_, n)| **n > 1).collect();
    let never: Vec<_> = want.iter().filter(|(_, n)| **n == 0).collect();
    // Exact. Where Mosquitto 2.0.11 sent a QoS 2 PUBLISH again after its PUBREL (MQTT
    // 3.1.1 §4.3.3 forbids it; its log shows it) and the session had released that
    // identifier, the release's tombstone recognised it: not applied, counted.
    let resent = broker.payments_sent_after_pubrel(SETTINGS.client_id);
    assert!(
        never.is_empty() && twice.is_empty(),
        "twice {twice:?}, never {never:?}, the broker's PUBLISHes after PUBREL under {resent:?}"
    );
    let session = Session::open(&mut *flash, REGION, SETTINGS).unwrap();
    let named = session.figures().publish_after_pubrel;
    assert_eq!(
        (
            session.total(),
            session.figures().applied,
            named > 0 && resent.is_empty()
        ),
        (sum, 400, false)
    );
    eprintln!(
        "exact; Mosquitto sent a PUBLISH again after its PUBREL under {} identifiers (its log), the session named {named}",
        resent.len()
    );
    assert_eq!(resets, 24, "every scheduled reset happened");
    eprintln!(
        "400 payments, sum {sum}, graded above, after {resets} resets in {boots} boots ({} flash word writes, {} erases); the broker's log: {} connections ended \"due to out of memory\"",
        flash.stats().word_writes,
        flash.stats().erases,
        broker.log().matches("out of memory").count()
    );
}
