//! A dosing pump on idem-core, as an adopter writes it: commands from a gateway's log,
//! `Dispense { ml }` pumped once for each command id however often it is resent or
//! replayed, `SetRate` kept and re-asserted at every boot (it is idempotent).
//!
//! - The store is `MessageIdWindow<Pump, 16>`: the command ids of the last 16 commands
//!   in the same record as the pump's state, so a resend under a new offset is skipped.
//! - A dose is an effect that moves hardware ([`idem_core::effects`]): its intent is in
//!   the store's record, its done in a ledger of its own; a boot that finds a dose
//!   without its done asks the pump's own counter whether it was pumped (exactly once).
//! - The firmware in the field (v1, [`PumpV1`]) kept no intents; this one (v2, [`Pump`])
//!   migrates its journal at every boot ([`migrate_window`]), command-id window
//!   included, so a command sent before the update and again after it doses once.
//! - A step either consumes a command or pumps the dose the step before made durable
//!   and writes its done ([`Controller::step`]), so a reset can fall between the two.
//!
//! The flash: 6 pages of 4 KiB from `first` (4-byte units, the nRF52840's NVMC): 2 for
//! the positions, 2 for the store, 2 for the ledger.
#![no_std]
#![deny(missing_docs)]

use core::convert::Infallible;

use embedded_storage::nor_flash::NorFlash;
#[cfg(feature = "async")]
use embedded_storage_async::nor_flash::NorFlash as AsyncNorFlash;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::effects::{Choice, Intent, Ledger};
use idem_core::journal::Region;
use idem_core::log::{Event, Identified, Log, MessageId};
use idem_core::persist::{EachEffect, Layout};
#[cfg(feature = "async")]
use idem_core::store::migrate_window_async;
use idem_core::store::{MessageIdWindow, Outcome, Store, migrate_window};
use serde::{Deserialize, Serialize};

/// The command-id window: the last 16 commands.
pub const WINDOW: usize = 16;
/// The layout's tag: this application's journals.
pub const LAYOUT_TAG: u32 = 0x0D05_E000;
/// The ledger's tag.
pub const LEDGER_TAG: u32 = 0x0D05_ED00;

/// What a command asks of the pump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Pump this many millilitres, once.
    Dispense {
        /// Millilitres.
        ml: u16,
    },
    /// Set the flow rate: idempotent.
    SetRate {
        /// Millilitres a minute.
        ml_per_min: u16,
    },
}

/// A command from the gateway: its id (the same on every resend) and what it asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// The gateway's command id.
    pub id: u64,
    /// What it asks.
    pub kind: Kind,
}

impl Identified for Command {
    fn id(&self) -> MessageId {
        MessageId(self.id)
    }
}

/// The v1 firmware's state: millilitres commanded and the rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PumpV1State {
    /// Millilitres commanded so far.
    pub commanded_ml: u64,
    /// The rate last set.
    pub rate: u16,
}

impl idem_core::MaxSize for PumpV1State {
    const POSTCARD_MAX_SIZE: usize = u64::POSTCARD_MAX_SIZE + u16::POSTCARD_MAX_SIZE;
}

/// The v1 firmware's pump: it drove the motor after each step and kept no intent.
#[derive(Clone, Copy, Debug, Default)]
pub struct PumpV1;

impl Store for PumpV1 {
    type Payload = Command;
    type State = PumpV1State;
    type Error = Infallible;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x9D05_0100;
    fn check(&self, _: &PumpV1State, _: &Event<Command>) -> Result<Outcome, Infallible> {
        Ok(Outcome::Applied)
    }
    fn apply(&self, s: &mut PumpV1State, e: &Event<Command>) {
        match e.payload.kind {
            Kind::Dispense { ml } => s.commanded_ml += u64::from(ml),
            Kind::SetRate { ml_per_min } => s.rate = ml_per_min,
        }
    }
}

