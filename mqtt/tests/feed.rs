//! The client's doors that its drivers share: a connection's bytes framed and taken a
//! step at a time ([`Client::feed`]), the Session Expiry Interval a session asks for,
//! and the broker's return codes named (CONNACK, SUBACK).

use idem_core::journal::Region;
use idem_core::testing::flash::MemFlash;
use idem_mqtt::client::{Client, ClientError, Config, FeedError, SESSION_EXPIRY_S, Send, Waiting};
use idem_mqtt::codec::{
    self, DecodeError, FrameError, Framer, Incoming, Protocol, QoS, connack_name_at, suback_name_at,
};
use idem_mqtt::receiver::{Ack, Decided, Keep, Receiver, Release};

mod common;
use common::Sum;

type Flash = MemFlash<3, 1024>;

/// A client with two places and two slots to wait in.
type Slotted = Client<Sum, 2, [Option<Waiting<i64>>; 2]>;

/// A [`Slotted`] client at `protocol`.
fn client(flash: &mut Flash, protocol: Protocol) -> Slotted {
    let region = Region { start: 0, pages: 3 };
    let r = Receiver::open(flash, region, 0x7E57_0500, Sum, Keep::Flash, Release::Now).unwrap();
    Client::with_waiting(r, [const { None }; 2]).with_protocol(protocol)
}

fn one(_: &[u8]) -> Option<i64> {
    Some(1)
}

/// A QoS 2 PUBLISH to `t` under `pid`, at MQTT 3.1.1.
fn publish(pid: u8) -> [u8; 8] {
    [0x34, 6, 0, 1, b't', 0, pid, b'1']
}

/// Every step `feed` takes now: each one's packets, and the identifiers `seen` was
/// shown.
fn steps(
    c: &mut Slotted,
    flash: &mut Flash,
    rx: &mut Framer<[u8; 64]>,
) -> (Vec<Vec<Send>>, Vec<Option<u16>>) {
    let (mut sent, mut seen) = (Vec::new(), Vec::new());
    while let Some(out) = c
        .feed(flash, rx, "t", one, |p| {
            seen.push(match p {
                Incoming::Publish(p) => p.pid,
                _ => None,
            })
        })
        .unwrap()
    {
        sent.push(out.packets().collect());
    }
    (sent, seen)
}

#[test]
fn feed_takes_a_reads_packets_in_order_and_decides_what_waited_as_places_free() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash, Protocol::V311);
    let mut rx = Framer::new([0u8; 64], Protocol::V311, 64, usize::MAX);
    c.connect();
    // CONNACK and SUBACK, then 1 and 2 take both places, 3 waits: one read, split
    // inside the third PUBLISH.
    let mut bytes = vec![0x20, 2, 0, 0, 0x90, 3, 0, 1, 2];
    for pid in 1..=3 {
        bytes.extend_from_slice(&publish(pid));
    }
    assert_eq!(rx.push(&bytes[..20]), 20);
    let (sent, seen) = steps(&mut c, &mut flash, &mut rx);
    assert_eq!(
        sent,
        [
            vec![Send::Subscribe],
            vec![],
            vec![Send::Ack(Ack::Pubrec(1))]
        ]
    );
    assert_eq!(seen, [None, None, Some(1)]);
    rx.push(&bytes[20..]);
    let (sent, _) = steps(&mut c, &mut flash, &mut rx);
    assert_eq!(sent, [vec![Send::Ack(Ack::Pubrec(2))], vec![]]);
    assert_eq!((c.waiting(), c.counts().records), (1, 2));
    // PUBREL 1 frees a place: PUBCOMP 1, then 3's PUBREC as the next step, before the
    // PUBREL behind it.
    rx.push(&[0x62, 2, 0, 1, 0x62, 2, 0, 2]);
    let (sent, _) = steps(&mut c, &mut flash, &mut rx);
    assert_eq!(
        sent,
        [
            vec![Send::Pubcomp(1)],
            vec![Send::Ack(Ack::Pubrec(3))],
            vec![Send::Pubcomp(2)]
        ]
    );
    assert_eq!((c.waiting(), *c.receiver().state()), (0, 3));
}

#[test]
fn feed_stops_on_bytes_that_are_no_packet_and_on_a_refusal_with_its_code() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash, Protocol::V311);
    let mut rx = Framer::new([0u8; 64], Protocol::V311, 64, usize::MAX);
    c.connect();
    rx.push(&[0x20, 2, 0, 0, 0x90, 3, 0, 1, 0x80]);
    let mut feed = |c: &mut Client<_, 2, _>, rx: &mut Framer<[u8; 64]>| {
        c.feed(&mut flash, rx, "t", one, |_| {})
    };
    assert!(feed(&mut c, &mut rx).unwrap().is_some());
    assert_eq!(
        feed(&mut c, &mut rx),
        Err(FeedError::Client(ClientError::SubscriptionRefused(0x80)))
    );
    rx.clear();
    rx.push(&[0x10, 0]);
    assert_eq!(
        feed(&mut c, &mut rx),
        Err(FeedError::Frame(FrameError::Decode(
            DecodeError::Unexpected(1)
        )))
    );
    // At MQTT 5, SUBACK 0x97 (Quota exceeded) is the reason the refusal carries.
    let mut flash = Flash::new();
    let mut c = client(&mut flash, Protocol::V5);
    let mut rx = Framer::new([0u8; 64], Protocol::V5, 64, 1 << 20);
    c.connect();
    rx.push(&[0x20, 3, 0, 0, 0, 0x90, 4, 0, 1, 0, 0x97]);
    assert!(
        c.feed(&mut flash, &mut rx, "t", one, |_| {})
            .unwrap()
            .is_some()
    );
    let refused = c.feed(&mut flash, &mut rx, "t", one, |_| {});
    assert_eq!(
        refused,
        Err(FeedError::Client(ClientError::SubscriptionRefused(0x97)))
    );
    assert_eq!(suback_name_at(0x97, Protocol::V5), "Quota exceeded");
}

