//! idem-mqtt's receiver over a TCP stack that embassy runs: the receive rules are
//! idem-mqtt's [`Client`] and [`Receiver`], unchanged; this crate only carries bytes
//! between them and a connection, behind a small [`Transport`] trait.
//!
//! - [`Session`]: the client, its journal on the chip's flash, the packet buffer
//!   (idem-mqtt's `Framer`) and the slots where PUBLISHes past the places wait
//!   ([`Client::with_waiting`]); [`Session::connection`] runs one connection to its end
//!   and says why it ended.
//! - [`Transport`]: what a connection must do (read with a quiet time, write, flush, a
//!   clock). The board's is embassy-net's `TcpSocket` ([`net::Tcp`], feature `board`);
//!   the host test's is a std `TcpStream` (tests/mosquitto.rs), against Mosquitto.
//!
//! **Durable, then sent.** Every record the receiver writes is on the flash when
//! [`NorFlash::write`] returns: embassy-nrf's `Nvmc` is blocking, and waits for the NVMC
//! to be ready after each word and each page erase. So the acknowledgements that a call allows
//! ([`idem_mqtt::client::Outbox::packets`]) are written to the connection after that
//! call returns, and the connection is flushed once each batch of bytes read has been
//! handled. The flash path is blocking: idem-mqtt's `Client` takes a blocking
//! `NorFlash`, so an async flash (`BlockingAsync<Nvmc>`) would not shorten anything here;
//! the executor runs nothing else while a record is written.
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

#[cfg(feature = "board")]
pub mod net;

use core::convert::Infallible;

use embedded_storage::nor_flash::NorFlash;
use idem_core::journal::{JournalError, Region};
use idem_core::log::IdKey;
use idem_core::store::Store;
use idem_mqtt::client::{self, Client, ClientError, Config, FeedError, Send, Waiting};
use idem_mqtt::codec::{FrameError, Framer, Incoming, Protocol, Publish, QoS};
use idem_mqtt::payments::Figures;
use idem_mqtt::receiver::{Decided, Keep, ReceiveError, Receiver, Release};
use idem_payments::Sum;
use idem_payments::stores::Naive;

/// QoS 2 identifiers the session holds at once (the board's, idem's `device mqtt`).
pub const PLACES: usize = 8;

/// New QoS 2 PUBLISHes that may wait, decoded and unanswered, for a place once all
/// [`PLACES`] are taken, as idem's board keeps them: with the places, more than a
/// broker's stock window (Mosquitto's `max_inflight_messages` is 20). One past them is
/// left unanswered and comes again at the next connection.
pub const WAITING: usize = 24;

/// The client's slots for PUBLISHes waiting for a place.
type Slots = [Option<Waiting<<App as Store>::Payload>>; WAITING];

/// The session's client.
pub type SessionClient = Client<App, PLACES, Slots>;

/// The longest topic or filter taken.
pub const TOPIC_MAX: usize = 64;

/// The largest PUBLISH the session takes: a longer one is acknowledged and rejected.
pub const MAX_PACKET: usize = idem_mqtt::max_packet(TOPIC_MAX);

/// The most bytes one read asks for.
pub const CHUNK: usize = 256;

/// The packet buffer: the largest packet taken, and one chunk more.
pub const RX: usize = MAX_PACKET + CHUNK;

/// The most bytes of one packet sent: a CONNECT with a 23-byte client id, a SUBSCRIBE
/// with the longest filter, an acknowledgement.
const SEND_MAX: usize = 16 + 23 + TOPIC_MAX;

/// How long one read waits for the broker's bytes before it says the link is quiet, in
/// milliseconds.
pub const QUIET_MS: u64 = 100;

/// Pages of the receiver's journal.
pub const JOURNAL_PAGES: u32 = 4;

/// The store the session applies payments to: `total += amount`. QoS 2 with the
/// identifiers in flash makes it exact.
pub type App = Naive;

/// The key of the message ids (idem's payments hash their `"id"` with it). The naive
/// store does not look at ids; a message-id store would, and a device would make its
/// key once at its first boot, as idem's board does.
const KEY: IdKey = IdKey([0x1d; 16]);

/// What one read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    /// This many bytes, at the start of the buffer.
    Bytes(usize),
    /// Nothing within [`QUIET_MS`].
    Quiet,
    /// The peer closed the connection.
    Closed,
}

