//! Defects of idem's MQTT side that no behavioural test covers: each test names the
//! defect it guards against.

use std::path::Path;

/// The text of a file of the repository.
fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The embedded MQTT clients idem could not use are cited at the releases that were
/// checked: minimq 0.13.5 (QoS 2 identifiers kept in RAM) and rust-mqtt 0.6.0 (MQTT 5
/// alone), not minimq 0.10 and rust-mqtt 0.3, whose shortcomings (QoS 0 only; QoS 0 and
/// 1 with clean sessions) those releases no longer have.
#[test]
fn the_embedded_clients_are_cited_at_the_releases_checked() {
    for path in ["mqtt/src/lib.rs", "docs/mqtt.md"] {
        let text = read(path);
        for current in ["minimq 0.13.5", "rust-mqtt 0.6.0"] {
            assert!(text.contains(current), "{path} cites {current}");
        }
    }
    for path in ["mqtt/src/lib.rs", "docs/mqtt.md", "README.md"] {
        let text = read(path);
        for stale in ["minimq 0.10", "rust-mqtt 0.3"] {
            assert!(!text.contains(stale), "{path} still cites {stale}");
        }
    }
}
