//! An MQTT session fits idem-core's journal: a source with no offsets.
//!
//! A QoS 2 receiver (MQTT 3.1.1 §4.3.3) must not apply a PUBLISH again while the broker
//! has not released its packet identifier with PUBREL, and a broker that holds a
//! persistent session sends every unreleased PUBLISH again after a reconnect (§4.4). So
//! the identifiers the receiver holds are part of its durable state: here they sit in one
//! `Journal` record with the effect, appended before PUBREC is sent, and forgotten in
//! another before PUBCOMP. No position is committed. The broker below keeps its side of
//! the session as the specification says; the device loses power at every unit write and
//! every erase of a reference run, recovers, reconnects, and the broker resends.
//!
//! The rules here are a test's, to show the layer fits; the board's MQTT receiver is its
//! own crate's work.

use idem_core::MaxSize;
use idem_core::journal::{Journal, JournalError, Region};
use idem_core::testing::flash::{FlashError, FlashStats, MemFlash, PowerCut};
use serde::{Deserialize, Serialize};

/// The broker's in-flight limit, and the identifiers the receiver can hold.
const INFLIGHT: usize = 4;
/// Messages in each run; message `i` carries the amount `i + 1`.
const MESSAGES: u16 = 30;
/// The sum of every amount, applied once each.
const TRUE_TOTAL: i64 = (MESSAGES as i64) * (MESSAGES as i64 + 1) / 2;
const REGION: Region = Region { start: 0, pages: 3 };
const TAG: u32 = 0x2B;

type Flash = MemFlash<3, 1024>;

/// The receiver's durable state: the effect and the identifiers not yet released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, MaxSize)]
struct Session {
    total: i64,
    applied: u32,
    /// Identifiers received and not released; 0 is a free place (MQTT's identifiers
    /// are 1 to 65,535).
    unreleased: [u16; INFLIGHT],
}

/// What the receiver sends back.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ack {
    Pubrec(u16),
    Pubcomp(u16),
}

#[derive(Debug)]
enum ReceiveError {
    Flash(JournalError<FlashError>),
    /// A new identifier with every place taken: the broker broke its in-flight limit.
    Full(u16),
}

/// Where the receiver keeps the identifiers it holds.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    /// In the record with the effect.
    OnFlash,
    /// In RAM only: a reset forgets them (the record keeps only the effect).
    InRam,
}

struct Receiver {
    journal: Journal<Session>,
    state: Session,
    keep: Keep,
}

impl Receiver {
    fn open(flash: &mut Flash, keep: Keep) -> Result<Self, JournalError<FlashError>> {
        let (journal, newest) = Journal::<Session>::open(flash, REGION, TAG)?;
        let mut state = newest.unwrap_or_default();
        if keep == Keep::InRam {
            state.unreleased = [0; INFLIGHT];
        }
        Ok(Self {
            journal,
            state,
            keep,
        })
    }

    fn write(&mut self, flash: &mut Flash, next: Session) -> Result<(), ReceiveError> {
        let mut record = next;
        if self.keep == Keep::InRam {
            record.unreleased = [0; INFLIGHT];
        }
        self.journal
            .append(flash, &record)
            .map_err(ReceiveError::Flash)?;
        self.state = next;
        Ok(())
    }

    /// A QoS 2 PUBLISH: applied on the first receipt of its identifier, with the
    /// identifier in the same record, before PUBREC; a held identifier is a duplicate,
    /// answered with PUBREC again and applied never (the DUP flag is not looked at).
    fn publish(&mut self, flash: &mut Flash, id: u16, amount: i64) -> Result<Ack, ReceiveError> {
        if self.state.unreleased.contains(&id) {
            return Ok(Ack::Pubrec(id));
        }
        let free = (self.state.unreleased.iter())
            .position(|&held| held == 0)
            .ok_or(ReceiveError::Full(id))?;
        let mut next = self.state;
        next.total += amount;
        next.applied += 1;
        next.unreleased[free] = id;
        self.write(flash, next)?;
        Ok(Ack::Pubrec(id))
    }