/// The pump's durable state (v2): millilitres commanded, the rate, the doses
/// commanded since the update, and the newest dose intended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PumpState {
    /// Millilitres commanded so far (the pump's counter must reach it).
    pub commanded_ml: u64,
    /// The rate last set.
    pub rate: u16,
    /// Doses commanded since the update.
    pub doses: u32,
    /// The newest dose intended: durable before the motor turns.
    pub intent: Intent<u16>,
}

impl idem_core::MaxSize for PumpState {
    const POSTCARD_MAX_SIZE: usize = u64::POSTCARD_MAX_SIZE
        + u16::POSTCARD_MAX_SIZE
        + u32::POSTCARD_MAX_SIZE
        + Intent::<u16>::POSTCARD_MAX_SIZE;
}

/// The pump (v2).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pump;

impl Store for Pump {
    type Payload = Command;
    type State = PumpState;
    type Error = Infallible;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x9D05_0200;
    fn check(&self, _: &PumpState, _: &Event<Command>) -> Result<Outcome, Infallible> {
        Ok(Outcome::Applied)
    }
    fn apply(&self, s: &mut PumpState, e: &Event<Command>) {
        match e.payload.kind {
            Kind::Dispense { ml } => {
                s.commanded_ml += u64::from(ml);
                s.doses += 1;
                s.intent.issue(ml);
            }
            Kind::SetRate { ml_per_min } => s.rate = ml_per_min,
        }
    }
}

/// The v1 firmware's store.
pub type StoreV1 = MessageIdWindow<PumpV1, WINDOW>;
/// The pump's store.
pub type PumpStore = MessageIdWindow<Pump, WINDOW>;

/// v1's state in v2's encoding: nothing intended (v1 drove the motor within its step).
pub fn v1_to_v2(old: PumpV1State) -> PumpState {
    PumpState {
        commanded_ml: old.commanded_ml,
        rate: old.rate,
        doses: 0,
        intent: Intent::default(),
    }
}

/// Where the pump keeps its journals on the flash `F`, from page `first`: positions,
/// store and ledger.
pub const fn layout<F: NorFlash>(first: u32) -> (Layout, Region) {
    let layout = Layout::from_pages::<F>(first, 2, 2, LAYOUT_TAG);
    (layout, layout.sink.next::<F>(2))
}

/// [`layout`] on an async flash (feature `async`).
#[cfg(feature = "async")]
pub const fn layout_async<F: AsyncNorFlash>(first: u32) -> (Layout, Region) {
    let layout = Layout::from_pages_async::<F>(first, 2, 2, LAYOUT_TAG);
    (layout, layout.sink.next_async::<F>(2))
}

/// The pump's motor, and the counter it keeps of its own (a flow meter's total).
pub trait Motor {
    /// Pumps `ml` millilitres.
    fn dispense(&mut self, ml: u16);
    /// Millilitres pumped since it was installed: its own count, kept across resets.
    fn dispensed_ml(&self) -> u64;
    /// Sets the flow rate.
    fn set_rate(&mut self, ml_per_min: u16);
}

/// The pump's errors: its flash's, or a journal that is not its own.
pub type Error<E> = ConsumerError<E, Infallible>;

/// What a [`Controller::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Did {
    /// The consumer stepped; a dose it applied is pumped by the next step.
    Consumed(Step<Command>),
    /// The dose the step before made durable was pumped and its done written.
    Dosed(u16),
}

/// The controller: the consumer of the gateway's log and the ledger of doses.
#[derive(Debug)]
pub struct Controller {
    consumer: Consumer<PumpStore>,
    ledger: Ledger,
}

/// Checkpoints every 8 commands.
fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(8).expect("8 is not zero"))
}

/// The pump's store.
fn store() -> PumpStore {
    PumpStore::new(Pump, WINDOW).expect("the window fits its capacity")
}

