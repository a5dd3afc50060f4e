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
    use idem_core::journal::JournalError as J;
    let name = path.display();
    match e {
        // The receiver's record is tagged with its layout: an image another idem wrote,
        // whose record had other fields (before the tombstones of released identifiers,
        // say), or one made for another store, is foreign to this one.
        J::Foreign { page, tag, version } => usage(format!(
            "{name} holds a receiver's journal this idem does not read (tagged {tag:#010x}, journal format {version}, at page {page}): it was written by another idem, whose receiver record differs, or for another store; it was left untouched, start a new image"
        )),
        J::Decode => usage(format!(
            "{name} holds a receiver's record that does not decode; it was left untouched"
        )),
        J::Damaged { address } => usage(format!(
            "{name}: the page at flash address {address:#x} has a damaged header but holds the receiver's newest record; it was left untouched"
        )),
        other => usage(format!(
            "{name} does not hold a receiver's journal this idem reads ({other:?}); it was left untouched"
        )),
    }
}
