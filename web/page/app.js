// idem playground: draws what the core (WebAssembly, ./pkg) returns. No rule of the
// simulation lives here: every total, verdict, replayed or skipped offset, grade and
// error sentence is the core's, the same code as `idem run --json`.

/** The core: the single-file page (web/single.sh) has instantiated it already, inline
 *  and synchronously, in window.idemCore; the served page imports ./pkg (a module by
 *  URL, which Chromium refuses from file://). */
async function loadCore() {
  if (window.idemCore) return window.idemCore;
  const core = await import('./pkg/idem_web.js');
  await core.default();
  return core;
}
let idem;

const $ = (id) => document.getElementById(id);
const COLORS = ['#1f5fa8', '#c2410c', '#15803d', '#7e22ce', '#b91c1c', '#0e7490'];
const MAX_CELLS = 400; // a log longer than this gets an offset box instead of cells
const MAX_TRACE_ROWS = 2000;

/** Calls a core function; its answer is `{ok}` or `{error}` (or `{unreadable}`). */
function call(fn, ...args) {
  return JSON.parse(idem[fn](...args));
}

const state = {
  view: 'lessons',
  lesson: 'ddia',
  scenario: 'ddia',
  stores: ['naive', 'offset'],
  k: null, // the scenario's own
  events: null,
  producer: 'non-idempotent',
  schedule: null, // null: the scenario's own crash; '': none
  kind: 'effect',
  focus: null,
  x: 'offset', // the plot's x axis: 'offset' or 'step'
  predict: true, // each run asks for a prediction of its first store's total first
  revealNext: false, // the next run shows at once (opened from an answer already seen)
};
// The run (its stores' specs as JSON) whose results are shown, and the prediction made
// for it.
let revealed = null;
let prediction = null;
let catalogue;
let lessons;

// ---- the URL: one exact run, shareable -------------------------------------------
function readUrl(search = location.search) {
  const q = new URLSearchParams(search);
  // Parameters a link leaves out take their defaults.
  Object.assign(state, { scenario: 'ddia', stores: ['naive', 'offset'], k: null, events: null, producer: 'non-idempotent', schedule: null, focus: null });
  if (q.has('view')) state.view = q.get('view');
  if (q.has('lesson')) state.lesson = q.get('lesson');
  if (q.has('scenario')) state.scenario = q.get('scenario');
  if (q.has('stores')) state.stores = q.get('stores').split(',').filter(Boolean);
  if (q.has('k')) state.k = Number(q.get('k'));
  if (q.has('events')) state.events = Number(q.get('events'));
  if (q.has('producer')) state.producer = q.get('producer');
  if (q.has('schedule')) state.schedule = q.get('schedule') === 'none' ? '' : q.get('schedule');
  if (q.has('focus')) state.focus = q.get('focus');
  if (q.get('x') === 'step') state.x = 'step';
  if (q.has('predict')) state.predict = q.get('predict') !== 'off';
}

function writeUrl() {
  const q = new URLSearchParams();
  q.set('view', state.view);
  if (state.view === 'lessons') q.set('lesson', state.lesson);
  if (state.view === 'playground') {
    q.set('scenario', state.scenario);
    q.set('stores', state.stores.join(','));
    if (state.k !== null) q.set('k', String(state.k));
    if (state.events !== null && state.scenario === 'ddia') q.set('events', String(state.events));
    if (state.producer !== 'non-idempotent') q.set('producer', state.producer);
    if (state.schedule !== null) q.set('schedule', state.schedule === '' ? 'none' : state.schedule);
    if (state.focus) q.set('focus', state.focus);
    if (state.x !== 'offset') q.set('x', state.x);
  }
  if (!state.predict) q.set('predict', 'off');
  history.replaceState(null, '', `${location.pathname}?${q}`);
}

// ---- views ----------------------------------------------------------------------
function show(view) {
  state.view = ['lessons', 'playground', 'matrix'].includes(view) ? view : 'lessons';
  for (const v of ['lessons', 'playground', 'matrix']) {
    $(`view-${v}`).hidden = v !== state.view;
    const tab = $(`tab-${v}`);
    if (v === state.view) tab.setAttribute('aria-current', 'page');
    else tab.removeAttribute('aria-current');
  }
  if (state.view === 'playground') runPlayground();
  if (state.view === 'matrix') drawMatrix();
  if (state.view === 'lessons') drawLesson();
  writeUrl();
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const c of children.flat()) e.append(c);
  return e;
}

