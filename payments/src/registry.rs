//! Every store idem runs, in one place: its name, what it does, the capacities of its
//! bounded memories, the sources it consumes, and the one dispatch from a store's name
//! to its type ([`with_store`]). The simulator's front end, the file image, Kafka, the
//! board, the page, the benches and the tests take them from here.
//!
//! A store of the application's own needs no entry: it states its own ([`Listed`]) and
//! runs on the sources that [take any store](Source::takes_any), through their generic
//! paths (`host-lib/src/own_store.rs` writes one and runs it on the simulator and on a
//! file image). The registry names the stores the command line and the page can choose.

use crate::stores::{
    Atomic, Max, MessageIdWindow, Naive, OffsetStamped, ProducerSeq, Set, TwoPhase, UniqueKey,
};
use crate::{Sum, SumSinks};
use idem_core::store::WindowSize;

/// The message-id store's window capacity: the ids its one flash record keeps.
pub const WINDOW: usize = 32;

/// How many producers the producer-seq store remembers (in its one flash record).
pub const PRODUCERS: usize = 8;

/// How many rows the unique-key table holds. Its state is rebuilt from one appended
/// record per row, and the simulated device's store journal keeps 66 records while it
/// reclaims a page.
pub const UNIQUE_KEYS: usize = 64;

/// The message-id store at its capacity.
pub type MessageIdStore = MessageIdWindow<Naive, WINDOW>;
/// The producer-seq store at its capacity.
pub type ProducerSeqStore = ProducerSeq<PRODUCERS>;
/// The unique-key table at its capacity.
pub type UniqueKeyStore = UniqueKey<Naive, UNIQUE_KEYS>;

/// Where a store's events can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The crash simulator (`idem run`, `idem sweep`, the page).
    Simulator,
    /// A real process consuming into a flash image file (`idem consume`).
    Image,
    /// A Kafka-protocol broker (`idem kafka consume`).
    Kafka,
    /// The micro:bit, fed by the host (`idem device`).
    Board,
    /// An MQTT broker's persistent session (`idem mqtt consume`): no offsets, so only
    /// the stores whose rule needs none.
    Mqtt,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 5] = [
        Self::Simulator,
        Self::Image,
        Self::Kafka,
        Self::Board,
        Self::Mqtt,
    ];

    /// Its name in sentences and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Simulator => "simulator",
            Self::Image => "image",
            Self::Kafka => "kafka",
            Self::Board => "board",
            Self::Mqtt => "mqtt",
        }
    }

    /// Whether it takes a store the registry has no entry for ([`Listed`]): the
    /// simulator (`idem_sim::run`) and the file image (the host's consume path) are
    /// generic over any [`Runnable`] store. Kafka and the board take the stores
    /// [`STORES`] lists for them, by name: the board's are compiled into its firmware,
    /// and `idem kafka consume` chooses its store on the command line.
    pub const fn takes_any(self) -> bool {
        matches!(self, Self::Simulator | Self::Image)
    }
}

/// A store that states its own entry: how a store of the application's own, with no
/// name on the command line, says what it is and where it runs. It runs on each of
/// [`Listed::SOURCES`], which are sources that [take any store](Source::takes_any).
pub trait Listed: Runnable {
    /// Its name in reports and in a file image's header.
    const NAME: &'static str;
    /// What its events carry.
    const FAMILY: Family;
    /// The sources it consumes.
    const SOURCES: &'static [Source];
}

/// What a store's events carry, and so which logs it can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Amounts to add up (the payment stores).
    Sum,
    /// A gauge's readings (set and max).
    Gauge,
    /// Amounts into a table that grows with every message, kept out of `all`.
    Table,
}

/// The stores the command line and the page can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// total += amount.
    Naive,
    /// Apply only if the offset is newer than the stamp.
    Offset,
    /// Skip message ids seen in a bounded window.
    MessageId,
    /// Per producer, apply only if (epoch, sequence) is newer.
    ProducerSeq,
    /// Value and consumer position in one record, written at checkpoints.
    Atomic,
    /// Two-phase commit of value and position at each checkpoint.
    TwoPhase,
    /// A gauge: value = reading (naturally idempotent).
    Set,
    /// A gauge: value = the larger of value and reading (idempotent and commutative).
    Max,
    /// Insert with a unique key: a row per message id, never forgotten (64 rows; a full
    /// table refuses a new key).
    UniqueKey,
}

/// One store's entry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The store.
    pub kind: StoreKind,
    /// Its name on the command line, in JSON and on the wire's reports.
    pub name: &'static str,
    /// What its events carry.
    pub family: Family,
    /// The sources it consumes.
    pub sources: &'static [Source],
}

use Source::{Board, Image, Kafka, Mqtt, Simulator};

