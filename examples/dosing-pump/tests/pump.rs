//! The pump on the host, on the strict in-memory NOR flash (6 pages of 4 KiB, 4-byte
//! units, as the nRF52840's NVMC): what it writes for 5,000 commands, and an update from
//! the v1 firmware swept with a power cut at every unit write and erase of the new
//! firmware's boots and a reset before and after each of its doses, judged by the
//! motor's own counter and the window's ids.

use std::cell::RefCell;
use std::rc::Rc;

use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::journal::{Journal, JournalError};
use idem_core::log::{Event, Received};
use idem_core::persist::{AppendedRecord, sink_tag};
use idem_core::store::Outcome;
use idem_core::testing::flash::{FlashError, MemFlash, PowerCut};
use idem_example_dosing_pump::{Command, Controller, Kind, Motor, PumpV1, StoreV1, WINDOW};

type Flash = MemFlash<6, 4096>;

/// The flash, shared with the motor so that a motor can lose power too.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Flash>>);

impl ErrorType for Shared {
    type Error = FlashError;
}

impl ReadNorFlash for Shared {
    const READ_SIZE: usize = Flash::READ_SIZE;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        self.0.borrow_mut().read(offset, bytes)
    }
    fn capacity(&self) -> usize {
        self.0.borrow().capacity()
    }
}

impl NorFlash for Shared {
    const WRITE_SIZE: usize = Flash::WRITE_SIZE;
    const ERASE_SIZE: usize = Flash::ERASE_SIZE;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        self.0.borrow_mut().erase(from, to)
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        self.0.borrow_mut().write(offset, bytes)
    }
}

/// A reset in a dose's life: before dose `n` pumps (its intent durable), or after it,
/// before its done.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reset {
    Before(u32),
    After(u32),
}

/// The motor: its own counters, and a reset to fall at one of its doses.
#[derive(Clone, Default)]
struct Rig {
    dispensed: u64,
    doses: u32,
    rate: u16,
    flash: Shared,
    reset: Option<Reset>,
}

impl Rig {
    /// The power fails now: the next flash operation fails, and the boot ends.
    fn lose_power(&mut self) {
        self.reset = None;
        self.flash
            .0
            .borrow_mut()
            .schedule_power_cut(PowerCut::AtWordWrite(1));
    }
}

