//! The receive rules one packet at a time, on the strict in-memory flash, over a store
//! of the test's own (an `i64` sum: the receiver takes any idem-core store).

use idem_core::journal::Region;
use idem_core::testing::flash::MemFlash;
use idem_mqtt::codec::QoS;
use idem_mqtt::receiver::{Ack, Arrival, Decided, Keep, ReceiveError, Receiver, Release, digest};

mod common;
use common::Sum;

type Flash = MemFlash<3, 1024>;
const REGION: Region = Region { start: 0, pages: 3 };
const TAG: u32 = 0x7E57_0200;

fn open(flash: &mut Flash, keep: Keep, release: Release) -> Receiver<Sum, 4> {
    Receiver::open(flash, REGION, TAG, Sum, keep, release).unwrap()
}

/// A PUBLISH on topic `t` whose payload names its identifier.
fn at(qos: QoS, pid: Option<u16>, dup: bool, retain: bool) -> Arrival {
    let payload = pid.unwrap_or(0).to_be_bytes();
    Arrival {
        qos,
        pid,
        dup,
        retain,
        digest: digest("t", &payload),
    }
}

fn qos2(
    r: &mut Receiver<Sum, 4>,
    flash: &mut Flash,
    pid: u16,
    amount: Option<i64>,
) -> (Option<Decided>, Option<Ack>, Vec<u16>) {
    let reply = r
        .decide(
            flash,
            &at(QoS::ExactlyOnce, Some(pid), false, false),
            amount,
        )
        .unwrap();
    (reply.decided, reply.ack, reply.completed.to_vec())
}

#[test]
fn a_held_identifier_is_a_duplicate_and_its_release_is_durable_before_pubcomp() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Flash, Release::Now);
    assert_eq!(
        qos2(&mut r, &mut flash, 7, Some(5)),
        (Some(Decided::Applied), Some(Ack::Pubrec(7)), vec![])
    );
    let before = flash.stats();
    // Sent again before PUBREL (DUP or not): PUBREC again, nothing applied or written.
    assert_eq!(
        qos2(&mut r, &mut flash, 7, Some(5)),
        (Some(Decided::Held), Some(Ack::Pubrec(7)), vec![])
    );
    assert_eq!(flash.stats(), before);
    // A reset here: the identifier is in the record with the effect.
    let mut r = open(&mut flash, Keep::Flash, Release::Now);
    assert_eq!((*r.state(), r.held().as_slice()), (5, &[7][..]));
    assert_eq!(qos2(&mut r, &mut flash, 7, Some(5)).0, Some(Decided::Held));
    let reply = r.pubrel(&mut flash, 7).unwrap();
    assert_eq!((reply.completed.as_slice(), reply.records), (&[7][..], 1));
    let r2 = open(&mut flash, Keep::Flash, Release::Now);
    assert_eq!((*r2.state(), r2.held().as_slice()), (5, &[][..]));
    // A PUBREL of an identifier not held still gets PUBCOMP, and writes nothing.
    let before = flash.stats();
    let reply = r.pubrel(&mut flash, 7).unwrap();
    assert_eq!((reply.completed.as_slice(), reply.records), (&[7][..], 0));
    assert_eq!(flash.stats(), before);
    // After PUBCOMP the broker may give 7 to a new message: applied.
    assert_eq!(
        qos2(&mut r, &mut flash, 7, Some(3)).0,
        Some(Decided::Applied)
    );
    assert_eq!(*r.state(), 8);
}

#[test]
fn identifiers_in_ram_are_forgotten_at_a_reset() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Ram, Release::Now);
    assert_eq!(
        qos2(&mut r, &mut flash, 7, Some(5)).0,
        Some(Decided::Applied)
    );
    assert_eq!(qos2(&mut r, &mut flash, 7, Some(5)).0, Some(Decided::Held));
    let mut r = open(&mut flash, Keep::Ram, Release::Now);
    assert_eq!(
        qos2(&mut r, &mut flash, 7, Some(5)).0,
        Some(Decided::Applied)
    );
    assert_eq!(*r.state(), 10);
}

#[test]
fn a_new_identifier_with_every_place_taken_is_refused_and_writes_nothing() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Flash, Release::Now);
    for pid in 1..=4 {
        qos2(&mut r, &mut flash, pid, Some(1));
    }
    let before = flash.stats();
    let full = r.decide(
        &mut flash,
        &at(QoS::ExactlyOnce, Some(99), false, false),
        Some(1),
    );
    assert_eq!(full, Err(ReceiveError::Full { pid: 99, places: 4 }));
    assert_eq!((flash.stats(), *r.state()), (before, 4));
    // The held ones are still duplicates, and QoS 1 still goes through.
    assert_eq!(qos2(&mut r, &mut flash, 2, Some(1)).0, Some(Decided::Held));
    let qos1 = r
        .decide(
            &mut flash,
            &at(QoS::AtLeastOnce, Some(99), false, false),
            Some(1),
        )
        .unwrap();
    assert_eq!(
        (qos1.decided, qos1.ack),
        (Some(Decided::Applied), Some(Ack::Puback(99)))
    );
}

