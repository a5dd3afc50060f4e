//! The pump on the host, on the strict in-memory NOR flash (6 pages of 4 KiB, 4-byte
//! units, as the nRF52840's NVMC): what it writes for 5,000 commands, and an update from
//! the v1 firmware judged by idem-core's power-cut checker (`testing::cuts::sweep`): a
//! cut at every unit write and erase of the new firmware's boots and steps in each model,
//! a reset after every step (so between a dose's durable intent and the motor turning),
//! second cuts in each recovery, every boot and step judged against the motor's own
//! counter and the run's end against the commands' truth.

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::log::{Event, Received};
use idem_core::persist::{EachEffect, Layout};
use idem_core::store::{MessageIdWindow, Outcome, Store};
use idem_core::testing::cuts::{Plan, Seen, sweep};
use idem_core::testing::flash::{FlashError, MemFlash};
use idem_example_dosing_pump::{Command, Controller, Did, Error, Kind, Motor, PumpState, WINDOW};

mod support;
use support::{Flash, v1_firmware};

/// The motor: its own counters (a flow meter's total and the doses it pumped), which a
/// reset does not touch.
#[derive(Clone, Debug, Default)]
struct Counter {
    dispensed: u64,
    doses: u32,
    rate: u16,
}

impl Motor for Counter {
    fn dispense(&mut self, ml: u16) {
        self.dispensed += u64::from(ml);
        self.doses += 1;
    }
    fn dispensed_ml(&self) -> u64 {
        self.dispensed
    }
    fn set_rate(&mut self, ml_per_min: u16) {
        self.rate = ml_per_min;
    }
}

/// `count` commands: command `i` resends the one `1 + i % 8` back when `(i + 1) * 2003
/// % count` is below `resends` (exactly `resends` of them, none first); every tenth of
/// the others sets the rate; the rest dispense `1 + i % 5` ml.
fn commands(count: u64, resends: u64) -> Vec<Event<Command>> {
    let mut out: Vec<Event<Command>> = Vec::new();
    for i in 0..count {
        let payload = if (i + 1) * 2003 % count < resends {
            out[(i - (1 + i % 8).min(i)) as usize].payload
        } else if i % 10 == 9 {
            Command {
                id: 10_000 + i,
                kind: Kind::SetRate {
                    ml_per_min: i as u16,
                },
            }
        } else {
            Command {
                id: 10_000 + i,
                kind: Kind::Dispense {
                    ml: (1 + i % 5) as u16,
                },
            }
        };
        out.push(Event { offset: i, payload });
    }
    out
}

/// What the pump must end with: millilitres, doses, and the last `WINDOW` distinct ids.
fn truth(events: &[Event<Command>]) -> (u64, u32, Vec<u64>) {
    let mut seen: Vec<u64> = Vec::new();
    let (mut ml, mut doses) = (0, 0);
    for e in events {
        if seen.contains(&e.payload.id) {
            continue;
        }
        seen.push(e.payload.id);
        if let Kind::Dispense { ml: m } = e.payload.kind {
            ml += u64::from(m);
            doses += 1;
        }
    }
    let window = seen[seen.len().saturating_sub(WINDOW)..].to_vec();
    (ml, doses, window)
}

