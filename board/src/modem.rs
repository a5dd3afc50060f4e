//! The board as an MQTT subscriber whose modem is the host: the board speaks MQTT 3.1.1
//! or 5 itself ([`idem_mqtt::client`]) and keeps the session in its own flash, and the host
//! only carries bytes between the link and one TCP connection to the broker, as a
//! cellular modem's socket does. Both ends of the modem protocol are here without I/O:
//! [`Modem`] is the board's, and the host's is a loop over [`ToBoard`] and
//! [`FromBoard`] (`idem device mqtt`).
//!
//! Frames are the feed's ([`super::wire`], postcard, CRC-32, COBS), in a CRC domain of
//! their own ([`DOMAIN`]), at the link's protocol [`VERSION`].
//!
//! **The board pulls bytes.** An nRF51 drops UART bytes while its CPU stalls on a flash
//! write, so the host never sends the broker's bytes unasked: the board asks for at most
//! [`CHUNK`] of them ([`FromBoard::Pull`]) once the last ones are handled and its packet
//! buffer has room, and the host answers with what the socket holds, possibly nothing,
//! within a bounded wait ([`ToBoard::Bytes`]). A pull or an answer lost on the line costs
//! one silence: the board asks again ([`Modem::on_silence`]), and the host sends the same
//! bytes again (each answer carries the count of bytes before it, [`ToBoard::Bytes`]'s
//! `at`, so the board takes a repeat once).
//!
//! **The board's flash is the truth.** It announces its boots and its session at boot;
//! the host dials when the board asks ([`FromBoard::Dial`]) and hangs up when the board
//! resets (a boot frame) or asks it to. Every record the receiver writes is on the NVMC
//! before the acknowledgement it allows goes out, since the board writes flash in line.

use embedded_storage::nor_flash::NorFlash;
use heapless::{String, Vec};
use serde::{Deserialize, Serialize};

use idem_core::log::IdKey;
use idem_core::store::Store;
use idem_mqtt::client::{Client, ClientError, Config, FeedError, Outbox, Send, Waiting};
use idem_mqtt::codec::v5::reason::PACKET_TOO_LARGE;
use idem_mqtt::codec::{DecodeError, FrameError, Framer, Protocol, QoS};
use idem_mqtt::payments::Figures;
use idem_mqtt::receiver::{Keep, Receiver, Release};
use idem_payments::Sum;
use idem_payments::registry::MessageIdStore;

use crate::feed::{DeviceKey, Failure};
use crate::storage::{self, BoardLayout, CountsBoots, RECORD_PAGES};

/// The link's protocol version: the feed's ([`crate::feed::VERSION`], 3) and two, since
/// a session's configuration says its MQTT protocol ([`SessionConfig::mqtt5`]) and a
/// report names the broker's identifier violations and a packet past the board's
/// Maximum Packet Size ([`Hangup::PacketTooLarge`]).
pub const VERSION: u16 = crate::feed::VERSION + 2;

/// The modem protocol's CRC domain: its frames fail the feed's and the demo's readers.
pub const DOMAIN: &[u8] = b"idem-modem";

/// The most broker bytes one pull asks for: a frame the board's receive buffer takes
/// whole.
pub const CHUNK: usize = 64;

/// The most bytes of one packet the board sends ([`FromBoard::Send`]): a CONNECT with the
/// longest client id, a SUBSCRIBE with the longest topic, an acknowledgement.
pub const SEND_MAX: usize = 64;

/// The longest client identifier (MQTT 3.1.1 §3.1.3.1: a server must allow 23 bytes).
pub const CLIENT_ID_MAX: usize = 23;

/// The longest topic or filter.
pub const TOPIC_MAX: usize = 32;

/// The largest PUBLISH the board takes, at MQTT 5 (with room for its properties; at
/// MQTT 3.1.1 the same bytes): a longer one is acknowledged and rejected.
pub const MAX_PACKET: usize = idem_mqtt::max_packet_at(TOPIC_MAX, Protocol::V5);

/// The Maximum Packet Size the board announces at MQTT 5 (§3.1.2.11.4), as the host's
/// `mqtt consume` does: far above [`MAX_PACKET`], since a broker discards a larger
/// PUBLISH unsent, as if delivered; one between the two arrives, and is acknowledged and
/// rejected (the board skips its bytes).
pub const MAXIMUM_PACKET_5: u32 = 1 << 20;

/// QoS 2 identifiers the board holds.
pub const PLACES: usize = 8;

/// New QoS 2 PUBLISHes that may wait for a place, decoded and unanswered, in the
/// client's queue (`idem_mqtt::client::Client::with_waiting`): 48 bytes each of the
/// board's RAM. With [`PLACES`], more than a broker's stock window (Mosquitto's
/// `max_inflight_messages` is 20) is in the board's hands; one past them is left
/// unanswered and comes again at the next connection.
pub const WAITING: usize = 24;