// ---- lessons --------------------------------------------------------------------
const answered = new Map(); // step index -> { label, said, observed }

function drawLesson() {
  const lesson = lessons.find((l) => l.name === state.lesson) || lessons[0];
  state.lesson = lesson.name;
  $('lesson-name').value = lesson.name;
  $('lesson-title').textContent = lesson.title;
  $('lesson-intro').textContent = lesson.intro;
  answered.clear();
  const list = $('lesson-steps');
  list.replaceChildren();
  const hints = {
    number: 'a whole number',
    offsets: 'offsets, such as 3..7 or 2, 5, or none',
    'yes-no': 'yes or no',
    numbers: 'numbers in order, such as 2, 4, 7',
  };
  lesson.steps.forEach((step, i) => {
    const input = el('input', { type: 'text', id: `answer-${i}`, 'aria-label': `your prediction for question ${i + 1}`, placeholder: hints[step.answer] });
    const out = el('div', { class: 'observation', id: `observation-${i}`, 'aria-live': 'polite' });
    const check = () => answerStep(lesson, i, input.value, out);
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); check(); } });
    list.append(el('li', { id: `step-${i}` },
      el('p', {}, step.question),
      el('div', { class: 'ask' }, input,
        el('button', { type: 'button', id: `check-${i}`, onclick: check }, 'Check my prediction'),
        el('button', { type: 'button', id: `show-${i}`, onclick: () => answerStep(lesson, i, null, out) }, 'Just show me')),
      out));
  });
  drawSummary(lesson);
}

function answerStep(lesson, i, text, out) {
  const step = lesson.steps[i];
  const r = text === null ? call('observe', lesson.name, i) : call('grade', lesson.name, i, text);
  out.replaceChildren();
  if (r.unreadable) {
    out.append(el('p', { class: 'error' }, `${r.unreadable}; try again.`));
    return;
  }
  if (r.error) {
    out.append(el('p', { class: 'error' }, r.error));
    return;
  }
  const o = r.ok;
  let line;
  if (text === null) {
    line = el('p', {}, el('strong', {}, 'observed: '), `${o.observed}. ${o.explain}`);
  } else if (o.right) {
    line = el('p', {}, el('span', { class: 'verdict-right' }, 'right: '), `you said ${o.said}; it is ${o.observed}. ${o.explain}`);
  } else {
    line = el('p', {}, el('span', { class: 'verdict-wrong' }, 'not quite: '), `you said ${o.said}; it is ${o.observed}. ${o.explain}`);
  }
  out.append(line);
  if (o.table) {
    out.append(el('table', { class: 'steps' },
      el('thead', {}, el('tr', {}, ['step', 'offset handled', 'committed (next to read)', 'balance'].map((h) => el('th', {}, h)))),
      el('tbody', {}, o.table.map((row) => el('tr', {},
        el('td', {}, row.step), el('td', {}, row.handled), el('td', { class: 'num' }, String(row.committed)), el('td', { class: 'num' }, String(row.balance)))))));
  }
  // An MQTT step's run is the CLI's alone: no playground link.
  const link = o.spec ? [' · ', runLink(playgroundUrl(o.spec), 'open this run in the playground')] : [];
  out.append(el('p', { class: 'cli' }, 'run it: ', el('code', {}, o.command), ...link));
  // The score counts each question's first prediction: a second try after seeing the
  // answer is shown, not scored.
  const first = answered.get(i);
  const said = text === null ? null : o.said;
  const right = first && first.right !== null ? first.right : (text === null ? null : o.right);
  answered.set(i, { label: step.label, said: said ?? first?.said ?? null, observed: o.observed, right });
  drawSummary(lesson);
}

