//! `kafka consume --shared`: one member of a consumer group, which takes and loses
//! partitions as the broker assigns them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
use idem_core::log::Offset;
use idem_payments::{SumSinks, Total};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use super::client::{ISOLATION_LEVEL, committed, fetching, reader, unreachable};
use super::partition::{
    BATCH, ConsumeOptions, GroupCommit, PARTITION_PAGES, POLL, PartitionResult, SharedOut, layout,
};
use super::read::{end_offsets, positions, truth_read};
use idem_host::drive::Drive;
use idem_host::image::{Image, PAGE};
use idem_host::image_consumer;
use idem_host::kafka::group::{
    SESSION_TIMEOUT, Take, TakeAction, group_copy, group_offset, member_may_stop, rebalance,
};
use idem_host::kafka::stream::{Judge, Window};
use idem_host::kafka::trust::ReadRules;
use idem_lab::select::HostSinks;
use idem_lab::select::dispatch::SinksJob;

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
            .map_err(|e| image_consumer::consumer_error(image, e))?;
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
                .map_err(|e| image_consumer::consumer_error(image, e))?;
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

/// What a member holds as it runs: its partitions, what it took and lost, and when its
/// assignment or its records last changed.
struct Held<K: SumSinks> {
    owned: BTreeMap<i32, Owned<K>>,
    taken: Vec<Take>,
    released: Vec<i32>,
    /// The checkpoints whose positions the group was given a copy of.
    commits: u64,
    last_change: Instant,
    last_assigned: BTreeSet<i32>,
}

impl SinksJob for SharedConsume<'_> {
    type Out = SharedOut;
    fn call<K: HostSinks>(self, sinks: K) -> anyhow::Result<SharedOut> {
        let Self { image, member } = self;
        let partitions = (image.meta.pages / PARTITION_PAGES) as i32;
        for p in 0..partitions {
            image_consumer::void_in_doubt::<K>(image, layout(image, p))?;
        }
        let mut held = Held {
            owned: BTreeMap::new(),
            taken: Vec::new(),
            released: Vec::new(),
            commits: 0,
            last_change: Instant::now(),
            last_assigned: BTreeSet::new(),
        };
        member
            .group
            .subscribe(&[member.topic])
            .context("subscribing to the topic")?;
        let started = Instant::now();
        loop {
            if idem_host::cleanup::stop_requested() {
                return Err(idem_host::cleanup::Interrupted.into());
            }
            anyhow::ensure!(
                started.elapsed() < MEMBER_LIFETIME,
                "still consuming {} after {} s",
                member.topic,
                MEMBER_LIFETIME.as_secs()
            );
            member.reassign(image, &sinks, &mut held)?;
            let idle = member.poll(partitions, &mut held)?;
            member.apply(image, idle, &mut held)?;
            // Done: every owned partition applied to the end of what was read, and
            // nothing new (no record, no rebalance) for the idle period.
            let caught_up = held.owned.values().all(|o| o.window.is_empty());
            if member_may_stop(
                caught_up,
                held.owned.is_empty(),
                held.last_change.elapsed(),
                member.idle,
            ) {
                break;
            }
        }
        member.results(partitions, held)
    }
}

