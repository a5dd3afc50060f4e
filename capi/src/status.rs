//! Every function of the door returns one of these codes; `idem_strerror` gives its
//! sentence. 0 is success, 1 a request to reconnect, negative codes errors.

use core::ffi::{CStr, c_char, c_int};

/// Done.
pub const IDEM_OK: c_int = 0;
/// `idem_idle`: close the connection (after sending the output) and connect again.
pub const IDEM_RECONNECT: c_int = 1;
/// A pointer argument was NULL.
pub const IDEM_E_NULL: c_int = -1;
/// The receiver was not opened by `idem_open`, or a call on it failed inside idem.
pub const IDEM_E_NOT_OPEN: c_int = -2;
/// The protocol level is not one this build takes.
pub const IDEM_E_PROTOCOL: c_int = -3;
/// The client identifier, topic filter or QoS cannot be used.
pub const IDEM_E_CONFIG: c_int = -4;
/// The flash's geometry or callbacks cannot hold the journal.
pub const IDEM_E_GEOMETRY: c_int = -5;
/// The state size is over `IDEM_STATE_MAX`, or not the size the flash holds.
pub const IDEM_E_STATE_SIZE: c_int = -6;
/// The read callback failed.
pub const IDEM_E_FLASH_READ: c_int = -7;
/// The write callback failed.
pub const IDEM_E_FLASH_WRITE: c_int = -8;
/// The erase callback failed.
pub const IDEM_E_FLASH_ERASE: c_int = -9;
/// The sync callback failed.
pub const IDEM_E_FLASH_SYNC: c_int = -10;
/// The region holds another journal (another state tag or format), or a damaged one.
pub const IDEM_E_JOURNAL: c_int = -11;
/// Bytes from the broker are not an MQTT packet a subscriber takes.
pub const IDEM_E_MALFORMED: c_int = -12;
/// The broker refused the connection or the subscription.
pub const IDEM_E_REFUSED: c_int = -13;
/// The broker broke the protocol: a packet out of order, an identifier missing.
pub const IDEM_E_BROKER: c_int = -14;
/// The output is full: send it (`idem_output`, `idem_sent`) first.
pub const IDEM_E_BUSY: c_int = -15;
/// An argument is out of range (more bytes sent than were handed out, a short buffer).
pub const IDEM_E_ARGUMENT: c_int = -16;
/// idem failed inside (a bug): the receiver is closed; open it again.
pub const IDEM_E_PANIC: c_int = -17;
/// A callback called the library on the receiver that called it.
pub const IDEM_E_REENTERED: c_int = -18;
/// At MQTT 5, a Session Expiry Interval of 0: the session would end at every disconnect.
pub const IDEM_E_SESSION_EXPIRY: c_int = -19;
/// The broker sent DISCONNECT (MQTT 5) and closes the connection: `idem_reason` names why.
pub const IDEM_E_DISCONNECTED: c_int = -20;

/// Errors after which the receiver must be opened again: what RAM holds may be ahead of
/// the flash.
pub fn is_fatal(code: c_int) -> bool {
    matches!(
        code,
        IDEM_E_FLASH_READ
            | IDEM_E_FLASH_WRITE
            | IDEM_E_FLASH_ERASE
            | IDEM_E_FLASH_SYNC
            | IDEM_E_JOURNAL
            | IDEM_E_GEOMETRY
            | IDEM_E_PANIC
    )
}

/// The sentence for `code`.
pub fn sentence(code: c_int) -> &'static CStr {
    match code {
        IDEM_OK => c"done",
        IDEM_RECONNECT => c"send the output, close the connection and connect again: the broker then resends what was left unanswered",
        IDEM_E_NULL => c"a pointer argument was NULL",
        IDEM_E_NOT_OPEN => c"the receiver was not opened by idem_open (or its open failed)",
        IDEM_E_PROTOCOL => c"the protocol level must be IDEM_MQTT_3_1_1 (4) or IDEM_MQTT_5 (5)",
        IDEM_E_CONFIG => c"the client identifier (1 to 64 bytes) or the topic filter (1 to 128 bytes) is empty, too long or not UTF-8, or the QoS is over 2",
        IDEM_E_GEOMETRY => c"the flash cannot hold the journal: read, write and erase callbacks are required; the write size a power of two up to 32; the erase size a power of two from it up to 4096; the region whole 4096-byte pages, at least two, inside the capacity",
        IDEM_E_STATE_SIZE => c"the state size is over IDEM_STATE_MAX, or differs from the size of the state the flash holds",
        IDEM_E_FLASH_READ => c"the flash's read callback failed: nothing was acknowledged; open the receiver again",
        IDEM_E_FLASH_WRITE => c"the flash's write callback failed: nothing it would have allowed was acknowledged; open the receiver again",
        IDEM_E_FLASH_ERASE => c"the flash's erase callback failed: nothing it would have allowed was acknowledged; open the receiver again",
        IDEM_E_FLASH_SYNC => c"the flash's sync callback failed: nothing it would have allowed was acknowledged; open the receiver again",
        IDEM_E_JOURNAL => c"the region holds a journal of another state tag or format, or a damaged one: it was left untouched",
        IDEM_E_MALFORMED => c"the bytes from the broker are not an MQTT packet a subscriber takes: close the connection and connect again",
        IDEM_E_REFUSED => c"the broker refused the connection or the subscription: idem_reason names its reason code",
        IDEM_E_BROKER => c"the broker sent a packet a subscriber does not take here: close the connection and connect again",
        IDEM_E_BUSY => c"the output is full: send it (idem_output, idem_sent) first",
        IDEM_E_ARGUMENT => c"an argument is out of range",
        IDEM_E_PANIC => c"idem failed inside (a bug, please report it): the receiver is closed; open it again",
        IDEM_E_REENTERED => c"a callback called the library on the receiver that called it: callbacks must not call idem",
        IDEM_E_SESSION_EXPIRY => c"at MQTT 5 the session expiry interval must be above 0: at 0 the broker ends the session, with the QoS 2 messages in flight, when the connection closes (MQTT 5 3.1.2.11.2); IDEM_SESSION_NEVER keeps it as clean session 0 does at MQTT 3.1.1",
        IDEM_E_DISCONNECTED => c"the broker sent DISCONNECT and closes the connection (idem_reason names its reason code): close it and connect again",
        _ => c"not a status code of idem",
    }
}

/// `sentence` as a C string.
pub fn strerror(code: c_int) -> *const c_char {
    sentence(code).as_ptr()
}
