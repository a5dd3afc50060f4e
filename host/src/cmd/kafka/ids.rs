//! `kafka consume --truth`: the ids each partition applies, logged beside the image
//! ([`AppliedLog`]) as the drive steps: a delivered event's id before the step that
//! writes the record holding it, a skipped one undone after, and the log synced before
//! each checkpoint's sync. The log's rules are `idem_host::kafka::applied`'s; this module
//! reads each partition's newest store record from the image, which they need.

use idem_core::consumer::Step;
use idem_core::journal::Journal;
use idem_core::persist::{Persistence, sink_tag};
use idem_core::store::Outcome;
use idem_lab::select::{self, HostSinks, StoreJob, WINDOW};
use idem_payments::{Message, Sum};

use super::partition::layout;
use idem_host::image::Image;
use idem_host::kafka::applied::AppliedLog;
use idem_host::kafka::stream::Window;
use idem_lab::select::StoreKind;

/// The sequence number of partition `p`'s newest store record in `image` (0 for none).
pub(super) fn newest_record(image: &mut Image, store: StoreKind, p: i32) -> anyhow::Result<u32> {
    struct Newest<'a>(&'a mut Image, i32);
    impl StoreJob for Newest<'_> {
        type Out = u32;
        fn call<S: Sum + HostSinks>(self, _: S) -> anyhow::Result<u32> {
            let Newest(image, p) = self;
            let layout = layout(image, p);
            type Record<S> = <<S as idem_core::store::Store>::Persist as Persistence<S>>::Record;
            let (j, _) =
                Journal::<Record<S>>::open(&mut image.flash, layout.sink, sink_tag::<S>(&layout))
                    .map_err(|e| idem_host::failure::journal_error(image, e))?;
            Ok(j.newest_seq().unwrap_or(0))
        }
    }
    select::with_store(store, WINDOW, Newest(image, p))
}

/// Opens the log of the ids `image` applied, reconciled with its `partitions`' newest
/// store records; `fresh` when the image was just made.
pub(super) fn open_log(
    image: &mut Image,
    store: StoreKind,
    partitions: i32,
    fresh: bool,
    sync: idem_host::image::SyncMode,
) -> anyhow::Result<AppliedLog> {
    let newest = (0..partitions)
        .map(|p| newest_record(image, store, p))
        .collect::<anyhow::Result<Vec<u32>>>()?;
    let synced = sync != idem_host::image::SyncMode::None;
    let each = sync == idem_host::image::SyncMode::EveryWrite;
    AppliedLog::open(&image.path.clone(), &newest, fresh, (synced, each))
}

/// What the watch of one partition's steps needs besides the log.
pub(super) struct Watched<'a> {
    /// The partition.
    pub(super) p: i32,
    /// Its store, and whether it writes its records at checkpoints only.
    pub(super) store: StoreKind,
    pub(super) batched: bool,
    /// Its window, where each delivered event's id is.
    pub(super) window: &'a Window,
    /// The records its consumer had appended at the last step.
    pub(super) written: &'a mut u64,
    /// Test hook: abort right after this many ids are logged, before the step that
    /// writes the last one's record; the count so far.
    pub(super) abort_after: Option<u64>,
    pub(super) logged: &'a mut u64,
}

impl Watched<'_> {
    /// Logs what `step` did, the consumer having appended `written` records since it
    /// was opened.
    pub(super) fn step(
        &mut self,
        log: &mut AppliedLog,
        step: &Step<Message>,
        written: u64,
        image: &mut Image,
    ) -> anyhow::Result<()> {
        let records = u32::try_from(written - *self.written).unwrap_or(u32::MAX);
        *self.written = written;
        let (p, store) = (self.p, self.store);
        let mut newest = || newest_record(image, store, p);
        match step {
            Step::Deliver(e) => {
                let id = self.window.id_at(e.offset).cloned().ok_or_else(|| {
                    anyhow::anyhow!("partition {p}: no id for offset {}", e.offset)
                })?;
                log.delivered(p, e.offset, id)?;
                *self.logged += 1;
                if self.abort_after == Some(*self.logged) {
                    // As a SIGKILL would: the id logged, its record not yet written.
                    std::process::abort();
                }
            }
            Step::Effect(e, outcome) => {
                if !self.batched {
                    log.recorded(p, records, &mut newest)?;
                }
                if *outcome != Outcome::Applied {
                    log.not_applied(p, e.offset)?;
                }
            }
            Step::Commit { .. } => {
                if self.batched {
                    log.recorded(p, records, &mut newest)?;
                }
                // Durable before the image's sync that makes the records durable.
                log.sync()?;
            }
            _ => {}
        }
        Ok(())
    }
}
