//! Firmware updates of the stores that carry their position: an atomic checkpoint
//! (`persist::migrate_checkpoint`) and a two-phase store (`persist::migrate_two_phase`),
//! each swept with a power cut at every unit write and erase of the update's boots; and
//! `Consumer::open_or_start_at`, which starts a consumer with nothing yet at the offset
//! the application gives, cut or not.
//!
//! The old firmware sums in-range commands and resets; the new one keeps the sum and one
//! field more, under a new tag. Every run must end with each command applied once.

use idem_core::consumer::{
    CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Opened, Reset, Step,
};
use idem_core::journal::JournalError;
use idem_core::log::{Event, Offset, Received};
use idem_core::persist::{
    Checkpoint, Layout, Positioned, TwoPhase, TwoPhaseRecord, migrate_checkpoint, migrate_two_phase,
};
use idem_core::store::{Outcome, Store};
use idem_core::testing::flash::{FlashError, MemFlash, PowerCut};
use serde::{Deserialize, Serialize};

type Flash = MemFlash<4, 1024>;
const LAYOUT: Layout = Layout::from_pages::<Flash>(0, 2, 2, 0x0001);
const EVENTS: u64 = 60;
/// In range: offsets 0 to 59 but every seventh, 1 + offset each.
const TRUE_SUM: i64 = 1_830 - (7 + 14 + 21 + 28 + 35 + 42 + 49 + 56);
const TRUE_REJECTED: u32 = 8;

fn command(o: u64) -> i64 {
    if o % 7 == 6 { 1_000 } else { o as i64 + 1 }
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

fn in_range(e: &Event<i64>) -> Outcome {
    if e.payload < 1_000 {
        Outcome::Applied
    } else {
        Outcome::Rejected
    }
}

/// A sum that carries its position (the atomic checkpoint's state), and a field that
/// the new firmware adds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, idem_core::MaxSize)]
struct Summed<X> {
    sum: i64,
    next: Option<Offset>,
    prepared: Option<Offset>,
    committed_sum: i64,
    extra: X,
}

/// The sum over a checkpoint (`C` true) or a two-phase commit, in the old encoding
/// (`X` = `()`) or the new one (`X` = `u8`).
#[derive(Clone, Debug)]
struct Sum<X, const C: bool>(core::marker::PhantomData<X>);

fn sum<X, const C: bool>() -> Sum<X, C> {
    Sum(core::marker::PhantomData)
}

macro_rules! store {
    ($x:ty, $c:literal, $persist:ident, $tag:literal) => {
        impl Store for Sum<$x, $c> {
            type Payload = i64;
            type State = Summed<$x>;
            type Error = core::convert::Infallible;
            type Rejections = u32;
            type Persist = $persist<Self>;
            const TAG: u32 = $tag;
            fn check(&self, _: &Self::State, e: &Event<i64>) -> Result<Outcome, Self::Error> {
                Ok(in_range(e))
            }
            fn apply(&self, s: &mut Self::State, e: &Event<i64>) {
                s.sum += e.payload;
            }
        }
    };
}

store!((), true, Checkpoint, 0x5E71_0100);
store!(u8, true, Checkpoint, 0x5E71_0200);
store!((), false, TwoPhase, 0x5E72_0100);
store!(u8, false, TwoPhase, 0x5E72_0200);

impl<X: Clone + core::fmt::Debug, const C: bool> Positioned for Sum<X, C>
where
    Self: Store<State = Summed<X>>,
{
    fn position(s: &Summed<X>) -> Offset {
        s.next.unwrap_or(0)
    }
    fn set_position(s: &mut Summed<X>, next: Offset) {
        s.next = Some(next);
    }
}

impl<X: Clone + core::fmt::Debug, const C: bool> TwoPhaseRecord for Sum<X, C>
where
    Self: Store<State = Summed<X>>,
{
    fn position(s: &Summed<X>) -> Offset {
        s.next.unwrap_or(0)
    }
    fn prepared(s: &Summed<X>) -> Option<Offset> {
        s.prepared
    }
    fn prepare(s: &mut Summed<X>, next: Offset) {
        s.prepared = Some(next);
    }
    fn resolve(s: &mut Summed<X>, commit: bool) {
        match (s.prepared.take(), commit) {
            (Some(next), true) => {
                s.next = Some(next);
                s.committed_sum = s.sum;
            }
            (Some(_), false) => s.sum = s.committed_sum,
            (None, _) => {}
        }
    }
}

/// The new encoding: the old fields, and `extra` 7.
fn to_v2(old: Summed<()>) -> Summed<u8> {
    Summed {
        sum: old.sum,
        next: old.next,
        prepared: old.prepared,
        committed_sum: old.committed_sum,
        extra: 7,
    }
}

type Error = ConsumerError<FlashError, core::convert::Infallible>;
type Migrate = fn(&mut Flash) -> Result<bool, JournalError<FlashError>>;

fn cut(e: &Error) -> bool {
    matches!(
        e,
        ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))
    )
}

