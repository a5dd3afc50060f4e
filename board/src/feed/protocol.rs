//! The feed's messages, both ways, and how they go on the wire: the stream's
//! configuration and its stores, the frames to and from the device, their sizes, the
//! protocol's CRC domain and readers, and the device's id key as it is encoded. What
//! either end does with a message is `device`'s and `host`'s.

use core::mem::size_of;

use idem_core::consumer::Consumer;
use idem_core::log::{IdKey, Offset};
use idem_payments::Payment;
use idem_payments::registry::{MessageIdStore, ProducerSeqStore, StoreKind};
use idem_payments::stores::{Atomic, Naive, OffsetStamped, TwoPhase};
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use super::BATCH;

/// The stores a device can run: the registry's board stores
/// ([`StoreId::kind`]), in the order the wire numbers them.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub enum StoreId {
    /// [`StoreKind::Naive`].
    Naive,
    /// [`StoreKind::Offset`].
    Offset,
    /// [`StoreKind::MessageId`], its window [`WINDOW`](super::WINDOW) ids.
    MessageId,
    /// [`StoreKind::ProducerSeq`], for [`PRODUCERS`](super::PRODUCERS) producers.
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
    /// ([`Source::Board`](idem_payments::registry::Source::Board)).
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
    pub(super) fn same_stream(&self, other: &StreamConfig) -> bool {
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
///
/// [`Received`]: idem_core::log::Received
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
pub const TO_DEVICE_ENCODED: usize = crate::wire::encoded_len(TO_DEVICE_MAX);

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
) -> Result<&'a [u8], crate::wire::WireError> {
    crate::wire::encode_in(msg, DOMAIN, scratch, out)
}

/// The device's reader of the host's frames.
pub type DeviceReader = crate::wire::Reader<ToDevice, TO_DEVICE_ENCODED>;

/// The host's reader of the device's frames.
pub type HostReader = crate::wire::Reader<FromDevice, FROM_DEVICE_ENCODED>;

/// The most bytes a [`FromDevice`] body takes.
pub const FROM_DEVICE_MAX: usize = FromDevice::POSTCARD_MAX_SIZE;

/// The most bytes a [`FromDevice`] frame takes on the wire.
pub const FROM_DEVICE_ENCODED: usize = crate::wire::encoded_len(FROM_DEVICE_MAX);

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
