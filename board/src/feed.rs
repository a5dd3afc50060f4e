//! The board as a consumer of a stream that lives on the host: the two-way protocol, and
//! both of its ends without I/O ([`Device`] and [`Host`]), so the firmware, `idem device`
//! and the link model in the tests run the same code.
//!
//! Frames are as the demo's ([`super::wire`]): postcard, CRC-32, COBS, a `0x00` delimiter.
//!
//! **The device pulls.** A real nRF51 has a 6-byte receive FIFO, no DMA on its UART, and
//! the CPU stalls while the NVMC writes or erases (a page erase takes about 22 ms, some
//! 250 byte times at 115200 baud), and the micro:bit's USB bridge wires no flow control:
//! bytes that arrive while the device writes flash are lost. So the device asks for the
//! next batch ([`FromDevice::Pull`]) only when it is ready to receive it whole without
//! touching flash, and a batch fits its receive buffer. The host sends events only in
//! answer to a pull (and a batch again when asked again). The device asks again after
//! a silence ([`Device::on_silence`]): a lost pull or a lost batch costs one timeout.
//!
//! **The device's flash is the truth.** It announces where it resumes (read from its own
//! journals) at boot and on configuration; the host feeds from there. A frame that does
//! not decode is counted and dropped; a batch that does not start where the device reads
//! next is counted and dropped; nothing is applied twice by the protocol itself, and
//! what a replay does to a total is the store's business, as everywhere in idem.
//!
//! **The host grades only what it delivered.** [`Host`] checks every position the device
//! reports against the offsets it sent: a device that claims more (an offset applied or
//! durable that this host never delivered, a resume past the stream's end, a done before
//! the end or with another length) or less (a resume below a position it acknowledged
//! durable while its flash holds this stream: a lost checkpoint) is a [`HostError`]
//! naming the claim. A done is gradable only when this host delivered every offset of
//! the stream and the device acknowledged them all durable ([`Heard::Done`]); a device
//! that already held a prefix when this host first heard it (a restarted host or bridge)
//! ends unverified.
//!
//! **The device has its own id key.** It draws an [`IdKey`] at the first boot of its
//! storage (the firmware from the nRF51's RNG), keeps it in its feed record beside its
//! boot counter, and announces it in its boot frame; the host keys each event's message
//! id from the event's id bytes under it ([`Source::event`]), so a producer that does not
//! know the key cannot choose two ids the device's message-id store takes for one.
//!
//! Both ends speak [`VERSION`]; different versions refuse each other in one sentence.

use core::mem::size_of;
use idem_sim::payment::Total;

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::storage::{self, BoardLayout, CountsBoots, RECORD_PAGES};
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::journal::{Journal, JournalError};
use idem_core::log::{IdKey, Log, Offset, Received};
use idem_core::persist::Layout;
use idem_sim::payment::stores::{Atomic, Naive, OffsetStamped, ProducerSeq, StoreError, TwoPhase};
use idem_sim::payment::{Message, Payment};
use idem_sim::registry::{MessageIdStore, ProducerSeqStore, StoreKind};

/// The protocol's version: a host and a device of different versions refuse each other.
/// Version 2: the boot frame carries the device's [`IdKey`]. Version 3: the link also
/// carries the modem's frames ([`crate::modem`]: the board pulls a broker's bytes).
pub const VERSION: u16 = 3;

/// Events in one batch: a full batch is at most [`TO_DEVICE_MAX`] bytes on the wire.
pub const BATCH: usize = 8;

/// The message-id store's window on the device, and the producers the producer-seq
/// store remembers there: the registry's capacities ([`idem_sim::registry`]).
pub use idem_sim::registry::{PRODUCERS, WINDOW};

/// Pages the feed's storage takes: its record (2), the consumer position (4) and the
/// store (4).
pub const FEED_PAGES: u32 = 10;

/// The stores a device can run: the registry's board stores
/// ([`StoreId::kind`]), in the order the wire numbers them.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub enum StoreId {
    /// [`StoreKind::Naive`].
    Naive,
    /// [`StoreKind::Offset`].
    Offset,
    /// [`StoreKind::MessageId`], its window [`WINDOW`] ids.
    MessageId,
    /// [`StoreKind::ProducerSeq`], for [`PRODUCERS`] producers.
    ProducerSeq,
    /// [`StoreKind::Atomic`].
    Atomic,
    /// [`StoreKind::TwoPhase`].
    TwoPhase,
}

impl StoreId {
    /// Every store, in the CLI's order.
    pub const ALL: [StoreId; 6] = [
        Self::Naive,
        Self::Offset,
        Self::MessageId,
        Self::ProducerSeq,
        Self::Atomic,
        Self::TwoPhase,
    ];

    /// The registry's store it is.
    pub const fn kind(self) -> StoreKind {
        match self {
            Self::Naive => StoreKind::Naive,
            Self::Offset => StoreKind::Offset,
            Self::MessageId => StoreKind::MessageId,
            Self::ProducerSeq => StoreKind::ProducerSeq,
            Self::Atomic => StoreKind::Atomic,
            Self::TwoPhase => StoreKind::TwoPhase,
        }
    }

    /// The device's store for the registry's `kind`, if the board runs it
    /// ([`Source::Board`](idem_sim::registry::Source::Board)).
    pub fn from_kind(kind: StoreKind) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.kind() == kind)
    }

    /// The registry's name (the CLI's).
    pub const fn name(self) -> &'static str {
        self.kind().name()
    }

    /// The RAM its consumer takes on the device, in bytes.
    pub const fn ram(self) -> usize {
        match self {
            Self::Naive => size_of::<Consumer<Naive>>(),
            Self::Offset => size_of::<Consumer<OffsetStamped>>(),
            Self::MessageId => size_of::<Consumer<MessageIdStore>>(),
            Self::ProducerSeq => size_of::<Consumer<ProducerSeqStore>>(),
            Self::Atomic => size_of::<Consumer<Atomic>>(),
            Self::TwoPhase => size_of::<Consumer<TwoPhase>>(),
        }
    }
}

/// The stream a device consumes, as the host configures it.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct StreamConfig {
    /// The stream's id (the host's hash of its scenario or log): another id is another
    /// stream, and the device starts it from an erased partition.
    pub stream: u32,
    /// The store.
    pub store: StoreId,
    /// The checkpoint interval K.
    pub checkpoint_every: u32,
    /// The planned crash: on the first boot of this stream, reset right after applying
    /// this offset, before its checkpoint.
    pub crash_after: Option<Offset>,
}

impl StreamConfig {
    /// Whether `other` is the same stream consumed the same way (the planned crash
    /// aside: it belongs to the first configuration).
    fn same_stream(&self, other: &StreamConfig) -> bool {
        (self.stream, self.store, self.checkpoint_every)
            == (other.stream, other.store, other.checkpoint_every)
    }
}

/// One event on the wire: the payment event itself, [`Payment`]. Its postcard encoding is
/// the offset, the message id (a `u64`), producer, epoch, sequence and amount, in that
/// order, as feed protocol 2 has always framed it.
///
/// Why the feed carries payments and not a generic postcard payload: the feed is idem's
/// own demonstration protocol, and its frames are the protocol check (the host matches
/// them exhaustively). A firmware with events of its own decodes its frames into its own
/// `Event<P>` and reads them through [`Received`], as this device does.
pub type WireEvent = Payment;

/// From the host to the device.
// The batch is inline on purpose: the device has no allocator and holds one message at
// a time.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToDevice {
    /// Who is there? The device answers with its [`FromDevice::Boot`] state.
    Hello {
        /// The host's protocol version.
        version: u16,
    },
    /// Consume this stream (the same stream again: carry on from flash).
    Configure {
        /// The host's protocol version.
        version: u16,
        /// The stream.
        config: StreamConfig,
    },
    /// A batch, in answer to a pull: consecutive offsets from the pull's `from`.
    Events {
        /// The events.
        events: heapless::Vec<WireEvent, BATCH>,
        /// The stream's length, when this batch reaches its end (the device then
        /// checkpoints the last, partial batch).
        end: Option<Offset>,
    },
    /// In answer to a pull at the end: the stream has `events` events, all sent.
    End {
        /// The stream's length.
        events: Offset,
    },
}

