//! The C side's application: its effect as a callback over its state, a byte record of
//! its own layout of at most [`IDEM_STATE_MAX`] bytes, kept in the receiver's journal
//! record with the QoS 2 identifiers. Seen by the receiver as an idem-core `Store`.

use core::cell::RefCell;
use core::ffi::{c_int, c_void};

use idem_core::MaxSize;
use idem_core::log::Event;
use idem_core::store::{Outcome, Store};
use serde::{Deserialize, Serialize};

/// The largest state the C side may declare, in bytes, fixed when the library is built:
/// the receiver's record (this, its counts, 16 identifiers held and 16 tombstones of
/// identifiers released) fits one journal slot.
pub const IDEM_STATE_MAX: usize = 256;

/// The effect applied the message: its changes to the state are kept.
pub const IDEM_APPLIED: c_int = 0;
/// The effect found the message a duplicate (by an id of the application's): its
/// changes to the state are dropped.
pub const IDEM_DUPLICATE: c_int = 1;
/// The effect refused the message (not the application's, malformed): its changes are
/// dropped and it is counted as rejected. Any other return counts as this.
pub const IDEM_REJECTED: c_int = 2;

/// Decides one message: `payload` (`payload_len` bytes) against `state` (`state_len`
/// bytes, a copy of the durable state, which it may change). Returns `IDEM_APPLIED`,
/// `IDEM_DUPLICATE` or `IDEM_REJECTED`. It must change nothing but `state`: the state is
/// written to flash with the message's identifier after it returns, and a reset before
/// that write calls it again for the same message on the old state.
pub type IdemEffectFn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        payload: *const u8,
        payload_len: usize,
        state: *mut u8,
        state_len: usize,
    ) -> c_int,
>;

/// The application: its effect and its state's size and first value. Copied at
/// `idem_open` (`initial_state`'s bytes too).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct idem_app {
    /// Passed to `effect`.
    pub ctx: *mut c_void,
    /// The effect; required.
    pub effect: IdemEffectFn,
    /// The state before any message, `state_size` bytes; NULL for zeros.
    pub initial_state: *const u8,
    /// The state's size in bytes, at most `IDEM_STATE_MAX`; the same at every open of a
    /// flash.
    pub state_size: usize,
    /// Names the state's layout: change it whenever the layout changes, so that a
    /// journal written with another layout is refused, never misread.
    pub state_tag: u32,
}

/// The state's bytes; empty until the first message is applied (the record's default),
/// which reads as the initial state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bytes(pub heapless::Vec<u8, IDEM_STATE_MAX>);

impl MaxSize for Bytes {
    const POSTCARD_MAX_SIZE: usize = idem_core::store::varint_len(IDEM_STATE_MAX) + IDEM_STATE_MAX;
}

/// A payload as received, up to idem-mqtt's `MAX_PAYLOAD` bytes.
#[derive(Debug, Clone, Copy)]
pub struct Raw {
    len: u16,
    bytes: [u8; idem_mqtt::MAX_PAYLOAD],
}

impl Raw {
    /// `payload`, or `None` when it is over the maximum.
    pub fn new(payload: &[u8]) -> Option<Self> {
        let mut bytes = [0; idem_mqtt::MAX_PAYLOAD];
        bytes.get_mut(..payload.len())?.copy_from_slice(payload);
        Some(Self {
            len: payload.len() as u16,
            bytes,
        })
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The C application as a store: `check` calls the effect on a copy of the state and
/// keeps the copy for `apply`.
#[derive(Debug, Clone)]
pub struct CStore {
    app: idem_app,
    initial: Bytes,
    pending: RefCell<Bytes>,
}

impl CStore {
    /// The store of `app`, whose state size was checked.
    pub fn new(app: idem_app, initial: Bytes) -> Self {
        Self {
            app,
            initial,
            pending: RefCell::new(Bytes::default()),
        }
    }

    /// `state` as the application sees it: the initial state before any write.
    pub fn view<'a>(&'a self, state: &'a Bytes) -> &'a Bytes {
        if state.0.is_empty() {
            &self.initial
        } else {
            state
        }
    }
}

impl Store for CStore {
    type Payload = Raw;
    type State = Bytes;
    type Error = core::convert::Infallible;
    type Rejections = ();
    type Persist = idem_core::persist::EachEffect<Self>;
    const TAG: u32 = 0xC0DE_0100;

    fn check(&self, state: &Bytes, event: &Event<Raw>) -> Result<Outcome, Self::Error> {
        let mut copy = self.view(state).clone();
        let Some(effect) = self.app.effect else {
            return Ok(Outcome::Rejected);
        };
        let payload = event.payload.as_slice();
        // SAFETY: `effect` is the C side's callback, checked non-null at open; `payload`
        // and `copy` are valid buffers of the lengths passed.
        let rc = unsafe {
            effect(
                self.app.ctx,
                payload.as_ptr(),
                payload.len(),
                copy.0.as_mut_ptr(),
                copy.0.len(),
            )
        };
        Ok(match rc {
            IDEM_APPLIED => {
                *self.pending.borrow_mut() = copy;
                Outcome::Applied
            }
            IDEM_DUPLICATE => Outcome::Skipped,
            _ => Outcome::Rejected,
        })
    }

    fn apply(&self, state: &mut Bytes, _: &Event<Raw>) {
        *state = self.pending.take();
    }
}