function drawSummary(lesson) {
  const box = $('lesson-summary');
  box.hidden = answered.size === 0;
  const rows = [...answered.keys()].sort((a, b) => a - b).map((i) => answered.get(i));
  box.querySelector('tbody').replaceChildren(...rows.map((r) =>
    el('tr', {}, el('td', {}, r.label), el('td', {}, r.said ?? ''), el('td', {}, r.observed))));
  const asked = rows.filter((r) => r.right !== null);
  $('lesson-score').textContent = asked.length
    ? `score: ${asked.filter((r) => r.right).length}/${asked.length} first predictions right (${lesson.steps.length} questions)`
    : '';
}

/** A link to a run that opens in place (no page load: the page works offline once
 *  loaded), and still has its address for a new tab or for sending. */
function runLink(href, text, attrs = {}) {
  return el('a', { ...attrs, href, onclick: (e) => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    readUrl(href);
    // Its answer has been seen (a lesson's observation, a matrix cell): no prediction.
    state.revealNext = true;
    history.pushState(null, '', href);
    show(state.view);
  } }, text);
}

function playgroundUrl(spec) {
  const q = new URLSearchParams({ view: 'playground', scenario: spec.scenario });
  q.set('stores', spec.store || 'naive');
  if (spec.checkpoint_every) q.set('k', String(spec.checkpoint_every));
  if (spec.producer && spec.producer !== 'non-idempotent') q.set('producer', spec.producer);
  if (spec.schedule !== null && spec.schedule !== undefined) q.set('schedule', spec.schedule || 'none');
  return `?${q}`;
}

// ---- playground -----------------------------------------------------------------
function spec(store, trace) {
  const s = { scenario: state.scenario, store, producer: state.producer, trace };
  if (state.k !== null) s.checkpoint_every = state.k;
  if (state.events !== null && state.scenario === 'ddia') s.events = state.events;
  if (state.schedule !== null) s.schedule = state.schedule;
  return s;
}

function syncControls() {
  $('scenario').value = state.scenario;
  $('producer').value = state.producer;
  $('x-axis').value = state.x;
  $('events-label').hidden = state.scenario !== 'ddia';
  $('events').value = state.events ?? '';
  $('events').placeholder = '100';
  $('k').value = state.k ?? '';
  for (const box of $('stores').querySelectorAll('input')) box.checked = state.stores.includes(box.value);
  for (const r of document.querySelectorAll('input[name="kind"]')) r.checked = r.value === state.kind;
  $('predict-first').checked = state.predict;
  const about = catalogue.scenarios.find((s) => s.name === state.scenario);
  $('scenario-about').textContent = about ? about.about : '';
}

/** Runs the playground's stores and draws them; timings land in window.idemTiming. */
function runPlayground() {
  syncControls();
  const t0 = performance.now();
  const runs = [];
  let error = null;
  for (const store of state.stores) {
    const r = call('run', JSON.stringify(spec(store, true)));
    if (r.error) { error = r.error; break; }
    runs.push(r.ok);
  }
  const t1 = performance.now();
  $('run-error').hidden = !error;
  $('run-error').textContent = error || '';
  if (error || runs.length === 0) {
    if (!error && runs.length === 0) { $('run-error').hidden = false; $('run-error').textContent = 'Choose at least one store.'; }
    $('results').replaceChildren();
    $('plot').replaceChildren();
    $('trace').replaceChildren();
    drawTimeline(null);
    writeUrl();
    return;
  }
  window.idemRuns = runs;
  if (state.schedule === null) $('schedule').value = runs[0].crashes.join(',');
  else $('schedule').value = state.schedule;
  if (state.k === null) $('k').placeholder = String(runs[0].checkpoint_every);
  if (state.scenario === 'ddia' && state.events === null) $('events').placeholder = String(runs[0].events);
  const focus = runs.find((r) => r.store === state.focus) || runs[0];
  const key = JSON.stringify(state.stores.map((s) => spec(s, false)));
  if (state.revealNext) revealed = key;
  state.revealNext = false;
  const shown = !state.predict || revealed === key;
  drawTimeline(focus, shown);
  $('plot-figure').hidden = !shown;
  $('trace-details').hidden = !shown;
  if (shown) {
    drawCards(runs, focus, prediction && prediction.key === key ? prediction : null);
    drawPlot(runs);
    drawTrace(focus);
  } else {
    drawPrediction(runs[0], key);
  }
  $('cli-line').textContent = idem.cli_line(JSON.stringify(spec(focus.store, false)));
  writeUrl();
  const t2 = performance.now();
  window.idemTiming = { run_ms: t1 - t0, render_ms: t2 - t1, total_ms: t2 - t0, steps: runs.reduce((n, r) => n + r.trace.length, 0) };
}