/// The most bytes a [`ToDevice`] body takes (a full batch of the largest events).
pub const TO_DEVICE_MAX: usize = 1 + 1 + BATCH * WireEvent::POSTCARD_MAX_SIZE + 11;

/// The most bytes a [`ToDevice`] frame takes on the wire: the device's receive buffer.
pub const TO_DEVICE_ENCODED: usize = super::wire::encoded_len(TO_DEVICE_MAX);

/// Why a device refuses.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub enum Refusal {
    /// The host speaks another protocol version.
    Version {
        /// The device's.
        device: u16,
        /// The host's.
        host: u16,
    },
    /// The store's consumer does not fit the RAM the device sets aside for it.
    TooBig {
        /// The store.
        store: StoreId,
        /// Bytes it needs.
        needs: u32,
        /// Bytes the device has for it.
        has: u32,
    },
    /// Events before any configuration.
    NotConfigured,
    /// A checkpoint interval of 0.
    Interval,
}

/// Why a device stopped consuming.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub enum Failure {
    /// The flash failed.
    Flash,
    /// A journal is damaged or belongs to something else.
    Journal,
    /// Recovery found the consumer's journals out of step.
    Disagree,
    /// The store refused an event: its bounded memory is full (a window or producer
    /// table), or a total would overflow.
    Store,
    /// Its random number generator gave no id key at the first boot of its storage.
    Key,
}

/// From the device to the host.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub enum FromDevice {
    /// At boot, and in answer to a hello: who the device is and what its flash holds.
    Boot {
        /// The device's protocol version.
        version: u16,
        /// Boots since its storage was formatted, this one included.
        boots: u32,
        /// The stream its flash holds, if any.
        stream: Option<StreamConfig>,
        /// Where it resumes (the next offset to read), from its own flash.
        resume: Offset,
        /// Its total as recovered.
        total: i64,
        /// The key its message ids are computed under, drawn at the first boot of its
        /// storage.
        key: DeviceKey,
    },
    /// Configured: consuming `stream` from `resume`.
    Ready {
        /// The stream's id.
        stream: u32,
        /// Where it resumes.
        resume: Offset,
        /// Its total.
        total: i64,
    },
    /// Send the events from `from`, at most `max` of them.
    Pull {
        /// The first offset wanted.
        from: Offset,
        /// The most events the device takes in one batch.
        max: u8,
    },
    /// A batch applied.
    Ack {
        /// The next offset to read: everything below it was applied.
        applied: Offset,
        /// The durable position: a reset now resumes here.
        durable: Offset,
        /// The total now.
        total: i64,
    },
    /// The stream is consumed to its end.
    Done {
        /// Boots so far.
        boots: u32,
        /// The final total.
        total: i64,
        /// The stream's length.
        events: Offset,
        /// The durable position at the end.
        durable: Offset,
    },
    /// A request the device will not carry out.
    Refused(Refusal),
    /// The device stopped: its storage or store failed.
    Failed(Failure),
    /// What the device dropped from the line so far, and its stack's high-water mark.
    Stats {
        /// Frames that did not decode (garbage, damage, too long).
        garbled: u32,
        /// Batches that did not start where the device reads next.
        out_of_order: u32,
        /// The most stack the firmware has used, in bytes (0 where unknown).
        stack_bytes: u32,
    },
}

/// The feed protocol's CRC domain: its frames fail the CRC of any other protocol's
/// reader (the demo's frames among them), and theirs fail its.
pub const DOMAIN: &[u8] = b"idem-feed";

/// Encodes a feed message (either direction) as a frame into `out`.
pub fn encode<'a, T: Serialize>(
    msg: &T,
    scratch: &mut [u8],
    out: &'a mut [u8],
) -> Result<&'a [u8], super::wire::WireError> {
    super::wire::encode_in(msg, DOMAIN, scratch, out)
}

/// The device's reader of the host's frames.
pub type DeviceReader = super::wire::Reader<ToDevice, TO_DEVICE_ENCODED>;

/// The host's reader of the device's frames.
pub type HostReader = super::wire::Reader<FromDevice, FROM_DEVICE_ENCODED>;

/// The most bytes a [`FromDevice`] body takes.
pub const FROM_DEVICE_MAX: usize = FromDevice::POSTCARD_MAX_SIZE;

/// The most bytes a [`FromDevice`] frame takes on the wire.
pub const FROM_DEVICE_ENCODED: usize = super::wire::encoded_len(FROM_DEVICE_MAX);

/// The feed's record in its own journal: boots, the device's id key, and the stream its
/// flash holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct FeedRecord {
    /// Boots since the storage was formatted.
    pub boots: u32,
    /// The device's id key, drawn at the first boot of its storage.
    pub key: DeviceKey,
    /// The stream the consumer partition holds.
    pub stream: Option<StreamConfig>,
    /// Boots since that stream was configured (the planned crash is on the first).
    pub stream_boots: u32,
}

impl CountsBoots for FeedRecord {
    fn count_boot(&mut self) {
        self.boots += 1;
        if self.stream.is_some() {
            self.stream_boots += 1;
        }
    }
}

/// The device's [`IdKey`] in its boot frame and its record: encoded as the key itself
/// (sixteen bytes, as postcard writes a byte array), decoded in a loop, which takes a
/// Cortex-M0 far less code than serde's array decoder, which decodes each of the sixteen
/// elements in code of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, MaxSize)]
pub struct DeviceKey(pub IdKey);

impl<'de> Deserialize<'de> for DeviceKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = DeviceKey;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("16 bytes")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<DeviceKey, A::Error> {
                let mut key = [0u8; 16];
                for (i, b) in key.iter_mut().enumerate() {
                    *b = seq
                        .next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                }
                Ok(DeviceKey(IdKey(key)))
            }
        }
        deserializer.deserialize_tuple(16, Bytes)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for DeviceKey {
    fn format(&self, f: defmt::Formatter<'_>) {
        // A secret is not printed.
        defmt::write!(f, "DeviceKey(..)")
    }
}

/// Where the feed's journals live: [`FEED_PAGES`] pages from `start`.
pub type FeedLayout = BoardLayout;

/// The consumer's journals in the feed's storage, after its record's pages.
const fn consumer_layout(layout: &FeedLayout, tag: u32) -> Layout {
    Layout {
        positions: layout.pages(RECORD_PAGES, 4),
        sink: layout.pages(RECORD_PAGES + 4, 4),
        tag,
    }
}

/// Why the device stopped, with the flash's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FeedError<E> {
    /// The consumer (its journals or its store) failed.
    Consumer(ConsumerError<E, StoreError>),
    /// The first boot of the storage found no id key to draw.
    NoKey,
}

impl<E> From<ConsumerError<E, StoreError>> for FeedError<E> {
    fn from(e: ConsumerError<E, StoreError>) -> Self {
        Self::Consumer(e)
    }
}

impl<E> From<JournalError<E>> for FeedError<E> {
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn from(e: JournalError<E>) -> Self {
        Self::Consumer(ConsumerError::Journal(e))
    }
}

impl<E> FeedError<E> {
    /// What the device tells the host.
    pub fn failure(&self) -> Failure {
        match self {
            Self::Consumer(ConsumerError::Journal(JournalError::Flash(_))) => Failure::Flash,
            Self::Consumer(ConsumerError::Journal(_)) => Failure::Journal,
            Self::Consumer(ConsumerError::Disagree(_)) => Failure::Disagree,
            Self::Consumer(
                ConsumerError::Store(_)
                | ConsumerError::Region { .. }
                | ConsumerError::Rejections { .. },
            ) => Failure::Store,
            Self::Consumer(ConsumerError::Reopen) => Failure::Journal,
            // An error of an idem-core newer than this crate: the consumer refused to go on.
            Self::Consumer(_) => Failure::Store,
            Self::NoKey => Failure::Key,
        }
    }
}

