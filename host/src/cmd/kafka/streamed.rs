//! `kafka consume` (not `--shared`): every partition streamed into its store, in
//! bounded windows, to the end offsets read when the run began; the group gets its copy
//! of the durable positions off the record path; the true total comes from a second read
//! of its own, on a thread of its own, or from the producer's truth file (`--truth`).
//!
//! One consumer reads every partition at once (librdkafka fetches them concurrently, in
//! the background), and one thread steps each partition's core consumer through what has
//! arrived. Each partition keeps its own journals in the image; a checkpoint's sync is
//! the image's (`--sync`).

use std::time::{Duration, Instant};

use anyhow::Context;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::log::Offset;
use idem_payments::{Message, SumSinks, Total};
use rdkafka::consumer::{BaseConsumer, CommitMode};
use rdkafka::message::Message as _;

use super::ids;
use super::partition::{BATCH, ConsumeOptions, POLL, PartitionResult, SharedOut, layout};
use super::read::{
    assign_from_zero, commit_positions, end_offsets, passing, positions, truth_read,
};
use idem_host::drive::Drive;
use idem_host::image::Image;
use idem_host::image_consumer;
use idem_host::kafka::applied::AppliedLog;
use idem_host::kafka::group::{CommitPacer, group_was};
use idem_host::kafka::stream::{Judge, TruthFold, Window};
use idem_host::kafka::trust::{ReadFacts, ReadRules, Skipped};
use idem_lab::select::HostSinks;
use idem_lab::select::dispatch::SinksJob;

/// How often `--follow` asks the broker for new end offsets once it has reached them.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// `kafka consume` over every partition of a topic, streamed.
pub(super) struct Streamed<'a> {
    pub(super) o: &'a ConsumeOptions<'a>,
    pub(super) image: &'a mut Image,
    /// The group's consumer: it reads and commits.
    pub(super) kafka: BaseConsumer,
    pub(super) partitions: i32,
    pub(super) every: CheckpointEvery,
    pub(super) rules: ReadRules,
    /// The image was just made (`--truth`: a log of ids left beside it is emptied).
    pub(super) fresh: bool,
}

/// One partition being consumed.
struct Part<K: SumSinks> {
    consumer: Consumer<K>,
    /// The rules over the records read, from offset 0.
    judge: Judge,
    /// What has arrived and the consumer has not passed.
    window: Window,
    /// What this read fetched: distinct offsets, the highest, the records stepped over.
    records_read: u64,
    highest: Option<Offset>,
    skipped: Vec<Skipped>,
    /// The journal records its consumer had appended at its last step.
    written: u64,
}

impl<K: SumSinks> Part<K> {
    fn done(&self) -> bool {
        self.window.complete() && self.window.is_empty()
    }
}

impl SinksJob for Streamed<'_> {
    type Out = SharedOut;
    fn call<K: HostSinks>(self, sinks: K) -> anyhow::Result<SharedOut> {
        let Streamed {
            o,
            image,
            kafka,
            partitions: n,
            every,
            rules,
            fresh,
        } = self;
        let ends = end_offsets(&kafka, o.brokers, o.topic, n)?;
        let (mut parts, was) = open_parts(o, image, &kafka, (&ends, every, rules), &sinks)?;
        // Graded by a truth file: the ids applied, logged beside the image.
        let mut ids = match o.truth {
            Some(_) => Some(ids::open_log(image, o.store, n, fresh, o.sync)?),
            None => None,
        };
        // From offset 0: the rules over a partition's records (the sum of |amounts|) see
        // every record before the position too.
        assign_from_zero(&kafka, o.topic, 0..n)?;
        // A truth file is what the producer sent: no read of the topic of its own.
        let reads_truth = !o.follow && o.truth.is_none();
        let (consumed, truth) = std::thread::scope(|s| {
            let truth = reads_truth.then(|| {
                s.spawn(|| truth_read(o.brokers, o.topic, &rules, &numbered(&ends), o.stall))
            });
            let consumed = consume_all(o, image, &kafka, &mut parts, ids.as_mut());
            let truth = truth.map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the read of the true total failed")))
            });
            (consumed, truth)
        });
        consumed?;
        let truth = match truth {
            Some(t) => Some(t?),
            None if o.truth.is_some() => None,
            // `--follow`: the truth up to where each partition's consumer stopped.
            None => {
                let ends: Vec<Offset> = parts.iter().map(|x| x.consumer.next_offset()).collect();
                Some(truth_read(
                    o.brokers,
                    o.topic,
                    &rules,
                    &numbered(&ends),
                    o.stall,
                )?)
            }
        };
        let after = end_offsets(&kafka, o.brokers, o.topic, n)?;
        Ok(SharedOut {
            results: results(parts, after, was, truth),
            taken: Vec::new(),
            released: Vec::new(),
            applied: ids.map(|log| log.applied()),
        })
    }
}

