//! What the board and the host share: the micro:bit [`demo`] (the DDIA workload over
//! three sinks, stepped by the same [`Consumer`](crate::consumer::Consumer) the simulator
//! steps), the [`feed`] protocol that makes the board consume a stream the host feeds it,
//! and the [`wire`] frames both travel in.

pub mod demo;
pub mod feed;
pub mod wire;