#[test]
fn five_thousand_commands_with_resends_program_and_erase_this_much() {
    let events = commands(5_000, 779);
    let distinct = truth(&events);
    let mut motor = Counter::default();
    let mut flash = Flash::new();
    let mut pump = Controller::boot(&mut flash, &mut motor, 0).unwrap();
    pump.run(&mut flash, &mut motor, &Received::new(&events, Some(5_000)))
        .unwrap();
    let ids: std::collections::HashSet<u64> = events.iter().map(|e| e.payload.id).collect();
    assert_eq!(ids.len(), 4_221);
    assert_eq!((motor.dispensed, motor.doses), (distinct.0, distinct.1));
    let bytes = flash.page_bytes_written();
    let erases = flash.page_erases();
    let store: (u64, u32) = (bytes[..4].iter().sum(), erases[..4].iter().sum());
    let ledger: (u64, u32) = (bytes[4..].iter().sum(), erases[4..].iter().sum());
    println!(
        "5,000 commands (4,221 distinct): positions and store {} B programmed ({:.1} B a command), {} erases ({:.4} a command); ledger {} B ({:.1} B a command), {} erases ({:.4} a command)",
        store.0,
        store.0 as f64 / 5_000.0,
        store.1,
        f64::from(store.1) / 5_000.0,
        ledger.0,
        ledger.0 as f64 / 5_000.0,
        ledger.1,
        f64::from(ledger.1) / 5_000.0
    );
    assert_eq!((store, ledger), ((125_740, 31), (45_828, 12)));
}

/// What the checker's trials share: the motor, and what the judge has seen of the pump.
#[derive(Clone, Debug, Default)]
struct World {
    motor: Counter,
    /// Millilitres commanded as of the last boot or step judged.
    commanded: u64,
    /// The window when the run ended.
    window: Vec<u64>,
}

/// The pump pumped once for each dose it commanded: its counter is the state's
/// millilitres, less the one dose durable and not pumped yet, and so are its doses (v1's
/// `v1_doses` and the state's since the update).
fn pumped_once(world: &World, state: &PumpState, due: Option<u16>, v1_doses: u32) -> bool {
    let (due_ml, due_doses) = due.map_or((0, 0), |ml| (u64::from(ml), 1));
    world.motor.dispensed + due_ml == state.commanded_ml
        && world.motor.doses + due_doses == v1_doses + state.doses
}

/// The judge of one trial, after every boot and every step: pumped once, the
/// millilitres commanded growing by each applied dose (a boot may find the record in
/// flight durable), and at the end the truth's millilitres, doses and window.
fn judge(
    truth: &(u64, u32, Vec<u64>),
    v1_doses: u32,
    world: &mut World,
    seen: Seen<'_, Controller, (Did, PumpState, Option<u16>), Error<FlashError>>,
) -> Result<(), String> {
    match seen {
        Seen::Booted(pump) => {
            let state = pump.state();
            if pump.due().is_some() || !pumped_once(world, state, None, v1_doses) {
                return Err(format!("boot: {state:?} against {:?}", world.motor));
            }
            let grew = state.commanded_ml - world.commanded.min(state.commanded_ml);
            if state.commanded_ml < world.commanded || grew > 5 {
                return Err(format!(
                    "boot: {} ml after {}",
                    state.commanded_ml, world.commanded
                ));
            }
            world.commanded = state.commanded_ml;
            Ok(())
        }
        Seen::Stepped((did, state, due)) => {
            let dose = match did {
                Did::Consumed(Step::Effect(e, Outcome::Applied)) => match e.payload.kind {
                    Kind::Dispense { ml } => u64::from(ml),
                    Kind::SetRate { .. } => 0,
                },
                _ => 0,
            };
            if !pumped_once(world, state, *due, v1_doses)
                || state.commanded_ml != world.commanded + dose
            {
                return Err(format!("{did:?}: {state:?} due {due:?} against {world:?}"));
            }
            world.commanded = state.commanded_ml;
            Ok(())
        }
        Seen::Ended => {
            let end = (
                world.motor.dispensed,
                world.motor.doses,
                world.window.clone(),
            );
            if end == *truth {
                Ok(())
            } else {
                Err(format!("ended {end:?}"))
            }
        }
        Seen::Failed(e) => Err(format!("failed: {e:?}")),
        Seen::Stuck => Err("stuck".into()),
    }
}

