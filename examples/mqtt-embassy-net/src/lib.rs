//! idem-mqtt's receiver over a TCP stack that embassy runs: the receive rules are
//! idem-mqtt's [`Client`] and [`Receiver`], unchanged; this crate only carries bytes
//! between them and a connection, behind a small [`Transport`] trait.
//!
//! - [`Session`]: the client, its journal on the chip's flash, and the packet buffer;
//!   [`Session::connection`] runs one connection to its end and says why it ended.
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
use heapless::Vec;
use idem_core::journal::{JournalError, Region};
use idem_core::log::IdKey;
use idem_core::store::Store;
use idem_mqtt::client::{self, Client, ClientError, Config, Send};
use idem_mqtt::codec::{self, Frame, Incoming, Protocol, Publish, QoS};
use idem_mqtt::payments::Figures;
use idem_mqtt::receiver::{Decided, Keep, ReceiveError, Receiver, Release};
use idem_payments::Sum;
use idem_payments::stores::Naive;

/// QoS 2 identifiers the session holds at once (the board's, idem's `device mqtt`).
pub const PLACES: usize = 8;

/// The longest topic or filter taken.
pub const TOPIC_MAX: usize = 64;

/// The largest PUBLISH the session takes: a longer one is acknowledged and rejected.
pub const MAX_PACKET: usize = idem_mqtt::max_packet(TOPIC_MAX);

/// The most bytes one read asks for.
pub const CHUNK: usize = 256;

/// The packet buffer: the largest packet taken, and one chunk more.
const RX: usize = MAX_PACKET + CHUNK;

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

/// The receiver's session: its client, the connection's packet buffer.
pub struct Session<'a> {
    client: Client<App, PLACES>,
    config: Config<'a>,
    rx: Vec<u8, RX>,
    /// Bytes of an oversized PUBLISH still to drop as they arrive.
    skip: usize,
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
            client: Client::new(receiver),
            config: Config {
                client_id: settings.client_id,
                filter: settings.filter,
                qos: QoS::ExactlyOnce,
                keep_alive: client::KEEP_ALIVE_S,
                protocol: Protocol::V311,
                maximum_packet_size: MAX_PACKET as u32,
            },
            rx: Vec::new(),
            skip: 0,
            last_sent: 0,
        })
    }

    /// The client (its counts, its receiver's record).
    pub fn client(&self) -> &Client<App, PLACES> {
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

    /// Runs one connection on `link`, from CONNECT to its end; `decided` sees each
    /// PUBLISH decided, once its record is on `flash`.
    pub async fn connection<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        decided: &mut impl FnMut(&Publish<'_>, Decided),
    ) -> End<T::Error, F::Error> {
        match self.run(flash, link, decided).await {
            Ok(never) => match never {},
            Err(end) => end,
        }
    }

    async fn run<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        decided: &mut impl FnMut(&Publish<'_>, Decided),
    ) -> Result<Infallible, End<T::Error, F::Error>> {
        self.rx.clear();
        self.skip = 0;
        let send = self.client.connect();
        self.send(link, send).await?;
        link.flush().await.map_err(End::Transport)?;
        let start = link.now_ms();
        let mut heard = false;
        loop {
            let mut buf = [0u8; CHUNK];
            let room = (RX - self.rx.len()).min(CHUNK);
            match link.read(&mut buf[..room]).await.map_err(End::Transport)? {
                Got::Closed => return Err(End::Closed),
                Got::Bytes(n) => {
                    heard |= n > 0;
                    self.take(&buf[..n.min(room)]);
                    self.packets(flash, link, decided).await?;
                }
                Got::Quiet => {
                    let silent = link.now_ms().saturating_sub(start);
                    if !heard && silent >= u64::from(client::CONNACK_WAIT_S) * 1000 {
                        return Err(End::Silent);
                    }
                    self.quiet(flash, link).await?;
                }
            }
            link.flush().await.map_err(End::Transport)?;
        }
    }

    /// Takes bytes read, past those of an oversized PUBLISH still to drop.
    fn take(&mut self, bytes: &[u8]) {
        let drop = self.skip.min(bytes.len());
        self.skip -= drop;
        // A read asks for no more than the buffer's room.
        let _ = self.rx.extend_from_slice(&bytes[drop..]);
    }

    /// Handles every whole packet in the buffer: each decision on the flash, then the
    /// packets it allows written.
    async fn packets<T: Transport, F: NorFlash>(
        &mut self,
        flash: &mut F,
        link: &mut T,
        decided: &mut impl FnMut(&Publish<'_>, Decided),
    ) -> Result<(), End<T::Error, F::Error>> {
        loop {
            let filter = self.config.filter;
            let (len, out) = match codec::next(&self.rx, MAX_PACKET) {
                Ok(None) if self.rx.len() == RX => return Err(End::TooLong),
                Ok(None) => return Ok(()),
                Err(_) => return Err(End::Malformed),
                Ok(Some(Frame::Oversized { qos, pid, len })) => {
                    (len, self.client.on_oversized(flash, qos, pid))
                }
                Ok(Some(Frame::Packet { packet, len })) => {
                    let decode = |p: &[u8]| idem_mqtt::payments::parse(p, &KEY).ok();
                    let out = self.client.on_packet(flash, packet, filter, decode);
                    if let (Incoming::Publish(p), Ok(out)) = (packet, &out)
                        && let Some(d) = out.decided
                    {
                        decided(&p, d);
                    }
                    (len, out)
                }
            };
            let dropped = len.min(self.rx.len());
            self.skip = len - dropped;
            let rest = self.rx.len() - dropped;
            self.rx.copy_within(dropped.., 0);
            self.rx.truncate(rest);
            for s in out.map_err(refused)?.packets() {
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
    ) -> Result<(), End<T::Error, F::Error>> {
        if client::ping_due(link.now_ms().saturating_sub(self.last_sent)) {
            self.send(link, Send::Pingreq).await?;
        }
        let out = self.client.on_quiet(flash).map_err(refused)?;
        for s in out.packets() {
            self.send(link, s).await?;
        }
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
        let n = Client::<App, PLACES>::encode(&self.config, send, &mut buf)
            .map_err(|_| End::TooLong)?;
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
        ClientError::SubscriptionRefused => End::Refused(ClientError::SubscriptionRefused),
        ClientError::Unexpected(what) => End::Refused(ClientError::Unexpected(what)),
        ClientError::Disconnected(code) => End::Refused(ClientError::Disconnected(code)),
    }
}
