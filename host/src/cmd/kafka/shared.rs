//! `kafka consume --shared`: one member of a consumer group, which takes and loses
//! partitions as the broker assigns them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
use idem_core::log::Offset;
use idem_sim::payment::{SumSinks, Total};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use super::client::{ISOLATION_LEVEL, committed, fetching, reader, unreachable};
use super::consume::{ConsumeOptions, GroupCommit, PARTITION_PAGES, PartitionResult, layout};
use super::read::{end_offsets, positions, truth_read};
use super::streamed::{BATCH, POLL};
use crate::device;
use crate::drive::Drive;
use crate::image::{Image, PAGE};
use crate::kafka::group::{
    SESSION_TIMEOUT, Take, TakeAction, group_copy, group_offset, member_may_stop, rebalance,
};
use crate::kafka::stream::{Judge, Window};
use crate::kafka::trust::ReadRules;
use crate::select::HostSinks;
use crate::select::dispatch::SinksJob;

/// A partition this member owns in `--shared` mode.
struct Owned<K: SumSinks> {
    consumer: Consumer<K>,
    /// The rules over the partition's records, read from offset 0.
    judge: Judge,
    /// What has arrived and the consumer has not passed.
    window: Window,
    /// The group's committed offset when this member took the partition.
    group_at_take: Offset,
}

/// `--shared`: one member of a consumer group. The broker assigns partitions and moves
/// them on a rebalance (a member joins, leaves, or stops heartbeating). The group's
/// committed offset is then the position's one truth, since a partition's next owner
/// must see it; the image is this member's copy of each partition's state. A store's
/// state at a position is the fold of the partition's records before it (for the
/// idempotent stores, whatever replays happened), so a member that takes a partition
/// keeps its image's state when its position equals the group's offset, and otherwise
/// erases it and folds the records again up to the group's offset before going on
/// ([`Take::decide`]).
pub(super) struct SharedConsume<'a> {
    image: &'a mut Image,
    member: Member<'a>,
}

/// A member's clients and rules.
struct Member<'a> {
    group: BaseConsumer,
    reader: BaseConsumer,
    topic: &'a str,
    brokers: &'a str,
    checkpoint_every: CheckpointEvery,
    pace: Duration,
    rules: ReadRules,
    /// Stop after this long with nothing new.
    idle: Duration,
    /// Give up a read that brings nothing for this long.
    stall: Duration,
    abort_after: Option<u64>,
}

/// What a consume ended with: each partition consumed, and for a group member which
/// partitions it took (and how) and lost to rebalances.
pub(super) struct SharedOut {
    pub(super) results: Vec<PartitionResult>,
    pub(super) taken: Vec<Take>,
    pub(super) released: Vec<i32>,
}

/// The longest a member runs.
const MEMBER_LIFETIME: Duration = Duration::from_secs(600);

