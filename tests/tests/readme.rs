//! The README's figures table, checked row by row against runs of the core simulator,
//! so the documentation cannot drift from what idem computes.

use idem_payments::registry::{self, Runnable, StoreJob, StoreKind, WINDOW};
use idem_payments::{Sum, Truth};
use idem_sim::run::{self, Action, Report, TraceStep};
use idem_sim::scenario::{self, Scenario};

fn ranges(offsets: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < offsets.len() {
        let start = offsets[i];
        while i + 1 < offsets.len() && offsets[i + 1] == offsets[i] + 1 {
            i += 1;
        }
        parts.push(if start == offsets[i] {
            start.to_string()
        } else {
            format!("{start}..{}", offsets[i])
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn observe<L: Truth, S: Sum + Clone>(s: &Scenario<L>, store: S) -> (Report, String, String) {
    let (mut redelivered, mut skipped) = (Vec::new(), Vec::new());
    let r = run::run(s, store, &mut |t: &TraceStep| match (t.action, t.offset) {
        (Action::Deliver { redelivery: true }, Some(o)) => redelivered.push(o),
        (Action::Skip, Some(o)) => skipped.push(o),
        _ => {}
    })
    .unwrap();
    (r, ranges(&redelivered), ranges(&skipped))
}

fn row<L: Truth>(s: &Scenario<L>, store: &str) -> Vec<String> {
    struct Observe<'a, L>(&'a Scenario<L>);
    impl<L: Truth> StoreJob for Observe<'_, L> {
        type Out = (Report, String, String);
        fn call<S: Runnable>(self, store: S) -> Self::Out {
            observe(self.0, store)
        }
    }
    let kind = StoreKind::from_name(store)
        .unwrap_or_else(|| panic!("README names an unknown store {store}"));
    let (r, redelivered, skipped) = registry::with_store(kind, WINDOW, Observe(s)).unwrap();
    let committed = r
        .committed_at_crash()
        .map_or("null".to_string(), |c| c.to_string());
    vec![
        r.final_total.to_string(),
        r.true_total.to_string(),
        committed,
        redelivered,
        skipped,
    ]
}

#[test]
fn readme_figures_match_the_core() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/teachers.md"))
            .unwrap();
    let table = readme
        .split("## Figures")
        .nth(1)
        .expect("docs/teachers.md has a Figures section");
    let mut checked = 0;
    for line in table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| scenario"))
    {
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        let got = match cells[0].as_str() {
            "ddia" => row(
                &scenario::ddia(100, idem_payments::ddia::CHECKPOINT_EVERY, Some(49)).unwrap(),
                &cells[1],
            ),
            "worked-example" => row(&scenario::worked_example().unwrap(), &cells[1]),
            "payments" => row(
                &scenario::payments(scenario::ProducerMode::NonIdempotent).unwrap(),
                &cells[1],
            ),
            other => panic!("README names an unknown scenario {other}"),
        };
        assert_eq!(got, cells[2..], "README row: {line}");
        checked += 1;
    }
    assert_eq!(checked, 10, "rows checked");
}