impl<E: core::fmt::Display> core::fmt::Display for FeedError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Consumer(e) => write!(f, "the device stopped consuming: {e}"),
            Self::NoKey => f.write_str("the device's random number generator gave no id key"),
        }
    }
}

/// The events of one batch as a log ([`Received`]): only its offsets are there; its
/// length is the stream's when known.
type BatchLog<'a> = Received<'a, WireEvent>;

macro_rules! consumers {
    ($($variant:ident($store:ty)),* $(,)?) => {
        /// The consumer of whichever store the host configured.
        #[derive(Debug, Clone)]
        enum AnyConsumer {
            $($variant(Consumer<$store>),)*
        }

        impl AnyConsumer {
            // Out of line on bare metal: inlined, it was copied into several callers
            // (BENCHMARKS.md, "Firmware size").
            #[cfg_attr(target_os = "none", inline(never))]
            fn step<F: NorFlash>(
                &mut self,
                flash: &mut F,
                log: &BatchLog<'_>,
            ) -> Result<Step<Message>, ConsumerError<F::Error, StoreError>> {
                match self {
                    $(Self::$variant(c) => c.step(flash, log),)*
                }
            }

            fn total(&self) -> i64 {
                match self {
                    $(Self::$variant(c) => c.total(),)*
                }
            }

            fn resume_at(&self) -> Offset {
                match self {
                    $(Self::$variant(c) => c.resume_at(),)*
                }
            }

            fn next_offset(&self) -> Offset {
                match self {
                    $(Self::$variant(c) => c.next_offset(),)*
                }
            }

            fn is_idle(&self) -> bool {
                match self {
                    $(Self::$variant(c) => c.is_idle(),)*
                }
            }
        }
    };
}

consumers!(
    Naive(Naive),
    Offset(OffsetStamped),
    MessageId(MessageIdStore),
    ProducerSeq(ProducerSeqStore),
    Atomic(Atomic),
    TwoPhase(TwoPhase),
);

impl AnyConsumer {
    /// Opens the consumer of `config`'s store into `slot`. Written in place: returning the
    /// consumer by value through `Result` and `Option` copied it field by field at each
    /// layer, in each of the six arms.
    fn open_into<F: NorFlash>(
        slot: &mut Option<Self>,
        flash: &mut F,
        layout: Layout,
        config: &StreamConfig,
    ) -> Result<(), ConsumerError<F::Error, StoreError>> {
        // A record or a configuration with K = 0 is refused before it gets here; 1 keeps
        // the type total.
        let every = CheckpointEvery::new(u64::from(config.checkpoint_every))
            .unwrap_or(CheckpointEvery::MIN);
        let c = ConsumerConfig::every(every);
        *slot = None;
        match config.store {
            StoreId::Naive => *slot = Some(Self::Naive(Consumer::open(flash, layout, Naive, c)?)),
            StoreId::Offset => {
                *slot = Some(Self::Offset(Consumer::open(
                    flash,
                    layout,
                    OffsetStamped,
                    c,
                )?))
            }
            StoreId::MessageId => {
                let w = MessageIdStore::new(Naive, WINDOW)
                    .map_err(|e| ConsumerError::Store(e.into()))?;
                *slot = Some(Self::MessageId(Consumer::open(flash, layout, w, c)?))
            }
            StoreId::ProducerSeq => {
                *slot = Some(Self::ProducerSeq(Consumer::open(
                    flash,
                    layout,
                    ProducerSeq::<PRODUCERS>,
                    c,
                )?))
            }
            StoreId::Atomic => {
                *slot = Some(Self::Atomic(Consumer::open(flash, layout, Atomic, c)?))
            }
            StoreId::TwoPhase => {
                *slot = Some(Self::TwoPhase(Consumer::open(flash, layout, TwoPhase, c)?))
            }
        }
        Ok(())
    }
}

/// What the device sends in answer to one message, and whether it must reset now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Frames to send, in order.
    pub send: heapless::Vec<FromDevice, 3>,
    /// The planned crash: reset right now, sending nothing more.
    pub reset: bool,
}

impl Reply {
    fn one(f: FromDevice) -> Self {
        let mut r = Self::default();
        r.push(f);
        r
    }

    fn push(&mut self, f: FromDevice) {
        // Three frames at most are ever queued (ack, then pull or done).
        let _ = self.send.push(f);
    }
}

/// The device's end of the protocol: its RAM. Flash is passed to each call.
#[derive(Debug)]
pub struct Device {
    record: FeedRecord,
    journal: Journal<FeedRecord>,
    consumer: Option<AnyConsumer>,
    layout: FeedLayout,
    tag: u32,
    budget: usize,
    end: Option<Offset>,
    pulling: Option<Offset>,
    /// The planned crash, while it is still to come: right after applying this offset.
    crash_after: Option<Offset>,
    /// Frames that did not decode, as the firmware counted them.
    pub garbled: u32,
    /// Batches dropped because they did not start where the device reads next.
    pub out_of_order: u32,
}

impl Device {
    /// Boots: recovers the feed's record and, if its flash holds a stream, that
    /// stream's consumer; counts the boot. `tag` is the image's: storage written by
    /// another image is erased. `budget` is the RAM the device has for a consumer.
    /// `new_key` is called only at the first boot of the storage (none is recorded): the
    /// device's id key from then on, kept in its record (`None`: no key could be drawn,
    /// [`FeedError::NoKey`]).
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    pub fn boot<F: NorFlash>(
        flash: &mut F,
        layout: FeedLayout,
        tag: u32,
        budget: usize,
        new_key: impl FnOnce() -> Option<IdKey>,
    ) -> Result<(Self, FromDevice), FeedError<F::Error>> {
        let (mut journal, record) = storage::open(flash, layout, FEED_PAGES, tag ^ 0xFEED_0001)?;
        let mut record = match record {
            Some(r) => r,
            None => FeedRecord {
                boots: 0,
                key: DeviceKey(new_key().ok_or(FeedError::NoKey)?),
                stream: None,
                stream_boots: 0,
            },
        };
        record.count_boot();
        journal.append(flash, &record)?;
        let mut consumer = None;
        if let Some(config) = &record.stream {
            AnyConsumer::open_into(&mut consumer, flash, consumer_layout(&layout, tag), config)?;
        }
        let mut device = Self {
            record,
            journal,
            consumer,
            layout,
            tag,
            budget,
            end: None,
            pulling: None,
            crash_after: None,
            garbled: 0,
            out_of_order: 0,
        };
        device.arm();
        let frame = device.boot_frame();
        Ok((device, frame))
    }

    /// The planned crash, on the first boot of the stream only.
    fn arm(&mut self) {
        let at = self
            .record
            .stream
            .filter(|_| self.record.stream_boots <= 1)
            .and_then(|s| s.crash_after);
        self.crash_after = at;
    }

    /// Whether the planned crash (`crash_after`) is at `step`: the effect of its offset,
    /// the first time (as a crash plan of that one point fires, `idem_sim::crash::Plan`),
    /// and never again until it is armed again. One point, not a plan: the plan's general
    /// matching and its setup cost idem-feed 412 B (BENCHMARKS.md, "Firmware size").
    fn crashes_at(crash_after: &mut Option<Offset>, step: &Step<Message>) -> bool {
        match (*crash_after, step) {
            (Some(o), Step::Effect(e, _)) if e.offset == o => {
                *crash_after = None;
                true
            }
            _ => false,
        }
    }

    /// The boot frame: what the flash holds now.
    pub fn boot_frame(&self) -> FromDevice {
        FromDevice::Boot {
            version: VERSION,
            boots: self.record.boots,
            stream: self.record.stream,
            resume: self.consumer.as_ref().map_or(0, AnyConsumer::resume_at),
            total: self.consumer.as_ref().map_or(0, AnyConsumer::total),
            key: self.record.key,
        }
    }

