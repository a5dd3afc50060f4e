//! From command-line choices to core values: the choices themselves ([`mod@args`]), the
//! log they load ([`mod@load`]), the sinks type they name ([`mod@dispatch`]), and a
//! simulated run that collects what the renderers need ([`mod@simulate`]).

pub mod args;
pub mod dispatch;
pub mod load;
pub mod simulate;

pub use args::{
    FixArg, GuaranteeArg, IsolationArg, ProducerArg, ScenarioArgs, ScenarioKind, SinkChoice,
    StoreKind, WorkloadArgs, check_pair, choose, choose_all,
};
pub use dispatch::{HostSinks, Job, StoreJob, WINDOW, check_window, dispatch, with_store};
pub use load::{Loaded, load};
pub use simulate::{Outcome, ensure_every_crash_happened, run};
