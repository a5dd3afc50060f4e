//! The feed protocol over a model of a real micro:bit link: 115200 baud, a 6-byte receive
//! FIFO, no flow control, and a CPU that stalls while the NVMC writes (48 µs a word) or
//! erases (22 ms a page): a byte that arrives while the FIFO is full is lost. On top,
//! seeded faults: bytes dropped or bit-flipped on the line, garbage between frames,
//! resets at random instants and power cuts in the middle of a flash word write or
//! erase. Both ends are the core's own ([`Device`], [`Host`]), as the firmware and
//! `idem device feed` run them.

#[path = "support/board.rs"]
mod board;

use std::collections::VecDeque;

use idem_board::feed::{
    BATCH, Device, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, FromDevice, Heard, Host, StoreId,
    StreamConfig, TO_DEVICE_ENCODED, TO_DEVICE_MAX, ToDevice, WireEvent,
};
use idem_board::feed::{DOMAIN, DeviceReader, HostReader, encode};
use idem_board::timing::{DeviceTimer, HostTimer};
use idem_core::log::{IdKey, MessageId};
use idem_payments::Truth;
use idem_payments::{GeneratedLog, Message};
use idem_sim::cost;
use idem_sim::flash::PowerCut;
use idem_sim::rng::SplitMix64;
use idem_sim::scenario::{self, ProducerMode};

use board::{Flash, LAYOUT};

/// One byte at 115200 baud, 8N1: 10 bits.
const BYTE_US: u64 = 87;
/// The nRF51's flash times, the flash cost model's (`idem_sim::cost`).
const WORD_US: u64 = cost::NRF51_WORD_WRITE_US as u64;
const ERASE_US: u64 = cost::NRF51_PAGE_ERASE_US as u64;
const FIFO: usize = 6;
/// The device's id key, as its RNG would draw it at the first boot of its storage.
fn new_key() -> Option<IdKey> {
    Some(IdKey(*b"the board's key!"))
}

/// Faults to inject, per byte or per microsecond of device time.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// Per host byte: dropped on the line.
    drop: f64,
    /// Per host byte: one bit flipped.
    flip: f64,
    /// Per host frame: garbage bytes sent before it.
    garbage: f64,
    /// Per device message handled: a reset before it, or a power cut inside it.
    reset: f64,
    /// The host pushes every batch at once instead of answering pulls (a host that does
    /// not follow the protocol: the control that shows the link model loses bytes).
    push: bool,
}

struct Outcome {
    total: i64,
    dropped_in_fifo: u64,
    boots: u32,
    resends: u64,
    garbled: u32,
    out_of_order: u32,
    host_bytes: u64,
    device_bytes: u64,
    /// Power cuts that fired inside a flash write or erase.
    cuts: u32,
    /// Elapsed link time, in microseconds.
    elapsed_us: u64,
    /// Frames the host's reader skipped (noise on the way back).
    host_skipped: u32,
}

fn encode_to_device(msg: &ToDevice) -> Vec<u8> {
    let mut scratch = [0u8; TO_DEVICE_MAX + 4];
    let mut out = [0u8; TO_DEVICE_ENCODED];
    encode(msg, &mut scratch, &mut out).unwrap().to_vec()
}

fn encode_from_device(msg: &FromDevice) -> Vec<u8> {
    let mut scratch = [0u8; FROM_DEVICE_MAX + 4];
    let mut out = [0u8; FROM_DEVICE_ENCODED];
    encode(msg, &mut scratch, &mut out).unwrap().to_vec()
}