impl Member<'_> {
    /// Follows the group's assignment: rebalances happen inside poll; drops what was
    /// revoked and takes what is new.
    fn reassign<K: HostSinks>(
        &self,
        image: &mut Image,
        sinks: &K,
        held: &mut Held<K>,
    ) -> anyhow::Result<()> {
        if let Some(Err(e)) = self.group.poll(Duration::ZERO) {
            return Err(anyhow::Error::new(e).context(format!("reading {}", self.topic)));
        }
        let assigned: BTreeSet<i32> = self
            .group
            .assignment()
            .context("reading the group's assignment")?
            .elements_for_topic(self.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        if assigned != held.last_assigned {
            eprintln!("the group assigned this member partitions {assigned:?}");
            held.last_assigned = assigned.clone();
            held.last_change = Instant::now();
        }
        let mine: BTreeSet<i32> = held.owned.keys().copied().collect();
        let (revoked, new) = rebalance(&mine, &assigned);
        let changed = !revoked.is_empty() || !new.is_empty();
        for p in revoked {
            eprintln!("lost partition {p} to a rebalance");
            held.owned.remove(&p);
            held.released.push(p);
            held.last_change = Instant::now();
        }
        for p in new {
            let (o, take) = self.take(image, p, sinks)?;
            held.taken.push(take);
            held.owned.insert(p, o);
            held.last_change = Instant::now();
        }
        if changed {
            // The member's own reader fetches its partitions, each from where its
            // rules left off (offset 0 when just taken); the group's consumer only
            // keeps the membership and the commits, so it fetches nothing.
            self.group.pause(&self.group.assignment()?).ok();
            self.follow(&held.owned)?;
        }
        Ok(())
    }

    /// Reads one record into its partition's window, or, with none, passes each window
    /// to its fetch position. Whether the read was idle.
    fn poll<K: SumSinks>(&self, partitions: i32, held: &mut Held<K>) -> anyhow::Result<bool> {
        let waiting = held.owned.values().any(|o| !o.window.is_empty());
        let Some(m) = self
            .reader
            .poll(if waiting { Duration::ZERO } else { POLL })
        else {
            let at = positions(&self.reader, self.topic, partitions);
            for (&p, o) in &mut held.owned {
                if let Some(&Some(position)) = at.get(p as usize) {
                    o.window.pass_to(position);
                }
            }
            return Ok(true);
        };
        let m = m.with_context(|| format!("reading {}", self.topic))?;
        if let Some(o) = held.owned.get_mut(&m.partition()) {
            o.window.take(
                &mut o.judge,
                (self.topic, m.offset()),
                m.key(),
                m.payload(),
                &mut |_| {},
            )?;
            held.last_change = Instant::now();
        }
        Ok(false)
    }

    /// Steps each owned partition's consumer through its window once it holds a batch,
    /// or, `idle`, whatever it holds; the group gets a copy of each checkpoint.
    fn apply<K: SumSinks>(
        &self,
        image: &mut Image,
        idle: bool,
        held: &mut Held<K>,
    ) -> anyhow::Result<()> {
        let group = GroupCommit {
            group: &self.group,
            brokers: self.brokers,
            topic: self.topic,
            abort_after: self.abort_after,
        };
        let commits = &mut held.commits;
        for (&p, o) in &mut held.owned {
            if o.window.len() < BATCH && (o.window.is_empty() || !idle) {
                continue;
            }
            let at_take = o.group_at_take;
            let drive = Drive {
                pace: self.pace,
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
                *commits += 1;
                eprintln!(
                    "partition {p}: checkpoint: {}; total {total}",
                    idem_lab::render::position_text(next)
                );
                group.copy(*commits, p, next)
            })?;
            o.window.consumed_to(o.consumer.next_offset());
        }
        Ok(())
    }

    /// The end: each partition held, with its true total up to where its consumer
    /// stopped, from a read of its own.
    fn results<K: SumSinks>(&self, partitions: i32, held: Held<K>) -> anyhow::Result<SharedOut> {
        let parts: Vec<(i32, Offset)> = held
            .owned
            .iter()
            .map(|(&p, o)| (p, o.consumer.next_offset()))
            .collect();
        let truth = truth_read(self.brokers, self.topic, &self.rules, &parts, self.stall)?;
        let after = end_offsets(&self.reader, self.brokers, self.topic, partitions)?;
        let mut results = Vec::new();
        for ((p, o), fold) in held.owned.into_iter().zip(truth) {
            results.push(PartitionResult {
                partition: p,
                total: o.consumer.total(),
                true_total: Some(fold.total()),
                next_offset: o.consumer.next_offset(),
                read: fold.facts(after[p as usize] as i64),
                group_was: None,
            });
        }
        self.group.unsubscribe();
        Ok(SharedOut {
            results,
            taken: held.taken,
            released: held.released,
            applied: None,
        })
    }
}
