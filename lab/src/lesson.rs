//! The lessons: questions in idem's own words, each tied to a run of the simulator that
//! answers it. Predict, then observe. The texts live here, as data, so every front end
//! (the CLI's `idem lesson`, a browser page) asks the same questions; the answers are
//! never written here: each comes from its run.

/// What a step's run shows, and so what kind of answer it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observe {
    /// The store's total (or value) at the end, or for the `pump` scenario the
    /// millilitres on the motor's own counter: a number.
    FinalTotal,
    /// Where the restart after the crash resumed (the next offset to read): a number.
    ResumeAt,
    /// The committed position at the end of the run (the next offset to read): a number.
    NextOffset,
    /// Offsets delivered a second time: a list of offsets.
    Redelivered,
    /// Offsets the store skipped as already applied: a list of offsets.
    Skipped,
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
    /// The producer (`non-idempotent`, `idempotent`, `transactional`, `no-retry`).
    pub producer: &'static str,
    /// The consumer's guarantee (`at-least-once`, `at-most-once`).
    pub guarantee: &'static str,
    /// The consumer's isolation level (`read-uncommitted`, `read-committed`).
    pub isolation: &'static str,
    /// A crash schedule in idem's grammar, or `None` for the scenario's own.
    pub schedule: Option<&'static str>,
    /// The checkpoint interval, or `None` for the scenario's own.
    pub every: Option<u64>,
    /// The subscription's QoS (0, 1 or 2), for the `mqtt` scenario.
    pub qos: Option<u8>,
    /// Where the `mqtt` receiver keeps its QoS 2 packet identifiers: `flash` (in the
    /// effect's record) or `ram`.
    pub session: Option<&'static str>,
    /// What the `pump` scenario's controller does about a dose a reset may have cut
    /// (`after`, `reassert`, `effects`: [`idem_sim::pump::Way`]).
    pub way: Option<&'static str>,
}

impl LessonRun {
    const fn store(scenario: &'static str, store: &'static str) -> Self {
        Self {
            scenario,
            store: Some(store),
            fix: None,
            producer: "non-idempotent",
            guarantee: "at-least-once",
            isolation: "read-uncommitted",
            schedule: None,
            every: None,
            qos: None,
            session: None,
            way: None,
        }
    }

    /// The `pump` scenario, its controller doing `way` about a dose a reset may cut.
    const fn pump(way: &'static str) -> Self {
        Self {
            store: None,
            way: Some(way),
            ..Self::store("pump", "")
        }
    }

    /// The `mqtt` scenario with `store`, at QoS `qos`, the identifiers (at QoS 2) in flash.
    const fn mqtt(store: &'static str, qos: u8) -> Self {
        Self {
            qos: Some(qos),
            ..Self::store("mqtt", store)
        }
    }

    /// The QoS 2 identifiers kept in `session` (`flash`, `ram`).
    const fn session(self, session: &'static str) -> Self {
        Self {
            session: Some(session),
            ..self
        }
    }

    /// The dual-write scenario with the fix `fix` (`none`, `atomic`, ...).
    const fn dual(fix: &'static str) -> Self {
        Self {
            scenario: "dual-write",
            store: None,
            fix: Some(fix),
            ..Self::store("dual-write", "")
        }
    }

    const fn producer(self, producer: &'static str) -> Self {
        Self { producer, ..self }
    }

    const fn guarantee(self, guarantee: &'static str) -> Self {
        Self { guarantee, ..self }
    }

