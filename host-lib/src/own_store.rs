//! A store of the application's own, written in this file and nowhere else, runs on
//! every source its entry lists ([`Listed::SOURCES`]), through each source's own path:
//! the simulator's run with its crash and checker, and the file image's consume path
//! (`image_consumer::consume_store`, which `idem consume` runs). No other file names it.

use std::time::Duration;

use idem_core::log::Event;
use idem_core::persist::EachEffect;
use idem_core::store::{Outcome, Store};
use idem_payments::registry::{Family, Listed, Runnable, Source};
use idem_payments::stores::{Naive, NaiveState, StoreError};
use idem_payments::{Message, Sum};
use idem_sim::check::Verdict;
use idem_sim::run::{self, Action, TraceStep};
use idem_sim::scenario;

use crate::drive::Drive;
use crate::image::{Image, Meta};
use crate::image_consumer::{self, Progress};

/// The application's own store: a total that applies an event only when its offset is
/// newer than the last it applied, kept in the total's record (set-if-newer, written by
/// hand rather than taken from idem-core's `OffsetStamp`).
#[derive(Debug, Clone, Copy, Default)]
struct NewerOnly;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct NewerState {
    total: NaiveState,
    next: u64,
}

impl idem_core::MaxSize for NewerState {
    const POSTCARD_MAX_SIZE: usize = NaiveState::POSTCARD_MAX_SIZE + u64::POSTCARD_MAX_SIZE;
}

impl Store for NewerOnly {
    type Payload = Message;
    type State = NewerState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x7E57_0100;

    fn check(&self, state: &NewerState, e: &Event<Message>) -> Result<Outcome, StoreError> {
        Ok(if e.offset < state.next {
            Outcome::Skipped
        } else {
            Outcome::Applied
        })
    }

    fn apply(&self, state: &mut NewerState, e: &Event<Message>) {
        state.total.total += e.payload.amount;
        state.next = e.offset + 1;
    }
}

impl Sum for NewerOnly {
    fn total(state: &NewerState) -> i64 {
        state.total.total
    }
}

impl Listed for NewerOnly {
    const NAME: &'static str = "newer-only";
    const FAMILY: Family = Family::Sum;
    const SOURCES: &'static [Source] = &[Source::Simulator, Source::Image];
}

const EVERY: idem_core::consumer::CheckpointEvery = idem_payments::ddia::CHECKPOINT_EVERY;

/// The simulator: the DDIA run, its crash after offset 49 (K = 10); the total, the
/// truth, and the replays skipped.
fn on_simulator<S: Runnable>(store: S) -> (i64, i64, u64) {
    let s = scenario::ddia(100, EVERY, Some(49)).unwrap();
    let mut skipped = 0;
    let r = run::run(&s, store, &mut |t: &TraceStep| {
        skipped += u64::from(t.action == Action::Skip);
    })
    .unwrap();
    assert_eq!(r.crashes, 1);
    (r.final_total, r.true_total, skipped)
}

/// The file image: a process consumes DDIA's 100 events and is gone after the effect
/// of offset 44 (94 steps: a delivery and an effect for each of 45 events and the 4
/// commits before them), then a new one recovers from the image and consumes to the
/// end. The position it recovered, its total and the truth.
fn on_image<S: Runnable + Copy>(store: S, name: &str) -> (u64, Progress) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.bin"));
    let meta = Meta {
        scenario: "ddia".into(),
        store: name.into(),
        events: 100,
        checkpoint_every: EVERY.get(),
        window: 0,
        pages: crate::image::PAGES,
        mqtt: None,
    };
    let s = scenario::ddia(100, EVERY, None).unwrap();
    let gone = Drive {
        steps: Some(94),
        ..Drive::to_end(Duration::ZERO)
    };
    let mut image = Image::open_or_create(&path, &meta).unwrap();
    let first =
        image_consumer::consume_store(&mut image, &s, store, Some(&gone), &mut |_, _| Ok(()))
            .unwrap();
    assert_eq!((first.next_offset, first.total), (45, 45));
    drop(image);
    let mut image = Image::open_or_create(&path, &meta).unwrap();
    let recovered = image_consumer::consume_store(&mut image, &s, store, None, &mut |_, _| Ok(()))
        .unwrap()
        .next_offset;
    let to_end = Drive::to_end(Duration::ZERO);
    let end =
        image_consumer::consume_store(&mut image, &s, store, Some(&to_end), &mut |_, _| Ok(()))
            .unwrap();
    (recovered, end)
}

#[test]
fn a_store_written_here_runs_on_every_source_its_entry_lists() {
    assert_eq!(NewerOnly::FAMILY, Family::Sum);
    for &source in NewerOnly::SOURCES {
        assert!(source.takes_any(), "{}", source.name());
        match source {
            Source::Simulator => {
                let (total, truth, skipped) = on_simulator(NewerOnly);
                assert_eq!((total, truth), (100, 100));
                assert_eq!(Verdict::of(total, truth), Verdict::Exact);
                assert_eq!(skipped, 10, "the replay of 40..49 is skipped");
                // The same path counts the replay with the naive store.
                assert_eq!(on_simulator(Naive).0, 110);
            }
            Source::Image => {
                let (recovered, p) = on_image(NewerOnly, NewerOnly::NAME);
                assert_eq!(recovered, 40, "the last commit before the process went");
                assert_eq!((p.total, p.true_total, p.next_offset), (100, 100, 100));
                // The same path, the registry's naive store: 40..44 applied twice.
                let (_, naive) = on_image(Naive, "naive");
                assert_eq!((naive.total, naive.true_total), (105, 100));
            }
            other => unreachable!("{} takes only the registry's stores", other.name()),
        }
    }
}

#[test]
fn kafka_and_the_board_take_only_the_registrys_stores() {
    let any: Vec<_> = Source::ALL.into_iter().filter(|s| s.takes_any()).collect();
    assert_eq!(any, [Source::Simulator, Source::Image]);
}
