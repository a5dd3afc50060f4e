//! `idem plot`: a timeline as an SVG picture. Total against step for each chosen store,
//! the true total of what has been delivered so far, the committed position, and a
//! marker at every crash, so the naive store's drift above the truth is plain to see.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use idem_sim::run::{Action, TraceStep};

use idem_lab::error::usage;
use idem_lab::render::{action_name, count};
use idem_lab::select::{self, Loaded, ScenarioArgs, ScenarioKind, StoreKind};

/// The most events a plot draws.
const MAX_EVENTS: u64 = 20_000;
const W: f64 = 960.0;
/// The plot's height, above the legend's rows.
const H: f64 = 540.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 60.0;
/// The height of one row of the legend, under the plot.
const LEGEND_ROW: f64 = 20.0;
const POSITION_COLOR: &str = "#ff7f0e";
const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

/// Draw total against step for stores of a scenario, as SVG.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario (or give --log FILE instead).
    scenario: Option<ScenarioKind>,
    /// The stores to draw (repeat, or separate with commas).
    #[arg(long, value_parser = idem_lab::choice::store(), value_delimiter = ',', default_values = ["naive", "offset"])]
    store: Vec<StoreKind>,
    /// Where to write the picture.
    #[arg(long, short = 'o', value_name = "FILE")]
    svg: PathBuf,
    /// The x axis: the offsets (a replay runs back over the offsets it redelivers), or
    /// the run's steps.
    #[arg(long, value_enum, default_value = "offset")]
    x: XAxis,
    #[command(flatten)]
    args: ScenarioArgs,
}

/// What the x axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum XAxis {
    /// Steps of the run (delivery, effect, commit, crash, recovery).
    Step,
    /// Offsets of the log.
    Offset,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        // A target that is not a regular file is refused before anything runs.
        idem_host::files::check_target(&self.svg)?;
        for store in &self.store {
            select::check_pair(self.scenario, *store)?;
        }
        let loaded = select::load(self.scenario, &self.args)?;
        if loaded.events() > MAX_EVENTS {
            return Err(usage(format!(
                "a plot draws up to {MAX_EVENTS} events, not {}",
                loaded.events()
            )));
        }
        let truth = loaded.truth_by_prefix();
        let mut series = Vec::new();
        for store in &self.store {
            let o = select::run(&loaded, *store, self.args.window, true)?;
            select::ensure_every_crash_happened(&loaded, &o.report)?;
            series.push((*store, o.trace.unwrap_or_default(), o.report.final_total));
        }
        let svg = draw(&loaded, &series, &truth, self.x);
        idem_host::files::write_atomically(&self.svg, svg.as_bytes())?;
        eprintln!("wrote {}", self.svg.display());
        Ok(ExitCode::SUCCESS)
    }
}

/// One store's line: the store, its trace, its final total.
type Series = (StoreKind, Vec<TraceStep>, i64);

fn draw(loaded: &Loaded, series: &[Series], truth: &[i64], axis: XAxis) -> String {
    let sc = Scales::new(loaded, series, truth, axis);
    let mut s = String::new();
    head(&mut s, loaded, &sc, series.len());
    axes(&mut s, &sc);
    replays(&mut s, &sc, series);
    lines(&mut s, &sc, series);
    marks(&mut s, &sc, series);
    legend(&mut s, &sc, series);
    s.push_str("</svg>\n");
    s
}

/// Where a step, a total and a committed position fall on the picture.
struct Scales<'a> {
    axis: XAxis,
    truth: &'a [i64],
    /// The x axis's span: steps or offsets.
    steps: f64,
    min_y: f64,
    max_y: f64,
    /// The right-hand axis's span: offsets.
    max_position: f64,
}

impl<'a> Scales<'a> {
    fn new(loaded: &Loaded, series: &[Series], truth: &'a [i64], axis: XAxis) -> Self {
        let steps = match axis {
            XAxis::Step => series.iter().map(|(_, t, _)| t.len()).max().unwrap_or(1),
            XAxis::Offset => loaded.events() as usize,
        }
        .max(1) as f64;
        let totals = || {
            series
                .iter()
                .flat_map(|(_, t, _)| t.iter().map(|s| s.total))
        };
        let max_y = totals()
            .chain(truth.iter().copied())
            .max()
            .unwrap_or(1)
            .max(1) as f64
            * 1.08;
        let min_y = totals().min().unwrap_or(0).min(0) as f64;
        // The committed position has an axis of its own, on the right: offsets.
        let max_position = series
            .iter()
            .flat_map(|(_, t, _)| t.iter().map(|s| s.resume_at))
            .max()
            .unwrap_or(1)
            .max(loaded.events())
            .max(1) as f64;
        Self {
            axis,
            truth,
            steps,
            min_y,
            max_y,
            max_position,
        }
    }

