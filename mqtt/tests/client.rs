//! The session around the receiver, packet by packet: SUBSCRIBE at every connection, a
//! QoS 2 PUBLISH left unanswered while every place is taken and a new connection asked
//! for once a PUBREL frees one, and the packets a subscriber refuses.

use idem_core::journal::Region;
use idem_core::testing::flash::MemFlash;
use idem_mqtt::client::{Client, ClientError, Config, Left, Phase, Send, Waiting};
use idem_mqtt::codec::{ConnackProperties, Incoming, Protocol, Publish, QoS};
use idem_mqtt::receiver::{Ack, Decided, Keep, Receiver, Release};

mod common;
use common::Sum;

type Flash = MemFlash<3, 1024>;

/// Two places.
fn client(flash: &mut Flash) -> Client<Sum, 2> {
    let region = Region { start: 0, pages: 3 };
    let r = Receiver::open(flash, region, 0x7E57_0400, Sum, Keep::Flash, Release::Now).unwrap();
    Client::new(r)
}

fn publish(pid: u16) -> Incoming<'static> {
    resend(pid, false)
}

fn one(_: &[u8]) -> Option<i64> {
    Some(1)
}

#[test]
fn every_connection_subscribes_and_counts_the_new_sessions() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    assert_eq!(c.connect(), Send::Connect);
    let connack = Incoming::Connack {
        session_present: false,
        code: 0,
        properties: Default::default(),
    };
    let out = c.on_packet(&mut flash, connack, "t", one).unwrap();
    assert_eq!(
        (out.send.as_slice(), c.phase()),
        (&[Send::Subscribe][..], Phase::Subscribing)
    );
    let suback = Incoming::Suback {
        pid: 1,
        granted: Some(QoS::ExactlyOnce),
        reason: 2,
    };
    assert!(
        c.on_packet(&mut flash, suback, "t", one)
            .unwrap()
            .send
            .is_empty()
    );
    assert_eq!(
        (c.phase(), c.granted),
        (Phase::Receiving, Some(QoS::ExactlyOnce))
    );
    // Reconnected, the broker holds the session: SUBSCRIBE again all the same (the
    // session may hold no subscription, or another), which replaces the one it holds.
    c.connect();
    let present = Incoming::Connack {
        session_present: true,
        code: 0,
        properties: Default::default(),
    };
    let out = c.on_packet(&mut flash, present, "t", one).unwrap();
    assert_eq!(
        (out.send.as_slice(), c.phase()),
        (&[Send::Subscribe][..], Phase::Subscribing)
    );
    assert_eq!((c.session_present, c.new_sessions), (true, 1));
    // What it sends, as the specification spells it.
    let config = Config {
        client_id: "d",
        filter: "t",
        qos: QoS::ExactlyOnce,
        keep_alive: 60,
        protocol: Default::default(),
        maximum_packet_size: 0,
        session_expiry: 0,
    };
    let mut buf = [0u8; 32];
    let n = Client::<Sum, 2>::encode(&config, Send::Subscribe, &mut buf).unwrap();
    assert_eq!(&buf[..n], &[0x82, 6, 0, 1, 0, 1, b't', 2]);
}

fn connack<Q>(c: &mut Client<Sum, 2, Q>, flash: &mut Flash)
where
    Q: AsRef<[Option<Waiting<i64>>]> + AsMut<[Option<Waiting<i64>>]>,
{
    c.connect();
    let present = Incoming::Connack {
        session_present: true,
        code: 0,
        properties: Default::default(),
    };
    c.on_packet(flash, present, "t", one).unwrap();
}

fn sent(out: &idem_mqtt::client::Outbox<2>) -> Vec<Send> {
    out.packets().collect()
}