/** Offsets as the CLI writes them (`40..49`, `0, 1`, `none`): the core's renderer. */
function ranges(list) {
  return idem.ranges(JSON.stringify(list));
}

/** A box that asks for one whole number before something shows: `${prefix}-total`, its
 *  check and show buttons and its error line; `answer(text)` gets a whole number as
 *  typed, `reveal()` a "Just show me". `before` are controls to put ahead of the input. */
function predictBox(prefix, label, question, before, answer, reveal) {
  const input = el('input', { type: 'text', id: `${prefix}-total`, inputmode: 'numeric', placeholder: 'a whole number', 'aria-label': label });
  const problem = el('p', { id: `${prefix}-error`, class: 'error', role: 'alert', hidden: '' });
  const check = () => {
    const text = input.value.trim();
    if (/^-?[0-9]+$/.test(text)) return answer(text);
    problem.hidden = false;
    problem.textContent = text === '' ? 'Type a whole number first, or choose "Just show me".' : `"${text}" is not a whole number; try again.`;
  };
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); check(); } });
  return el('div', { class: 'predict', id: `${prefix}-box` }, question,
    el('div', { class: 'ask' }, ...before, input,
      el('button', { type: 'button', id: `${prefix}-check`, onclick: check }, 'Check my prediction'),
      el('button', { type: 'button', id: `${prefix}-show`, onclick: reveal }, 'Just show me')),
    problem);
}

/** Asks for the total of the run's first store before anything of the run shows. */
function drawPrediction(run, key) {
  const question = el('p', {}, 'Predict first: with this log, crash schedule and checkpoint interval, what total does the ',
    el('strong', {}, run.store), ' store end at?');
  const answer = (said) => { prediction = { key, store: run.store, said }; revealed = key; runPlayground(); };
  const reveal = () => { revealed = key; runPlayground(); };
  $('results').replaceChildren(predictBox('predict', `your prediction: the total the ${run.store} store ends at`, question, [], answer, reveal));
}

/** The line that grades a prediction against the run's figure. */
function verdictLine(id, right, said, what, observed) {
  return el('p', { id, class: 'prediction' }, el('span', { class: right ? 'verdict-right' : 'verdict-wrong' }, right ? 'right: ' : 'not quite: '),
    `you said ${said}; ${what} ${observed}.`);
}

function drawCards(runs, focus, guess) {
  const guessed = guess && runs.find((r) => r.store === guess.store);
  const line = guessed ? [verdictLine('predict-verdict', Number(guess.said) === guessed.final_total, guess.said,
    `the ${guessed.store} store ends at`, guessed.final_total)] : [];
  $('results').replaceChildren(...line, ...runs.map((r, i) => {
    const card = el('div', { class: `card ${r.verdict}`, 'data-store': r.store },
      el('h4', { style: `color:${COLORS[i % COLORS.length]}` }, r.store),
      el('div', {}, el('span', { class: 'total', 'data-field': 'final_total' }, String(r.final_total)), ` of ${r.true_total} `, el('span', { class: 'verdict' }, r.verdict)),
      el('dl', {},
        el('dt', {}, 'resumed at'), el('dd', { 'data-field': 'resume_at' }, r.resume_at === null ? 'no crash' : String(r.resume_at)),
        el('dt', {}, 'offsets delivered again'), el('dd', { 'data-field': 'redelivered' }, ranges(r.redelivered)),
        el('dt', {}, 'offsets skipped'), el('dd', { 'data-field': 'skipped' }, ranges(r.skipped)),
        el('dt', {}, 'anomalies'), el('dd', { 'data-field': 'anomalies' }, Object.entries(r.anomalies).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(', ') || 'none'),
        el('dt', {}, 'flash'), el('dd', {}, `${r.flash.writes} records, ${r.flash.erases} erases`)),
      el('button', { type: 'button', class: 'focus', 'aria-pressed': String(r === focus), onclick: () => { state.focus = r.store; runPlayground(); } },
        r === focus ? 'marked on the log' : 'mark on the log'));
    return card;
  }));
}

