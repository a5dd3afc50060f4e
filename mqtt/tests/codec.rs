//! The codec: packets as the specification spells them, round trips through mqttrs, and
//! no panic on any bytes.

use idem_mqtt::codec::{self, DecodeError, Frame, Incoming, Outgoing, Publish, QoS};

const MAX: usize = 128;

fn one(buf: &[u8]) -> Incoming<'_> {
    match codec::next(buf, MAX) {
        Ok(Some(Frame::Packet { packet, len })) if len == buf.len() => packet,
        other => panic!("{buf:02x?}: {other:?}"),
    }
}

#[test]
fn packets_as_the_specification_spells_them() {
    // CONNACK with session present 1, accepted (MQTT 3.1.1 §3.2).
    let connack = one(&[0x20, 0x02, 0x01, 0x00]);
    assert_eq!(
        connack,
        Incoming::Connack {
            session_present: true,
            code: 0,
            properties: Default::default(),
        }
    );
    // PUBREL of identifier 10: its fixed header's flags are 0b0010 (§3.6.1).
    assert_eq!(one(&[0x62, 0x02, 0x00, 0x0A]), Incoming::Pubrel(10));
    assert_eq!(
        codec::next(&[0x60, 0x02, 0x00, 0x0A], MAX),
        Err(DecodeError::Malformed(6))
    );
    // SUBACK granting QoS 2, and a refusal (0x80).
    assert_eq!(
        one(&[0x90, 0x03, 0x00, 0x01, 0x02]),
        Incoming::Suback {
            pid: 1,
            granted: Some(QoS::ExactlyOnce),
            reason: 2
        }
    );
    assert_eq!(
        one(&[0x90, 0x03, 0x00, 0x01, 0x80]),
        Incoming::Suback {
            pid: 1,
            granted: None,
            reason: 0x80
        }
    );
    // A QoS 2 PUBLISH with DUP 1 to "a/b", identifier 10, payload "hi" (§3.3).
    let publish = one(&[
        0x3C, 0x09, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, b'h', b'i',
    ]);
    assert_eq!(
        publish,
        Incoming::Publish(Publish {
            dup: true,
            qos: QoS::ExactlyOnce,
            pid: Some(10),
            retain: false,
            topic: "a/b",
            payload: b"hi",
        })
    );
    // What a broker never sends a client.
    for (first, kind) in [
        (0x10, 1),
        (0x82, 8),
        (0xA2, 10),
        (0xC0, 12),
        (0xE0, 14),
        (0x00, 0),
        (0xF0, 15),
    ] {
        assert_eq!(
            codec::next(&[first, 0x00], MAX),
            Err(DecodeError::Unexpected(kind))
        );
    }
    // A topic longer than the packet, a PUBLISH of QoS 3, an identifier of 0.
    assert_eq!(
        codec::next(&[0x30, 0x03, 0x00, 0x09, b'a'], MAX),
        Err(DecodeError::Malformed(3))
    );
    assert_eq!(
        codec::next(&[0x36, 0x04, 0x00, 0x01, b'a', 0x00], MAX),
        Err(DecodeError::Malformed(3))
    );
    assert_eq!(
        codec::next(&[0x32, 0x05, 0x00, 0x01, b'a', 0x00, 0x00], MAX),
        Err(DecodeError::Malformed(3))
    );
    // A remaining length of five bytes.
    assert_eq!(
        codec::next(&[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], MAX),
        Err(DecodeError::Length)
    );
}

#[test]
fn a_packet_arrives_in_pieces_and_two_arrive_together() {
    let mut buf = [0u8; 64];
    let p = Publish {
        dup: false,
        qos: QoS::AtLeastOnce,
        pid: Some(7),
        retain: false,
        topic: "t",
        payload: b"{}",
    };
    let n = codec::encode(&Outgoing::Publish(p), &mut buf).unwrap();
    let m = codec::encode(&Outgoing::Pubrel(7), &mut buf[n..]).unwrap();
    for cut in 0..n {
        assert_eq!(codec::next(&buf[..cut], MAX), Ok(None), "{cut} bytes");
    }
    assert_eq!(
        codec::next(&buf[..n + m], MAX),
        Ok(Some(Frame::Packet {
            packet: Incoming::Publish(p),
            len: n
        }))
    );
    assert_eq!(one(&buf[n..n + m]), Incoming::Pubrel(7));
}

#[test]
fn a_publish_over_the_maximum_is_named_with_its_identifier_from_its_first_bytes() {
    let payload = [b'x'; 300];
    let p = Publish {
        dup: false,
        qos: QoS::ExactlyOnce,
        pid: Some(9),
        retain: false,
        topic: "pay",
        payload: &payload,
    };
    let mut buf = [0u8; 400];
    let n = codec::encode(&Outgoing::Publish(p), &mut buf).unwrap();
    assert_eq!(n, 1 + 2 + 2 + 3 + 2 + 300);
    // The fixed header, the topic and the identifier: 10 bytes are enough.
    assert_eq!(codec::next(&buf[..9], MAX), Ok(None));
    assert_eq!(
        codec::next(&buf[..10], MAX),
        Ok(Some(Frame::Oversized {
            qos: QoS::ExactlyOnce,
            pid: Some(9),
            len: n
        }))
    );
    // Any other packet over the maximum is an error.
    assert_eq!(
        codec::next(&[0x90, 0x81, 0x01], MAX),
        Err(DecodeError::Oversized(132))
    );
}