#[test]
fn a_publish_past_the_places_is_left_unanswered_and_a_reconnection_asked_once_one_is_free() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    connack(&mut c, &mut flash);
    for pid in [1, 2] {
        let out = c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
        assert_eq!(
            (out.records, sent(&out), out.decided),
            (1, vec![Send::Ack(Ack::Pubrec(pid))], Some(Decided::Applied))
        );
    }
    // Both places taken: 3, 4 and 5 are left unanswered, unapplied, nothing written;
    // however many the broker sends past its window, nothing is kept for them.
    for pid in [3, 4, 5] {
        let out = c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
        assert_eq!((out.records, sent(&out), out.decided), (0, vec![], None));
        assert!(!c.resend_due());
    }
    // A resend of a held identifier is still answered (PUBREC again, nothing applied).
    let again = c.on_packet(&mut flash, publish(2), "t", one).unwrap();
    assert_eq!(
        (sent(&again), again.decided),
        (vec![Send::Ack(Ack::Pubrec(2))], Some(Decided::Held))
    );
    // QoS 1 needs no place: decided and answered.
    let qos1 = Incoming::Publish(Publish {
        qos: QoS::AtLeastOnce,
        ..match publish(9) {
            Incoming::Publish(p) => p,
            _ => unreachable!(),
        }
    });
    let out = c.on_packet(&mut flash, qos1, "t", one).unwrap();
    assert_eq!(sent(&out), vec![Send::Ack(Ack::Puback(9))]);
    assert_eq!((*c.receiver().state(), c.unanswered), (3, 3));
    // PUBREL 1 frees a place: PUBCOMP 1, and a new connection is due.
    let out = c
        .on_packet(&mut flash, Incoming::Pubrel(1), "t", one)
        .unwrap();
    assert_eq!((out.records, sent(&out)), (1, vec![Send::Pubcomp(1)]));
    assert!(c.resend_due());
    c.resending();
    // At the new connection the broker sends 3, 4, 5 again (DUP 1): 3 takes the free
    // place, and no resend is due until another is left unanswered.
    connack(&mut c, &mut flash);
    assert!(!c.resend_due());
    let out = c.on_packet(&mut flash, publish(3), "t", one).unwrap();
    assert_eq!(sent(&out), vec![Send::Ack(Ack::Pubrec(3))]);
    let out = c.on_packet(&mut flash, publish(4), "t", one).unwrap();
    assert_eq!((sent(&out), c.resend_due()), (vec![], false));
    assert_eq!(
        (
            *c.receiver().state(),
            c.unanswered,
            c.resend_reconnects,
            c.receiver().held().as_slice()
        ),
        (4, 4, 1, &[2, 3][..])
    );
}

#[test]
fn what_a_subscriber_refuses() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    c.connect();
    assert_eq!(
        c.on_packet(&mut flash, publish(1), "t", one),
        Err(ClientError::Unexpected("a packet before its CONNACK"))
    );
    assert_eq!(
        c.on_packet(
            &mut flash,
            Incoming::Connack {
                session_present: false,
                code: 5,
                properties: Default::default(),
            },
            "t",
            one
        ),
        Err(ClientError::Refused(5))
    );
    c.on_packet(
        &mut flash,
        Incoming::Connack {
            session_present: false,
            code: 0,
            properties: Default::default(),
        },
        "t",
        one,
    )
    .unwrap();
    assert_eq!(
        c.on_packet(
            &mut flash,
            Incoming::Suback {
                pid: 1,
                granted: None,
                reason: 0x97
            },
            "t",
            one
        ),
        Err(ClientError::SubscriptionRefused(0x97))
    );
    let second = c.on_packet(
        &mut flash,
        Incoming::Connack {
            session_present: true,
            code: 0,
            properties: Default::default(),
        },
        "t",
        one,
    );
    assert_eq!(second, Err(ClientError::Unexpected("a second CONNACK")));
    assert!(
        matches!(c.on_packet(&mut flash, Incoming::Puback(3), "t", one), Err(ClientError::Unexpected(s)) if s.starts_with("PUBACK"))
    );
}