    fn x(&self, i: f64) -> f64 {
        LEFT + i / self.steps * (W - LEFT - RIGHT)
    }

    fn y(&self, v: f64) -> f64 {
        H - BOTTOM - (v - self.min_y) / (self.max_y - self.min_y) * (H - TOP - BOTTOM)
    }

    fn y_position(&self, v: f64) -> f64 {
        H - BOTTOM - v / self.max_position * (H - TOP - BOTTOM)
    }

    fn axis_name(&self) -> &'static str {
        if self.axis == XAxis::Step {
            "step"
        } else {
            "offset"
        }
    }

    /// Where each step of a trace sits on the x axis.
    fn xs(&self, trace: &[TraceStep]) -> Vec<f64> {
        let mut last = 0.0;
        trace
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if self.axis == XAxis::Step {
                    return i as f64;
                }
                // A delivery sits at its offset, its effect one further on (events
                // consumed); everything else where the last one was.
                last = match (t.action, t.offset) {
                    (Action::Deliver { .. }, Some(o)) => o as f64,
                    (Action::Apply | Action::Skip | Action::Between, Some(o)) => o as f64 + 1.0,
                    _ => last,
                };
                last
            })
            .collect()
    }

    /// The true total of what has been delivered by each step of a trace.
    fn truth_at(&self, trace: &[TraceStep]) -> Vec<i64> {
        let mut high: u64 = 0;
        trace
            .iter()
            .map(|t| {
                if let (Action::Deliver { .. }, Some(o)) = (t.action, t.offset) {
                    high = high.max(o + 1);
                }
                self.truth.get(high as usize).copied().unwrap_or(0)
            })
            .collect()
    }

    /// A trace's values, each at its place on the x axis.
    fn points(&self, trace: &[TraceStep], value: impl Fn(&TraceStep) -> f64) -> Vec<(f64, f64)> {
        let xs = self.xs(trace);
        trace
            .iter()
            .enumerate()
            .map(|(i, st)| (xs[i], value(st)))
            .collect()
    }

    /// A line through `points`, its values placed by `scale` ([`Scales::y`] or
    /// [`Scales::y_position`]).
    fn path(
        &self,
        points: &[(f64, f64)],
        scale: fn(&Self, f64) -> f64,
        color: &str,
        dash: &str,
        width: f64,
    ) -> String {
        let mut d = String::new();
        for (i, (px, py)) in points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { " L" },
                self.x(*px),
                scale(self, *py)
            );
        }
        format!(
            r##"<path d="{d}" fill="none" stroke="{color}" stroke-width="{width}" stroke-dasharray="{dash}"/>"##
        )
    }
}

/// The picture's frame and title, with room under the plot for the legend's rows.
fn head(s: &mut String, loaded: &Loaded, sc: &Scales, stores: usize) {
    let legend_rows = 2 + stores;
    let height = H + LEGEND_ROW * legend_rows as f64 + 10.0;
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="13">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="16" font-weight="bold">idem: {} ({} events, checkpoint every {}) — total against {}</text>
"##,
        loaded.name(),
        loaded.events(),
        loaded.consumer().checkpoint_every,
        sc.axis_name()
    );
}

