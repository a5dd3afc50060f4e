//! Events per second through the consumer, per store, on the strict in-memory flash,
//! with a checkpoint every 10 events and no crash. Each iteration starts from blank
//! flash and consumes 10,000 generated +1 events; flash records per event are printed
//! once per store (they are counts, not timings).

#![allow(missing_docs)] // criterion_group! generates an undocumented function
use idem_payments::Total;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
use idem_payments::GeneratedLog;
use idem_payments::Sum;
use idem_payments::registry::{MessageIdStore, PRODUCERS, WINDOW};
use idem_payments::stores::{Atomic, Naive, OffsetStamped, ProducerSeq, TwoPhase};
use idem_sim::run::{SIM_LAYOUT, SimFlash};

const EVENTS: u64 = 10_000;

fn consume<S: Sum + Clone>(flash: &mut SimFlash, store: S) -> (i64, u64) {
    let log = GeneratedLog {
        events: EVENTS,
        amount: 1,
    };
    let mut c = Consumer::open(
        flash,
        SIM_LAYOUT,
        store,
        ConsumerConfig::every(CheckpointEvery::new(10).unwrap()),
    )
    .unwrap();
    c.run(flash, &log).unwrap();
    (c.total(), c.records_written())
}

fn bench_store<S: Sum + Clone>(c: &mut Criterion, name: &str, store: S) {
    let (total, records) = consume(&mut SimFlash::new(), store.clone());
    assert_eq!(total, EVENTS as i64);
    println!(
        "{name}: {:.3} flash records per event",
        records as f64 / EVENTS as f64
    );
    let mut g = c.benchmark_group("consumer");
    g.throughput(Throughput::Elements(EVENTS));
    g.bench_function(name, |b| {
        b.iter_batched_ref(
            || Box::new(SimFlash::new()),
            |flash| black_box(consume(flash, store.clone())),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_store(c, "naive", Naive);
    bench_store(c, "offset", OffsetStamped);
    bench_store(
        c,
        &format!("message-id-{WINDOW}"),
        MessageIdStore::default(),
    );
    bench_store(
        c,
        &format!("producer-seq-{PRODUCERS}"),
        ProducerSeq::<PRODUCERS>,
    );
    bench_store(c, "atomic", Atomic);
    bench_store(c, "two-phase", TwoPhase);
}

criterion_group!(consumer, benches);
criterion_main!(consumer);
