//! The stream a board consumes: a scenario, a JSON Lines log or a Kafka partition, with
//! the configuration the board gets and the id that names it.

use idem_board::feed::{StoreId, StreamConfig};
use idem_payments::Payment;
use idem_payments::registry::{self, Source};

#[cfg(feature = "kafka")]
use super::Bridge;
use super::{Events, Stream, StreamArgs};
use idem_host::id_bytes::IdBytes;
use idem_lab::error::usage;
use idem_lab::select::{self, ScenarioArgs, ScenarioKind, StoreKind};

fn store_id(kind: StoreKind) -> anyhow::Result<StoreId> {
    StoreId::from_kind(kind).ok_or_else(|| {
        usage(format!(
            "the board runs {}, not {}",
            registry::list(StoreKind::on(Source::Board), " and "),
            kind.name()
        ))
    })
}

/// The id of a stream of events: another stream is another id. Ids that came as bytes
/// count by their bytes (their message ids depend on a key), so a rerun on the same file
/// names the same stream.
fn stream_id(events: &[Payment], id_bytes: Option<&IdBytes>) -> u32 {
    use core::hash::Hasher;
    // SipHash over the stream's bytes, fed a piece at a time (the same hash as of their
    // concatenation), so that no copy of a long stream is made to name it.
    let mut h = siphasher::sip::SipHasher24::new_with_key(&idem_core::log::IdKey::PUBLIC.0);
    for (i, e) in events.iter().enumerate() {
        let m = e.payload;
        let id = match id_bytes.and_then(|b| b.get(i)) {
            Some(b) => {
                h.write(&(b.len() as u64).to_le_bytes());
                h.write(b);
                0
            }
            None => m.id.0,
        };
        for word in [
            e.offset,
            id,
            u64::from(m.producer),
            u64::from(m.epoch),
            u64::from(m.seq),
            m.amount as u64,
        ] {
            h.write(&word.to_le_bytes());
        }
    }
    let h = h.finish();
    (h ^ (h >> 32)) as u32
}

/// A 32-bit id of `bytes`: the core's public-key id hash, folded.
#[cfg(any(feature = "kafka", test))]
fn short_id(bytes: &[u8]) -> u32 {
    let h = idem_core::log::MessageId::keyed(&idem_core::log::IdKey::PUBLIC, bytes).0;
    (h ^ (h >> 32)) as u32
}

impl StreamArgs {
    /// The stream of a Kafka partition, when `--topic` names one.
    #[cfg(feature = "kafka")]
    fn kafka(&self, store: StoreId) -> anyhow::Result<Option<Stream>> {
        let Some(topic) = &self.kafka.topic else {
            return Ok(None);
        };
        let group = self.kafka.group.as_deref().ok_or_else(|| {
            usage("--topic needs --group: the group that gets the board's position")
        })?;
        let mut source = Bridge::read(
            &self.kafka.brokers,
            topic,
            group,
            self.kafka.partition,
            store == StoreId::MessageId,
        )?;
        if source.amounts.is_empty() {
            return Err(usage(format!(
                "{topic} partition {} has no records",
                self.kafka.partition
            )));
        }
        let k = self.checkpoint_every.unwrap_or(10);
        let name = format!("kafka:{topic}/{}", self.kafka.partition);
        Ok(Some(Stream {
            true_total: source.true_total,
            config: StreamConfig {
                stream: short_id(name.as_bytes()),
                store,
                checkpoint_every: u32::try_from(k)
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(|| usage("the checkpoint interval must be 1 to 4294967295"))?,
                crash_after: self.crash_after,
            },
            name,
            events: Events::Amounts(std::mem::take(&mut source.amounts)),
            id_bytes: Some(std::mem::take(&mut source.id_bytes)),
            bridge: Some(source),
        }))
    }

    pub(super) fn load(&self) -> anyhow::Result<Stream> {
        #[cfg(feature = "kafka")]
        if let Some(stream) = self.kafka(store_id(self.store)?)? {
            return Ok(stream);
        }
        if self.scenario == Some(ScenarioKind::DualWrite) {
            return Err(usage(
                "dual-write writes two views; the board consumes a stream into one store",
            ));
        }
        select::check_pair(self.scenario, self.store)?;
        let store = store_id(self.store)?;
        let args = ScenarioArgs {
            events: self.events,
            checkpoint_every: self.checkpoint_every,
            no_crash: true,
            log: self.log.clone(),
            producer: self.producer,
            ..ScenarioArgs::default()
        };
        let loaded = select::load(self.scenario, &args)?;
        let events = loaded.all_events();
        if events.is_empty() {
            return Err(usage("the stream has no events"));
        }
        let k = loaded.consumer().checkpoint_every.get();
        let checkpoint_every = u32::try_from(k).map_err(|_| {
            usage(format!(
                "--checkpoint-every {k}: the board takes up to {}",
                u32::MAX
            ))
        })?;
        if let Some(o) = self.crash_after.filter(|&o| o >= events.len() as u64) {
            return Err(usage(format!(
                "--crash-after {o}: the stream has offsets 0..={}",
                events.len() - 1
            )));
        }
        // A log file's ids are the user's bytes: the board keys them.
        let id_bytes = self.log.as_ref().map(|_| {
            let mut ids = IdBytes::default();
            for o in 0..events.len() as u64 {
                ids.push(loaded.id_text(o).unwrap_or_default().as_bytes());
            }
            ids
        });
        Ok(Stream {
            name: loaded.name().to_string(),
            true_total: loaded.truth_by_prefix().last().copied().unwrap_or(0),
            config: StreamConfig {
                stream: stream_id(&events, id_bytes.as_ref()),
                store,
                checkpoint_every,
                crash_after: self.crash_after,
            },
            events: Events::Held(events),
            id_bytes,
            bridge: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::{Event, MessageId};
    use idem_payments::Message;

    /// The stream's id is the hash of its bytes as one piece, as before it was fed a piece
    /// at a time: a board that stored it from an earlier run still recognises its stream.
    #[test]
    fn a_stream_id_is_the_hash_of_its_bytes_in_one_piece() {
        let events: Vec<Payment> = (0..3u64)
            .map(|i| Event {
                offset: i,
                payload: Message {
                    id: MessageId(100 + i),
                    producer: 1,
                    epoch: 2,
                    seq: i as u32,
                    amount: -(i as i64),
                },
            })
            .collect();
        let mut bytes = Vec::new();
        for e in &events {
            let m = e.payload;
            for w in [e.offset, m.id.0, 1, 2, u64::from(m.seq), m.amount as u64] {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
        }
        assert_eq!(stream_id(&events, None), short_id(&bytes));
    }
}
