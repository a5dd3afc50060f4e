//! The MQTT 5 codec, written by hand: packets as MQTT 5.0 spells them, byte for byte,
//! the CONNACK properties a client honours, reason codes, the Maximum Packet Size, and
//! no panic on any bytes.

use idem_mqtt::codec::v5::{self, reason};
use idem_mqtt::codec::{
    ConnackProperties, DecodeError, EncodeError, Frame, Incoming, Outgoing, Publish, QoS,
};

const MAX: usize = 128;
const LIMIT: usize = 1024;

fn one(buf: &[u8]) -> Incoming<'_> {
    match v5::next(buf, MAX, LIMIT) {
        Ok(Some(Frame::Packet { packet, len })) if len == buf.len() => packet,
        other => panic!("{buf:02x?}: {other:?}"),
    }
}

fn encoded(p: &Outgoing<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; v5::encoded_len(p)];
    let n = v5::encode(p, &mut buf).unwrap();
    assert_eq!(n, buf.len(), "{p:?}: encoded_len");
    buf
}

#[test]
fn connect_carries_clean_start_the_session_expiry_and_the_receive_maximum() {
    // MQTT 5 §3.1.2: "MQTT", level 5, flags (Clean Start is bit 1), Keep Alive, then the
    // properties: 0x11 Session Expiry Interval (four bytes), 0x21 Receive Maximum (two),
    // 0x27 Maximum Packet Size (four); then the client identifier.
    let connect = Outgoing::Connect5 {
        client_id: "d",
        keep_alive: 60,
        clean_start: false,
        session_expiry: u32::MAX,
        receive_maximum: 32,
        maximum_packet_size: 1 << 20,
    };
    let want = [
        0x10, 27, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x00, 0, 60, 13, 0x11, 0xFF, 0xFF, 0xFF, 0xFF,
        0x21, 0, 32, 0x27, 0, 0x10, 0, 0, 0, 1, b'd',
    ];
    assert_eq!(encoded(&connect), want);
    // A Session Expiry Interval of 0 is left out: absent means 0 (§3.1.2.11.2).
    let fresh = Outgoing::Connect5 {
        client_id: "d",
        keep_alive: 60,
        clean_start: true,
        session_expiry: 0,
        receive_maximum: 1,
        maximum_packet_size: 300,
    };
    let want = [
        0x10, 22, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 60, 8, 0x21, 0, 1, 0x27, 0, 0, 1, 0x2C,
        0, 1, b'd',
    ];
    assert_eq!(encoded(&fresh), want);
    // A Receive Maximum of 0 is a protocol error (§3.1.2.11.3): not encoded.
    let zero = Outgoing::Connect5 {
        client_id: "d",
        keep_alive: 60,
        clean_start: true,
        session_expiry: 0,
        receive_maximum: 0,
        maximum_packet_size: 300,
    };
    assert_eq!(v5::encode(&zero, &mut [0; 64]), Err(EncodeError::Invalid));
    // MQTT 3.1.1's CONNECT is not MQTT 5's.
    let old = Outgoing::Connect {
        client_id: "d",
        keep_alive: 60,
        clean_session: false,
    };
    assert_eq!(v5::encode(&old, &mut [0; 64]), Err(EncodeError::Invalid));
}

#[test]
fn what_a_subscriber_sends_encodes_as_mqtt_5_spells_it() {
    // SUBSCRIBE: identifier, an empty property section, the filter, its options byte
    // holding the QoS (§3.8.3.1).
    let subscribe = Outgoing::Subscribe {
        pid: 1,
        filter: "t",
        qos: QoS::ExactlyOnce,
    };
    assert_eq!(encoded(&subscribe), [0x82, 7, 0, 1, 0, 0, 1, b't', 2]);
    // PUBREC of a success leaves the reason code out (§3.5.2.1).
    assert_eq!(encoded(&Outgoing::Pubrec(7)), [0x50, 2, 0, 7]);
    assert_eq!(encoded(&Outgoing::Pubrel(7)), [0x62, 2, 0, 7]);
    // PUBCOMP 0x92: the PUBREL's identifier is not held (§3.7.2.1).
    let unknown = Outgoing::PubcompReason(7, reason::PACKET_IDENTIFIER_NOT_FOUND);
    assert_eq!(encoded(&unknown), [0x70, 3, 0, 7, 0x92]);
    // DISCONNECT: 0x00 with no body, a reason with one byte (§3.14.2.1).
    assert_eq!(encoded(&Outgoing::Disconnect), [0xE0, 0]);
    let past = Outgoing::DisconnectReason(reason::RECEIVE_MAXIMUM_EXCEEDED);
    assert_eq!(encoded(&past), [0xE0, 1, 0x93]);
    // PUBLISH with an empty property section (§3.3.2.3).
    let p = Publish {
        dup: false,
        qos: QoS::ExactlyOnce,
        pid: Some(5),
        retain: false,
        topic: "a",
        payload: b"xy",
    };
    assert_eq!(
        encoded(&Outgoing::Publish(p)),
        [0x34, 8, 0, 1, b'a', 0, 5, 0, b'x', b'y']
    );
    assert_eq!(one(&encoded(&Outgoing::Publish(p))), Incoming::Publish(p));
}