/// A connection to the broker, as the session uses it.
// The board's executor is single-threaded (embassy's thread mode), so the futures need
// no `Send` bound, as embedded-io-async's traits do not.
#[allow(async_fn_in_trait)]
pub trait Transport {
    /// Why the connection failed.
    type Error;

    /// Reads into `buf`, waiting at most [`QUIET_MS`].
    async fn read(&mut self, buf: &mut [u8]) -> Result<Got, Self::Error>;

    /// Writes all of `bytes` (the stack may still hold them).
    async fn write(&mut self, bytes: &[u8]) -> Result<(), Self::Error>;

    /// Waits until what was written has left.
    async fn flush(&mut self) -> Result<(), Self::Error>;

    /// Milliseconds since some fixed instant (the keep-alive and the wait for CONNACK).
    fn now_ms(&self) -> u64;
}

/// The session's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings<'a> {
    /// The client identifier: the broker keeps the session under it.
    pub client_id: &'a str,
    /// The filter subscribed to (at most [`TOPIC_MAX`] bytes).
    pub filter: &'a str,
    /// The journal's tag: another application's journal does not open as this one's.
    pub tag: u32,
}

/// Why a connection ended. Nothing undurable was acknowledged; the caller closes the
/// connection and connects again (after [`client::backoff_ms`]), or stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "board", derive(defmt::Format))]
pub enum End<T, F> {
    /// The broker closed the connection.
    Closed,
    /// The session asks the broker to send again what it left unanswered
    /// ([`Client::resend_due`]): DISCONNECT was sent.
    Resend,
    /// No CONNACK within [`client::CONNACK_WAIT_S`].
    Silent,
    /// Bytes that are no packet a broker sends a client.
    Malformed,
    /// A packet that does not fit the buffer before its identifier.
    TooLong,
    /// The session refused the connection ([`ClientError`]): CONNACK's refusal, SUBACK's,
    /// a packet a subscriber does not take. The receiver's own errors are
    /// [`End::Flash`].
    Refused(ClientError<Infallible>),
    /// The transport failed.
    Transport(T),
    /// The receiver's flash failed: stop (nothing was acknowledged after it).
    Flash(ReceiveError<F>),
}

/// What the session did with a PUBLISH, as [`Session::connection`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'p> {
    /// A PUBLISH as it arrived, before anything is decided.
    Arrived(&'p Publish<'p>),
    /// A PUBLISH decided, its record on the flash: its packet identifier (QoS 1 and 2).
    /// One that waited for a place is decided later than it arrived, in the order the
    /// PUBLISHes came.
    Decided(Option<u16>, Decided),
}

/// The receiver's session: its client, the connection's packet buffer.
pub struct Session<'a> {
    client: SessionClient,
    config: Config<'a>,
    rx: Framer<[u8; RX]>,
    last_sent: u64,
}

impl<'a> Session<'a> {
    /// Opens the receiver's journal in `region` (a blank one starts a new session).
    pub fn open<F: NorFlash>(
        flash: &mut F,
        region: Region,
        settings: Settings<'a>,
    ) -> Result<Self, JournalError<F::Error>> {
        let tag = settings.tag ^ <App as Store>::TAG;
        let receiver = Receiver::open(flash, region, tag, Naive, Keep::Flash, Release::Now)?;
        Ok(Self {
            client: Client::with_waiting(receiver, [const { None }; WAITING]),
            config: Config {
                client_id: settings.client_id,
                filter: settings.filter,
                qos: QoS::ExactlyOnce,
                keep_alive: client::KEEP_ALIVE_S,
                protocol: Protocol::V311,
                maximum_packet_size: MAX_PACKET as u32,
                session_expiry: client::SESSION_EXPIRY_S,
            },
            rx: Framer::new([0; RX], Protocol::V311, MAX_PACKET, usize::MAX),
            last_sent: 0,
        })
    }

    /// The client (its counts, its receiver's record).
    pub fn client(&self) -> &SessionClient {
        &self.client
    }

    /// The payments' total, as the flash holds it.
    pub fn total(&self) -> i64 {
        App::total(&self.client.receiver().record().state)
    }

    /// The session's figures now.
    pub fn figures(&self) -> Figures {
        Figures::of(&self.client, self.config.qos)
    }

    /// Runs one connection on `link`, from CONNECT to its end; `seen` is shown each
    /// PUBLISH as it arrives, and again once it is decided, its record on `flash`.
    pub async fn connection<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        seen: &mut impl FnMut(Seen<'_>),
    ) -> End<T::Error, F::Error> {
        match self.run(flash, link, seen).await {
            Ok(never) => match never {},
            Err(end) => end,
        }
    }

