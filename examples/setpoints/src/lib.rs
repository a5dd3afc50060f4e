//! An adopter's store on idem-core: the setpoints of 8 actuators, set by commands that
//! carry a message id, kept exactly once across resets and power loss on NOR flash.
//!
//! A command names an actuator and its new setpoint. One outside the table or the
//! actuators' range is rejected: the stream moves past it and the count of rejected
//! commands is kept beside the table. A command sent again (a retry after a lost ack, a
//! replay after a reset) is recognised by its id in a window of the last 16 and applied
//! once. Drive the outputs from [`outputs`] after each applied step, and once at boot:
//! a reset can fall between the flash write and the output.
#![no_std]

pub mod chip;

use idem_core::MaxSize;
use idem_core::log::{Event, Identified, MessageId};
use idem_core::persist::EachEffect;
use idem_core::store::{MessageIdWindow, Outcome, Store, Windowed};
use serde::{Deserialize, Serialize};

/// Actuators in the table.
pub const ACTUATORS: usize = 8;
/// The setpoints an actuator accepts.
pub const RANGE: core::ops::RangeInclusive<i16> = -1000..=1000;
/// Command ids the window remembers.
pub const WINDOW: usize = 16;

/// A command as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// The sender's id of the command, the same on every send of it.
    pub id: u64,
    /// Which actuator.
    pub actuator: u8,
    /// Its new setpoint.
    pub setpoint: i16,
}

impl Identified for Command {
    fn id(&self) -> MessageId {
        MessageId(self.id)
    }
}

/// The durable table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct Table {
    /// Each actuator's setpoint.
    pub setpoints: [i16; ACTUATORS],
}

/// The rule: set the actuator's setpoint, or reject the command.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setpoints;

impl Store for Setpoints {
    type Payload = Command;
    type State = Table;
    type Error = core::convert::Infallible; // it never fails: it applies or rejects
    type Rejections = u32;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5E70_0100;

    fn check(&self, _: &Table, e: &Event<Command>) -> Result<Outcome, Self::Error> {
        let c = e.payload;
        let known = usize::from(c.actuator) < ACTUATORS && RANGE.contains(&c.setpoint);
        Ok(if known {
            Outcome::Applied
        } else {
            Outcome::Rejected
        })
    }

    fn apply(&self, table: &mut Table, e: &Event<Command>) {
        table.setpoints[usize::from(e.payload.actuator)] = e.payload.setpoint;
    }
}

/// The setpoints behind the message-id window: what the consumer runs.
pub type Exactly = MessageIdWindow<Setpoints, WINDOW>;

/// The store the consumer runs.
pub fn store() -> Exactly {
    Exactly::default()
}

/// The setpoints to drive the outputs with.
pub fn outputs(state: &Windowed<Table, WINDOW>) -> [i16; ACTUATORS] {
    state.state.setpoints
}
