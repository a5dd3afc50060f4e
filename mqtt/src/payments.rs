//! idem's payments as MQTT application messages: the JSON that `idem kafka consume`
//! reads as a record's value, with the message id in an `"id"` field, since an MQTT 3.1.1
//! PUBLISH has no record key: `{"id": "p17", "payer": "ada", "amount": 5}`. Parsed with
//! serde-json-core, on the device as on the host.

use idem_core::log::{IdKey, MessageId};
use idem_sim::payment::Message;
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