#[test]
fn the_session_timing_is_one_policy() {
    use idem_mqtt::client::{CONNECT_TRIES, KEEP_ALIVE_S, backoff_ms, ping_due};
    // Five tries, four waits of 100 ms doubling: 1.5 s before jitter (up to half again).
    let waits: Vec<u32> = (1..CONNECT_TRIES).map(backoff_ms).collect();
    assert_eq!(waits, [100, 200, 400, 800]);
    // A keep-alive of 60 s, PINGREQ after 30 s without sending.
    assert_eq!(KEEP_ALIVE_S, 60);
    assert!(!ping_due(29_999) && ping_due(30_000));
}

#[test]
fn where_the_promise_broke_is_named() {
    use idem_mqtt::client::Broken;
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    c.connect();
    let fresh = Incoming::Connack {
        session_present: false,
        code: 0,
        properties: Default::default(),
    };
    c.on_packet(&mut flash, fresh, "t", one).unwrap();
    // A first session on a fresh record is no loss.
    assert_eq!(c.broken(QoS::ExactlyOnce, false).as_slice(), &[]);
    let granted = Incoming::Suback {
        pid: 1,
        granted: Some(QoS::AtLeastOnce),
        reason: 1,
    };
    c.on_packet(&mut flash, granted, "t", one).unwrap();
    let qos0 = Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        pid: None,
        retain: false,
        topic: "t",
        payload: b"1",
    };
    c.on_packet(&mut flash, Incoming::Publish(qos0), "t", one)
        .unwrap();
    let elsewhere = Publish { topic: "u", ..qos0 };
    c.on_packet(&mut flash, Incoming::Publish(elsewhere), "t", one)
        .unwrap();
    // A second session present 0: the broker lost the first.
    c.connect();
    c.on_packet(&mut flash, fresh, "t", one).unwrap();
    assert_eq!(
        c.broken(QoS::ExactlyOnce, false).as_slice(),
        &[
            Broken::SessionLost { identifiers: 0 },
            Broken::ForeignTopics(1),
            Broken::Downgraded {
                granted: QoS::AtLeastOnce
            },
            Broken::AtQos0(2),
        ]
    );
    assert_eq!(
        c.broken(QoS::AtLeastOnce, false).last(),
        Some(&Broken::Qos1WithoutDedup)
    );
}

fn config_at(protocol: Protocol) -> Config<'static> {
    Config {
        client_id: "d",
        filter: "t",
        qos: QoS::ExactlyOnce,
        keep_alive: 60,
        protocol,
        maximum_packet_size: 1 << 20,
        session_expiry: idem_mqtt::client::SESSION_EXPIRY_S,
    }
}

fn bytes(protocol: Protocol, send: Send) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = Client::<Sum, 2>::encode(&config_at(protocol), send, &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn at_mqtt_5_the_receive_maximum_is_the_places_and_a_broker_past_it_is_counted() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash).with_protocol(Protocol::V5);
    // CONNECT: Clean Start 0, Session Expiry Interval 0xFFFFFFFF (never), Receive
    // Maximum 2 (the places), Maximum Packet Size 1 MiB (MQTT 5 §3.1.2.11).
    assert_eq!(
        bytes(Protocol::V5, c.connect()),
        [
            0x10, 27, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x00, 0, 60, 13, 0x11, 0xFF, 0xFF, 0xFF,
            0xFF, 0x21, 0, 2, 0x27, 0, 0x10, 0, 0, 0, 1, b'd'
        ]
    );
    let properties = ConnackProperties {
        receive_maximum: Some(20),
        ..ConnackProperties::default()
    };
    let connack = Incoming::Connack {
        session_present: true,
        code: 0,
        properties,
    };
    c.on_packet(&mut flash, connack, "t", one).unwrap();
    assert_eq!(c.connack, properties);
    for pid in [1, 2] {
        c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
    }
    // Both identifiers of the Receive Maximum held and none completed: 3 and 4 are past
    // it (MQTT 5 §4.9), left unanswered as at MQTT 3.1.1, and counted.
    for pid in [3, 4] {
        let out = c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
        assert_eq!((out.records, sent(&out)), (0, vec![]));
    }
    assert_eq!((c.past_receive_maximum, c.unanswered), (2, 2));
    let out = c
        .on_packet(&mut flash, Incoming::Pubrel(1), "t", one)
        .unwrap();
    assert_eq!(sent(&out), vec![Send::Pubcomp(1)]);
    // The reconnection for the resend says why: 0x93, Receive Maximum exceeded.
    assert!(c.resend_due());
    let bye = c.resending();
    assert_eq!(bye, Send::DisconnectWith(0x93));
    assert_eq!(bytes(Protocol::V5, bye), [0xE0, 1, 0x93]);
    assert_eq!(bytes(Protocol::V311, bye), [0xE0, 0]);
    // A new connection starts clean: a resend for a full window alone says 0x00.
    c.connect();
    assert_eq!(c.resending(), Send::Disconnect);
    assert_eq!(bytes(Protocol::V5, Send::Disconnect), [0xE0, 0]);
}