/// The client's slots for PUBLISHes waiting for a place.
type Slots = [Option<Waiting<idem_payments::Message>>; WAITING];

/// How long the host waits for the broker's bytes before it answers a pull with none,
/// in milliseconds: the board counts those answers as its clock for the keep-alive.
pub const QUIET_WAIT_MS: u32 = 100;

/// Quiet answers in a row, with nothing sent, after which the board sends PINGREQ: half
/// the keep-alive ([`idem_mqtt::client::ping_due`]).
const PING_AFTER: u32 = idem_mqtt::client::KEEP_ALIVE_S as u32 * 1000 / 2 / QUIET_WAIT_MS;

/// Quiet answers in a row with not one byte of the connection after which the board
/// hangs up: the session's wait for CONNACK ([`idem_mqtt::client::CONNACK_WAIT_S`]).
const CONNACK_QUIETS: u32 = idem_mqtt::client::CONNACK_WAIT_S as u32 * 1000 / QUIET_WAIT_MS;

/// Pages of the modem's storage: its record, then the receiver's journal.
pub const MODEM_PAGES: u32 = RECORD_PAGES + RECEIVER_PAGES;

/// Pages of the receiver's journal.
const RECEIVER_PAGES: u32 = 4;

/// The packet buffer: the largest packet the board takes, and one chunk more.
const RX: usize = MAX_PACKET + CHUNK;

/// The store a session applies its payments to.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModemStore {
    /// `total += amount`: QoS 1 applies a resent message again.
    Naive,
    /// Skips a message id seen in its window: QoS 1 exact.
    MessageId,
}

/// The session the host asks the board to keep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// The client identifier.
    pub client_id: String<CLIENT_ID_MAX>,
    /// The topic or filter (order holds per topic only).
    pub topic: String<TOPIC_MAX>,
    /// The QoS subscribed at, 0 to 2.
    pub qos: u8,
    /// The store.
    pub store: ModemStore,
    /// The QoS 2 identifiers in flash with the effect (`true`) or in RAM only.
    pub identifiers_in_flash: bool,
    /// MQTT 5 (`true`) or MQTT 3.1.1.
    pub mqtt5: bool,
}

impl SessionConfig {
    /// The MQTT protocol the session speaks.
    pub fn protocol(&self) -> Protocol {
        if self.mqtt5 {
            Protocol::V5
        } else {
            Protocol::V311
        }
    }

    /// The tag of the receiver's journal for this session: another session's journal
    /// does not open as this one's.
    fn tag(&self, image: u32) -> u32 {
        let mut h = 0x811C_9DC5u32 ^ image;
        let bytes = self
            .client_id
            .as_bytes()
            .iter()
            .chain(b"\0")
            .chain(self.topic.as_bytes());
        for &b in bytes.chain(&[
            self.qos,
            self.store as u8,
            u8::from(self.identifiers_in_flash),
            u8::from(self.mqtt5),
        ]) {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        h
    }
}

/// From the host to the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToBoard {
    /// Who is there? The board answers with its boot frame.
    Hello {
        /// The host's protocol version.
        version: u16,
    },
    /// Keep this session (the same one again: resume it from flash).
    Configure {
        /// The host's protocol version.
        version: u16,
        /// The session.
        config: SessionConfig,
    },
    /// The connection the board asked for is open.
    Connected,
    /// The connection could not be opened, or the broker closed it.
    Closed,
    /// In answer to a pull: the broker's bytes from byte `at` of this connection.
    Bytes {
        /// How many of this connection's bytes came before these.
        at: u32,
        /// The bytes (none: the socket was quiet).
        bytes: Vec<u8, CHUNK>,
    },
    /// Stop: send DISCONNECT, then the report.
    Finish,
}

/// The most bytes a [`ToBoard`] body takes.
pub const TO_BOARD_MAX: usize = 1 + 3 + 1 + CLIENT_ID_MAX + 1 + TOPIC_MAX + 5 + 8 + CHUNK;

/// The most bytes a [`ToBoard`] frame takes on the wire: the board's receive buffer.
pub const TO_BOARD_ENCODED: usize = super::wire::encoded_len(TO_BOARD_MAX);

/// Why the board does not take a request.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModemRefusal {
    /// The host speaks another protocol version.
    Version {
        /// The board's.
        board: u16,
        /// The host's.
        host: u16,
    },
    /// A QoS above 2, or an empty client id or topic.
    Config,
    /// The board's flash holds another session: configure that one, or erase the board.
    OtherSession,
    /// Bytes or a connection before any configuration.
    NotConfigured,
}

