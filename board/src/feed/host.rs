//! The host's end of the feed: [`Host`] answers the device, sends events only when
//! pulled, and checks every position the device reports against the offsets it
//! delivered; a [`Claim`] it knows to be false is a [`HostError`]. [`Source`] is where
//! the events come from. No I/O: the caller reads and writes the link.

use idem_core::log::{IdKey, Log, Offset};
use idem_payments::{Message, Payment};

use super::protocol::{DeviceKey, Failure, FromDevice, Refusal, StreamConfig, ToDevice};
use super::{BATCH, VERSION};

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
        let report = |advanced| Heard::Report {
            said: *msg,
            advanced,
        };
        match *msg {
            FromDevice::Boot {
                version,
                boots,
                resume,
                stream,
                key: DeviceKey(key),
                ..
            } => self.on_boot(version, boots, stream, resume, key, events),
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
                self.on_ready(resume, events)?;
                Ok((report(None), None))
            }
            FromDevice::Pull { from, max } => self.on_pull(from, max, events, source),
            FromDevice::Refused(r) => Err(HostError::Refused(r)),
            FromDevice::Failed(f) => Err(HostError::Failed(f)),
            FromDevice::Ack {
                applied, durable, ..
            } => {
                let advanced = self.on_ack(applied, durable)?;
                Ok((report(advanced), None))
            }
            FromDevice::Done {
                boots,
                total,
                events: claimed,
                durable,
            } => self.on_done(boots, total, claimed, durable, events),
            FromDevice::Stats { .. } => Ok((report(None), None)),
        }
    }

    /// A boot frame (at a boot, or answering a hello): the device's `version`, its
    /// `boots`, the `stream` its flash holds, where it resumes and its `key`. A new boot,
    /// or the answer to a hello, gets the configuration.
    fn on_boot(
        &mut self,
        version: u16,
        boots: u32,
        stream: Option<StreamConfig>,
        resume: Offset,
        key: IdKey,
        events: Offset,
    ) -> Result<(Heard, Option<ToDevice>), HostError> {
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

    /// The device consumes this stream from `resume`.
    fn on_ready(&mut self, resume: Offset, events: Offset) -> Result<(), HostError> {
        self.check_resume(resume, events)?;
        self.floor = resume;
        self.position = resume;
        self.confirmed = true;
        Ok(())
    }

    /// A pull of at most `max` events from `from`: the batch, or the stream's end.
    fn on_pull<S: Source + ?Sized>(
        &mut self,
        from: Offset,
        max: u8,
        events: Offset,
        source: &S,
    ) -> Result<(Heard, Option<ToDevice>), HostError> {
        if from > events {
            return Err(HostError::PastEnd { from, events });
        }
        if from > self.bound() && self.delivered.is_some() {
            return Self::claimed(Claim::Pull {
                from,
                delivered: self.delivered,
            });
        }
        let key = self.key.unwrap_or(IdKey::PUBLIC); // set: checked by `on_message`
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

    /// An ack: everything below `applied` applied, durable below `durable`. The durable
    /// position to copy, when it moved past every one before.
    fn on_ack(&mut self, applied: Offset, durable: Offset) -> Result<Option<Offset>, HostError> {
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
        Ok(self.acknowledged(durable))
    }

    /// The done frame: the device `claimed` a stream of that length consumed to its end,
    /// durable at `durable`; the stream has `events`.
    fn on_done(
        &mut self,
        boots: u32,
        total: i64,
        claimed: Offset,
        durable: Offset,
        events: Offset,
    ) -> Result<(Heard, Option<ToDevice>), HostError> {
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::{KEY, config};
    use super::*;
    use crate::feed::StoreId;
    use idem_core::log::{Event, MessageId};

    #[test]
    fn a_host_that_connects_mid_stream_asks_before_it_feeds() {
        let mut host = Host::new(config(StoreId::Offset));
        let log = idem_payments::GeneratedLog {
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
    fn host_of(events: u64) -> (Host, idem_payments::GeneratedLog) {
        let log = idem_payments::GeneratedLog { events, amount: 1 };
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
        log: &idem_payments::GeneratedLog,
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
