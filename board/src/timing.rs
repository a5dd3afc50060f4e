//! The feed's timing, in one place: every timeout of the link between the host and the
//! board, and the two clocks' rules, on a clock the caller passes in (microseconds
//! since any start: the firmware's timer, the host's `Instant`, the link model's
//! simulated time). No rule here reads a clock of its own, so a test drives the real
//! timeouts on simulated time.
//!
//! The device asks again after [`DEVICE_SILENCE_US`] with nothing heard
//! ([`DeviceTimer`]): a lost pull or a lost batch costs one such wait. The host says
//! hello after [`HOST_FIRST_HELLO_US`] with nothing heard (the board booted before the
//! host connected, so its boot frame went by), and after the longer
//! [`HOST_HELLO_US`] once it has heard the board (a configuration lost in a reset), so
//! that a board busy with a batch is not asked who it is ([`HostTimer`]). After the
//! board's done frame the host waits [`STATS_WAIT_US`] for the stats frame that
//! follows it.

/// The device asks for its batch again after this much silence: 250 ms, some 2,900 byte
/// times at 115200 baud, longer than the flash work of one batch.
pub const DEVICE_SILENCE_US: u64 = 250_000;

/// [`DEVICE_SILENCE_US`] in milliseconds, for a timer that counts them.
pub const DEVICE_SILENCE_MS: u32 = (DEVICE_SILENCE_US / 1_000) as u32;

/// The host says hello after this much silence before it has heard the board: 500 ms.
pub const HOST_FIRST_HELLO_US: u64 = 500_000;

/// The host says hello after this much silence once it has heard the board: 2 s, eight
/// of the device's silences, so a device still asking again is never interrupted.
pub const HOST_HELLO_US: u64 = 2_000_000;

/// Under QEMU (whose flash takes no time) the feed image pauses this long after each
/// effect, about a board's flash time for it, so that a reset the host schedules
/// (`idem device qemu --resets`) can land between two effects of a batch: 5 ms.
pub const QEMU_EFFECT_MS: u32 = 5;

/// [`QEMU_EFFECT_MS`] in microseconds, the host's unit for the reset instants.
pub const QEMU_EFFECT_US: u64 = QEMU_EFFECT_MS as u64 * 1_000;

/// After the board's done frame, the host waits this long for its stats frame: 500 ms.
pub const STATS_WAIT_US: u64 = 500_000;

/// The device's silence: restarted by every byte it hears and every frame it sends;
/// when it runs out, the device asks again ([`crate::feed::Device::on_silence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTimer {
    since: u64,
}

impl DeviceTimer {
    /// A silence that starts at `now`.
    pub const fn new(now: u64) -> Self {
        Self { since: now }
    }

    /// A byte was heard, or a frame sent, at `now`.
    pub fn heard(&mut self, now: u64) {
        self.since = now;
    }

    /// Whether the silence ran out by `now`; if it did, the next one starts at `now`.
    pub fn expired(&mut self, now: u64) -> bool {
        let out = now.saturating_sub(self.since) >= DEVICE_SILENCE_US;
        if out {
            self.since = now;
        }
        out
    }
}

/// The host's silences: when to say hello, and when to stop waiting after the board's
/// done frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTimer {
    since: u64,
    heard_board: bool,
    done_at: Option<u64>,
}

impl HostTimer {
    /// A host that connected at `now` and has heard nothing yet.
    pub const fn new(now: u64) -> Self {
        Self {
            since: now,
            heard_board: false,
            done_at: None,
        }
    }

    /// A frame of the board's was heard at `now`.
    pub fn heard(&mut self, now: u64) {
        self.since = now;
        self.heard_board = true;
    }

    /// The silence after which the host says hello now: [`HOST_FIRST_HELLO_US`] before
    /// it has heard the board, [`HOST_HELLO_US`] after.
    pub const fn silence(&self) -> u64 {
        if self.heard_board {
            HOST_HELLO_US
        } else {
            HOST_FIRST_HELLO_US
        }
    }

    /// Whether to say hello at `now`; if so, the next silence starts at `now`. Never
    /// after the board's done frame.
    pub fn hello_due(&mut self, now: u64) -> bool {
        let due = self.done_at.is_none() && now.saturating_sub(self.since) > self.silence();
        if due {
            self.since = now;
        }
        due
    }

    /// The board's done frame was heard at `now` (the wait for the stats frame counts
    /// from the last one).
    pub fn done(&mut self, now: u64) {
        self.done_at = Some(now);
    }

    /// Whether the host stops at `now`: after the done frame, once the stats frame came
    /// (`stats`) or [`STATS_WAIT_US`] passed without it.
    pub fn finished(&self, now: u64, stats: bool) -> bool {
        self.done_at
            .is_some_and(|at| stats || now.saturating_sub(at) > STATS_WAIT_US)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_asks_again_once_per_silence() {
        let mut t = DeviceTimer::new(0);
        assert!(!t.expired(DEVICE_SILENCE_US - 1));
        t.heard(100);
        assert!(!t.expired(DEVICE_SILENCE_US + 99));
        assert!(t.expired(DEVICE_SILENCE_US + 100));
        // The next silence starts where this one ran out.
        assert!(!t.expired(DEVICE_SILENCE_US + 101));
        assert!(t.expired(2 * DEVICE_SILENCE_US + 100));
    }

    #[test]
    fn the_host_waits_longer_once_it_has_heard_the_board_and_never_after_done() {
        let mut t = HostTimer::new(0);
        assert!(!t.hello_due(HOST_FIRST_HELLO_US));
        assert!(t.hello_due(HOST_FIRST_HELLO_US + 1));
        t.heard(1_000_000);
        assert!(!t.hello_due(1_000_000 + HOST_HELLO_US));
        assert!(t.hello_due(1_000_001 + HOST_HELLO_US));
        t.done(4_000_000);
        t.done(5_000_000);
        assert!(!t.hello_due(50_000_000));
        assert!(!t.finished(5_000_000 + STATS_WAIT_US, false));
        assert!(t.finished(5_000_000 + STATS_WAIT_US + 1, false));
        assert!(t.finished(5_000_001, true));
    }
}