/// Why the board closed its connection: the broker sent what a subscriber does not take.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hangup {
    /// Bytes that are no packet a broker sends a client (the decoder's error).
    Malformed,
    /// A packet a subscriber does not take here (PUBACK, a second CONNACK, ...).
    Unexpected,
    /// CONNACK refused the connection with this return code.
    Refused(u8),
    /// SUBACK refused the subscription.
    SubscriptionRefused,
    /// Not a fault: the board left a QoS 2 PUBLISH unanswered with every place taken,
    /// and a place is free now; it connects again so that the broker sends it again
    /// (MQTT 3.1.1 §4.4).
    Resend,
    /// Not one byte from the broker within the wait for CONNACK.
    Silent,
    /// At MQTT 5, the broker sent DISCONNECT with this reason code (§3.14.2.1), and
    /// closes the connection.
    Disconnected(u8),
    /// A packet longer than the board's buffer before its identifier: a PUBLISH on a
    /// topic too long for [`MAX_PACKET`] and one [`CHUNK`] (a filter with `+` or `#`).
    TooLong,
    /// At MQTT 5, a packet of this many bytes, past the Maximum Packet Size the board
    /// announced ([`MAXIMUM_PACKET_5`]): a protocol error, which the board answered with
    /// DISCONNECT 0x95 (Packet too large) before it hung up (MQTT 5 §3.1.2.11.4, §4.13).
    PacketTooLarge(u32),
}

/// This boot's counts of the session (RAM only, lost at a reset): the board sends them
/// ([`FromBoard::Counts`]) after each answer whose packets changed them, so that the
/// host adds every boot's to the report, not the last boot's alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootCounts {
    /// Records written.
    pub records: u64,
    /// Messages decided.
    pub decided: u64,
    /// PUBLISHes with DUP 1 decided.
    pub redeliveries: u64,
    /// QoS 2 PUBLISHes under an identifier held.
    pub held_again: u64,
    /// Retained messages.
    pub retained: u64,
    /// PUBLISHes (not retained) received at QoS 0, 1 and 2.
    pub received_at: [u64; 3],
    /// PUBLISHes outside the filter.
    pub foreign: u64,
    /// Identifiers forgotten at a session present 0.
    pub lost_identifiers: u64,
    /// CONNACKs that said session present 0.
    pub new_sessions: u32,
    /// QoS 2 PUBLISHes left unanswered with every place taken.
    pub unanswered: u64,
    /// Connections closed for the broker's resend.
    pub resend_reconnects: u32,
    /// At MQTT 5, new QoS 2 PUBLISHes past the Receive Maximum.
    pub past_receive_maximum: u64,
    /// DUP 0 PUBLISHes under an identifier held.
    pub held_identifier_reused: u64,
}

impl BootCounts {
    /// The counts among `f`, a session's figures.
    pub fn of(f: &Figures) -> Self {
        Self {
            records: f.records,
            decided: f.decided,
            redeliveries: f.redeliveries,
            held_again: f.held_again,
            retained: f.retained,
            received_at: f.received_at,
            foreign: f.foreign,
            lost_identifiers: f.lost_identifiers,
            new_sessions: f.new_sessions,
            unanswered: f.unanswered,
            resend_reconnects: f.resend_reconnects,
            past_receive_maximum: f.past_receive_maximum,
            held_identifier_reused: f.held_identifier_reused,
        }
    }

    /// Adds these counts (an earlier boot's) to `f`'s.
    pub fn add_to(&self, f: &mut Figures) {
        let sum = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        sum(&mut f.records, self.records);
        sum(&mut f.decided, self.decided);
        sum(&mut f.redeliveries, self.redeliveries);
        sum(&mut f.held_again, self.held_again);
        sum(&mut f.retained, self.retained);
        for (a, b) in f.received_at.iter_mut().zip(self.received_at) {
            sum(a, b);
        }
        sum(&mut f.foreign, self.foreign);
        sum(&mut f.lost_identifiers, self.lost_identifiers);
        f.new_sessions = f.new_sessions.saturating_add(self.new_sessions);
        sum(&mut f.unanswered, self.unanswered);
        f.resend_reconnects = f.resend_reconnects.saturating_add(self.resend_reconnects);
        sum(&mut f.past_receive_maximum, self.past_receive_maximum);
        sum(&mut f.held_identifier_reused, self.held_identifier_reused);
        // `publish_after_pubrel` is the record's, over every boot: not summed.
    }
}

/// What the board's session did, as its flash and this boot's counts say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Boots of the board's storage, this one included.
    pub boots: u32,
    /// The session's figures: its record's over every boot, this boot's counts.
    pub figures: Figures,
}

