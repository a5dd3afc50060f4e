//! What stops `mqtt consume`, in one sentence each: the client's errors, the
//! receiver's, and a journal the image does not hold.

use std::path::Path;

use idem_mqtt::client::ClientError;
use idem_mqtt::codec::{self, Protocol};

use super::super::link::{self, Broken};
use idem_lab::error::usage;

pub(super) fn client_error<E: core::fmt::Debug>(
    e: ClientError<E>,
    topic: &str,
    protocol: Protocol,
) -> Broken {
    Broken::Garbage(match e {
        ClientError::Receive(e) => return fatal(e),
        ClientError::Refused(code) => format!(
            "the broker refused the connection: {} (return code {code})",
            link::refusal_at(code, protocol)
        ),
        ClientError::SubscriptionRefused(code) => format!(
            "the broker refused the subscription to {topic}: {} (return code 0x{code:02X})",
            codec::suback_name_at(code, protocol)
        ),
        ClientError::Disconnected(r) => {
            return Broken::Closed(format!(
                "the broker sent DISCONNECT {} (reason code 0x{r:02X})",
                idem_mqtt::codec::v5::reason_name(r)
            ));
        }
        ClientError::Unexpected(what) => {
            format!(
                "the broker sent {what}, which a subscriber that publishes nothing never gets here"
            )
        }
    })
}

fn fatal<E: core::fmt::Debug>(e: idem_mqtt::receiver::ReceiveError<E>) -> Broken {
    use idem_mqtt::receiver::ReceiveError as R;
    Broken::Garbage(match e {
        R::Full { pid, places } => format!(
            "the receiver was handed a new QoS 2 identifier {pid} with all {places} places held"
        ),
        R::NoIdentifier => "the broker sent a QoS 1 or 2 PUBLISH without an identifier".into(),
        other => format!("the receiver stopped: {other:?}"),
    })
}

pub(super) fn journal_error<E: core::fmt::Debug>(
    path: &Path,
    e: idem_core::journal::JournalError<E>,
) -> anyhow::Error {
    usage(format!(
        "{} does not hold a receiver's journal this idem reads ({e:?}); it was left untouched",
        path.display()
    ))
}
