//! The store registry (`idem_sim::registry`): every store by name, its sources, and one
//! dispatch. A store of the application's own, written in this file and nowhere else,
//! goes through a job written for the registry (`StoreJob`, any `Runnable`), which runs
//! the simulator, its crash and its checker, as the registry's own stores do through
//! the same job by name. (The command line names only the registry's stores.)

use idem_core::log::Event;
use idem_core::persist::EachEffect;
use idem_core::store::{Outcome, Store};
use idem_sim::check::Verdict;
use idem_sim::payment::stores::{NaiveState, StoreError};
use idem_sim::payment::{Message, Sum};
use idem_sim::registry::{self, Runnable, STORES, Source, StoreJob, StoreKind, WINDOW};
use idem_sim::run::{self, Action, Report, TraceStep};
use idem_sim::scenario;

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

/// A job as the front ends write them for the registry: the DDIA run with its crash
/// after offset 49, K = 10, and the replays it skipped.
struct Ddia;

impl StoreJob for Ddia {
    type Out = (Report, u64);
    fn call<S: Runnable>(self, store: S) -> (Report, u64) {
        let s = scenario::ddia(100, idem_sim::ddia::CHECKPOINT_EVERY, Some(49)).unwrap();
        let mut skipped = 0;
        let r = run::run(&s, store, &mut |t: &TraceStep| {
            skipped += u64::from(t.action == Action::Skip);
        })
        .unwrap();
        (r, skipped)
    }
}

#[test]
fn a_store_written_in_the_test_runs_as_the_registrys_do() {
    let (own, own_skipped) = Ddia.call(NewerOnly);
    assert_eq!(
        (own.final_total, own.true_total, own.crashes),
        (100, 100, 1)
    );
    assert_eq!(Verdict::of(own.final_total, own.true_total), Verdict::Exact);
    assert_eq!(own_skipped, 10, "the replay of 40..49 is skipped");
    // The same job through the registry's dispatch, by name: the offset stamp does what
    // the hand-written rule does, and the naive store counts the replay.
    let by_name = |name| registry::with_store(StoreKind::from_name(name).unwrap(), WINDOW, Ddia);
    let (offset, offset_skipped) = by_name("offset").unwrap();
    assert_eq!((offset.final_total, offset_skipped), (100, 10));
    assert_eq!(offset.flash.writes, own.flash.writes);
    assert_eq!(by_name("naive").unwrap().0.final_total, 110);
}

#[test]
fn every_source_takes_the_stores_the_registry_lists() {
    let names = |s| StoreKind::on(s).map(StoreKind::name).collect::<Vec<_>>();
    assert_eq!(
        names(Source::Kafka),
        ["naive", "offset", "message-id", "atomic"]
    );
    assert_eq!(
        names(Source::Board),
        [
            "naive",
            "offset",
            "message-id",
            "producer-seq",
            "atomic",
            "two-phase"
        ]
    );
    assert_eq!(names(Source::Simulator).len(), STORES.len());
    assert_eq!(names(Source::Image).len(), STORES.len());
    // The board's own store ids are exactly the registry's board stores.
    for e in &STORES {
        assert_eq!(
            idem_board::feed::StoreId::from_kind(e.kind).map(|s| s.name()),
            e.kind.runs_on(Source::Board).then_some(e.name),
            "{}",
            e.name
        );
    }
}