/// Runs one stream through the link model to the device's done frame.
fn feed(
    log: &impl Truth,
    store: StoreId,
    k: u32,
    crash_after: Option<u64>,
    faults: Faults,
    seed: u64,
) -> Outcome {
    let mut rng = SplitMix64::new(seed);
    let mut coin = move |p: f64| p > 0.0 && (rng.next_u64() as f64 / u64::MAX as f64) < p;
    let mut rng2 = SplitMix64::new(seed ^ 0xABCD);
    let config = StreamConfig {
        stream: 0x5EED,
        store,
        checkpoint_every: k,
        crash_after,
    };
    let mut flash = Flash::filled(0);
    flash.seed_noise(seed);
    let mut host = Host::new(config);
    let (mut device, boot) = Device::boot(&mut flash, LAYOUT, 1, 4096, new_key).unwrap();
    let mut reader = DeviceReader::in_domain(DOMAIN);
    let mut host_reader = HostReader::in_domain(DOMAIN);
    // Bytes on their way: (time they reach the other end, byte).
    let mut to_device: VecDeque<(u64, u8)> = VecDeque::new();
    let mut to_host: VecDeque<(u64, u8)> = VecDeque::new();
    let mut fifo: VecDeque<u8> = VecDeque::new();
    let (mut now, mut busy_until) = (0u64, 0u64);
    // Both ends' timeouts are the feed's timing policy, on this model's clock.
    let (mut device_timer, mut host_timer) = (DeviceTimer::new(0), HostTimer::new(0));
    let (mut dropped_in_fifo, mut host_bytes, mut device_bytes) = (0u64, 0u64, 0u64);
    let mut host_free_at = 0u64;
    let mut cuts = 0u32;
    let mut resends = 0u64; // the host's UART sends one byte at a time
    let send_device =
        |msg: &FromDevice, at: u64, to_host: &mut VecDeque<(u64, u8)>, n: &mut u64| -> u64 {
            let bytes = encode_from_device(msg);
            *n += bytes.len() as u64;
            let mut t = at;
            for b in bytes {
                t += BYTE_US;
                to_host.push_back((t, b));
            }
            t
        };
    busy_until = send_device(&boot, busy_until, &mut to_host, &mut device_bytes);
    // The host connected before the device booted: it hears the boot frame. It says
    // hello only after a silence.
    let mut outbox: Vec<Vec<u8>> = Vec::new();
    let mut pushed = false;
    loop {
        assert!(
            now < 600_000_000,
            "the stream did not finish in 10 minutes of link time"
        );
        // The host: reads what arrived, answers after a USB-like latency of 1 to 4 ms.
        while to_host.front().is_some_and(|&(t, _)| t <= now) {
            let (_, b) = to_host.pop_front().unwrap();
            if let Some(Ok(msg)) = host_reader.push(b) {
                host_timer.heard(now);
                let (heard, reply) = host.on_message(&msg, log).unwrap();
                if let Heard::Pulled { resend: true, .. } = heard
                    && matches!(reply, Some(ToDevice::Events { .. }))
                {
                    resends += 1;
                }
                if let Heard::Done {
                    total, undelivered, ..
                } = heard
                {
                    assert_eq!(
                        undelivered, None,
                        "the host delivered every offset and saw it acknowledged durable"
                    );
                    return Outcome {
                        total,
                        dropped_in_fifo,
                        boots: device.boots(),
                        resends,
                        garbled: device.garbled,
                        out_of_order: device.out_of_order,
                        host_bytes,
                        device_bytes,
                        cuts,
                        elapsed_us: now,
                        host_skipped: host_reader.skipped,
                    };
                }
                if faults.push
                    && matches!(
                        heard,
                        Heard::Report {
                            said: FromDevice::Ready { .. },
                            ..
                        }
                    )
                    && !pushed
                {
                    // Every batch at once, unasked.
                    pushed = true;
                    let mut from = 0;
                    while from < log.len() {
                        let pull = FromDevice::Pull {
                            from,
                            max: BATCH as u8,
                        };
                        if let (_, Some(m)) = host.on_message(&pull, log).unwrap() {
                            outbox.push(encode_to_device(&m));
                        }
                        from += BATCH as u64;
                    }
                }
                if let Some(m) = reply {
                    outbox.push(encode_to_device(&m));
                }
            }
        }
        if to_device.is_empty() && host_timer.hello_due(now) {
            outbox.push(encode_to_device(&host.hello()));
        }
        for frame in outbox.drain(..) {
            let mut t = host_free_at.max(now) + 1_000 + rng2.range(0, 3_000);
            let mut bytes = Vec::new();
            if coin(faults.garbage) {
                let n = rng2.range(1, 40);
                bytes.extend((0..n).map(|_| rng2.next_u64() as u8));
            }
            bytes.extend(frame);
            for mut b in bytes {
                t += BYTE_US;
                host_bytes += 1;
                if coin(faults.drop) {
                    continue;
                }
                if coin(faults.flip) {
                    b ^= 1 << (rng2.next_u64() % 8);
                }
                to_device.push_back((t, b));
            }
            host_free_at = t;
        }
        // The line into the device's FIFO: a byte that finds it full is lost.
        while to_device.front().is_some_and(|&(t, _)| t <= now) {
            let (_, b) = to_device.pop_front().unwrap();
            if fifo.len() < FIFO {
                fifo.push_back(b);
            } else {
                dropped_in_fifo += 1;
            }
        }
        // The device: while it writes flash or transmits, the FIFO is all it has.
        if now >= busy_until {
            while let Some(b) = fifo.pop_front() {
                device_timer.heard(now);
                let Some(msg) = reader.push(b) else { continue };
                let msg = match msg {
                    Ok(m) => m,
                    Err(_) => {
                        device.garbled += 1;
                        continue;
                    }
                };
                let before = flash.stats();
                let result = if !coin(faults.reset) {
                    Some(device.handle(&mut flash, &msg))
                } else if rng2.range(0, 2) == 0 {
                    // A power cut inside this message's flash work (if it does that much).
                    let cut = if rng2.range(0, 4) == 0 {
                        PowerCut::AtErase(1)
                    } else {
                        PowerCut::AtWordWrite(rng2.range(1, 6))
                    };
                    flash.schedule_power_cut(cut);
                    Some(device.handle(&mut flash, &msg))
                } else {
                    None // a reset right before the message: it is lost
                };
                flash.cancel_power_cut();
                let after = flash.stats();
                let cost = (after.word_writes - before.word_writes) * WORD_US
                    + (after.erases - before.erases) * ERASE_US;
                let mut t = now + cost;
                match result {
                    Some(Ok(reply)) if !reply.reset => {
                        for f in &reply.send {
                            if coin(faults.garbage) {
                                // Noise on the way back too: the host's reader skips it.
                                for _ in 0..rng2.range(1, 20) {
                                    t += BYTE_US;
                                    to_host.push_back((t, rng2.next_u64() as u8 | 1));
                                }
                                to_host.push_back((t, 0));
                            }
                            t = send_device(f, t, &mut to_host, &mut device_bytes);
                        }
                    }
                    // A planned crash, a power cut (the flash refused) or a reset: the
                    // device reboots from what its flash kept, the FIFO empty.
                    _ => {
                        if !flash.is_powered() {
                            cuts += 1;
                        }
                        flash.power_on();
                        let (rebooted, boot) =
                            Device::boot(&mut flash, LAYOUT, 1, 4096, new_key).unwrap();
                        let (g, o) = (device.garbled, device.out_of_order);
                        device = rebooted;
                        (device.garbled, device.out_of_order) = (g, o);
                        reader.reset();
                        fifo.clear();
                        let booted = flash.stats();
                        t += (booted.word_writes - after.word_writes) * WORD_US
                            + (booted.erases - after.erases) * ERASE_US;
                        t = send_device(&boot, t, &mut to_host, &mut device_bytes);
                    }
                }
                busy_until = t;
                device_timer.heard(t);
                break; // the FIFO kept filling while it worked
            }
            if now >= busy_until
                && device_timer.expired(now)
                && let Some(pull) = device.on_silence()
            {
                reader.reset();
                busy_until = send_device(&pull, now, &mut to_host, &mut device_bytes);
                device_timer.heard(busy_until);
            }
        }
        now += BYTE_US;
    }
}

