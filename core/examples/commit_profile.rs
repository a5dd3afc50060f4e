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
use idem_core::journal::{Journal, Region};
use sequential_storage::cache::Cache;
use sequential_storage::cache::key_pointers::ArrayKeyPointers;
use sequential_storage::cache::page_pointers::ArrayPagePointers;
use sequential_storage::cache::page_states::ArrayPageStates;
use sequential_storage::map::{MapConfig, MapStorage};

#[path = "../benches/common/mod.rs"]
mod common;
use common::{Async, Flash, OffsetTotal, Rec, rec};

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
