// The playground in a real browser: Debian's Chromium, driven by playwright-core, against
// the page `idem serve` serves from web/dist (build it with `bash web/build.sh`).
//
// Environment: IDEM_BIN (the idem binary; default target/debug/idem), IDEM_CHROMIUM
// (default /usr/bin/chromium), IDEM_SCREENSHOTS (default web/e2e/screenshots).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from './chromium.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const idemBin = process.env.IDEM_BIN ?? path.join(root, 'target/debug/idem');
const shots = process.env.IDEM_SCREENSHOTS ?? path.join(root, 'web/e2e/screenshots');

let server;
let base;
let browser;
let chromium;
const offsite = []; // requests the page tried to make to anything but the server

before(async () => {
  mkdirSync(shots, { recursive: true });
  server = spawn(idemBin, ['serve', '--port', '0', '--dir', path.join(root, 'web/dist')], { stdio: ['ignore', 'pipe', 'inherit'] });
  base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('idem serve printed no address in 20 s')), 20000);
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = /http:\/\/127\.0\.0\.1:\d+\//.exec(out);
      if (m) { clearTimeout(timer); resolve(m[0]); }
    });
    server.on('exit', (code) => reject(new Error(`idem serve exited with ${code}`)));
  });
  chromium = await launch();
  browser = chromium.browser;
});

after(async () => {
  await chromium?.close();
  server?.kill();
  assert.deepEqual(offsite, [], 'the page fetched something that is not its own');
});