// Each flash step below is a blocking method and, with feature `async`, its `_async`
// twin: the same calls, awaited. What they decide is in the methods they share
// (`settle`, `dose`, `stepped`), written once.
impl Controller {
    /// The boot: migrates a v1 journal (nothing once done), recovers, decides the dose
    /// a reset left without its done by asking the motor's counter, and re-asserts the
    /// rate.
    pub fn boot<F: NorFlash, M: Motor>(
        flash: &mut F,
        motor: &mut M,
        first: u32,
    ) -> Result<Self, Error<F::Error>> {
        let (layout, ledger) = layout::<F>(first);
        migrate_window::<PumpV1, Pump, WINDOW, true, F>(flash, &layout, v1_to_v2)?;
        let ledger = Ledger::open(flash, ledger, LEDGER_TAG)?;
        let mut pump = Self::opened(Consumer::open(flash, layout, store(), config())?, ledger);
        if let Some(serial) = pump.settle(motor) {
            pump.ledger.done(flash, serial)?;
        }
        Ok(pump)
    }

    /// One step: the dose the last step made durable, pumped and marked done, if
    /// there is one; else the consumer's step, and the rate it sets. A dose's intent
    /// is durable one step before the motor turns, so a reset can fall between them.
    pub fn step<F: NorFlash, M: Motor, L: Log<Command> + ?Sized>(
        &mut self,
        flash: &mut F,
        motor: &mut M,
        log: &L,
    ) -> Result<Did, Error<F::Error>> {
        if let Some((serial, ml)) = self.dose(motor) {
            self.ledger.done(flash, serial)?;
            return Ok(Did::Dosed(ml));
        }
        let step = self.consumer.step(flash, log)?;
        Ok(Self::stepped(step, motor))
    }

    /// Steps to the end of what the log holds.
    pub fn run<F: NorFlash, M: Motor, L: Log<Command> + ?Sized>(
        &mut self,
        flash: &mut F,
        motor: &mut M,
        log: &L,
    ) -> Result<(), Error<F::Error>> {
        while self.step(flash, motor, log)? != Did::Consumed(Step::Done) {}
        Ok(())
    }

    /// [`Controller::boot`] on an async flash (feature `async`): embassy's async
    /// `NorFlash`, or a blocking one through embassy-embedded-hal's `BlockingAsync`.
    #[cfg(feature = "async")]
    pub async fn boot_async<F: AsyncNorFlash, M: Motor>(
        flash: &mut F,
        motor: &mut M,
        first: u32,
    ) -> Result<Self, Error<F::Error>> {
        let (layout, ledger) = layout_async::<F>(first);
        migrate_window_async::<PumpV1, Pump, WINDOW, true, F>(flash, &layout, v1_to_v2).await?;
        let ledger = Ledger::open_async(flash, ledger, LEDGER_TAG).await?;
        let consumer = Consumer::open_async(flash, layout, store(), config()).await?;
        let mut pump = Self::opened(consumer, ledger);
        if let Some(serial) = pump.settle(motor) {
            pump.ledger.done_async(flash, serial).await?;
        }
        Ok(pump)
    }

    /// [`Controller::step`] on an async flash (feature `async`).
    #[cfg(feature = "async")]
    pub async fn step_async<F: AsyncNorFlash, M: Motor, L: Log<Command> + ?Sized>(
        &mut self,
        flash: &mut F,
        motor: &mut M,
        log: &L,
    ) -> Result<Did, Error<F::Error>> {
        if let Some((serial, ml)) = self.dose(motor) {
            self.ledger.done_async(flash, serial).await?;
            return Ok(Did::Dosed(ml));
        }
        let step = self.consumer.step_async(flash, log).await?;
        Ok(Self::stepped(step, motor))
    }

    /// [`Controller::run`] on an async flash (feature `async`).
    #[cfg(feature = "async")]
    pub async fn run_async<F: AsyncNorFlash, M: Motor, L: Log<Command> + ?Sized>(
        &mut self,
        flash: &mut F,
        motor: &mut M,
        log: &L,
    ) -> Result<(), Error<F::Error>> {
        while self.step_async(flash, motor, log).await? != Did::Consumed(Step::Done) {}
        Ok(())
    }

