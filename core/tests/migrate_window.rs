//! A firmware update that changes the state a message-id window wraps, migrated with
//! `store::migrate_window` and swept with a power cut at every unit write and erase of
//! the update's boots: the window's ids cross the update in their order, so a command
//! sent before the update and again after it is skipped.
//!
//! The old firmware doses the millilitres of each new command id (a command of 5 ml or
//! more is rejected), behind a window of 8 ids, and resets; the new one also counts its
//! doses, under a new tag. Every run must end with each id dosed once, each rejected id
//! counted once, and the window holding the last 8 ids in order.

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError};
use idem_core::journal::{Journal, JournalError};
use idem_core::log::{Event, Received};
use idem_core::persist::{AppendedRecord, EachEffect, Layout, sink_tag};
use idem_core::store::{MessageIdWindow, Outcome, Store, migrate_window};
use idem_core::testing::flash::{FlashError, MemFlash, PowerCut};

#[path = "support/doses.rs"]
mod doses;
use doses::{Dose, PumpV1};

type Flash = MemFlash<4, 1024>;
const LAYOUT: Layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
const EVENTS: u64 = 200;
const W: usize = 8;

/// The new firmware's: millilitres and doses.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Pumped {
    ml: u64,
    doses: u32,
}

impl idem_core::MaxSize for Pumped {
    const POSTCARD_MAX_SIZE: usize = u64::POSTCARD_MAX_SIZE + u32::POSTCARD_MAX_SIZE;
}

#[derive(Clone, Debug)]
struct PumpV2;

impl Store for PumpV2 {
    type Payload = Dose;
    type State = Pumped;
    type Error = core::convert::Infallible;
    type Rejections = u32;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x7D05_0200;
    fn check(&self, _: &Pumped, e: &Event<Dose>) -> Result<Outcome, Self::Error> {
        PumpV1.check(&0, e)
    }
    fn apply(&self, s: &mut Pumped, e: &Event<Dose>) {
        s.ml += u64::from(e.payload.ml);
        s.doses += 1;
    }
}

fn to_v2(ml: u64) -> Pumped {
    Pumped { ml, doses: 0 }
}

fn v1() -> MessageIdWindow<PumpV1, W> {
    MessageIdWindow::new(PumpV1, W).unwrap()
}

fn v2() -> MessageIdWindow<PumpV2, W> {
    MessageIdWindow::new(PumpV2, W).unwrap()
}

fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(4).unwrap())
}

/// The old firmware's `steps` steps, then its reset.
fn old_firmware(flash: &mut Flash, events: &[Event<Dose>], steps: usize) {
    let stream = Received::new(events, Some(EVENTS));
    let mut c = Consumer::open(flash, LAYOUT, v1(), config()).unwrap();
    for _ in 0..steps {
        c.step(flash, &stream).unwrap();
    }
}

/// Where the old journal's newest record is: its slot in its page.
fn newest_slot(flash: &mut Flash) -> u32 {
    let tag = sink_tag::<MessageIdWindow<PumpV1, W>>(&LAYOUT);
    let (j, _) =
        Journal::<AppendedRecord<MessageIdWindow<PumpV1, W>>>::open(flash, LAYOUT.sink, tag)
            .unwrap();
    j.newest().unwrap().slot
}

type Error = ConsumerError<FlashError, core::convert::Infallible>;

fn cut(e: &Error) -> bool {
    matches!(
        e,
        ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))
    )
}

/// The end of the new firmware's run: millilitres, rejected commands, the window (oldest
/// first), and boots that migrated and that were cut in the migration.
type End = (u64, u32, Vec<u64>, u32, u32);

