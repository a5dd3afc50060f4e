//! The receiver behind the door: idem-mqtt's session client over the C flash and the C
//! application, with a buffer of bytes from the broker and one of bytes to send. Bytes
//! to send are handed out only once the records that allow them are written and synced.

use core::ptr::NonNull;

use heapless::Vec;
use idem_core::journal::JournalError;
use idem_mqtt::client::{Client, ClientError, Config, FeedError, Outbox, Send, Waiting};
use idem_mqtt::codec::{self, Framer, Protocol, QoS};
use idem_mqtt::receiver::{ReceiveError, Receiver};

use crate::app::{Bytes, CStore, Raw};
use crate::flash::{CFlash, Failed, Unit, idem_flash};
use crate::status::*;

/// Places for QoS 2 identifiers: the broker's in-flight window (Mosquitto's default
/// `max_inflight_messages` is 20, and 2.0.11 sends past it after a completion).
pub const IDEM_PLACES: usize = 16;
/// New QoS 2 PUBLISHes that may wait, decoded and unanswered, for a place once all
/// `IDEM_PLACES` are taken (idem-mqtt's `Client::with_waiting`): each slot is 268 bytes
/// of the receiver's storage (a payload of up to 256 bytes). A broker that sends past
/// its in-flight limit (Mosquitto 2.0.11 does, after a completion) has the next ones
/// decided in the order they came as PUBRELs free places, not left unanswered for a
/// reconnection; one past them is left unanswered and comes again after
/// `IDEM_RECONNECT`.
pub const IDEM_WAITING: usize = 16;
/// The longest topic filter, in bytes.
pub const IDEM_MAX_TOPIC: usize = 128;
/// The longest client identifier, in bytes (a broker must take 1 to 23, MQTT 3.1.1
/// §3.1.3.1, and may take more).
pub const IDEM_MAX_CLIENT_ID: usize = 64;

/// The largest packet taken whole: a PUBLISH of the longest topic and payload, with room
/// for MQTT 5's properties (at MQTT 3.1.1 a longer payload is rejected all the same).
const IN_CAP: usize = idem_mqtt::max_packet_at(IDEM_MAX_TOPIC, Protocol::V5);
/// The Maximum Packet Size announced at MQTT 5 (MQTT 5 §3.1.2.11.4): none below the
/// protocol's own, since the door takes a PUBLISH of any length (one past `IN_CAP` is
/// acknowledged and rejected, counted), where a smaller maximum would have the broker
/// drop it unsent and uncounted.
const MAXIMUM_PACKET_SIZE: u32 = u32::MAX;
/// Bytes waiting to be sent.
const OUT_CAP: usize = 1024;
/// What one step's answer may take ([`Client::feed`]): every place's PUBCOMP, and a
/// SUBSCRIBE or an acknowledgement.
const OUT_RESERVE: usize = 4 * IDEM_PLACES + 8 + IDEM_MAX_TOPIC;

/// The client's slots for PUBLISHes waiting for a place: an array in the receiver's
/// storage beside the door (no allocation).
pub type Slots = [Option<Waiting<Raw>>; IDEM_WAITING];

/// The client's slots where they lie in the receiver's storage: beside the door, not
/// inside it, so that the `&mut Door` a call makes never covers them, and the client
/// reaches them through this pointer alone. The storage does not move while the
/// receiver is open (the C side's contract, `idem_receiver`).
pub struct SlotsAt(NonNull<Slots>);

impl AsRef<[Option<Waiting<Raw>>]> for SlotsAt {
    fn as_ref(&self) -> &[Option<Waiting<Raw>>] {
        // SAFETY: the slots `Door::open_in` wrote, in the receiver's storage, which does
        // not move while it is open; only the client, through this, reaches them.
        unsafe { self.0.as_ref() }
    }
}

impl AsMut<[Option<Waiting<Raw>>]> for SlotsAt {
    fn as_mut(&mut self) -> &mut [Option<Waiting<Raw>>] {
        // SAFETY: as in `as_ref`; `&mut self` is the client's one way to them.
        unsafe { self.0.as_mut() }
    }
}

/// The door's client.
pub type DoorClient = Client<CStore, IDEM_PLACES, SlotsAt>;

