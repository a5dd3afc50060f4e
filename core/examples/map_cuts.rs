//! The power-cut checker (`idem_core::testing::cuts`) on another flash user:
//! sequential-storage 8.0.2's map, which knows nothing of idem. One key holds a counter
//! stored 300 times on 4 pages of 1 KiB (4-byte words); every boot fetches it and must find
//! the last count the map acknowledged, or the one being stored. Run with
//!
//! ```text
//! cargo run -p idem-core --example map_cuts --features testing,async
//! ```
//!
//! It prints what it finds and asserts nothing: what it finds is sequential-storage's,
//! and an upstream fix changes it. The blocking sweep drives the map through
//! `embassy_futures::block_on`, the async one awaits it; both find the same.

use std::collections::BTreeMap;

use embassy_futures::block_on;
use idem_core::testing::cuts::{Found, Model, Plan, Seen, Trial, sweep, sweep_async};
use idem_core::testing::flash::{FlashError, MemFlash};
use sequential_storage::cache::Cache;
use sequential_storage::map::{MapConfig, MapStorage};

type Flash = MemFlash<4, 1024>;
type MapError = sequential_storage::Error<FlashError>;
const COUNTS: u64 = 300;
const KEY: u8 = 0;

/// What the map acknowledged, and the count being stored.
#[derive(Default)]
struct Acked {
    count: u64,
    storing: Option<u64>,
}

async fn fetch(flash: &mut Flash) -> Result<u64, MapError> {
    let mut map = MapStorage::<u8, _, _>::new(
        flash,
        const { MapConfig::new(0..4096) },
        Cache::new_uncached(),
    );
    let mut buf = [0u8; 32];
    Ok(map.fetch_item::<u64>(&mut buf, &KEY).await?.unwrap_or(0))
}

async fn store(
    count: &mut u64,
    flash: &mut Flash,
    acked: &mut Acked,
) -> Result<Option<u64>, MapError> {
    if *count == COUNTS {
        return Ok(None);
    }
    let next = *count + 1;
    acked.storing = Some(next);
    let mut map = MapStorage::<u8, _, _>::new(
        flash,
        const { MapConfig::new(0..4096) },
        Cache::new_uncached(),
    );
    let mut buf = [0u8; 32];
    map.store_item(&mut buf, &KEY, &next).await?;
    (*count, acked.count, acked.storing) = (next, next, None);
    Ok(Some(next))
}

/// Each kind of wrong seen (its words with the numbers left out): how many, and the first
/// trials of it.
type Kinds = BTreeMap<String, (u64, Vec<String>)>;

/// The judge: names what is wrong, and files it under its kind in `kinds`.
fn judge<'k>(
    kinds: &'k mut Kinds,
) -> impl FnMut(&Trial, &mut Acked, Seen<'_, u64, u64, MapError>) -> Result<(), String> + 'k {
    move |trial, acked, seen| {
        let wrong = match seen {
            Seen::Booted(found) if *found != acked.count && Some(*found) != acked.storing => {
                format!("a boot fetched {found}, acknowledged {}", acked.count)
            }
            Seen::Failed(e) => format!("the map failed after a reboot: {e:?}"),
            Seen::Stuck => "the run did not end".to_string(),
            Seen::Ended if acked.count != COUNTS => format!("ended at {}", acked.count),
            // What a boot fetched is durable: the next cut must not lose it.
            Seen::Booted(found) => {
                (acked.count, acked.storing) = (*found, None);
                return Ok(());
            }
            _ => return Ok(()),
        };
        let mut kind = match trial.cuts[0] {
            Some(cut) => format!("{:?}: ", cut.model),
            None => "the reference: ".to_string(),
        };
        for c in wrong.chars() {
            if !c.is_ascii_digit() {
                kind.push(c);
            } else if !kind.ends_with('n') {
                kind.push('n');
            }
        }
        let (n, first) = kinds.entry(kind).or_default();
        *n += 1;
        if first.len() < 3 {
            first.push(format!("{trial}: {wrong}"));
        }
        Err(format!("{trial}: {wrong}"))
    }
}

fn print(name: &str, found: &Found<String>, kinds: &Kinds) {
    let r = found.reference;
    println!(
        "{name}: reference run {} stores, {} unit writes, {} erases; {} trials, {} wrong",
        r.steps,
        r.unit_writes,
        r.erases,
        found.trials(),
        found.wrong()
    );
    for (model, tally) in Model::ALL.iter().zip(&found.models) {
        println!(
            "  {model:?}: {} trials, {} wrong, {} cuts never fell",
            tally.trials, tally.wrong, tally.missed
        );
        if let Some(w) = &tally.first_wrong {
            println!("    first: {}", w.verdict);
        }
    }
    for (kind, (n, first)) in kinds {
        println!("  {n:>5} x {kind}");
        for trial in first {
            println!("          {trial}");
        }
    }
}

fn main() {
    let plan = Plan::new().double_cuts(2);
    let fresh = || (Flash::new(), Acked::default());
    let mut kinds = BTreeMap::new();
    let found = sweep(
        &plan,
        fresh,
        |flash, _| block_on(fetch(flash)),
        |count, flash, acked| block_on(store(count, flash, acked)),
        judge(&mut kinds),
    );
    print("blocking (block_on)", &found, &kinds);
    let mut kinds_async = BTreeMap::new();
    let found_async = block_on(sweep_async(
        &plan,
        fresh,
        async |flash: &mut Flash, _: &mut Acked| fetch(flash).await,
        async |count: &mut u64, flash: &mut Flash, acked: &mut Acked| {
            store(count, flash, acked).await
        },
        judge(&mut kinds_async),
    ));
    print("async", &found_async, &kinds_async);
    println!(
        "the two sweeps found {}",
        if found == found_async {
            "the same"
        } else {
            "different things"
        }
    );
}