/// From the board to the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromBoard {
    /// At boot, and in answer to a hello.
    Boot {
        /// The board's protocol version.
        version: u16,
        /// Boots of its storage, this one included.
        boots: u32,
        /// Whether its flash holds a session.
        session: bool,
        /// Its total as recovered.
        total: i64,
    },
    /// Configured: open a connection to the broker.
    Dial,
    /// Send at most `max` of the broker's bytes, from byte `at` of this connection.
    Pull {
        /// The bytes of this connection the board has taken.
        at: u32,
        /// The most it takes now.
        max: u8,
    },
    /// Write these bytes to the broker: one packet.
    Send(Vec<u8, SEND_MAX>),
    /// Close the connection: the broker sent what the board does not take.
    Hangup(Hangup),
    /// The session's figures, after [`ToBoard::Finish`] (and its DISCONNECT).
    Report(Report),
    /// A request the board will not carry out.
    Refused(ModemRefusal),
    /// The board stopped: its storage or store failed.
    Failed(Failure),
    /// This boot's counts, once an answer's packets changed them, before the pull or
    /// hangup that follows: `handled` bytes of this connection were taken by the
    /// packets counted (the host reads the same bytes, and so knows which).
    Counts {
        /// Bytes of this connection the board took: its packets handled (or skipped).
        handled: u32,
        /// The counts.
        counts: BootCounts,
    },
}

/// The most bytes a [`FromBoard`] body takes: a report with every broken case (its tag,
/// boots, total, 3 counts of u32, 5 of u64, session present, lost identifiers, resumed,
/// granted, new sessions, 3 received counts, foreign, 7 broken cases of up to 11, then
/// unanswered, resend reconnections, past the Receive Maximum, and the broker's two
/// identifier violations).
pub const FROM_BOARD_MAX: usize = REPORT_COUNTS + 1 + 7 * 11 + 10 + 5 + 10 + 2 * 10;

/// A report's bytes before its broken cases.
const REPORT_COUNTS: usize = 1 + 5 + 10 + 3 * 5 + 5 * 10 + 1 + 10 + 1 + 2 + 5 + 3 * 10 + 10;

/// The most bytes a [`FromBoard`] frame takes on the wire.
pub const FROM_BOARD_ENCODED: usize = super::wire::encoded_len(FROM_BOARD_MAX);

/// Encodes a modem message (either direction) as a frame into `out`.
pub fn encode<'a, T: Serialize>(
    msg: &T,
    scratch: &mut [u8],
    out: &'a mut [u8],
) -> Result<&'a [u8], super::wire::WireError> {
    super::wire::encode_in(msg, DOMAIN, scratch, out)
}

/// The board's reader of the host's frames.
pub type BoardReader = super::wire::Reader<ToBoard, TO_BOARD_ENCODED>;

/// The host's reader of the board's frames.
pub type HostReader = super::wire::Reader<FromBoard, FROM_BOARD_ENCODED>;

/// The host's end of the board's pulls, without I/O: the broker's bytes read and not yet
/// taken by the board, from byte `base` of this connection. A pull names what the board
/// has taken (`at`); the answer starts there, so a pull or an answer lost on the line
/// costs a repeat, never a byte (`idem device mqtt`, and the link model of
/// `board/tests/modem_link.rs`).
#[derive(Debug, Default)]
pub struct Relay {
    pending: Vec<u8, CHUNK>,
    base: u32,
    /// Bytes of this connection sent to the board at least once.
    sent: u32,
}

/// What the broker's socket gave when a pull found nothing pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Socket {
    /// This many bytes (none: it was quiet for the host's wait).
    Bytes(usize),
    /// The broker closed the connection.
    Closed,
}

impl Relay {
    /// A new connection: nothing pending, nothing sent.
    pub fn connected(&mut self) {
        *self = Self::default();
    }

    /// Answers the board's pull of at most `max` bytes from `at`. `read` is asked for
    /// more only when nothing is pending, into a buffer of [`CHUNK`] bytes. Returns the
    /// answer and how many of its bytes, at its end, the board has never been sent.
    pub fn answer(
        &mut self,
        at: u32,
        max: u8,
        read: impl FnOnce(&mut [u8]) -> Socket,
    ) -> (ToBoard, usize) {
        // A stale pull (its answer crossed a newer one) takes nothing: the answer then
        // starts where the board is.
        let taken = at
            .checked_sub(self.base)
            .map_or(0, |d| (d as usize).min(self.pending.len()));
        let rest = self.pending.len() - taken;
        self.pending.copy_within(taken.., 0);
        self.pending.truncate(rest);
        self.base += taken as u32;
        if self.pending.is_empty() {
            let mut buf = [0u8; CHUNK];
            match read(&mut buf) {
                Socket::Closed => return (ToBoard::Closed, 0),
                Socket::Bytes(n) => {
                    // At most CHUNK, into an empty buffer of CHUNK.
                    let _ = self.pending.extend_from_slice(&buf[..n.min(CHUNK)]);
                }
            }
        }
        let n = usize::from(max).min(self.pending.len());
        let end = self.base + n as u32;
        let new = end.saturating_sub(self.sent.max(self.base)) as usize;
        self.sent = self.sent.max(end);
        let mut bytes = Vec::new();
        let _ = bytes.extend_from_slice(&self.pending[..n]);
        (
            ToBoard::Bytes {
                at: self.base,
                bytes,
            },
            new,
        )
    }
}

