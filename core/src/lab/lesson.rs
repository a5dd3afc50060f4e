//! The lessons: questions in idem's own words, each tied to a run of the simulator that
//! answers it. Predict, then observe. The texts live here, as data, so every front end
//! (the CLI's `idem lesson`, a browser page) asks the same questions; the answers are
//! never written here: each comes from its run.

/// What a step's run shows, and so what kind of answer it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observe {
    /// The store's total (or value) at the end: a number.
    FinalTotal,
    /// Where the restart after the crash resumed (the next offset to read): a number.
    ResumeAt,
    /// Offsets delivered a second time: a list of offsets.
    Redelivered,
    /// The offsets at which the named message landed in the log: a list of offsets.
    Landed(&'static str),
    /// Journal records the run wrote: a number.
    FlashRecords,
    /// Whether the two views of one fact disagree at the end: yes or no.
    Diverged,
    /// The store's total after each effect, in order, replays included: a list of
    /// numbers. A front end shows the run's step table after it (step, offset handled,
    /// committed offset as the next to read, balance).
    Balances,
}

/// The run that answers a step, in the CLI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LessonRun {
    /// The scenario (`ddia`, `payments`, ...).
    pub scenario: &'static str,
    /// The store (`naive`, `offset`, ...), or `None` for a dual-write fix.
    pub store: Option<&'static str>,
    /// The dual-write fix (`none`, `atomic`, `derive`), when the run is a dual write.
    pub fix: Option<&'static str>,
    /// The producer (`plain`, `idempotent`, `transactional`, `no-retry`).
    pub producer: &'static str,
    /// A crash schedule in idem's grammar, or `None` for the scenario's own.
    pub schedule: Option<&'static str>,
    /// The checkpoint interval, or `None` for the scenario's own.
    pub every: Option<u64>,
}

impl LessonRun {
    const fn store(scenario: &'static str, store: &'static str) -> Self {
        Self {
            scenario,
            store: Some(store),
            fix: None,
            producer: "plain",
            schedule: None,
            every: None,
        }
    }

    const fn producer(self, producer: &'static str) -> Self {
        Self { producer, ..self }
    }

    const fn every(self, every: u64) -> Self {
        Self {
            every: Some(every),
            ..self
        }
    }

    const fn schedule(self, schedule: &'static str) -> Self {
        Self {
            schedule: Some(schedule),
            ..self
        }
    }
}

/// One step: a question, the run that answers it, and what the answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LessonStep {
    /// A short name for the step, a row of the closing summary table.
    pub label: &'static str,
    /// The question, asked before the run.
    pub question: &'static str,
    /// The run that answers it.
    pub run: LessonRun,
    /// What to read from the run.
    pub observe: Observe,
    /// Why the answer is what it is, shown after the run.
    pub explain: &'static str,
}

/// A lesson: a title, a setting, and its steps in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lesson {
    /// The name on the command line.
    pub name: &'static str,
    /// A title.
    pub title: &'static str,
    /// The setting, told before the first question.
    pub intro: &'static str,
    /// The steps.
    pub steps: &'static [LessonStep],
}

const fn step(
    label: &'static str,
    question: &'static str,
    run: LessonRun,
    observe: Observe,
    explain: &'static str,
) -> LessonStep {
    LessonStep {
        label,
        question,
        run,
        observe,
        explain,
    }
}