#[test]
fn a_pubrel_of_an_identifier_not_held_gets_pubcomp_0x92_at_mqtt_5() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash).with_protocol(Protocol::V5);
    connack(&mut c, &mut flash);
    let out = c
        .on_packet(&mut flash, Incoming::Pubrel(9), "t", one)
        .unwrap();
    assert_eq!(
        (out.records, sent(&out)),
        (0, vec![Send::PubcompUnknown(9)])
    );
    assert_eq!(c.counts().unknown_releases, 1);
    // Packet Identifier not found (MQTT 5 §3.7.2.1); MQTT 3.1.1 has no reason code.
    assert_eq!(
        bytes(Protocol::V5, Send::PubcompUnknown(9)),
        [0x70, 3, 0, 9, 0x92]
    );
    assert_eq!(
        bytes(Protocol::V311, Send::PubcompUnknown(9)),
        [0x70, 2, 0, 9]
    );
    // A server's DISCONNECT ends the connection, its reason kept.
    let bye = c.on_packet(&mut flash, Incoming::Disconnect(0x8B), "t", one);
    assert_eq!(bye.err(), Some(ClientError::Disconnected(0x8B)));
}

/// Two places and two slots to wait in.
fn waiting_client(flash: &mut Flash) -> Client<Sum, 2, [Option<Waiting<i64>>; 2]> {
    let region = Region { start: 0, pages: 3 };
    let r = Receiver::open(flash, region, 0x7E57_0400, Sum, Keep::Flash, Release::Now).unwrap();
    Client::with_waiting(r, [const { None }; 2])
}