function crashItems() {
  return ($('schedule').value || '').split(',').map((s) => s.trim()).filter(Boolean);
}

function toggleCrash(offset) {
  const item = `crash@${state.kind}:${offset}`;
  const items = crashItems();
  const at = items.indexOf(item);
  if (at >= 0) items.splice(at, 1);
  else items.push(item);
  state.schedule = items.join(',');
  runPlayground();
}

function drawTimeline(focus, shown) {
  const box = $('timeline');
  const events = focus ? focus.events : 0;
  $('legend-store').textContent = focus ? focus.store : '';
  if (!focus || events > MAX_CELLS) {
    box.replaceChildren();
    delete box.dataset.every;
    box.style.gridTemplateColumns = '';
    $('timeline-big').hidden = !focus;
    if (focus) box.append(el('p', { class: 'about' }, `${events} offsets: too many to draw one by one; add a crash point by its offset.`));
    return;
  }
  $('timeline-big').hidden = true;
  const messages = new Map();
  const commits = new Set();
  for (const t of focus.trace) {
    if (t.offset !== null && t.message) messages.set(t.offset, t.message);
    if (t.action === 'commit' && t.offset !== null) commits.add(t.offset);
  }
  // Before a prediction, the log shows only what was chosen: where it crashes.
  const redelivered = new Set(shown ? focus.redelivered : []);
  const skipped = new Set(shown ? focus.skipped : []);
  const crashes = new Map();
  for (const t of focus.trace) {
    if (t.action.startsWith('crash@') && t.offset !== null) crashes.set(t.offset, t.action);
  }
  const cells = [];
  for (let o = 0; o < events; o++) {
    const cls = ['cell'];
    if (skipped.has(o)) cls.push('skipped');
    else if (redelivered.has(o)) cls.push('redelivered');
    if (crashes.has(o)) cls.push('crash');
    if (commits.has(o)) cls.push('batch-end');
    const label = [`offset ${o}`];
    if (messages.has(o)) label.push(messages.get(o));
    if (crashes.has(o)) label.push(crashes.get(o));
    if (redelivered.has(o)) label.push('delivered again');
    if (skipped.has(o)) label.push('skipped');
    cells.push(el('button', { type: 'button', class: cls.join(' '), 'data-offset': String(o), title: label.join(', '), 'aria-label': label.join(', '), onclick: () => toggleCrash(o) },
      el('span', {}, String(o), crashes.has(o) ? el('span', { class: 'x' }, '×') : ''), messages.has(o) ? el('span', { class: 'msg' }, messages.get(o)) : ''));
  }
  box.replaceChildren(...cells);
  box.dataset.every = String(focus.checkpoint_every);
  layoutTimeline();
}

/** The log's rows: as many cells as fit, a multiple of the checkpoint interval K (or,
 *  when K cells do not fit, a divisor of K), so a checkpoint's bar ends a row. */
function layoutTimeline() {
  const box = $('timeline');
  const k = Number(box.dataset.every || 0);
  if (!k || box.clientWidth === 0) return;
  const rem = parseFloat(getComputedStyle(document.documentElement).fontSize);
  const fit = Math.max(1, Math.floor((box.clientWidth + 2) / (2.4 * rem + 2)));
  let n = 1;
  if (k <= fit) n = k * Math.floor(fit / k);
  else for (let d = 1; d <= fit; d++) if (k % d === 0) n = d;
  box.style.gridTemplateColumns = `repeat(${n}, minmax(0, 1fr))`;
  box.dataset.columns = String(n);
}

// Where each step of a trace sits on the plot's x axis: its index, or (as `idem plot`
// draws it) the offset: a delivery at its offset, its effect one further on, anything
// else where the step before it was.
function xsOf(trace, axis) {
  let last = 0;
  return trace.map((t, j) => {
    if (axis === 'step') return j;
    if ((t.action === 'deliver' || t.action === 'redeliver') && t.offset !== null) last = t.offset;
    else if ((t.action === 'apply' || t.action === 'skip' || t.action === 'between') && t.offset !== null) last = t.offset + 1;
    return last;
  });
}

