//! A power-cut checker for any flash user: [`sweep`] (and [`sweep_async`], feature
//! `async`) runs a program once on a fresh flash as a reference, then once more for each
//! place a power cut can fall in that run, cuts the power there, reboots the program from
//! what the flash holds and runs it to its end, and calls a judge after every boot and
//! every step with what it reported. It needs nothing of idem's consumer: the program is
//! two closures, `boot` (open whatever lives on the flash) and `step` (do one unit of
//! work, `None` when there is no more), over a flash the checker can cut ([`Cuttable`]:
//! [`MemFlash`] of any geometry) and a world outside the flash (an actuator, the log being
//! read, what the program acknowledged), which a cut does not touch.
//!
//! A cut falls in one of four ways ([`Model`]): in the middle of a unit write or an
//! erase, leaving it torn ([`Model::Torn`]); right before a unit write or an erase, every
//! unit before it programmed and it untouched ([`Model::Clean`], power lost between two
//! units of one write); at the end of an erase, leaving a page that reads all `0xFF` but
//! refuses a program until it is erased again ([`Model::WeakErase`]); or between two
//! steps, or right before or right after a hardware action the program marked, no flash
//! operation interrupted ([`Model::Reset`]). [`Plan::double_cuts`] adds, for every cut,
//! second cuts in the run that recovers from it.
//!
//! **Mark each hardware action.** The checker sees the flash, not the hardware: a step
//! that writes its record and then opens a valve in the same call is one place to it, so
//! no cut falls between the durable record and the valve, and a program that loses or
//! doubles the opening there is judged right. Run every action that moves hardware
//! through [`act`] (`cuts::act(flash, || valve.open())`): the sweep then also resets
//! right before and right after each one, in [`Model::Reset`]. Firmware code that moves
//! hardware inside its own step takes the action as a closure or trait its test routes
//! through [`act`]. An action not marked is invisible to the checker, and a sweep that
//! finds nothing wrong says nothing about it.
//!
//! It owns no rule of what is right: the judge says. A boot or step that fails with the
//! power on (the program's error, or the flash refusing a unit programmed twice or a
//! weakly erased page) is shown to the judge ([`Seen::Failed`]) and ends that trial.
//!
//! ```
//! use idem_core::journal::{Journal, JournalError, Region};
//! use idem_core::testing::cuts::{Plan, Seen, sweep};
//! use idem_core::testing::flash::{FlashError, MemFlash};
//!
//! type Flash = MemFlash<2, 256>;
//! /// What the program has been told is durable, and what it was writing.
//! #[derive(Default)]
//! struct World { acked: Option<u32>, writing: Option<u32> }
//! let region = Region::of_pages::<Flash>(0, 2);
//! let found = sweep(
//!     &Plan::new(),
//!     || (Flash::new(), World::default()),
//!     // Boot: open the journal; RAM holds it and the last count read back.
//!     |flash, _| Journal::<u32>::open(flash, region, 0xC0)
//!         .map(|(j, last)| (j, last.unwrap_or(0))),
//!     // Step: count to 40, one record a step.
//!     |(j, n), flash, world| {
//!         if *n == 40 { return Ok(None); }
//!         world.writing = Some(*n + 1);
//!         j.append(flash, &(*n + 1))?;
//!         *n += 1;
//!         world.acked = Some(*n);
//!         Ok::<_, JournalError<FlashError>>(Some(*n))
//!     },
//!     // Judge: a boot finds what was acknowledged, or the record being written,
//!     // which is then durable.
//!     |_, world, seen| match seen {
//!         Seen::Booted((_, n)) if Some(*n) != world.acked.or(Some(0))
//!             && Some(*n) != world.writing => Err("a boot lost an acknowledged count"),
//!         Seen::Booted((_, n)) => {
//!             (world.acked, world.writing) = (Some(*n), None);
//!             Ok(())
//!         }
//!         Seen::Ended | Seen::Stepped(_) => Ok(()),
//!         _ => Err("the run failed"),
//!     },
//! );
//! assert_eq!(found.reference.steps, 40);
//! assert_eq!(found.wrong(), 0);
//! assert_eq!(found.trials(), 1 + 2 * (found.reference.unit_writes + found.reference.erases)
//!     + found.reference.erases + 40);
//! ```