async function open(query, viewport = { width: 1200, height: 900 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(base)) return route.continue();
    offsite.push(url);
    return route.abort();
  });
  await page.goto(`${base}${query}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 30000 });
  return { page, context, errors };
}

/** `idem run` with the same parameters, as JSON. */
function cli(args) {
  return JSON.parse(execFileSync(idemBin, ['run', ...args, '--trace', '--json'], { encoding: 'utf8' }));
}

test('the mqtt lesson grades a QoS prediction and names the CLI run, with no playground link', async () => {
  const { page, context, errors } = await open('?view=lessons&lesson=mqtt');
  await page.fill('#answer-3', '141');
  await page.click('#check-3');
  const wrong = await page.textContent('#observation-3');
  assert.match(wrong, /not quite: you said 141; it is 147\./);
  assert.match(wrong, /the identifiers were in RAM, and the reset took them/);
  assert.match(wrong, /run it: idem run mqtt --store naive --qos 2 --session ram --trace/);
  // The playground runs the simulator's scenarios, not MQTT's: no link to open it there.
  assert.equal(await page.locator('#observation-3 a').count(), 0);
  await page.click('#show-4');
  assert.match(await page.textContent('#observation-4'), /observed: 141\./);
  assert.equal(await page.textContent('#lesson-score'), 'score: 0/1 first predictions right (6 questions)');
  assert.deepEqual(errors, []);
  await context.close();
});

const total = (page, store) => page.locator(`.card[data-store="${store}"] [data-field="final_total"]`).textContent();

test('the ddia lesson, answered wrong then right, shows 110 and 100 and the comparison', async () => {
  const { page, context, errors } = await open('?view=lessons&lesson=ddia');
  await page.fill('#answer-2', '100');
  await page.click('#check-2');
  const wrong = await page.textContent('#observation-2');
  assert.match(wrong, /not quite: you said 100; it is 110\./);
  // A tempting wrong answer gets the explanation written for it, as in the terminal.
  assert.match(wrong, /100 counts each of the 100 events once, and forgets the replay/);
  await page.fill('#answer-2', '110');
  await page.press('#answer-2', 'Enter'); // the keyboard works as well as the button
  assert.match(await page.textContent('#observation-2'), /right: you said 110; it is 110\./);
  await page.fill('#answer-3', '100');
  await page.click('#check-3');
  assert.match(await page.textContent('#observation-3'), /right: you said 100; it is 100\./);
  await page.fill('#answer-0', 'forty');
  await page.click('#check-0');
  assert.equal(await page.textContent('#observation-0'), '"forty" is not a whole number; try again.');
  assert.match(await page.textContent('#lesson-summary'), /naive total\s*110\s*110/);
  // The first prediction counts: 100 for the naive total was wrong.
  assert.equal(await page.textContent('#lesson-score'), 'score: 1/2 first predictions right (13 questions)');
  await page.screenshot({ path: path.join(shots, 'lessons.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await context.close();
});

test('a click on offset 49 (effect) with K = 10 gives naive 110 and offset 100; the URL restores it', async () => {
  const { page, context, errors } = await open('?view=playground&scenario=ddia&stores=naive,offset&k=10&schedule=none&predict=off');
  assert.equal(await total(page, 'naive'), '100');
  await page.check('input[name="kind"][value="effect"]');
  await page.click('#timeline [data-offset="49"]');
  assert.equal(await total(page, 'naive'), '110');
  assert.equal(await total(page, 'offset'), '100');
  assert.equal(await page.inputValue('#schedule'), 'crash@effect:49');
  // The log shows the first store's replay; a card's button shows another's.
  assert.match(await page.getAttribute('#timeline [data-offset="45"]', 'class'), /redelivered/);
  await page.click('.card[data-store="offset"] button.focus');
  assert.match(await page.getAttribute('#timeline [data-offset="45"]', 'class'), /skipped/);
  assert.equal(await page.textContent('#legend-store'), 'offset');
  // The plot marks the same: each store's replay shaded, the offset store's ten skips ringed.
  assert.equal(await page.locator('#plot rect[data-replay]').count(), 2);
  assert.equal(await page.locator('#plot circle[data-skip="offset"]').count(), 10);
  assert.equal(await page.locator('#plot circle[data-skip="naive"]').count(), 0);
  const url = page.url();
  assert.match(url, /schedule=crash%40effect%3A49/);
  await page.screenshot({ path: path.join(shots, 'playground.png'), fullPage: true });
  await page.reload();
  await page.waitForSelector('body[data-ready="true"]');
  assert.equal(page.url(), url);
  assert.equal(await total(page, 'naive'), '110');
  assert.equal(await total(page, 'offset'), '100');
  assert.equal(await page.inputValue('#schedule'), 'crash@effect:49');
  assert.match(await page.getAttribute('#timeline [data-offset="49"]', 'class'), /crash/);
  // A second click on the crash cell removes the crash.
  await page.click('#timeline [data-offset="49"]');
  assert.equal(await total(page, 'naive'), '100');
  assert.deepEqual(errors, []);
  await context.close();
});

test('payments: p17 lands at offsets 0 and 1, message-id ends at 8', async () => {
  const { page, context, errors } = await open('?view=playground&scenario=payments&stores=naive,offset,message-id&predict=off');
  assert.equal(await page.textContent('#timeline [data-offset="0"] .msg'), 'p17');
  assert.equal(await page.textContent('#timeline [data-offset="1"] .msg'), 'p17');
  assert.equal(await page.textContent('#timeline [data-offset="2"] .msg'), 'p18');
  assert.equal(await total(page, 'naive'), '13');
  assert.equal(await total(page, 'offset'), '13');
  assert.equal(await total(page, 'message-id'), '8');
  // The plot's legend: English counts, and the line one store shares with another.
  assert.equal(await page.textContent('#plot-legend [data-store="message-id"]'), 'message-id store (ends at 8; rings: 1 skipped duplicate)');
  assert.match(await page.textContent('#plot-legend [data-store="offset"]'), /the same line as naive/);
  await page.selectOption('#x-axis', 'step');
  assert.match(page.url(), /x=step/);
  await page.screenshot({ path: path.join(shots, 'payments.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await context.close();
});

test("the page's reports equal idem run --json, field by field", async () => {
  const cases = [
    ['?view=playground&scenario=ddia&stores=naive', ['ddia', '--store', 'naive']],
    ['?view=playground&scenario=payments&stores=message-id', ['payments', '--store', 'message-id']],
    ['?view=playground&scenario=ddia&stores=offset,atomic&schedule=crash@effect:49,crash@effect:45%232',
      ['ddia', '--store', 'offset', '--schedule', 'crash@effect:49,crash@effect:45#2']],
    ['?view=playground&scenario=ddia&stores=two-phase&k=7&schedule=crash@prepare:48',
      ['ddia', '--store', 'two-phase', '--checkpoint-every', '7', '--schedule', 'crash@prepare:48']],
  ];
  for (const [query, args] of cases) {
    const { page, context, errors } = await open(query);
    const runs = await page.evaluate(() => window.idemRuns);
    assert.ok(runs.length >= 1);
    const mine = runs[0];
    const theirs = cli(args);
    for (const field of ['final_total', 'true_total', 'committed_at_crash', 'resume_at', 'redelivered', 'skipped', 'anomalies']) {
      assert.deepEqual(mine[field], theirs[field], `${query}: ${field}`);
    }
    assert.deepEqual(mine, theirs, `${query}: the whole report`);
    assert.deepEqual(errors, []);
    await context.close();
  }
  // The two-crash case's own figures, so the comparison is not of two empty runs.
  const two = cli(['ddia', '--store', 'offset', '--schedule', 'crash@effect:49,crash@effect:45#2']);
  assert.equal(two.final_total, 100);
  assert.deepEqual(two.crashes, ['crash@effect:49', 'crash@effect:45#2']);
});

test('a schedule that cannot happen is one sentence, and the cells work from the keyboard', async () => {
  const { page, context, errors } = await open('?view=playground&scenario=ddia&stores=naive&schedule=none&predict=off');
  await page.fill('#schedule', 'crash@effect:500');
  await page.press('#schedule', 'Enter');
  await page.locator('#schedule').blur();
  assert.equal(await page.textContent('#run-error'), 'cannot crash at offset 500: the log has offsets 0..=99');
  await page.fill('#schedule', '');
  await page.locator('#schedule').blur();
  assert.equal(await total(page, 'naive'), '100');
  await page.focus('#timeline [data-offset="29"]');
  await page.keyboard.press('Enter');
  assert.equal(await page.inputValue('#schedule'), 'crash@effect:29');
  assert.equal(await total(page, 'naive'), '110');
  assert.deepEqual(errors, []);
  await context.close();
});

test('the matrix: each cell opens the run that explains it, offline once loaded', async () => {
  const { page, context, errors } = await open('?view=matrix');
  await page.click('#matrix-show');
  const cell = page.locator('#matrix tr', { hasText: 'message-id' }).locator('td[data-fault="producer-retry"] a');
  assert.equal(await cell.textContent(), 'exact 8');
  await page.screenshot({ path: path.join(shots, 'matrix.png'), fullPage: true });
  // The server is gone as far as the page knows: every run is computed in the page.
  await context.setOffline(true);
  await cell.click();
  assert.equal(await total(page, 'message-id'), '8');
  assert.match(page.url(), /view=playground&scenario=payments&stores=message-id/);
  await page.click('#tab-lessons');
  await page.fill('#answer-2', '110');
  await page.click('#check-2');
  assert.match(await page.textContent('#observation-2'), /right: you said 110; it is 110\./);
  await page.click('#observation-2 a');
  assert.equal(await total(page, 'naive'), '110');
  // Back goes through the views visited, still without the network.
  await page.goBack();
  assert.equal(await page.isVisible('#view-lessons'), true);
  await page.goBack();
  assert.equal(await page.isVisible('#view-matrix'), true);
  await context.setOffline(false);
  assert.deepEqual(errors, []);
  await context.close();
});

test('predict first: the playground asks for one total and the matrix for one cell before either shows', async () => {
  const { page, context, errors } = await open('?view=playground&scenario=ddia&stores=naive,offset');
  // Only the setting shows: the log and its crash, no card, plot, trace or replay.
  assert.equal(await page.locator('.card').count(), 0);
  assert.equal(await page.isVisible('#plot-figure'), false);
  assert.equal(await page.isVisible('#trace-details'), false);
  assert.equal(await page.locator('#timeline .redelivered, #timeline .skipped').count(), 0);
  assert.equal(await page.locator('#timeline .crash').count(), 1);
  assert.match(await page.textContent('#predict-box'), /what total does the naive store end at\?/);
  await page.click('#predict-check');
  assert.equal(await page.textContent('#predict-error'), 'Type a whole number first, or choose "Just show me".');
  await page.fill('#predict-total', 'lots');
  await page.click('#predict-check');
  assert.equal(await page.textContent('#predict-error'), '"lots" is not a whole number; try again.');
  await page.fill('#predict-total', '100');
  await page.press('#predict-total', 'Enter');
  assert.equal(await page.textContent('#predict-verdict'), 'not quite: you said 100; the naive store ends at 110.');
  assert.equal(await total(page, 'naive'), '110');
  assert.equal(await page.locator('#timeline .redelivered').count(), 10);
  // Another crash point is another run: it asks again; "Just show me" shows it, ungraded.
  await page.click('#timeline [data-offset="29"]');
  assert.equal(await page.locator('.card').count(), 0);
  await page.click('#predict-show');
  assert.equal(await page.locator('.card').count(), 2);
  assert.equal(await page.locator('#predict-verdict').count(), 0);
  // The matrix: every cell a "?" until one of them is predicted.
  await page.click('#tab-matrix');
  const cells = page.locator('#matrix td[data-store]');
  assert.deepEqual(await page.$$eval('#matrix-store option', (os) => os.map((o) => o.value)),
    ['naive', 'offset', 'message-id', 'producer-seq', 'atomic', 'two-phase']);
  assert.equal(await cells.count(), 6 * 6);
  assert.deepEqual([...new Set(await cells.allTextContents())], ['?']);
  await page.click('#matrix td[data-store="message-id"][data-fault="producer-retry"]');
  assert.equal(await page.inputValue('#matrix-store'), 'message-id');
  assert.equal(await page.inputValue('#matrix-fault'), 'producer-retry');
  await page.fill('#matrix-total', '8');
  await page.click('#matrix-check');
  assert.equal(await page.textContent('#matrix-verdict'), 'right: you said 8; the message-id store under producer retry ends at 8 (the true total is 8).');
  assert.equal(await page.textContent('#matrix td.chosen a'), 'exact 8');
  assert.equal(await page.locator('#matrix td[data-fault] a').count(), 6 * 6);
  assert.deepEqual(errors, []);
  await context.close();
});

test("the log's rows are a multiple of K (a divisor of it on a phone): every row ends at a checkpoint", async () => {
  for (const [viewport, k, fits] of [[{ width: 1200, height: 900 }, 10, (n) => n % 10 === 0], [{ width: 1200, height: 900 }, 7, (n) => n % 7 === 0],
    [{ width: 390, height: 844 }, 10, (n) => 10 % n === 0]]) {
    const { page, context, errors } = await open(`?view=playground&scenario=ddia&stores=naive&k=${k}&schedule=none&predict=off`, viewport);
    const n = Number(await page.getAttribute('#timeline', 'data-columns'));
    assert.ok(n > 1 && fits(n), `${n} columns at ${viewport.width} px with K = ${k}`);
    // The grid is what the page draws: offset n - 1 ends the first row, n starts the next.
    const [last, next] = [await page.locator(`#timeline [data-offset="${n - 1}"]`).boundingBox(), await page.locator(`#timeline [data-offset="${n}"]`).boundingBox()];
    assert.ok(next.y > last.y && next.x < last.x, `offset ${n} is not on the row after offset ${n - 1}`);
    const bars = await page.$$eval('#timeline .batch-end', (cs) => cs.map((c) => Number(c.dataset.offset)));
    assert.equal(bars.length, Math.ceil(100 / k));
    for (const o of bars.slice(0, -1)) assert.equal((o % n + 1) % Math.min(n, k), 0, `the bar after offset ${o} with ${n} columns`);
    assert.deepEqual(errors, []);
    await context.close();
  }
});

