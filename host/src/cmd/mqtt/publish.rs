//! `idem mqtt publish`: a seeded payment stream, each payment once (and `--resends`
//! more sent again by the application, for the message-id lesson), with the truth file
//! of every PUBLISH the broker completed. A QoS 1 or 2 PUBLISH is complete when its
//! PUBACK or PUBCOMP arrives, and only then is its line written; at most [`IN_FLIGHT`]
//! are incomplete at a time. A QoS 0 PUBLISH is written as it is sent, and the truth's
//! first line says so (a run graded on it is at best unproven).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use idem_mqtt::codec::v5::reason_name;
use idem_mqtt::codec::{ConnackProperties, Outgoing, Protocol, Publish, QoS};
use idem_sim::rng::SplitMix64;

use super::link::{Broken, Got, Link};
use idem_host::truth::TruthWriter;

/// Incomplete PUBLISHes at a time: the test broker's `max_inflight_messages`, which
/// Mosquitto also holds a publisher to (a fifth costs the connection).
pub const IN_FLIGHT: usize = 1;
const PAYERS: [&str; 4] = ["ada", "bob", "cy", "dee"];

/// `idem mqtt publish`'s arguments.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The broker.
    #[arg(long, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    pub broker: String,
    /// The protocol: MQTT 3.1.1, or MQTT 5 (the broker's Receive Maximum and Maximum
    /// Packet Size honoured, its reason codes named).
    #[arg(long, value_name = "3.1.1|5", default_value = "3.1.1", value_parser = super::parse_protocol)]
    protocol: Protocol,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// The QoS to publish at.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=2))]
    qos: u8,
    /// Payments p0 to p(N-1), amounts 1 to 9 from the seed (at most 1,000,000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: u32,
    /// The seed of the amounts and of the resends.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Application resends: this many earlier payments sent again (same id and amount,
    /// a new PUBLISH), at seeded places in the stream.
    #[arg(long, default_value_t = 0)]
    resends: u32,
    /// Write every PUBLISH the broker completed here, one JSON payment a line, between
    /// idem's first and end lines (renamed into place when the run finishes).
    #[arg(long, value_name = "FILE")]
    truth: PathBuf,
    /// Publish with RETAIN 1: the broker keeps the last one for each new subscriber.
    #[arg(long)]
    retain: bool,
    /// The client identifier (clean session 1).
    #[arg(long, default_value = "idem-publish")]
    client_id: String,
}