/// The axes, their ticks and names, and the right-hand axis of the committed position.
fn axes(s: &mut String, sc: &Scales) {
    let bottom = sc.y(sc.min_y);
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/>"##,
        W - RIGHT,
    );
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="black"/>"##,
    );
    for v in nice_ticks(sc.min_y, sc.max_y) {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{:.0}</text><line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#eee"/>"##,
            LEFT - 6.0,
            sc.y(v) + 4.0,
            v,
            sc.y(v),
            W - RIGHT,
            sc.y(v)
        );
    }
    for i in nice_ticks(0.0, sc.steps) {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="middle">{:.0}</text>"##,
            sc.x(i),
            H - BOTTOM + 18.0,
            i
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle">{}</text>"##,
        (LEFT + W - RIGHT) / 2.0,
        H - 14.0,
        sc.axis_name()
    );
    let _ = writeln!(
        s,
        r##"<text x="18" y="{0:.1}" text-anchor="middle" transform="rotate(-90 18 {0:.1})">total</text>"##,
        (TOP + H - BOTTOM) / 2.0
    );
    let _ = writeln!(
        s,
        r##"<line x1="{0}" y1="{TOP}" x2="{0}" y2="{bottom}" stroke="{POSITION_COLOR}"/>"##,
        W - RIGHT,
    );
    for v in nice_ticks(0.0, sc.max_position) {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="{POSITION_COLOR}">{:.0}</text>"##,
            W - RIGHT + 6.0,
            sc.y_position(v) + 4.0,
            v
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{0}" y="{1:.1}" text-anchor="middle" fill="{POSITION_COLOR}" transform="rotate(90 {0} {1:.1})">committed position (next offset to read)</text>"##,
        W - 22.0,
        (TOP + H - BOTTOM) / 2.0
    );
}

/// The replay windows (the first store's redeliveries), shaded behind the lines.
fn replays(s: &mut String, sc: &Scales, series: &[Series]) {
    let Some((_, trace, _)) = series.first() else {
        return;
    };
    let xs = sc.xs(trace);
    for (from, to) in replay_windows(trace) {
        let (from, to) = (xs[from].min(xs[to]), xs[from].max(xs[to]));
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#fde9c9"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#8a5a00">replay</text>"##,
            sc.x(from),
            (sc.x(to) - sc.x(from)).max(1.0),
            sc.y(sc.min_y) - TOP,
            sc.x(from) + 3.0,
            sc.y(sc.min_y) - 6.0
        );
    }
}

/// Each store from the widest line to the narrowest, the committed position (of the
/// first store) on its own axis over them, and the truth last, dashed, so that lines
/// that coincide all show.
fn lines(s: &mut String, sc: &Scales, series: &[Series]) {
    let width = |k: usize| 2.0 + 2.5 * (series.len() - 1 - k) as f64;
    for (k, (_, trace, _)) in series.iter().enumerate() {
        let pts = sc.points(trace, |st| st.total as f64);
        let color = COLORS[k % COLORS.len()];
        let _ = writeln!(s, "{}", sc.path(&pts, Scales::y, color, "none", width(k)));
    }
    let Some((_, trace, _)) = series.first() else {
        return;
    };
    // The position over the totals, so that no store's line hides it.
    let c = sc.points(trace, |st| st.resume_at as f64);
    let _ = writeln!(
        s,
        "{}",
        sc.path(&c, Scales::y_position, POSITION_COLOR, "2 3", 1.5)
    );
    let xs = sc.xs(trace);
    let t: Vec<(f64, f64)> = sc
        .truth_at(trace)
        .iter()
        .enumerate()
        .map(|(i, v)| (xs[i], *v as f64))
        .collect();
    let _ = writeln!(s, "{}", sc.path(&t, Scales::y, "#555", "6 4", 1.5));
}

/// A ring on each store's line where it skipped a duplicate, and a marker at each crash
/// (the first store's; every store crashes at the same points).
fn marks(s: &mut String, sc: &Scales, series: &[Series]) {
    for (k, (_, trace, _)) in series.iter().enumerate() {
        let xs = sc.xs(trace);
        for (i, st) in trace
            .iter()
            .enumerate()
            .filter(|(_, st)| st.action == Action::Skip)
        {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="white" stroke="{}" stroke-width="1.5"/>"##,
                sc.x(xs[i]),
                sc.y(st.total as f64),
                COLORS[k % COLORS.len()]
            );
        }
    }
    let Some((_, trace, _)) = series.first() else {
        return;
    };
    let xs = sc.xs(trace);
    for (i, st) in trace
        .iter()
        .enumerate()
        .filter(|(_, st)| matches!(st.action, Action::Crash(_)))
    {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="black" stroke-dasharray="3 3"/><text x="{2:.1}" y="{3:.1}" font-size="12">{4}</text>"##,
            sc.x(xs[i]),
            sc.y(sc.min_y),
            sc.x(xs[i]) + 4.0,
            TOP + 14.0,
            action_name(st.action)
        );
    }
}