/// DDIA chapter 12's exercise: a replay after a crash, the offset stamp, the boundary of
/// naturally idempotent operations, and three ways to go deeper.
pub const DDIA: Lesson = Lesson {
    name: "ddia",
    title: "A replay after a crash (DDIA chapter 12)",
    intro: "A consumer reads 100 events of +1 at offsets 0..99 and adds each to a total kept \
in flash. It commits its position every 10 events, after the effects. The device crashes \
right after applying offset 49, before that batch's checkpoint.",
    steps: &[
        step(
            "where the restart resumes",
            "Where does the restart resume: which offset does it read first?",
            LessonRun::store("ddia", "naive"),
            Observe::ResumeAt,
            "The last durable checkpoint covers through 39, so the restart resumes at 40.",
        ),
        step(
            "offsets delivered twice",
            "Which offsets are delivered a second time? (a range such as 3..7, or a list)",
            LessonRun::store("ddia", "naive"),
            Observe::Redelivered,
            "Everything after the checkpoint and up to the crash comes again.",
        ),
        step(
            "naive total",
            "What total does the naive store (total += 1) end at?",
            LessonRun::store("ddia", "naive"),
            Observe::FinalTotal,
            "Each redelivered event is added a second time: at-least-once delivery.",
        ),
        step(
            "offset-stamped total",
            "The offset-stamped store keeps the highest offset it applied in the same flash \
record as the total, and skips anything not newer. What total does it end at?",
            LessonRun::store("ddia", "offset"),
            Observe::FinalTotal,
            "The replayed offsets are not newer than the stamp: skipped, so the replay is \
harmless.",
        ),
        step(
            "gauge, set (no stamp)",
            "The boundary: a gauge whose event at offset i is the reading i + 1, stored with \
value = reading (no stamp). Same crash. What value does it end at?",
            LessonRun::store("gauge", "set"),
            Observe::FinalTotal,
            "Setting a value is naturally idempotent: applying a reading twice changes \
nothing.",
        ),
        step(
            "atomic checkpoint: flash records",
            "Go deeper: an atomic checkpoint writes value and position in one record, at \
each checkpoint only. How many flash records does it write in all (the offset store \
writes 110)?",
            LessonRun::store("ddia", "atomic"),
            Observe::FlashRecords,
            "One record per checkpoint: about K times fewer, and exact.",
        ),
        step(
            "two-phase, crash after prepare: resumes at",
            "Go deeper: two-phase commit, with the crash right after the prepared record \
of the batch 40..49 (before the decision). Where does the restart resume?",
            LessonRun::store("ddia", "two-phase").schedule("crash@prepare:49"),
            Observe::ResumeAt,
            "No decision was written: recovery rolls the prepared record back and the batch \
is replayed, harmlessly.",
        ),
        step(
            "dual write: views disagree",
            "Go deeper: one payment written to two views (a total and a per-payer index), \
with a crash between the two writes. Do the views disagree at the end? (yes or no)",
            LessonRun {
                scenario: "dual-write",
                store: None,
                fix: Some("none"),
                producer: "plain",
                schedule: None,
                every: None,
            },
            Observe::Diverged,
            "Two records, two writes: a crash between them leaves one view ahead for good.",
        ),
    ],
};