// `n thing` or `n things`.
function count(n, thing) {
  return `${n} ${thing}${n === 1 ? '' : 's'}`;
}

function drawPlot(runs) {
  const W = 800; const H = 300; const P = 36;
  const axis = state.x;
  const xsOfRun = runs.map((r) => xsOf(r.trace, axis));
  const span = Math.max(...xsOfRun.map((xs) => Math.max(...xs, 0)), 1);
  const totals = runs.flatMap((r) => r.trace.map((t) => t.total)).concat(runs.map((r) => r.true_total), [0]);
  const lo = Math.min(...totals); const hi = Math.max(...totals, lo + 1);
  const x = (v) => P + (v / span) * (W - 2 * P);
  const y = (v) => H - P - ((v - lo) / (hi - lo)) * (H - 2 * P);
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', runs.map((r) => `${r.store} ends at ${r.final_total}`).join('; ') + `; the true total is ${runs[0].true_total}`);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  add('line', { x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: '#999' });
  add('line', { x1: P, y1: P, x2: P, y2: H - P, stroke: '#999' });
  add('text', { x: P, y: H - 10, 'font-size': 12, fill: '#555' }, axis);
  add('text', { x: 4, y: P - 8, 'font-size': 12, fill: '#555' }, 'total');
  add('text', { x: P - 4, y: y(lo) + 4, 'font-size': 11, 'text-anchor': 'end', fill: '#555' }, String(lo));
  add('text', { x: P - 4, y: y(hi) + 4, 'font-size': 11, 'text-anchor': 'end', fill: '#555' }, String(hi));
  const truth = runs[0].true_total;
  add('line', { x1: P, y1: y(truth), x2: W - P, y2: y(truth), stroke: '#444', 'stroke-dasharray': '5 4' });
  add('text', { x: P + 4, y: y(truth) - 4, 'font-size': 11, fill: '#444' }, `true total ${truth}`);
  // The replay window of each store that had one, shaded: from its first redelivery to
  // its last (the steps the trace names `redeliver`).
  runs.forEach((r, i) => {
    const xs = xsOfRun[i];
    const replayed = r.trace.map((t, j) => (t.action === 'redeliver' ? j : -1)).filter((j) => j >= 0);
    if (replayed.length) {
      const [a, b] = [xs[replayed[0]], xs[replayed[replayed.length - 1]]];
      add('rect', { x: x(Math.min(a, b)), y: P, width: Math.max(Math.abs(x(b) - x(a)), 2), height: H - 2 * P, fill: COLORS[i % COLORS.length], opacity: 0.08, 'data-replay': r.store });
    }
  });
  runs.forEach((r, i) => {
    const color = COLORS[i % COLORS.length];
    const xs = xsOfRun[i];
    // One point per step is plenty up to a few thousand; beyond, every n-th step and
    // every crash or recovery step, so the line keeps its shape.
    const every = Math.max(1, Math.floor(r.trace.length / 4000));
    const pts = [];
    r.trace.forEach((t, j) => {
      if (j % every === 0 || j === r.trace.length - 1 || t.action.startsWith('crash') || t.action === 'recover') pts.push(`${x(xs[j]).toFixed(1)},${y(t.total).toFixed(1)}`);
    });
    // Earlier lines are wider, so a line that another covers still shows at its edges.
    const width = 2 + 2.5 * (runs.length - 1 - i);
    add('polyline', { points: pts.join(' '), fill: 'none', stroke: color, 'stroke-width': width, 'stroke-linejoin': 'round', 'data-store': r.store });
    r.trace.forEach((t, j) => {
      if (t.action.startsWith('crash')) add('circle', { cx: x(xs[j]), cy: y(t.total), r: 4, fill: '#b3261e' });
      // A ring where the store skipped a duplicate (few enough to draw one by one).
      if (t.action === 'skip' && r.skipped.length <= 400) add('circle', { cx: x(xs[j]), cy: y(t.total), r: 3.5, fill: 'none', stroke: color, 'stroke-width': 1.5, 'data-skip': r.store });
    });
  });
  // The legend, under the plot: each store's end, its skips, and whose line it runs on.
  const points = runs.map((r, i) => r.trace.map((t, j) => `${xsOfRun[i][j]},${t.total}`));
  const legend = el('ul', { id: 'plot-legend' }, runs.map((r, i) => {
    const notes = [`ends at ${r.final_total}`];
    const skips = r.trace.filter((t) => t.action === 'skip').length;
    if (skips > 0) notes.push(`rings: ${count(skips, 'skipped duplicate')}`);
    runs.forEach((o, k) => {
      if (k === i) return;
      const theirs = new Set(points[k]);
      const shared = points[i].filter((p) => theirs.has(p)).length;
      if (shared === points[i].length && points[k].length === points[i].length) notes.push(`the same line as ${o.store}`);
      else if (2 * shared >= points[i].length) notes.push(`${shared} of its ${points[i].length} points on the ${o.store} line`);
    });
    return el('li', { 'data-store': r.store }, el('span', { class: 'swatch', style: `background:${COLORS[i % COLORS.length]}` }), `${r.store} store (${notes.join('; ')})`);
  }));
  $('plot').replaceChildren(svg, legend);
}

