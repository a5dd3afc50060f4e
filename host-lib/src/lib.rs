//! idem on a host computer: what the `idem` CLI needs that is neither parsing arguments
//! nor printing. A device's flash is an [`image`] file, with the same strict NOR rules
//! as the simulator's flash; [`image_consumer`] opens one and picks the scenario and
//! store it was made for, and the [`drive`] loop steps a consumer over it. A grade's
//! [`truth`] comes from outside idem (a truth file, a read of its own); [`kafka`] holds
//! Kafka's rules apart from the broker, [`mqtt`] the log of ids an MQTT image applied,
//! and [`id_bytes`] the ids that came as bytes. [`files`] checks what a path a person
//! names is before it is opened, [`cleanup`] removes this process's temporaries on
//! every path, and [`failure`] words an image's errors as one sentence each.
//!
//! Every rule of consuming is the core's (`idem-core`), every choice of scenario and
//! store the front end's (`idem-lab`); nothing here parses a command line.

pub mod cleanup;
pub mod drive;
pub mod failure;
pub mod files;
pub mod id_bytes;
pub mod image;
pub mod image_consumer;
pub mod kafka;
pub mod mqtt;
#[cfg(test)]
mod own_store;
pub mod truth;