#[test]
fn a_publish_past_the_places_waits_in_the_callers_slots_and_past_them_is_left_unanswered() {
    let mut flash = Flash::new();
    let mut c = waiting_client(&mut flash);
    c.connect();
    let connack = Incoming::Connack {
        session_present: false,
        code: 0,
        properties: ConnackProperties::default(),
    };
    c.on_packet(&mut flash, connack, "t", one).unwrap();
    for pid in [1, 2] {
        let out = c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
        assert_eq!(
            (out.decided, out.pid, out.left),
            (Some(Decided::Applied), Some(pid), None)
        );
    }
    // Both places taken: 3 and 4 wait, undecided and unanswered, nothing written; 5
    // finds the slots full and is left unanswered.
    let mut left = Vec::new();
    for pid in [3, 4, 5] {
        let out = c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
        assert_eq!((out.records, out.is_empty(), out.decided), (0, true, None));
        left.push(out.left);
    }
    assert_eq!(
        left,
        [
            Some(Left::Waiting),
            Some(Left::Waiting),
            Some(Left::Unanswered)
        ]
    );
    assert_eq!((c.waiting(), c.waited, c.unanswered), (2, 2, 1));
    assert_eq!(*c.receiver().state(), 2);
    // No place: nothing is taken from the queue.
    assert_eq!(c.take_waiting(&mut flash).unwrap(), None);
    // PUBREL 1 frees a place: 3, the oldest waiting, takes it.
    let out = c
        .on_packet(&mut flash, Incoming::Pubrel(1), "t", one)
        .unwrap();
    assert_eq!(sent(&out), vec![Send::Pubcomp(1)]);
    let out = c.take_waiting(&mut flash).unwrap().unwrap();
    assert_eq!(
        (out.records, sent(&out), out.decided, out.pid),
        (
            1,
            vec![Send::Ack(Ack::Pubrec(3))],
            Some(Decided::Applied),
            Some(3)
        )
    );
    assert_eq!(c.take_waiting(&mut flash).unwrap(), None);
    // Something waits: no reconnection yet, though 5 was left unanswered.
    assert!(!c.resend_due());
    c.on_packet(&mut flash, Incoming::Pubrel(2), "t", one)
        .unwrap();
    let out = c.take_waiting(&mut flash).unwrap().unwrap();
    assert_eq!((out.pid, c.waiting()), (Some(4), 0));
    // The queue is empty, but 3 and 4 hold both places.
    assert!(!c.resend_due());
    c.on_packet(&mut flash, Incoming::Pubrel(3), "t", one)
        .unwrap();
    assert!(c.resend_due());
    assert_eq!(*c.receiver().state(), 4);
    // 6 takes the free place, 7 waits; PUBREL 4 frees a place, and 8, new with a
    // place free, waits behind 7, in the order they came. A new connection empties
    // the queue (the broker sends both again, §4.4).
    let out = c.on_packet(&mut flash, publish(6), "t", one).unwrap();
    assert_eq!((out.decided, out.left), (Some(Decided::Applied), None));
    let out = c.on_packet(&mut flash, publish(7), "t", one).unwrap();
    assert_eq!(out.left, Some(Left::Waiting));
    c.on_packet(&mut flash, Incoming::Pubrel(4), "t", one)
        .unwrap();
    let out = c.on_packet(&mut flash, publish(8), "t", one).unwrap();
    assert_eq!((out.left, c.waiting()), (Some(Left::Waiting), 2));
    c.connect();
    assert_eq!(
        (c.waiting(), c.take_waiting(&mut flash).unwrap()),
        (0, None)
    );
    assert_eq!((*c.receiver().state(), c.waited, c.most_waiting), (5, 4, 2));
}

#[test]
fn a_client_without_slots_leaves_a_publish_past_the_places_unanswered_at_once() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    connack(&mut c, &mut flash);
    for pid in [1, 2] {
        c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
    }
    let out = c.on_packet(&mut flash, publish(3), "t", one).unwrap();
    assert_eq!(
        (out.left, c.waiting_room(), c.waited),
        (Some(Left::Unanswered), 0, 0)
    );
}

/// A QoS 2 PUBLISH under `pid`, with DUP as given.
fn resend(pid: u16, dup: bool) -> Incoming<'static> {
    message(pid, dup, b"1")
}

/// Every packet the calls allow, in the order the caller sends them: each call's, then
/// what the PUBLISHes waiting for a place ask.
fn answered(
    c: &mut Client<Sum, 2, [Option<Waiting<i64>>; 2]>,
    flash: &mut Flash,
    packet: Incoming<'_>,
) -> Vec<Send> {
    let mut all = sent(&c.on_packet(flash, packet, "t", one).unwrap());
    while let Some(out) = c.take_waiting(flash).unwrap() {
        all.extend(sent(&out));
    }
    all
}

