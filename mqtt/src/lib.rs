//! idem-mqtt: an MQTT 3.1.1 and MQTT 5 subscriber's receive rules that keep QoS 2's promise, and
//! QoS 1's with a message id, across resets and power loss. `no_std`, no allocation.
//!
//! A QoS 2 receiver must not apply a PUBLISH again while the broker has not released its
//! packet identifier (MQTT 3.1.1 §4.3.3), and a broker that keeps a persistent session
//! sends again, after a reconnect, every PUBLISH it has no PUBREC (at QoS 2) or PUBACK
//! (at QoS 1) for, and every PUBREL it has no PUBCOMP for (§4.4 [MQTT-4.4.0-1]). A client
//! that keeps those identifiers in RAM forgets them at a reset and applies the resent
//! message again. [`receiver::Receiver`] keeps them in the same power-fail-safe flash record as
//! the effect (an idem-core `Journal`), writes that record before PUBREC, PUBACK or
//! PUBCOMP is allowed out, and says which of them the caller may send.
//!
//! - [`codec`]: packets in and out of byte buffers, MQTT 3.1.1's through mqttrs, framed
//!   and checked first so that no input panics it, MQTT 5's by hand ([`codec::v5`]);
//! - [`receiver`]: the rules, over any idem-core store (the message-id store makes QoS 1
//!   exact);
//! - [`client`]: the session around them, without I/O: SUBSCRIBE at every connection,
//!   the packets a subscriber refuses, PUBLISHes held back while every place is taken;
//! - `payments` (feature): idem's payment payloads;
//! - `sim` (feature): a broker's persistent session, for sweeps at every crash point.
//!
//! No MQTT client crate could be used for this: none keeps the receive state durable
//! with the effect (minimq 0.13.5 keeps the QoS 2 identifiers it received in RAM;
//! rust-mqtt 0.6.0 speaks MQTT 5 alone and leaves the session state to the application;
//! mqtt-async-embedded 1.0 has QoS 0 and 1). So the session rules are written here; the
//! MQTT 3.1.1 packets are mqttrs's, MQTT 5's are written by hand, since no maintained
//! `no_std`, no-alloc MQTT 5 codec has public packets (see [`codec::v5`]).
#![cfg_attr(not(any(test, feature = "sim")), no_std)]
#![deny(missing_docs)]

pub mod client;
pub mod codec;
#[cfg(feature = "payments")]
pub mod payments;
pub mod receiver;
#[cfg(feature = "sim")]
pub mod sim;

/// The largest application message a device takes, in bytes: the broker's
/// `message_size_limit` (mosquitto limits the payload) must say the same, so that the
/// broker refuses what the device could not hold. A PUBLISH over it that arrives anyway
/// is acknowledged and rejected.
pub const MAX_PAYLOAD: usize = 256;

/// The largest PUBLISH a device takes on a topic of `topic` bytes: the fixed header (at
/// most 3 bytes for this size), the topic's length and bytes, the identifier, and
/// [`MAX_PAYLOAD`].
pub const fn max_packet(topic: usize) -> usize {
    3 + 2 + topic + 2 + MAX_PAYLOAD
}

/// Room for an MQTT 5 PUBLISH's property section (MQTT 5 §3.3.2.3): its length and up to
/// 63 bytes of properties that a publisher or broker may add (a Message Expiry Interval,
/// a Payload Format Indicator, a short Content Type).
pub const PROPERTIES_ROOM: usize = 64;

/// [`max_packet`] at `protocol`: at MQTT 5, with [`PROPERTIES_ROOM`].
pub const fn max_packet_at(topic: usize, protocol: codec::Protocol) -> usize {
    match protocol {
        codec::Protocol::V311 => max_packet(topic),
        codec::Protocol::V5 => max_packet(topic) + PROPERTIES_ROOM,
    }
}
