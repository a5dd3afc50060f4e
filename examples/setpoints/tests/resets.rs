//! Every reset of a run of 1,000 commands (retries, replays and rejected commands among
//! them) ends with the table a plain fold gives: each command applied once. So does every
//! power cut of the first 200, at each flash operation, in each of the power-cut checker's
//! models (`idem_core::testing::cuts`).

use idem_core::consumer::{CheckpointEvery, ConsumerConfig};
use idem_core::persist::Layout;
use idem_core::store::OffsetStamp;
use idem_core::testing::flash::MemFlash;
use idem_core::testing::resets::every_reset;
use idem_example_setpoints::{ACTUATORS, Setpoints, outputs, store};

mod support;
use support::{commands, truth};

type Flash = MemFlash<6, 1024>;

#[test]
fn every_reset_of_a_thousand_commands_ends_exact() {
    let events = commands(1_000);
    let (table, rejected) = truth(&events);
    let distinct: std::collections::BTreeSet<u64> = events.iter().map(|e| e.payload.id).collect();
    assert_eq!(rejected, 28, "the log holds rejected commands");
    assert_eq!(events.len() - distinct.len(), 117, "and retries");
    let stream = idem_core::log::Received::new(&events, Some(1_000));
    let layout = Layout::from_pages::<Flash>(0, 2, 4, 0x0001);
    let config = ConsumerConfig::every(CheckpointEvery::new(10).unwrap());
    let found = every_reset(store(), layout, config, &stream, Flash::new, |s, r| {
        (outputs(s), r) == (table.setpoints, rejected)
    })
    .unwrap();
    assert_eq!((found.first_wrong, found.exact), (None, found.steps));
    assert_eq!(
        found.steps, 2_100,
        "1,000 deliveries, 1,000 effects, 100 commits"
    );
    // The offset stamp alone makes a replay harmless but applies a retry again: an old
    // setpoint overwrites a newer one, so the same sweep finds it wrong.
    let stamped = OffsetStamp(Setpoints);
    let found = every_reset(stamped, layout, config, &stream, Flash::new, |s, r| {
        (s.state.setpoints, r) == (table.setpoints, rejected)
    })
    .unwrap();
    assert_eq!((found.first_wrong, found.exact), (Some(1), 0));
}

/// What the power-cut checker's trials keep outside the flash: the table the run ended
/// with, and its count of rejected commands.
#[derive(Default)]
struct Ended(Option<([i16; ACTUATORS], u32)>);

#[test]
fn a_power_cut_at_every_flash_operation_of_two_hundred_commands_ends_exact() {
    use idem_core::consumer::{Consumer, Step};
    use idem_core::testing::cuts::{Plan, Seen, sweep};
    let events = commands(1_000);
    let events = &events[..200];
    let (table, rejected) = truth(events);
    let distinct: std::collections::BTreeSet<u64> = events.iter().map(|e| e.payload.id).collect();
    assert_eq!(
        (rejected, events.len() - distinct.len()),
        (9, 29),
        "rejected, retries"
    );
    let stream = idem_core::log::Received::new(events, Some(200));
    let layout = Layout::from_pages::<Flash>(0, 2, 4, 0x0001);
    let config = ConsumerConfig::every(CheckpointEvery::new(10).unwrap());
    let found = sweep(
        &Plan::new(),
        || (Flash::new(), Ended::default()),
        |flash, _| Consumer::open(flash, layout, store(), config),
        |c, flash, ended| match c.step(flash, &stream)? {
            Step::Done => {
                ended.0 = Some((outputs(c.state()), c.rejected()));
                Ok(None)
            }
            step => Ok(Some(step)),
        },
        |_, ended, seen| match seen {
            Seen::Ended if ended.0 != Some((table.setpoints, rejected)) => {
                Err(format!("ended with {:?}", ended.0))
            }
            Seen::Failed(e) => Err(format!("{e}")),
            Seen::Stuck => Err("stuck".into()),
            _ => Ok(()),
        },
    );
    found.assert_all_right();
    let r = found.reference;
    // 200 deliveries, 200 effects, 20 commits; journal format 3, records at their
    // encoded size (format 2's slots: 2_921 unit writes, 13 erases, 2_934 trials).
    assert_eq!((r.steps, r.unit_writes, r.erases), (420, 1_578, 8));
    assert_eq!(
        found.models.each_ref().map(|t| t.trials),
        [1_586, 1_586, 8, 420]
    );
}