/// MQTT 3.1.1 §4.6 [MQTT-4.6.0-3]: PUBRECs in the order their PUBLISHes came, as long
/// as that leaves a way on. 1 and 2 hold both places, 3 waits for one; 1 sent again
/// (DUP 1) is a resend, applied never. Every place is held, so 3 can be decided only
/// after a PUBREL, and a broker that lost 1's PUBREC (a reconnection) sends PUBREL 1
/// only after it: PUBREC 1 goes out ahead of 3's, counted. PUBREL 2 frees a place:
/// PUBCOMP 2, PUBREC 3. With a place free, a held resend keeps its turn.
#[test]
fn a_publish_under_a_held_identifier_is_answered_behind_the_publishes_waiting() {
    let mut flash = Flash::new();
    let mut c = waiting_client(&mut flash);
    connack(&mut c, &mut flash);
    for pid in [1, 2] {
        c.on_packet(&mut flash, publish(pid), "t", one).unwrap();
    }
    assert_eq!(answered(&mut c, &mut flash, publish(3)), []);
    let out = c.on_packet(&mut flash, resend(1, true), "t", one).unwrap();
    assert_eq!(
        (sent(&out), out.left, c.waiting(), c.counts().held_again),
        (vec![], Some(Left::Waiting), 2, 1)
    );
    let ahead = c.take_waiting(&mut flash).unwrap().unwrap();
    assert_eq!(
        (sent(&ahead), c.pubrec_ahead, c.waiting()),
        (vec![Send::Ack(Ack::Pubrec(1))], 1, 1)
    );
    assert_eq!(c.take_waiting(&mut flash).unwrap(), None);
    assert_eq!(
        answered(&mut c, &mut flash, Incoming::Pubrel(2)),
        [Send::Pubcomp(2), Send::Ack(Ack::Pubrec(3))]
    );
    // Applied: 1, 2, 3; the resend of 1 never; one waited for a place.
    assert_eq!((*c.receiver().state(), c.waited, c.waiting()), (3, 1, 0));
    // Nothing waits: a resend of a held identifier is answered at once.
    assert_eq!(
        answered(&mut c, &mut flash, resend(3, true)),
        [Send::Ack(Ack::Pubrec(3))]
    );
    assert_eq!(c.held_identifier_reused, 0);
}

/// A broker's reuse of an identifier, named: a DUP 0 PUBLISH under an identifier held
/// (a new message: a resend carries DUP 1), and, with the release in the next record,
/// a PUBLISH under an identifier whose PUBREL came before its PUBCOMP went out. Each is
/// taken for a resend and not applied.
#[test]
fn a_broker_reusing_an_identifier_not_freed_is_counted() {
    let mut flash = Flash::new();
    let region = Region { start: 0, pages: 3 };
    let r = Receiver::open(
        &mut flash,
        region,
        0x7E57_0400,
        Sum,
        Keep::Flash,
        Release::WithNext,
    )
    .unwrap();
    let mut c: Client<Sum, 2> = Client::new(r);
    connack(&mut c, &mut flash);
    c.on_packet(&mut flash, publish(1), "t", one).unwrap();
    c.on_packet(&mut flash, resend(1, true), "t", one).unwrap();
    assert_eq!(
        (c.held_identifier_reused, c.counts().publish_after_pubrel),
        (0, 0)
    );
    c.on_packet(&mut flash, resend(1, false), "t", one).unwrap();
    assert_eq!(
        (c.held_identifier_reused, c.counts().publish_after_pubrel),
        (1, 0)
    );
    // PUBREL 1: its PUBCOMP waits for the next record; a PUBLISH under 1 now, DUP 0 or
    // 1, comes after the PUBREL.
    assert!(
        sent(
            &c.on_packet(&mut flash, Incoming::Pubrel(1), "t", one)
                .unwrap()
        )
        .is_empty()
    );
    for dup in [false, true] {
        let out = c.on_packet(&mut flash, resend(1, dup), "t", one).unwrap();
        assert_eq!(out.decided, Some(Decided::Held));
    }
    assert_eq!(
        (c.held_identifier_reused, c.counts().publish_after_pubrel),
        (1, 2)
    );
    assert_eq!((*c.receiver().state(), c.counts().held_again), (1, 4));
    // Its PUBCOMP sent, 1 is free: a PUBLISH under it is new.
    c.on_quiet(&mut flash).unwrap();
    let out = c.on_packet(&mut flash, publish(1), "t", one).unwrap();
    assert_eq!(
        (out.decided, *c.receiver().state()),
        (Some(Decided::Applied), 2)
    );
    assert_eq!(
        (c.held_identifier_reused, c.counts().publish_after_pubrel),
        (1, 2)
    );
}

