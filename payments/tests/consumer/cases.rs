// The consumer's cases, run once for each build (`tests/consumer.rs`): `open`,
// `open_or_reset`, `step` and `run` are the blocking steps or the async ones.

use idem_core::consumer::{
    CheckpointEvery, ConsumerConfig, ConsumerError, Guarantee, Opened, Reset, Step,
};
use idem_core::journal::{JournalError, Region};
use idem_core::log::{Log, Offset};
use idem_core::persist::Layout;
use idem_core::store::Store;
use idem_core::testing::flash::MemFlash;
use idem_payments::stores::{Atomic, Naive, OffsetStamped};
use idem_payments::{GeneratedLog, Payment, Sum, Total};

const K10: ConsumerConfig = ConsumerConfig::every(CheckpointEvery::new(10).unwrap());
/// The DDIA exercise's log: 100 events of +1.
const HUNDRED: GeneratedLog = GeneratedLog {
    events: 100,
    amount: 1,
};

type F = MemFlash<8, 1024>;
const LAYOUT: Layout = Layout {
    positions: Region { start: 0, pages: 4 },
    sink: Region {
        start: 4096,
        pages: 4,
    },
    tag: 0,
};

/// Runs until the effect of `crash_after`, drops the consumer, reopens and finishes.
fn crash_after<S: Sum + Copy>(store: S, crash_after: Offset) -> (i64, Offset, u64) {
    let log = GeneratedLog {
        events: 100,
        amount: 1,
    };
    let mut f = F::new();
    let mut c = open(&mut f, LAYOUT, store, K10).unwrap();
    loop {
        if let Step::Effect(e, _) = step(&mut c, &mut f, &log).unwrap()
            && e.offset == crash_after
        {
            break;
        }
    }
    let mut writes = c.records_written();
    let mut c = open(&mut f, LAYOUT, store, K10).unwrap();
    let resumed = c.resume_at();
    run(&mut c, &mut f, &log).unwrap();
    writes += c.records_written();
    (c.total(), resumed, writes)
}

#[test]
fn ddia_figures() {
    assert_eq!(crash_after(Naive, 49), (110, 40, 60 + 4 + 6 + 50));
    assert_eq!(crash_after(OffsetStamped, 49), (100, 40, 50 + 4 + 6 + 50));
    // Atomic: one record per checkpoint, 4 before the crash and 6 after.
    assert_eq!(crash_after(Atomic, 49), (100, 40, 10));
}

/// The atomic checkpoint keeps its position in its own record: one journal of 2
/// pages is all it needs, and the DDIA figures hold on it. A store that needs the
/// position journal refuses the layout.
#[test]
fn a_state_that_carries_its_position_needs_one_region() {
    type Two = MemFlash<2, 1024>;
    let layout = Layout::one_region::<Two>(0, 2, 0);
    let log = HUNDRED;
    let mut f = Two::new();
    let mut c = open(&mut f, layout, Atomic, K10).unwrap();
    loop {
        if let Step::Effect(e, _) = step(&mut c, &mut f, &log).unwrap()
            && e.offset == 49
        {
            break;
        }
    }
    let mut c = open(&mut f, layout, Atomic, K10).unwrap();
    assert_eq!(c.resume_at(), 40);
    run(&mut c, &mut f, &log).unwrap();
    assert_eq!((c.total(), c.records_written()), (100, 6));
    for refused in [
        open(&mut Two::new(), layout, OffsetStamped, K10).err(),
        open(&mut Two::new(), layout, Naive, K10).err(),
    ] {
        assert_eq!(
            refused,
            Some(ConsumerError::Journal(JournalError::BadRegion))
        );
    }
}

/// A firmware update that changes the store (here its tag: the rule for a new
/// encoding) finds the old journal foreign. `open` refuses it and writes nothing;
/// `open_or_reset` says what it found, erases both regions and starts over.
#[test]
fn a_store_of_another_encoding_is_refused_or_started_over() {
    let log = HUNDRED;
    let mut f = F::new();
    let mut old = open(&mut f, LAYOUT, Naive, K10).unwrap();
    run(&mut old, &mut f, &log).unwrap();
    let before = f.pages().to_vec();
    assert!(matches!(
        open(&mut f, LAYOUT, OffsetStamped, K10).err(),
        Some(ConsumerError::Journal(JournalError::Foreign { tag, .. })) if tag == Naive::TAG
    ));
    assert_eq!(f.pages().to_vec(), before, "open writes nothing");
    let (mut c, opened) = open_or_reset(&mut f, LAYOUT, OffsetStamped, K10).unwrap();
    assert_eq!(
        opened,
        Opened::Reset(Reset::Foreign {
            page: 0,
            tag: Naive::TAG,
            version: idem_core::journal::FORMAT_VERSION,
        })
    );
    assert_eq!((c.resume_at(), c.total()), (0, 0));
    run(&mut c, &mut f, &log).unwrap();
    let (c, opened) = open_or_reset(&mut f, LAYOUT, OffsetStamped, K10).unwrap();
    assert_eq!(
        (opened, c.resume_at(), c.total()),
        (Opened::Recovered, 100, 100)
    );
}