    /// The counters of what was dropped, with the firmware's stack high-water mark.
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    pub fn stats(&self, stack_bytes: u32) -> FromDevice {
        FromDevice::Stats {
            garbled: self.garbled,
            out_of_order: self.out_of_order,
            stack_bytes,
        }
    }

    /// Boots so far.
    pub fn boots(&self) -> u32 {
        self.record.boots
    }

    /// The total now (0 before any configuration).
    pub fn total(&self) -> i64 {
        self.consumer.as_ref().map_or(0, AnyConsumer::total)
    }

    /// After a silence while a pull is outstanding: the pull again.
    pub fn on_silence(&self) -> Option<FromDevice> {
        self.pulling.map(|from| FromDevice::Pull {
            from,
            max: BATCH as u8,
        })
    }

    /// Handles one message from the host: what to send back, and whether to reset.
    pub fn handle<F: NorFlash>(
        &mut self,
        flash: &mut F,
        msg: &ToDevice,
    ) -> Result<Reply, FeedError<F::Error>> {
        self.handle_paced(flash, msg, &mut || {})
    }

    /// [`Device::handle`], calling `after_effect` after each effect a batch applies (an
    /// emulator's firmware waits there as long as a board's flash would, so a reset can
    /// land between two effects of a batch).
    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    pub fn handle_paced<F: NorFlash>(
        &mut self,
        flash: &mut F,
        msg: &ToDevice,
        after_effect: &mut dyn FnMut(),
    ) -> Result<Reply, FeedError<F::Error>> {
        match msg {
            ToDevice::Hello { version } | ToDevice::Configure { version, .. }
                if *version != VERSION =>
            {
                Ok(Reply::one(FromDevice::Refused(Refusal::Version {
                    device: VERSION,
                    host: *version,
                })))
            }
            ToDevice::Hello { .. } => Ok(Reply::one(self.boot_frame())),
            ToDevice::Configure { config, .. } => self.configure(flash, config),
            ToDevice::Events { events, end } => self.apply(flash, events, *end, after_effect),
            ToDevice::End { events } => {
                self.end = Some(*events);
                Ok(self.after_batch())
            }
        }
    }

    fn configure<F: NorFlash>(
        &mut self,
        flash: &mut F,
        config: &StreamConfig,
    ) -> Result<Reply, FeedError<F::Error>> {
        if config.checkpoint_every == 0 {
            return Ok(Reply::one(FromDevice::Refused(Refusal::Interval)));
        }
        let needs = config.store.ram();
        if needs > self.budget {
            return Ok(Reply::one(FromDevice::Refused(Refusal::TooBig {
                store: config.store,
                needs: needs as u32,
                has: self.budget as u32,
            })));
        }
        let same =
            self.record.stream.is_some_and(|s| s.same_stream(config)) && self.consumer.is_some();
        if !same {
            // Another stream: its partition starts erased.
            self.consumer = None;
            let l = consumer_layout(&self.layout, self.tag);
            for r in [l.positions, l.sink] {
                flash
                    .erase(r.start, r.start + r.pages * self.layout.page)
                    .map_err(JournalError::Flash)?;
            }
            self.record.stream = Some(*config);
            self.record.stream_boots = 1;
            self.journal.append(flash, &self.record)?;
            AnyConsumer::open_into(&mut self.consumer, flash, l, config)?;
            self.end = None;
            self.arm();
        }
        let c = self.consumer.as_ref().expect("opened above");
        let mut reply = Reply::one(FromDevice::Ready {
            stream: config.stream,
            resume: c.resume_at(),
            total: c.total(),
        });
        let pull = self.pull();
        reply.push(pull);
        Ok(reply)
    }

    fn pull(&mut self) -> FromDevice {
        let from = self.consumer.as_ref().map_or(0, AnyConsumer::next_offset);
        self.pulling = Some(from);
        FromDevice::Pull {
            from,
            max: BATCH as u8,
        }
    }

    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn apply<F: NorFlash>(
        &mut self,
        flash: &mut F,
        events: &[WireEvent],
        end: Option<Offset>,
        after_effect: &mut dyn FnMut(),
    ) -> Result<Reply, FeedError<F::Error>> {
        let Some(c) = self.consumer.as_mut() else {
            return Ok(Reply::one(FromDevice::Refused(Refusal::NotConfigured)));
        };
        let next = c.next_offset();
        let consecutive = events
            .iter()
            .enumerate()
            .all(|(i, e)| Some(e.offset) == next.checked_add(i as u64));
        let past_end = end.is_some_and(|n| next + events.len() as u64 > n);
        if events.is_empty() || !consecutive || past_end || !c.is_idle() {
            self.out_of_order += 1;
            return Ok(Reply::default());
        }
        self.pulling = None;
        if end.is_some() {
            self.end = end;
        }
        let log = BatchLog::new(events, self.end);
        let last = events[events.len() - 1].offset;
        loop {
            if c.is_idle() && c.next_offset() > last {
                break;
            }
            let step = c.step(flash, &log)?;
            if Self::crashes_at(&mut self.crash_after, &step) {
                return Ok(Reply {
                    reset: true,
                    ..Reply::default()
                });
            }
            match step {
                Step::Done => break,
                Step::Effect(..) => after_effect(),
                _ => {}
            }
        }
        Ok(self.after_batch())
    }

    /// The ack of what was applied, then the next pull, or done at the end.
    fn after_batch(&mut self) -> Reply {
        let Some(c) = self.consumer.as_ref() else {
            return Reply::one(FromDevice::Refused(Refusal::NotConfigured));
        };
        let mut reply = Reply::one(FromDevice::Ack {
            applied: c.next_offset(),
            durable: c.resume_at(),
            total: c.total(),
        });
        match self.end {
            Some(end) if c.next_offset() >= end && c.is_idle() => {
                self.pulling = None;
                reply.push(FromDevice::Done {
                    boots: self.record.boots,
                    total: c.total(),
                    events: end,
                    durable: c.resume_at(),
                });
            }
            _ => {
                let pull = self.pull();
                reply.push(pull);
            }
        }
        reply
    }
}

/// Where a stream's events come from, for the host's end.
pub trait Source {
    /// The stream's length.
    fn len(&self) -> Offset;
    /// Whether it has no events.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The event at `offset`, its message id computed under `key`, the device's: from
    /// the id's bytes (with [`MessageId::keyed`](idem_core::log::MessageId::keyed)) wherever the id came from outside idem,
    /// such as a log file or a Kafka record key.
    fn event(&self, offset: Offset, key: &IdKey) -> Option<Payment>;
}

/// A [`Log`]'s events as they are, the device's key not used: for logs whose ids are
/// idem's own (under [`IdKey::PUBLIC`]), which no producer chose. A stream of ids from
/// outside implements [`Source`] itself and keys them.
impl<L: Log<Message>> Source for L {
    fn len(&self) -> Offset {
        // The host's logs end where their file or partition does; a live stream without
        // a known end has nothing for the host to send.
        self.end().unwrap_or(0)
    }

    fn event(&self, offset: Offset, _key: &IdKey) -> Option<Payment> {
        self.get(offset)
    }
}

/// Consecutive offsets `from..to` (`to` excluded) that the host delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first.
    pub from: Offset,
    /// One past the last.
    pub to: Offset,
}

