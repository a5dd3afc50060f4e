//! Kafka's rules, apart from the broker: every function here takes plain values
//! (offsets, partition numbers, a record's key and value as bytes) and decides; `idem
//! kafka` and the board's bridge (`cmd::kafka`) read and commit through librdkafka and
//! ask these modules what it means.
//!
//! - [`record`]: one record: its payment, checked against the read's rules
//!   ([`record::ReadRules`]), the message idem applies for it, why one is stepped over.
//! - [`trust`]: which records of a partition read are trusted, stepped over or refused,
//!   the partition as the core reads a log, and when a read has reached the broker's end
//!   offset.
//! - [`group`]: when a `--shared` member takes a partition, whether it keeps or rebuilds
//!   its image's state, and what offset the group may copy of a durable position.
//! - [`stream`]: a partition read as a stream: each record judged in offset order, the
//!   records a consumer has not yet passed, and the true total folded from a read of its
//!   own.
//! - [`verdict`]: the verdict over the partitions' results.
//! - [`applied`]: the ids a `--truth` run applied, in a log beside the image, reconciled
//!   with the image's store records at each open.

pub mod applied;
pub mod group;
pub mod record;
pub mod stream;
pub mod trust;
pub mod verdict;
