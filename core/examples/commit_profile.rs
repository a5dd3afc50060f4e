//! The journal's commit path, for an instruction profile under callgrind (BENCHMARKS.md,
//! "Instructions per commit"): `commit_profile idem|ss N` makes N commits of the
//! yardstick's 8-byte record on 4 pages of 1 KiB, with idem's journal or with
//! sequential-storage's fully cached map.
//!
//! ```sh
//! CARGO_PROFILE_RELEASE_DEBUG=true cargo build --release -p idem-core --example commit_profile
//! valgrind --tool=callgrind --callgrind-out-file=idem.cg target/release/examples/commit_profile idem 100000
//! callgrind_annotate --inclusive=yes idem.cg | head -40
//! ```
#![allow(missing_docs)]

use embassy_futures::block_on;
use idem_core::journal::{Journal, OffsetTotal, Region};
use idem_core::lab::flash::{FlashError, MemFlash};
use sequential_storage::cache::Cache;
use sequential_storage::cache::key_pointers::ArrayKeyPointers;
use sequential_storage::cache::page_pointers::ArrayPagePointers;
use sequential_storage::cache::page_states::ArrayPageStates;
use sequential_storage::map::{MapConfig, MapStorage, SerializationError, Value};

type Flash = MemFlash<4, 1024>;

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

#[inline(never)]
fn idem_commits(flash: &mut Flash, n: u32) {
    let (mut j, _) = Journal::<OffsetTotal>::open(flash, Region { start: 0, pages: 4 }, 1)
        .expect("opens blank flash");
    for i in 0..n {
        j.append(flash, &rec(i)).expect("appends");
    }
}

#[inline(never)]
fn ss_commits(flash: Flash, n: u32) {
    let cache = Cache::new(
        ArrayPageStates::<4>::new(),
        ArrayPagePointers::<4>::new(),
        ArrayKeyPointers::<u8, 1>::new(),
    );
    let mut map =
        MapStorage::<u8, _, _>::new(Async(flash), const { MapConfig::new(0..4096) }, cache);
    let mut buf = [0u8; 64];
    block_on(async {
        for i in 0..n {
            map.store_item(&mut buf, &0u8, &Rec(rec(i)))
                .await
                .expect("stores");
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u32 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    match args.get(1).map(String::as_str) {
        Some("idem") => idem_commits(&mut Flash::new(), n),
        Some("ss") => ss_commits(Flash::new(), n),
        _ => {
            eprintln!("usage: commit_profile idem|ss [N]");
            std::process::exit(2);
        }
    }
}