#[cfg(doc)]
use super::flash::MemFlash;
use super::flash::{ActionCut, FlashStats, PowerCut};
use super::rng::SplitMix64;

/// How a power cut leaves the place it falls on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// In the middle of a unit write or an erase: the unit keeps some of the bits it was
    /// to clear (at least one cleared), the page drifts at random
    /// ([`PowerCut::AtWordWrite`], [`PowerCut::AtErase`]).
    Torn,
    /// Right before a unit write or an erase: the units before it programmed, it
    /// untouched ([`PowerCut::BeforeWordWrite`], [`PowerCut::BeforeErase`]).
    Clean,
    /// At the end of an erase: the page reads all `0xFF` and refuses a program until it
    /// is erased again ([`PowerCut::WeakErase`]).
    WeakErase,
    /// Between two steps, or right before or right after a hardware action marked
    /// with [`act`]: RAM is lost, no flash operation is interrupted.
    Reset,
}

impl Model {
    /// Every model, in the order [`Found::models`] counts them.
    pub const ALL: [Model; 4] = [Model::Torn, Model::Clean, Model::WeakErase, Model::Reset];

    fn index(self) -> usize {
        self as usize
    }
}

/// Where in a run a cut falls, counted from the start of the run (a first cut) or from
/// the reboot after the first cut (a second cut), 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// At the n-th unit write.
    UnitWrite(u64),
    /// At the n-th page erase.
    Erase(u64),
    /// After the n-th step that reported.
    AfterStep(u64),
    /// Right before the n-th hardware action marked with [`act`]: it does not run.
    BeforeAction(u64),
    /// Right after the n-th hardware action marked with [`act`].
    AfterAction(u64),
}

/// One power cut: its model and where it falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// How it leaves the operation it falls on.
    pub model: Model,
    /// Where it falls.
    pub at: At,
}

impl core::fmt::Display for Cut {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let how = match self.model {
            Model::Torn => "torn",
            Model::Clean => "before",
            Model::WeakErase => "weak at the end of",
            Model::Reset => "reset",
        };
        match self.at {
            At::UnitWrite(n) => write!(f, "{how} unit write {n}"),
            At::Erase(n) => write!(f, "{how} erase {n}"),
            At::AfterStep(n) => write!(f, "{how} after step {n}"),
            At::BeforeAction(n) => write!(f, "{how} before action {n}"),
            At::AfterAction(n) => write!(f, "{how} after action {n}"),
        }
    }
}

/// One run of the program: the cuts it suffers (none for the reference run; a second
/// one only with [`Plan::double_cuts`]) and the seed of its torn contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trial {
    /// The first cut, then the second, counted from the reboot after the first.
    pub cuts: [Option<Cut>; 2],
    /// The seed of the flash's torn contents in this run.
    pub seed: u64,
}

impl core::fmt::Display for Trial {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.cuts {
            [None, _] => f.write_str("the reference run")?,
            [Some(a), None] => write!(f, "a cut {a}")?,
            [Some(a), Some(b)] => write!(f, "a cut {a}, then {b} after the reboot")?,
        }
        write!(f, " (noise seed {:#x})", self.seed)
    }
}