    const fn isolation(self, isolation: &'static str) -> Self {
        Self { isolation, ..self }
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

/// A wrong answer that tempts, and what it counts: shown to whoever gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tempting {
    /// The answer, as a learner types it.
    pub answer: &'static str,
    /// For a number, the parts its explanation names, which add up to it (empty for
    /// other answers).
    pub parts: &'static [i64],
    /// Why it tempts, and where it goes wrong.
    pub why: &'static str,
}

const fn tempt(answer: &'static str, parts: &'static [i64], why: &'static str) -> Tempting {
    Tempting { answer, parts, why }
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
    /// The tempting wrong answers, each with its own explanation.
    pub tempting: &'static [Tempting],
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
    tempting: &'static [Tempting],
) -> LessonStep {
    LessonStep {
        label,
        question,
        run,
        observe,
        explain,
        tempting,
    }
}

/// DDIA chapter 12's exercise: a replay after a crash, the offset stamp, the boundary of
/// naturally idempotent operations, and three ways to go deeper.
pub const DDIA: Lesson = Lesson {
    name: "ddia",
    title: "A replay after a crash (DDIA chapter 12)",
    intro: "A consumer reads 100 events of +1 at offsets 0..99 and adds each to a total kept \
in flash. It commits its position every 10 events, after the effects: the position it saves \
is the next offset to read. The device crashes right after applying offset 49, before that \
batch's checkpoint.",
    steps: &[
        step(
            "where the restart resumes",
            "Where does the restart resume: which offset does it read first?",
            LessonRun::store("ddia", "naive"),
            Observe::ResumeAt,
            "The last durable checkpoint was taken after offset 39, and it saved the next \
offset to read: 39 + 1 = 40. The effects applied after it, up to the crash, are in the \
total, but not in the position.",
            &[
                tempt(
                    "50",
                    &[49, 1],
                    "50 = 49 + 1 is the offset after the last one applied. But applying an \
event does not move the saved position; only a checkpoint does.",
                ),
                tempt(
                    "49",
                    &[49],
                    "49 is the last offset applied before the crash, which the restart does \
not know: flash holds the position of the last checkpoint.",
                ),
                tempt(
                    "39",
                    &[39],
                    "39 is the last offset the checkpoint covers; the position it saves is \
the next one to read.",
                ),
            ],
        ),
        step(
            "offsets delivered twice",
            "Which offsets are delivered a second time? (a range such as 3..7, or a list)",
            LessonRun::store("ddia", "naive"),
            Observe::Redelivered,
            "Everything after the checkpoint and up to the crash comes again: 40..49, ten \
events.",
            &[
                tempt(
                    "none",
                    &[],
                    "None would need the position saved with every effect; here it is saved \
every 10 events, so the restart reads from the last checkpoint again.",
                ),
                tempt(
                    "50..99",
                    &[],
                    "50..99 are read after the restart, but for the first time: the crash came \
before them.",
                ),
                tempt(
                    "0..49",
                    &[],
                    "0..49 were all applied before the crash, but the checkpoint covers 0..39: \
only what comes after it is read again.",
                ),
            ],
        ),
        step(
            "naive total",
            "What total does the naive store (total += 1) end at?",
            LessonRun::store("ddia", "naive"),
            Observe::FinalTotal,
            "50 before the crash (0..49), then 60 after it (40..99): 110. Each redelivered \
event is added a second time: at-least-once delivery, 10 over the true 100.",
            &[
                tempt(
                    "100",
                    &[100],
                    "100 counts each of the 100 events once, and forgets the replay: the \
naive store has no way to know that 40..49 were already added.",
                ),
                tempt(
                    "50",
                    &[50],
                    "50 is the total at the crash (0..49). The restart goes on: it reads \
40..99, 60 more.",
                ),
                tempt(
                    "120",
                    &[100, 10, 10],
                    "120 = 100 + 10 + 10 adds the replay twice. 40..49 are delivered twice in \
all, once before the crash and once after: one extra time each.",
                ),
                tempt(
                    "90",
                    &[100, -10],
                    "90 = 100 - 10 loses the replayed events. They were applied before the \
crash and the total is in flash: nothing is lost, it is counted again.",
                ),
            ],
        ),
        step(
            "offset-stamped total",
            "The offset-stamped store keeps the highest offset it applied in the same flash \
record as the total, and skips anything not newer. What total does it end at?",
            LessonRun::store("ddia", "offset"),
            Observe::FinalTotal,
            "50 before the crash, with the stamp 49 in the same record; after it the replayed \
events are not newer than 49 and add nothing, and 50..99 add 50: 100. The replay still \
happens, but it is harmless: effectively once, the effect of each event counted once \
however often it is delivered. Kafka and DDIA call it exactly once.",
            &[
                tempt(
                    "110",
                    &[100, 10],
                    "110 = 100 + 10 is the naive total. The stamp 49 survived the crash in the \
same record as the total, so the replay adds nothing.",
                ),
                tempt(
                    "90",
                    &[100, -10],
                    "90 = 100 - 10 would lose the replayed events. Skipping their second \
delivery loses nothing: their first one is in the total.",
                ),
            ],
        ),
        step(
            "offset-stamped: offsets skipped",
            "And which offsets does the offset-stamped store skip? (a range, a list, or none)",
            LessonRun::store("ddia", "offset"),
            Observe::Skipped,
            "The replayed offsets, 40..49: each is not newer than the stamp 49.",
            &[
                tempt(
                    "none",
                    &[],
                    "None would mean the stamp was lost with RAM. It is in the same flash \
record as the total, so it survived the crash.",
                ),
                tempt(
                    "0..49",
                    &[],
                    "0..49 were applied before the crash; after it, the restart reads only \
from 40, so only 40..49 reach the stamp a second time.",
                ),
            ],
        ),
        step(
            "gauge, set (no stamp)",
            "Where does a dedup stop being needed? A gauge whose event at offset i is the \
reading i + 1, stored with value = reading, with no stamp. Same crash. What value does it \
end at?",
            LessonRun::store("gauge", "set"),
            Observe::FinalTotal,
            "The newest reading, 100 (offset 99). Setting a value is naturally idempotent: \
applying the reading of 40..49 again sets the same values, and the run goes on to 99.",
            &[
                tempt(
                    "110",
                    &[100, 10],
                    "110 = 100 + 10 is the naive counter's total, which counts the replay \
again. A set writes the reading itself: the replay sets 41..50 again, and offset 99 sets \
100.",
                ),
                tempt(
                    "50",
                    &[50],
                    "50 is the reading at the crash (offset 49). The restart goes on to offset \
99.",
                ),
            ],
        ),
        step(
            "insert with a unique key",
            "Insert with a unique key: a table with a row per message id, each written with \
INSERT ... ON CONFLICT DO NOTHING. Take 40 payments r0 .. r39 of 1 each, and a retry of r0 \
that lands after all of them, 40 messages after its original. What balance does the \
unique-key store end at?",
            LessonRun::store("late-retry", "unique-key"),
            Observe::FinalTotal,
            "40: the retry inserts r0 again, and the table already has that row. A unique \
key never forgets, where a window of the last 32 ids has let r0 go by then (idem run \
late-retry --store message-id ends at 41). The price is a row for every key ever applied: \
the table holds 64 rows, so idem run ddia --store unique-key refuses the event at offset 64 \
(100 events, 100 keys), in one sentence and with nothing dropped. The offset stamp needs \
one number for the whole replay. And it holds only when the key travels with the message: \
a key the consumer made up at each delivery would give every repeat a row of its own.",
            &[tempt(
                "41",
                &[40, 1],
                "41 = 40 + 1 counts r0's retry again, as a window of the last 32 ids does \
after forgetting r0. The table keeps every row: the second insert of r0 is a no-op.",
            )],
        ),
        step(
            "gauge, max (a late reading)",
            "A third candidate: max, value = max(value, reading), with no stamp. The gauge \
again, with no crash, but offset 59's reading, 60, is delivered a second time, late, after \
the last reading. What value does the max store end at?",
            LessonRun::store("late-reading", "max"),
            Observe::FinalTotal,
            "100: max keeps the larger of the value and the reading, so a reading applied \
again changes nothing, whenever it comes. A set writes the late reading over the newest \
and ends at 60 (idem run late-reading --store set). Setting a value, inserting with a \
unique key and max are the naturally idempotent operations DDIA names, none with a stamp; \
a set alone needs its repeats to come in order.",
            &[tempt(
                "60",
                &[60],
                "60 is what a set gives, writing the late reading over the newest. Max keeps \
the larger, and 60 is not larger than 100.",
            )],
        ),
        step(
            "atomic checkpoint: total",
            "Go deeper: make the checkpoint atomic instead. The total and the position are \
written together in one record, at each checkpoint only, with no dedup set. Does the naive \
increment now survive the crash: what total does it end at?",
            LessonRun::store("ddia", "atomic"),
            Observe::FinalTotal,
            "The crash loses the total of 40..49 with RAM, as it loses the position: the \
record holds 40 and position 40, and the restart adds 40..99, 60 more: 100. Recovery never \
replays a committed effect.",
            &[
                tempt(
                    "110",
                    &[100, 10],
                    "110 = 100 + 10 is what a position saved apart from the total gives. Here \
both are in one record: the total the restart finds is the one that goes with its position.",
                ),
                tempt(
                    "40",
                    &[40],
                    "40 is the total in the record after the crash (0..39). The restart then \
adds 40..99.",
                ),
                tempt(
                    "50",
                    &[50],
                    "50 is the total in RAM at the crash, which the crash loses; flash holds \
40, and the restart adds 40..99.",
                ),
            ],
        ),
        step(
            "atomic checkpoint: flash records",
            "How many flash records does the atomic checkpoint write in all?",
            LessonRun::store("ddia", "atomic"),
            Observe::FlashRecords,
            "One record per checkpoint and none per effect: 4 before the crash (after 9, \
19, 29 and 39), none for the batch the crash cut, and 6 after the restart (after 49, 59, \
..., 99): 10, against the offset store's 110, and exact.",
            &[
                tempt(
                    "110",
                    &[100, 10],
                    "110 = 100 + 10 is a record after every effect, replays included: the \
offset store's way. The atomic store writes only at checkpoints.",
                ),
                tempt(
                    "100",
                    &[100],
                    "100 is one record per event. The atomic store writes one per checkpoint.",
                ),
            ],
        ),
        step(
            "two-phase, crash after prepare: resumes at",
            "Go deeper: two-phase commit. At each checkpoint the store writes three \
records: a prepared record (the batch's effects and position), then the decision (a record \
in the consumer's journal that commits the position), then the committed value. The crash \
comes right after the prepared record of the batch that holds offset \
49, before its decision. Where does the restart resume?",
            LessonRun::store("ddia", "two-phase").schedule("crash@prepare:49"),
            Observe::ResumeAt,
            "No decision was written, so recovery rolls the prepared record back: the last \
decided batch ends at 39, and the restart resumes at 39 + 1 = 40 and replays the batch, \
harmlessly.",
            &[tempt(
                "50",
                &[49, 1],
                "50 = 49 + 1 would follow if the prepared record counted. Without its \
decision recovery cannot know the batch was meant to commit, so it rolls it back.",
            )],
        ),
        step(
            "dual write: do the views disagree?",
            "Go deeper: a dual write. 30 payments of 1 to 5 each, 90 in all, by 3 payers, a \
checkpoint every 10; each payment is written to two views, a total and a per-payer index, \
as two records, one after the other. The crash falls between the two writes of offset 25. \
Do the views disagree at the end? (yes or no)",
            LessonRun::dual("none"),
            Observe::Diverged,
            "Two records, two writes: a crash between them leaves one view ahead for good \
(total 106, index 105). Both are over the 90 as well: neither view dedups the replay.",
            &[tempt(
                "no",
                &[],
                "No would need the crash to fall before both writes or after both. Here they \
are two writes, and the crash falls between them.",
            )],
        ),
        step(
            "outbox: do total and outbox disagree?",
            "Go deeper: the transactional outbox. Read the index as an outbox: what the \
consumer owes a downstream system, one entry per payer. The atomic fix writes the total, \
the outbox and an offset stamp in one record; a relay sends from the outbox later. The \
same crash at offset 25: do the total and the outbox disagree at the end? (yes or no)",
            LessonRun::dual("atomic"),
            Observe::Diverged,
            "One record, one write: the crash falls before it or after it, never between \
two, and the stamp makes the replay a skip (total and outbox 90, the truth). That is the \
transactional outbox: the effect and the message to send are committed together. The \
relay can still send an entry twice after its own crash, so the receiver dedups by a \
message id.",
            &[tempt(
                "yes",
                &[],
                "Yes is the answer with two records. Here there is one: the total and the \
outbox cannot be written apart, so no crash can leave one ahead.",
            )],
        ),
    ],
};

/// The duplicate payment: a lost ack, a retry, and which dedup catches it.
pub const PAYMENTS: Lesson = Lesson {
    name: "payments",
    title: "A duplicate payment",
    intro: "A producer sends payment p17 (5). The log appends it, but the ack is lost, so \
the producer sends p17 again. Then it sends p18 (3). A consumer adds every payment to a \
balance.",
    steps: &[
        step(
            "where p17 lands",
            "At which offsets does p17 land in the log?",
            LessonRun::store("payments", "naive"),
            Observe::Landed("p17"),
            "0 and 1: a retry is a new append, the same payment at a new offset.",
            &[tempt(
                "0",
                &[],
                "0 is where the first send landed. The producer cannot tell its ack was lost \
from the send being lost, so it sends again, and the broker appends the retry at 1.",
            )],
        ),
        step(
            "the next offset",
            "The consumer reads the whole log and commits. What is the committed position at \
the end: the next offset it would read?",
            LessonRun::store("payments", "naive"),
            Observe::NextOffset,
            "The log holds offsets 0, 1 and 2, and the position is the next to read: 2 + 1 = \
3.",
            &[tempt(
                "2",
                &[2],
                "2 is the last offset read. A committed position names the next offset to \
read, one past it.",
            )],
        ),
        step(
            "offset-stamped balance",
            "The offset-stamped store skips offsets it has seen. What balance does it end \
at?",
            LessonRun::store("payments", "offset"),
            Observe::FinalTotal,
            "5 + 5 + 3 = 13: the retry has a new offset, 1, so the stamp lets it through: \
p17 counts twice, 5 over what the application meant.",
            &[tempt(
                "8",
                &[5, 3],
                "8 = 5 + 3 is what the application meant. The stamp compares offsets, and \
the retry came with its own, 1: nothing repeats by offset.",
            )],
        ),
        step(
            "message-id balance",
            "The message-id store remembers the ids it applied. What balance?",
            LessonRun::store("payments", "message-id"),
            Observe::FinalTotal,
            "5 + 3 = 8: the retry carries p17's id, which the store has: skipped.",
            &[tempt(
                "13",
                &[5, 5, 3],
                "13 = 5 + 5 + 3 counts the retry. It is a new offset but the same id, and \
the message-id store compares ids.",
            )],
        ),
        step(
            "naive balance, idempotent producer",
            "With Kafka's idempotent producer (the default of the Java client since \
3.0.1, 3.1.1 and 3.2.0, and of kafka-python 3) the producer library numbers each record, \
and the broker checks the number. What \
balance does the naive store end at now?",
            LessonRun::store("payments", "naive").producer("idempotent"),
            Observe::FinalTotal,
            "5 + 3 = 8: the retried batch repeats a sequence the broker already appended, so \
it answers with success and the first offset and appends nothing. The log holds p17 once.",
            &[tempt(
                "13",
                &[5, 5, 3],
                "13 = 5 + 5 + 3 would need the retry in the log. The broker knows the \
batch's producer id and sequence, answers the retry with p17's first offset, and appends \
nothing.",
            )],
        ),
        step(
            "worked example: resumes at",
            "The worked example: payments 5, 3, 4 at offsets 0, 1, 2, a checkpoint every 10, \
and a crash right after handling offset 1, with nothing committed. Where does the \
restart resume?",
            LessonRun::store("worked-example", "naive"),
            Observe::ResumeAt,
            "Nothing was committed, so the position is still the first offset: the restart \
reads from 0.",
            &[tempt(
                "2",
                &[1, 1],
                "2 = 1 + 1 is the offset after the last one handled. Only a commit moves the \
position, and none was made.",
            )],
        ),
        step(
            "worked example: naive balance",
            "And what balance does the naive store show at the end?",
            LessonRun::store("worked-example", "naive"),
            Observe::FinalTotal,
            "The restart reads from 0 again: it handles 0 and 1 a second time, then 2, on \
top of the balance the crash left in flash: 20, 8 over what the payments add up to.",
            &[
                tempt(
                    "12",
                    &[5, 3, 4],
                    "12 = 5 + 3 + 4 is each payment once. The balance is in flash with 8 in \
it, and the restart handles 0 and 1 again on top of it.",
                ),
                tempt(
                    "16",
                    &[8, 5, 3],
                    "16 = 8 + 5 + 3 stops after handling 0 and 1 again; the restart goes on \
to offset 2 (4 more).",
                ),
                tempt(
                    "13",
                    &[8, 5],
                    "13 = 8 + 5 handles offset 0 again and stops; the restart reads 0, 1 and 2.",
                ),
                tempt(
                    "8",
                    &[5, 3],
                    "8 = 5 + 3 is the balance at the crash. The restart goes on from 0.",
                ),
            ],
        ),
        step(
            "worked example: balances in order",
            "Fill in the worked example's balance column: the balance after each payment \
is handled, in order, the two handled before the crash and every one after the restart \
(a list such as 1, 2, 3).",
            LessonRun::store("worked-example", "naive"),
            Observe::Balances,
            "The committed offset stays 0 (the next to read) until the end, so the restart \
handles 0 and 1 again and then 2: 5, 8, then 13, 16, 20, on top of the 8 the crash left \
in flash.",
            &[tempt(
                "5, 8, 12",
                &[],
                "5, 8, 12 is the run without a crash. The crash after offset 1 makes the \
restart handle 0 and 1 again before 2.",
            )],
        ),
        step(
            "committed = 2: naive balance",
            "Now the consumer commits after handling offset 1 (committed = 2: the next \
offset to read is 2) and crashes right after that commit. What balance does the naive \
store end at?",
            LessonRun::store("worked-example", "naive")
                .every(2)
                .schedule("crash@commit:1"),
            Observe::FinalTotal,
            "8 before the crash, and the restart begins at the saved place, 2: 4 more, 12. \
Nothing is handled twice, even with no dedup. Committing more often shrinks the replay; two \
things make it harmless: a store that recognises what it already applied (by offset or by \
message id), and one that writes its effect and its position in one record (the atomic \
store).",
            &[tempt(
                "20",
                &[8, 12],
                "20 = 8 + 12 replays from 0. The commit came before the crash, so the restart \
reads 2 next: 8 + 4.",
            )],
        ),
        step(
            "commit before handling: naive balance",
            "Take the worked example again, but the consumer commits each position before \
it handles the payment, and crashes after committing past offset 1, before handling it. \
What balance does the naive store end at?",
            LessonRun::store("worked-example", "naive")
                .guarantee("at-most-once")
                .every(1)
                .schedule("crash@commit:1"),
            Observe::FinalTotal,
            "5 before the crash, then the restart reads from 2, past offset 1: 4 more, 9. \
Nothing is repeated, and payment 1 (3) is lost: at-most-once, 3 under the true 12. Most \
systems choose the repeat, and make it harmless.",
            &[tempt(
                "12",
                &[5, 3, 4],
                "12 = 5 + 3 + 4 counts offset 1, which was committed but never handled. The \
restart reads from the committed position, 2.",
            )],
        ),
        step(
            "p19 for the retry: message-id",
            "Change the second p17 to p19: three different payments, p17 (5), p19 (5) and \
p18 (3), each sent once. What balance does the message-id store end at?",
            LessonRun::store("same-amount", "message-id"),
            Observe::FinalTotal,
            "5 + 5 + 3 = 13: a new id is a new payment, whatever its amount. The store \
skips repeated ids, never repeated amounts.",
            &[tempt(
                "8",
                &[5, 3],
                "8 = 5 + 3 skips p19 for having p17's amount. The store compares ids, and \
p19 is a new one.",
            )],
        ),
    ],
};

/// Delivery guarantees side by side, from the producer's side.
pub const GUARANTEES: Lesson = Lesson {
    name: "guarantees",
    title: "At most once, at least once, effectively once",
    intro: "First the payments: p17 (5), then p18 (3). The first send of p17 is troubled: \
either the send itself or its ack is lost. The last two questions take a producer that is \
restarted while a transaction is open.",
    steps: &[
        step(
            "at most once (never retries)",
            "At most once: the producer never retries, and p17's send is lost. What balance \
does any store end at?",
            LessonRun::store("payments", "naive").producer("no-retry"),
            Observe::FinalTotal,
            "The log holds p18 only (3). Nothing is duplicated, and the lost payment (5) is \
simply gone, 5 under what the application meant.",
            &[tempt(
                "8",
                &[5, 3],
                "8 = 5 + 3 counts p17, whose send was lost and never retried: it never \
reached the log, and no consumer can read it.",
            )],
        ),
        step(
            "at least once (retries)",
            "At least once: the ack is lost and the producer retries. What balance does the \
naive store end at?",
            LessonRun::store("payments", "naive"),
            Observe::FinalTotal,
            "Nothing is lost, and p17 is counted twice, the original and its retry: 5 + 5 + \
3 = 13.",
            &[tempt(
                "8",
                &[5, 3],
                "8 = 5 + 3 forgets the retry. The ack was lost, not the append, so the log \
holds p17 twice.",
            )],
        ),
        step(
            "effectively once (retries, id dedup)",
            "Effectively once means each payment's effect counted once, however often it is \
delivered; Kafka and DDIA call it exactly once. On the consumer's side: the producer \
retries, and the consumer dedups by message id. What balance?",
            LessonRun::store("payments", "message-id"),
            Observe::FinalTotal,
            "Every payment once, 5 + 3 = 8: retries plus dedup.",
            &[tempt(
                "13",
                &[5, 5, 3],
                "13 = 5 + 5 + 3 counts the retry, which carries p17's id: the store skips it.",
            )],
        ),
        step(
            "effectively once (retries, idempotent producer)",
            "Effectively once, on the log's side: it retries, and the producer is \
idempotent. What balance does the naive store end at?",
            LessonRun::store("payments", "naive").producer("idempotent"),
            Observe::FinalTotal,
            "5 + 3 = 8. The broker appends the retried batch only once: it answers the \
repeated sequence with success and the first send's offset, so the log holds p17 once and \
even the naive store ends exact here, where the consumer does not crash. The idempotent \
producer covers the leg from the producer to the log and no more: a consumer that crashes \
still replays (idem run ddia --store naive --producer idempotent ends at 110).",
            &[tempt(
                "13",
                &[5, 5, 3],
                "13 = 5 + 5 + 3 would need the retry in the log; the broker appended p17's \
batch once and answered the retry with its offset.",
            )],
        ),
        step(
            "a zombie's aborted transaction, read_uncommitted",
            "Transactions: a transactional producer (one transactional.id) sends each \
payment in a transaction. Instance A sends p41 (5) and commits, then sends p42 (3) and \
stalls before committing. Instance B starts with the same transactional.id, which aborts \
A's open transaction, and sends p42 (3) again and p43 (4), each committed. A's late commit \
is fenced. The consumer reads at read_uncommitted, the Java client's and kafka-python's \
default. What balance does the naive store end at?",
            LessonRun::store("zombie", "naive").producer("transactional"),
            Observe::FinalTotal,
            "An aborted transaction's records stay in the log, and read_uncommitted reads \
them: p41 (5), A's aborted p42 (3), B's p42 (3) and p43 (4), 15, 3 over what was \
committed. Fencing stopped A's commit, not A's record, which had landed already.",
            &[tempt(
                "12",
                &[5, 3, 4],
                "12 = 5 + 3 + 4 leaves out A's p42, but only its commit was refused: its \
record landed at offset 1 before B started, and read_uncommitted reads aborted records \
too. 5 + 3 + 3 + 4 = 15.",
            )],
        ),
        step(
            "the same log, read_committed",
            "Now the consumer reads the same log at read_committed, librdkafka's default. \
What balance does the naive store end at?",
            LessonRun::store("zombie", "naive")
                .producer("transactional")
                .isolation("read-committed"),
            Observe::FinalTotal,
            "read_committed passes over the records of aborted transactions, so A's p42 at \
offset 1 never reaches the store: 5 + 3 + 4. It also reads only the offsets before the \
last stable offset, the first offset of a transaction still open: had B never started, \
the consumer would wait at offset 1 until the coordinator aborted A's transaction, once \
transaction.timeout.ms (60 s by default) had passed. So the consumer needs read_committed: \
a transactional producer is exact only for consumers that read committed.",
            &[tempt(
                "15",
                &[5, 3, 3, 4],
                "15 = 5 + 3 + 3 + 4 counts A's aborted p42 at offset 1: read_committed \
passes over it.",
            )],
        ),
    ],
};

/// MQTT 3.1.1's three QoS levels against a device reset, with the receiver's session in
/// RAM and in flash.
pub const MQTT: Lesson = Lesson {
    name: "mqtt",
    title: "MQTT: QoS 0, 1 and 2 against a reset",
    intro: "A broker delivers 30 payments, p0 to p29, to one device subscribed to their \
topic: payment pN pays N % 9 + 1, 141 in all. The publisher sends all 30 at once. At QoS 1 \
and 2 the broker keeps at most 4 messages in flight, sent and not yet acknowledged (a limit \
on QoS 1 and 2 messages only: Mosquitto's max_inflight_messages, MQTT 5's Receive Maximum), \
so while the device handles p14, p15 to p17 are already on the connection. The device adds \
each payment to a total in its flash and resets once: right after its flash record for p14, \
before it acknowledges p14. It connects again with clean session 0, and the broker has kept \
its session: the subscription and what it sent that was not acknowledged.",
    steps: &[
        step(
            "QoS 0",
            "At QoS 0 (at most once) the device acknowledges nothing, so nothing limits what \
the broker writes to the connection. With a plain total += amount, what total does the \
device end at?",
            LessonRun::mqtt("naive", 0),
            Observe::FinalTotal,
            "QoS 0 has no acknowledgement and no resend (MQTT 3.1.1, section 4.3.1), and so \
no in-flight limit: the broker wrote all 30 to the connection at once, and the reset \
dropped p15 to p29 unread with it. Only p0 to p14 count: 66, under by 75. After the \
reconnect the broker has nothing left to send.",
            &[
                tempt(
                    "141",
                    &[141],
                    "141 would need the broker to send p15 to p29 again, which it never does \
at QoS 0: they were on the connection when the device reset.",
                ),
                tempt(
                    "117",
                    &[141, -7, -8, -9],
                    "117 = 141 - 7 - 8 - 9 loses only p15 to p17, as if 4 were the most the \
broker sends ahead. That limit counts messages waiting for an acknowledgement, and a QoS 0 \
message waits for none: the broker had written p15 to p29.",
                ),
                tempt(
                    "135",
                    &[141, -6],
                    "135 = 141 - 6 loses p14, but p14 was applied before the reset: what \
is lost is what was still on the connection, p15 to p29.",
                ),
            ],
        ),
        step(
            "QoS 1, plain total",
            "At QoS 1 (at least once), the same plain total: what does it end at?",
            LessonRun::mqtt("naive", 1),
            Observe::FinalTotal,
            "The broker keeps each QoS 1 message until its PUBACK, and on the reconnect sends \
every unacknowledged one again (section 4.4), with DUP 1 (section 3.3.1.1): p14 to p17. \
p15 to p17 had not been applied and count once; p14 had, and counts twice: 141 + 6 = 147, \
over by 6.",
            &[
                tempt(
                    "141",
                    &[141],
                    "141 would need the device to know that it applied p14. DUP 1 only says \
the message might have been sent before (section 3.3.1.1), as true of p15 to p17, never \
applied.",
                ),
                tempt(
                    "171",
                    &[141, 6, 7, 8, 9],
                    "171 = 141 + 6 + 7 + 8 + 9 counts all four resends twice, but p15 to p17 \
were lost with the connection before the device applied them: they count once.",
                ),
            ],
        ),
        step(
            "QoS 1, message ids",
            "Still QoS 1, but the store keeps the id of each payment it applied (the \
payload's id, p14) in the same flash record as the total, and skips an id it holds. The \
total?",
            LessonRun::mqtt("message-id", 1),
            Observe::FinalTotal,
            "The resent p14 carries an id the store holds with its effect: skipped, and \
acknowledged. 141, exact: at least once delivery and an idempotent receiver. The id must be \
the application's: MQTT's packet identifier is free for another message once acknowledged \
(section 2.3.1).",
            &[tempt(
                "147",
                &[141, 6],
                "147 = 141 + 6 applies p14 twice, but the flash record that added p14 also \
holds its id, so the resend is recognised.",
            )],
        ),
        step(
            "QoS 2, session in RAM",
            "At QoS 2 (exactly once), plain total again, but the device keeps the packet \
identifiers of the QoS 2 messages it has received in RAM only. The total?",
            LessonRun::mqtt("naive", 2).session("ram"),
            Observe::FinalTotal,
            "QoS 2 asks the receiver to keep each packet identifier from PUBLISH to PUBREL and \
to answer a PUBLISH it holds with PUBREC, without delivering it again (section 4.3.3). Kept \
in RAM, the reset forgets that p14 arrived; the broker, which never saw PUBREC, sends p14 \
again, and it is added again: 147, over by 6.",
            &[tempt(
                "141",
                &[141],
                "141 is the promise of QoS 2, but only while the receiver keeps its part of \
the session: the identifiers were in RAM, and the reset took them.",
            )],
        ),
        step(
            "QoS 2, session in flash",
            "At QoS 2 with the identifiers in flash, each written in the same record as the \
payment's effect: the total?",
            LessonRun::mqtt("naive", 2).session("flash"),
            Observe::FinalTotal,
            "After the reset the device reads p14's identifier back from the record that \
applied it, answers the resent p14 with PUBREC without adding it, and forgets the \
identifier at PUBREL. 141, exact, with a plain total: the session's state lives with the \
effect.",
            &[tempt(
                "147",
                &[141, 6],
                "147 = 141 + 6 adds p14 again, but its identifier was durable in the same \
record as its effect.",
            )],
        ),
        step(
            "QoS 2, flash records",
            "With the identifiers in flash, how many flash records does the device write for \
the 30 payments?",
            LessonRun::mqtt("naive", 2).session("flash"),
            Observe::FlashRecords,
            "Two a payment: one with the effect and the identifier, durable before PUBREC \
goes out, and one that forgets the identifier at PUBREL, durable before PUBCOMP. The resent \
p14 adds none. `idem mqtt consume` writes the forgetting with the next payment's record \
instead, unless asked `--release-now`.",
            &[tempt(
                "30",
                &[30],
                "30 is one a payment, but forgetting an identifier at PUBREL is a write \
too: without it, after a reset the device would still hold an identifier the broker has \
since reused, and would take the new message for a resend and never apply it.",
            )],
        ),
    ],
};

/// An effect that moves hardware: a dosing pump's dose against a reset between its
/// record and its last millilitre ([`idem_sim::pump`]).
pub const PUMP: Lesson = Lesson {
    name: "pump",
    title: "A dosing pump: a dose lost, a dose doubled",
    intro: "A dosing pump's controller reads 20 commands from a gateway's log, each \
Dispense 5 ml with a command id of its own: 100 ml in all. It applies each command to a \
state in flash (the millilitres commanded), in one record with the command's id, so a \
command replayed after a reset is skipped. Then the motor pumps the dose, a millilitre at \
a time, and counts every millilitre on a counter of its own, which no reset clears. The \
controller resets twice: right after the record of the command at offset 6 is durable, \
before the motor starts; and right after the motor has pumped the last millilitre of the \
dose at offset 13, before anything else happens.",
    steps: &[
        step(
            "drive after the step",
            "The controller drives the motor after each command's record, and does nothing \
about the motor at boot. How many millilitres does the motor's counter show at the end?",
            LessonRun::pump("after"),
            Observe::FinalTotal,
            "The first reset came after the record of offset 6, before the motor started. \
The record says the command was applied, so the replay after the boot skips it, and \
nothing else pumps it: 5 ml lost, 95 of the 100. The second reset came after offset 13's \
dose was pumped in full, and costs nothing. Nothing is pumped twice, and a dose can be \
lost: at most once.",
            &[
                tempt(
                    "100",
                    &[100],
                    "100 would need something to pump offset 6's dose after the reset. Its \
record says it was applied, so the replay skips it, and this controller does nothing at \
boot.",
                ),
                tempt(
                    "90",
                    &[100, -5, -5],
                    "90 = 100 - 5 - 5 loses a dose at each reset, but offset 13's dose had \
been pumped in full before the second one: only offset 6's is lost.",
                ),
            ],
        ),
        step(
            "re-assert at boot",
            "Now the controller does what is right for a setpoint: it drives the motor \
after each command, and at every boot it pumps the newest dose in its state again, to be \
sure. The counter at the end?",
            LessonRun::pump("reassert"),
            Observe::FinalTotal,
            "At the first boot the newest dose is offset 6's, never pumped: pumping it at \
boot is its only time, as it should be. At the second boot the newest is offset 13's, \
pumped to its last millilitre before the reset: pumped again, 5 ml twice, 105. A setpoint \
set twice is set once; a dose pumped twice is two doses. Nothing is lost, and a dose can \
be doubled: at least once.",
            &[
                tempt(
                    "100",
                    &[100],
                    "100 holds at the first reset, where the motor had not started. At the \
second, offset 13's dose had been pumped in full, and the boot pumps it again.",
                ),
                tempt(
                    "110",
                    &[100, 5, 5],
                    "110 = 100 + 5 + 5 doubles a dose at each reset, but at the first the \
motor had not started: the boot pumps offset 6's dose for the first time.",
                ),
            ],
        ),
        step(
            "the effects API",
            "Now with idem's effects API: the command's record also holds the dose's \
intent; after the motor's last millilitre the controller writes a done for it in a ledger \
of its own; and at boot, for an intent without its done, it asks the motor's counter \
whether the millilitres the state commanded were pumped, and pumps only what is missing. \
The counter at the end?",
            LessonRun::pump("effects"),
            Observe::FinalTotal,
            "At the first boot, offset 6's intent has no done and the counter is 5 ml short \
of what the state commanded: the controller pumps them. At the second, offset 13's intent \
has no done, but the counter shows every millilitre commanded: the controller writes the \
done and pumps nothing. Each dose once, 100 ml: exactly once, because the pump can be \
asked. Redoing the action at boot without asking is at least once; marking it done \
without acting, at most once.",
            &[
                tempt(
                    "105",
                    &[100, 5],
                    "105 = 100 + 5 redoes offset 13's dose, but the boot asks the counter \
first, and it shows that dose pumped: only the done is written.",
                ),
                tempt(
                    "95",
                    &[100, -5],
                    "95 = 100 - 5 drops offset 6's dose, but its intent had no done and the \
counter was short of it, so the boot pumps it.",
                ),
            ],
        ),
        step(
            "a dose cut half way",
            "A different reset, and only this one: the power fails when the motor has \
pumped 2 ml of the dose at offset 17. The controller uses the effects API as before. The \
counter at the end?",
            LessonRun::pump("effects").schedule("crash@pump:17/2"),
            Observe::FinalTotal,
            "At the boot, offset 17's intent has no done, and the counter is 3 ml short of \
what the state commanded: the controller pumps those 3 and writes the done, 100. The \
decision says whether to act; how much is left is for the pump's own counter to say. \
Driving after the step would end 3 ml short, re-asserting 2 ml over.",
            &[
                tempt(
                    "102",
                    &[100, 2],
                    "102 = 100 + 2 pumps the whole dose again after its first 2 ml. The \
counter says what is missing, and only that is pumped.",
                ),
                tempt(
                    "97",
                    &[100, -3],
                    "97 = 100 - 3 leaves the dose at 2 of its 5 ml, as marking it done at \
boot would. The intent had no done, so the boot asks the counter and pumps the missing 3 \
ml.",
                ),
            ],
        ),
    ],
};

/// Every lesson, in teaching order.
pub static LESSONS: [Lesson; 5] = [DDIA, PAYMENTS, GUARANTEES, MQTT, PUMP];

/// The lesson named `name`.
pub fn lesson(name: &str) -> Option<&'static Lesson> {
    LESSONS.iter().find(|l| l.name == name)
}
