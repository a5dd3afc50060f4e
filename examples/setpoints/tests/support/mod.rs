//! What the sweeps share: a log of commands with retries and rejected ones, and the
//! table a plain fold of it gives.

use idem_core::log::Event;
use idem_core::testing::rng::SplitMix64;
use idem_example_setpoints::{ACTUATORS, Command, RANGE, Table};

/// `n` commands: new ones, a retry of one of the last 5 now and then, and some that no
/// actuator accepts.
pub fn commands(n: u64) -> Vec<Event<Command>> {
    let mut rng = SplitMix64::new(7);
    let mut sent: Vec<Command> = Vec::new();
    (0..n)
        .map(|offset| {
            let roll = rng.next_u64() % 100;
            let payload = match sent.len() {
                n if roll < 12 && n > 0 => sent[n - 1 - (rng.next_u64() as usize % n.min(5))],
                n => {
                    let bad = roll >= 94;
                    let c = Command {
                        id: n as u64 + 1,
                        actuator: (rng.next_u64() % if bad { 10 } else { 8 }) as u8,
                        setpoint: if bad && roll.is_multiple_of(2) {
                            5_000
                        } else {
                            (rng.next_u64() % 2_001) as i16 - 1_000
                        },
                    };
                    sent.push(c);
                    c
                }
            };
            Event { offset, payload }
        })
        .collect()
}

/// The truth, without idem: each distinct command once, in order.
pub fn truth(events: &[Event<Command>]) -> (Table, u32) {
    let (mut table, mut rejected, mut seen) = (Table::default(), 0, Vec::new());
    for c in events.iter().map(|e| e.payload) {
        if seen.contains(&c.id) {
            continue;
        }
        seen.push(c.id);
        match usize::from(c.actuator) {
            a if a < ACTUATORS && RANGE.contains(&c.setpoint) => table.setpoints[a] = c.setpoint,
            _ => rejected += 1,
        }
    }
    (table, rejected)
}