/// The modem's record in its own journal: boots, the id key, and the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModemRecord {
    /// Boots since the storage was formatted.
    pub boots: u32,
    /// The key message ids are computed under, drawn at the first boot.
    pub key: DeviceKey,
    /// The session the receiver's journal holds.
    pub session: Option<SessionConfig>,
}

impl idem_core::MaxSize for ModemRecord {
    const POSTCARD_MAX_SIZE: usize = 5 + 16 + 1 + 1 + CLIENT_ID_MAX + 1 + TOPIC_MAX + 3;
}

impl CountsBoots for ModemRecord {
    fn count_boot(&mut self) {
        self.boots += 1;
    }
}

/// Why the board stopped, with the flash's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ModemError<E> {
    /// A journal failed.
    Journal(idem_core::journal::JournalError<E>),
    /// The receiver failed (its journal, its store, a full set of identifiers).
    Receive,
    /// No id key could be drawn at the first boot.
    NoKey,
}

impl<E> ModemError<E> {
    /// The failure as the board reports it.
    pub fn failure(&self) -> Failure {
        match self {
            Self::Journal(_) => Failure::Journal,
            Self::Receive => Failure::Store,
            Self::NoKey => Failure::Key,
        }
    }
}

impl<E> From<idem_core::journal::JournalError<E>> for ModemError<E> {
    fn from(e: idem_core::journal::JournalError<E>) -> Self {
        Self::Journal(e)
    }
}

/// The receiver over either store.
// One lives per board, and no_std has no Box: the enum takes the larger variant's room,
// which the size test's static RAM figure counts.
#[allow(clippy::large_enum_variant)]
enum Session {
    Naive(Client<idem_payments::stores::Naive, PLACES, Slots>),
    MessageId(Client<MessageIdStore, PLACES, Slots>),
}

/// Runs `$body` with `$c` bound to the session's client, whichever its store.
macro_rules! with_client {
    ($s:expr, $c:ident => $body:expr) => {
        match $s {
            Session::Naive($c) => $body,
            Session::MessageId($c) => $body,
        }
    };
}

/// The board's end of the modem: the session, the packet buffer, and the bytes of this
/// connection taken so far.
pub struct Modem {
    record: ModemRecord,
    journal: idem_core::journal::Journal<ModemRecord>,
    layout: BoardLayout,
    tag: u32,
    session: Option<(SessionConfig, Session)>,
    /// The broker's bytes, cut into packets.
    rx: Framer<[u8; RX]>,
    /// This connection's bytes taken.
    at: u32,
    connected: bool,
    /// Quiet answers since the board last sent a packet.
    quiet: u32,
    /// The counts last sent ([`FromBoard::Counts`]).
    counted: BootCounts,
    /// Frames that did not decode.
    pub garbled: u32,
}

impl Modem {
    /// Boots: opens the modem's record (storage another image wrote is erased first),
    /// counts the boot, and resumes the session its flash holds. `new_key` is called at
    /// the first boot only. Returns the modem and its boot frame.
    pub fn boot<F: NorFlash>(
        flash: &mut F,
        layout: BoardLayout,
        image: u32,
        new_key: impl FnOnce() -> Option<IdKey>,
    ) -> Result<(Self, FromBoard), ModemError<F::Error>> {
        let tag = image ^ 0x4D51_7E00;
        let (mut journal, record) = storage::open(flash, layout, MODEM_PAGES, tag)?;
        let mut record = match record {
            Some(r) => r,
            None => ModemRecord {
                boots: 0,
                key: DeviceKey(new_key().ok_or(ModemError::NoKey)?),
                session: None,
            },
        };
        record.count_boot();
        journal.append(flash, &record)?;
        let mut modem = Self {
            record,
            journal,
            layout,
            tag,
            session: None,
            rx: Framer::new(
                [0; RX],
                Protocol::V311,
                MAX_PACKET,
                MAXIMUM_PACKET_5 as usize,
            ),
            at: 0,
            connected: false,
            quiet: 0,
            counted: BootCounts::default(),
            garbled: 0,
        };
        if let Some(config) = modem.record.session.clone() {
            modem.open_session(flash, config)?;
        }
        let boot = modem.boot_frame();
        Ok((modem, boot))
    }