impl Motor for Rig {
    fn dispense(&mut self, ml: u16) {
        if self.reset == Some(Reset::Before(self.doses + 1)) {
            return self.lose_power();
        }
        self.dispensed += u64::from(ml);
        self.doses += 1;
        if self.reset == Some(Reset::After(self.doses)) {
            self.lose_power();
        }
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
    let mut rig = Rig::default();
    let flash = rig.flash.clone();
    let mut f = flash.clone();
    let mut pump = Controller::boot(&mut f, &mut rig, 0).unwrap();
    pump.run(&mut f, &mut rig, &Received::new(&events, Some(5_000)))
        .unwrap();
    let ids: std::collections::HashSet<u64> = events.iter().map(|e| e.payload.id).collect();
    assert_eq!(ids.len(), 4_221);
    assert_eq!((rig.dispensed, rig.doses), (distinct.0, distinct.1));
    let flash = flash.0.borrow();
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
    assert_eq!((store, ledger), ((269_600, 67), (30_552, 8)));
}

/// The v1 firmware: it drove the motor after each step, and ran `steps` steps.
fn v1_firmware(flash: &mut Shared, rig: &mut Rig, events: &[Event<Command>], steps: usize) {
    let stream = Received::new(events, Some(events.len() as u64));
    let config = ConsumerConfig::every(CheckpointEvery::new(8).unwrap());
    let store = StoreV1::new(PumpV1, WINDOW).unwrap();
    let mut c = Consumer::open(
        flash,
        idem_example_dosing_pump::layout::<Shared>(0).0,
        store,
        config,
    )
    .unwrap();
    for _ in 0..steps {
        if let Step::Effect(e, Outcome::Applied) = c.step(flash, &stream).unwrap()
            && let Kind::Dispense { ml } = e.payload.kind
        {
            rig.dispense(ml);
        }
    }
}

/// The v2 firmware's boots until its run ends: the window at the end.
fn v2_firmware(flash: &mut Shared, rig: &mut Rig, events: &[Event<Command>]) -> Vec<u64> {
    let stream = Received::new(events, Some(events.len() as u64));
    for _boot in 0..4 {
        let run = Controller::boot(flash, rig, 0).and_then(|mut pump| {
            pump.run(flash, rig, &stream)?;
            // Judged at the end of every boot that ends: never ahead of the commands.
            assert!(rig.dispensed <= pump.state().commanded_ml);
            Ok(pump.window().collect())
        });
        match run {
            Ok(window) => return window,
            Err(ConsumerError::Journal(JournalError::Flash(FlashError::PowerCut))) => {
                flash.0.borrow_mut().power_on()
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("four boots without an end");
}

/// One run: the v1 firmware's steps, then the v2 firmware with a cut or a reset.
fn update(
    events: &[Event<Command>],
    steps: usize,
    cut: Option<PowerCut>,
    reset: Option<Reset>,
    seed: u64,
) -> (u64, u32, Vec<u64>) {
    let mut rig = Rig::default();
    let mut flash = rig.flash.clone();
    flash.0.borrow_mut().seed_noise(seed);
    v1_firmware(&mut flash, &mut rig, events, steps);
    if let Some(cut) = cut {
        flash.0.borrow_mut().schedule_power_cut(cut);
    }
    rig.reset = reset;
    let window = v2_firmware(&mut flash, &mut rig, events);
    (rig.dispensed, rig.doses, window)
}

#[test]
fn the_update_keeps_the_window_and_doses_once_at_every_cut() {
    // 300 commands, 45 resends: v1 runs 222 steps, leaving its window on both pages.
    let events = commands(300, 45);
    let truth = truth(&events);
    let steps = 222;
    let mut rig = Rig::default();
    let mut flash = rig.flash.clone();
    v1_firmware(&mut flash, &mut rig, &events, steps);
    let v1_doses = rig.doses;
    // Where v1's newest record is: its slot in its page.
    let (layout, _) = idem_example_dosing_pump::layout::<Shared>(0);
    let tag = sink_tag::<StoreV1>(&layout);
    let (journal, _) =
        Journal::<AppendedRecord<StoreV1>>::open(&mut flash, layout.sink, tag).unwrap();
    let slot = journal.newest().unwrap().slot;
    let before = flash.0.borrow().stats();
    let window = v2_firmware(&mut flash, &mut rig, &events);
    assert_eq!((rig.dispensed, rig.doses, window), truth);
    let cuts: Vec<PowerCut> = flash.0.borrow().stats().cuts_since(before).collect();
    let resets = (v1_doses + 1..=truth.1).flat_map(|n| [Reset::Before(n), Reset::After(n)]);
    let runs: Vec<_> = cuts
        .iter()
        .map(|&c| (Some(c), None))
        .chain(resets.map(|r| (None, Some(r))))
        .collect();
    for (seed, &(cut, reset)) in runs.iter().enumerate() {
        // A cut counts from when it is armed: after v1's part.
        let cut = cut.map(|c| match c {
            PowerCut::AtWordWrite(n) => PowerCut::AtWordWrite(n - before.word_writes),
            PowerCut::AtErase(n) => PowerCut::AtErase(n - before.erases),
            // `cuts_since` lists torn cuts only.
            other => unreachable!("{other:?} is not listed by cuts_since"),
        });
        assert_eq!(
            update(&events, steps, cut, reset, seed as u64),
            truth,
            "{cut:?} {reset:?}"
        );
    }
    assert_eq!(
        (truth.0, truth.1, v1_doses, slot, cuts.len(), runs.len()),
        (640, 230, 81, 4, 3_396, 3_694)
    );
}