/// The old firmware's `steps` steps, then its reset; its last step.
fn old_firmware<O>(flash: &mut Flash, old: O, steps: usize) -> Step<i64>
where
    O: Store<Payload = i64, Error = core::convert::Infallible>,
{
    let events = events();
    let stream = Received::new(&events, Some(EVENTS));
    let mut c = Consumer::open(flash, LAYOUT, old, config()).unwrap();
    let mut last = Step::Done;
    for _ in 0..steps {
        last = c.step(flash, &stream).unwrap();
    }
    last
}

/// The new firmware's boots until its run ends: the sum, the rejected count, and boots
/// that migrated and that were cut in the migration.
fn new_firmware<N>(flash: &mut Flash, new: N, migrate: Migrate) -> (i64, u32, u32, u32)
where
    N: Store<Payload = i64, Error = core::convert::Infallible, State = Summed<u8>>,
{
    let events = events();
    let stream = Received::new(&events, Some(EVENTS));
    let (mut migrated, mut cut_in_migration) = (0, 0);
    for _boot in 0..3 {
        let run = (|| {
            match migrate(flash) {
                Ok(done) => migrated += u32::from(done),
                Err(e) => {
                    cut_in_migration += 1;
                    return Err(ConsumerError::Journal(e));
                }
            }
            let mut c = Consumer::open(flash, LAYOUT, new.clone(), config())?;
            c.run(flash, &stream)?;
            assert_eq!(c.state().extra, 7);
            Ok((c.state().sum, c.rejected()))
        })();
        match run {
            Ok((sum, rejected)) => return (sum, rejected, migrated, cut_in_migration),
            Err(e) if cut(&e) => flash.power_on(),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("three boots without an end");
}

/// The update after `steps` old steps, then a cut at every unit write and erase of the
/// new firmware's boots: every run exact. Returns the cuts checked and those that fell
/// in the migration.
fn sweep<O, N>(old: O, new: N, steps: usize, migrate: Migrate) -> (u64, u32)
where
    O: Store<Payload = i64, Error = core::convert::Infallible> + Clone,
    N: Store<Payload = i64, Error = core::convert::Infallible, State = Summed<u8>>,
{
    let mut flash = Flash::new();
    old_firmware(&mut flash, old.clone(), steps);
    let before = flash.stats();
    assert_eq!(
        new_firmware(&mut flash, new.clone(), migrate),
        (TRUE_SUM, TRUE_REJECTED, 1, 0)
    );
    assert!(
        !migrate(&mut flash).unwrap(),
        "a second boot migrates nothing"
    );
    let (mut checked, mut in_migration) = (0, 0);
    for cut in flash.stats().cuts_since(before) {
        let mut flash = Flash::new();
        flash.seed_noise(checked);
        flash.schedule_power_cut(cut);
        old_firmware(&mut flash, old.clone(), steps);
        let (end, rejected, migrated, cuts) = new_firmware(&mut flash, new.clone(), migrate);
        assert_eq!((end, rejected), (TRUE_SUM, TRUE_REJECTED), "{cut:?}");
        assert!(migrated + cuts >= 1 && migrated <= 1, "{cut:?}");
        in_migration += cuts;
        checked += 1;
    }
    (checked, in_migration)
}

#[test]
fn a_checkpoint_store_takes_its_state_and_position_across_an_update_at_every_cut() {
    let migrate: Migrate =
        |f| migrate_checkpoint::<Sum<(), true>, Sum<u8, true>, _>(f, &LAYOUT, to_v2);
    // 41 steps: 16 committed; the effects after it were in RAM and replay.
    let mut flash = Flash::new();
    old_firmware(&mut flash, sum::<(), true>(), 41);
    assert!(migrate(&mut flash).unwrap());
    let c = Consumer::open(&mut flash, LAYOUT, sum::<u8, true>(), config()).unwrap();
    assert_eq!((c.resume_at(), c.state().extra), (16, 7));
    assert_eq!(
        sweep(sum::<(), true>(), sum::<u8, true>(), 41, migrate),
        (56, 12)
    );
}

#[test]
fn a_two_phase_store_resolves_its_record_in_doubt_before_the_update_at_every_cut() {
    let migrate: Migrate =
        |f| migrate_two_phase::<Sum<(), false>, Sum<u8, false>, _>(f, &LAYOUT, to_v2);
    // The old firmware's last step prepared a commit and wrote no decision: the update
    // finds a record in doubt, rolls it back as recovery would, and replays the batch.
    let mut steps = 0;
    while !matches!(
        old_firmware(&mut Flash::new(), sum::<(), false>(), steps),
        Step::Prepare { next: 32 }
    ) {
        steps += 1;
    }
    let mut flash = Flash::new();
    old_firmware(&mut flash, sum::<(), false>(), steps);
    assert!(migrate(&mut flash).unwrap());
    let c = Consumer::open(&mut flash, LAYOUT, sum::<u8, false>(), config()).unwrap();
    assert_eq!(
        (steps, c.resume_at(), c.state().prepared, c.resolution()),
        (79, 28, None, None)
    );
    assert_eq!(
        sweep(sum::<(), false>(), sum::<u8, false>(), steps, migrate),
        (92, 12)
    );
    // One step on, the batch committed: nothing in doubt at the update.
    assert_eq!(
        sweep(sum::<(), false>(), sum::<u8, false>(), steps + 1, migrate),
        (82, 12)
    );
}

#[test]
fn a_consumer_with_nothing_yet_starts_where_the_application_says() {
    let events = events();
    let stream = Received::new(&events, Some(EVENTS));
    // Blank flash: it starts at 40 and reads nothing before it.
    let mut flash = Flash::new();
    let (mut c, opened) =
        Consumer::open_or_start_at(&mut flash, LAYOUT, sum::<(), false>(), config(), 40).unwrap();
    assert_eq!((opened, c.resume_at()), (Opened::Recovered, 40));
    c.run(&mut flash, &stream).unwrap();
    let from_40: i64 = (40..60).filter(|o| o % 7 != 6).map(|o| o + 1).sum();
    assert_eq!((c.state().sum, c.rejected()), (from_40, 3));
    // Recovered: the position it holds wins over the one given.
    let (c, _) =
        Consumer::open_or_start_at(&mut flash, LAYOUT, sum::<(), false>(), config(), 10).unwrap();
    assert_eq!(c.resume_at(), 60);
    // Another store's journals: reset, and started at 40, not at 0.
    let (c, opened) =
        Consumer::open_or_start_at(&mut flash, LAYOUT, sum::<(), true>(), config(), 40).unwrap();
    assert!(matches!(opened, Opened::Reset(Reset::Foreign { .. })));
    assert_eq!(c.resume_at(), 40);
    // A cut at every unit write and erase of the start of a two-phase store (a
    // prepared record, the decision, the committed record) and of a reset: the next
    // open starts at 40 again.
    let mut reference = Flash::new();
    old_firmware(&mut reference, sum::<(), true>(), 9);
    let before = reference.stats();
    Consumer::open_or_start_at(&mut reference, LAYOUT, sum::<(), false>(), config(), 40).unwrap();
    let mut cuts = 0;
    for cut in reference.stats().cuts_since(before) {
        let mut flash = Flash::new();
        flash.seed_noise(cuts);
        old_firmware(&mut flash, sum::<(), true>(), 9);
        let at = match cut {
            PowerCut::AtWordWrite(n) => PowerCut::AtWordWrite(n - before.word_writes),
            PowerCut::AtErase(n) => PowerCut::AtErase(n - before.erases),
            PowerCut::BeforeWordWrite(n) => PowerCut::BeforeWordWrite(n - before.word_writes),
            PowerCut::BeforeErase(n) => PowerCut::BeforeErase(n - before.erases),
            PowerCut::WeakErase(n) => PowerCut::WeakErase(n - before.erases),
        };
        flash.schedule_power_cut(at);
        assert!(
            Consumer::open_or_start_at(&mut flash, LAYOUT, sum::<(), false>(), config(), 40)
                .is_err()
        );
        flash.power_on();
        let (c, _) =
            Consumer::open_or_start_at(&mut flash, LAYOUT, sum::<(), false>(), config(), 40)
                .unwrap();
        assert_eq!((c.resume_at(), c.state().sum), (40, 0), "{cut:?}");
        cuts += 1;
    }
    assert_eq!(cuts, 24);
}