#[test]
fn a_release_shares_the_next_record_and_its_pubcomp_waits_for_it() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Flash, Release::WithNext);
    qos2(&mut r, &mut flash, 1, Some(5));
    let before = flash.stats();
    let reply = r.pubrel(&mut flash, 1).unwrap();
    assert_eq!(
        (reply.completed.as_slice(), reply.records, flash.stats()),
        (&[][..], 0, before)
    );
    assert_eq!(r.releasing(), &[1]);
    // The next message's record forgets 1 and holds 2: PUBCOMP 1, then PUBREC 2.
    assert_eq!(
        qos2(&mut r, &mut flash, 2, Some(3)),
        (Some(Decided::Applied), Some(Ack::Pubrec(2)), vec![1])
    );
    assert_eq!(r.held().as_slice(), &[2]);
    assert_eq!(r.counts().records, 2);
    // Idle: the caller flushes the waiting release alone.
    r.pubrel(&mut flash, 2).unwrap();
    let reply = r.flush(&mut flash).unwrap();
    assert_eq!((reply.completed.as_slice(), reply.records), (&[2][..], 1));
    // With every place waiting, the broker can send nothing: the fourth release flushes.
    for pid in 3..=6 {
        qos2(&mut r, &mut flash, pid, Some(1));
    }
    for pid in 3..=5 {
        assert_eq!(r.pubrel(&mut flash, pid).unwrap().records, 0);
    }
    let reply = r.pubrel(&mut flash, 6).unwrap();
    assert_eq!(
        (reply.completed.as_slice(), reply.records),
        (&[3, 4, 5, 6][..], 1)
    );
}

#[test]
fn a_group_ends_with_its_releases_written_only_when_the_broker_waits_for_them() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Flash, Release::WithNext);
    for pid in 1..=3 {
        qos2(&mut r, &mut flash, pid, Some(1));
    }
    // A group that released 1 and 2 while 3 still waits for its PUBREL: the broker owes
    // a packet, and the next message's record will carry the releases.
    r.pubrel(&mut flash, 1).unwrap();
    r.pubrel(&mut flash, 2).unwrap();
    let before = flash.stats();
    let reply = r.group_end(&mut flash).unwrap();
    assert_eq!(
        (reply.completed.as_slice(), reply.records, flash.stats()),
        (&[][..], 0, before)
    );
    // 3 released too: every identifier held waits for its PUBCOMP, and the broker for
    // them. One record, in the group's sync, completes all three.
    r.pubrel(&mut flash, 3).unwrap();
    let reply = r.group_end(&mut flash).unwrap();
    assert_eq!(
        (reply.completed.as_slice(), reply.records),
        (&[1, 2, 3][..], 1)
    );
    assert_eq!((r.held().as_slice(), r.counts().records), (&[][..], 4));
    // Nothing waiting: nothing written.
    let before = flash.stats();
    assert_eq!(r.group_end(&mut flash).unwrap().records, 0);
    assert_eq!(flash.stats(), before);
}

#[test]
fn poison_retained_and_dup_messages() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Flash, Release::Now);
    // Undecodable (None) or refused by the store (negative): acknowledged and counted,
    // so that the broker stops sending it; a resend of the QoS 2 one is held.
    assert_eq!(
        qos2(&mut r, &mut flash, 1, None),
        (Some(Decided::Rejected), Some(Ack::Pubrec(1)), vec![])
    );
    assert_eq!(qos2(&mut r, &mut flash, 1, None).0, Some(Decided::Held));
    let refused = r
        .decide(
            &mut flash,
            &at(QoS::AtLeastOnce, Some(2), false, false),
            Some(-4),
        )
        .unwrap();
    assert_eq!(
        (refused.decided, refused.ack),
        (Some(Decided::Rejected), Some(Ack::Puback(2)))
    );
    assert_eq!((r.record().rejected, *r.state()), (2, 0));
    // A retained message is acknowledged and reported, never applied or written.
    let before = flash.stats();
    let retained = r
        .decide(
            &mut flash,
            &at(QoS::AtLeastOnce, Some(3), false, true),
            Some(9),
        )
        .unwrap();
    assert_eq!(
        (retained.decided, retained.ack),
        (Some(Decided::Retained), Some(Ack::Puback(3)))
    );
    assert_eq!(
        (flash.stats(), *r.state(), r.counts().retained),
        (before, 0, 1)
    );
    // DUP 1 is counted, never used: a first receipt with DUP 1 is applied.
    let dup = r
        .decide(
            &mut flash,
            &at(QoS::AtLeastOnce, Some(4), true, false),
            Some(6),
        )
        .unwrap();
    assert_eq!(
        (dup.decided, *r.state(), r.counts().redeliveries),
        (Some(Decided::Applied), 6, 1)
    );
    // A QoS 1 or 2 PUBLISH must carry an identifier.
    let none = r.decide(
        &mut flash,
        &at(QoS::ExactlyOnce, None, false, false),
        Some(1),
    );
    assert_eq!(none, Err(ReceiveError::NoIdentifier));
}

#[test]
fn a_broker_that_lost_the_session_leaves_held_identifiers_standing_for_nothing() {
    let mut flash = Flash::new();
    let mut r = open(&mut flash, Keep::Flash, Release::Now);
    qos2(&mut r, &mut flash, 1, Some(5));
    qos2(&mut r, &mut flash, 2, Some(5));
    assert_eq!(r.connected(&mut flash, true).unwrap(), 0);
    assert_eq!(r.held().as_slice(), &[1, 2]);
    // Session present 0: the two are forgotten durably, and counted for the report.
    assert_eq!(r.connected(&mut flash, false).unwrap(), 2);
    let r = open(&mut flash, Keep::Flash, Release::Now);
    assert_eq!((r.held().as_slice(), *r.state()), (&[][..], 10));
}