#[test]
fn the_update_doses_once_and_keeps_the_window_at_every_cut_and_reset() {
    // 300 commands, 45 resends: v1 runs 222 steps (81 doses), leaving its window on both
    // pages; v2 boots, migrates, and steps to the end.
    let events = commands(300, 45);
    let truth = truth(&events);
    let stream = Received::new(&events, Some(events.len() as u64));
    let (v1_flash, v1_motor) = v1_firmware::<Counter>(&events, 222);
    let v1_doses = v1_motor.doses;
    let found = sweep(
        &Plan::new().double_cuts(2),
        || {
            let world = World {
                commanded: v1_motor.dispensed,
                motor: v1_motor.clone(),
                window: Vec::new(),
            };
            (v1_flash.clone(), world)
        },
        |flash, world| Controller::boot(flash, &mut world.motor, 0),
        |pump, flash, world| {
            let did = pump.step(flash, &mut world.motor, &stream)?;
            if did == Did::Consumed(Step::Done) {
                world.window = pump.window().collect();
                return Ok(None);
            }
            Ok(Some((did, *pump.state(), pump.due())))
        },
        |_, world, seen| judge(&truth, v1_doses, world, seen),
    );
    let tallies = found
        .models
        .each_ref()
        .map(|t| (t.trials, t.wrong, t.missed));
    println!("{:?}, trials by model {tallies:?}", found.reference);
    found.assert_all_right();
    assert_eq!((truth.0, truth.1, v1_doses), (640, 230, 81));
    let r = found.reference;
    assert_eq!((r.steps, r.unit_writes, r.erases), (566, 1_774, 5));
    // 1,779 first cuts torn and as many clean, each with 2 second cuts in its recovery;
    // 5 weak erases (9 second); a reset after each of 566 steps (1,130 second).
    let expected = [(5_337, 0, 0), (5_337, 0, 0), (14, 0, 0), (1_696, 0, 0)];
    assert_eq!(tallies, expected);
    assert_eq!((found.trials(), found.wrong()), (12_385, 0));
}

/// The issue's pump: millilitres, rate and doses as this one's, and an audit ring of the
/// last eight dosing commands' ids (no intent): 99 B at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct AuditState {
    commanded_ml: u64,
    rate: u16,
    doses: u32,
    audit: [u64; 8],
    next: u8,
}

impl idem_core::MaxSize for AuditState {
    const POSTCARD_MAX_SIZE: usize = 10 + 3 + 5 + 8 * 10 + 1;
}

#[derive(Clone, Copy, Debug, Default)]
struct AuditPump;

impl Store for AuditPump {
    type Payload = Command;
    type State = AuditState;
    type Error = std::convert::Infallible;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x9D05_A000;
    fn check(&self, _: &AuditState, _: &Event<Command>) -> Result<Outcome, Self::Error> {
        Ok(Outcome::Applied)
    }
    fn apply(&self, s: &mut AuditState, e: &Event<Command>) {
        match e.payload.kind {
            Kind::Dispense { ml } => {
                s.commanded_ml += u64::from(ml);
                s.doses += 1;
                s.audit[usize::from(s.next)] = e.payload.id;
                s.next = (s.next + 1) % 8;
            }
            Kind::SetRate { ml_per_min } => s.rate = ml_per_min,
        }
    }
}

/// Bytes programmed and erases on the 4 pages, for `events` through `store`.
fn flash_use<S>(store: MessageIdWindow<S, WINDOW>, events: &[Event<Command>]) -> (u64, u32)
where
    S: Store<Payload = Command, Persist = EachEffect<S>>,
    S::State: idem_core::MaxSize + serde::Serialize + serde::de::DeserializeOwned + Default,
    S::State: Copy + PartialEq + std::fmt::Debug,
{
    type Four = MemFlash<4, 4096>;
    let mut flash = Four::new();
    let layout = Layout::from_pages::<Four>(0, 2, 2, 0x0D05_A000);
    let config = ConsumerConfig::every(CheckpointEvery::new(8).unwrap());
    let mut c = Consumer::open(&mut flash, layout, store, config).unwrap();
    c.run(
        &mut flash,
        &Received::new(events, Some(events.len() as u64)),
    )
    .unwrap();
    (
        flash.stats().bytes_written,
        flash.page_erases().iter().sum(),
    )
}