    /// A PUBREL: the identifier is forgotten durably, and only then PUBCOMP, since after
    /// it the broker may use the identifier for a new message. An unknown one still gets
    /// PUBCOMP.
    fn pubrel(&mut self, flash: &mut Flash, id: u16) -> Result<Ack, ReceiveError> {
        if let Some(at) = self.state.unreleased.iter().position(|&held| held == id) {
            let mut next = self.state;
            next.unreleased[at] = 0;
            self.write(flash, next)?;
        }
        Ok(Ack::Pubcomp(id))
    }
}

/// The broker's side of one persistent session, in order of first sending.
#[derive(Clone, Copy, Debug)]
enum InFlight {
    /// PUBLISH sent, PUBREC not received.
    Published { id: u16, message: u16 },
    /// PUBREL sent (or due), PUBCOMP not received.
    Released { id: u16 },
}

/// Runs the session to the end: the broker keeps at most `INFLIGHT` messages in flight,
/// sends each round's PUBLISHes, then its PUBRELs, and at each reconnect resends every
/// unacknowledged PUBLISH (DUP 1) and PUBREL first, in order. Identifiers are reused as
/// soon as PUBCOMP frees them. With `reset_after` the device resets once, just after its
/// record of that number (from 1) is durable, before its acknowledgement reaches the
/// broker. Returns the receiver's state at the end, the resets and the records written.
fn run(flash: &mut Flash, keep: Keep, reset_after: Option<u64>) -> (Session, u32, u64) {
    let mut inflight: Vec<InFlight> = Vec::new();
    let mut next_message = 0u16;
    let mut resets = 0;
    let mut records = 0;
    let mut receiver = Receiver::open(flash, keep).unwrap();
    'session: loop {
        // New messages, up to the in-flight limit, each on the lowest free identifier.
        while inflight.len() < INFLIGHT && next_message < MESSAGES {
            let id = (1..)
                .find(|id| !inflight.iter().any(|f| id_of(f) == *id))
                .unwrap();
            inflight.push(InFlight::Published {
                id,
                message: next_message,
            });
            next_message += 1;
        }
        if inflight.is_empty() {
            return (receiver.state, resets, records);
        }
        // Every in-flight message's packet, in order: PUBLISH, then PUBREL once PUBREC
        // is in.
        for i in 0..inflight.len() {
            let before = receiver.journal.appended();
            let (sent, id) = match inflight[i] {
                InFlight::Published { id, message } => {
                    (receiver.publish(flash, id, i64::from(message) + 1), id)
                }
                InFlight::Released { id } => (receiver.pubrel(flash, id), id),
            };
            records += receiver.journal.appended() - before;
            let sent = match sent {
                Ok(_) if receiver.journal.appended() > before && reset_after == Some(records) => {
                    Err(ReceiveError::Flash(JournalError::Flash(
                        FlashError::PowerCut,
                    )))
                }
                sent => sent,
            };
            match sent {
                Ok(Ack::Pubrec(got)) => {
                    assert_eq!(got, id);
                    inflight[i] = InFlight::Released { id };
                }
                Ok(Ack::Pubcomp(got)) => {
                    assert_eq!(got, id);
                    // Freed below, once this round's packets are sent.
                    inflight[i] = InFlight::Released { id: 0 };
                }
                Err(ReceiveError::Flash(JournalError::Flash(FlashError::PowerCut))) => {
                    // The device is down: nothing it had not acknowledged reached the
                    // broker. It boots, recovers and reconnects to its session.
                    inflight.retain(|f| id_of(f) != 0);
                    flash.cancel_power_cut();
                    flash.power_on();
                    resets += 1;
                    receiver = Receiver::open(flash, keep).unwrap();
                    continue 'session;
                }
                Err(e) => panic!("message with identifier {id}: {e:?}"),
            }
        }
        inflight.retain(|f| id_of(f) != 0);
    }
}

fn id_of(f: &InFlight) -> u16 {
    match *f {
        InFlight::Published { id, .. } | InFlight::Released { id } => id,
    }
}

/// Where a run resets.
#[derive(Clone, Copy, Debug)]
enum Reset {
    /// Power lost in a flash operation.
    Cut(PowerCut),
    /// Just after a record is durable, before its acknowledgement is out.
    AfterRecord(u64),
}