/// A live stream read through a window of at most 16 received events: the consumer
/// reports `Done` when the window is used up, the caller refills it from
/// `next_offset`, and a reset at offset 57 (consumer and window lost) resumes from
/// flash at 50. Exactly 100, and every window but the last ended mid-stream.
#[test]
fn a_live_stream_through_a_bounded_window() {
    use idem_core::log::Received;
    let all: std::vec::Vec<Payment> = (0..100).map(|o| HUNDRED.get(o).unwrap()).collect();
    let mut f = F::new();
    let mut c = open(&mut f, LAYOUT, OffsetStamped, K10).unwrap();
    let (mut windows, mut reset) = (0, false);
    while c.next_offset() < 100 {
        let from = c.next_offset() as usize;
        let window = Received::new(&all[from..(from + 16).min(100)], Some(100));
        windows += 1;
        loop {
            match step(&mut c, &mut f, &window).unwrap() {
                Step::Done => break,
                Step::Effect(e, _) if e.offset == 57 && !reset => {
                    reset = true;
                    c = open(&mut f, LAYOUT, OffsetStamped, K10).unwrap();
                    assert_eq!(c.resume_at(), 50);
                    break;
                }
                _ => {}
            }
        }
    }
    assert_eq!((c.total(), c.next_offset(), windows), (100, 100, 8));
    let c = open(&mut f, LAYOUT, OffsetStamped, K10).unwrap();
    assert_eq!((c.resume_at(), c.total()), (100, 100));
}

/// A power cut in the middle of a record's write: the step fails in its journal, and
/// every later step is `Reopen` (stepping on, the window's RAM would be ahead of its
/// flash and call the replayed event a skip). Opened again, it ends exact.
#[test]
fn a_journal_error_stops_the_consumer_until_it_is_opened_again() {
    use idem_core::testing::flash::PowerCut;
    use idem_payments::stores::{MessageIdWindow, Naive};
    let store = MessageIdWindow::<Naive, 8>::default();
    let mut f = F::new();
    let mut c = open(&mut f, LAYOUT, store, K10).unwrap();
    for _ in 0..6 {
        step(&mut c, &mut f, &HUNDRED).unwrap();
    }
    f.schedule_power_cut(PowerCut::AtWordWrite(3));
    let failed = core::iter::repeat_with(|| step(&mut c, &mut f, &HUNDRED))
        .take(4)
        .find_map(Result::err);
    assert!(
        matches!(failed, Some(ConsumerError::Journal(_))),
        "{failed:?}"
    );
    f.power_on();
    assert_eq!(step(&mut c, &mut f, &HUNDRED), Err(ConsumerError::Reopen));
    assert_eq!(step(&mut c, &mut f, &HUNDRED), Err(ConsumerError::Reopen));
    let mut c = open(&mut f, LAYOUT, store, K10).unwrap();
    run(&mut c, &mut f, &HUNDRED).unwrap();
    assert_eq!((c.total(), c.resume_at()), (100, 100));
}

#[test]
fn recovering_a_prepared_two_phase_record_writes_nothing() {
    use idem_payments::stores::TwoPhase;
    let log = GeneratedLog {
        events: 100,
        amount: 1,
    };
    let mut f = F::new();
    let mut c = open(&mut f, LAYOUT, TwoPhase, K10).unwrap();
    while step(&mut c, &mut f, &log).unwrap() != (Step::Prepare { next: 50 }) {}
    let before = (f.stats(), f.pages().to_vec());
    // The decision was not made: recovery rolls back to 40, in RAM only.
    let c = open(&mut f, LAYOUT, TwoPhase, K10).unwrap();
    assert_eq!((c.resume_at(), c.total()), (40, 40));
    assert_eq!((f.stats(), f.pages().to_vec()), before, "nothing written");
    // And it goes on from there to the exact total.
    let mut c = c;
    run(&mut c, &mut f, &log).unwrap();
    let c = open(&mut f, LAYOUT, TwoPhase, K10).unwrap();
    assert_eq!((c.resume_at(), c.total()), (100, 100));
}

#[test]
fn at_most_once_commits_the_batch_first_and_loses_on_a_crash() {
    let log = GeneratedLog {
        events: 100,
        amount: 1,
    };
    let mut f = F::new();
    let cfg = ConsumerConfig {
        checkpoint_every: K10.checkpoint_every,
        guarantee: Guarantee::AtMostOnce,
    };
    let mut c = open(&mut f, LAYOUT, OffsetStamped, cfg).unwrap();
    assert_eq!(
        step(&mut c, &mut f, &log).unwrap(),
        Step::Commit { next: 10 }
    );
    while !matches!(step(&mut c, &mut f, &log).unwrap(), Step::Effect(e, _) if e.offset == 45) {}
    let mut c = open(&mut f, LAYOUT, OffsetStamped, cfg).unwrap();
    assert_eq!(c.resume_at(), 50);
    run(&mut c, &mut f, &log).unwrap();
    assert_eq!(c.total(), 96);
}