/// The partitions opened, and what the group held of each where it differs from the
/// image ([`group_was`]).
type Opened<K> = (Vec<Part<K>>, Vec<Option<i64>>);

/// Each partition's consumer opened on the image (what was in doubt voided first), its
/// window to the end offset in `ends`; and what the group held of each, beside it.
fn open_parts<K: HostSinks>(
    o: &ConsumeOptions<'_>,
    image: &mut Image,
    kafka: &BaseConsumer,
    (ends, every, rules): (&[Offset], CheckpointEvery, ReadRules),
    sinks: &K,
) -> anyhow::Result<Opened<K>> {
    let config = ConsumerConfig::every(every);
    let key = image.id_key();
    let (mut parts, mut was) = (Vec::new(), Vec::new());
    for (p, &end) in (0..).zip(ends) {
        let layout = layout(image, p);
        image_consumer::void_in_doubt::<K>(image, layout)?;
        // The image is the position's one truth: recovery reads it from the journals.
        let consumer = Consumer::open(&mut image.flash, layout, sinks.clone(), config)
            .map_err(|e| image_consumer::consumer_error(image, e))?;
        let from = consumer.next_offset();
        let committed = super::client::committed(kafka, o.brokers, o.topic, p)?;
        was.push(group_was(committed, from));
        let window = Window::new(p, key, from, end);
        parts.push(Part {
            judge: Judge::new(p, rules),
            window: match o.truth {
                Some(_) => window.keeping_ids(),
                None => window,
            },
            consumer,
            records_read: 0,
            highest: None,
            skipped: Vec::new(),
            written: 0,
        });
    }
    Ok((parts, was))
}

/// Each partition's result: its total, and the truth's (a read's fold) or, graded by
/// the truth file, what this read fetched.
fn results<K: SumSinks>(
    parts: Vec<Part<K>>,
    after: Vec<Offset>,
    was: Vec<Option<i64>>,
    truth: Option<Vec<TruthFold>>,
) -> Vec<PartitionResult> {
    let mut folds = truth.map(Vec::into_iter);
    parts
        .into_iter()
        .zip(after.into_iter().zip(was))
        .enumerate()
        .map(|(p, (part, (end, was)))| {
            let (true_total, read) = match folds.as_mut().and_then(Iterator::next) {
                Some(fold) => (Some(fold.total()), fold.facts(end as i64)),
                // Graded by the truth file: what this read fetched.
                None => (
                    None,
                    ReadFacts {
                        records_read: part.records_read,
                        end_offset: end as i64,
                        highest: part.highest,
                        skipped: part.skipped,
                    },
                ),
            };
            PartitionResult {
                partition: p as i32,
                total: part.consumer.total(),
                true_total,
                next_offset: part.consumer.next_offset(),
                read,
                group_was: was,
            }
        })
        .collect()
}

/// Polls every partition's records into its window and steps its consumer through them,
/// until each consumer is at its window's end (with `--follow`, until a signal); the
/// group gets its copies as [`CommitPacer`] says, and what is pending at the end.
fn consume_all<K: SumSinks>(
    o: &ConsumeOptions<'_>,
    image: &mut Image,
    kafka: &BaseConsumer,
    parts: &mut [Part<K>],
    mut ids: Option<&mut AppliedLog>,
) -> anyhow::Result<()> {
    let (topic, brokers) = (o.topic, o.brokers);
    let mut pacer = CommitPacer::new(Instant::now());
    let (mut commits, mut logged) = (0u64, 0u64);
    let mut last_record = Instant::now();
    let mut asked_ends = Instant::now();
    loop {
        if idem_host::cleanup::stop_requested() {
            if o.follow {
                break; // the report follows
            }
            return Err(idem_host::cleanup::Interrupted.into());
        }
        let polled = poll_one(kafka, topic, parts)?;
        if polled == Polled::Record {
            last_record = Instant::now();
        }
        let idle = polled == Polled::Idle;
        let counts = (&mut pacer, &mut commits, &mut logged);
        apply(o, image, (kafka, ids.as_deref_mut()), parts, counts, idle)?;
        if let Some(due) = pacer.due(Instant::now()) {
            commit_positions(kafka, brokers, topic, &due, CommitMode::Async)?;
        }
        if parts.iter().all(Part::done) {
            if !o.follow {
                break;
            }
            if asked_ends.elapsed() >= FOLLOW_EVERY {
                asked_ends = Instant::now();
                let ends = end_offsets(kafka, brokers, topic, parts_len(parts))?;
                for (part, end) in parts.iter_mut().zip(ends) {
                    part.window.extend_to(end);
                }
            }
            last_record = Instant::now();
        } else if last_record.elapsed() >= o.stall
            && let Some((p, part)) = parts.iter().enumerate().find(|(_, x)| !x.done())
        {
            anyhow::bail!(
                "reading {topic} partition {p}: the broker's end offset is {}, but no record came after offset {} for {} s",
                part.window.end(),
                part.consumer.next_offset(),
                o.stall.as_secs()
            );
        }
    }
    // The end: the group gets every durable position still pending.
    commit_positions(kafka, brokers, topic, &pacer.take(), CommitMode::Sync)
}

