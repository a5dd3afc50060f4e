//! From a store or fix chosen at run time to the core's sinks type, and from a loaded
//! log to its type: the two choices are made apart ([`with_sinks`], [`dispatch`]).

use idem_payments::registry::{self, MessageIdStore, Runnable};
use idem_payments::stores::Naive;
use idem_payments::{Sum, SumSinks, Truth};
use idem_sim::dual::{self, DerivedTotal, StampedViews};
use idem_sim::scenario::Scenario;

use super::args::{FixArg, SinkChoice, StoreKind};
use super::load::Loaded;
use crate::error::usage;

/// The message-id store's window capacity (the registry's).
pub use idem_payments::registry::WINDOW;

/// Sinks the host can run: any core sinks (each is cloneable and can cross threads).
pub trait HostSinks: SumSinks<State: Send + Sync, Durable: Send + Sync> + Send + Sync {}

impl<K: SumSinks<State: Send + Sync, Durable: Send + Sync> + Send + Sync> HostSinks for K {}

/// Work to do with sinks, whatever their type.
pub trait SinksJob {
    /// What the work returns.
    type Out;
    /// Does the work.
    fn call<K: HostSinks>(self, sinks: K) -> anyhow::Result<Self::Out>;
}

/// Work to do with a scenario and sinks, whatever their types.
pub trait Job {
    /// What the work returns.
    type Out;
    /// Does the work.
    fn call<L: Truth + Sync, K: HostSinks>(
        self,
        scenario: &Scenario<L>,
        sinks: K,
    ) -> anyhow::Result<Self::Out>;
}

/// Work to do with one store (its record type and journal tag), whatever its type.
pub trait StoreJob {
    /// What the work returns.
    type Out;
    /// Does the work.
    fn call<S: Sum + HostSinks>(self, store: S) -> anyhow::Result<Self::Out>;
}

/// Refuses (exit 2) a window the store `kind` cannot have; only the message-id store
/// has one. Check this before any file is created.
pub fn check_window(kind: StoreKind, window: usize) -> anyhow::Result<()> {
    if kind == StoreKind::MessageId {
        MessageIdStore::new(Naive, window).map_err(|e| usage(e.to_string()))?;
    }
    Ok(())
}

/// Calls `job` with the store `kind` names (with `window` for the message-id store):
/// the registry's dispatch ([`idem_payments::registry::with_store`]).
pub fn with_store<J: StoreJob>(kind: StoreKind, window: usize, job: J) -> anyhow::Result<J::Out> {
    struct Adapt<J>(J);
    impl<J: StoreJob> registry::StoreJob for Adapt<J> {
        type Out = anyhow::Result<J::Out>;
        fn call<S: Runnable>(self, store: S) -> anyhow::Result<J::Out> {
            self.0.call(store)
        }
    }
    registry::with_store(kind, window, Adapt(job)).map_err(|e| usage(e.to_string()))?
}

/// Calls `job` with the sinks `choice` names (with `window` for the message-id store).
pub fn with_sinks<J: SinksJob>(
    choice: SinkChoice,
    window: usize,
    job: J,
) -> anyhow::Result<J::Out> {
    struct AsStore<J>(J);
    impl<J: SinksJob> StoreJob for AsStore<J> {
        type Out = J::Out;
        fn call<S: Sum + HostSinks>(self, store: S) -> anyhow::Result<J::Out> {
            self.0.call(store)
        }
    }
    match choice {
        SinkChoice::Store(kind) => with_store(kind, window, AsStore(job)),
        SinkChoice::Dual(FixArg::None) => job.call(dual::two_records()),
        SinkChoice::Dual(FixArg::Atomic) => job.call(StampedViews),
        SinkChoice::Dual(FixArg::Derive) => job.call(DerivedTotal),
        SinkChoice::Dual(FixArg::Split) => job.call(dual::split_records()),
    }
}

/// Whether the sinks `choice` names promise an exact total under replay.
pub fn idempotent(choice: SinkChoice) -> bool {
    struct Ask;
    impl SinksJob for Ask {
        type Out = bool;
        fn call<K: HostSinks>(self, _: K) -> anyhow::Result<bool> {
            Ok(K::IDEMPOTENT)
        }
    }
    with_sinks(choice, WINDOW, Ask).unwrap_or(true)
}

/// Calls `job` with `loaded`'s scenario and the sinks `choice` names.
pub fn dispatch<J: Job>(
    loaded: &Loaded,
    choice: SinkChoice,
    window: usize,
    job: J,
) -> anyhow::Result<J::Out> {
    struct Bind<'a, L, J>(&'a Scenario<L>, J);
    impl<L: Truth + Sync, J: Job> SinksJob for Bind<'_, L, J> {
        type Out = J::Out;
        fn call<K: HostSinks>(self, sinks: K) -> anyhow::Result<J::Out> {
            self.1.call(self.0, sinks)
        }
    }
    match loaded {
        Loaded::Generated(s) => with_sinks(choice, window, Bind(s, job)),
        Loaded::Small(s) => with_sinks(choice, window, Bind(s, job)),
        Loaded::File(s) => with_sinks(choice, window, Bind(s, job)),
        Loaded::Gauge(s) => with_sinks(choice, window, Bind(s, job)),
    }
}