#[test]
fn connack_names_its_reason_and_the_limits_the_client_honours() {
    // Session present 1, Success, properties: Receive Maximum 20, Maximum Packet Size
    // 300, Topic Alias Maximum 10 (read and skipped), Maximum QoS 1.
    let connack = [
        0x20, 16, 0x01, 0x00, 13, 0x21, 0, 20, 0x27, 0, 0, 1, 0x2C, 0x22, 0, 10, 0x24, 1,
    ];
    assert_eq!(
        one(&connack),
        Incoming::Connack {
            session_present: true,
            code: 0,
            properties: ConnackProperties {
                receive_maximum: Some(20),
                maximum_packet_size: Some(300),
                session_expiry: None,
                maximum_qos: Some(1),
            },
        }
    );
    // Refused: 0x87 Not authorized, no properties.
    let refused = one(&[0x20, 3, 0x00, 0x87, 0]);
    assert_eq!(
        refused,
        Incoming::Connack {
            session_present: false,
            code: 0x87,
            properties: ConnackProperties::default(),
        }
    );
    assert_eq!(v5::reason_name(0x87), "Not authorized");
    // An MQTT 3.1.1 server's refusal of level 5 (return code 1, no properties): read,
    // so that the caller can name it.
    assert_eq!(
        one(&[0x20, 2, 0x00, 0x01]),
        Incoming::Connack {
            session_present: false,
            code: 1,
            properties: ConnackProperties::default(),
        }
    );
    // A property MQTT 5 does not define (0x05) makes the packet malformed (§2.2.2.2).
    assert_eq!(
        v5::next(&[0x20, 5, 0x00, 0x00, 2, 0x05, 0], MAX, LIMIT),
        Err(DecodeError::Malformed(2))
    );
    // A property section longer than the packet, likewise.
    assert_eq!(
        v5::next(&[0x20, 4, 0x00, 0x00, 9, 0x24], MAX, LIMIT),
        Err(DecodeError::Malformed(2))
    );
}

#[test]
fn reason_codes_on_acknowledgements_and_disconnect() {
    // PUBREL with 0x92 is still a release of identifier 3.
    assert_eq!(one(&[0x62, 3, 0, 3, 0x92]), Incoming::Pubrel(3));
    // PUBREC 0x97 (Quota exceeded) with an empty property section: refused.
    assert_eq!(
        one(&[0x50, 4, 0, 9, 0x97, 0]),
        Incoming::AckRefused {
            kind: 5,
            pid: 9,
            reason: 0x97
        }
    );
    // PUBACK 0x10 (No matching subscribers) is a success (below 0x80).
    assert_eq!(one(&[0x40, 3, 0, 9, 0x10]), Incoming::Puback(9));
    // The server's DISCONNECT, 0x8E Session taken over; and one with no body, 0x00.
    assert_eq!(one(&[0xE0, 2, 0x8E, 0]), Incoming::Disconnect(0x8E));
    assert_eq!(one(&[0xE0, 0]), Incoming::Disconnect(0));
    // SUBACK: granted QoS 2, and refused 0x87.
    assert_eq!(
        one(&[0x90, 4, 0, 1, 0, 2]),
        Incoming::Suback {
            pid: 1,
            granted: Some(QoS::ExactlyOnce),
            reason: 2
        }
    );
    assert_eq!(
        one(&[0x90, 4, 0, 1, 0, 0x87]),
        Incoming::Suback {
            pid: 1,
            granted: None,
            reason: 0x87
        }
    );
    // AUTH (15) is not taken: idem asks for no enhanced authentication.
    assert_eq!(
        v5::next(&[0xF0, 0], MAX, LIMIT),
        Err(DecodeError::Unexpected(15))
    );
    // A PUBLISH with an empty topic stands for a Topic Alias, never granted.
    assert_eq!(
        v5::next(&[0x30, 4, 0, 0, 0, b'x'], MAX, LIMIT),
        Err(DecodeError::Malformed(3))
    );
}

