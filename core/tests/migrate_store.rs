//! A firmware update that changes a store's state, migrated with `persist::migrate_each`
//! and swept with a power cut at every unit write and erase of the update's first boot
//! and of the rest of its run.
//!
//! The old firmware sums in-range commands (an `OffsetStamp` over a sum) and resets
//! after 41 steps; the new one also keeps the last command it applied, under a new tag.
//! Every run must end with each command applied once: the sum of the in-range ones, the
//! out-of-range ones rejected once each, over the old firmware's part and the new one's.

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError};
use idem_core::journal::JournalError;
use idem_core::log::{Event, Received};
use idem_core::persist::{EachEffect, Layout, migrate_each};
use idem_core::store::{OffsetStamp, Outcome, Stamped, Store};
use idem_core::testing::flash::{FlashError, MemFlash};

type Flash = MemFlash<4, 1024>;
const LAYOUT: Layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
const EVENTS: u64 = 60;
/// The old firmware's steps before its reset: it has committed offset 16 as the next
/// to read, and applied offsets 16 and 17 after it (a replay its stamp must skip).
const STEPS: usize = 41;
/// Command `o`: `o + 1`, out of range every seventh offset.
fn command(o: u64) -> i64 {
    if o % 7 == 6 { 1_000 } else { o as i64 + 1 }
}

/// The old firmware's store: the sum of the commands in range.
#[derive(Clone, Debug)]
struct SumV1;

impl Store for SumV1 {
    type Payload = i64;
    type State = i64;
    type Error = core::convert::Infallible;
    type Rejections = u32;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5355_0001;
    fn check(&self, _: &i64, e: &Event<i64>) -> Result<Outcome, Self::Error> {
        Ok(if e.payload < 1_000 {
            Outcome::Applied
        } else {
            Outcome::Rejected
        })
    }
    fn apply(&self, sum: &mut i64, e: &Event<i64>) {
        *sum += e.payload;
    }
}

/// The new firmware's: the sum and the last command applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Sum2 {
    sum: i64,
    last: i64,
}

impl idem_core::MaxSize for Sum2 {
    const POSTCARD_MAX_SIZE: usize = 2 * i64::POSTCARD_MAX_SIZE;
}

#[derive(Clone, Debug)]
struct SumV2;

impl Store for SumV2 {
    type Payload = i64;
    type State = Sum2;
    type Error = core::convert::Infallible;
    type Rejections = u32;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5355_0002;
    fn check(&self, _: &Sum2, e: &Event<i64>) -> Result<Outcome, Self::Error> {
        SumV1.check(&0, e)
    }
    fn apply(&self, s: &mut Sum2, e: &Event<i64>) {
        s.sum += e.payload;
        s.last = e.payload;
    }
}

fn to_v2(old: Stamped<i64>) -> Stamped<Sum2> {
    Stamped {
        state: Sum2 {
            sum: old.state,
            last: 0,
        },
        stamp: old.stamp,
    }
}

fn events() -> Vec<Event<i64>> {
    (0..EVENTS)
        .map(|offset| Event {
            offset,
            payload: command(offset),
        })
        .collect()
}

fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(4).unwrap())
}

/// The old firmware's steps, then its reset.
fn old_firmware(flash: &mut Flash, events: &[Event<i64>]) {
    let stream = Received::new(events, Some(EVENTS));
    let mut c = Consumer::open(flash, LAYOUT, OffsetStamp(SumV1), config()).unwrap();
    for _ in 0..STEPS {
        c.step(flash, &stream).unwrap();
    }
}

fn cut(e: &ConsumerError<FlashError, core::convert::Infallible>) -> bool {
    matches!(
        e,
        ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))
    )
}

/// How the new firmware's boots went.
#[derive(Debug, Default)]
struct Boots {
    /// Boots whose `migrate_each` migrated.
    migrated: u32,
    /// Boots cut short inside `migrate_each`.
    cut_in_migration: u32,
}