/// The journal's record does not change with the flash: the tag names the door's record
/// and the application's state layout together.
pub const fn tag(state_tag: u32) -> u32 {
    state_tag ^ <CStore as idem_core::store::Store>::TAG
}

/// An opened receiver.
pub struct Door {
    flash: idem_flash,
    unit: Unit,
    client: DoorClient,
    /// At MQTT 5, the Session Expiry Interval asked in CONNECT.
    session_expiry: u32,
    /// The last refusal or DISCONNECT: its packet type and reason code.
    reason: Option<(u8, u8)>,
    client_id: heapless::String<IDEM_MAX_CLIENT_ID>,
    filter: heapless::String<IDEM_MAX_TOPIC>,
    qos: QoS,
    keep_alive: u16,
    /// The broker's bytes, cut into packets.
    input: Framer<[u8; IN_CAP]>,
    output: Vec<u8, OUT_CAP>,
    /// `output[..sendable]` may be sent: its records are durable.
    sendable: usize,
    /// The error that stopped the connection (0: none). A flash error stops the
    /// receiver until it is opened again; others until the next connection.
    stopped: i32,
    /// Points since open where records were made durable ([`Door::syncs`]).
    syncs: u64,
}

/// What opening needs, checked.
pub struct Opening {
    /// The flash.
    pub flash: idem_flash,
    /// Its journal unit.
    pub unit: Unit,
    /// The journal's region.
    pub region: idem_core::journal::Region,
    /// The store.
    pub store: CStore,
    /// The state's declared size.
    pub state_size: usize,
    /// The journal tag.
    pub tag: u32,
    /// The client identifier.
    pub client_id: heapless::String<IDEM_MAX_CLIENT_ID>,
    /// The filter.
    pub filter: heapless::String<IDEM_MAX_TOPIC>,
    /// The QoS asked.
    pub qos: QoS,
    /// Keep-alive seconds.
    pub keep_alive: u16,
    /// The protocol spoken.
    pub protocol: Protocol,
    /// At MQTT 5, the Session Expiry Interval (above 0).
    pub session_expiry: u32,
}

/// The status for a journal error.
fn journal_status(e: &JournalError<Failed>) -> i32 {
    match e {
        JournalError::Flash(Failed::Read(_)) => IDEM_E_FLASH_READ,
        JournalError::Flash(Failed::Write(_)) => IDEM_E_FLASH_WRITE,
        JournalError::Flash(Failed::Erase(_)) => IDEM_E_FLASH_ERASE,
        JournalError::Flash(Failed::Bounds) | JournalError::BadRegion => IDEM_E_GEOMETRY,
        JournalError::NoSpace => IDEM_E_FLASH_WRITE,
        _ => IDEM_E_JOURNAL,
    }
}

fn client_status(e: &ClientError<Failed>) -> i32 {
    match e {
        ClientError::Receive(ReceiveError::Journal(j)) => journal_status(j),
        ClientError::Refused(_) | ClientError::SubscriptionRefused(_) => IDEM_E_REFUSED,
        ClientError::Disconnected(_) => IDEM_E_DISCONNECTED,
        _ => IDEM_E_BROKER,
    }
}

/// The packet type and reason code an error carries from the broker, if it does.
fn reason_of(e: &ClientError<Failed>) -> Option<(u8, u8)> {
    match e {
        ClientError::Refused(code) => Some((2, *code)),
        ClientError::SubscriptionRefused(code) => Some((9, *code)),
        ClientError::Disconnected(code) => Some((14, *code)),
        _ => None,
    }
}

/// A reason in words, `CONNACK 0x87 Not authorized`, into `out`: `Err` when it does
/// not fit. Without `core::fmt`, which would add about 1 KB of flash to a device.
pub fn reason_words<const M: usize>(
    kind: u8,
    code: u8,
    protocol: Protocol,
    out: &mut heapless::String<M>,
) -> Result<(), heapless::CapacityError> {
    let packet = match kind {
        2 => "CONNACK",
        9 => "SUBACK",
        _ => "DISCONNECT",
    };
    let name = match kind {
        2 => codec::connack_name_at(code, protocol),
        9 => codec::suback_name_at(code, protocol),
        // DISCONNECT: a server sends one only at MQTT 5 (§3.14).
        _ => codec::v5::reason_name(code),
    };
    let hex = |n: u8| char::from(b"0123456789ABCDEF"[usize::from(n & 0xF)]);
    out.push_str(packet)?;
    out.push_str(" 0x")?;
    out.push(hex(code >> 4))?;
    out.push(hex(code))?;
    out.push(' ')?;
    out.push_str(name)
}

