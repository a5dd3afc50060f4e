//! The MQTT run, as `idem run mqtt` and the mqtt lesson both see it: 30 payments p0..p29
//! through a broker that keeps the session (`idem_mqtt::sim`), 4 in flight at QoS 1 and 2
//! (at QoS 0, which has no acknowledgement, all 30 written at once), and one device
//! reset after p14's record, before its acknowledgement goes out.

use idem_mqtt::codec::QoS;
use idem_mqtt::receiver::{Ack, Decided, Keep, Release};
use idem_mqtt::sim::{self, Flash, Reset, Step, ToDevice};
use idem_payments::Sum;
use idem_payments::registry::{self, SumStoreJob};

use crate::select::{StoreKind, WINDOW};

/// The message after whose record the device resets.
pub const RESET_AFTER: usize = 14;
/// The payments the broker delivers.
pub const MESSAGES: usize = 30;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MqttRun {
    /// The store.
    pub store: StoreKind,
    /// The subscription's QoS.
    pub qos: QoS,
    /// The identifiers in RAM (`--session ram`), else in flash with the effect.
    pub ram: bool,
}

/// One step, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// What the broker sent.
    pub sent: String,
    /// What the device did with it.
    pub did: String,
    /// The store's total after it.
    pub total: i64,
    /// The payment it applied, if it applied one.
    pub applied: Option<usize>,
}

/// What a run ended with.
#[derive(Debug, Clone)]
pub struct MqttOutcome {
    /// Each payment once.
    pub truth: i64,
    /// The run's end, the store's total as its state.
    pub end: sim::End<i64>,
    /// Every step.
    pub lines: Vec<Line>,
    /// The payments applied more than once.
    pub twice: Vec<usize>,
    /// The payments never applied.
    pub lost: Vec<usize>,
}

struct Job(MqttRun);

impl SumStoreJob for Job {
    type Out = (sim::End<i64>, Vec<Line>);
    fn call<S: Sum + Send + Sync>(self, store: S) -> Self::Out {
        let r = self.0;
        let keep = if r.ram { Keep::Ram } else { Keep::Flash };
        let setup = sim::Setup {
            lose_session: false,
            ..sim::setup((r.qos, keep, Release::Now))
        };
        let mut lines = Vec::new();
        let reset = Some(Reset::AfterMessage(RESET_AFTER));
        let end = sim::run_traced(&mut Flash::new(), store, setup, reset, &mut |s: Step<
            S::State,
        >| {
            lines.push(line(&s, S::total(&s.state)));
        });
        (end.map(|state| S::total(&state)), lines)
    }
}

/// Runs it: the store must be one that runs on MQTT.
pub fn run(r: MqttRun) -> anyhow::Result<MqttOutcome> {
    crate::select::check_pair(Some(crate::select::ScenarioKind::Mqtt), r.store)?;
    let (end, lines) = registry::with_mqtt_store(r.store, WINDOW, Job(r))
        .ok_or_else(|| anyhow::anyhow!("the {} store does not run on MQTT", r.store.name()))?
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut times = [0usize; MESSAGES];
    for i in lines.iter().filter_map(|l| l.applied) {
        times[i] += 1;
    }
    Ok(MqttOutcome {
        truth: sim::true_total(MESSAGES),
        end,
        twice: (0..MESSAGES).filter(|&i| times[i] > 1).collect(),
        lost: (0..MESSAGES).filter(|&i| times[i] == 0).collect(),
        lines,
    })
}

fn line<T>(s: &Step<T>, total: i64) -> Line {
    let (sent, message) = match s.packet {
        Some(ToDevice::Publish {
            qos,
            pid,
            dup,
            message,
        }) => {
            let id = if qos == QoS::AtMostOnce {
                String::new()
            } else {
                format!(" (id {pid}{})", if dup { ", DUP 1" } else { "" })
            };
            (format!("PUBLISH p{message}{id}"), Some(message))
        }
        Some(ToDevice::Pubrel(pid)) => (format!("PUBREL {pid}"), None),
        None => ("(quiet)".into(), None),
    };
    let mut did = match s.decided {
        Some(Decided::Applied) => "applied".to_string(),
        Some(Decided::Skipped) => "skipped: a message id it holds".into(),
        Some(Decided::Held) => "held: nothing applied".into(),
        Some(Decided::Rejected) => "rejected".into(),
        Some(Decided::Retained) => "retained: not applied".into(),
        None if s.records > 0 => "released".into(),
        None if s.held => "released in RAM".into(),
        None => "not held: nothing to forget".into(),
    };
    if s.records > 0 {
        did += ", a record";
    }
    if s.reset {
        did += "; RESET";
    }
    for _ in 0..s.completed {
        did += ", PUBCOMP";
    }
    match s.ack {
        Some(Ack::Puback(pid)) => did += &format!(", PUBACK {pid}"),
        Some(Ack::Pubrec(pid)) => did += &format!(", PUBREC {pid}"),
        None => {}
    }
    let applied = (s.decided == Some(Decided::Applied))
        .then_some(message)
        .flatten();
    Line {
        sent,
        did,
        total,
        applied,
    }
}
