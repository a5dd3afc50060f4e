//! What binds an `mqtt consume` image to its session, and what it keeps of a session's
//! history: the session's identity in the image's header (protocol, broker, client id,
//! topic filter, QoS, where the identifiers are kept), and a mark for each way MQTT's
//! promise broke, set durably when a run first sees it, so that no later run on the
//! image grades it exact.

use idem_mqtt::client::Broken;

use super::ConsumeArgs;
use idem_host::image::{Meta, MqttSession};
use idem_lab::select::WINDOW;

/// The image's run: the session, field by field, and the store.
pub fn meta(a: &ConsumeArgs, pages: u32) -> Meta {
    Meta {
        scenario: "mqtt".into(),
        store: a.store.name().into(),
        events: 0,
        checkpoint_every: 0,
        window: WINDOW,
        pages,
        mqtt: Some(MqttSession {
            protocol: a.protocol.name().into(),
            broker: a.broker.clone(),
            client_id: a.client_id.clone(),
            filter: a.topic.clone(),
            qos: a.qos,
            identifiers: if a.session_ram { "ram" } else { "flash" }.into(),
        }),
    }
}

/// The mark of each way the promise broke (one bit a kind).
pub fn mark(b: &Broken) -> u32 {
    1 << match b {
        Broken::SessionLost { .. } => 0,
        Broken::ForeignTopics(_) => 1,
        Broken::Downgraded { .. } => 2,
        Broken::AtQos0(_) => 3,
        Broken::AtQos1(_) => 4,
        Broken::IdentifiersInRam => 5,
        Broken::Qos1WithoutDedup => 6,
    }
}

/// The marks of `broken`, together.
pub fn marks<'a>(broken: impl IntoIterator<Item = &'a Broken>) -> u32 {
    broken.into_iter().fold(0, |m, b| m | mark(b))
}

/// What each mark says, as a report names an earlier run's.
const WORDS: [&str; 7] = [
    "the broker lost the session (session present 0 for a session begun)",
    "messages came on topics outside the filter",
    "the broker granted a lower QoS than asked",
    "messages arrived at QoS 0, below the QoS asked",
    "messages arrived at QoS 1 into a store that applies a resent one again",
    "the identifiers were in RAM across a stop",
    "QoS 1 into a store that applies a resent message again",
];

/// A sentence for each mark in `kept` that is not in `now` (this run's, named with
/// their figures already).
pub fn earlier(kept: u32, now: u32) -> Vec<String> {
    WORDS
        .iter()
        .enumerate()
        .filter(|(i, _)| (kept & !now) & (1 << i) != 0)
        .map(|(_, w)| format!("an earlier run on this image saw the promise break: {w}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_mqtt::codec::QoS;

    #[test]
    fn each_kind_has_its_own_mark_and_its_words() {
        let all = [
            Broken::SessionLost { identifiers: 3 },
            Broken::ForeignTopics(1),
            Broken::Downgraded {
                granted: QoS::AtLeastOnce,
            },
            Broken::AtQos0(1),
            Broken::AtQos1(1),
            Broken::IdentifiersInRam,
            Broken::Qos1WithoutDedup,
        ];
        assert_eq!(marks(&all), 0b111_1111);
        assert_eq!(earlier(marks(&all), 0).len(), 7);
        assert_eq!(
            earlier(0b101, 0b100),
            [
                "an earlier run on this image saw the promise break: the broker lost the session (session present 0 for a session begun)"
            ]
        );
        assert!(earlier(0b1, 0b1).is_empty());
    }
}
