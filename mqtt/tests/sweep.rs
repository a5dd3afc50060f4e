//! The receive rules at every crash point: a reference run's every unit write and erase
//! cut by a power loss, and a reset after each of its records, before the
//! acknowledgements that record allowed are out; the broker keeps the session and sends
//! again what was not acknowledged (`idem_mqtt::sim`). 30 messages of amounts 1 to 9,
//! 141 in all, 4 in flight. Each figure is (reset points, runs over, by how much in all,
//! runs under, by how much in all).

use idem_mqtt::codec::QoS;
use idem_mqtt::receiver::{Keep, Release};
use idem_mqtt::sim::{self, Cell, Flash, Setup};
use idem_payments::registry::MessageIdStore;
use idem_payments::stores::Naive;

fn setup(qos: QoS, keep: Keep, release: Release) -> Setup {
    sim::setup((qos, keep, release))
}

fn figures(c: Cell) -> (usize, usize, i64, usize, i64) {
    (c.points, c.over.0, c.over.1, c.under.0, c.under.1)
}

fn naive(setup: Setup) -> (usize, usize, i64, usize, i64) {
    figures(sim::sweep(Naive, setup))
}

fn message_id(setup: Setup) -> (usize, usize, i64, usize, i64) {
    figures(sim::sweep(MessageIdStore::new(Naive, 32).unwrap(), setup))
}

fn records(setup: Setup) -> u64 {
    sim::run(&mut Flash::new(), Naive, setup, None).records
}

#[test]
fn qos_2_with_the_identifiers_in_flash_is_exact_at_every_reset_with_no_dedup_in_the_store() {
    // Two records a message when each release is written at once; the releases sharing
    // the next record, one a message and one for each round of 4 releases the broker
    // waits on (its in-flight limit is full of them): 30 + 8. The floor is 30.
    let now = setup(QoS::ExactlyOnce, Keep::Flash, Release::Now);
    let with_next = setup(QoS::ExactlyOnce, Keep::Flash, Release::WithNext);
    assert_eq!((records(now), records(with_next)), (60, 38));
    assert_eq!(naive(now), (644, 0, 0, 0, 0));
    assert_eq!(naive(with_next), (405, 0, 0, 0, 0));
    assert_eq!(message_id(with_next), (1889, 0, 0, 0, 0));
}

#[test]
fn qos_2_with_the_identifiers_in_ram_applies_a_message_again_at_a_reset_after_its_record() {
    // A reset after a message's record and before its PUBREC is out: the broker sends
    // it again (DUP 1), the identifier is forgotten, the naive store applies it again.
    // One such point for each message, so the 30 runs are over by 141 in all. The
    // message-id store skips the resend.
    let ram = setup(QoS::ExactlyOnce, Keep::Ram, Release::WithNext);
    assert_eq!(records(ram), 30);
    assert_eq!(naive(ram), (142, 30, 141, 0, 0));
    assert_eq!(message_id(ram), (1284, 0, 0, 0, 0));
}

#[test]
fn qos_1_is_exact_with_the_message_id_store_and_over_without_it() {
    let qos1 = setup(QoS::AtLeastOnce, Keep::Flash, Release::WithNext);
    assert_eq!(records(qos1), 30);
    assert_eq!(naive(qos1), (142, 30, 141, 0, 0));
    assert_eq!(message_id(qos1), (1284, 0, 0, 0, 0));
}

#[test]
fn qos_0_loses_what_was_on_the_wire_at_a_reset_and_never_applies_twice() {
    // QoS 0 has no acknowledgement and so no in-flight limit: the broker writes all 30
    // at once, and every reset but the one after the last record loses the message
    // whose record it cut and every one behind it on the wire. None is sent again.
    let qos0 = setup(QoS::AtMostOnce, Keep::Flash, Release::WithNext);
    assert_eq!(records(qos0), 30);
    assert_eq!(naive(qos0), (142, 0, 0, 141, -10326));
}

#[test]
fn a_broker_that_loses_the_session_loses_what_it_held_and_the_device_says_how_many_identifiers() {
    // A reset after the 10th record (the 10th message applied, its identifier held),
    // and the broker comes back with no session: session present 0. The device forgets
    // the identifiers it held, and counts them; the messages in flight and queued are
    // gone with the broker's session.
    let lost = Setup {
        lose_session: true,
        ..setup(QoS::ExactlyOnce, Keep::Flash, Release::Now)
    };
    let end = sim::run(
        &mut Flash::new(),
        Naive,
        lost,
        Some(sim::Reset::AfterRecord(10)),
    );
    // Records 1 to 4 apply p0 to p3, 5 to 8 release them, 9 and 10 apply p4 and p5:
    // the two held, and the total is 1 + 2 + ... + 6 of the 141.
    assert_eq!(end.resets, 1);
    assert_eq!((end.lost_identifiers, end.state.total), (2, 21), "{end:?}");
}