/// Every store, in the command line's order.
pub const STORES: [Entry; 9] = [
    Entry {
        kind: StoreKind::Naive,
        name: "naive",
        family: Family::Sum,
        sources: &[Simulator, Image, Kafka, Board, Mqtt],
    },
    Entry {
        kind: StoreKind::Offset,
        name: "offset",
        family: Family::Sum,
        sources: &[Simulator, Image, Kafka, Board],
    },
    Entry {
        kind: StoreKind::MessageId,
        name: "message-id",
        family: Family::Sum,
        sources: &[Simulator, Image, Kafka, Board, Mqtt],
    },
    Entry {
        kind: StoreKind::ProducerSeq,
        name: "producer-seq",
        family: Family::Sum,
        sources: &[Simulator, Image, Board],
    },
    Entry {
        kind: StoreKind::Atomic,
        name: "atomic",
        family: Family::Sum,
        sources: &[Simulator, Image, Kafka, Board],
    },
    Entry {
        kind: StoreKind::TwoPhase,
        name: "two-phase",
        family: Family::Sum,
        sources: &[Simulator, Image, Board],
    },
    Entry {
        kind: StoreKind::Set,
        name: "set",
        family: Family::Gauge,
        sources: &[Simulator, Image],
    },
    Entry {
        kind: StoreKind::Max,
        name: "max",
        family: Family::Gauge,
        sources: &[Simulator, Image],
    },
    Entry {
        kind: StoreKind::UniqueKey,
        name: "unique-key",
        family: Family::Table,
        sources: &[Simulator, Image],
    },
];

impl StoreKind {
    /// Every store that sums amounts, in table order (what `all` means).
    pub const ALL: [StoreKind; 6] = [
        Self::Naive,
        Self::Offset,
        Self::MessageId,
        Self::ProducerSeq,
        Self::Atomic,
        Self::TwoPhase,
    ];

    /// The gauges, for a reading rather than an amount (the `gauge` scenario).
    pub const GAUGES: [StoreKind; 2] = [Self::Set, Self::Max];

    /// Naturally idempotent stores that sum amounts, kept out of `all`: their memory
    /// grows with every message, so a long log fills them (`unique-key`).
    pub const TABLES: [StoreKind; 1] = [Self::UniqueKey];

    /// Its entry.
    pub const fn entry(self) -> &'static Entry {
        &STORES[self as usize]
    }

    /// The name on the command line and in JSON.
    pub const fn name(self) -> &'static str {
        self.entry().name
    }

    /// The store named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        STORES.iter().find(|e| e.name == name).map(|e| e.kind)
    }

    /// Whether it consumes `source`.
    pub fn runs_on(self, source: Source) -> bool {
        self.entry().sources.contains(&source)
    }

    /// The stores of `family`, in table order.
    pub fn of(family: Family) -> impl Iterator<Item = StoreKind> + Clone {
        STORES
            .iter()
            .filter(move |e| e.family == family)
            .map(|e| e.kind)
    }

    /// The stores that consume `source`, in table order.
    pub fn on(source: Source) -> impl Iterator<Item = StoreKind> + Clone {
        STORES
            .iter()
            .filter(move |e| e.sources.contains(&source))
            .map(|e| e.kind)
    }

    /// Whether the checker holds it to the true total under replay.
    pub fn idempotent(self) -> bool {
        struct Ask;
        impl StoreJob for Ask {
            type Out = bool;
            fn call<S: Runnable>(self, _: S) -> bool {
                <S as SumSinks>::IDEMPOTENT
            }
        }
        with_store(self, WINDOW, Ask).unwrap_or(true)
    }
}

/// The names of `kinds` as a sentence lists them, `last` before the last name and a
/// comma before the others: with `" or "`, `naive, offset, message-id or atomic`.
pub fn list<I>(kinds: I, last: &'static str) -> impl core::fmt::Display
where
    I: Iterator<Item = StoreKind> + Clone,
{
    struct Names<I>(I, &'static str);
    impl<I: Iterator<Item = StoreKind> + Clone> core::fmt::Display for Names<I> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            let n = self.0.clone().count();
            for (i, k) in self.0.clone().enumerate() {
                match i {
                    0 => {}
                    _ if i + 1 == n => f.write_str(self.1)?,
                    _ => f.write_str(", ")?,
                }
                f.write_str(k.name())?;
            }
            Ok(())
        }
    }
    Names(kinds, last)
}

/// What a front end runs: any store the checker reads (its sinks cross threads).
pub trait Runnable: Sum + SumSinks<State: Send + Sync, Durable: Send + Sync> + Send + Sync {}

impl<S: Sum + SumSinks<State: Send + Sync, Durable: Send + Sync> + Send + Sync> Runnable for S {}

/// Work to do with one store, whatever its type.
pub trait StoreJob {
    /// What the work returns.
    type Out;
    /// Does the work.
    fn call<S: Runnable>(self, store: S) -> Self::Out;
}

