//! The feed's timing policy (`idem_board::timing`) on a simulated clock, driving the real
//! [`Device`] and [`Host`]: a lost pull, a lost batch and a silent board each cost the
//! policy's timeout, to the microsecond, and the stream still ends exact. Frames travel
//! instantly here; `feed_link.rs` adds the link's bytes, FIFO and faults.

#[path = "support/board.rs"]
mod board;

use idem_board::feed::{Device, FromDevice, Heard, Host, StoreId, StreamConfig, ToDevice};
use idem_board::timing::{
    DEVICE_SILENCE_US, DeviceTimer, HOST_FIRST_HELLO_US, HOST_HELLO_US, HostTimer,
};
use idem_core::log::IdKey;
use idem_payments::GeneratedLog;

use board::{Flash, LAYOUT};

/// The simulated clock's tick.
const TICK_US: u64 = 1_000;

/// What happened when, in simulated microseconds.
#[derive(Debug, Default)]
struct Timeline {
    /// When the host said hello.
    hellos: Vec<u64>,
    /// When the device asked for a batch (every pull, first or again).
    pulls: Vec<u64>,
    /// When the host sent a batch it had sent before.
    resent_batches: Vec<u64>,
    /// The total at the done frame.
    total: Option<i64>,
}

/// Runs the stream of 20 events of +1 to its done frame on a simulated clock. `lose`
/// says, for each frame in order (the device's, the host's), whether it is lost.
fn run(
    mut lose_from_device: impl FnMut(&FromDevice) -> bool,
    mut lose_to_device: impl FnMut(&ToDevice) -> bool,
) -> Timeline {
    let log = GeneratedLog {
        events: 20,
        amount: 1,
    };
    let config = StreamConfig {
        stream: 0x71,
        store: StoreId::Offset,
        checkpoint_every: 5,
        crash_after: None,
    };
    let mut flash = Flash::filled(0);
    let (mut device, boot) = Device::boot(&mut flash, LAYOUT, 1, 4096, || {
        Some(IdKey(*b"sixteen byte key"))
    })
    .unwrap();
    let mut host = Host::new(config);
    let (mut device_timer, mut host_timer) = (DeviceTimer::new(0), HostTimer::new(0));
    let mut to_host: Vec<FromDevice> = vec![boot];
    let mut to_device: Vec<ToDevice> = Vec::new();
    let mut line = Timeline::default();
    let mut now = 0;
    while line.total.is_none() {
        assert!(
            now < 60_000_000,
            "the stream did not end in a minute: {line:?}"
        );
        for msg in std::mem::take(&mut to_host) {
            if matches!(msg, FromDevice::Pull { .. }) {
                line.pulls.push(now);
            }
            if lose_from_device(&msg) {
                continue;
            }
            host_timer.heard(now);
            let (heard, reply) = host.on_message(&msg, &log).unwrap();
            if let Heard::Done { total, .. } = heard {
                line.total = Some(total);
            }
            if let (Heard::Pulled { resend: true, .. }, Some(ToDevice::Events { .. })) =
                (&heard, &reply)
            {
                line.resent_batches.push(now);
            }
            to_device.extend(reply);
        }
        if host_timer.hello_due(now) {
            line.hellos.push(now);
            to_device.push(host.hello());
        }
        for msg in std::mem::take(&mut to_device) {
            if lose_to_device(&msg) {
                continue;
            }
            device_timer.heard(now);
            let reply = device.handle(&mut flash, &msg).unwrap();
            if !reply.send.is_empty() {
                device_timer.heard(now);
            }
            to_host.extend(reply.send);
        }
        if device_timer.expired(now)
            && let Some(pull) = device.on_silence()
        {
            to_host.push(pull);
        }
        now += TICK_US;
    }
    line
}

#[test]
fn a_board_never_heard_is_asked_who_it_is_after_each_first_silence() {
    // The boot frame went by before the host connected, and the board's first answer
    // is lost too: hello at the first tick past 500 ms, and again at the first tick past
    // 500 ms after that one (the host has heard nothing from the board yet, so it keeps
    // the first silence; the longer one is the next test's).
    let mut boots_lost = 2;
    let line = run(
        |m| {
            let lost = matches!(m, FromDevice::Boot { .. }) && boots_lost > 0;
            boots_lost -= u32::from(lost);
            lost
        },
        |_| false,
    );
    assert_eq!(
        line.hellos,
        [
            HOST_FIRST_HELLO_US + TICK_US,
            2 * (HOST_FIRST_HELLO_US + TICK_US)
        ]
    );
    assert_eq!(line.total, Some(20));
}

#[test]
fn a_board_that_goes_silent_after_it_spoke_is_asked_after_the_longer_silence() {
    // Every frame after the first ready is lost until the host has said hello once.
    let mut readies = 0;
    let asked = std::cell::Cell::new(false);
    let line = run(
        |m| {
            readies += u32::from(matches!(m, FromDevice::Ready { .. }));
            readies >= 1 && !asked.get() && !matches!(m, FromDevice::Ready { .. })
        },
        |m| {
            asked.set(asked.get() || matches!(m, ToDevice::Hello { .. }));
            false
        },
    );
    // The host heard the ready at 1 ms (a frame crosses in one tick); nothing after it
    // until its hello, the first tick past 2 s from then.
    assert_eq!(line.hellos, [TICK_US + HOST_HELLO_US + TICK_US]);
    assert_eq!(line.total, Some(20));
}

#[test]
fn a_lost_pull_is_asked_again_after_the_devices_silence() {
    let mut pulls = 0;
    let line = run(
        |m| {
            pulls += u32::from(matches!(m, FromDevice::Pull { .. }));
            pulls == 2 && matches!(m, FromDevice::Pull { .. })
        },
        |_| false,
    );
    // The second pull is lost: the same pull again exactly one silence later.
    assert_eq!(line.pulls[2] - line.pulls[1], DEVICE_SILENCE_US);
    assert!(
        line.resent_batches.is_empty(),
        "the lost pull's batch was sent once"
    );
    assert!(line.hellos.is_empty());
    assert_eq!(line.total, Some(20));
}

#[test]
fn a_lost_batch_is_sent_again_after_the_devices_silence() {
    let mut batches = 0;
    let line = run(
        |_| false,
        |m| {
            batches += u32::from(matches!(m, ToDevice::Events { .. }));
            batches == 2 && matches!(m, ToDevice::Events { .. })
        },
    );
    // The second batch is lost: the device asks again one silence after its pull, and
    // the host sends the same batch again then.
    assert_eq!(line.pulls[2] - line.pulls[1], DEVICE_SILENCE_US);
    assert_eq!(line.resent_batches, [line.pulls[2]]);
    assert!(line.hellos.is_empty());
    assert_eq!(line.total, Some(20));
}