/// What the host learned from one message of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// The device (re)booted or answered a hello: it resumes at `resume`.
    Booted {
        /// Boots so far.
        boots: u32,
        /// Where its flash says it resumes (for the configured stream, once ready).
        resume: Offset,
    },
    /// It asked for events; `resend` when it had asked for them before.
    Pulled {
        /// From.
        from: Offset,
        /// Whether these were sent before.
        resend: bool,
    },
    /// A pull, ack or done before the host knows the device consumes its stream (it
    /// connected mid-stream): the host asked who is there instead of answering.
    Unconfirmed,
    /// A report the host passes on as it came: ready, ack or stats.
    Report {
        /// The device's frame.
        said: FromDevice,
        /// The device's durable position, when this ack moved it past every position
        /// acknowledged before: what may be copied elsewhere (a consumer group's
        /// offset), since it never has to move back.
        advanced: Option<Offset>,
    },
    /// The device consumed the stream to its end and acknowledged every offset durable,
    /// and nothing it claimed goes past what this host delivered.
    Done {
        /// Boots so far.
        boots: u32,
        /// The final total.
        total: i64,
        /// The durable position at the end: the stream's length.
        durable: Offset,
        /// `None` when this host delivered every offset of the stream: the total may be
        /// graded. `Some(n)`: this host never delivered offsets `0..n` (`n` excluded);
        /// the device held them when this host first heard it (a restarted host or
        /// bridge), so the total rests on deliveries this host did not see.
        undelivered: Option<Offset>,
        /// As for [`Heard::Report`].
        advanced: Option<Offset>,
    },
}

/// What a device claimed that the host knows to be false.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// It acknowledged applying offsets this host never delivered.
    Applied {
        /// Its acknowledged next offset: every offset below it applied.
        applied: Offset,
        /// The offsets this host delivered since the device last went below them.
        delivered: Option<Span>,
    },
    /// It acknowledged offsets durable that this host never delivered.
    Durable {
        /// Its durable position: every offset below it durable.
        durable: Offset,
        /// The offsets this host delivered since the device last went below them.
        delivered: Option<Span>,
    },
    /// It resumes past what this host delivered.
    Resume {
        /// Where it says it resumes.
        resume: Offset,
        /// The offsets this host delivered since the device last went below them.
        delivered: Option<Span>,
    },
    /// It asks for offsets past a gap it never had delivered.
    Pull {
        /// The first offset it asks for.
        from: Offset,
        /// The offsets this host delivered since the device last went below them.
        delivered: Option<Span>,
    },
    /// A done frame with another length.
    Length {
        /// The length it says.
        claimed: Offset,
        /// The stream's.
        events: Offset,
    },
    /// A done frame before the end: not every offset durable.
    Early {
        /// Its durable position.
        durable: Offset,
        /// The stream's length.
        events: Offset,
    },
    /// While its flash holds this stream it resumes below a position it acknowledged
    /// durable: a lost checkpoint.
    LostCheckpoint {
        /// Where it resumes.
        resume: Offset,
        /// The durable position it acknowledged.
        durable: Offset,
    },
    /// Its durable position moved back with no reset between.
    DurableBack {
        /// The position it says now.
        durable: Offset,
        /// The one it acknowledged before.
        was: Offset,
    },
    /// Another id key, while its flash holds this stream.
    KeyChanged,
}

/// "no offsets" or "only offsets a..b".
struct DeliveredText(Option<Span>);

impl core::fmt::Display for DeliveredText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(Span { from, to }) if to > from => {
                write!(f, "only offsets {from}..{}", to - 1)
            }
            _ => f.write_str("no offsets"),
        }
    }
}

impl core::fmt::Display for Claim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Applied { applied, delivered } => write!(
                f,
                "the board claims it applied every offset below {applied}, but this host delivered {}",
                DeliveredText(delivered)
            ),
            Self::Durable { durable, delivered } => write!(
                f,
                "the board claims every offset below {durable} is durable, but this host delivered {}",
                DeliveredText(delivered)
            ),
            Self::Resume { resume, delivered } => write!(
                f,
                "the board claims it resumes at offset {resume}, but this host delivered {}",
                DeliveredText(delivered)
            ),
            Self::Pull { from, delivered } => write!(
                f,
                "the board asks for offsets from {from}, but this host delivered {}",
                DeliveredText(delivered)
            ),
            Self::Length { claimed, events } => write!(
                f,
                "the board claims it is done with a stream of {claimed} events, but the stream has {events}"
            ),
            Self::Early { durable, events } => write!(
                f,
                "the board claims it is done with only the offsets below {durable} durable, but the stream has {events} events"
            ),
            Self::LostCheckpoint { resume, durable } => write!(
                f,
                "the board resumes at offset {resume} from its flash, which holds this stream, but it had acknowledged every offset below {durable} durable: it lost a checkpoint"
            ),
            Self::DurableBack { durable, was } => write!(
                f,
                "the board claims every offset below {durable} is durable after it acknowledged every offset below {was} durable, with no reset between"
            ),
            Self::KeyChanged => {
                f.write_str("the board announces another id key while its flash holds this stream")
            }
        }
    }
}

/// Why the host stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostError {
    /// The device refused.
    Refused(Refusal),
    /// The device stopped.
    Failed(Failure),
    /// The device wants offsets the stream does not have, or resumes past its end.
    PastEnd {
        /// What it wants.
        from: Offset,
        /// The stream's length.
        events: Offset,
    },
    /// The device's flash holds a different stream and it would not take this one.
    WrongStream {
        /// The stream it says it is consuming.
        stream: u32,
    },
    /// The device claimed what this host knows to be false.
    Claimed(Claim),
}

impl core::fmt::Display for HostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Refused(Refusal::Version { device, host }) => write!(
                f,
                "the device speaks idem's feed protocol version {device} and this host version {host}: flash the firmware that matches this idem"
            ),
            Self::Refused(Refusal::TooBig { store, needs, has }) => write!(
                f,
                "the {} store needs {needs} bytes of RAM on the device, which has {has} for it",
                store.name()
            ),
            Self::Refused(Refusal::NotConfigured) => {
                f.write_str("the device got events before a configuration")
            }
            Self::Refused(Refusal::Interval) => {
                f.write_str("the device refused a checkpoint interval of 0")
            }
            Self::Failed(why) => write!(
                f,
                "the device stopped consuming: {}",
                match why {
                    Failure::Flash => "its flash failed",
                    Failure::Journal => "a journal in its flash is damaged",
                    Failure::Disagree =>
                        "recovery found its journals out of step (damage, not a crash); nothing was picked",
                    Failure::Store =>
                        "its store refused an event (a bounded memory is full, or a total would overflow)",
                    Failure::Key => "its random number generator gave no id key",
                }
            ),
            Self::PastEnd { from, events } => write!(
                f,
                "the device resumes at offset {from} but the stream has {events} events: its flash holds a longer stream under the same id"
            ),
            Self::WrongStream { stream } => {
                write!(
                    f,
                    "the device is consuming stream {stream:#010x}, not this one"
                )
            }
            Self::Claimed(claim) => claim.fmt(f),
        }
    }
}

impl core::error::Error for HostError {}

/// The host's end of the protocol: it answers; it sends events only when pulled; it
/// checks every position the device reports against the offsets it delivered.
#[derive(Debug, Clone)]
pub struct Host {
    config: StreamConfig,
    /// Highest offset sent so far (exclusive): a pull below it is a resend.
    sent_to: Offset,
    /// The highest durable position the device acknowledged (what may be copied).
    durable: Offset,
    /// The durable position the device's flash must keep while it holds this stream:
    /// a resume below it is a lost checkpoint.
    floor: Offset,
    /// The offsets delivered since the device last went below them: every position the
    /// device reports lies at or below its end, and a done is gradable only if it
    /// starts at 0.
    delivered: Option<Span>,
    /// The device's id key, from its boot frame.
    key: Option<IdKey>,
    /// Where the device reads next, as last heard.
    position: Offset,
    /// Boot frames seen (each reset shows one).
    pub boots_seen: u32,
    /// A hello is out: the next boot frame answers it.
    hello_pending: bool,
    /// The boot the host last configured: a boot frame of the same boot repeats it.
    configured_boot: Option<u32>,
    /// The device said it consumes this stream (ready) since its last boot frame.
    confirmed: bool,
}

impl Host {
    /// The host of `config`.
    pub fn new(config: StreamConfig) -> Self {
        Self {
            config,
            sent_to: 0,
            durable: 0,
            floor: 0,
            delivered: None,
            key: None,
            position: 0,
            boots_seen: 0,
            hello_pending: false,
            configured_boot: None,
            confirmed: false,
        }
    }