/// For each reset of a reference run, at every unit write, erase and record: the
/// receiver's end state.
fn sweep(keep: Keep) -> Vec<(Reset, Session)> {
    let mut reference = Flash::new();
    let (end, resets, records) = run(&mut reference, keep, None);
    assert_eq!((end.total, end.applied, resets), (TRUE_TOTAL, 30, 0));
    // Two records a message: one when it is applied (with its identifier), one when
    // PUBREL releases the identifier. Sharing the second with the next message's
    // record, the floor is one.
    assert_eq!(records, 2 * u64::from(MESSAGES));
    let points = reference
        .stats()
        .cuts_since(FlashStats::default())
        .map(Reset::Cut)
        .chain((1..=records).map(Reset::AfterRecord));
    points
        .enumerate()
        .map(|(seed, at)| {
            let mut flash = Flash::new();
            flash.seed_noise(seed as u64);
            let reset_after = match at {
                Reset::Cut(cut) => {
                    flash.schedule_power_cut(cut);
                    None
                }
                Reset::AfterRecord(n) => Some(n),
            };
            let (end, resets, _) = run(&mut flash, keep, reset_after);
            assert_eq!(resets, 1, "{at:?}");
            (at, end)
        })
        .collect()
}

#[test]
fn identifiers_kept_with_the_effect_apply_each_message_once_across_resets() {
    let mut reference = Flash::new();
    let mut receiver = Receiver::open(&mut reference, Keep::OnFlash).unwrap();
    assert_eq!(
        receiver.publish(&mut reference, 7, 5).unwrap(),
        Ack::Pubrec(7)
    );
    assert_eq!(
        receiver.publish(&mut reference, 7, 5).unwrap(),
        Ack::Pubrec(7)
    );
    assert_eq!(receiver.pubrel(&mut reference, 7).unwrap(), Ack::Pubcomp(7));
    assert_eq!(receiver.pubrel(&mut reference, 7).unwrap(), Ack::Pubcomp(7));
    assert_eq!((receiver.state.total, receiver.journal.appended()), (5, 2));

    let ends = sweep(Keep::OnFlash);
    assert_eq!(ends.len(), 552);
    for (at, end) in &ends {
        assert_eq!(
            (end.total, end.applied, end.unreleased),
            (TRUE_TOTAL, 30, [0; INFLIGHT]),
            "{at:?}"
        );
    }
}

#[test]
fn identifiers_kept_in_ram_apply_a_message_again_after_a_reset() {
    // The same broker, the same resets: a receiver that holds its identifiers in RAM
    // forgets them at a reset, takes the broker's resent PUBLISH for a new message and
    // applies it again, whenever the reset falls after the message's record is durable
    // and before its PUBREC is out: 30 of the 552 resets, one for each message, and
    // each message once, so the runs are over by the whole true total in all. No cut
    // in a flash operation does it in these runs: a record cut short never read back
    // whole, so the message it carried was not applied before its resend.
    let ends = sweep(Keep::InRam);
    let over: Vec<i64> = ends
        .iter()
        .map(|(_, end)| end.total - TRUE_TOTAL)
        .filter(|&d| d != 0)
        .collect();
    assert_eq!(
        (ends.len(), over.len(), over.iter().sum::<i64>()),
        (552, 30, TRUE_TOTAL)
    );
    assert!(over.iter().all(|&d| d > 0), "never under: {over:?}");
}

#[test]
fn a_new_identifier_with_every_place_taken_is_refused_and_writes_nothing() {
    let mut flash = Flash::new();
    let mut receiver = Receiver::open(&mut flash, Keep::OnFlash).unwrap();
    for id in 1..=INFLIGHT as u16 {
        receiver.publish(&mut flash, id, 1).unwrap();
    }
    let before = flash.stats();
    assert!(matches!(
        receiver.publish(&mut flash, 99, 1),
        Err(ReceiveError::Full(99))
    ));
    assert_eq!(flash.stats(), before);
    assert_eq!(receiver.state.total, INFLIGHT as i64);
    // The held ones are still duplicates, and the state reopens as it was.
    assert_eq!(receiver.publish(&mut flash, 2, 1).unwrap(), Ack::Pubrec(2));
    let reopened = Receiver::open(&mut flash, Keep::OnFlash).unwrap();
    assert_eq!(reopened.state, receiver.state);
}