/// A QoS 2 PUBLISH on `t` under `pid`, its payload `payload` (an amount in ASCII).
fn message(pid: u16, dup: bool, payload: &'static [u8]) -> Incoming<'static> {
    Incoming::Publish(Publish {
        dup,
        qos: QoS::ExactlyOnce,
        pid: Some(pid),
        retain: false,
        topic: "t",
        payload,
    })
}

fn amount(payload: &[u8]) -> Option<i64> {
    core::str::from_utf8(payload).ok()?.parse().ok()
}

/// A scripted broker that sends a QoS 2 PUBLISH again (DUP 1) after it sent its PUBREL,
/// which MQTT 3.1.1 §4.3.3 forbids and Mosquitto 2.0.11 does when a client connects twice
/// in quick succession: here across a reset of the receiver, after the release reached
/// its record. The tombstone in that record recognises the message (identifier, topic,
/// payload): PUBREC, nothing applied, the count written before the PUBREC; the PUBREL
/// that follows gets a plain PUBCOMP. A new message under the identifier is applied,
/// with DUP 0, or with DUP 1 and another payload.
#[test]
fn a_publish_sent_again_after_its_pubrel_across_a_reset_is_recognised_and_not_applied() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    connack(&mut c, &mut flash);
    c.on_packet(&mut flash, message(7, false, b"5"), "t", amount)
        .unwrap();
    let out = c
        .on_packet(&mut flash, Incoming::Pubrel(7), "t", amount)
        .unwrap();
    assert_eq!((out.records, sent(&out)), (1, vec![Send::Pubcomp(7)]));
    // A reset: the PUBCOMP may or may not have reached the broker.
    let mut c = client(&mut flash);
    connack(&mut c, &mut flash);
    let out = c
        .on_packet(&mut flash, message(7, true, b"5"), "t", amount)
        .unwrap();
    assert_eq!(
        (out.records, sent(&out), out.decided),
        (1, vec![Send::Ack(Ack::Pubrec(7))], Some(Decided::Held))
    );
    assert_eq!(
        (
            *c.receiver().state(),
            c.counts().publish_after_pubrel,
            c.receiver().after_pubrel()
        ),
        (5, 1, 1)
    );
    let out = c
        .on_packet(&mut flash, Incoming::Pubrel(7), "t", amount)
        .unwrap();
    assert_eq!((out.records, sent(&out)), (0, vec![Send::Pubcomp(7)]));
    assert_eq!(c.counts().unknown_releases, 0);
    // Another reset: the count is in the record, over every run on the flash.
    let mut c = client(&mut flash);
    connack(&mut c, &mut flash);
    assert_eq!(
        (c.receiver().after_pubrel(), c.counts().publish_after_pubrel),
        (1, 0)
    );
    // 7 given to a new message whose DUP 0 send never arrived: DUP 1, another payload.
    let out = c
        .on_packet(&mut flash, message(7, true, b"3"), "t", amount)
        .unwrap();
    assert_eq!(
        (out.decided, *c.receiver().state()),
        (Some(Decided::Applied), 8)
    );
    c.on_packet(&mut flash, Incoming::Pubrel(7), "t", amount)
        .unwrap();
    // And a new message with DUP 0 is new, whatever its payload.
    let out = c
        .on_packet(&mut flash, message(7, false, b"3"), "t", amount)
        .unwrap();
    assert_eq!(
        (out.decided, *c.receiver().state()),
        (Some(Decided::Applied), 11)
    );
    assert_eq!(c.receiver().after_pubrel(), 1);
}

