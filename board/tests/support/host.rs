//! The property shared by the `host` fuzz target and `board/tests/host_frames.rs`: the
//! host's end of the feed protocol ([`HostReader`] and [`Host::on_message`]), driven by
//! arbitrary device frames, never panics, and accepts a done frame as gradable only when
//! it delivered every offset of the stream and the device acknowledged them all durable.
//!
//! The input is a script: each byte picks what the fake device does next (a frame of
//! any kind with positions picked near the host's own, raw garbage, a damaged frame, or
//! the honest answer to what the host sent last), so that both lies and honest runs to
//! the end are reached from short inputs.

use idem_board::feed::{
    BATCH, DOMAIN, DeviceKey, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, Failure, FromDevice, Heard,
    Host, HostReader, Refusal, StoreId, StreamConfig, ToDevice, VERSION, encode,
};
use idem_core::log::IdKey;
use idem_payments::GeneratedLog;

/// What one script did, for a test to count.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Done frames the host accepted as gradable.
    pub graded: u32,
    /// Done frames it accepted as unverified (a prefix it did not deliver).
    pub unverified: u32,
    /// Scripts the host stopped with an error (a lie named, a refusal, a failure).
    pub refused: u32,
}

struct Script<'a> {
    data: &'a [u8],
    at: usize,
}

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = self.data.get(self.at).copied();
        self.at += 1;
        b
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.byte().unwrap_or(0))
    }
}

/// The stream: `events` events of +1, stream 7, the offset store.
fn config() -> StreamConfig {
    StreamConfig {
        stream: 7,
        store: StoreId::Offset,
        checkpoint_every: 10,
        crash_after: None,
    }
}