/// What the judge is shown, after every boot and every step of every trial.
#[derive(Debug)]
pub enum Seen<'a, A, R, E> {
    /// The program booted: what it holds in RAM.
    Booted(&'a A),
    /// A step completed and reported this.
    Stepped(&'a R),
    /// A boot or a step failed with the power on: the trial ends here.
    Failed(&'a E),
    /// The program said it has no more to do: the trial ends here.
    Ended,
    /// The program did not end within the plan's bound on steps: the trial ends here.
    Stuck,
}

/// What the checker sweeps: which models, whether double cuts, the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    models: [bool; 4],
    double: u32,
    /// First cuts a model: all of them (0), or a seeded sample of this many.
    sample: u64,
    seed: u64,
    max_steps: u64,
}

impl Default for Plan {
    fn default() -> Self {
        Self::new()
    }
}

impl Plan {
    /// Every model, single cuts, seed `0x1DE5`, a run bounded to four times the
    /// reference's steps and 64 more.
    pub const fn new() -> Self {
        Self {
            models: [true; 4],
            double: 0,
            sample: 0,
            seed: 0x1DE5,
            max_steps: 0,
        }
    }

    /// Only these models.
    pub const fn models(mut self, models: &[Model]) -> Self {
        self.models = [false; 4];
        let mut i = 0;
        while i < models.len() {
            self.models[models[i] as usize] = true;
            i += 1;
        }
        self
    }

    /// After each cut, `n` second cuts of the same model, spread evenly over the places
    /// of the run that recovers from it (all of them when it has `n` or fewer).
    pub const fn double_cuts(mut self, n: u32) -> Self {
        self.double = n;
        self
    }

    /// Of each model's places, only `n` first cuts, drawn at random from the plan's seed
    /// (all of them when the model has `n` or fewer; 0, the default, for all): a run too
    /// long to cut at every place (a flash of large sectors) swept within a bounded time.
    /// Second cuts ([`Plan::double_cuts`]) follow each drawn first cut as they would.
    pub const fn sample(mut self, n: u64) -> Self {
        self.sample = n;
        self
    }

    /// The seed of the torn contents: trial `i` (0 for the reference) uses `seed + i`.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// A run that takes more than `steps` steps is [`Seen::Stuck`] (the reference run
    /// too); 0 for the default.
    pub const fn max_steps(mut self, steps: u64) -> Self {
        self.max_steps = steps;
        self
    }
}

/// A flash the checker can cut: [`MemFlash`] of any geometry (and `HeapFlash`, feature
/// `alloc`).
pub trait Cuttable {
    /// Arms `cut`, counted from now (replacing an armed cut of its kind).
    fn arm(&mut self, cut: PowerCut);
    /// Whether no cut has happened since the last [`Cuttable::restore`].
    fn powered(&self) -> bool;
    /// Restores power after a cut; the contents are what the cut left.
    fn restore(&mut self);
    /// Operation counters since creation.
    fn counts(&self) -> FlashStats;
    /// Seeds the generator of torn contents.
    fn seed(&mut self, seed: u64);
    /// Arms a cut at a hardware action, counted from now (replacing an armed one).
    fn arm_action(&mut self, cut: ActionCut);
    /// Runs a hardware action as a place a cut can fall ([`act`]).
    fn act<T>(&mut self, action: impl FnOnce() -> T) -> Option<T>;
    /// Hardware actions run through [`Cuttable::act`] since creation.
    fn actions(&self) -> u64;
}

/// Runs `action`, a move of the hardware outside the flash (a valve opened, a dose
/// pumped), as a place the checker cuts: in a [`Model::Reset`] trial the power fails
/// right before it (it does not run: `None`) or right after it, and every flash
/// operation after it in the step fails as after any cut. `None` too, without running
/// it, when the power is already off. Mark every action this way, or the checker never
/// cuts between an action and the flash writes around it (see the module's docs).
pub fn act<F: Cuttable, T>(flash: &mut F, action: impl FnOnce() -> T) -> Option<T> {
    flash.act(action)
}

/// What the reference run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reference {
    /// Steps that reported.
    pub steps: u64,
    /// Unit writes (its boot's included).
    pub unit_writes: u64,
    /// Page erases (its boot's included).
    pub erases: u64,
    /// Hardware actions marked with [`act`] (its boot's included).
    pub actions: u64,
}

/// A trial the judge refused, and what it said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wrong<J> {
    /// The trial.
    pub trial: Trial,
    /// The judge's verdict.
    pub verdict: J,
}

/// The trials of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally<J> {
    /// Trials run.
    pub trials: u64,
    /// Trials the judge refused.
    pub wrong: u64,
    /// Trials whose cut never fell (the run took another path than the reference's):
    /// judged all the same.
    pub missed: u64,
    /// The first trial the judge refused.
    pub first_wrong: Option<Wrong<J>>,
}

impl<J> Tally<J> {
    const NONE: Self = Self {
        trials: 0,
        wrong: 0,
        missed: 0,
        first_wrong: None,
    };

    fn count(&mut self, trial: Trial, ran: Ran<J>) {
        self.trials += 1;
        self.missed += u64::from(ran.fired < trial.cuts.iter().flatten().count() as u8);
        if let Err(verdict) = ran.verdict {
            self.wrong += 1;
            self.first_wrong.get_or_insert(Wrong { trial, verdict });
        }
    }
}