/// The tombstones are a ring of `N` (two here): the oldest release is forgotten, and
/// its message sent again after PUBREL is taken as new.
#[test]
fn the_tombstones_keep_the_last_n_releases() {
    let mut flash = Flash::new();
    let mut c = client(&mut flash);
    connack(&mut c, &mut flash);
    for pid in [1, 2, 3] {
        c.on_packet(&mut flash, message(pid, false, b"1"), "t", amount)
            .unwrap();
        c.on_packet(&mut flash, Incoming::Pubrel(pid), "t", amount)
            .unwrap();
    }
    let tombstones: Vec<u16> = c
        .receiver()
        .record()
        .released
        .iter()
        .map(|t| t.pid)
        .collect();
    assert_eq!(tombstones, vec![2, 3]);
    for (pid, applied) in [(3, 3), (2, 3), (1, 4)] {
        c.on_packet(&mut flash, message(pid, true, b"1"), "t", amount)
            .unwrap();
        assert_eq!(*c.receiver().state(), applied, "{pid}");
    }
    assert_eq!(c.counts().publish_after_pubrel, 2);
}

/// MQTT 3.1.1 §4.6 [MQTT-4.6.0-2]: PUBACKs in the order their QoS 1 PUBLISHes came. A
/// QoS 1 PUBLISH never waits (it needs no place), so its PUBACK goes out as it comes,
/// also while a QoS 2 PUBLISH waits for a place; the rule orders PUBACKs among
/// themselves and PUBRECs among themselves ([MQTT-4.6.0-3]), not one kind against the
/// other.
#[test]
fn pubacks_go_out_in_the_order_their_publishes_came_while_a_qos_2_one_waits() {
    let mut flash = Flash::new();
    let mut c = waiting_client(&mut flash);
    connack(&mut c, &mut flash);
    let qos1 = |pid| {
        Incoming::Publish(Publish {
            dup: false,
            qos: QoS::AtLeastOnce,
            pid: Some(pid),
            retain: false,
            topic: "t",
            payload: b"1",
        })
    };
    let mut all = Vec::new();
    for packet in [
        publish(1),
        qos1(10),
        publish(2),
        publish(3),
        qos1(11),
        qos1(12),
    ] {
        all.extend(answered(&mut c, &mut flash, packet));
    }
    all.extend(answered(&mut c, &mut flash, Incoming::Pubrel(1)));
    assert_eq!(
        all,
        [
            Send::Ack(Ack::Pubrec(1)),
            Send::Ack(Ack::Puback(10)),
            Send::Ack(Ack::Pubrec(2)),
            Send::Ack(Ack::Puback(11)),
            Send::Ack(Ack::Puback(12)),
            Send::Pubcomp(1),
            Send::Ack(Ack::Pubrec(3)),
        ]
    );
}

/// A message released and sent again after its PUBREL needs no place: with every place
/// held and a new PUBLISH waiting for one, it is answered in its turn (here ahead of the
/// waiting one, which only a PUBREL can unblock), not left waiting for a place that would
/// never come (Mosquitto 2.0.11 at MQTT 5 stalled the C door so).
#[test]
fn a_publish_after_its_pubrel_needs_no_place() {
    let mut flash = Flash::new();
    let mut c = waiting_client(&mut flash);
    connack(&mut c, &mut flash);
    answered(&mut c, &mut flash, message(1, false, b"5"));
    assert_eq!(
        answered(&mut c, &mut flash, Incoming::Pubrel(1)),
        [Send::Pubcomp(1)]
    );
    for pid in [2, 3] {
        answered(&mut c, &mut flash, message(pid, false, b"1"));
    }
    assert_eq!(answered(&mut c, &mut flash, message(4, false, b"1")), []);
    assert_eq!(
        answered(&mut c, &mut flash, message(1, true, b"5")),
        [Send::Ack(Ack::Pubrec(1))]
    );
    assert_eq!(
        (
            *c.receiver().state(),
            c.counts().publish_after_pubrel,
            c.waiting()
        ),
        (3, 1, 1)
    );
}
