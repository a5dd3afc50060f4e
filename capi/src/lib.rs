//! idem-mqtt-c: the C door of idem's MQTT receiver, the QoS 2 receive path whose packet
//! identifiers live in the same power-fail-safe flash record as the application's state
//! (idem-mqtt's `receiver` and `client`), for firmware written in C.
//!
//! The C side owns the socket and the flash. It gives the flash as a table of callbacks
//! ([`idem_flash`]), its effect as a callback over a byte record of its own layout
//! ([`idem_app`]), feeds the bytes it receives ([`idem_input`]) and sends the bytes it is
//! handed ([`idem_output`], [`idem_sent`]). An answer is handed out only once the record
//! that allows it is written and synced: no PUBREC, PUBACK or PUBCOMP leaves before its
//! record is on flash. No allocation; every error a code and a sentence
//! ([`idem_strerror`]); on a hosted build a panic is caught and returned as
//! [`IDEM_E_PANIC`], on a device the build aborts (`panic = "abort"`).
//!
//! The header, `include/idem_mqtt.h`, is generated from this crate by cbindgen
//! (`cbindgen.toml`), and tests/tests/c_door.rs checks that it matches.
#![cfg_attr(target_os = "none", no_std)]
#![deny(missing_docs)]

pub mod app;
pub mod door;
pub mod flash;
pub mod status;

use core::ffi::{CStr, c_char, c_int};

use idem_mqtt::client::Send;
use idem_mqtt::codec::{Protocol, QoS};

pub use app::{IDEM_APPLIED, IDEM_DUPLICATE, IDEM_REJECTED, IDEM_STATE_MAX, idem_app};
use door::{Door, Opening};
pub use door::{IDEM_MAX_CLIENT_ID, IDEM_MAX_TOPIC, IDEM_PLACES, IDEM_WAITING};
pub use flash::{IDEM_PAGE, idem_flash};
pub use status::*;

/// MQTT 3.1.1 (its protocol level, §3.1.2.2).
pub const IDEM_MQTT_3_1_1: u8 = 4;
/// MQTT 5 (its protocol level, MQTT 5 §3.1.2.2): CONNECT carries Clean Start 0, the
/// configuration's Session Expiry Interval, and a Receive Maximum of `IDEM_PLACES`.
pub const IDEM_MQTT_5: u8 = 5;
/// The Session Expiry Interval that never ends (MQTT 5 §3.1.2.11.2): the broker keeps
/// the session as clean session 0 keeps it at MQTT 3.1.1.
pub const IDEM_SESSION_NEVER: u32 = u32::MAX;

/// The receiver's storage in 8-byte words.
pub const IDEM_RECEIVER_WORDS: usize = 960;
const MAGIC: u32 = 0x1DE4_C0DE;
/// The magic word while a call runs on the receiver: a callback that calls the library
/// again is refused, never given a second reference to the receiver.
const BUSY: u32 = 0x1DE4_B057;

/// Where the client's waiting slots lie in the receiver's storage: after the door.
const SLOTS_AT: usize =
    core::mem::size_of::<Door>().next_multiple_of(core::mem::align_of::<door::Slots>());
const _: () = assert!(SLOTS_AT + core::mem::size_of::<door::Slots>() <= IDEM_RECEIVER_WORDS * 8);
const _: () = assert!(core::mem::align_of::<Door>() <= 8);
const _: () = assert!(core::mem::align_of::<door::Slots>() <= 8);
// The receiver's record, with the largest state, fits a journal on either unit, on a
// device: 512 bytes at its largest, the bare-metal `MAX_SLOT_SIZE` (a hosted build allows
// more).
const _: () = assert!(
    idem_core::journal::largest_on::<idem_mqtt::receiver::RecordOf<app::CStore, IDEM_PLACES>>(32)
        <= 512
);

/// A receiver's storage, which the C side provides (a `static`, or zeroed memory), never
/// reads or writes itself, and does not move (copy elsewhere) while it is open: the
/// receiver keeps the address of its waiting slots inside it.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct idem_receiver {
    /// The library's: whether `idem_open` made this a receiver.
    pub _magic: u32,
    /// The library's: the receiver.
    pub _storage: [u64; IDEM_RECEIVER_WORDS],
}

