//! The device's end of the feed: its storage (the feed's record, the consumer's
//! journals), the consumer of whichever store the host configured, and [`Device`], which
//! answers each message of the host and pulls. No I/O: flash is passed to each call.

use embedded_storage::nor_flash::NorFlash;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::journal::{Journal, JournalError};
use idem_core::log::{IdKey, Offset, Received};
use idem_core::persist::Layout;
use idem_payments::registry::{MessageIdStore, ProducerSeqStore};
use idem_payments::stores::{Atomic, Naive, OffsetStamped, ProducerSeq, StoreError, TwoPhase};
use idem_payments::{Message, Total};
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use super::protocol::{
    DeviceKey, Failure, FromDevice, Refusal, StoreId, StreamConfig, ToDevice, WireEvent,
};
use super::{BATCH, FEED_PAGES, PRODUCERS, VERSION, WINDOW};
use crate::storage::{self, BoardLayout, CountsBoots, RECORD_PAGES};

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
    /// the first time (as a crash plan of that one point fires, `idem_payments::crash::Plan`),
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

#[cfg(test)]
mod tests {
    use super::super::tests::{KEY, LAYOUT, config, key};
    use super::*;
    use idem_core::log::{Event, MessageId};
    use idem_sim::flash::MemFlash;

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
}