/// What a sweep found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found<J> {
    /// The run without a cut.
    pub reference: Reference,
    /// The judge's verdict on the reference run, if it refused it.
    pub reference_wrong: Option<J>,
    /// The trials of each model, in the order of [`Model::ALL`].
    pub models: [Tally<J>; 4],
}

impl<J> Found<J> {
    /// The trials of `model`.
    pub fn of(&self, model: Model) -> &Tally<J> {
        &self.models[model.index()]
    }

    /// Every trial, the reference run's included.
    pub fn trials(&self) -> u64 {
        1 + self.models.iter().map(|t| t.trials).sum::<u64>()
    }

    /// Trials the judge refused, the reference run's included.
    pub fn wrong(&self) -> u64 {
        u64::from(self.reference_wrong.is_some()) + self.models.iter().map(|t| t.wrong).sum::<u64>()
    }
}

/// What one trial did.
struct Ran<J> {
    verdict: Result<(), J>,
    /// Cuts that fell.
    fired: u8,
    /// Steps that reported, over the whole trial.
    steps: u64,
    /// Flash operations and marked actions over the whole trial.
    ops: Ops,
    /// Steps, flash operations and marked actions from the reboot after the first cut to
    /// the end.
    after_first: (u64, Ops),
}

/// Flash operations and marked hardware actions, counted over a stretch of a run.
#[derive(Debug, Clone, Copy, Default)]
struct Ops {
    flash: FlashStats,
    actions: u64,
}

impl Ops {
    fn of<F: Cuttable>(flash: &F) -> Self {
        Self {
            flash: flash.counts(),
            actions: flash.actions(),
        }
    }

    /// The difference of two counters.
    fn minus(self, b: Ops) -> Ops {
        let (a, f) = (self.flash, b.flash);
        Ops {
            flash: FlashStats {
                word_writes: a.word_writes - f.word_writes,
                erases: a.erases - f.erases,
                bytes_written: a.bytes_written - f.bytes_written,
            },
            actions: self.actions - b.actions,
        }
    }
}

/// The places a cut of `model` can fall in a run of `steps` steps and these operations.
fn places(model: Model, steps: u64, ops: Ops) -> impl Iterator<Item = At> + Clone {
    let (writes, erases) = match model {
        Model::Torn | Model::Clean => (ops.flash.word_writes, ops.flash.erases),
        Model::WeakErase => (0, ops.flash.erases),
        Model::Reset => (0, 0),
    };
    let (steps, actions) = if model == Model::Reset {
        (steps, ops.actions)
    } else {
        (0, 0)
    };
    (1..=writes)
        .map(At::UnitWrite)
        .chain((1..=erases).map(At::Erase))
        .chain((1..=steps).map(At::AfterStep))
        .chain((1..=actions).flat_map(|n| [At::BeforeAction(n), At::AfterAction(n)]))
}

/// `n` of `places` spread evenly (all of them when there are `n` or fewer).
fn spread(places: impl Iterator<Item = At> + Clone, n: u32) -> impl Iterator<Item = At> {
    let len = places.clone().count() as u64;
    let n = u64::from(n);
    places
        .enumerate()
        .filter(move |&(i, _)| {
            let i = i as u64;
            // Place i is picked when a multiple of len / n falls in it.
            len <= n || (i * n).div_ceil(len) != ((i + 1) * n).div_ceil(len)
        })
        .map(|(_, at)| at)
}

/// `n` of `places` drawn at random from `seed`, in their order (all of them when there
/// are `n` or fewer, or `n` is 0): Knuth's selection sampling, each place picked with the
/// chance of the picks left over the places left.
fn sample(places: impl Iterator<Item = At> + Clone, n: u64, seed: u64) -> impl Iterator<Item = At> {
    let len = places.clone().count() as u64;
    let (mut rng, mut left, mut picks) = (SplitMix64::new(seed), len, n);
    places.filter(move |_| {
        let picked = n == 0 || len <= n || rng.next_u64() % left < picks;
        left -= 1;
        picks -= u64::from(picked && picks > 0);
        picked
    })
}