/// The new firmware's boots until its run ends: each migrates (nothing once done),
/// opens and runs.
fn new_firmware(flash: &mut Flash, events: &[Event<Dose>]) -> End {
    let stream = Received::new(events, Some(EVENTS));
    let (mut migrated, mut cut_in_migration) = (0, 0);
    for _boot in 0..3 {
        let run = (|| {
            match migrate_window::<PumpV1, PumpV2, W, true, _>(flash, &LAYOUT, to_v2) {
                Ok(done) => migrated += u32::from(done),
                Err(e) => {
                    cut_in_migration += 1;
                    return Err(ConsumerError::Journal(e));
                }
            }
            let mut c = Consumer::open(flash, LAYOUT, v2(), config())?;
            c.run(flash, &stream)?;
            let window = c.state().seen.iter().map(|id| id.0).collect();
            Ok((c.state().state.ml, c.rejected(), window))
        })();
        match run {
            Ok((ml, rejected, window)) => {
                return (ml, rejected, window, migrated, cut_in_migration);
            }
            Err(e) if cut(&e) => flash.power_on(),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("three boots without an end");
}

/// Each new id once: offsets that are not resends, 1 to 4 ml dosed, 5 ml rejected.
fn truth(events: &[Event<Dose>]) -> (u64, u32, Vec<u64>) {
    let mut seen: Vec<u64> = Vec::new();
    let (mut ml, mut rejected) = (0, 0);
    for e in events {
        if seen.contains(&e.payload.id) {
            continue;
        }
        seen.push(e.payload.id);
        if e.payload.ml < 5 {
            ml += u64::from(e.payload.ml);
        } else {
            rejected += 1;
        }
    }
    let window = seen[seen.len() - W..].to_vec();
    (ml, rejected, window)
}

/// The old firmware's steps in the two runs: its newest record in slot 2 of its page
/// (the window on both pages: the migration copies it first), and in slot 8 (the window
/// in one page). Records take their encoded size (some 20 bytes), 50 to the first page.
const STEPS: [usize; 2] = [SPREAD, 175];
/// The old firmware's steps with the window on both pages.
const SPREAD: usize = 157;

#[test]
fn the_window_crosses_the_update_in_order_at_every_cut() {
    let events = doses::commands(EVENTS);
    let (true_ml, true_rejected, true_window) = truth(&events);
    assert_eq!((true_ml, true_rejected), (300, 30));
    let mut figures = Vec::new();
    for steps in STEPS {
        let mut flash = Flash::new();
        old_firmware(&mut flash, &events, steps);
        let slot = newest_slot(&mut flash);
        let old = Consumer::open(&mut flash, LAYOUT, v1(), config()).unwrap();
        let window_before: Vec<u64> = old.state().seen.iter().map(|id| id.0).collect();
        // The new firmware, without the migration, refuses the old records.
        assert!(matches!(
            Consumer::open(&mut flash, LAYOUT, v2(), config()),
            Err(ConsumerError::Journal(JournalError::Foreign { .. }))
        ));
        let before = flash.stats();
        // The migration alone: the window as it was, the position where it was.
        let mut alone = flash.clone();
        assert!(migrate_window::<PumpV1, PumpV2, W, true, _>(&mut alone, &LAYOUT, to_v2).unwrap());
        let c = Consumer::open(&mut alone, LAYOUT, v2(), config()).unwrap();
        let window_after: Vec<u64> = c.state().seen.iter().map(|id| id.0).collect();
        assert_eq!(
            (window_after, c.resume_at(), c.state().state.ml),
            (window_before, old.resume_at(), old.state().state)
        );
        assert!(!migrate_window::<PumpV1, PumpV2, W, true, _>(&mut alone, &LAYOUT, to_v2).unwrap());
        let end = new_firmware(&mut flash, &events);
        assert_eq!(end, (true_ml, true_rejected, true_window.clone(), 1, 0));
        let (mut checked, mut in_migration) = (0u64, 0);
        for cut in flash.stats().cuts_since(before) {
            let mut flash = Flash::new();
            flash.seed_noise(checked);
            flash.schedule_power_cut(cut);
            old_firmware(&mut flash, &events, steps);
            let (ml, rejected, window, migrated, cuts) = new_firmware(&mut flash, &events);
            assert_eq!(
                (ml, rejected, &window),
                (true_ml, true_rejected, &true_window),
                "{steps} steps, {cut:?}"
            );
            assert!(
                migrated + cuts >= 1 && migrated <= 1,
                "{cut:?}: {migrated}, {cuts}"
            );
            in_migration += cuts;
            checked += 1;
        }
        figures.push((slot, checked, in_migration));
    }
    assert_eq!(figures, vec![(2, 726, 90), (8, 652, 50)]);
}

/// A third firmware: millilitres, doses and the last dose.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Pumped3 {
    ml: u64,
    doses: u32,
    last: u32,
}

impl idem_core::MaxSize for Pumped3 {
    const POSTCARD_MAX_SIZE: usize = u64::POSTCARD_MAX_SIZE + 2 * u32::POSTCARD_MAX_SIZE;
}

#[derive(Clone, Debug)]
struct PumpV3;

impl Store for PumpV3 {
    type Payload = Dose;
    type State = Pumped3;
    type Error = core::convert::Infallible;
    type Rejections = u32;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x7D05_0300;
    fn check(&self, _: &Pumped3, e: &Event<Dose>) -> Result<Outcome, Self::Error> {
        PumpV1.check(&0, e)
    }
    fn apply(&self, s: &mut Pumped3, e: &Event<Dose>) {
        s.ml += u64::from(e.payload.ml);
        s.doses += 1;
        s.last = e.payload.ml;
    }
}

/// The third firmware's boot: each step of the chain in order, then its consumer's
/// window, position and millilitres.
fn v3_boot(flash: &mut Flash) -> (Vec<u64>, u64, u64, [bool; 2]) {
    let steps = [
        migrate_window::<PumpV1, PumpV2, W, true, _>(flash, &LAYOUT, to_v2).unwrap(),
        migrate_window::<PumpV2, PumpV3, W, true, _>(flash, &LAYOUT, |s| Pumped3 {
            ml: s.ml,
            doses: s.doses,
            last: 0,
        })
        .unwrap(),
    ];
    let window = MessageIdWindow::<_, W>::new(PumpV3, W).unwrap();
    let c = Consumer::open(flash, LAYOUT, window, config()).unwrap();
    let seen = c.state().seen.iter().map(|id| id.0).collect();
    (seen, c.resume_at(), c.state().state.ml, steps)
}

#[test]
fn the_steps_chain_from_any_version_to_the_newest() {
    let events = doses::commands(EVENTS);
    // A flash of the first firmware, and one the second already migrated and ran on.
    let mut first = Flash::new();
    old_firmware(&mut first, &events, SPREAD);
    let window: Vec<u64> = Consumer::open(&mut first, LAYOUT, v1(), config())
        .unwrap()
        .state()
        .seen
        .iter()
        .map(|id| id.0)
        .collect();
    let mut second = first.clone();
    assert!(migrate_window::<PumpV1, PumpV2, W, true, _>(&mut second, &LAYOUT, to_v2).unwrap());
    let stream = Received::new(&events, Some(EVENTS));
    let mut c = Consumer::open(&mut second, LAYOUT, v2(), config()).unwrap();
    c.run(&mut second, &stream).unwrap();
    let window2: Vec<u64> = c.state().seen.iter().map(|id| id.0).collect();
    let (resume2, ml2) = (c.resume_at(), c.state().state.ml);
    // The third firmware takes either through the steps it needs, and no more.
    assert_eq!(v3_boot(&mut first), (window, 68, 103, [true, true]));
    assert_eq!(v3_boot(&mut second), (window2, resume2, ml2, [false, true]));
    assert_eq!((resume2, ml2, truth(&events).0), (200, 300, 300));
    // Booted again: nothing to migrate.
    assert_eq!(v3_boot(&mut first).3, [false, false]);
}

#[cfg(feature = "async")]
#[test]
fn the_async_steps_migrate_the_same() {
    use embassy_futures::block_on;
    use idem_core::store::migrate_window_async;
    let events = doses::commands(EVENTS);
    let mut flash = Flash::new();
    old_firmware(&mut flash, &events, SPREAD);
    let mut blocking = flash.clone();
    let migrate = |flash: &mut Flash| {
        block_on(migrate_window_async::<PumpV1, PumpV2, W, true, _>(
            flash, &LAYOUT, to_v2,
        ))
        .unwrap()
    };
    assert!(migrate(&mut flash));
    assert!(!migrate(&mut flash));
    assert!(migrate_window::<PumpV1, PumpV2, W, true, _>(&mut blocking, &LAYOUT, to_v2).unwrap());
    assert!(flash.pages() == blocking.pages(), "the same bytes on both");
}

/// On a storage that can reorder writes (a host file image), recovery first voids the
/// records written after the one the position journal names: after a migration it
/// names the migrated records' newest, so none of them is voided.
#[test]
fn a_storage_that_reorders_writes_keeps_the_migrated_window() {
    use idem_core::persist::Sinks;
    let events = doses::commands(EVENTS);
    let mut flash = Flash::new();
    old_firmware(&mut flash, &events, SPREAD);
    assert!(migrate_window::<PumpV1, PumpV2, W, true, _>(&mut flash, &LAYOUT, to_v2).unwrap());
    let voided = <MessageIdWindow<PumpV2, W> as Sinks>::void_in_doubt(&mut flash, &LAYOUT).unwrap();
    let c = Consumer::open(&mut flash, LAYOUT, v2(), config()).unwrap();
    assert_eq!((voided, c.state().seen.len(), c.resume_at()), (0, W, 68));
}

/// Two cuts: one at every unit write and erase of the migration on the window spread
/// over both pages, and a second at each of the first 60 unit writes and 3 erases of the
/// boot after it (most of them in the migration taken up again): every run exact.
#[test]
fn two_cuts_in_the_migrating_boots_still_dose_each_command_once() {
    let events = doses::commands(EVENTS);
    let (true_ml, true_rejected, true_window) = truth(&events);
    let mut reference = Flash::new();
    old_firmware(&mut reference, &events, SPREAD);
    let before = reference.stats();
    migrate_window::<PumpV1, PumpV2, W, true, _>(&mut reference, &LAYOUT, to_v2).unwrap();
    let firsts: Vec<_> = reference.stats().cuts_since(before).collect();
    let seconds: Vec<_> = (1..=60)
        .map(PowerCut::AtWordWrite)
        .chain((1..=3).map(PowerCut::AtErase))
        .collect();
    let mut runs = 0u64;
    for &first in &firsts {
        for &second in &seconds {
            let mut flash = Flash::new();
            flash.seed_noise(runs);
            flash.schedule_power_cut(first);
            old_firmware(&mut flash, &events, SPREAD);
            let cut = migrate_window::<PumpV1, PumpV2, W, true, _>(&mut flash, &LAYOUT, to_v2);
            assert_eq!(cut, Err(JournalError::Flash(FlashError::PowerCut)));
            flash.power_on();
            flash.schedule_power_cut(second);
            let (ml, rejected, window, _, _) = new_firmware(&mut flash, &events);
            assert_eq!(
                (ml, rejected, &window),
                (true_ml, true_rejected, &true_window),
                "{first:?} then {second:?}"
            );
            runs += 1;
        }
    }
    assert_eq!((firsts.len(), runs), (90, 5_670));
}
