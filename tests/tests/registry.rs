//! The store registry (`idem_payments::registry`): every store by name and the sources that
//! take it. A store of the application's own, which the registry has no entry for, runs
//! on every source its own entry lists: `host-lib/src/own_store.rs` writes one and runs it
//! on the simulator and on the file image.

use idem_payments::registry::{STORES, Source, StoreKind};

#[test]
fn every_source_takes_the_stores_the_registry_lists() {
    let names = |s| StoreKind::on(s).map(StoreKind::name).collect::<Vec<_>>();
    assert_eq!(
        names(Source::Kafka),
        ["naive", "offset", "message-id", "atomic"]
    );
    assert_eq!(
        names(Source::Board),
        [
            "naive",
            "offset",
            "message-id",
            "producer-seq",
            "atomic",
            "two-phase"
        ]
    );
    // MQTT has no offsets: the stores whose rule needs none.
    assert_eq!(names(Source::Mqtt), ["naive", "message-id"]);
    assert_eq!(names(Source::Simulator).len(), STORES.len());
    assert_eq!(names(Source::Image).len(), STORES.len());
    // The board's own store ids are exactly the registry's board stores.
    for e in &STORES {
        assert_eq!(
            idem_board::feed::StoreId::from_kind(e.kind).map(|s| s.name()),
            e.kind.runs_on(Source::Board).then_some(e.name),
            "{}",
            e.name
        );
    }
}