    /// The boot frame: what the flash holds now.
    pub fn boot_frame(&self) -> FromBoard {
        FromBoard::Boot {
            version: VERSION,
            boots: self.record.boots,
            session: self.record.session.is_some(),
            total: self.total(),
        }
    }

    /// The store's total.
    pub fn total(&self) -> i64 {
        match &self.session {
            None => 0,
            Some((_, s)) => with_client!(s, c => total_of(c)),
        }
    }

    fn open_session<F: NorFlash>(
        &mut self,
        flash: &mut F,
        config: SessionConfig,
    ) -> Result<(), ModemError<F::Error>> {
        let region = self.layout.pages(RECORD_PAGES, RECEIVER_PAGES);
        let tag = config.tag(self.tag);
        let keep = if config.identifiers_in_flash {
            Keep::Flash
        } else {
            Keep::Ram
        };
        let session = match config.store {
            ModemStore::Naive => {
                let store = idem_payments::stores::Naive;
                let c = client(flash, region, tag, store, keep)?;
                Session::Naive(c.with_protocol(config.protocol()))
            }
            ModemStore::MessageId => {
                let store = MessageIdStore::new(
                    idem_payments::stores::Naive,
                    idem_payments::registry::WINDOW,
                )
                .map_err(|_| ModemError::Receive)?;
                let c = client(flash, region, tag, store, keep)?;
                Session::MessageId(c.with_protocol(config.protocol()))
            }
        };
        self.session = Some((config, session));
        Ok(())
    }

    /// The pull to send after a silence: the host's answer or the board's pull was lost.
    pub fn on_silence(&self) -> Option<FromBoard> {
        self.connected.then(|| self.pull())
    }

    fn pull(&self) -> FromBoard {
        let room = self.rx.room();
        FromBoard::Pull {
            at: self.at,
            max: room.min(CHUNK) as u8,
        }
    }

    /// Takes one frame from the host; `emit` sends each frame of the answer, in order,
    /// after every record it depends on is written.
    pub fn handle<F: NorFlash>(
        &mut self,
        flash: &mut F,
        msg: &ToBoard,
        emit: &mut impl FnMut(&FromBoard),
    ) -> Result<(), ModemError<F::Error>> {
        match msg {
            ToBoard::Hello { .. } => emit(&self.boot_frame()),
            &ToBoard::Configure { version, .. } if version != VERSION => {
                emit(&FromBoard::Refused(ModemRefusal::Version {
                    board: VERSION,
                    host: version,
                }))
            }
            ToBoard::Configure { config, .. } => self.configure(flash, config, emit)?,
            _ if self.session.is_none() => emit(&FromBoard::Refused(ModemRefusal::NotConfigured)),
            ToBoard::Connected => {
                self.connected = true;
                self.rx.clear();
                if let Some((config, _)) = &self.session {
                    self.rx.speak(config.protocol(), MAXIMUM_PACKET_5 as usize);
                }
                self.at = 0;
                let send = self.client_connect();
                self.send(send, emit);
                emit(&self.pull());
            }
            // The answer to a pull of this connection; a second answer (to a pull
            // repeated after a silence) finds the board off line, and is moot.
            ToBoard::Closed if self.connected => {
                self.connected = false;
                emit(&FromBoard::Dial);
            }
            ToBoard::Closed => {}
            // A stale answer (its pull was repeated and answered already) asks for
            // nothing more: the pull at this position is out, or goes after a silence,
            // so repeated pulls never multiply.
            ToBoard::Bytes { at, .. } if self.connected && *at != self.at => {}
            ToBoard::Bytes { bytes, .. } if self.connected => {
                if !bytes.is_empty() {
                    self.take_bytes(bytes);
                    self.at = self.at.wrapping_add(bytes.len() as u32);
                }
                let why = match bytes.is_empty() {
                    true => self.quiet(flash, emit)?,
                    false => None,
                };
                let why = match why {
                    Some(why) => Some(why),
                    None => self.packets(flash, emit)?,
                };
                self.count(emit);
                match why {
                    Some(why) => {
                        self.connected = false;
                        emit(&FromBoard::Hangup(why));
                        emit(&FromBoard::Dial);
                    }
                    None => emit(&self.pull()),
                }
            }
            ToBoard::Bytes { .. } => {}
            ToBoard::Finish => {
                self.send(Send::Disconnect, emit);
                self.connected = false;
                emit(&FromBoard::Report(self.report()));
            }
        }
        Ok(())
    }