/// The session: its protocol, client identifier, topic filter, QoS, keep-alive and, at
/// MQTT 5, its Session Expiry Interval.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct idem_config {
    /// `IDEM_MQTT_3_1_1` or `IDEM_MQTT_5`.
    pub protocol: u8,
    /// The QoS to subscribe at: 0, 1 or 2.
    pub qos: u8,
    /// Seconds; the C side sends PINGREQ (`idem_ping`) after half of it without sending.
    pub keep_alive_s: u16,
    /// The client identifier, NUL-terminated: the broker keeps the session under it.
    pub client_id: *const c_char,
    /// The topic filter, NUL-terminated.
    pub topic: *const c_char,
    /// At MQTT 5, the Session Expiry Interval in seconds: how long the broker keeps the
    /// session, with the QoS 2 messages in flight, after a connection closes. Above 0
    /// (0 is refused: `IDEM_E_SESSION_EXPIRY`); `IDEM_SESSION_NEVER` for ever. Not read
    /// at MQTT 3.1.1, where clean session 0 keeps the session.
    pub session_expiry_s: u32,
}

/// What the receiver holds and did.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct idem_stats {
    /// Messages applied (over every run on the flash).
    pub applied: u32,
    /// Messages the effect found duplicates.
    pub duplicates: u32,
    /// Messages rejected: by the effect, over the maximum size, or on another topic.
    pub rejected: u32,
    /// QoS 2 identifiers held (received, not yet released).
    pub held: u32,
    /// Records written since open.
    pub records: u64,
    /// PUBLISHes with DUP 1 since open.
    pub redeliveries: u64,
    /// QoS 2 PUBLISHes whose identifier was held, not applied again, since open.
    pub held_again: u64,
    /// QoS 2 PUBLISHes left unanswered with every place taken and `IDEM_WAITING`
    /// waiting, since open.
    pub unanswered: u64,
    /// The last CONNACK's session present: 1 or 0.
    pub session_present: u8,
    /// The QoS the broker granted, or -1 before SUBACK.
    pub granted_qos: i8,
    /// 1 when the flash held a session from an earlier run.
    pub resumed: u8,
    /// 1 once the broker has answered this connection's SUBSCRIBE.
    pub subscribed: u8,
    /// The reason code of this connection's refusal or DISCONNECT from the broker
    /// (CONNACK, SUBACK or, at MQTT 5, DISCONNECT), 0 if none: `idem_reason` names it.
    pub reason: u8,
    /// At MQTT 5, the Session Expiry Interval in force: the CONNACK's if it set one,
    /// else the configuration's; 0 at MQTT 3.1.1.
    pub session_expiry_s: u32,
    /// Connections the receiver asked to close (`IDEM_RECONNECT`) since open.
    pub resend_reconnects: u32,
    /// At MQTT 5, new QoS 2 PUBLISHes the broker sent with every place of the Receive
    /// Maximum held (past its limit, MQTT 5 §4.9), since open.
    pub past_receive_maximum: u64,
    /// New QoS 2 PUBLISHes that waited for a place (every one of `IDEM_PLACES` taken),
    /// unanswered, and were decided in the order they came once one was free, since
    /// open.
    pub waited: u64,
    /// The most that waited at once since open, at most `IDEM_WAITING`.
    pub most_waiting: u32,
    /// PUBLISHes waiting for a place now.
    pub waiting: u32,
    /// Points since open where the records written were made durable (one call of the
    /// flash's sync callback each, if it has one) before the answers they allow were
    /// handed out: one for each buffer `idem_input` took packets from (group commit),
    /// and one for each `idem_idle` that wrote a record.
    pub syncs: u64,
    /// QoS 2 PUBLISHes the broker sent under an identifier whose PUBREL it had already
    /// sent, each taken for a resend and not applied, over every run on the flash: the
    /// same message again (MQTT 3.1.1 §4.3.3 forbids it; recognised with DUP 1 by the
    /// tombstone of the identifier released), or a new one under an identifier its
    /// PUBCOMP had not yet freed (§2.3.1). The tombstone departs from a MUST of MQTT,
    /// which has a receiver take any PUBLISH after its PUBCOMP as new (MQTT 3.1.1
    /// [MQTT-4.3.3-2], MQTT 5 [MQTT-4.3.3-12]): a new message with the same topic and
    /// payload under the reused identifier, whose first send never arrived, is taken for
    /// the old one.
    pub publish_after_pubrel: u64,
}

