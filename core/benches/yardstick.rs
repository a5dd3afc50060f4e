//! idem's journal against `sequential-storage` 8.0.2's map, on the same strict in-memory
//! flash (4 pages of 1 KiB, 4-byte words) with the same record: (offset u32, total i32),
//! 8 bytes of payload. One commit = store the newest record. sequential-storage is
//! async-only; it runs under `embassy_futures::block_on` over an async view of the
//! same flash, with its `Value` written by hand (its `postcard` feature pulls heapless
//! 0.7).
//!
//! Printed once, before the timings: erases and bytes programmed per 100,000 commits,
//! against the physical minimum (commits x record bytes / page bytes).
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use embassy_futures::block_on;
use idem_core::journal::{Journal, Region};
use sequential_storage::cache::key_pointers::ArrayKeyPointers;
use sequential_storage::cache::page_pointers::ArrayPagePointers;
use sequential_storage::cache::page_states::ArrayPageStates;
use sequential_storage::cache::{Cache, CacheImpl};
use sequential_storage::map::{MapConfig, MapStorage};

mod common;
use common::{Async, Flash, OffsetTotal, Rec, rec};
const COMMITS: u32 = 10_000;

fn idem_commits(flash: &mut Flash, n: u32) {
    let (mut j, _) = Journal::<OffsetTotal>::open(flash, Region { start: 0, pages: 4 }, 1).unwrap();
    for i in 0..n {
        j.append(flash, &rec(i)).unwrap();
    }
    assert_eq!(
        Journal::<OffsetTotal>::open(flash, Region { start: 0, pages: 4 }, 1)
            .unwrap()
            .1,
        Some(rec(n - 1))
    );
}

fn ss_commits<C: CacheImpl<u8>>(flash: Flash, cache: C, n: u32) -> Flash {
    let mut map =
        MapStorage::<u8, _, _>::new(Async(flash), const { MapConfig::new(0..4096) }, cache);
    let mut buf = [0u8; 64];
    block_on(async {
        for i in 0..n {
            map.store_item(&mut buf, &0u8, &Rec(rec(i))).await.unwrap();
        }
        assert_eq!(
            map.fetch_item::<Rec>(&mut buf, &0u8).await.unwrap(),
            Some(Rec(rec(n - 1)))
        );
    });
    map.destroy().0.0
}

fn cached() -> impl CacheImpl<u8> {
    Cache::new(
        ArrayPageStates::<4>::new(),
        ArrayPagePointers::<4>::new(),
        ArrayKeyPointers::<u8, 1>::new(),
    )
}

fn wear() {
    const N: u32 = 100_000;
    let mut idem = Flash::new();
    idem_commits(&mut idem, N);
    let ss = ss_commits(Flash::new(), Cache::new_uncached(), N);
    println!(
        "per {N} commits (4 x 1 KiB pages, 8-byte record, minimum = commits x 16 B / 1 KiB = 1562.5 erases):"
    );
    for (name, f) in [("idem journal", &idem), ("sequential-storage map", &ss)] {
        let s = f.stats();
        println!(
            "  {name:<24} {:>6} erases  {:>9} bytes programmed ({:.1} per commit)  erase counts {:?}",
            s.erases,
            s.bytes_written,
            s.bytes_written as f64 / f64::from(N),
            f.page_erases()
        );
    }
}

fn benches(c: &mut Criterion) {
    wear();
    let mut g = c.benchmark_group("commit");
    g.throughput(Throughput::Elements(u64::from(COMMITS)));
    g.bench_function("idem-journal", |b| {
        b.iter_batched_ref(
            || Box::new(Flash::new()),
            |f| idem_commits(black_box(f), COMMITS),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("sequential-storage-uncached", |b| {
        b.iter_batched(
            Flash::new,
            |f| ss_commits(f, Cache::new_uncached(), COMMITS),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("sequential-storage-cached", |b| {
        b.iter_batched(
            Flash::new,
            |f| ss_commits(f, cached(), COMMITS),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(yardstick, benches);
criterion_main!(yardstick);