/// Calls `job` with the store `kind` names, the message-id store with a window of
/// `window` ids (refused outside `1..=WINDOW`).
pub fn with_store<J: StoreJob>(
    kind: StoreKind,
    window: usize,
    job: J,
) -> Result<J::Out, WindowSize> {
    Ok(match kind {
        StoreKind::Naive => job.call(Naive),
        StoreKind::Offset => job.call(OffsetStamped),
        StoreKind::MessageId => job.call(MessageIdStore::new(Naive, window)?),
        StoreKind::ProducerSeq => job.call(ProducerSeq::<PRODUCERS>),
        StoreKind::Atomic => job.call(Atomic),
        StoreKind::TwoPhase => job.call(TwoPhase),
        StoreKind::Set => job.call(Set),
        StoreKind::Max => job.call(Max),
        StoreKind::UniqueKey => job.call(UniqueKey::<Naive, UNIQUE_KEYS>::default()),
    })
}

/// Work to do with one store of [`Source::Mqtt`]'s: a [`Sum`] store read without a
/// consumer (an MQTT receiver decides each message with the store's own rule).
pub trait SumStoreJob {
    /// What the work returns.
    type Out;
    /// Does the work.
    fn call<S: Sum + Send + Sync>(self, store: S) -> Self::Out;
}

/// Calls `job` with the store `kind` names, if [`Source::Mqtt`] takes it (`None`
/// otherwise); the message-id store with a window of `window` ids.
pub fn with_mqtt_store<J: SumStoreJob>(
    kind: StoreKind,
    window: usize,
    job: J,
) -> Option<Result<J::Out, WindowSize>> {
    if !kind.runs_on(Source::Mqtt) {
        return None;
    }
    Some(match kind {
        StoreKind::Naive => Ok(job.call(Naive)),
        StoreKind::MessageId => MessageIdStore::new(Naive, window).map(|s| job.call(s)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_sits_at_its_kind_and_names_are_unique() {
        for (i, e) in STORES.iter().enumerate() {
            assert_eq!(e.kind as usize, i);
            assert_eq!(StoreKind::from_name(e.name), Some(e.kind));
        }
        assert_eq!(StoreKind::from_name("two-phase"), Some(StoreKind::TwoPhase));
        assert_eq!(StoreKind::from_name("nope"), None);
    }

    #[test]
    fn the_named_groups_are_the_families() {
        let of = |f| StoreKind::of(f).collect::<heapless::Vec<StoreKind, 9>>();
        assert_eq!(of(Family::Sum), StoreKind::ALL);
        assert_eq!(of(Family::Gauge), StoreKind::GAUGES);
        assert_eq!(of(Family::Table), StoreKind::TABLES);
    }

    #[test]
    fn kafka_takes_four_stores_the_board_six_and_mqtt_two() {
        let kafka: heapless::Vec<&str, 9> =
            StoreKind::on(Source::Kafka).map(StoreKind::name).collect();
        assert_eq!(kafka, ["naive", "offset", "message-id", "atomic"]);
        assert_eq!(StoreKind::on(Source::Board).count(), 6);
        assert_eq!(StoreKind::on(Source::Simulator).count(), 9);
        let mqtt: heapless::Vec<&str, 9> =
            StoreKind::on(Source::Mqtt).map(StoreKind::name).collect();
        assert_eq!(mqtt, ["naive", "message-id"]);
    }

    #[test]
    fn a_sentence_lists_a_sources_stores() {
        use core::fmt::Write;
        let mut s = heapless::String::<96>::new();
        write!(s, "{}", list(StoreKind::on(Source::Kafka), " or ")).unwrap();
        assert_eq!(s, "naive, offset, message-id or atomic");
        s.clear();
        write!(s, "{}", list(StoreKind::on(Source::Board), " and ")).unwrap();
        assert_eq!(
            s,
            "naive, offset, message-id, producer-seq, atomic and two-phase"
        );
    }

    #[test]
    fn the_window_is_refused_outside_its_capacity() {
        assert_eq!(
            with_store(StoreKind::MessageId, WINDOW + 1, Count).unwrap_err(),
            WindowSize {
                window: 33,
                capacity: 32
            }
        );
        assert!(with_store(StoreKind::MessageId, WINDOW, Count).is_ok());
        // Only the message-id store has a window.
        assert!(with_store(StoreKind::Naive, 0, Count).is_ok());
    }

    struct Count;
    impl StoreJob for Count {
        type Out = ();
        fn call<S: Runnable>(self, _: S) {}
    }

    #[test]
    fn the_idempotent_stores() {
        let idempotent: heapless::Vec<StoreKind, 9> = STORES
            .iter()
            .map(|e| e.kind)
            .filter(|k| k.idempotent())
            .collect();
        assert_eq!(idempotent.len(), 8, "{idempotent:?}");
        assert!(!StoreKind::Naive.idempotent());
    }
}