fn guard(f: impl FnOnce() -> c_int) -> c_int {
    #[cfg(not(target_os = "none"))]
    {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(IDEM_E_PANIC)
    }
    #[cfg(target_os = "none")]
    f()
}

/// The receiver's magic word, its door and its client's waiting slots, by raw pointer:
/// no reference to the receiver is made, so that a callback's call on it (refused)
/// aliases nothing.
///
/// # Safety
/// `rx` is non-null and points to storage for a receiver.
unsafe fn parts(rx: *mut idem_receiver) -> (*mut u32, *mut Door, *mut door::Slots) {
    // SAFETY: `rx` is valid (the caller's contract); only field addresses are taken, and
    // `SLOTS_AT` is inside the storage (checked at compile time).
    unsafe {
        let storage = &raw mut (*rx)._storage;
        (
            &raw mut (*rx)._magic,
            storage.cast::<Door>(),
            storage.cast::<u8>().add(SLOTS_AT).cast::<door::Slots>(),
        )
    }
}

/// Runs `f` on the opened receiver at `rx`; a panic closes it.
fn with_door(rx: *mut idem_receiver, f: impl FnOnce(&mut Door) -> Result<c_int, c_int>) -> c_int {
    if rx.is_null() {
        return IDEM_E_NULL;
    }
    // SAFETY: non-null, and the C side's storage for a receiver (its contract).
    let (magic, storage, _) = unsafe { parts(rx) };
    // SAFETY: a valid, aligned word of that storage.
    match unsafe { magic.read() } {
        MAGIC => {}
        BUSY => return IDEM_E_REENTERED,
        _ => return IDEM_E_NOT_OPEN,
    }
    // SAFETY: as above.
    unsafe { magic.write(BUSY) };
    let rc = guard(|| {
        // SAFETY: the magic word says `idem_open` wrote a `Door` here (size and
        // alignment checked at compile time), and BUSY keeps any other call off it
        // until this one returns.
        let door = unsafe { &mut *storage };
        f(door).unwrap_or_else(|code| code)
    });
    // SAFETY: as above.
    unsafe { magic.write(if rc == IDEM_E_PANIC { 0 } else { MAGIC }) };
    rc
}

/// A NUL-terminated string of 1 to `max` bytes of UTF-8.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn text<const M: usize>(p: *const c_char) -> Result<heapless::String<M>, c_int> {
    if p.is_null() {
        return Err(IDEM_E_NULL);
    }
    // SAFETY: non-null and NUL-terminated, the caller's contract.
    let s = unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| IDEM_E_CONFIG)?;
    if s.is_empty() {
        return Err(IDEM_E_CONFIG);
    }
    heapless::String::try_from(s).map_err(|_| IDEM_E_CONFIG)
}

