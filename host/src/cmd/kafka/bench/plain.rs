//! The bench's baseline: a plain librdkafka loop that sums a topic's payments, with the
//! fetch settings of every idem reader ([`client::FETCH`]) and nothing of idem's stores,
//! flash or checks.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::Consumer as _;
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset as KOffset, TopicPartitionList};
use serde::Deserialize;
use serde_json::json;

use super::super::client::{self, BROKER_TIMEOUT, unreachable};
use idem_lab::error::usage;

/// The longest the loop reads before it gives up.
const DEADLINE: Duration = Duration::from_secs(120);

/// A record's value, borrowed from the fetched payload.
#[derive(Deserialize)]
struct Payment<'a> {
    /// Parsed and left unused, as a plain consumer that sums amounts would.
    #[serde(borrow, rename = "payer")]
    _payer: &'a str,
    amount: i64,
}

/// `kafka plain-sum`: reads every partition of `topic` from offset 0 to the end offset it
/// had at the start (read_committed, no group commits), sums the amounts and prints
/// `{"records": .., "sum": ..}`.
pub(super) fn plain_sum(out: &mut impl Write, brokers: &str, topic: &str) -> anyhow::Result<()> {
    let c = client::reader(brokers)?;
    let n = client::partitions(&c, brokers, topic)?
        .ok_or_else(|| usage(format!("the broker has no topic {topic}")))?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..n {
        let (_, high) = c
            .fetch_watermarks(topic, p, BROKER_TIMEOUT)
            .map_err(|e| unreachable(brokers, e))?;
        ends.push(high);
        tpl.add_partition_offset(topic, p, KOffset::Offset(0))
            .context("assigning a partition")?;
    }
    c.assign(&tpl).context("assigning the partitions")?;
    // The next offset to read in each partition, by what arrived.
    let mut next = vec![0i64; n as usize];
    let (mut records, mut sum) = (0u64, 0i64);
    let started = Instant::now();
    while next.iter().zip(&ends).any(|(n, e)| n < e) {
        anyhow::ensure!(
            started.elapsed() < DEADLINE,
            "{topic}: after {} s the plain loop is at offsets {next:?} of the end offsets {ends:?}",
            DEADLINE.as_secs()
        );
        let Some(m) = c.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = match m {
            Ok(m) => m,
            // A lost connection, which librdkafka reestablishes: as a plain loop would,
            // go on polling.
            Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
            )) => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {topic}")),
        };
        let value = m.payload().unwrap_or_default();
        let pay: Payment<'_> = serde_json::from_slice(value).with_context(|| {
            format!(
                "{topic} partition {} offset {}: not a payment",
                m.partition(),
                m.offset()
            )
        })?;
        sum = sum
            .checked_add(pay.amount)
            .with_context(|| format!("{topic}: the amounts add up past a 64-bit sum"))?;
        records += 1;
        if let Some(at) = usize::try_from(m.partition())
            .ok()
            .and_then(|p| next.get_mut(p))
        {
            *at = (*at).max(m.offset() + 1);
        }
    }
    writeln!(out, "{}", json!({"records": records, "sum": sum}))?;
    Ok(())
}