/// The new firmware's boots until its run ends: each boot migrates (a no-op once
/// done), opens and runs. Returns the end state, the rejected count and how the boots
/// went.
fn new_firmware(flash: &mut Flash, events: &[Event<i64>]) -> (Sum2, u32, Boots) {
    let stream = Received::new(events, Some(EVENTS));
    let mut boots = Boots::default();
    for _boot in 0..3 {
        let run = (|| {
            match migrate_each::<OffsetStamp<SumV1>, OffsetStamp<SumV2>, _>(flash, &LAYOUT, to_v2) {
                Ok(migrated) => boots.migrated += u32::from(migrated),
                Err(e) => {
                    boots.cut_in_migration += 1;
                    return Err(ConsumerError::Journal(e));
                }
            }
            let mut c = Consumer::open(flash, LAYOUT, OffsetStamp(SumV2), config())?;
            c.run(flash, &stream)?;
            Ok((c.state().state, c.rejected()))
        })();
        match run {
            Ok((state, rejected)) => return (state, rejected, boots),
            Err(e) if cut(&e) => flash.power_on(),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("three boots without an end");
}

/// In range: offsets 0 to 59 but every seventh, 1 + offset each.
const TRUE_SUM: i64 = 1_830 - (7 + 14 + 21 + 28 + 35 + 42 + 49 + 56);
const TRUE_REJECTED: u32 = 8;

#[test]
fn a_store_of_a_new_encoding_takes_the_old_state_and_position_once() {
    let events = events();
    let mut flash = Flash::new();
    old_firmware(&mut flash, &events);
    // The new store's consumer, opened without migrating, refuses the old records.
    let old = Consumer::open(&mut flash, LAYOUT, OffsetStamp(SumV1), config()).unwrap();
    assert_eq!((old.resume_at(), old.state().stamp), (16, Some(17)));
    assert!(matches!(
        Consumer::open(&mut flash, LAYOUT, OffsetStamp(SumV2), config()),
        Err(ConsumerError::Journal(JournalError::Foreign { .. }))
    ));
    let before = flash.stats();
    let (end, rejected, boots) = new_firmware(&mut flash, &events);
    assert_eq!(
        (end, rejected, boots.migrated),
        (
            Sum2 {
                sum: TRUE_SUM,
                last: 60
            },
            TRUE_REJECTED,
            1
        )
    );
    // The next boot migrates nothing, and resumes at the end.
    assert!(
        !migrate_each::<OffsetStamp<SumV1>, OffsetStamp<SumV2>, _>(&mut flash, &LAYOUT, to_v2)
            .unwrap()
    );
    let c = Consumer::open(&mut flash, LAYOUT, OffsetStamp(SumV2), config()).unwrap();
    assert_eq!(c.resume_at(), 60);

    // Every cut of the update's part, once each.
    let cuts = flash.stats().cuts_since(before);
    let mut checked = 0;
    let mut in_migration = 0;
    for cut in cuts {
        let mut flash = Flash::new();
        flash.seed_noise(checked);
        flash.schedule_power_cut(cut);
        old_firmware(&mut flash, &events);
        let (end, rejected, boots) = new_firmware(&mut flash, &events);
        // Each command once. A cut inside the migration leaves the old record,
        // migrated at the next boot, or the new one, if the cut fell while the old
        // pages were erased after it (that boot said nothing, the next finds the new
        // record): never two migrations.
        assert_eq!(
            (end.sum, rejected),
            (TRUE_SUM, TRUE_REJECTED),
            "{cut:?}: {end:?}, {boots:?}"
        );
        assert!(
            boots.migrated + boots.cut_in_migration >= 1 && boots.migrated <= 1,
            "{cut:?}: {boots:?}"
        );
        in_migration += boots.cut_in_migration;
        checked += 1;
    }
    assert_eq!((checked, in_migration), (159, 11));
}

#[cfg(feature = "async")]
#[test]
fn the_async_steps_migrate_the_same() {
    use embassy_futures::block_on;
    use idem_core::persist::migrate_each_async;
    let events = events();
    let mut flash = Flash::new();
    old_firmware(&mut flash, &events);
    let migrate = |flash: &mut Flash| {
        block_on(migrate_each_async::<
            OffsetStamp<SumV1>,
            OffsetStamp<SumV2>,
            _,
        >(flash, &LAYOUT, to_v2))
        .unwrap()
    };
    assert!(migrate(&mut flash));
    assert!(!migrate(&mut flash));
    let stream = Received::new(&events, Some(EVENTS));
    let mut c = block_on(Consumer::open_async(
        &mut flash,
        LAYOUT,
        OffsetStamp(SumV2),
        config(),
    ))
    .unwrap();
    assert_eq!(
        (c.resume_at(), c.state().state.sum),
        (
            16,
            1 + 2 + 3 + 4 + 5 + 6 + 8 + 9 + 10 + 11 + 12 + 13 + 15 + 16 + 17 + 18
        )
    );
    block_on(c.run_async(&mut flash, &stream)).unwrap();
    assert_eq!(
        (c.state().state.sum, c.rejected()),
        (TRUE_SUM, TRUE_REJECTED)
    );
}