/// Checks what `idem_open` was given.
///
/// # Safety
/// Each pointer is NULL or valid, per `idem_open`.
unsafe fn opening(
    config: *const idem_config,
    flash: *const idem_flash,
    app: *const idem_app,
) -> Result<Opening, c_int> {
    // SAFETY: NULL or valid, the caller's contract.
    let (Some(config), Some(flash), Some(app)) =
        (unsafe { (config.as_ref(), flash.as_ref(), app.as_ref()) })
    else {
        return Err(IDEM_E_NULL);
    };
    let protocol = match config.protocol {
        IDEM_MQTT_3_1_1 => Protocol::V311,
        IDEM_MQTT_5 if config.session_expiry_s == 0 => return Err(IDEM_E_SESSION_EXPIRY),
        IDEM_MQTT_5 => Protocol::V5,
        _ => return Err(IDEM_E_PROTOCOL),
    };
    let qos = QoS::from_level(config.qos).ok_or(IDEM_E_CONFIG)?;
    // SAFETY: NULL or NUL-terminated, the caller's contract.
    let client_id = unsafe { text::<IDEM_MAX_CLIENT_ID>(config.client_id) }?;
    // SAFETY: as above.
    let filter = unsafe { text::<IDEM_MAX_TOPIC>(config.topic) }?;
    let (unit, region) = flash::check(flash).map_err(|_| IDEM_E_GEOMETRY)?;
    if app.effect.is_none() {
        return Err(IDEM_E_NULL);
    }
    if app.state_size > IDEM_STATE_MAX {
        return Err(IDEM_E_STATE_SIZE);
    }
    let mut initial = app::Bytes::default();
    // Within the capacity, checked above.
    let _ = initial.0.resize(app.state_size, 0);
    if !app.initial_state.is_null() {
        // SAFETY: non-null, and `state_size` bytes long (the caller's contract).
        let given = unsafe { core::slice::from_raw_parts(app.initial_state, app.state_size) };
        initial.0.copy_from_slice(given);
    }
    Ok(Opening {
        flash: *flash,
        unit,
        region,
        store: app::CStore::new(*app, initial),
        state_size: app.state_size,
        tag: door::tag(app.state_tag),
        client_id,
        filter,
        qos,
        keep_alive: config.keep_alive_s,
        protocol,
        session_expiry: config.session_expiry_s,
    })
}

/// Opens a receiver in `rx`: checks the configuration, the flash's geometry and the
/// state's size, reads the journal's newest record (a blank region starts from the
/// initial state) and keeps copies of the three tables. Nothing is written. Opening an
/// opened receiver again starts it over from the flash.
///
/// # Safety
/// `rx` is NULL or storage for a receiver; `config`, `flash` and `app` are NULL or valid,
/// their strings NUL-terminated, `app->initial_state` NULL or `app->state_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_open(
    rx: *mut idem_receiver,
    config: *const idem_config,
    flash: *const idem_flash,
    app: *const idem_app,
) -> c_int {
    if rx.is_null() {
        return IDEM_E_NULL;
    }
    // SAFETY: non-null, and the C side's storage for a receiver (its contract).
    let (magic, storage, slots) = unsafe { parts(rx) };
    // SAFETY: a valid, aligned word of that storage.
    if unsafe { magic.read() } == BUSY {
        return IDEM_E_REENTERED;
    }
    // SAFETY: as above; the flash callbacks that open calls find it not open.
    unsafe { magic.write(0) };
    let rc = guard(|| {
        // SAFETY: the caller's contract, passed on; the door and its slots lie apart in
        // the storage, large and aligned enough for both (checked at compile time),
        // which holds nothing that needs dropping and does not move while open.
        let opened = unsafe { opening(config, flash, app) }
            .and_then(|o| unsafe { Door::open_in(storage, slots, o) });
        match opened {
            Ok(()) => IDEM_OK,
            Err(code) => code,
        }
    });
    if rc == IDEM_OK {
        // SAFETY: as above.
        unsafe { magic.write(MAGIC) };
    }
    rc
}

/// Starts a connection the C side has just opened: drops what was left of the last
/// one and queues CONNECT as the output (clean session 0 at MQTT 3.1.1; at MQTT 5 Clean
/// Start 0, the Session Expiry Interval and a Receive Maximum of `IDEM_PLACES`).
///
/// # Safety
/// `rx` is NULL or storage for a receiver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_connect(rx: *mut idem_receiver) -> c_int {
    with_door(rx, |d| d.connect().map(|()| IDEM_OK))
}