fn ddia() -> GeneratedLog {
    GeneratedLog {
        events: 100,
        amount: 1,
    }
}

#[test]
fn a_batch_fits_the_device_buffer() {
    let big = WireEvent {
        offset: u64::MAX,
        payload: Message {
            id: MessageId(u64::MAX),
            producer: u32::MAX,
            epoch: u16::MAX,
            seq: u32::MAX,
            amount: i64::MIN,
        },
    };
    let msg = ToDevice::Events {
        events: heapless::Vec::from_slice(&[big; BATCH]).unwrap(),
        end: Some(u64::MAX),
    };
    let bytes = encode_to_device(&msg);
    assert!(
        bytes.len() <= TO_DEVICE_ENCODED,
        "{} > {TO_DEVICE_ENCODED}",
        bytes.len()
    );
    assert_eq!(TO_DEVICE_ENCODED, 365);
}

#[test]
fn a_clean_link_with_a_planned_crash_matches_the_simulator() {
    // naive 110, offset 100, atomic 100: the DDIA figures, on the board's protocol.
    for (store, expected) in [
        (StoreId::Naive, 110),
        (StoreId::Offset, 100),
        (StoreId::Atomic, 100),
    ] {
        let o = feed(&ddia(), store, 10, Some(49), Faults::default(), 1);
        assert_eq!(o.total, expected, "{}", store.name());
        assert_eq!(o.boots, 2, "{}", store.name());
        assert_eq!(
            o.dropped_in_fifo, 0,
            "the device pulls: nothing arrives while it writes"
        );
        assert_eq!((o.garbled, o.out_of_order), (0, 0));
    }
}