#[test]
fn an_oversized_publish_is_acknowledged_rejected_and_its_tail_skipped() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash, Protocol::V311);
    // A 16-byte buffer: a PUBLISH of 20 bytes of payload does not fit.
    let mut rx = Framer::new([0u8; 16], Protocol::V311, 16, usize::MAX);
    c.connect();
    rx.push(&[0x20, 2, 0, 0, 0x90, 3, 0, 1, 2]);
    while c
        .feed(&mut flash, &mut rx, "t", one, |_| {})
        .unwrap()
        .is_some()
    {}
    let mut big = vec![0x34, 25, 0, 1, b't', 0, 9];
    big.extend_from_slice(&[b'x'; 20]);
    big.extend_from_slice(&publish(10));
    assert_eq!(rx.push(&big), 16);
    let out = c
        .feed(&mut flash, &mut rx, "t", one, |_| {})
        .unwrap()
        .unwrap();
    assert_eq!(
        (out.decided, out.packets().collect::<Vec<_>>()),
        (Some(Decided::Rejected), vec![Send::Ack(Ack::Pubrec(9))])
    );
    // Its 11 bytes still to come are skipped; the PUBLISH behind it is taken.
    assert_eq!(rx.push(&big[16..]), 19);
    let out = c
        .feed(&mut flash, &mut rx, "t", one, |_| {})
        .unwrap()
        .unwrap();
    assert_eq!((out.decided, out.pid), (Some(Decided::Applied), Some(10)));
    assert_eq!(
        (
            c.receiver().record().rejected,
            c.receiver().record().applied
        ),
        (1, 1)
    );
}

fn connect_bytes(session_expiry: u32) -> Vec<u8> {
    let config = Config {
        client_id: "d",
        filter: "t",
        qos: QoS::ExactlyOnce,
        keep_alive: 60,
        protocol: Protocol::V5,
        maximum_packet_size: 300,
        session_expiry,
    };
    let mut buf = [0u8; 64];
    let n = Client::<Sum, 2>::encode(&config, Send::Connect, &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn connect_asks_for_the_configured_session_expiry_and_leaves_out_0() {
    // 0: no 0x11 property; absent means 0, the session ends at disconnect (MQTT 5
    // §3.1.2.11.2). Properties: Receive Maximum 2, Maximum Packet Size 300.
    assert_eq!(
        connect_bytes(0),
        [
            0x10, 22, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x00, 0, 60, 8, 0x21, 0, 2, 0x27, 0, 0, 1,
            0x2C, 0, 1, b'd'
        ]
    );
    // 3,600 s: 0x11 and four bytes.
    assert_eq!(
        connect_bytes(3600),
        [
            0x10, 27, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x00, 0, 60, 13, 0x11, 0, 0, 0x0E, 0x10,
            0x21, 0, 2, 0x27, 0, 0, 1, 0x2C, 0, 1, b'd'
        ]
    );
    assert_eq!(
        &connect_bytes(SESSION_EXPIRY_S)[13..18],
        &[0x11, 0xFF, 0xFF, 0xFF, 0xFF]
    );
}

#[test]
fn connack_and_suback_codes_are_named_as_the_specifications_name_them() {
    // MQTT 3.1.1 §3.2.2.3, Table 3.1.
    let v311: Vec<_> = (0..=6)
        .map(|c| connack_name_at(c, Protocol::V311))
        .collect();
    assert_eq!(
        v311,
        [
            "Connection Accepted",
            "Connection Refused, unacceptable protocol version",
            "Connection Refused, identifier rejected",
            "Connection Refused, Server unavailable",
            "Connection Refused, bad user name or password",
            "Connection Refused, not authorized",
            "a return code MQTT 3.1.1 does not define",
        ]
    );
    // MQTT 5 §3.2.2.2; 1 to 5 are an MQTT 3.1.1 server's answer to level 5.
    assert_eq!(connack_name_at(0x87, Protocol::V5), "Not authorized");
    assert_eq!(
        connack_name_at(1, Protocol::V5),
        "Connection Refused, unacceptable protocol version"
    );
    // SUBACK, MQTT 3.1.1 §3.9.3 and MQTT 5 §3.9.3.
    assert_eq!(suback_name_at(0x80, Protocol::V311), "Failure");
    assert_eq!(suback_name_at(2, Protocol::V311), "Success - Maximum QoS 2");
    assert_eq!(suback_name_at(0, Protocol::V5), "Granted QoS 0");
    assert_eq!(
        suback_name_at(0xA2, Protocol::V5),
        "Wildcard Subscriptions not supported"
    );
    assert_eq!(codec::SUBACK_FAILURE, 0x80);
}