impl<'a> SharedConsume<'a> {
    /// A member of `o.group` consuming into `image`, its partitions read by `rules`.
    pub(super) fn new(
        o: &ConsumeOptions<'a>,
        image: &'a mut Image,
        every: CheckpointEvery,
        rules: ReadRules,
    ) -> anyhow::Result<Self> {
        let group = fetching(o.brokers)
            .set("group.id", o.group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", ISOLATION_LEVEL)
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // A member that stops heartbeating (killed) loses its partitions after 6 s.
            .set(
                "session.timeout.ms",
                SESSION_TIMEOUT.as_millis().to_string(),
            )
            .set("heartbeat.interval.ms", "1000")
            // A rebalance waits this long at most for a member to rejoin.
            .set("max.poll.interval.ms", "10000")
            .create()
            .map_err(|e| unreachable(o.brokers, e))?;
        let reader = reader(o.brokers)?;
        let member = Member {
            group,
            reader,
            topic: o.topic,
            brokers: o.brokers,
            checkpoint_every: every,
            pace: o.pace,
            rules,
            // The member stops after `--idle-ms` with nothing new.
            idle: rules.idle,
            stall: o.stall,
            abort_after: o.abort_after,
        };
        Ok(Self { image, member })
    }
}

impl Member<'_> {
    /// Has the reader fetch the partitions `owned`, each from the offset after the last
    /// record its rules judged (0 for one just taken).
    fn follow<K: SumSinks>(&self, owned: &BTreeMap<i32, Owned<K>>) -> anyhow::Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (&p, o) in owned {
            tpl.add_partition_offset(self.topic, p, KOffset::Offset(o.judge.next() as i64))
                .context("assigning a partition")?;
        }
        self.reader.assign(&tpl).context("assigning the partitions")
    }

    /// Takes partition `p`: opens its consumer on the image, and keeps or rebuilds the
    /// image's state as [`Take::decide`] says. Its records are then read from offset 0
    /// (the rules over them see every one), streamed.
    fn take<K: HostSinks>(
        &self,
        image: &mut Image,
        p: i32,
        sinks: &K,
    ) -> anyhow::Result<(Owned<K>, Take)> {
        let config = ConsumerConfig::every(self.checkpoint_every);
        let group_offset = group_offset(committed(&self.group, self.brokers, self.topic, p)?);
        let layout = layout(image, p);
        let mut consumer = Consumer::open(&mut image.flash, layout, sinks.clone(), config)
            .map_err(|e| device::consumer_error(image, e))?;
        let take = Take::decide(p, group_offset, consumer.next_offset());
        if take.action == TakeAction::Rebuilt {
            let from = layout.positions.start;
            let to = from + PARTITION_PAGES * PAGE as u32;
            embedded_storage::nor_flash::NorFlash::erase(&mut image.flash, from, to).map_err(
                |e| {
                    anyhow::anyhow!(
                        "{}: erasing partition {p}'s pages: {e:?}",
                        image.path.display()
                    )
                },
            )?;
            consumer = Consumer::open(&mut image.flash, layout, sinks.clone(), config)
                .map_err(|e| device::consumer_error(image, e))?;
        }
        eprintln!(
            "took partition {p}: the group's offset {group_offset}, this image's {}: {}",
            take.image_offset,
            take.action.name()
        );
        let from = consumer.next_offset();
        let owned = Owned {
            consumer,
            judge: Judge::new(p, self.rules),
            window: Window::new(p, image.id_key(), from, Offset::MAX),
            group_at_take: group_offset,
        };
        Ok((owned, take))
    }
}

