//! The image's consumer: a consumer whose flash is an image file, as `idem consume`,
//! `status`, `flash inspect` and `chaos` run it (a device's flash on the host; the board
//! itself is `idem device`'s). The consumer and its rules are the core's; this module
//! only opens the image and picks the scenario and store it was made for
//! (`crate::failure` words the errors).

use idem_payments::Total;
use std::path::Path;
use std::time::Duration;

use idem_core::consumer::Consumer;
use idem_core::journal::JournalError;
use idem_core::log::Offset;
use idem_core::persist::Layout;
use idem_payments::Truth;
use idem_sim::run::SIM_LAYOUT;
use idem_sim::scenario::Scenario;

use crate::drive::Drive;
use crate::image::{Image, Meta};
use idem_lab::error::usage;
use idem_lab::select::{
    self, HostSinks, Job, Loaded, ScenarioArgs, ScenarioKind, StoreKind, WorkloadArgs,
};

/// The journals' places in an image: as on the simulated device, tagged with the run.
pub fn layout(meta: &Meta) -> Layout {
    Layout {
        tag: meta.tag(),
        ..SIM_LAYOUT
    }
}

/// The scenario and store the image at `path` was made for.
pub fn scenario_of(meta: &Meta, path: &Path) -> anyhow::Result<(Loaded, StoreKind)> {
    let name = path.display();
    if let Some(topic) = meta.scenario.strip_prefix("kafka:") {
        return Err(usage(format!(
            "{name} holds `idem kafka consume` state for topic {topic}: rerun that command (with --json) to see it"
        )));
    }
    if let Some(m) = &meta.mqtt {
        return Err(usage(format!(
            "{name} holds `idem mqtt consume` state for the session of client {} on {} at {}: rerun that command (with --json) to see it",
            m.client_id, m.filter, m.broker
        )));
    }
    let kind = ScenarioKind::from_name(&meta.scenario).ok_or_else(|| {
        usage(format!(
            "{name} names an unknown scenario {:?}; it was left untouched",
            meta.scenario
        ))
    })?;
    let store = StoreKind::from_name(&meta.store).ok_or_else(|| {
        usage(format!(
            "{name} names an unknown store {:?}; it was left untouched",
            meta.store
        ))
    })?;
    let args = ScenarioArgs {
        events: kind.takes_events().then_some(meta.events),
        checkpoint_every: Some(meta.checkpoint_every),
        no_crash: true,
        window: meta.window,
        ..ScenarioArgs::default()
    };
    Ok((select::load(Some(kind), &args)?, store))
}

/// The image header for a run of `loaded` with `store`. The window is recorded for the
/// message-id store only (0 for the others, which have none), so a rerun that passes
/// another `--window` to a store without one is not refused.
pub fn meta_for(loaded: &Loaded, store: StoreKind, window: usize) -> Meta {
    Meta {
        scenario: loaded.name().into(),
        store: store.name().into(),
        events: loaded.events(),
        checkpoint_every: loaded.consumer().checkpoint_every.get(),
        window: if store == StoreKind::MessageId {
            window
        } else {
            0
        },
        pages: crate::image::PAGES,
        mqtt: None,
    }
}

/// What `idem consume` would run, or its refusal: the scenario loaded and checked
/// against the store and its window, and the image's metadata for them. Everything
/// consume refuses is refused here, before any file or process: `idem consume` and
/// `idem chaos` (which runs consume) both start from it.
pub fn prepare(
    scenario: ScenarioKind,
    store: StoreKind,
    workload: &WorkloadArgs,
) -> anyhow::Result<(Loaded, Meta)> {
    let loaded = select::load(Some(scenario), &workload.scenario_args())?;
    select::check_pair(Some(scenario), store)?;
    select::check_window(store, workload.window)?;
    let meta = meta_for(&loaded, store, workload.window);
    Ok((loaded, meta))
}

// The image's errors in words, where `cmd::kafka` has always found them.
pub use crate::failure::{consumer_error, journal_error};

/// Where a device stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The next offset to read after a restart.
    pub next_offset: u64,
    /// The store's durable total.
    pub total: i64,
    /// What the total should be.
    pub true_total: i64,
    /// Events in the log.
    pub events: u64,
}

/// Recovers the consumer from `image` and, when `pace` is given, consumes to the end of
/// the log, sleeping `pace` after each effect. Without `pace` it only reads.
pub fn recover(image: &mut Image, pace: Option<Duration>) -> anyhow::Result<Progress> {
    drive(image, pace, None)
}

/// [`recover`], then consume to the end sleeping `pace` after each effect, calling
/// `on_commit(next, total)` after each durable checkpoint.
pub fn consume(
    image: &mut Image,
    pace: Duration,
    on_commit: &mut dyn FnMut(Offset, i64),
) -> anyhow::Result<Progress> {
    drive(image, Some(pace), Some(on_commit))
}