/// Hands the receiver `len` bytes received from the broker. It takes what its buffer
/// holds (`*taken`; give the rest again after sending the output), decides every whole
/// packet, writes their records through the flash callbacks, syncs once, and only then
/// adds their answers to the output. After `IDEM_E_MALFORMED`, `IDEM_E_REFUSED`,
/// `IDEM_E_DISCONNECTED` or `IDEM_E_BROKER` close the connection (`idem_reason` names a
/// refusal's or DISCONNECT's reason code); after a flash error open the receiver again.
///
/// # Safety
/// `rx` is NULL or storage for a receiver; `bytes` NULL or `len` bytes; `taken` NULL or
/// valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_input(
    rx: *mut idem_receiver,
    bytes: *const u8,
    len: usize,
    taken: *mut usize,
) -> c_int {
    if bytes.is_null() || taken.is_null() {
        return IDEM_E_NULL;
    }
    // SAFETY: non-null and `len` bytes, the caller's contract.
    let bytes = unsafe { core::slice::from_raw_parts(bytes, len) };
    with_door(rx, |d| {
        let n = d.input(bytes)?;
        // SAFETY: non-null and valid, the caller's contract.
        unsafe { taken.write(n) };
        Ok(IDEM_OK)
    })
}

/// Points `*bytes` and `*len` at the bytes to send now (valid until the next call on
/// the receiver). Their records are durable.
///
/// # Safety
/// `rx` is NULL or storage for a receiver; `bytes` and `len` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_output(
    rx: *mut idem_receiver,
    bytes: *mut *const u8,
    len: *mut usize,
) -> c_int {
    if bytes.is_null() || len.is_null() {
        return IDEM_E_NULL;
    }
    with_door(rx, |d| {
        let out = d.output();
        // SAFETY: non-null and valid, the caller's contract.
        unsafe {
            bytes.write(out.as_ptr());
            len.write(out.len());
        }
        Ok(IDEM_OK)
    })
}

/// Says that the first `n` bytes of the output were sent.
///
/// # Safety
/// `rx` is NULL or storage for a receiver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_sent(rx: *mut idem_receiver, n: usize) -> c_int {
    with_door(rx, |d| d.sent(n).map(|()| IDEM_OK))
}

/// Says that nothing has arrived for a while. Returns `IDEM_RECONNECT` when the C side
/// should send the output (it ends with DISCONNECT), close the connection and connect
/// again, so that the broker resends the PUBLISHes the receiver left unanswered while
/// every place was taken (MQTT 3.1.1 §4.4; at MQTT 5 that DISCONNECT carries 0x93,
/// Receive Maximum exceeded, when the broker sent past `IDEM_PLACES`); else `IDEM_OK`.
///
/// # Safety
/// `rx` is NULL or storage for a receiver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_idle(rx: *mut idem_receiver) -> c_int {
    with_door(rx, |d| {
        d.idle()
            .map(|again| if again { IDEM_RECONNECT } else { IDEM_OK })
    })
}

/// Queues PINGREQ: the C side calls it once it has sent nothing for half the keep-alive.
///
/// # Safety
/// `rx` is NULL or storage for a receiver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_ping(rx: *mut idem_receiver) -> c_int {
    with_door(rx, |d| d.send(Send::Pingreq).map(|()| IDEM_OK))
}

/// Queues DISCONNECT (the broker keeps the session: clean session 0, or at MQTT 5 for
/// the Session Expiry Interval).
///
/// # Safety
/// `rx` is NULL or storage for a receiver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_disconnect(rx: *mut idem_receiver) -> c_int {
    with_door(rx, |d| d.send(Send::Disconnect).map(|()| IDEM_OK))
}