    fn configure<F: NorFlash>(
        &mut self,
        flash: &mut F,
        config: &SessionConfig,
        emit: &mut impl FnMut(&FromBoard),
    ) -> Result<(), ModemError<F::Error>> {
        if config.qos > 2 || config.client_id.is_empty() || config.topic.is_empty() {
            emit(&FromBoard::Refused(ModemRefusal::Config));
            return Ok(());
        }
        match &self.record.session {
            Some(held) if held != config => {
                emit(&FromBoard::Refused(ModemRefusal::OtherSession));
                return Ok(());
            }
            Some(_) => {}
            None => {
                self.record.session = Some(config.clone());
                self.journal.append(flash, &self.record)?;
                self.open_session(flash, config.clone())?;
            }
        }
        emit(&FromBoard::Dial);
        Ok(())
    }

    fn take_bytes(&mut self, bytes: &[u8]) {
        // The pull asked for no more than the buffer's room: all taken.
        self.rx.push(bytes);
    }

    fn client_connect(&mut self) -> Send {
        match &mut self.session {
            Some((_, s)) => with_client!(s, c => c.connect()),
            None => Send::Connect,
        }
    }

    /// Handles every whole packet in the buffer; `Some` when the connection must close.
    fn packets<F: NorFlash>(
        &mut self,
        flash: &mut F,
        emit: &mut impl FnMut(&FromBoard),
    ) -> Result<Option<Hangup>, ModemError<F::Error>> {
        let key = self.record.key.0;
        let decode = |p: &[u8]| idem_mqtt::payments::parse(p, &key).ok();
        loop {
            let Some((config, session)) = &mut self.session else {
                return Ok(None);
            };
            let (rx, topic) = (&mut self.rx, config.topic.as_str());
            let out = match with_client!(session, c => c.feed(flash, rx, topic, decode, |_| {})) {
                Ok(Some(out)) => out,
                Ok(None) => return Ok(None),
                // MQTT 5 §3.1.2.11.4: a packet past the Maximum Packet Size announced
                // is a Protocol Error, and the client sends DISCONNECT 0x95 (Packet too
                // large) before it closes the connection (§4.13).
                Err(FeedError::Frame(FrameError::Decode(DecodeError::PastMaximum(len)))) => {
                    self.send(Send::DisconnectWith(PACKET_TOO_LARGE), emit);
                    let len = u32::try_from(len).unwrap_or(u32::MAX);
                    return Ok(Some(Hangup::PacketTooLarge(len)));
                }
                // A PUBLISH on a topic too long to reach its identifier (a filter with `+`
                // or `#` takes any), which the board can neither take nor acknowledge.
                Err(FeedError::Frame(FrameError::TooLong { .. })) => {
                    return Ok(Some(Hangup::TooLong));
                }
                Err(FeedError::Frame(_)) => return Ok(Some(Hangup::Malformed)),
                Err(FeedError::Client(e)) => return hangup(e).map(Some),
            };
            for s in out.packets() {
                self.send(s, emit);
            }
        }
    }

    /// Sends what the client's call wrote the records for, then what the PUBLISHes
    /// that waited for a place ask (a PUBREL frees one); `Some` when the client stops.
    fn answer<F: NorFlash>(
        &mut self,
        out: Result<Outbox<PLACES>, ClientError<F::Error>>,
        flash: &mut F,
        emit: &mut impl FnMut(&FromBoard),
    ) -> Result<Option<Hangup>, ModemError<F::Error>> {
        let out = match out {
            Ok(out) => out,
            Err(e) => return hangup(e).map(Some),
        };
        for s in out.packets() {
            self.send(s, emit);
        }
        self.take_waiting(flash, emit)
    }

    /// Has the client decide the PUBLISHes that wait, in order, while places are free,
    /// and sends each one's acknowledgement after its record; `Some` when the client
    /// stops.
    fn take_waiting<F: NorFlash>(
        &mut self,
        flash: &mut F,
        emit: &mut impl FnMut(&FromBoard),
    ) -> Result<Option<Hangup>, ModemError<F::Error>> {
        loop {
            let Some((_, session)) = &mut self.session else {
                return Ok(None);
            };
            let out = match with_client!(session, c => c.take_waiting(flash)) {
                Ok(Some(out)) => out,
                Ok(None) => return Ok(None),
                Err(e) => return hangup(e).map(Some),
            };
            for s in out.packets() {
                self.send(s, emit);
            }
        }
    }