function drawTrace(focus) {
  $('trace-store').textContent = `${focus.store} (${focus.trace.length} steps)`;
  const rows = focus.trace.slice(0, MAX_TRACE_ROWS).map((t) => el('tr', { class: t.action.startsWith('crash') ? 'crash' : t.action },
    el('td', { class: 'num' }, String(t.step)), el('td', { class: 'num' }, t.offset === null ? '-' : String(t.offset)),
    el('td', {}, t.message || ''), el('td', {}, t.action), el('td', { class: 'num' }, String(t.total)), el('td', { class: 'num' }, String(t.resume_at))));
  const table = el('table', {}, el('thead', {}, el('tr', {}, ['step', 'offset', 'message', 'action', 'total', 'resume at'].map((h) => el('th', {}, h)))), el('tbody', {}, rows));
  const more = focus.trace.length > MAX_TRACE_ROWS
    ? el('p', { class: 'about' }, `The first ${MAX_TRACE_ROWS} of ${focus.trace.length} steps; the CLI prints them all with --trace.`) : '';
  $('trace').replaceChildren(table, more);
}

// ---- matrix ---------------------------------------------------------------------
// The table shows once one cell of it has been predicted (or "Just show me" chosen).
let matrixData = null;
let matrixShown = false;
let matrixGuess = null; // { store, fault, said }

function drawMatrix() {
  if (!matrixData) {
    const r = call('matrix');
    if (r.error) { $('matrix').textContent = r.error; return; }
    matrixData = r.ok;
  }
  if (matrixShown) drawMatrixTable(matrixData);
  else drawMatrixPrediction(matrixData);
}

/** The table's skeleton, every figure a "?", and a question about one of its cells. */
function drawMatrixPrediction(m) {
  const store = el('select', { id: 'matrix-store', 'aria-label': 'the store' }, m.rows.map((r) => el('option', { value: r.store }, r.store)));
  const fault = el('select', { id: 'matrix-fault', 'aria-label': 'the fault' }, m.faults.map((f) => el('option', { value: f.name }, f.title)));
  const mark = () => {
    for (const td of $('matrix').querySelectorAll('td[data-fault]')) {
      td.classList.toggle('chosen', td.dataset.fault === fault.value && td.dataset.store === store.value);
    }
  };
  store.addEventListener('change', mark);
  fault.addEventListener('change', mark);
  const answer = (said) => { matrixGuess = { store: store.value, fault: fault.value, said }; matrixShown = true; drawMatrix(); };
  const reveal = () => { matrixShown = true; drawMatrix(); };
  const question = el('p', {}, 'Predict one cell first: the total a store ends at under a fault (a cell, or these two lists, chooses which).');
  const box = predictBox('matrix', 'your prediction: the total', question, [store, fault], answer, reveal);
  const cell = (row, f) => el('td', { 'data-fault': f.name, 'data-store': row.store,
    onclick: () => { store.value = row.store; fault.value = f.name; mark(); $('matrix-total').focus(); } }, '?');
  const head = el('tr', {}, el('th', {}, 'store'), m.faults.map((f) => el('th', {}, f.title)));
  const rows = m.rows.map((row) => el('tr', {}, el('th', {}, row.store), m.faults.map((f) => cell(row, f))));
  $('matrix').replaceChildren(box, el('table', {}, el('thead', {}, head), el('tbody', {}, rows)));
  mark();
}