    /// Who is there? Send it when the device has said nothing since the host connected
    /// (it booted before), and after a long silence (a configuration was lost): the
    /// device answers with its boot frame, which the host answers with the
    /// configuration. It is the only message the host sends unasked; the device is then
    /// idle (it has nothing to do without a configuration or a batch).
    pub fn hello(&mut self) -> ToDevice {
        self.hello_pending = true;
        ToDevice::Hello { version: VERSION }
    }

    /// Where the device reads next, as last heard (a resume, a pull, an ack): where the
    /// stream stands when the link closes.
    pub fn position(&self) -> Offset {
        self.position
    }

    /// The device's id key, once its boot frame was heard.
    pub fn key(&self) -> Option<IdKey> {
        self.key
    }

    fn claimed<T>(claim: Claim) -> Result<T, HostError> {
        Err(HostError::Claimed(claim))
    }

    /// A resume (boot or ready) of this stream: within the stream, within what was
    /// delivered, and not below what was acknowledged durable.
    fn check_resume(&self, resume: Offset, events: Offset) -> Result<(), HostError> {
        if resume > events {
            return Err(HostError::PastEnd {
                from: resume,
                events,
            });
        }
        if self.delivered.is_some_and(|d| resume > d.to) {
            return Self::claimed(Claim::Resume {
                resume,
                delivered: self.delivered,
            });
        }
        if resume < self.floor {
            return Self::claimed(Claim::LostCheckpoint {
                resume,
                durable: self.floor,
            });
        }
        Ok(())
    }

    /// The furthest position the device can honestly report: the end of what was
    /// delivered.
    fn bound(&self) -> Offset {
        self.delivered.map_or(0, |d| d.to)
    }

    /// Records `from..to` as delivered: it extends the span it touches; below it, with a
    /// gap, it starts a new one (the device went back and walks up again from there).
    fn deliver(&mut self, from: Offset, to: Offset) {
        self.delivered = Some(match self.delivered {
            Some(d) if from <= d.to && to >= d.from => Span {
                from: d.from.min(from),
                to: d.to.max(to),
            },
            _ => Span { from, to },
        });
    }

    /// A durable position the device acknowledged: what may be copied, when it passes
    /// every one before.
    fn acknowledged(&mut self, durable: Offset) -> Option<Offset> {
        self.floor = durable;
        (durable > self.durable).then(|| {
            self.durable = durable;
            durable
        })
    }