impl SinksJob for SharedConsume<'_> {
    type Out = SharedOut;
    fn call<K: HostSinks>(self, sinks: K) -> anyhow::Result<SharedOut> {
        let Self { image, member } = self;
        for p in 0..(image.meta.pages / PARTITION_PAGES) as i32 {
            device::void_in_doubt::<K>(image, layout(image, p))?;
        }
        let partitions = (image.meta.pages / PARTITION_PAGES) as i32;
        let mut owned: BTreeMap<i32, Owned<K>> = BTreeMap::new();
        let (mut taken, mut released) = (Vec::new(), Vec::new());
        let mut commits = 0u64;
        member
            .group
            .subscribe(&[member.topic])
            .context("subscribing to the topic")?;
        let started = Instant::now();
        let mut last_change = Instant::now();
        let mut last_assigned = BTreeSet::new();
        loop {
            if crate::cleanup::stop_requested() {
                return Err(crate::cleanup::Interrupted.into());
            }
            anyhow::ensure!(
                started.elapsed() < MEMBER_LIFETIME,
                "still consuming {} after {} s",
                member.topic,
                MEMBER_LIFETIME.as_secs()
            );
            // Rebalances happen inside poll: drop what was revoked, take what is new.
            if let Some(Err(e)) = member.group.poll(Duration::ZERO) {
                return Err(anyhow::Error::new(e).context(format!("reading {}", member.topic)));
            }
            let assigned: BTreeSet<i32> = member
                .group
                .assignment()
                .context("reading the group's assignment")?
                .elements_for_topic(member.topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            if assigned != last_assigned {
                eprintln!("the group assigned this member partitions {assigned:?}");
                last_assigned = assigned.clone();
                last_change = Instant::now();
            }
            let held: BTreeSet<i32> = owned.keys().copied().collect();
            let (revoked, new) = rebalance(&held, &assigned);
            let changed: Vec<i32> = revoked.iter().chain(&new).copied().collect();
            for p in revoked {
                eprintln!("lost partition {p} to a rebalance");
                owned.remove(&p);
                released.push(p);
                last_change = Instant::now();
            }
            for p in new {
                let (o, take) = member.take(image, p, &sinks)?;
                taken.push(take);
                owned.insert(p, o);
                last_change = Instant::now();
            }
            if !changed.is_empty() {
                // The member's own reader fetches its partitions, each from where its
                // rules left off (offset 0 when just taken); the group's consumer only
                // keeps the membership and the commits, so it fetches nothing.
                member.group.pause(&member.group.assignment()?).ok();
                member.follow(&owned)?;
            }
            let waiting = owned.values().any(|o| o.window.len() > 0);
            let idle = match member
                .reader
                .poll(if waiting { Duration::ZERO } else { POLL })
            {
                Some(m) => {
                    let m = m.with_context(|| format!("reading {}", member.topic))?;
                    if let Some(o) = owned.get_mut(&m.partition()) {
                        let topic = member.topic;
                        o.window.take(
                            &mut o.judge,
                            (topic, m.offset()),
                            m.key(),
                            m.payload(),
                            &mut |_| {},
                        )?;
                        last_change = Instant::now();
                    }
                    false
                }
                None => {
                    let at = positions(&member.reader, member.topic, partitions);
                    for (&p, o) in &mut owned {
                        if let Some(&Some(position)) = at.get(p as usize) {
                            o.window.pass_to(position);
                        }
                    }
                    true
                }
            };
            let group = GroupCommit {
                group: &member.group,
                brokers: member.brokers,
                topic: member.topic,
                abort_after: member.abort_after,
            };
            for (&p, o) in &mut owned {
                if o.window.len() < BATCH && (o.window.len() == 0 || !idle) {
                    continue;
                }
                let at_take = o.group_at_take;
                let drive = Drive {
                    pace: member.pace,
                    stop: &|| false,
                    // A bounded number of steps between two polls, so that a rebalance
                    // (which happens inside poll) is never kept waiting for long.
                    steps: Some(64),
                    // While folding up to the group's offset, the group already has it:
                    // nothing to copy, nor to sync.
                    reports: &|next| group_copy(next, Some(at_take)).is_some(),
                };
                // Idle: a checkpoint closes at the last record received.
                let log = if idle {
                    o.window.log_to_here()
                } else {
                    o.window.log()
                };
                drive.run(&mut o.consumer, image, &log, &mut |next, total| {
                    commits += 1;
                    eprintln!(
                        "partition {p}: checkpoint: {}; total {total}",
                        crate::render::position_text(next)
                    );
                    group.copy(commits, p, next)
                })?;
                o.window.consumed_to(o.consumer.next_offset());
            }
            // Done: every owned partition applied to the end of what was read, and
            // nothing new (no record, no rebalance) for the idle period.
            let caught_up = owned.values().all(|o| o.window.len() == 0);
            if member_may_stop(
                caught_up,
                owned.is_empty(),
                last_change.elapsed(),
                member.idle,
            ) {
                break;
            }
        }
        // The true total of each partition held, up to where its consumer stopped, from
        // a read of its own.
        let parts: Vec<(i32, Offset)> = owned
            .iter()
            .map(|(&p, o)| (p, o.consumer.next_offset()))
            .collect();
        let rules = member.rules;
        let truth = truth_read(member.brokers, member.topic, &rules, &parts, member.stall)?;
        let after = end_offsets(&member.reader, member.brokers, member.topic, partitions)?;
        let mut results = Vec::new();
        for ((p, o), fold) in owned.into_iter().zip(truth) {
            results.push(PartitionResult {
                partition: p,
                total: o.consumer.total(),
                true_total: Some(fold.total()),
                next_offset: o.consumer.next_offset(),
                read: fold.facts(after[p as usize] as i64),
                group_was: None,
            });
        }
        member.group.unsubscribe();
        Ok(SharedOut {
            results,
            taken,
            released,
        })
    }
}