function drawMatrixTable(m) {
  const head = el('tr', {}, el('th', {}, 'store'), m.faults.map((f) => el('th', {}, f.title)));
  const truth = el('tr', {}, el('th', {}, 'true total'), m.rows[0].cells.map((c) => el('td', { class: 'num' }, String(c.true_total))));
  const guessed = (row, c) => matrixGuess && matrixGuess.store === row.store && matrixGuess.fault === c.fault;
  const rows = m.rows.map((row) => el('tr', {}, el('th', {}, row.store), row.cells.map((c) =>
    el('td', { class: `${c.verdict}${guessed(row, c) ? ' chosen' : ''}`, 'data-fault': c.fault },
      runLink(playgroundUrl(c.spec), `${c.verdict} ${c.final_total}`, { title: `${row.store} under ${c.fault}: ${c.final_total} of ${c.true_total}` })))));
  const line = [];
  if (matrixGuess) {
    const row = m.rows.find((r) => r.store === matrixGuess.store);
    const c = row.cells.find((x) => x.fault === matrixGuess.fault);
    const title = m.faults.find((f) => f.name === c.fault).title;
    line.push(verdictLine('matrix-verdict', Number(matrixGuess.said) === c.final_total, matrixGuess.said,
      `the ${row.store} store under ${title} ends at`, `${c.final_total} (the true total is ${c.true_total})`));
  }
  $('matrix').replaceChildren(...line, el('table', {}, el('thead', {}, head), el('tbody', {}, truth, rows)));
}

// ---- start ----------------------------------------------------------------------
async function start() {
  idem = await loadCore();
  catalogue = call('catalogue').ok;
  lessons = call('lessons').ok;
  readUrl();
  $('lesson-name').replaceChildren(...lessons.map((l) => el('option', { value: l.name }, `${l.name}: ${l.title}`)));
  $('scenario').replaceChildren(...catalogue.scenarios.map((s) => el('option', { value: s.name }, s.name)));
  $('stores').append(...catalogue.stores.map((s) => el('label', { title: s.about },
    el('input', { type: 'checkbox', value: s.name, name: 'store' }), s.name)));
  for (const b of document.querySelectorAll('nav button')) b.addEventListener('click', () => show(b.dataset.view));
  $('lesson-name').addEventListener('change', (e) => { state.lesson = e.target.value; drawLesson(); writeUrl(); });
  $('scenario').addEventListener('change', (e) => { state.scenario = e.target.value; state.schedule = null; state.k = null; state.events = null; runPlayground(); });
  $('producer').addEventListener('change', (e) => { state.producer = e.target.value; runPlayground(); });
  $('x-axis').addEventListener('change', (e) => { state.x = e.target.value; runPlayground(); });
  $('k').addEventListener('change', (e) => { state.k = e.target.value === '' ? null : Number(e.target.value); runPlayground(); });
  $('events').addEventListener('change', (e) => { state.events = e.target.value === '' ? null : Number(e.target.value); runPlayground(); });
  $('stores').addEventListener('change', () => {
    state.stores = [...$('stores').querySelectorAll('input:checked')].map((b) => b.value);
    runPlayground();
  });
  for (const r of document.querySelectorAll('input[name="kind"]')) r.addEventListener('change', () => { state.kind = r.value; });
  $('schedule').addEventListener('change', (e) => { state.schedule = e.target.value.trim(); runPlayground(); });
  $('controls').addEventListener('submit', (e) => { e.preventDefault(); });
  $('predict-first').addEventListener('change', (e) => { state.predict = e.target.checked; runPlayground(); });
  $('big-add').addEventListener('click', () => { const v = $('big-offset').value; if (v !== '') toggleCrash(Number(v)); });
  window.addEventListener('popstate', () => { readUrl(); show(state.view); });
  window.addEventListener('resize', layoutTimeline);
  $('loading').hidden = true;
  show(state.view);
  document.body.dataset.ready = 'true';
}

start().catch((e) => {
  $('loading').hidden = true;
  $('fatal').hidden = false;
  $('fatal').textContent = `The simulator did not load: ${e}`;
});