    async fn run<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        seen: &mut impl FnMut(Seen<'_>),
    ) -> Result<Infallible, End<T::Error, F::Error>> {
        self.rx.clear();
        let send = self.client.connect();
        self.send(link, send).await?;
        link.flush().await.map_err(End::Transport)?;
        let start = link.now_ms();
        let mut heard = false;
        loop {
            let mut buf = [0u8; CHUNK];
            let room = self.rx.room().min(CHUNK);
            match link.read(&mut buf[..room]).await.map_err(End::Transport)? {
                Got::Closed => return Err(End::Closed),
                Got::Bytes(n) => {
                    heard |= n > 0;
                    // A read asks for no more than the buffer's room: all taken.
                    self.rx.push(&buf[..n.min(room)]);
                    self.packets(flash, link, seen).await?;
                }
                Got::Quiet => {
                    let silent = link.now_ms().saturating_sub(start);
                    if !heard && silent >= u64::from(client::CONNACK_WAIT_S) * 1000 {
                        return Err(End::Silent);
                    }
                    self.quiet(flash, link, seen).await?;
                }
            }
            link.flush().await.map_err(End::Transport)?;
        }
    }

    /// Takes every step the buffer allows ([`Client::feed`]): each decision on the
    /// flash, then the packets it allows written.
    async fn packets<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        seen: &mut impl FnMut(Seen<'_>),
    ) -> Result<(), End<T::Error, F::Error>> {
        let decode = |p: &[u8]| idem_mqtt::payments::parse(p, &KEY).ok();
        loop {
            let arrived = |p: &Incoming<'_>| {
                if let Incoming::Publish(p) = p {
                    seen(Seen::Arrived(p));
                }
            };
            let filter = self.config.filter;
            let out = match self
                .client
                .feed(flash, &mut self.rx, filter, decode, arrived)
            {
                Ok(Some(out)) => out,
                Ok(None) => return Ok(()),
                Err(FeedError::Frame(FrameError::TooLong { .. })) => return Err(End::TooLong),
                Err(FeedError::Frame(_)) => return Err(End::Malformed),
                Err(FeedError::Client(e)) => return Err(refused(e)),
            };
            if let Some(d) = out.decided {
                seen(Seen::Decided(out.pid, d));
            }
            for s in out.packets() {
                self.send(link, s).await?;
            }
        }
    }

    /// The link is quiet: PINGREQ when due, the releases that wait, and a new connection
    /// when the session left a PUBLISH unanswered and has a place for it now.
    async fn quiet<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        seen: &mut impl FnMut(Seen<'_>),
    ) -> Result<(), End<T::Error, F::Error>> {
        if client::ping_due(link.now_ms().saturating_sub(self.last_sent)) {
            self.send(link, Send::Pingreq).await?;
        }
        let out = self.client.on_quiet(flash).map_err(refused)?;
        for s in out.packets() {
            self.send(link, s).await?;
        }
        // A release written now frees a place for a PUBLISH that waits: decided now.
        self.packets(flash, link, seen).await?;
        if self.client.resend_due() {
            let bye = self.client.resending();
            self.send(link, bye).await?;
            link.flush().await.map_err(End::Transport)?;
            return Err(End::Resend);
        }
        Ok(())
    }

    async fn send<T: Transport, F>(
        &mut self,
        link: &mut T,
        send: Send,
    ) -> Result<(), End<T::Error, F>> {
        let mut buf = [0u8; SEND_MAX];
        // The session's own packets fit SEND_MAX: a filter past TOPIC_MAX would not.
        let n = SessionClient::encode(&self.config, send, &mut buf).map_err(|_| End::TooLong)?;
        link.write(&buf[..n]).await.map_err(End::Transport)?;
        self.last_sent = link.now_ms();
        Ok(())
    }
}

/// A client error as the end of a connection: the receiver's own is the flash's.
fn refused<T, F>(e: ClientError<F>) -> End<T, F> {
    match e {
        ClientError::Receive(e) => End::Flash(e),
        ClientError::Refused(code) => End::Refused(ClientError::Refused(code)),
        ClientError::SubscriptionRefused(code) => {
            End::Refused(ClientError::SubscriptionRefused(code))
        }
        ClientError::Unexpected(what) => End::Refused(ClientError::Unexpected(what)),
        ClientError::Disconnected(code) => End::Refused(ClientError::Disconnected(code)),
    }
}