    /// A quiet answer: PINGREQ when due, the client's held-back work; `Some` when the
    /// connection must close (a broker silent since CONNECT, or the client's refusal).
    fn quiet<F: NorFlash>(
        &mut self,
        flash: &mut F,
        emit: &mut impl FnMut(&FromBoard),
    ) -> Result<Option<Hangup>, ModemError<F::Error>> {
        if self.session.is_none() {
            return Ok(None);
        }
        self.quiet += 1;
        if self.at == 0 && self.quiet >= CONNACK_QUIETS {
            return Ok(Some(Hangup::Silent));
        }
        if self.quiet >= PING_AFTER {
            self.send(Send::Pingreq, emit);
        }
        let Some((_, session)) = &mut self.session else {
            return Ok(None);
        };
        let out = with_client!(session, c => c.on_quiet(flash));
        if let Some(why) = self.answer(out, flash, emit)? {
            return Ok(Some(why));
        }
        let Some((_, session)) = &mut self.session else {
            return Ok(None);
        };
        if !with_client!(session, c => c.resend_due()) {
            return Ok(None);
        }
        with_client!(session, c => c.resending());
        self.send(Send::Disconnect, emit);
        Ok(Some(Hangup::Resend))
    }

    fn send(&mut self, send: Send, emit: &mut impl FnMut(&FromBoard)) {
        self.quiet = 0;
        let Some((config, _)) = &self.session else {
            return;
        };
        let c = Config {
            client_id: config.client_id.as_str(),
            filter: config.topic.as_str(),
            qos: QoS::from_level(config.qos).unwrap_or(QoS::ExactlyOnce),
            keep_alive: idem_mqtt::client::KEEP_ALIVE_S,
            protocol: config.protocol(),
            maximum_packet_size: MAXIMUM_PACKET_5,
            session_expiry: idem_mqtt::client::SESSION_EXPIRY_S,
        };
        let mut buf = [0u8; SEND_MAX];
        let n = match &self.session {
            Some((_, Session::Naive(_))) => {
                Client::<idem_payments::stores::Naive, PLACES>::encode(&c, send, &mut buf)
            }
            _ => Client::<MessageIdStore, PLACES>::encode(&c, send, &mut buf),
        };
        if let Ok(n) = n
            && let Ok(bytes) = Vec::from_slice(&buf[..n])
        {
            emit(&FromBoard::Send(bytes));
        }
    }

    /// Sends this boot's counts if they changed since last sent.
    fn count(&mut self, emit: &mut impl FnMut(&FromBoard)) {
        let counts = BootCounts::of(&self.report().figures);
        if counts != self.counted {
            self.counted = counts;
            // Bytes in the buffer are taken, not yet handled.
            let handled = self.at.wrapping_sub(self.rx.held().len() as u32);
            emit(&FromBoard::Counts { handled, counts });
        }
    }

    /// The session's figures now.
    pub fn report(&self) -> Report {
        let figures = match &self.session {
            None => Figures::default(),
            Some((config, s)) => {
                let asked = QoS::from_level(config.qos).unwrap_or(QoS::ExactlyOnce);
                with_client!(s, c => Figures::of(c, asked))
            }
        };
        Report {
            boots: self.record.boots,
            figures,
        }
    }
}

/// The session's client over `store`: its receiver's journal in `region`, under the
/// session's tag and the store's.
// Inlined into both arms, as the code it replaced was: out of line, idem-mqtt's text grew
// by 324 B (36,576 to 36,900 B).
#[inline(always)]
fn client<S, F: NorFlash>(
    flash: &mut F,
    region: idem_core::journal::Region,
    tag: u32,
    store: S,
    keep: Keep,
) -> Result<Client<S, PLACES, Slots>, ModemError<F::Error>>
where
    S: Store<Payload = idem_payments::Message>,
{
    let receiver = Receiver::open(flash, region, tag ^ S::TAG, store, keep, Release::Now)?;
    Ok(Client::with_waiting(receiver, [const { None }; WAITING]))
}

fn total_of<S: Sum, const N: usize, Q>(c: &Client<S, N, Q>) -> i64
where
    Q: AsRef<[Option<Waiting<S::Payload>>]> + AsMut<[Option<Waiting<S::Payload>>]>,
{
    S::total(&c.receiver().record().state)
}

/// Why a client error closes the connection; a receiver's error stops the board.
fn hangup<E>(e: ClientError<E>) -> Result<Hangup, ModemError<E>> {
    Ok(match e {
        ClientError::Receive(_) => return Err(ModemError::Receive),
        ClientError::Refused(code) => Hangup::Refused(code),
        ClientError::SubscriptionRefused(_) => Hangup::SubscriptionRefused,
        ClientError::Unexpected(_) => Hangup::Unexpected,
        ClientError::Disconnected(reason) => Hangup::Disconnected(reason),
    })
}