/// Arms `cut` on `flash` (a reset between steps is not the flash's: the trial counts
/// steps).
fn arm<F: Cuttable>(flash: &mut F, cut: Cut) {
    let power_cut = match (cut.model, cut.at) {
        (_, At::AfterStep(_)) => return,
        (_, At::BeforeAction(n)) => return flash.arm_action(ActionCut::Before(n)),
        (_, At::AfterAction(n)) => return flash.arm_action(ActionCut::After(n)),
        (Model::Clean, At::UnitWrite(n)) => PowerCut::BeforeWordWrite(n),
        (Model::Clean, At::Erase(n)) => PowerCut::BeforeErase(n),
        (Model::WeakErase, At::Erase(n)) => PowerCut::WeakErase(n),
        (_, At::UnitWrite(n)) => PowerCut::AtWordWrite(n),
        (_, At::Erase(n)) => PowerCut::AtErase(n),
    };
    flash.arm(power_cut);
}

/// One trial: boots and steps the program, cutting as `$trial` says, judging each step.
/// `$($aw)*` is nothing on the blocking build and `.await` on the async one.
macro_rules! trial {
    ($fresh:ident, $boot:ident, $step:ident, $judge:ident, $max:expr, $trial:expr; $($aw:tt)*) => {{
        let trial: Trial = $trial;
        let (mut flash, mut world) = $fresh();
        flash.seed(trial.seed);
        let start = Ops::of(&flash);
        let mut ran = Ran { verdict: Ok(()), fired: 0, steps: 0, ops: Ops::default(),
            after_first: (0, Ops::default()) };
        let (mut rebooted_at, mut since_arm) = ((0, start), 0);
        if let Some(cut) = trial.cuts[0] {
            arm(&mut flash, cut);
        }
        'boot: loop {
            // The cut armed now, if it has not fallen yet.
            let armed = trial.cuts.get(usize::from(ran.fired)).copied().flatten();
            let booted = $boot(&mut flash, &mut world) $($aw)*;
            match booted {
                _ if !flash.powered() => {}
                Err(e) => {
                    ran.verdict = $judge(&trial, &mut world, Seen::Failed(&e));
                    break 'boot;
                }
                Ok(mut app) => {
                    ran.verdict = $judge(&trial, &mut world, Seen::Booted(&app));
                    loop {
                        if ran.verdict.is_err() {
                            break 'boot;
                        }
                        if armed.is_some_and(|c| c.at == At::AfterStep(since_arm)) {
                            break; // a reset between two steps
                        }
                        if ran.steps >= $max {
                            ran.verdict = $judge(&trial, &mut world, Seen::Stuck);
                            break 'boot;
                        }
                        let r = $step(&mut app, &mut flash, &mut world) $($aw)*;
                        if !flash.powered() {
                            break;
                        }
                        ran.verdict = match &r {
                            Ok(Some(report)) => {
                                ran.steps += 1;
                                since_arm += 1;
                                $judge(&trial, &mut world, Seen::Stepped(report))
                            }
                            Ok(None) => {
                                ran.verdict = $judge(&trial, &mut world, Seen::Ended);
                                break 'boot;
                            }
                            Err(e) => {
                                ran.verdict = $judge(&trial, &mut world, Seen::Failed(e));
                                break 'boot;
                            }
                        };
                        // A report judged; the next step, or a reset before it.
                    }
                }
            }
            // A cut: RAM is lost, power comes back, the next cut is armed.
            flash.restore();
            ran.fired += 1;
            since_arm = 0;
            if ran.fired == 1 {
                rebooted_at = (ran.steps, Ops::of(&flash));
            }
            if let Some(Some(next)) = trial.cuts.get(usize::from(ran.fired)) {
                arm(&mut flash, *next);
            }
        }
        let end = Ops::of(&flash);
        ran.ops = end.minus(start);
        if ran.fired > 0 {
            ran.after_first = (ran.steps - rebooted_at.0, end.minus(rebooted_at.1));
        }
        ran
    }};
}