    /// Handles one message of the device: what it means, and the answer to send.
    pub fn on_message<S: Source + ?Sized>(
        &mut self,
        msg: &FromDevice,
        source: &S,
    ) -> Result<(Heard, Option<ToDevice>), HostError> {
        let events = source.len();
        match *msg {
            FromDevice::Boot {
                version,
                boots,
                resume,
                stream,
                key: DeviceKey(key),
                ..
            } => {
                if version != VERSION {
                    return Err(HostError::Refused(Refusal::Version {
                        device: version,
                        host: VERSION,
                    }));
                }
                let resume = if stream.is_some_and(|s| s.same_stream(&self.config)) {
                    self.check_resume(resume, events)?;
                    if self.key.is_some_and(|k| k != key) {
                        return Self::claimed(Claim::KeyChanged);
                    }
                    self.floor = resume;
                    resume
                } else {
                    // Another stream or none: the device starts this one from an erased
                    // partition, at 0.
                    self.floor = 0;
                    0
                };
                self.key = Some(key);
                self.position = resume;
                // A new boot (a reset), or the answer to a hello, gets the configuration;
                // the same boot announced twice does not get it twice.
                let answer = self.hello_pending || self.configured_boot != Some(boots);
                self.hello_pending = false;
                self.confirmed = false;
                if !answer {
                    return Ok((Heard::Booted { boots, resume }, None));
                }
                self.boots_seen += 1;
                self.configured_boot = Some(boots);
                Ok((
                    Heard::Booted { boots, resume },
                    Some(ToDevice::Configure {
                        version: VERSION,
                        config: self.config,
                    }),
                ))
            }
            FromDevice::Ready { stream, .. } if stream != self.config.stream => {
                Err(HostError::WrongStream { stream })
            }
            FromDevice::Ready { .. }
            | FromDevice::Pull { .. }
            | FromDevice::Ack { .. }
            | FromDevice::Done { .. }
                if self.key.is_none()
                    || (!self.confirmed && !matches!(msg, FromDevice::Ready { .. })) =>
            {
                // Not known to be this stream's device session (no boot frame yet, or no
                // ready since it): who is there? Its boot frame gets the configuration,
                // and its ready the events. (A device waiting for a batch asks again
                // after each silence, so a lost hello is asked again too.)
                Ok((Heard::Unconfirmed, Some(self.hello())))
            }
            FromDevice::Ready { resume, .. } => {
                self.check_resume(resume, events)?;
                self.floor = resume;
                self.position = resume;
                self.confirmed = true;
                Ok((
                    Heard::Report {
                        said: *msg,
                        advanced: None,
                    },
                    None,
                ))
            }
            FromDevice::Pull { from, max } => {
                if from > events {
                    return Err(HostError::PastEnd { from, events });
                }
                if from > self.bound() && self.delivered.is_some() {
                    return Self::claimed(Claim::Pull {
                        from,
                        delivered: self.delivered,
                    });
                }
                let key = self.key.unwrap_or(IdKey::PUBLIC); // set: checked above
                let resend = from < self.sent_to;
                self.position = from;
                if from == events {
                    self.deliver(from, from);
                    return Ok((
                        Heard::Pulled { from, resend },
                        Some(ToDevice::End { events }),
                    ));
                }
                let n = u64::from(max.clamp(1, BATCH as u8));
                let to = (from + n).min(events);
                let mut batch = heapless::Vec::new();
                for o in from..to {
                    if let Some(e) = source.event(o, &key) {
                        // `to - from` is at most BATCH.
                        let _ = batch.push(e);
                    }
                }
                self.sent_to = self.sent_to.max(to);
                self.deliver(from, to);
                let end = (to == events).then_some(events);
                Ok((
                    Heard::Pulled { from, resend },
                    Some(ToDevice::Events { events: batch, end }),
                ))
            }
            FromDevice::Refused(r) => Err(HostError::Refused(r)),
            FromDevice::Failed(f) => Err(HostError::Failed(f)),
            FromDevice::Ack {
                applied, durable, ..
            } => {
                let delivered = self.delivered;
                if applied > self.bound() {
                    return Self::claimed(Claim::Applied { applied, delivered });
                }
                if durable > self.bound() {
                    return Self::claimed(Claim::Durable { durable, delivered });
                }
                if durable < self.floor {
                    return Self::claimed(Claim::DurableBack {
                        durable,
                        was: self.floor,
                    });
                }
                self.position = applied;
                let advanced = self.acknowledged(durable);
                Ok((
                    Heard::Report {
                        said: *msg,
                        advanced,
                    },
                    None,
                ))
            }
            FromDevice::Done {
                boots,
                total,
                events: claimed,
                durable,
            } => {
                let delivered = self.delivered;
                if claimed != events {
                    return Self::claimed(Claim::Length { claimed, events });
                }
                if durable > self.bound() {
                    return Self::claimed(Claim::Durable { durable, delivered });
                }
                if durable < events {
                    return Self::claimed(Claim::Early { durable, events });
                }
                self.position = durable;
                let advanced = self.acknowledged(durable);
                Ok((
                    Heard::Done {
                        boots,
                        total,
                        durable,
                        undelivered: delivered.map(|d| d.from).filter(|&from| from > 0),
                        advanced,
                    },
                    None,
                ))
            }
            FromDevice::Stats { .. } => Ok((
                Heard::Report {
                    said: *msg,
                    advanced: None,
                },
                None,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::{Event, MessageId};
    use idem_sim::flash::MemFlash;

    const LAYOUT: FeedLayout = FeedLayout {
        start: 0,
        page: 1024,
    };

    const KEY: IdKey = IdKey([7; 16]);

    fn key() -> Option<IdKey> {
        Some(KEY)
    }

    fn config(store: StoreId) -> StreamConfig {
        StreamConfig {
            stream: 7,
            store,
            checkpoint_every: 10,
            crash_after: None,
        }
    }

    #[test]
    fn another_version_is_refused_both_ways() {
        let mut flash = MemFlash::<10, 1024>::new();
        let (mut d, _) = Device::boot(&mut flash, LAYOUT, 1, 4096, key).unwrap();
        let r = d
            .handle(&mut flash, &ToDevice::Hello { version: 4 })
            .unwrap();
        let refusal = FromDevice::Refused(Refusal::Version { device: 3, host: 4 });
        assert_eq!(&r.send[..], &[refusal]);
        let mut host = Host::new(config(StoreId::Offset));
        let log = idem_sim::payment::GeneratedLog {
            events: 3,
            amount: 1,
        };
        let boot = FromDevice::Boot {
            version: 4,
            boots: 1,
            stream: None,
            resume: 0,
            total: 0,
            key: DeviceKey(KEY),
        };
        let e = host.on_message(&boot, &log).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the device speaks idem's feed protocol version 4 and this host version 3: flash the firmware that matches this idem"
        );
    }

    #[test]
    fn a_store_too_big_for_the_ram_says_so_with_its_need() {
        let mut flash = MemFlash::<10, 1024>::new();
        let (mut d, _) = Device::boot(&mut flash, LAYOUT, 1, 300, key).unwrap();
        let msg = ToDevice::Configure {
            version: VERSION,
            config: config(StoreId::MessageId),
        };
        let r = d.handle(&mut flash, &msg).unwrap();
        let needs = StoreId::MessageId.ram() as u32;
        assert!(needs > 300);
        assert_eq!(
            &r.send[..],
            &[FromDevice::Refused(Refusal::TooBig {
                store: StoreId::MessageId,
                needs,
                has: 300
            })]
        );
        // A smaller store fits the same budget.
        let msg = ToDevice::Configure {
            version: VERSION,
            config: config(StoreId::Naive),
        };
        let r = d.handle(&mut flash, &msg).unwrap();
        assert!(matches!(r.send[0], FromDevice::Ready { resume: 0, .. }));
    }

    #[test]
    fn a_batch_out_of_order_is_dropped_and_counted() {
        let mut flash = MemFlash::<10, 1024>::new();
        let (mut d, _) = Device::boot(&mut flash, LAYOUT, 1, 4096, key).unwrap();
        let msg = ToDevice::Configure {
            version: VERSION,
            config: config(StoreId::Offset),
        };
        d.handle(&mut flash, &msg).unwrap();
        let event = |offset| Event {
            offset,
            payload: Message {
                id: MessageId(offset),
                producer: 1,
                epoch: 0,
                seq: offset as u32,
                amount: 1,
            },
        };
        let late = ToDevice::Events {
            events: heapless::Vec::from_slice(&[event(3), event(4)]).unwrap(),
            end: None,
        };
        assert_eq!(d.handle(&mut flash, &late).unwrap(), Reply::default());
        let gap = ToDevice::Events {
            events: heapless::Vec::from_slice(&[event(0), event(2)]).unwrap(),
            end: None,
        };
        assert_eq!(d.handle(&mut flash, &gap).unwrap(), Reply::default());
        assert_eq!((d.out_of_order, d.total()), (2, 0));
        let right = ToDevice::Events {
            events: heapless::Vec::from_slice(&[event(0), event(1)]).unwrap(),
            end: Some(2),
        };
        let r = d.handle(&mut flash, &right).unwrap();
        assert_eq!(
            r.send[1],
            FromDevice::Done {
                boots: 1,
                total: 2,
                events: 2,
                durable: 2
            }
        );
    }

    #[test]
    fn a_host_that_connects_mid_stream_asks_before_it_feeds() {
        let mut host = Host::new(config(StoreId::Offset));
        let log = idem_sim::payment::GeneratedLog {
            events: 20,
            amount: 1,
        };
        // A pull from a device this host has not configured: it may consume another stream.
        let pull = FromDevice::Pull { from: 8, max: 8 };
        let (heard, reply) = host.on_message(&pull, &log).unwrap();
        assert_eq!(heard, Heard::Unconfirmed);
        assert_eq!(reply, Some(ToDevice::Hello { version: VERSION }));
        let boot = FromDevice::Boot {
            version: VERSION,
            boots: 3,
            stream: Some(config(StoreId::Offset)),
            resume: 8,
            total: 8,
            key: DeviceKey(KEY),
        };
        let (_, reply) = host.on_message(&boot, &log).unwrap();
        assert!(matches!(reply, Some(ToDevice::Configure { .. })));
        let ready = FromDevice::Ready {
            stream: 7,
            resume: 8,
            total: 8,
        };
        host.on_message(&ready, &log).unwrap();
        let (_, reply) = host.on_message(&pull, &log).unwrap();
        let Some(ToDevice::Events { events, end }) = reply else {
            panic!("no batch: {reply:?}");
        };
        assert_eq!((events[0].offset, events.len(), end), (8, 8, None));
    }

    /// A host of a 30-event stream (stream 7, the offset store), and the log.
    fn host_of(events: u64) -> (Host, idem_sim::payment::GeneratedLog) {
        let log = idem_sim::payment::GeneratedLog { events, amount: 1 };
        (Host::new(config(StoreId::Offset)), log)
    }

    fn boot(boots: u32, holds: bool, resume: Offset) -> FromDevice {
        FromDevice::Boot {
            version: VERSION,
            boots,
            stream: holds.then(|| config(StoreId::Offset)),
            resume,
            total: resume as i64,
            key: DeviceKey(KEY),
        }
    }

    fn ready(resume: Offset) -> FromDevice {
        FromDevice::Ready {
            stream: 7,
            resume,
            total: resume as i64,
        }
    }

    fn pull(from: Offset) -> FromDevice {
        FromDevice::Pull {
            from,
            max: BATCH as u8,
        }
    }

    fn ack(applied: Offset, durable: Offset) -> FromDevice {
        FromDevice::Ack {
            applied,
            durable,
            total: applied as i64,
        }
    }

    fn done(events: Offset, durable: Offset) -> FromDevice {
        FromDevice::Done {
            boots: 1,
            total: events as i64,
            events,
            durable,
        }
    }

    /// Plays `msgs` to `host`; the first error's sentence, or the last thing heard.
    fn play(
        host: &mut Host,
        log: &idem_sim::payment::GeneratedLog,
        msgs: &[FromDevice],
    ) -> Result<Heard, String> {
        let mut last = Heard::Unconfirmed;
        for m in msgs {
            last = host.on_message(m, log).map_err(|e| e.to_string())?.0;
        }
        Ok(last)
    }

    /// A boot frame of a fresh device, its ready, then pulls and acks of the stream from
    /// 0 to `to` in batches (checkpoints every 10).
    fn honest(to: Offset) -> Vec<FromDevice> {
        let mut msgs = vec![boot(1, false, 0), ready(0)];
        let mut from = 0;
        while from < to {
            let next = (from + BATCH as u64).min(to);
            msgs.push(pull(from));
            msgs.push(ack(next, next / 10 * 10));
            from = next;
        }
        msgs
    }

    #[test]
    fn the_durable_position_to_copy_only_moves_forward() {
        // Each ack follows a batch this host delivered (an ack of offsets it never sent
        // is a claim it refuses, below). Durable 0, then 10 and 20; then the device's
        // flash no longer holds this stream (another stream, say) and it starts over at
        // 0: the copy stays at 20 until the device passes it.
        let (mut host, log) = host_of(30);
        let mut msgs = honest(24);
        msgs.extend([boot(2, false, 0), ready(0)]);
        msgs.extend(honest(30).into_iter().skip(2));
        msgs.push(done(30, 30));
        let mut copied = heapless::Vec::<Offset, 8>::new();
        for m in &msgs {
            if let (
                Heard::Report {
                    advanced: Some(o), ..
                }
                | Heard::Done {
                    advanced: Some(o), ..
                },
                _,
            ) = host.on_message(m, &log).unwrap()
            {
                copied.push(o).unwrap();
            }
        }
        assert_eq!(&copied[..], &[10, 20, 30]);
    }

    #[test]
    fn a_done_is_gradable_only_when_this_host_delivered_every_offset() {
        let (mut host, log) = host_of(30);
        let mut msgs = honest(30);
        msgs.push(pull(30));
        msgs.push(done(30, 30));
        assert_eq!(
            play(&mut host, &log, &msgs),
            Ok(Heard::Done {
                boots: 1,
                total: 30,
                durable: 30,
                undelivered: None,
                advanced: None, // the last ack copied it
            })
        );
        // A restarted host: the board resumes at 20 from its flash, so offsets 0..19 were
        // delivered by someone else. Not a lie, and not gradable either.
        let (mut host, log) = host_of(30);
        let msgs = [
            boot(4, true, 20),
            ready(20),
            pull(20),
            ack(28, 20),
            pull(28),
            ack(30, 30),
            done(30, 30),
        ];
        assert!(matches!(
            play(&mut host, &log, &msgs),
            Ok(Heard::Done {
                undelivered: Some(20),
                ..
            })
        ));
        // The same with nothing left to deliver: the board had it all.
        let (mut host, log) = host_of(30);
        let msgs = [
            boot(4, true, 30),
            ready(30),
            pull(30),
            ack(30, 30),
            done(30, 30),
        ];
        assert!(matches!(
            play(&mut host, &log, &msgs),
            Ok(Heard::Done {
                undelivered: Some(30),
                ..
            })
        ));
        // A reset that brings the board back below the first batch this host sent: the
        // board walks up again from there, and the done is gradable once that walk
        // started at 0.
        let (mut host, log) = host_of(30);
        let msgs = [
            boot(1, false, 0),
            ready(0),
            pull(0),
            ack(8, 0),
            pull(8),
            boot(2, true, 0),
            ready(0),
            pull(0),
            ack(8, 0),
            pull(8),
            ack(16, 10),
            pull(16),
            ack(24, 20),
            pull(24),
            ack(30, 30),
            done(30, 30),
        ];
        assert!(matches!(
            play(&mut host, &log, &msgs),
            Ok(Heard::Done {
                undelivered: None,
                ..
            })
        ));
    }

    #[test]
    fn a_board_that_claims_more_or_less_than_it_was_given_is_named() {
        let start = [boot(1, false, 0), ready(0)];
        let cases: [(&[FromDevice], &str); 11] = [
            (
                &[done(30, 30)],
                "the board claims every offset below 30 is durable, but this host delivered no offsets",
            ),
            (
                &[ack(0, 3)],
                "the board claims every offset below 3 is durable, but this host delivered no offsets",
            ),
            (
                &[pull(0), ack(8, u64::MAX)],
                "the board claims every offset below 18446744073709551615 is durable, but this host delivered only offsets 0..7",
            ),
            (
                &[pull(0), ack(9, 0)],
                "the board claims it applied every offset below 9, but this host delivered only offsets 0..7",
            ),
            (
                &[pull(0), ack(8, 0), pull(20)],
                "the board asks for offsets from 20, but this host delivered only offsets 0..7",
            ),
            (
                &[ready(u64::MAX)],
                "the device resumes at offset 18446744073709551615 but the stream has 30 events: its flash holds a longer stream under the same id",
            ),
            (
                &[pull(0), ack(8, 0), boot(2, true, 16)],
                "the board claims it resumes at offset 16, but this host delivered only offsets 0..7",
            ),
            (
                &[
                    pull(0),
                    ack(8, 0),
                    pull(8),
                    ack(16, 10),
                    pull(16),
                    ack(24, 20),
                    pull(24),
                    ack(30, 30),
                    done(29, 30),
                ],
                "the board claims it is done with a stream of 29 events, but the stream has 30",
            ),
            (
                &[pull(0), ack(8, 0), pull(8), ack(16, 10), done(30, 10)],
                "the board claims it is done with only the offsets below 10 durable, but the stream has 30 events",
            ),
            (
                &[pull(0), ack(8, 0), pull(8), ack(16, 10), boot(2, true, 0)],
                "the board resumes at offset 0 from its flash, which holds this stream, but it had acknowledged every offset below 10 durable: it lost a checkpoint",
            ),
            (
                &[
                    pull(0),
                    ack(8, 0),
                    pull(8),
                    ack(16, 10),
                    pull(16),
                    ack(24, 0),
                ],
                "the board claims every offset below 0 is durable after it acknowledged every offset below 10 durable, with no reset between",
            ),
        ];
        for (lies, sentence) in cases {
            let (mut host, log) = host_of(30);
            let msgs: heapless::Vec<FromDevice, 16> = start.iter().chain(lies).copied().collect();
            assert_eq!(play(&mut host, &log, &msgs), Err(sentence.to_string()));
        }
        // Another key while the flash holds the stream.
        let (mut host, log) = host_of(30);
        let mut other = boot(2, true, 0);
        if let FromDevice::Boot { key, .. } = &mut other {
            *key = DeviceKey(IdKey([8; 16]));
        }
        assert_eq!(
            play(&mut host, &log, &[boot(1, true, 0), other]),
            Err("the board announces another id key while its flash holds this stream".into())
        );
    }

    #[test]
    fn the_device_keeps_the_key_of_its_first_boot() {
        let mut flash = MemFlash::<10, 1024>::new();
        let (_, first) = Device::boot(&mut flash, LAYOUT, 1, 4096, key).unwrap();
        let (_, second) = Device::boot(&mut flash, LAYOUT, 1, 4096, || {
            unreachable!("the key is in flash")
        })
        .unwrap();
        let keys = [first, second].map(|f| match f {
            FromDevice::Boot { key, boots, .. } => (boots, key),
            _ => unreachable!(),
        });
        assert_eq!(keys, [(1, DeviceKey(KEY)), (2, DeviceKey(KEY))]);
        // Storage of another image is erased, and a new key drawn; none is refused.
        let (_, third) =
            Device::boot(&mut flash, LAYOUT, 2, 4096, || Some(IdKey([9; 16]))).unwrap();
        assert!(matches!(
            third,
            FromDevice::Boot {
                key: DeviceKey(IdKey([9, ..])),
                boots: 1,
                ..
            }
        ));
        let mut blank = MemFlash::<10, 1024>::new();
        let e = Device::boot(&mut blank, LAYOUT, 1, 4096, || None).unwrap_err();
        assert_eq!(e.failure(), Failure::Key);
    }

    #[test]
    fn events_go_out_keyed_under_the_device_key() {
        struct Keyed;
        impl Source for Keyed {
            fn len(&self) -> Offset {
                1
            }
            fn event(&self, offset: Offset, key: &IdKey) -> Option<Payment> {
                Some(Event {
                    offset,
                    payload: Message {
                        id: MessageId::keyed(key, b"p17"),
                        producer: 1,
                        epoch: 0,
                        seq: 1,
                        amount: 5,
                    },
                })
            }
        }
        let mut host = Host::new(config(StoreId::MessageId));
        for m in [boot(1, false, 0), ready(0)] {
            host.on_message(&m, &Keyed).unwrap();
        }
        let (_, reply) = host.on_message(&pull(0), &Keyed).unwrap();
        let Some(ToDevice::Events { events, .. }) = reply else {
            panic!("no batch: {reply:?}");
        };
        assert_eq!(events[0].payload.id, MessageId::keyed(&KEY, b"p17"));
        assert_ne!(
            events[0].payload.id,
            MessageId::keyed(&IdKey::PUBLIC, b"p17")
        );
    }
}