/// What one poll brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polled {
    /// A record, into its partition's window.
    Record,
    /// An error that passes (librdkafka retries it).
    Passing,
    /// Nothing: each window passed to its fetch position.
    Idle,
}

/// Reads one record into its partition's window, or, with none, passes each window to
/// its fetch position, which may have passed offsets with no record to deliver
/// (transaction markers, aborted records).
fn poll_one<K: SumSinks>(
    kafka: &BaseConsumer,
    topic: &str,
    parts: &mut [Part<K>],
) -> anyhow::Result<Polled> {
    let waiting = parts.iter().any(|x| !x.window.is_empty());
    match kafka.poll(if waiting { Duration::ZERO } else { POLL }) {
        Some(Err(e)) if passing(&e) => Ok(Polled::Passing),
        Some(m) => {
            let m = m.with_context(|| format!("reading {topic}"))?;
            let part = parts
                .get_mut(m.partition() as usize)
                .context("a record of a partition this consumer was not assigned")?;
            let Part {
                judge,
                window,
                skipped,
                ..
            } = part;
            let taken =
                window.take(judge, (topic, m.offset()), m.key(), m.payload(), &mut |x| {
                    skipped.push(x)
                })?;
            if let Some((offset, _)) = taken {
                part.records_read += 1;
                part.highest = Some(offset);
            }
            Ok(Polled::Record)
        }
        None => {
            let at = positions(kafka, topic, parts_len(parts));
            for (part, position) in parts.iter_mut().zip(at) {
                if let Some(position) = position {
                    part.window.pass_to(position);
                }
            }
            Ok(Polled::Idle)
        }
    }
}

/// Steps each partition's consumer through its window once it holds a batch, or
/// whatever it holds when the read is idle or the window complete; each checkpoint's
/// position goes to the pacer (`--abort-after` and `--abort-behind` abort there), and
/// with `--truth` each step's ids to the log of ids applied.
fn apply<K: SumSinks>(
    o: &ConsumeOptions<'_>,
    image: &mut Image,
    (kafka, mut ids): (&BaseConsumer, Option<&mut AppliedLog>),
    parts: &mut [Part<K>],
    (pacer, commits, logged): (&mut CommitPacer<Instant>, &mut u64, &mut u64),
    idle: bool,
) -> anyhow::Result<()> {
    let stop = || o.follow && idem_host::cleanup::stop_requested();
    for (p, part) in parts.iter_mut().enumerate() {
        let n = part.window.len();
        if n < BATCH && (n == 0 || !(idle || part.window.complete())) {
            continue;
        }
        let drive = Drive {
            pace: o.pace,
            stop: &stop,
            steps: None,
            reports: &|_| true,
        };
        let Part {
            consumer,
            window,
            written,
            ..
        } = part;
        let mut watched = ids::Watched {
            p: p as i32,
            store: o.store,
            batched: K::BATCHED,
            window,
            written,
            abort_after: o.abort_after_ids,
            logged: &mut *logged,
        };
        let mut watch = |step: &Step<Message>, n: u64, image: &mut Image| match ids.as_deref_mut() {
            Some(log) => watched.step(log, step, n, image),
            None => Ok(()),
        };
        let mut on_commit = |next, total| {
            *commits += 1;
            checkpointed(o, kafka, pacer, (*commits, p as i32), (next, total))
        };
        drive.run_watched(consumer, image, &window.log(), &mut on_commit, &mut watch)?;
        window.consumed_to(consumer.next_offset());
    }
    Ok(())
}

/// Checkpoint number `commits` of partition `p` made `next` durable, at `total`: to the
/// pacer, or (test hooks) an abort.
fn checkpointed(
    o: &ConsumeOptions<'_>,
    kafka: &BaseConsumer,
    pacer: &mut CommitPacer<Instant>,
    (commits, p): (u64, i32),
    (next, total): (Offset, i64),
) -> anyhow::Result<()> {
    if o.follow {
        eprintln!(
            "partition {p}: checkpoint: {}; total {total}",
            idem_lab::render::position_text(next)
        );
    }
    if o.abort_after == Some(commits) {
        // The group holds the copy of the commit before this one.
        let pending = pacer.take();
        commit_positions(kafka, o.brokers, o.topic, &pending, CommitMode::Sync)?;
        std::process::abort(); // as a SIGKILL would: no destructor
    }
    if o.abort_behind == Some(commits) {
        std::process::abort();
    }
    pacer.durable(p, next);
    Ok(())
}

/// Each partition's end offset, numbered from partition 0.
fn numbered(ends: &[Offset]) -> Vec<(i32, Offset)> {
    (0..).zip(ends.iter().copied()).collect()
}

fn parts_len<K: SumSinks>(parts: &[Part<K>]) -> i32 {
    parts.len() as i32
}