/// The legend, under the plot (never over a line or the crash marker). A store whose
/// line is another's, or the truth's, says so.
fn legend(s: &mut String, sc: &Scales, series: &[Series]) {
    let totals = |trace: &[TraceStep]| -> Vec<(f64, i64)> {
        let xs = sc.xs(trace);
        trace
            .iter()
            .enumerate()
            .map(|(i, t)| (xs[i], t.total))
            .collect()
    };
    let mut entries: Vec<(String, &str, &str)> = vec![
        ("true total of what was delivered".into(), "#555", "6 4"),
        (
            "committed position, right-hand axis (next offset to read)".into(),
            POSITION_COLOR,
            "2 3",
        ),
    ];
    for (k, (store, trace, total)) in series.iter().enumerate() {
        let skips = trace.iter().filter(|t| t.action == Action::Skip).count() as u64;
        let mut notes = vec![format!("ends at {total}")];
        if skips > 0 {
            notes.push(format!("rings: {}", count(skips, "skipped duplicate")));
        }
        notes.extend(agreement(k, series, &totals));
        // After every effect (applied or skipped), the total is the truth's.
        let on_truth = trace
            .iter()
            .zip(sc.truth_at(trace))
            .filter(|(t, _)| matches!(t.action, Action::Apply | Action::Skip))
            .all(|(t, truth)| t.total == truth);
        if on_truth {
            notes.push("on the true total after every effect".into());
        }
        entries.push((
            format!("{} store ({})", store.name(), notes.join("; ")),
            COLORS[k % COLORS.len()],
            "none",
        ));
    }
    for (k, (label, color, dash)) in entries.iter().enumerate() {
        let ly = H + 4.0 + LEGEND_ROW * k as f64;
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3" stroke-dasharray="{dash}"/><text x="{}" y="{}">{label}</text>"##,
            LEFT + 20.0,
            LEFT + 50.0,
            LEFT + 58.0,
            ly + 4.0
        );
    }
}

/// The runs of steps that redeliver offsets (after a crash), as (first, last) step.
fn replay_windows(trace: &[TraceStep]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut open: Option<(usize, usize)> = None;
    for (i, t) in trace.iter().enumerate() {
        match t.action {
            Action::Deliver { redelivery: true } => {
                open = Some(open.map_or((i, i), |(a, _)| (a, i)));
            }
            Action::Deliver { redelivery: false } | Action::Crash(_) => {
                out.extend(open.take());
            }
            _ => {
                if let Some((a, _)) = open {
                    open = Some((a, i));
                }
            }
        }
    }
    out.extend(open);
    out
}

/// Round tick values for the span `lo..=hi`: three to seven, at multiples of 1, 2 or 5 times
/// a power of ten (0, 20, 40, ..., never 0, 24, 48, 71).
fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1.0);
    let raw = span / 6.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&st| st >= raw)
        .unwrap_or(10.0 * magnitude)
        .max(1.0);
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|k| first + f64::from(k) * step)
        .take_while(|&v| v <= hi + 1e-9)
        .take(50)
        .collect()
}

/// A trace's totals, each at its place on the x axis.
type Totals<'a> = dyn Fn(&[TraceStep]) -> Vec<(f64, i64)> + 'a;

/// What store `k`'s legend says of another store's line that runs through most of its
/// points: the same line, or which of the two is drawn over the other where they agree.
fn agreement(k: usize, series: &[Series], totals: &Totals<'_>) -> Vec<String> {
    let trace = &series[k].1;
    let mut notes = Vec::new();
    let mine = totals(trace);
    for (j, (other, other_trace, _)) in series.iter().enumerate() {
        if j == k {
            continue;
        }
        let theirs = totals(other_trace);
        let set: std::collections::HashSet<(u64, i64)> =
            theirs.iter().map(|&(x, v)| (x.to_bits(), v)).collect();
        let shared = mine
            .iter()
            .filter(|&&(x, v)| set.contains(&(x.to_bits(), v)))
            .count();
        if shared == mine.len() && theirs.len() == mine.len() {
            notes.push(format!("the same line as {}", other.name()));
        } else if 2 * shared >= mine.len() && j < k {
            notes.push(format!(
                "drawn over the {} line where the two agree",
                other.name()
            ));
        } else if 2 * shared >= mine.len() {
            notes.push(format!(
                "the {} line is drawn over it where the two agree",
                other.name()
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::nice_ticks;

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_ticks(0.0, 241.0), [0.0, 50.0, 100.0, 150.0, 200.0]);
        assert_eq!(nice_ticks(0.0, 110.0), [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(nice_ticks(0.0, 13.0), [0.0, 5.0, 10.0]);
        assert_eq!(nice_ticks(0.0, 0.0), [0.0]);
    }
}