/// The whole sweep: the reference, then each model's cuts (and second cuts).
macro_rules! sweep_body {
    ($plan:ident, $fresh:ident, $boot:ident, $step:ident, $judge:ident; $($aw:tt)*) => {{
        let seed = $plan.seed;
        let bound = if $plan.max_steps == 0 { 1 << 24 } else { $plan.max_steps };
        let reference = trial!($fresh, $boot, $step, $judge, bound,
            Trial { cuts: [None, None], seed }; $($aw)*);
        let mut found = Found {
            reference: Reference {
                steps: reference.steps,
                unit_writes: reference.ops.flash.word_writes,
                erases: reference.ops.flash.erases,
                actions: reference.ops.actions,
            },
            reference_wrong: reference.verdict.err(),
            models: [Tally::NONE, Tally::NONE, Tally::NONE, Tally::NONE],
        };
        let bound = if $plan.max_steps == 0 { 4 * reference.steps + 64 } else { $plan.max_steps };
        let mut next_seed = seed;
        for model in Model::ALL.into_iter().filter(|m| $plan.models[m.index()]) {
            let sampled = sample(
                places(model, reference.steps, reference.ops),
                $plan.sample,
                seed ^ (model as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            for at in sampled {
                let first = Some(Cut { model, at });
                next_seed = next_seed.wrapping_add(1);
                let t = Trial { cuts: [first, None], seed: next_seed };
                let ran = trial!($fresh, $boot, $step, $judge, bound, t; $($aw)*);
                let (fired, (steps, ops)) = (ran.fired, ran.after_first);
                found.models[model.index()].count(t, ran);
                if $plan.double == 0 || fired == 0 {
                    continue;
                }
                for at in spread(places(model, steps, ops), $plan.double) {
                    next_seed = next_seed.wrapping_add(1);
                    let t = Trial { cuts: [first, Some(Cut { model, at })], seed: next_seed };
                    let ran = trial!($fresh, $boot, $step, $judge, bound, t; $($aw)*);
                    found.models[model.index()].count(t, ran);
                }
            }
        }
        found
    }};
}

/// Sweeps a power cut over every place of a reference run of the program, in every model
/// of `plan`, and judges every boot and step of every trial. `fresh` makes the flash and
/// the world each trial starts from (a flash that holds an old firmware's data, for a
/// migration); `boot` opens what the flash holds (what it returns is RAM, lost at a cut);
/// `step` does one unit of work and reports it, or `None` when there is no more; `judge`
/// is called with the trial, the world and what was seen, and refuses with a verdict of
/// its own (it may keep what it has seen in the world: what a boot found is durable). The
/// program must pass on the errors of its flash (a cut is one); a cut that falls inside a
/// boot or step ends it unjudged, and the program boots again.
pub fn sweep<F, W, A, R, E, J>(
    plan: &Plan,
    mut fresh: impl FnMut() -> (F, W),
    mut boot: impl FnMut(&mut F, &mut W) -> Result<A, E>,
    mut step: impl FnMut(&mut A, &mut F, &mut W) -> Result<Option<R>, E>,
    mut judge: impl FnMut(&Trial, &mut W, Seen<'_, A, R, E>) -> Result<(), J>,
) -> Found<J>
where
    F: Cuttable,
{
    sweep_body!(plan, fresh, boot, step, judge;)
}

/// [`sweep`] over an async program (feature `async`): `boot` and `step` are async
/// closures; the judge is not. [`MemFlash`]'s async steps complete at once, so any
/// executor runs it (`embassy_futures::block_on`).
#[cfg(feature = "async")]
pub async fn sweep_async<F, W, A, R, E, J>(
    plan: &Plan,
    mut fresh: impl FnMut() -> (F, W),
    mut boot: impl AsyncFnMut(&mut F, &mut W) -> Result<A, E>,
    mut step: impl AsyncFnMut(&mut A, &mut F, &mut W) -> Result<Option<R>, E>,
    mut judge: impl FnMut(&Trial, &mut W, Seen<'_, A, R, E>) -> Result<(), J>,
) -> Found<J>
where
    F: Cuttable,
{
    sweep_body!(plan, fresh, boot, step, judge; .await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::flash::{FlashError, MemFlash};
    use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};

    type F = MemFlash<2, 64>;

    /// A flash whose first word was programmed by an earlier run.
    fn fresh() -> (F, bool) {
        let mut f = F::new();
        f.write(0, &[0; 4]).unwrap();
        (f, false)
    }

    fn word0(flash: &mut F) -> Result<u32, FlashError> {
        let mut w = [0; 4];
        flash.read(0, &mut w)?;
        Ok(u32::from_le_bytes(w))
    }

    /// Sets word 0 to 1, erasing page 0 first unless it reads blank, which a page whose
    /// erase was cut at its end also does: the mistake [`Model::WeakErase`] is for.
    fn boot(flash: &mut F, _: &mut bool) -> Result<u32, FlashError> {
        word0(flash)
    }

    fn step(word: &mut u32, flash: &mut F, done: &mut bool) -> Result<Option<u8>, FlashError> {
        match *word {
            1 => Ok(None),
            u32::MAX => {
                flash.write(0, &1u32.to_le_bytes())?;
                (*word, *done) = (1, true);
                Ok(Some(2))
            }
            _ => {
                flash.erase(0, 64)?;
                *word = u32::MAX;
                Ok(Some(1))
            }
        }
    }

    fn judge(
        _: &Trial,
        done: &mut bool,
        seen: Seen<'_, u32, u8, FlashError>,
    ) -> Result<(), FlashError> {
        match seen {
            Seen::Ended if !*done => Err(FlashError::PowerCut),
            Seen::Failed(e) => Err(*e),
            _ => Ok(()),
        }
    }

    #[test]
    fn each_model_cuts_each_place_and_only_the_weak_erase_finds_the_blank_check() {
        let found = sweep(&Plan::new(), fresh, boot, step, judge);
        let reference = Reference {
            steps: 2,
            unit_writes: 1,
            erases: 1,
            actions: 0,
        };
        assert_eq!((found.reference, found.reference_wrong), (reference, None));
        let counts = found.models.map(|t| (t.trials, t.wrong, t.missed));
        assert_eq!(counts, [(2, 0, 0), (2, 0, 0), (1, 1, 0), (2, 0, 0)]);
        let wrong = found.of(Model::WeakErase).first_wrong.unwrap();
        assert_eq!(wrong.verdict, FlashError::WeaklyErased { address: 0 });
        let cut = Cut {
            model: Model::WeakErase,
            at: At::Erase(1),
        };
        assert_eq!(
            wrong.trial,
            Trial {
                cuts: [Some(cut), None],
                seed: 0x1DE5 + 5
            }
        );
        assert_eq!(
            format!("{}", wrong.trial),
            "a cut weak at the end of erase 1 (noise seed 0x1dea)"
        );
        assert_eq!((found.trials(), found.wrong()), (8, 1));
    }

    #[test]
    fn double_cuts_cut_again_in_every_place_of_each_recovery() {
        // Recoveries: a torn write, a torn erase and a clean erase redo erase and write
        // (2 places each), a clean write only writes (1), a weak erase fails at once (0),
        // a reset after step 1 writes (1 step), after step 2 ends (0).
        let found = sweep(&Plan::new().double_cuts(u32::MAX), fresh, boot, step, judge);
        let counts = found.models.map(|t| (t.trials, t.wrong));
        assert_eq!(counts, [(6, 0), (5, 0), (1, 1), (3, 0)]);
        // One second cut a first cut: the first place of its recovery.
        let found = sweep(&Plan::new().double_cuts(1), fresh, boot, step, judge);
        assert_eq!(found.models.map(|t| t.trials), [4, 4, 1, 3]);
        let only_torn = sweep(
            &Plan::new().models(&[Model::Torn]),
            fresh,
            boot,
            step,
            judge,
        );
        assert_eq!(only_torn.models.map(|t| t.trials), [2, 0, 0, 0]);
    }

    #[test]
    fn a_run_that_never_ends_is_stuck_and_spread_picks_evenly() {
        let found = sweep(
            &Plan::new().models(&[Model::Reset]).max_steps(5),
            fresh,
            boot,
            |_, _, _| Ok::<_, FlashError>(Some(0u8)),
            |_, _, seen| match seen {
                Seen::Stuck => Err(()),
                _ => Ok(()),
            },
        );
        assert_eq!(found.reference.steps, 5);
        assert_eq!(found.reference_wrong, Some(()));
        assert_eq!(
            (found.of(Model::Reset).trials, found.of(Model::Reset).wrong),
            (5, 5)
        );
        let picked = |n| {
            let ops = Ops {
                flash: FlashStats {
                    word_writes: 10,
                    erases: 0,
                    bytes_written: 0,
                },
                actions: 0,
            };
            spread(places(Model::Torn, 0, ops), n).collect::<Vec<_>>()
        };
        assert_eq!(
            picked(3),
            [At::UnitWrite(1), At::UnitWrite(4), At::UnitWrite(7)]
        );
        assert_eq!(picked(10).len(), 10);
        assert_eq!(picked(99).len(), 10);
    }

    #[test]
    fn a_sample_draws_n_places_in_order_from_its_seed() {
        let ops = Ops {
            flash: FlashStats {
                word_writes: 1_000,
                erases: 0,
                bytes_written: 0,
            },
            actions: 0,
        };
        let drawn = |n, seed| sample(places(Model::Torn, 0, ops), n, seed).collect::<Vec<_>>();
        let five = drawn(5, 7);
        assert_eq!(five.len(), 5);
        assert!(five.windows(2).all(|w| match (w[0], w[1]) {
            (At::UnitWrite(a), At::UnitWrite(b)) => a < b,
            _ => false,
        }));
        assert_eq!(five, drawn(5, 7), "the same seed draws the same places");
        assert_ne!(five, drawn(5, 8));
        assert_eq!(drawn(300, 1).len(), 300);
        assert_eq!(drawn(0, 1).len(), 1_000, "0: every place");
        assert_eq!(drawn(5_000, 1).len(), 1_000);
        // A sweep with a sample runs the reference and n trials a model (fewer when a
        // model has fewer places).
        let found = sweep(&Plan::new().sample(1), fresh, boot, step, judge);
        assert_eq!(found.models.map(|t| t.trials), [1, 1, 1, 1]);
    }

    #[test]
    fn a_marked_action_is_cut_before_it_or_right_after_it() {
        let mut flash = F::new();
        assert_eq!(act(&mut flash, || 1), Some(1));
        flash.arm_action(ActionCut::Before(2));
        assert_eq!(act(&mut flash, || 2), Some(2));
        let mut ran = false;
        assert_eq!(act(&mut flash, || ran = true), None);
        assert!(
            !ran && !flash.powered(),
            "cut before the third: it did not run"
        );
        assert_eq!(
            act(&mut flash, || 4),
            None,
            "nothing runs with the power off"
        );
        assert_eq!(flash.write(0, &[0; 4]), Err(FlashError::PowerCut));
        flash.restore();
        flash.arm_action(ActionCut::After(1));
        assert_eq!(act(&mut flash, || 5), Some(5));
        assert!(!flash.powered(), "cut right after the action that ran");
        assert_eq!(flash.actions(), 4);
        // A program that writes a word, then acts, in one step: the reset places are
        // after the step, before the action and after it.
        let found = sweep(
            &Plan::new().models(&[Model::Reset]),
            || (F::new(), 0u32),
            // Boot: done when the word is written.
            |flash, _| word0(flash).map(|w| w == 0),
            |done, flash, acted| {
                if *done {
                    return Ok(None);
                }
                flash.write(0, &[0; 4])?;
                act(flash, || *acted += 1);
                *done = true;
                Ok(Some(()))
            },
            // A boot finds the word written and the action not run: lost.
            |_, acted: &mut u32, seen| match seen {
                Seen::Ended if *acted == 0 => Err("lost"),
                _ => Ok(()),
            },
        );
        assert_eq!(found.reference.actions, 1);
        let reset = found.of(Model::Reset);
        assert_eq!((reset.trials, reset.wrong), (3, 1));
        let first = reset.first_wrong.unwrap().trial.cuts[0].unwrap();
        assert_eq!(format!("{first}"), "reset before action 1");
    }

    #[cfg(feature = "async")]
    #[test]
    fn the_async_sweep_finds_what_the_blocking_one_does() {
        use embedded_storage_async::nor_flash::NorFlash as Async;
        let found = embassy_futures::block_on(sweep_async(
            &Plan::new().double_cuts(u32::MAX),
            fresh,
            async |flash: &mut F, _: &mut bool| {
                let mut w = [0; 4];
                embedded_storage_async::nor_flash::ReadNorFlash::read(flash, 0, &mut w).await?;
                Ok(u32::from_le_bytes(w))
            },
            async |word: &mut u32, flash: &mut F, done: &mut bool| match *word {
                1 => Ok(None),
                u32::MAX => {
                    Async::write(flash, 0, &1u32.to_le_bytes()).await?;
                    (*word, *done) = (1, true);
                    Ok(Some(2))
                }
                _ => {
                    Async::erase(flash, 0, 64).await?;
                    *word = u32::MAX;
                    Ok(Some(1))
                }
            },
            judge,
        ));
        let blocking = sweep(&Plan::new().double_cuts(u32::MAX), fresh, boot, step, judge);
        assert_eq!(found, blocking);
    }
}
