//! `kafka consume`: every partition of a topic into a store whose state lives in a flash
//! image, one core consumer per partition; the group's committed offset is a copy of
//! each durable position.

use idem_core::consumer::CheckpointEvery;
use idem_payments::registry::{self, Source};

use super::MAX_PARTITIONS;
use super::client::{consumer, partitions};
use super::partition::{ConsumeOptions, PARTITION_PAGES, SharedOut, layout};
use super::shared::SharedConsume;
use super::streamed::Streamed;
use idem_host::image::{Image, Meta};
use idem_host::kafka::applied::AppliedLog;
use idem_host::kafka::trust::ReadRules;
use idem_lab::error::usage;
use idem_lab::select::dispatch::with_sinks;
use idem_lab::select::{StoreKind, WINDOW};

/// Consumes every partition of the topic into the image; one result per partition.
pub(super) fn consume(o: &ConsumeOptions<'_>) -> anyhow::Result<SharedOut> {
    let store = o.store;
    if !store.runs_on(Source::Kafka) {
        return Err(usage(format!(
            "kafka consume takes the {} store",
            registry::list(StoreKind::on(Source::Kafka), " or ")
        )));
    }
    let every = CheckpointEvery::new(o.checkpoint_every)
        .ok_or_else(|| usage("the checkpoint interval must be at least 1 record"))?;
    let kafka = consumer(o.brokers, o.group)?;
    let n = partitions(&kafka, o.brokers, o.topic)?
        .ok_or_else(|| usage(format!("the broker has no topic {}", o.topic)))?;
    if n > MAX_PARTITIONS {
        return Err(usage(format!(
            "{} has {n} partitions; idem consumes up to {MAX_PARTITIONS}",
            o.topic
        )));
    }
    let meta = Meta {
        scenario: format!("kafka:{}", o.topic),
        store: store.name().into(),
        events: 0,
        checkpoint_every: o.checkpoint_every,
        window: WINDOW,
        pages: PARTITION_PAGES * n as u32,
        mqtt: None,
    };
    let fresh = idem_host::files::regular_or_missing(o.flash, "a flash image")?.is_none();
    let mut image = Image::open_or_create(o.flash, &meta)?;
    if o.truth.is_none() {
        // Only a graded run keeps the log of ids applied: one left beside the image
        // would be out of step with what this run applies.
        AppliedLog::remove(o.flash)?;
    }
    let barriers = (0..n)
        .map(|p| idem_host::image::bytes(layout(&image, p).positions))
        .collect();
    image.flash.set_sync(o.sync, barriers);
    let rules = ReadRules {
        by_id: store == StoreKind::MessageId,
        ..o.rules
    };
    if o.shared {
        let job = SharedConsume::new(o, &mut image, every, rules)?;
        let out = with_sinks(store.into(), WINDOW, job)?;
        return Ok(out);
    }
    if o.follow {
        // Ctrl-C ends a follow between two steps, with the report.
        idem_host::cleanup::defer_signals();
    }
    let job = Streamed {
        o,
        image: &mut image,
        kafka,
        partitions: n,
        every,
        rules,
        fresh,
    };
    with_sinks(store.into(), WINDOW, job)
}