    /// The controller over what the boot opened.
    fn opened(consumer: Consumer<PumpStore>, ledger: Ledger) -> Self {
        Self { consumer, ledger }
    }

    /// At boot: the dose a reset left without its done, pumped if the motor's counter
    /// says it was not (`Choice::Asked`), and the rate re-asserted. The serial whose
    /// done to write, if there was one.
    fn settle<M: Motor>(&self, motor: &mut M) -> Option<u32> {
        let state = self.state();
        let dose = self.ledger.pending(&state.intent);
        if let Some(dose) = dose {
            let happened = motor.dispensed_ml() == state.commanded_ml;
            if let Some(ml) = dose.decide(Choice::Asked { happened }) {
                motor.dispense(ml);
            }
        }
        motor.set_rate(state.rate);
        dose.map(|d| d.serial)
    }

    /// The dose the last step made durable, pumped: its serial and millilitres.
    fn dose<M: Motor>(&self, motor: &mut M) -> Option<(u32, u16)> {
        let dose = self.ledger.pending(&self.state().intent)?;
        motor.dispense(dose.action);
        Some((dose.serial, dose.action))
    }

    /// What a consumer's step did, the rate it set applied to the motor.
    fn stepped<M: Motor>(step: Step<Command>, motor: &mut M) -> Did {
        if let Step::Effect(event, Outcome::Applied) = step
            && let Kind::SetRate { ml_per_min } = event.payload.kind
        {
            motor.set_rate(ml_per_min);
        }
        Did::Consumed(step)
    }

    /// The dose whose intent is durable and whose done is not: the next step pumps it.
    pub fn due(&self) -> Option<u16> {
        self.ledger.pending(&self.state().intent).map(|d| d.action)
    }

    /// The offset of the next command to read.
    pub fn next_offset(&self) -> u64 {
        self.consumer.next_offset()
    }

    /// The pump's state.
    pub fn state(&self) -> &PumpState {
        &self.consumer.state().state
    }

    /// The command ids in the window, oldest first.
    pub fn window(&self) -> impl Iterator<Item = u64> + '_ {
        self.consumer.state().seen.iter().map(|id| id.0)
    }
}

/// What both nRF52840 binaries run, the blocking and the async: a motor whose flow meter
/// is a counter in RAM (a real one keeps it in the meter) and the gateway's log as a
/// fixed list (a transport is the application's).
pub mod demo {
    use idem_core::log::Event;

    use crate::{Command, Kind, Motor};

    /// The first of the pump's 6 pages at the top of an nRF52840: 0xFA000 / 4 KiB.
    pub const FIRST_PAGE: u32 = 250;

    /// A motor whose flow meter is a counter.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Counter {
        /// Millilitres pumped.
        pub dispensed: u64,
        /// The flow rate set.
        pub rate: u16,
    }

    impl Motor for Counter {
        fn dispense(&mut self, ml: u16) {
            self.dispensed += u64::from(ml);
        }
        fn dispensed_ml(&self) -> u64 {
            self.dispensed
        }
        fn set_rate(&mut self, ml_per_min: u16) {
            self.rate = ml_per_min;
        }
    }

    /// The gateway's log: two doses, a rate, and the first dose resent.
    pub const LOG: [Event<Command>; 4] = [
        command(0, 1, Kind::Dispense { ml: 5 }),
        command(1, 2, Kind::SetRate { ml_per_min: 40 }),
        command(2, 3, Kind::Dispense { ml: 3 }),
        command(3, 1, Kind::Dispense { ml: 5 }),
    ];

    /// Command `id` at `offset`.
    const fn command(offset: u64, id: u64, kind: Kind) -> Event<Command> {
        Event {
            offset,
            payload: Command { id, kind },
        }
    }
}