impl Door {
    /// Opens the journal, takes its newest record, and builds the door at `door` and
    /// its client's waiting slots at `slots`, each field written in place: no value the
    /// size of the door or of its slots passes through the stack (built by value and
    /// moved, they took 24,540 B of a Cortex-M4F's stack at `idem_open`, BENCHMARKS.md).
    /// Nothing is written on an error.
    ///
    /// # Safety
    /// `door` and `slots` are valid for writes and aligned, do not overlap, and do not
    /// move while the door is open.
    pub unsafe fn open_in(door: *mut Door, slots: *mut Slots, o: Opening) -> Result<(), i32> {
        let receiver = match o.unit {
            Unit::Four => open_on::<4>(&o),
            Unit::ThirtyTwo => open_on::<32>(&o),
        }?;
        let state = &receiver.record().state;
        if !state.0.is_empty() && state.0.len() != o.state_size {
            return Err(IDEM_E_STATE_SIZE);
        }
        let first = slots.cast::<Option<Waiting<Raw>>>();
        for i in 0..IDEM_WAITING {
            // SAFETY: `slots` is valid for writes (the caller's contract), `i` inside it.
            unsafe { first.add(i).write(None) };
        }
        // SAFETY: valid, so not null (the caller's contract).
        let at = SlotsAt(unsafe { NonNull::new_unchecked(slots) });
        let client = Client::with_waiting(receiver, at).with_protocol(o.protocol);
        let input = Framer::new(
            [0; IN_CAP],
            o.protocol,
            IN_CAP,
            MAXIMUM_PACKET_SIZE as usize,
        );
        // SAFETY: `door` is valid for writes and aligned (the caller's contract); each
        // field is written once, through its own address, and none needs dropping.
        unsafe {
            (&raw mut (*door).client).write(client);
            (&raw mut (*door).flash).write(o.flash);
            (&raw mut (*door).unit).write(o.unit);
            (&raw mut (*door).session_expiry).write(o.session_expiry);
            (&raw mut (*door).reason).write(None);
            (&raw mut (*door).client_id).write(o.client_id);
            (&raw mut (*door).filter).write(o.filter);
            (&raw mut (*door).qos).write(o.qos);
            (&raw mut (*door).keep_alive).write(o.keep_alive);
            (&raw mut (*door).input).write(input);
            (&raw mut (*door).output).write(Vec::new());
            (&raw mut (*door).sendable).write(0);
            (&raw mut (*door).stopped).write(0);
            (&raw mut (*door).syncs).write(0);
        }
        Ok(())
    }
}

fn open_on<const W: usize>(o: &Opening) -> Result<Receiver<CStore, IDEM_PLACES>, i32> {
    let mut flash = CFlash::<W> { table: &o.flash };
    let keep = idem_mqtt::receiver::Keep::Flash;
    // Group commit: a release goes into the next record, and one sync a fed buffer
    // makes every record it wrote durable (`Door::input`).
    let release = idem_mqtt::receiver::Release::WithNext;
    Receiver::open(&mut flash, o.region, o.tag, o.store.clone(), keep, release)
        .map_err(|e| journal_status(&e))
}

