//! The command line's choices that name a library's type: the registry's stores
//! ([`store`]) and when a flash file is synced ([`sync`]). The names are the libraries'
//! own ([`StoreKind::name`], [`SyncMode::name`]); the words beside each name in `--help`
//! and on the page are the front end's, so idem-payments and idem-sim carry no clap.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use idem_payments::registry::{STORES, StoreKind};
use idem_sim::sync::SyncMode;

/// A store's one line: what it does with an event.
pub const fn store_words(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Naive => "total += amount",
        StoreKind::Offset => "Apply only if the offset is newer than the stamp",
        StoreKind::MessageId => "Skip message ids seen in a bounded window",
        StoreKind::ProducerSeq => "Per producer, apply only if (epoch, sequence) is newer",
        StoreKind::Atomic => "Value and consumer position in one record, written at checkpoints",
        StoreKind::TwoPhase => "Two-phase commit of value and position at each checkpoint",
        StoreKind::Set => "A gauge: value = reading (naturally idempotent)",
        StoreKind::Max => {
            "A gauge: value = the larger of value and reading (idempotent and commutative)"
        }
        StoreKind::UniqueKey => {
            "Insert with a unique key: a row per message id, never forgotten (64 rows; a full \
             table refuses a new key)"
        }
    }
}

/// A sync mode's one line: when the image's writes reach the disk.
pub const fn sync_words(mode: SyncMode) -> &'static str {
    match mode {
        SyncMode::Checkpoint => {
            "Around position commits, page erases and page headers: survives a power cut"
        }
        SyncMode::EveryWrite => "After every journal write and erase",
        SyncMode::None => "Never: survives a killed process, not a power cut. For experiments",
    }
}

/// `--store`: one of the registry's stores, by name.
pub fn store() -> impl TypedValueParser<Value = StoreKind> {
    let names = STORES
        .iter()
        .map(|e| PossibleValue::new(e.name).help(store_words(e.kind)));
    PossibleValuesParser::new(names).try_map(|name| StoreKind::from_name(&name).ok_or("no store"))
}

/// `--sync`: one of the sync modes, by name.
pub fn sync() -> impl TypedValueParser<Value = SyncMode> {
    let names = SyncMode::ALL
        .iter()
        .map(|m| PossibleValue::new(m.name()).help(sync_words(*m)));
    PossibleValuesParser::new(names).try_map(|name| {
        SyncMode::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or("no sync mode")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_parser = store())]
        store: StoreKind,
        #[arg(long, value_parser = sync(), default_value = "checkpoint")]
        sync: SyncMode,
    }

    /// Each registry name reads as its store, each mode's name as its mode, and the
    /// default is a checkpoint's sync.
    #[test]
    fn names_read_as_their_kinds() {
        for e in &STORES {
            let cli = Cli::try_parse_from(["idem", "--store", e.name]).unwrap();
            assert_eq!(cli.store, e.kind);
            assert_eq!(cli.sync, SyncMode::Checkpoint);
        }
        for m in SyncMode::ALL {
            let cli =
                Cli::try_parse_from(["idem", "--store", "naive", "--sync", m.name()]).unwrap();
            assert_eq!(cli.sync, m);
        }
    }

    /// An unknown name is clap's usage error, which lists the registry's names.
    #[test]
    fn an_unknown_store_is_a_usage_error_that_lists_the_stores() {
        let Err(e) = Cli::try_parse_from(["idem", "--store", "nave"]) else {
            panic!("nave is no store");
        };
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        let text = e.to_string();
        assert!(
            text.contains("[possible values: naive, offset, message-id, producer-seq, atomic, two-phase, set, max, unique-key]"),
            "{text}"
        );
    }
}