/// Every code of MQTT 5's Table 2-6 has its name, those of UNSUBACK and AUTH too (a
/// subscriber never unsubscribes nor authenticates, but a broker can send them); only a
/// code the table lacks is called undefined.
#[test]
fn every_reason_code_mqtt_5_defines_is_named() {
    let names = [0x11, 0x18, 0x19, 0x12, 0xA3].map(v5::reason_name);
    assert_eq!(
        names,
        [
            "No subscription existed",
            "Continue authentication",
            "Re-authenticate",
            "a reason code MQTT 5 does not define",
            "a reason code MQTT 5 does not define",
        ]
    );
    let defined = (0..=u8::MAX)
        .filter(|&c| v5::reason_name(c) != "a reason code MQTT 5 does not define")
        .count();
    assert_eq!(defined, 43);
}

#[test]
fn a_packet_past_the_maximum_packet_size_is_named_as_soon_as_its_length_arrives() {
    // A PUBLISH of 2 + 300 bytes against a limit of 200: named from its first three
    // bytes, before the rest arrives.
    let head = [0x34, 0xAC, 0x02];
    assert_eq!(
        v5::next(&head, MAX, 200),
        Err(DecodeError::PastMaximum(303))
    );
    // Within the limit but over what the caller takes whole: oversized, acknowledged and
    // rejected as at MQTT 3.1.1.
    let mut big = vec![0x34, 0xAC, 0x02, 0, 1, b'a', 0, 9, 0];
    big.resize(303, b'x');
    assert_eq!(
        v5::next(&big, MAX, LIMIT),
        Ok(Some(Frame::Oversized {
            qos: QoS::ExactlyOnce,
            pid: Some(9),
            len: 303
        }))
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
fn no_bytes_panic_the_mqtt_5_decoder() {
    // 200,000 buffers: random bytes, and a valid CONNACK with properties and a valid
    // PUBLISH with one byte changed or cut.
    let mut seed = 31;
    let connack: &[u8] = &[0x20, 11, 0x01, 0x00, 8, 0x21, 0, 20, 0x27, 0, 0, 1, 0x2C];
    let mut publish = [0u8; 64];
    let p = Publish {
        dup: false,
        qos: QoS::ExactlyOnce,
        pid: Some(3),
        retain: false,
        topic: "a",
        payload: br#"{"id":"p1","amount":1}"#,
    };
    let n = v5::encode(&Outgoing::Publish(p), &mut publish).unwrap();
    let (mut packets, mut errors) = (0, 0);
    for i in 0..200_000 {
        let mut buf = [0u8; 64];
        let len = (next_u64(&mut seed) % 64) as usize;
        let valid: &[u8] = if i % 4 == 1 { connack } else { &publish[..n] };
        if i % 2 == 0 {
            for b in &mut buf[..len] {
                *b = next_u64(&mut seed) as u8;
            }
        } else {
            buf[..valid.len()].copy_from_slice(valid);
            let at = (next_u64(&mut seed) % valid.len() as u64) as usize;
            buf[at] = next_u64(&mut seed) as u8;
        }
        let len = if i % 2 == 0 {
            len
        } else {
            len.min(valid.len()).max(1)
        };
        match v5::next(&buf[..len], 48, 56) {
            Ok(Some(_)) => packets += 1,
            Ok(None) => {}
            Err(_) => errors += 1,
        }
    }
    // Nothing panicked. The seeded run's counts: a change in them is a change in what
    // the decoder takes.
    assert_eq!((packets, errors), (44_049, 123_566));
}
