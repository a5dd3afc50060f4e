//! The host's drive loop, written once: it steps a consumer on a file image, sleeps
//! the pace after each effect (so a kill can land mid-stream), makes each commit durable
//! (per the image's sync mode) before anything reports it, hands each durable position
//! to the caller, and stops at the end of the log or when the stop rule says so. `idem
//! consume` reports each checkpoint on stderr; `idem kafka consume`, alone or as a
//! group's member, copies it to the group.

use std::time::Duration;

use idem_core::consumer::{Consumer, Step};
use idem_core::log::{Log, Offset};
use idem_payments::{SumSinks, Total};

use crate::failure::consumer_error;
use crate::image::Image;

/// How a host steps a consumer.
pub struct Drive<'a> {
    /// Sleep this long after each effect.
    pub pace: Duration,
    /// Asked before each step: stop there (a signal under `--follow`).
    pub stop: &'a dyn Fn() -> bool,
    /// At most this many steps, then return (a group's member polls in between, so a
    /// rebalance is never kept waiting for long); `None`: to the end.
    pub steps: Option<usize>,
    /// Whether the commit of a position is reported: one that is not is neither synced
    /// nor handed on (a group's member folding its records again up to what the group
    /// holds already).
    pub reports: &'a dyn Fn(Offset) -> bool,
}

/// What [`Drive::run_watched`] shows after each step: the step, the journal records
/// the consumer appended since it was opened, and the image.
pub type Watch<'w, P> = &'w mut dyn FnMut(&Step<P>, u64, &mut Image) -> anyhow::Result<()>;

/// Why [`Drive::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The consumer is at the end of its log.
    Done,
    /// The stop rule said so.
    Stopped,
    /// It took its steps ([`Drive::steps`]) and is not at the end.
    Paused,
}

impl Drive<'_> {
    /// A drive to the end of the log at `pace`, with no stop rule.
    pub fn to_end(pace: Duration) -> Drive<'static> {
        Drive {
            pace,
            stop: &|| false,
            steps: None,
            reports: &|_| true,
        }
    }

    /// Steps `c` over `log` on `image`; after each commit it reports, once that commit
    /// is durable, calls `on_commit(next, total)`.
    pub fn run<K: SumSinks, L: Log<K::Payload>>(
        &self,
        c: &mut Consumer<K>,
        image: &mut Image,
        log: &L,
        on_commit: &mut dyn FnMut(Offset, i64) -> anyhow::Result<()>,
    ) -> anyhow::Result<Ended> {
        self.run_watched(c, image, log, on_commit, &mut |_, _, _| Ok(()))
    }

    /// [`Drive::run`], showing `watch` each step as it returns, with the journal records
    /// the consumer appended since it was opened, before anything else is done with it
    /// (a commit's sync included): `kafka consume --truth` logs each delivered id there
    /// before the step that writes its record.
    pub fn run_watched<K: SumSinks, L: Log<K::Payload>>(
        &self,
        c: &mut Consumer<K>,
        image: &mut Image,
        log: &L,
        on_commit: &mut dyn FnMut(Offset, i64) -> anyhow::Result<()>,
        watch: Watch<'_, K::Payload>,
    ) -> anyhow::Result<Ended> {
        let mut taken = 0;
        loop {
            if (self.stop)() {
                return Ok(Ended::Stopped);
            }
            if self.steps.is_some_and(|n| taken >= n) {
                return Ok(Ended::Paused);
            }
            taken += 1;
            let step = c
                .step(&mut image.flash, log)
                .map_err(|e| consumer_error(image, e))?;
            watch(&step, c.records_written(), image)?;
            match step {
                Step::Done => return Ok(Ended::Done),
                Step::Effect(..) if !self.pace.is_zero() => std::thread::sleep(self.pace),
                Step::Commit { next } if (self.reports)(next) => {
                    // Durable before it is reported (per the image's sync mode).
                    image
                        .flash
                        .sync()
                        .map_err(|e| anyhow::anyhow!("syncing {}: {e:?}", image.path.display()))?;
                    on_commit(next, c.total())?;
                }
                _ => {}
            }
        }
    }
}