test("a phone's width: the playground still draws", async () => {
  const { page, context, errors } = await open('?view=playground&scenario=worked-example&stores=naive,offset&predict=off', { width: 390, height: 844 });
  assert.equal(await total(page, 'naive'), '20');
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 390, `the page is ${width} px wide on a 390 px screen`);
  await page.screenshot({ path: path.join(shots, 'phone.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await context.close();
});

test('10,000 events with a crash: run and render time (measured, written down, not asserted)', async () => {
  const { page, context, errors } = await open('?view=playground&scenario=ddia&events=10000&stores=naive,offset&schedule=crash@effect:4999&predict=off');
  assert.equal(await total(page, 'naive'), '10010');
  assert.equal(await total(page, 'offset'), '10000');
  const samples = [];
  for (let i = 0; i < 5; i++) {
    await page.evaluate(() => document.getElementById('k').dispatchEvent(new Event('change')));
    samples.push(await page.evaluate(() => window.idemTiming));
  }
  const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const t = { steps: samples[0].steps, run_ms: median(samples.map((s) => s.run_ms)), render_ms: median(samples.map((s) => s.render_ms)), total_ms: median(samples.map((s) => s.total_ms)) };
  console.log(`playground timing, 10,000 events, naive and offset, crash@effect:4999 (median of 5): ${JSON.stringify(t)}`);
  assert.ok(t.steps > 20000);
  assert.deepEqual(errors, []);
  await context.close();
});