#[test]
fn what_a_client_sends_encodes_as_the_specification_spells_it() {
    let mut buf = [0u8; 64];
    let connect = Outgoing::Connect {
        client_id: "dev",
        keep_alive: 60,
        clean_session: false,
    };
    let n = codec::encode(&connect, &mut buf).unwrap();
    // Protocol name MQTT, level 4, flags 0 (clean session 0), keep-alive 60 (§3.1).
    assert_eq!(
        &buf[..n],
        &[
            0x10, 15, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x00, 0, 60, 0, 3, b'd', b'e', b'v'
        ]
    );
    let n = codec::encode(
        &Outgoing::Subscribe {
            pid: 1,
            filter: "pay",
            qos: QoS::ExactlyOnce,
        },
        &mut buf,
    )
    .unwrap();
    assert_eq!(&buf[..n], &[0x82, 8, 0, 1, 0, 3, b'p', b'a', b'y', 2]);
    for (p, bytes) in [
        (Outgoing::Puback(258), [0x40, 2, 1, 2]),
        (Outgoing::Pubrec(258), [0x50, 2, 1, 2]),
        (Outgoing::Pubcomp(258), [0x70, 2, 1, 2]),
    ] {
        let n = codec::encode(&p, &mut buf).unwrap();
        assert_eq!(&buf[..n], &bytes);
    }
    assert_eq!(codec::encode(&Outgoing::Pingreq, &mut buf), Ok(2));
    assert_eq!(&buf[..2], &[0xC0, 0]);
    assert_eq!(
        codec::encode(&Outgoing::Puback(0), &mut buf),
        Err(codec::EncodeError::Invalid)
    );
    assert_eq!(
        codec::encode(&connect, &mut buf[..4]),
        Err(codec::EncodeError::Buffer { needed: 17 })
    );
}

/// SplitMix64, for reproducible garbage.
fn next_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn no_bytes_panic_the_decoder() {
    // 200,000 buffers: random bytes, and valid packets with one byte changed or cut.
    let mut seed = 29;
    let mut valid = [0u8; 64];
    let p = Publish {
        dup: false,
        qos: QoS::ExactlyOnce,
        pid: Some(3),
        retain: false,
        topic: "a",
        payload: br#"{"id":"p1","amount":1}"#,
    };
    let n = codec::encode(&Outgoing::Publish(p), &mut valid).unwrap();
    let (mut packets, mut errors) = (0, 0);
    for i in 0..200_000 {
        let mut buf = [0u8; 64];
        let len = (next_u64(&mut seed) % 64) as usize;
        if i % 2 == 0 {
            for b in &mut buf[..len] {
                *b = next_u64(&mut seed) as u8;
            }
        } else {
            buf[..n].copy_from_slice(&valid[..n]);
            let at = (next_u64(&mut seed) % n as u64) as usize;
            buf[at] = next_u64(&mut seed) as u8;
        }
        let len = if i % 2 == 0 { len } else { len.min(n).max(1) };
        match codec::next(&buf[..len], 48) {
            Ok(Some(_)) => packets += 1,
            Ok(None) => {}
            Err(_) => errors += 1,
        }
    }
    // Nothing panicked. The seeded run's counts: a change in them is a change in what
    // the decoder takes (most changed bytes of the valid packet fall in its payload).
    assert_eq!((packets, errors), (48_233, 109_132));
}

#[test]
fn topic_filters_match_as_the_specification_says() {
    // MQTT 3.1.1 §4.7.1 and §4.7.2's own examples, and a few more.
    for (filter, topic, want) in [
        ("sport/tennis/player1/#", "sport/tennis/player1", true),
        (
            "sport/tennis/player1/#",
            "sport/tennis/player1/ranking",
            true,
        ),
        (
            "sport/tennis/player1/#",
            "sport/tennis/player1/score/wimbledon",
            true,
        ),
        ("sport/#", "sport", true),
        ("#", "sport/tennis", true),
        ("sport/tennis/+", "sport/tennis/player1", true),
        ("sport/tennis/+", "sport/tennis/player1/ranking", false),
        ("sport/+", "sport", false),
        ("sport/+", "sport/", true),
        ("+/+", "/finance", true),
        ("/+", "/finance", true),
        ("+", "/finance", false),
        ("#", "$SYS/broker", false),
        ("+/monitor/Clients", "$SYS/monitor/Clients", false),
        ("$SYS/#", "$SYS/broker", true),
        ("pay", "pay", true),
        ("pay", "pay2", false),
        ("pay", "pay/x", false),
    ] {
        assert_eq!(
            codec::matches(filter, topic),
            want,
            "{filter} against {topic}"
        );
    }
}