/// Fills `*stats`.
///
/// # Safety
/// `rx` is NULL or storage for a receiver; `stats` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_get_stats(rx: *mut idem_receiver, stats: *mut idem_stats) -> c_int {
    if stats.is_null() {
        return IDEM_E_NULL;
    }
    with_door(rx, |d| {
        let c = d.client();
        let record = c.receiver().record();
        let counts = c.counts();
        let s = idem_stats {
            applied: record.applied,
            duplicates: record.skipped,
            rejected: record.rejected,
            held: c.receiver().held_len() as u32,
            records: counts.records,
            redeliveries: counts.redeliveries,
            held_again: counts.held_again,
            unanswered: c.unanswered,
            session_present: u8::from(c.session_present),
            granted_qos: c.granted.map_or(-1, |q| q.level() as i8),
            resumed: u8::from(c.resumed),
            subscribed: u8::from(c.phase() == idem_mqtt::client::Phase::Receiving),
            reason: d.reason().map_or(0, |(_, code)| code),
            session_expiry_s: d.session_expiry(),
            resend_reconnects: c.resend_reconnects,
            past_receive_maximum: c.past_receive_maximum,
            waited: c.waited,
            most_waiting: c.most_waiting as u32,
            waiting: c.waiting() as u32,
            syncs: d.syncs(),
            publish_after_pubrel: c.receiver().after_pubrel(),
        };
        // SAFETY: non-null and valid, the caller's contract.
        unsafe { stats.write(s) };
        Ok(IDEM_OK)
    })
}

/// Copies the durable state (`app->state_size` bytes) into `buf`, of `len` bytes.
///
/// # Safety
/// `rx` is NULL or storage for a receiver; `buf` NULL or `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_get_state(rx: *mut idem_receiver, buf: *mut u8, len: usize) -> c_int {
    if buf.is_null() {
        return IDEM_E_NULL;
    }
    with_door(rx, |d| {
        let state = &d.state().0;
        if len < state.len() {
            return Err(IDEM_E_ARGUMENT);
        }
        // SAFETY: `buf` holds at most `len` bytes, and at least the state's (checked).
        unsafe { core::ptr::copy_nonoverlapping(state.as_ptr(), buf, state.len()) };
        Ok(IDEM_OK)
    })
}

/// Writes this connection's refusal or DISCONNECT from the broker in words into `buf`
/// (`len` bytes, NUL-terminated): its packet, reason code and name as MQTT names it
/// (`CONNACK 0x87 Not authorized`), or an empty string if there was none. Returns
/// `IDEM_E_ARGUMENT` when the words do not fit (`buf` then holds what did); 64 bytes
/// always do.
///
/// # Safety
/// `rx` is NULL or storage for a receiver; `buf` NULL or `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_reason(
    rx: *mut idem_receiver,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    if buf.is_null() {
        return IDEM_E_NULL;
    }
    if len == 0 {
        return IDEM_E_ARGUMENT;
    }
    with_door(rx, |d| {
        let mut words = heapless::String::<64>::new();
        let fits = match d.reason() {
            Some((kind, code)) => {
                door::reason_words(kind, code, d.client().protocol(), &mut words).is_ok()
            }
            None => true,
        };
        let n = words.len().min(len - 1);
        // SAFETY: `buf` holds `len` bytes (the caller's contract), and `n < len`.
        unsafe {
            core::ptr::copy_nonoverlapping(words.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
        if fits && n == words.len() {
            Ok(IDEM_OK)
        } else {
            Err(IDEM_E_ARGUMENT)
        }
    })
}

/// Closes the receiver: any later call but `idem_open` returns `IDEM_E_NOT_OPEN`.
///
/// # Safety
/// `rx` is NULL or storage for a receiver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idem_close(rx: *mut idem_receiver) -> c_int {
    if rx.is_null() {
        return IDEM_E_NULL;
    }
    // SAFETY: non-null, and the C side's storage for a receiver (its contract).
    let (magic, _, _) = unsafe { parts(rx) };
    // SAFETY: a valid, aligned word of that storage.
    if unsafe { magic.read() } == BUSY {
        return IDEM_E_REENTERED;
    }
    // SAFETY: as above.
    unsafe { magic.write(0) };
    IDEM_OK
}

/// The sentence for a status code, NUL-terminated and static; an unknown code gets
/// "not a status code of idem".
#[unsafe(no_mangle)]
pub extern "C" fn idem_strerror(code: c_int) -> *const c_char {
    status::strerror(code)
}

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // `panic = "abort"` on a device: no unwinding crosses into C. The receive path has
    // no panicking path by design (capacities are typed errors); this stops the core.
    loop {
        core::hint::spin_loop();
    }
}
