//! What the board and the host share: the micro:bit [`demo`] (the DDIA workload over
//! three sinks, stepped by the same [`Consumer`](crate::consumer::Consumer) the simulator
//! steps) and the [`wire`] frames it sends.

pub mod demo;
pub mod wire;
