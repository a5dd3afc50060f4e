// The playground as one file (web/dist/idem-playground.html, which web/build.sh makes)
// opened from disk in Debian's Chromium: a file:// URL, no server. Chromium refuses
// fetch() and module scripts by URL from file://, so this passes only if the page, its
// WebAssembly and its lessons are all inside the file.
//
// Environment: IDEM_CHROMIUM (default /usr/bin/chromium), IDEM_SCREENSHOTS (default
// web/e2e/screenshots).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { launch } from './chromium.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const shots = process.env.IDEM_SCREENSHOTS ?? path.join(root, 'web/e2e/screenshots');
const single = path.join(root, 'web/dist/idem-playground.html');
const file = pathToFileURL(single).href;

let browser;
let chromium;

before(async () => {
  mkdirSync(shots, { recursive: true });
  assert.ok(statSync(single).isFile(), `${single}: build it with bash web/build.sh`);
  chromium = await launch();
  browser = chromium.browser;
});

after(async () => {
  await chromium?.close();
});

/** Opens the file at `query`; every request the page makes is kept in `requests`. */
async function open(query) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  const requests = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => requests.push(r.url()));
  await page.goto(`${file}${query}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 30000 });
  return { page, context, errors, requests };
}

/** The requests that are neither the file itself nor an inline data: URL. */
const elsewhere = (requests) => requests.filter((u) => !u.startsWith('data:') && u.split('?')[0] !== file);

test('the single file runs every step of every lesson from file://, fetching nothing', async () => {
  const { page, context, errors, requests } = await open('?view=lessons&lesson=ddia');
  assert.equal(await page.evaluate(() => location.protocol), 'file:');
  const names = await page.$$eval('#lesson-name option', (os) => os.map((o) => o.value));
  assert.deepEqual(names, ['ddia', 'payments', 'guarantees', 'mqtt', 'pump']);
  for (const name of names) {
    await page.selectOption('#lesson-name', name);
    const steps = await page.locator('#lesson-steps > li').count();
    assert.ok(steps > 0, `${name} has no steps`);
    for (let i = 0; i < steps; i++) {
      await page.click(`#show-${i}`);
      const seen = await page.textContent(`#observation-${i}`);
      assert.match(seen, /^observed: \S/, `${name} step ${i + 1}: ${seen}`);
    }
    assert.equal(await page.locator('#lesson-summary tbody tr').count(), steps, name);
  }
  // A prediction is graded inside the file as well: the naive total of ddia.
  await page.selectOption('#lesson-name', 'ddia');
  await page.fill('#answer-2', '110');
  await page.click('#check-2');
  assert.match(await page.textContent('#observation-2'), /right: you said 110; it is 110\./);
  await page.screenshot({ path: path.join(shots, 'single-lessons.png'), fullPage: true });
  assert.deepEqual(errors, []);
  assert.deepEqual(elsewhere(requests), []);
  await context.close();
});

test('the single file: the matrix and the playground from file://', async () => {
  const { page, context, errors, requests } = await open('?view=matrix');
  await page.click('#matrix-show');
  const cell = page.locator('#matrix tr', { hasText: 'message-id' }).locator('td[data-fault="producer-retry"] a');
  assert.equal(await cell.textContent(), 'exact 8');
  await cell.click();
  assert.equal(await page.locator('.card[data-store="message-id"] [data-field="final_total"]').textContent(), '8');
  assert.match(page.url(), /^file:.*idem-playground\.html\?view=playground&scenario=payments&stores=message-id/);
  assert.deepEqual(errors, []);
  assert.deepEqual(elsewhere(requests), []);
  await context.close();
});