/// The duplicate payment: a lost ack, a retry, and which dedup catches it.
pub const PAYMENTS: Lesson = Lesson {
    name: "payments",
    title: "A duplicate payment",
    intro: "A producer sends payment p17 (5). The log appends it, but the ack is lost, so \
the producer sends p17 again. Then it sends p18 (3). A consumer adds every payment to a \
balance. The application sent 8 in all.",
    steps: &[
        step(
            "where p17 lands",
            "At which offsets does p17 land in the log?",
            LessonRun::store("payments", "naive"),
            Observe::Landed("p17"),
            "A retry is a new append: the same payment at a new offset.",
        ),
        step(
            "offset-stamped balance",
            "The offset-stamped store skips offsets it has seen. What balance does it end \
at?",
            LessonRun::store("payments", "offset"),
            Observe::FinalTotal,
            "The retry has a new offset, so the stamp lets it through.",
        ),
        step(
            "message-id balance",
            "The message-id store remembers the ids it applied. What balance?",
            LessonRun::store("payments", "message-id"),
            Observe::FinalTotal,
            "The retry carries the same id: skipped.",
        ),
        step(
            "naive balance, idempotent producer",
            "With Kafka's idempotent producer the log checks each producer's sequence. What \
balance does the naive store end at now?",
            LessonRun::store("payments", "naive").producer("idempotent"),
            Observe::FinalTotal,
            "The retry repeats a sequence that already landed: the log refuses it.",
        ),
        step(
            "worked example: resumes at",
            "The worked example: payments 5, 3, 4 at offsets 0, 1, 2, a checkpoint every 10, \
and a crash right after handling offset 1, with nothing committed. Where does the \
restart resume?",
            LessonRun::store("worked-example", "naive"),
            Observe::ResumeAt,
            "Nothing was committed: the restart reads from the start.",
        ),
        step(
            "worked example: naive balance",
            "And what balance does the naive store show at the end (5, 8, crash, then...)?",
            LessonRun::store("worked-example", "naive"),
            Observe::FinalTotal,
            "Offsets 0 and 1 are applied a second time after the restart.",
        ),
        step(
            "worked example: balance after each step",
            "Fill in the worked example's balance column: the balance after each payment \
is handled, in order, the two handled before the crash and every one after the restart \
(a list such as 1, 2, 3).",
            LessonRun::store("worked-example", "naive"),
            Observe::Balances,
            "The committed offset stays 0 (the next to read) until the end, so every \
handling after the restart adds again: the true total is 12.",
        ),
        step(
            "worked example, committed = 2: naive balance",
            "Now the consumer commits after handling offset 1 (committed = 2: the next \
offset to read is 2) and crashes right after that commit. What balance does the naive \
store end at?",
            LessonRun::store("worked-example", "naive")
                .every(2)
                .schedule("crash@commit:1"),
            Observe::FinalTotal,
            "The restart begins at the saved place, 2: nothing is handled twice, even with \
no dedup. Committing more often shrinks the replay; two things make it harmless: a store \
that recognises what it already applied (by offset or by message id), and one that writes \
its effect and its position in one record (the atomic store).",
        ),
        step(
            "p19 instead of the retry: message-id balance",
            "Change the second p17 to p19: three different payments, p17 (5), p19 (5) and \
p18 (3), each sent once. What balance does the message-id store end at?",
            LessonRun::store("same-amount", "message-id"),
            Observe::FinalTotal,
            "A new id is a new payment, whatever its amount: the store skips repeated ids, \
never repeated amounts.",
        ),
    ],
};

/// Delivery guarantees side by side, from the producer's side.
pub const GUARANTEES: Lesson = Lesson {
    name: "guarantees",
    title: "At most once, at least once, effectively once",
    intro: "The same payments: p17 (5), then p18 (3), 8 in all. The first send of p17 is \
troubled: either the send itself or its ack is lost.",
    steps: &[
        step(
            "at most once (never retries)",
            "At most once: the producer never retries, and p17's send is lost. What balance \
does any store end at?",
            LessonRun::store("payments", "naive").producer("no-retry"),
            Observe::FinalTotal,
            "Nothing is duplicated, and the lost payment is simply gone.",
        ),
        step(
            "at least once (retries)",
            "At least once: the ack is lost and the producer retries. What balance does the \
naive store end at?",
            LessonRun::store("payments", "naive"),
            Observe::FinalTotal,
            "Nothing is lost, and p17 is counted twice, the original and its retry: 5 + 5 + \
3 = 13.",
        ),
        step(
            "effectively once (retries, id dedup)",
            "Effectively once, on the consumer's side: it retries, and the consumer dedups \
by message id. What balance?",
            LessonRun::store("payments", "message-id"),
            Observe::FinalTotal,
            "Every payment once: retries plus dedup.",
        ),
        step(
            "effectively once (retries, idempotent producer)",
            "Effectively once, on the log's side: it retries, and the producer is \
idempotent. What balance does the naive store end at?",
            LessonRun::store("payments", "naive").producer("idempotent"),
            Observe::FinalTotal,
            "The broker appends the retried batch only once: it answers the repeated \
sequence with success and the first send's offset, so the log holds p17 once and even the \
naive store ends exact here, where the consumer does not crash. The idempotent producer \
covers the leg from the producer to the log and no more: a consumer that crashes still \
replays (idem run ddia --store naive --producer idempotent ends at 110).",
        ),
    ],
};

/// Every lesson, in teaching order.
pub static LESSONS: [Lesson; 3] = [DDIA, PAYMENTS, GUARANTEES];

/// The lesson named `name`.
pub fn lesson(name: &str) -> Option<&'static Lesson> {
    LESSONS.iter().find(|l| l.name == name)
}
