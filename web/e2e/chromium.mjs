// Debian's Chromium, headless, as every test here launches it (no sandbox, no GPU,
// nothing fetched in the background), with a profile of its own removed after.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

/** The browser (IDEM_CHROMIUM, default /usr/bin/chromium) and a `close()` for both. */
export async function launch() {
  const profile = mkdtempSync(path.join(tmpdir(), 'idem-chromium-'));
  const browser = await chromium.launch({
    executablePath: process.env.IDEM_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
    timeout: 60000,
  });
  return {
    browser,
    async close() {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
