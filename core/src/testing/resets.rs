//! A crash harness for any store: every reset a run can suffer, judged against a truth
//! the caller supplies.
//!
//! [`every_reset`] runs the consumer once without a crash and counts its steps. Then, for
//! each step `n` of that run, it runs again on blank flash, loses everything in RAM right
//! after step `n` (the consumer and its state are dropped, as at a reset or a power
//! loss between two flash writes), opens the consumer again from the flash alone, runs it
//! to the end, and hands the end state and its count of rejected events to the judge.
//! A write cut short inside the flash is [`super::flash::MemFlash`]'s power cuts; this
//! harness covers the places between the consumer's steps, where a firmware resets. It
//! sees no hardware: for an action that moves hardware, sweep the program with
//! [`super::cuts::sweep`] and mark each action with [`super::cuts::act`].

use embedded_storage::nor_flash::NorFlash;

use crate::consumer::{Consumer, ConsumerConfig, ErrorOf, Step};
use crate::log::Log;
use crate::persist::Layout;
use crate::persist::blocking::Drive;

/// What a sweep of every reset found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resets {
    /// Steps of the run without a crash: one reset was tried after each.
    pub steps: u64,
    /// Runs whose end state the judge accepted.
    pub exact: u64,
    /// The first step after which a reset ended in a state the judge refused.
    pub first_wrong: Option<u64>,
}

/// Runs `sinks` over `log` once for each step of a clean run, with a reset right after
/// that step, each on the flash `blank()` makes, and judges each end state (and count of
/// rejected events) with `judge`. An error of the consumer or the flash stops the sweep.
pub fn every_reset<K, F, L>(
    sinks: K,
    layout: Layout,
    config: ConsumerConfig,
    log: &L,
    mut blank: impl FnMut() -> F,
    mut judge: impl FnMut(&K::State, u32) -> bool,
) -> Result<Resets, ErrorOf<F, K>>
where
    K: Drive,
    F: NorFlash,
    L: Log<K::Payload> + ?Sized,
{
    let steps = {
        let mut flash = blank();
        let mut c = Consumer::open(&mut flash, layout, sinks.clone(), config)?;
        let mut n = 0;
        while !matches!(c.step(&mut flash, log)?, Step::Done) {
            n += 1;
        }
        n
    };
    let mut found = Resets {
        steps,
        exact: 0,
        first_wrong: None,
    };
    for reset_after in 1..=steps {
        let mut flash = blank();
        let mut c = Consumer::open(&mut flash, layout, sinks.clone(), config)?;
        for _ in 0..reset_after {
            c.step(&mut flash, log)?;
        }
        drop(c); // the reset: RAM is gone, the flash stays
        let mut c = Consumer::open(&mut flash, layout, sinks.clone(), config)?;
        c.run(&mut flash, log)?;
        if judge(c.state(), c.rejected()) {
            found.exact += 1;
        } else {
            found.first_wrong.get_or_insert(reset_after);
        }
    }
    Ok(found)
}
