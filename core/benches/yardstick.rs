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
use idem_core::journal::{Journal, OffsetTotal, Region};
use idem_core::lab::flash::{FlashError, MemFlash};
use sequential_storage::cache::key_pointers::ArrayKeyPointers;
use sequential_storage::cache::page_pointers::ArrayPagePointers;
use sequential_storage::cache::page_states::ArrayPageStates;
use sequential_storage::cache::{Cache, CacheImpl};
use sequential_storage::map::{MapConfig, MapStorage, SerializationError, Value};

type Flash = MemFlash<4, 1024>;
const COMMITS: u32 = 10_000;

/// The same flash, seen through the async traits sequential-storage takes.
struct Async(Flash);

impl embedded_storage_async::nor_flash::ErrorType for Async {
    type Error = FlashError;
}

impl embedded_storage_async::nor_flash::ReadNorFlash for Async {
    const READ_SIZE: usize = 1;
    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        embedded_storage::nor_flash::ReadNorFlash::read(&mut self.0, offset, bytes)
    }
    fn capacity(&self) -> usize {
        4 * 1024
    }
}

impl embedded_storage_async::nor_flash::NorFlash for Async {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 1024;
    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        embedded_storage::nor_flash::NorFlash::erase(&mut self.0, from, to)
    }
    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        embedded_storage::nor_flash::NorFlash::write(&mut self.0, offset, bytes)
    }
}

/// The record, as a sequential-storage value: the same 8 fixed bytes idem stores.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Rec(OffsetTotal);

impl Value<'_> for Rec {
    fn serialize_into(&self, buffer: &mut [u8]) -> Result<usize, SerializationError> {
        let b = buffer
            .get_mut(..8)
            .ok_or(SerializationError::BufferTooSmall)?;
        b[..4].copy_from_slice(&self.0.offset.to_le_bytes());
        b[4..].copy_from_slice(&self.0.total.to_le_bytes());
        Ok(8)
    }
    fn deserialize_from(buffer: &[u8]) -> Result<(Self, usize), SerializationError> {
        let b: &[u8; 8] = buffer
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or(SerializationError::InvalidFormat)?;
        let offset = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let total = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        Ok((Rec(OffsetTotal { offset, total }), 8))
    }
}

fn rec(i: u32) -> OffsetTotal {
    OffsetTotal {
        offset: i + 1,
        total: i as i32,
    }
}

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