#[test]
fn the_issues_pump_with_an_audit_ring_programs_and_erases_this_much() {
    let events = commands(5_000, 779);
    let ring = flash_use(MessageIdWindow::new(AuditPump, WINDOW).unwrap(), &events);
    let pump = flash_use(
        MessageIdWindow::new(idem_example_dosing_pump::Pump, WINDOW).unwrap(),
        &events,
    );
    for (name, (bytes, erases)) in [("audit ring (99 B)", ring), ("this pump (27 B)", pump)] {
        println!(
            "{name}: 5,000 commands, {bytes} B programmed ({:.1} B a command), {erases} erases ({:.4} a command)",
            bytes as f64 / 5_000.0,
            f64::from(erases) / 5_000.0
        );
    }
    assert_eq!((ring, pump), ((193_072, 48), (125_740, 31)));
}

/// The same update through the async doors (`Controller::boot_async`, `step_async`) on
/// the checker's async path (`testing::cuts::sweep_async`), beside the blocking doors on
/// `sweep`, from the same v1 flash: the same trials, none wrong. 70 commands (10
/// resends, each within the window: `commands(60, 9)` resends one 17 distinct ids
/// back, which a window of 16 doses again); v1 runs 52 steps.
#[cfg(feature = "async")]
#[test]
fn the_async_pump_doses_once_at_every_cut_as_the_blocking_one() {
    use idem_core::testing::cuts::{Found, sweep_async};
    let events = commands(70, 10);
    let truth = truth(&events);
    let stream = Received::new(&events, Some(events.len() as u64));
    let (v1_flash, v1_motor) = v1_firmware::<Counter>(&events, 52);
    let v1_doses = v1_motor.doses;
    let fresh = || {
        let world = World {
            commanded: v1_motor.dispensed,
            motor: v1_motor.clone(),
            window: Vec::new(),
        };
        (v1_flash.clone(), world)
    };
    // What a step reports, and the window at the end.
    let seen = |did: Did, pump: &Controller, world: &mut World| {
        if did == Did::Consumed(Step::Done) {
            world.window = pump.window().collect();
            return None;
        }
        Some((did, *pump.state(), pump.due()))
    };
    let plan = Plan::new().double_cuts(1);
    let blocking = sweep(
        &plan,
        fresh,
        |flash, world| Controller::boot(flash, &mut world.motor, 0),
        |pump, flash, world| {
            Ok(seen(
                pump.step(flash, &mut world.motor, &stream)?,
                pump,
                world,
            ))
        },
        |_, world, s| judge(&truth, v1_doses, world, s),
    );
    let asynch = embassy_futures::block_on(sweep_async(
        &plan,
        fresh,
        async |flash: &mut Flash, world: &mut World| {
            Controller::boot_async(flash, &mut world.motor, 0).await
        },
        async |pump: &mut Controller, flash: &mut Flash, world: &mut World| {
            let did = pump.step_async(flash, &mut world.motor, &stream).await?;
            Ok(seen(did, pump, world))
        },
        |_, world, s| judge(&truth, v1_doses, world, s),
    ));
    let tallies = |f: &Found<String>| f.models.each_ref().map(|t| (t.trials, t.wrong, t.missed));
    println!(
        "{:?}, trials by model {:?}",
        asynch.reference,
        tallies(&asynch)
    );
    assert_eq!(tallies(&asynch), tallies(&blocking));
    assert_eq!(asynch.reference, blocking.reference);
    assert_eq!((truth.0, truth.1), (150, 54));
    let r = asynch.reference;
    // Journal format 3: records at their encoded size (947 unit writes and 4,078 trials
    // in format 2's slots).
    assert_eq!((r.steps, r.unit_writes, r.erases), (133, 459, 4));
    let expected = [(926, 0, 0), (926, 0, 0), (8, 0, 0), (265, 0, 0)];
    assert_eq!(tallies(&asynch), expected);
    assert_eq!((asynch.trials(), asynch.wrong()), (2_126, 0));
}