impl Door {
    fn config(&self) -> Config<'_> {
        Config {
            client_id: &self.client_id,
            filter: &self.filter,
            qos: self.qos,
            keep_alive: self.keep_alive,
            protocol: self.client.protocol(),
            maximum_packet_size: MAXIMUM_PACKET_SIZE,
            session_expiry: self.session_expiry,
        }
    }

    /// Encodes `send` after the output; a full output is a bug (room is kept).
    fn queue(&mut self, send: Send) -> Result<(), i32> {
        let mut buf = [0u8; 32 + IDEM_MAX_TOPIC + IDEM_MAX_CLIENT_ID];
        let n = DoorClient::encode(&self.config(), send, &mut buf).map_err(|_| IDEM_E_BUSY)?;
        self.output
            .extend_from_slice(&buf[..n])
            .map_err(|_| IDEM_E_BUSY)
    }

    fn queue_outbox(&mut self, out: &Outbox<IDEM_PLACES>) -> Result<(), i32> {
        for send in out.packets() {
            self.queue(send)?;
        }
        Ok(())
    }

    fn running(&self) -> Result<(), i32> {
        match self.stopped {
            0 => Ok(()),
            code => Err(code),
        }
    }

    fn stop(&mut self, code: i32) -> i32 {
        self.stopped = code;
        self.output.truncate(self.sendable);
        code
    }

    /// A new connection: CONNECT to send, the old connection's bytes dropped.
    pub fn connect(&mut self) -> Result<(), i32> {
        if is_fatal(self.stopped) {
            return Err(self.stopped);
        }
        self.stopped = 0;
        self.reason = None;
        self.input.clear();
        self.output.clear();
        self.sendable = 0;
        let send = self.client.connect();
        self.queue(send)?;
        self.sendable = self.output.len();
        Ok(())
    }

    /// Bytes from the broker: takes what fits, decides every whole packet, makes their
    /// records durable, then hands out their answers. Returns the bytes taken.
    pub fn input(&mut self, bytes: &[u8]) -> Result<usize, i32> {
        self.running()?;
        match self.unit {
            Unit::Four => self.input_on::<4>(bytes),
            Unit::ThirtyTwo => self.input_on::<32>(bytes),
        }
    }

    fn input_on<const W: usize>(&mut self, bytes: &[u8]) -> Result<usize, i32> {
        let taken = self.input.push(bytes);
        let mut records = 0u32;
        let mut drained = false;
        while OUT_CAP - self.output.len() >= OUT_RESERVE {
            match self.step::<W>() {
                Ok(Some(n)) => records += u32::from(n),
                Ok(None) => {
                    drained = true;
                    break;
                }
                Err(code) => return Err(self.stop(code)),
            }
        }
        if drained {
            // The group's end: the releases that found no PUBLISH's record to ride in go
            // into one more record, under the same sync, so that every PUBCOMP this
            // buffer allows leaves with its answers. Held back to a later group (the
            // client's `on_group_end`), a whole window's PUBCOMPs waited for its last
            // PUBREL, and tests/tests/c_door.rs found 15 to 23 payments applied twice
            // in 3 of 4 runs: by all signs (the door forgets an identifier only at its
            // PUBREL), Mosquitto 2.0.11 sent those PUBLISHes again after their PUBREL
            // when a killed consumer connected again, which MQTT 3.1.1 §4.3.3 forbids.
            let mut flash = CFlash::<W> { table: &self.flash };
            let out = self.client.on_quiet(&mut flash);
            let out = out.map_err(|e| self.stop(client_status(&e)))?;
            records += u32::from(out.records);
            self.queue_outbox(&out)?;
        }
        if records > 0 {
            self.sync()?;
        }
        self.sendable = self.output.len();
        Ok(taken)
    }

    /// Takes the client's next step over the input ([`Client::feed`]) and queues its
    /// answers: its records, or `None` when there is no whole packet.
    fn step<const W: usize>(&mut self) -> Result<Option<u8>, i32> {
        let mut flash = CFlash::<W> { table: &self.flash };
        let decode = |p: &[u8]| crate::app::Raw::new(p);
        let fed = (self.client).feed(&mut flash, &mut self.input, &self.filter, decode, |_| {});
        let out = match fed {
            Ok(Some(out)) => out,
            Ok(None) => return Ok(None),
            // At MQTT 5 no packet is past the maximum announced (the protocol's own).
            Err(FeedError::Frame(_)) => return Err(IDEM_E_MALFORMED),
            Err(FeedError::Client(e)) => {
                self.reason = reason_of(&e).or(self.reason);
                return Err(client_status(&e));
            }
        };
        self.queue_outbox(&out)?;
        Ok(Some(out.records))
    }

    /// Has the client decide the PUBLISHes that wait, in the order they came, while
    /// places are free, each one's PUBREC queued after the answers before it: the
    /// records written.
    fn take_waiting<const W: usize>(&mut self) -> Result<u8, i32> {
        let mut records = 0u8;
        loop {
            let mut flash = CFlash::<W> { table: &self.flash };
            let out = match self.client.take_waiting(&mut flash) {
                Ok(Some(out)) => out,
                Ok(None) => return Ok(records),
                Err(e) => return Err(client_status(&e)),
            };
            records = records.saturating_add(out.records);
            self.queue_outbox(&out)?;
        }
    }

    fn sync(&mut self) -> Result<(), i32> {
        self.syncs += 1;
        let Some(sync) = self.flash.sync else {
            return Ok(());
        };
        // SAFETY: the C side's callback, given at open; it takes only its context.
        match unsafe { sync(self.flash.ctx) } {
            0 => Ok(()),
            _ => Err(self.stop(IDEM_E_FLASH_SYNC)),
        }
    }

    /// The bytes that may be sent now.
    pub fn output(&self) -> &[u8] {
        &self.output[..self.sendable]
    }

    /// `n` bytes of the output were sent.
    pub fn sent(&mut self, n: usize) -> Result<(), i32> {
        if n > self.sendable {
            return Err(IDEM_E_ARGUMENT);
        }
        self.output.copy_within(n.., 0);
        self.output.truncate(self.output.len() - n);
        self.sendable -= n;
        Ok(())
    }

    /// The link is quiet: `true` when the caller should close it and connect again
    /// (DISCONNECT queued), for the broker to resend what was left unanswered.
    pub fn idle(&mut self) -> Result<bool, i32> {
        self.running()?;
        let table = &self.flash;
        let out = match self.unit {
            Unit::Four => self.client.on_quiet(&mut CFlash::<4> { table }),
            Unit::ThirtyTwo => self.client.on_quiet(&mut CFlash::<32> { table }),
        }
        .map_err(|e| client_status(&e))
        .map_err(|code| self.stop(code))?;
        self.queue_outbox(&out)?;
        // A release written now frees a place for a PUBLISH that waits.
        let waited = match self.unit {
            Unit::Four => self.take_waiting::<4>(),
            Unit::ThirtyTwo => self.take_waiting::<32>(),
        }
        .map_err(|code| self.stop(code))?;
        if out.records > 0 || waited > 0 {
            self.sync()?;
        }
        let again = self.client.resend_due();
        if again {
            // At MQTT 5, DISCONNECT 0x93 when the broker sent past the Receive Maximum.
            let disconnect = self.client.resending();
            self.queue(disconnect)?;
        }
        self.sendable = self.output.len();
        Ok(again)
    }

    /// Queues PINGREQ or DISCONNECT.
    pub fn send(&mut self, send: Send) -> Result<(), i32> {
        self.running()?;
        if OUT_CAP - self.output.len() < OUT_RESERVE {
            return Err(IDEM_E_BUSY);
        }
        self.queue(send)?;
        self.sendable = self.output.len();
        Ok(())
    }

    /// Points since open where written records were made durable before their
    /// answers were handed out: each a call of the sync callback, if there is one.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// The client.
    pub fn client(&self) -> &DoorClient {
        &self.client
    }

    /// The last refusal or DISCONNECT of this connection: its packet type and reason
    /// code.
    pub fn reason(&self) -> Option<(u8, u8)> {
        self.reason
    }

    /// At MQTT 5, the Session Expiry Interval in force: the CONNACK's if it set one
    /// (§3.2.2.3.2), else the one asked; 0 at MQTT 3.1.1.
    pub fn session_expiry(&self) -> u32 {
        match self.client.protocol() {
            Protocol::V311 => 0,
            Protocol::V5 => self
                .client
                .connack
                .session_expiry
                .unwrap_or(self.session_expiry),
        }
    }

    /// The durable state as the application sees it.
    pub fn state(&self) -> &Bytes {
        let record = self.client.receiver().record();
        self.client.receiver().store().view(&record.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_slot_costs_268_bytes_of_the_receivers_storage() {
        assert_eq!(core::mem::size_of::<Option<Waiting<Raw>>>(), 268);
    }
}
