//! idem's payments as MQTT application messages: the JSON that `idem kafka consume`
//! reads as a record's value, with the message id in an `"id"` field, since an MQTT 3.1.1
//! PUBLISH has no record key: `{"id": "p17", "payer": "ada", "amount": 5}`. Parsed with
//! serde-json-core, on the device as on the host.

use idem_core::log::{IdKey, MessageId};
use idem_payments::Message;
use serde::Deserialize;

/// The longest message id taken, in bytes.
pub const MAX_ID: usize = 64;

#[derive(Deserialize)]
struct Wire<'a> {
    id: &'a str,
    #[serde(rename = "payer")]
    _payer: Option<&'a str>,
    amount: i64,
}

/// Why a payload is not a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PayloadError {
    /// Not a JSON object with a string `"id"` and an integer `"amount"`.
    NotAPayment,
    /// An empty id, or one over [`MAX_ID`] bytes.
    Id,
}

/// The payment in `payload`: its id keyed with `key` (the image's), its amount.
pub fn parse(payload: &[u8], key: &IdKey) -> Result<Message, PayloadError> {
    let (wire, _) =
        serde_json_core::from_slice::<Wire<'_>>(payload).map_err(|_| PayloadError::NotAPayment)?;
    if wire.id.is_empty() || wire.id.len() > MAX_ID {
        return Err(PayloadError::Id);
    }
    Ok(Message {
        id: MessageId::keyed(key, wire.id.as_bytes()),
        producer: 0,
        epoch: 0,
        seq: 0,
        amount: wire.amount,
    })
}

/// The id and amount in `payload`, as bytes and a number (for a truth file's reader).
pub fn id_and_amount(payload: &[u8]) -> Result<(&str, i64), PayloadError> {
    let (wire, _) =
        serde_json_core::from_slice::<Wire<'_>>(payload).map_err(|_| PayloadError::NotAPayment)?;
    Ok((wire.id, wire.amount))
}

/// What a payment subscriber's session did, as its journal record and its client's
/// counts say: one set of figures that `idem mqtt consume` reports and that the board
/// sends in its report frame (`idem device mqtt`), so both ends report the same things.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    /// The store's total.
    pub total: i64,
    /// Messages applied (the record's count, over every run on the flash).
    pub applied: u32,
    /// Messages the store skipped as duplicates.
    pub skipped: u32,
    /// Messages rejected (undecodable, over the maximum size, or refused by the store).
    pub rejected: u32,
    /// This run: PUBLISHes with DUP 1.
    pub redeliveries: u64,
    /// This run: QoS 2 PUBLISHes whose identifier was held, not applied again.
    pub held_again: u64,
    /// This run: retained messages, reported and not applied.
    pub retained: u64,
    /// This run: records written.
    pub records: u64,
    /// This run: messages decided.
    pub decided: u64,
    /// The last CONNACK's session present.
    pub session_present: bool,
    /// Identifiers held when the broker said session present 0.
    pub lost_identifiers: u64,
    /// The flash held a session from an earlier run.
    pub resumed: bool,
    /// The QoS the broker granted, when this run subscribed.
    pub granted: Option<u8>,
    /// CONNACKs of this run that said session present 0.
    pub new_sessions: u32,
    /// This run: PUBLISHes (not retained) received at QoS 0, 1 and 2.
    pub received_at: [u64; 3],
    /// This run: PUBLISHes on a topic outside the subscription's filter, rejected.
    pub foreign: u64,
    /// Where MQTT's promise did not hold ([`crate::client::Client::broken`]).
    pub broken: heapless::Vec<crate::client::Broken, 7>,
    /// This run: QoS 2 PUBLISHes left unanswered with every place taken (each sent
    /// again by the broker at a later connection).
    pub unanswered: u64,
    /// This run: connections the session closed itself so that the broker sends again
    /// what it left unanswered.
    pub resend_reconnects: u32,
    /// At MQTT 5: new QoS 2 PUBLISHes the broker sent with every identifier of the
    /// Receive Maximum unacknowledged (MQTT 5 §4.9).
    pub past_receive_maximum: u64,
    /// This run: QoS 2 PUBLISHes with DUP 0 under an identifier held, a broker's
    /// violation ([`crate::client::Client::held_identifier_reused`]).
    pub held_identifier_reused: u64,
    /// QoS 2 PUBLISHes the broker sent again after their PUBREL, a broker's violation
    /// taken for the message released and not applied, over every run on the flash
    /// ([`crate::receiver::Record::after_pubrel`]).
    pub publish_after_pubrel: u64,
}

impl Figures {
    /// The figures of `client`'s session, subscribed at `asked`.
    pub fn of<S: idem_payments::Sum, const N: usize, Q>(
        client: &crate::client::Client<S, N, Q>,
        asked: crate::codec::QoS,
    ) -> Self
    where
        Q: AsRef<[Option<crate::client::Waiting<S::Payload>>]>
            + AsMut<[Option<crate::client::Waiting<S::Payload>>]>,
    {
        let record = client.receiver().record();
        let counts = client.counts();
        Self {
            total: S::total(&record.state),
            applied: record.applied,
            skipped: record.skipped,
            rejected: record.rejected,
            redeliveries: counts.redeliveries,
            held_again: counts.held_again,
            retained: counts.retained,
            records: counts.records,
            decided: counts.decided,
            session_present: client.session_present,
            lost_identifiers: client.lost_identifiers,
            resumed: client.resumed,
            granted: client.granted.map(crate::codec::QoS::level),
            new_sessions: client.new_sessions,
            received_at: client.received_at,
            foreign: client.foreign,
            broken: client.broken(asked, S::IDEMPOTENT),
            unanswered: client.unanswered,
            resend_reconnects: client.resend_reconnects,
            past_receive_maximum: client.past_receive_maximum,
            held_identifier_reused: client.held_identifier_reused,
            publish_after_pubrel: client.receiver().after_pubrel(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_parses_and_anything_else_is_refused() {
        let key = IdKey::PUBLIC;
        let p = parse(br#"{"id": "p17", "payer": "ada", "amount": 5}"#, &key).unwrap();
        assert_eq!((p.id, p.amount), (MessageId::keyed(&key, b"p17"), 5));
        // Another field order, no payer, an unknown field.
        let q = parse(br#"{"amount":-3,"id":"p17","note":"x"}"#, &key).unwrap();
        assert_eq!((q.id, q.amount), (p.id, -3));
        for bad in [
            &b"not json"[..],
            br#"{"id": "p1", "amount": "five"}"#,
            br#"{"id": 1, "amount": 5}"#,
            br#"{"amount": 5}"#,
            b"",
            &[0xFF, 0xFE, 0x00],
        ] {
            assert_eq!(parse(bad, &key), Err(PayloadError::NotAPayment), "{bad:?}");
        }
        assert_eq!(
            parse(br#"{"id": "", "amount": 5}"#, &key),
            Err(PayloadError::Id)
        );
    }
}
