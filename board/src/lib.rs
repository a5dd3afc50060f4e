//! idem-board: what idem's micro:bit firmware and the host share. The [`demo`] device
//! (the DDIA workload over three sinks, stepped by the same
//! [`Consumer`](idem_core::consumer::Consumer) the simulator steps), the [`feed`]
//! protocol that makes the board consume a stream the host feeds it, and the [`wire`]
//! frames both travel in (COBS, CRC-32). `no_std`, no allocation: the firmware builds it
//! as it is, the host with `std`.
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]

pub mod demo;
pub mod feed;
pub mod modem;
pub mod storage;
pub mod timing;
pub mod wire;