#[test]
fn payments_end_as_in_the_lesson() {
    let s = scenario::payments(ProducerMode::NonIdempotent).unwrap();
    for (store, expected) in [
        (StoreId::Naive, 13),
        (StoreId::Offset, 13),
        (StoreId::MessageId, 8),
    ] {
        let o = feed(&s.log, store, 10, None, Faults::default(), 2);
        assert_eq!(o.total, expected, "{}", store.name());
    }
}

#[test]
fn a_host_that_pushes_unasked_loses_bytes_in_the_fifo() {
    // The control: the link model does lose what a board would lose.
    let o = feed(
        &ddia(),
        StoreId::Offset,
        10,
        None,
        Faults {
            push: true,
            ..Faults::default()
        },
        3,
    );
    assert!(o.dropped_in_fifo > 0, "no byte was lost");
    assert!(o.garbled > 0, "the damaged frames were counted");
    // And the protocol still recovers: the device pulls what it lost.
    assert_eq!(o.total, 100);
}

#[test]
fn lossy_links_and_resets_leave_the_idempotent_stores_exact() {
    let faults = Faults {
        drop: 0.002,
        flip: 0.002,
        garbage: 0.1,
        reset: 0.15,
        push: false,
    };
    const STREAMS: u64 = 200;
    let mut lines = Vec::new();
    for store in [
        StoreId::Offset,
        StoreId::MessageId,
        StoreId::ProducerSeq,
        StoreId::Atomic,
        StoreId::TwoPhase,
    ] {
        let (mut boots, mut garbled, mut resends, mut cuts, mut noise) = (0, 0, 0, 0, 0);
        for seed in 0..STREAMS {
            let o = feed(&ddia(), store, 10, None, faults, 100 + seed);
            assert_eq!(o.total, 100, "{} seed {}", store.name(), 100 + seed);
            boots += o.boots;
            garbled += o.garbled;
            resends += o.resends;
            cuts += o.cuts;
            noise += o.host_skipped;
        }
        lines.push(format!("{}: {STREAMS} streams, {boots} boots, {cuts} of them after a power cut inside a flash operation, {garbled} garbled frames dropped by the device and {noise} by the host, {resends} batches sent again", store.name()));
        assert!(noise > 0, "{}: no noise reached the host", store.name());
        assert!(
            boots > 2 * STREAMS as u32,
            "{}: too few resets",
            store.name()
        );
        assert!(cuts > 0, "{}: no power cut fired", store.name());
        assert!(garbled > 0, "{}: no frame was damaged", store.name());
    }
    // The control: the same faults make the naive store count replays.
    let over = (0..STREAMS)
        .filter(|seed| feed(&ddia(), StoreId::Naive, 10, None, faults, 100 + seed).total > 100)
        .count();
    lines.push(format!("naive: over 100 in {over} of {STREAMS} streams"));
    assert!(
        over > STREAMS as usize / 4,
        "naive over 100 in only {over} streams"
    );
    println!("{}", lines.join("\n"));
}

#[test]
fn bytes_and_time_per_event_on_the_wire() {
    // The figures BENCHMARKS.md quotes: what the protocol sends, and how long the modelled
    // link and flash take for the DDIA stream, per store, on a clean link.
    for store in StoreId::ALL {
        let o = feed(&ddia(), store, 10, None, Faults::default(), 4);
        println!(
            "{:<12} host to device {} bytes, device to host {} bytes, {:.1} ms ({:.0} events/s)",
            store.name(),
            o.host_bytes,
            o.device_bytes,
            o.elapsed_us as f64 / 1000.0,
            100.0 * 1e6 / o.elapsed_us as f64
        );
        assert_eq!(o.total, 100);
        assert_eq!((o.resends, o.dropped_in_fifo), (0, 0), "{}", store.name());
        assert_eq!(
            o.host_bytes,
            732,
            "{}: the stream's bytes do not depend on the store",
            store.name()
        );
    }
}