fn drive(
    image: &mut Image,
    pace: Option<Duration>,
    on_commit: Option<&mut dyn FnMut(Offset, i64)>,
) -> anyhow::Result<Progress> {
    struct Run<'a, 'f>(
        &'a mut Image,
        Option<Duration>,
        Option<&'f mut dyn FnMut(Offset, i64)>,
    );
    impl Job for Run<'_, '_> {
        type Out = Progress;
        fn call<L: Truth + Sync, S: HostSinks>(
            self,
            s: &Scenario<L>,
            store: S,
        ) -> anyhow::Result<Progress> {
            let Run(image, pace, mut on_commit) = self;
            let drive = pace.map(Drive::to_end);
            consume_store(image, s, store, drive.as_ref(), &mut |next, total| {
                if let Some(f) = on_commit.as_mut() {
                    f(next, total);
                }
                Ok(())
            })
        }
    }
    let (loaded, store) = scenario_of(&image.meta, &image.path)?;
    let window = image.meta.window;
    select::dispatch(&loaded, store.into(), window, Run(image, pace, on_commit))
}

/// Before a consumer opens `layout` in `image`: voids an appending store's records that a
/// power cut left after a hole among those written since the last sync
/// (`idem_core::persist::Sinks::void_in_doubt`), and makes the zeros durable before anything else is
/// written. Their effects are replayed from the durable position.
pub fn void_in_doubt<K: HostSinks>(image: &mut Image, layout: Layout) -> anyhow::Result<()> {
    let voided =
        K::void_in_doubt(&mut image.flash, &layout).map_err(|e| consumer_error(image, e))?;
    if voided > 0 {
        image
            .flash
            .sync()
            .map_err(|e| journal_error(image, JournalError::Flash(e)))?;
    }
    Ok(())
}

/// The image's consume path for any store, the registry's (which [`consume`] picks by
/// the image's header) or one of the application's own (`idem_payments::registry::Listed`):
/// recovers `store` from `image` and, with a `drive`, steps it over `scenario`'s log,
/// calling `on_commit(next, total)` after each durable checkpoint.
pub fn consume_store<L: Truth, S: HostSinks>(
    image: &mut Image,
    scenario: &Scenario<L>,
    store: S,
    drive: Option<&Drive<'_>>,
    on_commit: &mut dyn FnMut(Offset, i64) -> anyhow::Result<()>,
) -> anyhow::Result<Progress> {
    let layout = layout(&image.meta);
    void_in_doubt::<S>(image, layout)?;
    let mut c = Consumer::open(&mut image.flash, layout, store, scenario.consumer)
        .map_err(|e| consumer_error(image, e))?;
    if let Some(drive) = drive {
        drive.run(&mut c, image, &scenario.log, on_commit)?;
    }
    Ok(Progress {
        next_offset: c.next_offset(),
        total: c.total(),
        true_total: scenario.true_total(),
        events: scenario.log.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_lab::select::ScenarioArgs;

    /// The bit-flip property over the file-backed flash, in-process: a finished ddia
    /// image per store, one bit flipped in every page header and in the journals'
    /// newest records; each copy is refused (and left byte for byte as it was) or
    /// consumed to the same total. (`sim/tests/bit_flip.rs` flips every bit of the
    /// simulated flash for all six stores.)
    #[test]
    fn single_bit_flips_of_a_file_image_are_harmless_or_refused() {
        let dir = std::env::temp_dir().join(format!("idem-flip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for store in [
            StoreKind::Offset,
            StoreKind::MessageId,
            StoreKind::ProducerSeq,
        ] {
            let loaded = select::load(
                Some(ScenarioKind::Ddia),
                &ScenarioArgs {
                    no_crash: true,
                    ..ScenarioArgs::default()
                },
            )
            .unwrap();
            let meta = meta_for(&loaded, store, idem_payments::registry::WINDOW);
            let path = dir.join(format!("{}.bin", store.name()));
            let _ = std::fs::remove_file(&path);
            let mut image = Image::open_or_create(&path, &meta).unwrap();
            let p = recover(&mut image, Some(Duration::ZERO)).unwrap();
            assert_eq!((p.total, p.true_total), (100, 100));
            drop(image);
            let good = std::fs::read(&path).unwrap();
            let flash = crate::image::HEADER as usize;
            let page = crate::image::PAGE;
            // Page headers, and the last 64 programmed bytes of each journal.
            let mut bytes: Vec<usize> = (0..8)
                .flat_map(|p| (0..16).map(move |b| flash + p * page + b))
                .collect();
            for journal in [0..4 * page, 4 * page..8 * page] {
                let last = journal
                    .clone()
                    .rev()
                    .find(|&b| good[flash + b] != 0xFF)
                    .unwrap();
                bytes.extend((last.saturating_sub(63)..=last).map(|b| flash + b));
            }
            let (mut harmless, mut refused) = (0, 0);
            let copy = dir.join("flipped.bin");
            for &at in &bytes {
                for bit in 0..8 {
                    let mut bad = good.clone();
                    bad[at] ^= 1 << bit;
                    std::fs::write(&copy, &bad).unwrap();
                    let outcome = Image::open(&copy, true)
                        .and_then(|mut i| recover(&mut i, Some(Duration::ZERO)));
                    match outcome {
                        Ok(p) => {
                            assert_eq!(p.total, 100, "{}: byte {at} bit {bit}", store.name());
                            harmless += 1;
                        }
                        Err(_) => {
                            assert_eq!(std::fs::read(&copy).unwrap(), bad, "refused, untouched");
                            refused += 1;
                        }
                    }
                }
            }
            println!(
                "file-image bit flips  {:<13} tried {:>5}  harmless {:>5}  refused {:>4}",
                store.name(),
                harmless + refused,
                harmless,
                refused
            );
            assert!(refused > 0 && harmless > 0);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