/// Runs the script `data`; panics (a finding) when the property does not hold.
pub fn check_script(data: &[u8]) -> Seen {
    let mut s = Script { data, at: 0 };
    let events = u64::from(s.byte().unwrap_or(0) % 40);
    let log = GeneratedLog { events, amount: 1 };
    let mut host = Host::new(config());
    let mut reader = HostReader::in_domain(DOMAIN);
    let mut seen = Seen::default();
    // Which offsets the host sent in a batch, and its last answer.
    let mut delivered = vec![false; events as usize];
    let mut last: Option<ToDevice> = None;
    let mut copied = 0u64;
    // Positions the script picks from: near what the host did, and the extremes.
    let mut near = [0u64; 4];
    while let Some(op) = s.byte() {
        let pick = |s: &mut Script, near: &[u64; 4]| -> u64 {
            match s.byte().unwrap_or(0) % 8 {
                0..=3 => near[usize::from(s.byte().unwrap_or(0) % 4)],
                4 => events,
                5 => events + 1,
                6 => u64::MAX,
                _ => u64::from(s.byte().unwrap_or(0)),
            }
        };
        let mut frames: Vec<FromDevice> = Vec::new();
        let mut garbage: Vec<u8> = Vec::new();
        let mut flip = None;
        match op % 12 {
            0 => frames.push(FromDevice::Boot {
                version: if s.u32() == 0 { VERSION + 1 } else { VERSION },
                boots: s.u32(),
                stream: match s.byte().unwrap_or(0) % 3 {
                    0 => None,
                    1 => Some(config()),
                    _ => Some(StreamConfig {
                        stream: 8,
                        ..config()
                    }),
                },
                resume: pick(&mut s, &near),
                total: 0,
                key: DeviceKey(IdKey([s.byte().unwrap_or(0) % 2; 16])),
            }),
            1 => frames.push(FromDevice::Ready {
                stream: if s.u32() == 0 { 8 } else { 7 },
                resume: pick(&mut s, &near),
                total: 0,
            }),
            2 => frames.push(FromDevice::Pull {
                from: pick(&mut s, &near),
                max: s.byte().unwrap_or(0),
            }),
            3 => frames.push(FromDevice::Ack {
                applied: pick(&mut s, &near),
                durable: pick(&mut s, &near),
                total: 0,
            }),
            4 => frames.push(FromDevice::Done {
                boots: s.u32(),
                total: 0,
                events: if s.u32().is_multiple_of(4) {
                    pick(&mut s, &near)
                } else {
                    events
                },
                durable: pick(&mut s, &near),
            }),
            5 => frames.push(FromDevice::Stats {
                garbled: s.u32(),
                out_of_order: 0,
                stack_bytes: 0,
            }),
            6 => frames.push(if s.u32().is_multiple_of(2) {
                FromDevice::Refused(Refusal::NotConfigured)
            } else {
                FromDevice::Failed(Failure::Key)
            }),
            7 => garbage.extend((0..s.u32() % 16).map(|_| s.byte().unwrap_or(0))),
            8 => {
                flip = Some(s.u32());
                frames.push(FromDevice::Ack {
                    applied: pick(&mut s, &near),
                    durable: pick(&mut s, &near),
                    total: 0,
                });
            }
            _ => {
                // The honest answer to the host's last message (a device that follows
                // the protocol, checkpointing every 10).
                match &last {
                    // Ready where its last boot frame said it resumes.
                    Some(ToDevice::Configure { .. }) | None => frames.push(FromDevice::Ready {
                        stream: 7,
                        resume: near[3],
                        total: 0,
                    }),
                    // Its boot frame: its last checkpoint.
                    Some(ToDevice::Hello { .. }) => frames.push(FromDevice::Boot {
                        version: VERSION,
                        boots: 1,
                        stream: Some(config()),
                        resume: near[2],
                        total: 0,
                        key: DeviceKey(IdKey([0; 16])),
                    }),
                    Some(ToDevice::Events { events: batch, end }) => {
                        let to = batch.last().map_or(0, |e| e.offset + 1);
                        let durable = if end.is_some() { to } else { to / 10 * 10 };
                        frames.push(FromDevice::Ack {
                            applied: to,
                            durable,
                            total: 0,
                        });
                        frames.push(match end {
                            Some(n) => FromDevice::Done {
                                boots: 1,
                                total: 0,
                                events: *n,
                                durable,
                            },
                            None => FromDevice::Pull {
                                from: to,
                                max: BATCH as u8,
                            },
                        });
                    }
                    Some(ToDevice::End { events: n }) => {
                        frames.push(FromDevice::Ack {
                            applied: *n,
                            durable: *n,
                            total: 0,
                        });
                        frames.push(FromDevice::Done {
                            boots: 1,
                            total: 0,
                            events: *n,
                            durable: *n,
                        });
                    }
                }
                // Pull first when the host just heard a ready.
                if let [FromDevice::Ready { resume, .. }] = frames[..] {
                    frames.push(FromDevice::Pull {
                        from: resume,
                        max: BATCH as u8,
                    });
                }
            }
        }
        let mut bytes = garbage;
        for f in &frames {
            let mut scratch = [0u8; FROM_DEVICE_MAX + 4];
            let mut out = [0u8; FROM_DEVICE_ENCODED];
            bytes.extend_from_slice(encode(f, &mut scratch, &mut out).expect("encodes"));
        }
        if let Some(at) = flip
            && !bytes.is_empty()
        {
            let i = at as usize % bytes.len();
            bytes[i] ^= 1 << (at % 8);
        }
        for b in bytes {
            let Some(Ok(msg)) = reader.push(b) else {
                continue;
            };
            let (heard, reply) = match host.on_message(&msg, &log) {
                Ok(r) => r,
                Err(_) => {
                    // A lie named, a refusal or a failure: the host stops.
                    seen.refused += 1;
                    return seen;
                }
            };
            match heard {
                Heard::Done {
                    durable,
                    undelivered,
                    advanced,
                    ..
                } => {
                    assert_eq!(durable, events, "a done is accepted only at the end");
                    let FromDevice::Done { events: n, .. } = msg else {
                        panic!("a done heard from {msg:?}");
                    };
                    assert_eq!(n, events, "a done is accepted only with the length");
                    let from = match undelivered {
                        None => {
                            seen.graded += 1;
                            0
                        }
                        Some(n) => {
                            assert!(n > 0, "offsets 0..0 is no prefix");
                            seen.unverified += 1;
                            n
                        }
                    };
                    let missing: Vec<u64> =
                        (from..events).filter(|&o| !delivered[o as usize]).collect();
                    assert!(
                        missing.is_empty(),
                        "a done accepted from {from} with offsets {missing:?} never delivered"
                    );
                    if let Some(o) = advanced {
                        assert!(o > copied, "the copy moves forward only");
                    }
                    // The run is over, as `idem device feed`'s is.
                    return seen;
                }
                Heard::Report {
                    advanced: Some(o), ..
                } => {
                    assert!(o > copied, "the copy moves forward only");
                    assert!(o <= events, "a copy within the stream");
                    copied = o;
                }
                _ => {}
            }
            if let Some(r) = &reply {
                match r {
                    ToDevice::Events { events: batch, end } => {
                        assert!(!batch.is_empty() && batch.len() <= BATCH);
                        for (i, e) in batch.iter().enumerate() {
                            assert_eq!(e.offset, batch[0].offset + i as u64, "consecutive");
                            delivered[e.offset as usize] = true;
                        }
                        let to = batch[batch.len() - 1].offset + 1;
                        assert_eq!(*end, (to == events).then_some(events));
                        near = [batch[0].offset, to, to / 10 * 10, near[3]];
                    }
                    ToDevice::End { events: n } => assert_eq!(*n, events),
                    _ => {}
                }
                last = Some(r.clone());
            }
            if let FromDevice::Boot { resume, .. } | FromDevice::Ready { resume, .. } = msg {
                near[3] = resume.min(events);
            }
        }
    }
    seen
}