impl PublishArgs {
    /// The topic published to.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// The stream: each payment's line, resends included, in sending order.
pub fn stream(count: u32, seed: u64, resends: u32) -> Vec<String> {
    let mut rng = SplitMix64::new(seed);
    let pay = |i: u32, rng: &mut SplitMix64| {
        // `range` is inclusive.
        let payer = PAYERS[rng.range(0, PAYERS.len() as u64 - 1) as usize];
        let amount = rng.range(1, 9);
        format!(r#"{{"id": "p{i}", "payer": "{payer}", "amount": {amount}}}"#)
    };
    let mut lines: Vec<String> = (0..count).map(|i| pay(i, &mut rng)).collect();
    for _ in 0..resends.min(count) {
        // Again, somewhere after the original.
        let of = rng.range(0, u64::from(count) - 1) as usize;
        let at = rng.range(of as u64 + 1, lines.len() as u64) as usize;
        let again = lines[of].clone();
        lines.insert(at, again);
    }
    lines
}

/// Publishes the stream.
pub fn run(a: &PublishArgs) -> anyhow::Result<ExitCode> {
    let qos = QoS::from_level(a.qos).unwrap_or(QoS::ExactlyOnce);
    let lines = stream(a.count, a.seed, a.resends);
    let broken = |e: Broken| match e {
        Broken::Closed(why) | Broken::Garbage(why) => anyhow!("publishing to {}: {why}", a.broker),
    };
    let (mut link, limits) = connect(a)?;
    // At MQTT 5 the broker's Receive Maximum bounds what may be unacknowledged (MQTT 5
    // §3.3.4), and its Maximum Packet Size what may be sent (§3.2.2.3.6).
    let window = IN_FLIGHT.min(usize::from(limits.receive_maximum.unwrap_or(u16::MAX)).max(1));
    let largest = limits
        .maximum_packet_size
        .map_or(usize::MAX, |m| m as usize);
    // Only once the broker took the connection: a run that cannot connect leaves the
    // truth file as it was.
    let mut truth = TruthWriter::create(&a.truth, "mqtt publish", Some(a.qos))?;
    let started = Instant::now();
    // Each incomplete PUBLISH's identifier and line.
    let mut waiting: VecDeque<(u16, &str)> = VecDeque::new();
    let mut next_pid = 0u16;
    for line in &lines {
        while waiting.len() >= window {
            complete(&mut link, &mut waiting, &mut truth).map_err(broken)??;
        }
        let pid = (qos != QoS::AtMostOnce).then(|| {
            next_pid = next_pid % u16::MAX + 1;
            next_pid
        });
        send(&mut link, a, qos, pid, line, largest)?;
        match pid {
            Some(pid) => waiting.push_back((pid, line)),
            // QoS 0 has no acknowledgement: sent is all a publisher ever knows.
            None => truth.line(line)?,
        }
    }
    while !waiting.is_empty() {
        complete(&mut link, &mut waiting, &mut truth).map_err(broken)??;
    }
    link.send(&Outgoing::Disconnect)?;
    truth.finish()?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "mqtt publish: {} PUBLISHes of {} payments ({} resent) at QoS {} to {} in {secs:.2} s; truth in {}",
        lines.len(),
        a.count,
        lines.len() - a.count as usize,
        a.qos,
        a.topic,
        a.truth.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Sends one PUBLISH of `line`, unless it is past the broker's Maximum Packet Size
/// `largest` (MQTT 5 §3.2.2.3.6: the client must not send it).
fn send(
    link: &mut Link,
    a: &PublishArgs,
    qos: QoS,
    pid: Option<u16>,
    line: &str,
    largest: usize,
) -> anyhow::Result<()> {
    let p = Outgoing::Publish(Publish {
        dup: false,
        qos,
        pid,
        retain: a.retain,
        topic: &a.topic,
        payload: line.as_bytes(),
    });
    let size = idem_mqtt::codec::encoded_len_at(&p, a.protocol);
    if size > largest {
        return Err(anyhow!(
            "a {size}-byte PUBLISH is past the broker's Maximum Packet Size of {largest} bytes (MQTT 5 §3.2.2.3.6): it was not sent, and no truth file was written at {}",
            a.truth.display()
        ));
    }
    link.send(&p)
}

/// The Maximum Packet Size the publisher announces at MQTT 5: what it reads is small.
const PUBLISHER_MAXIMUM_PACKET: u32 = 64 * 1024;

/// Connects with clean session 1 (at MQTT 5, Clean Start 1 and no Session Expiry
/// Interval: the session ends with the connection) and waits for CONNACK.
fn connect(a: &PublishArgs) -> anyhow::Result<(Link, ConnackProperties)> {
    let mut link =
        Link::connect(&a.broker, 64 * 1024)?.speaking(a.protocol, PUBLISHER_MAXIMUM_PACKET);
    let keep_alive = idem_mqtt::client::KEEP_ALIVE_S;
    link.send(&match a.protocol {
        Protocol::V311 => Outgoing::Connect {
            client_id: &a.client_id,
            keep_alive,
            clean_session: true,
        },
        Protocol::V5 => Outgoing::Connect5 {
            client_id: &a.client_id,
            keep_alive,
            clean_start: true,
            session_expiry: 0,
            receive_maximum: u16::MAX,
            maximum_packet_size: PUBLISHER_MAXIMUM_PACKET,
        },
    })?;
    match link.read(Duration::from_secs(10)) {
        Ok(Some(Got::Connack {
            code: 0,
            properties,
            ..
        })) => Ok((link, properties)),
        Ok(Some(Got::Connack { code, .. })) => Err(anyhow!(
            "the broker at {} refused the connection: {} (return code {code})",
            a.broker,
            super::link::refusal_at(code, a.protocol)
        )),
        Ok(other) => Err(anyhow!(
            "the broker at {} did not accept the connection: {other:?}",
            a.broker
        )),
        Err(Broken::Closed(why) | Broken::Garbage(why)) => {
            Err(anyhow!("publishing to {}: {why}", a.broker))
        }
    }
}

/// Reads one packet: PUBACK and PUBCOMP complete a PUBLISH, whose line then goes to the
/// truth file (the broker owns the message from then on, MQTT 3.1.1 §4.3.2, §4.3.3);
/// PUBREC is answered with PUBREL; anything else is a broker that does not follow the
/// protocol.
fn complete(
    link: &mut Link,
    waiting: &mut VecDeque<(u16, &str)>,
    truth: &mut TruthWriter,
) -> Result<anyhow::Result<()>, Broken> {
    let closed = |e: anyhow::Error| Broken::Closed(format!("{e:#}"));
    match link.read(Duration::from_secs(10))? {
        Some(Got::Puback(pid)) | Some(Got::Pubcomp(pid)) => {
            let Some(at) = waiting.iter().position(|(w, _)| *w == pid) else {
                return Ok(Ok(()));
            };
            let (_, line) = waiting.remove(at).unwrap_or_default();
            Ok(truth.line(line).and_then(|()| truth.flush()))
        }
        Some(Got::Pubrec(pid)) => link.send(&Outgoing::Pubrel(pid)).map_err(closed).map(Ok),
        Some(Got::Pingresp) => Ok(Ok(())),
        Some(Got::AckRefused { pid, reason, .. }) => Ok(Err(anyhow!(
            "the broker refused the PUBLISH of packet identifier {pid}: {} (reason code 0x{reason:02X}); its payment is not in the truth",
            reason_name(reason)
        ))),
        Some(Got::Disconnect(reason)) => Err(Broken::Closed(format!(
            "the broker sent DISCONNECT {} (reason code 0x{reason:02X})",
            reason_name(reason)
        ))),
        Some(other) => Err(Broken::Garbage(format!(
            "the broker sent a publisher {other:?}"
        ))),
        None => Err(Broken::Closed("no acknowledgement came for 10 s".into())),
    }
}
