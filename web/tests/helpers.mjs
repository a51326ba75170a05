// Test support: a real `agentmux serve` with the demo agent, and headless Chromium.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { after, afterEach, before } from 'node:test';

import { chromium } from 'playwright-core';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BIN_DIR = join(process.env.CARGO_TARGET_DIR ?? join(REPO, 'target'), 'debug');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
/** How long any one expectation may take before the test fails. */
export const WAIT_MS = 15_000;

/**
 * A running server; `stop()` kills it (SIGKILL unless told otherwise) and waits for the exit.
 * With gates on, `openGate(agentId, n)` lets turn `n` of conversation `agentId` finish.
 * @typedef {{url: string, port: number, dataDir: string, stop: (signal?: NodeJS.Signals) => Promise<void>, openGate: (agentId: string, turn: number) => void}} Server
 */

/**
 * Starts `agentmux serve` on 127.0.0.1 and waits for its `listening on` line. The agent is the
 * demo agent, or with `fakeClaude` the test stand-in for the Claude CLI (built with the server),
 * which asks permission for a `Bash` tool call when a prompt contains `TOOL:<command>`.
 * `config` is more of the TOML config file (e.g. an `[auth.tokens]` table). With `gates`, each
 * demo turn waits after its first word until the test opens its gate (`demo.gate_dir`), so no
 * test depends on how long a turn takes.
 * @param {{dataDir?: string, port?: number, delayMs?: number, fakeClaude?: boolean, config?: string, gates?: boolean}} [options]
 * @returns {Promise<Server>}
 */
export async function startServer({ dataDir, port = 0, delayMs = 20, fakeClaude = false, config = '', gates = false } = {}) {
  if (!existsSync(join(BIN_DIR, 'agentmux'))) {
    throw new Error(`no server binary in ${BIN_DIR}: run \`cargo build\` first`);
  }
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'agentmux-web-'));
  const env = { ...process.env, RUST_LOG: 'agentmux=warn' };
  for (const name of ['AGENTMUX_BACKEND', 'AGENTMUX_CLAUDE_BIN', 'AGENTMUX_CONFIG']) delete env[name];
  const args = ['serve', '--bind', `127.0.0.1:${port}`, '--data-dir', dir, '--demo-delay-ms', String(delayMs)];
  if (fakeClaude) {
    const home = join(dir, 'claude-home');
    mkdirSync(home, { recursive: true });
    config = `[claude]\nconfig_dir = ${JSON.stringify(home)}\n${config}`;
    args.push('--backend', 'claude', '--claude-bin', join(BIN_DIR, 'fake-claude'));
  }
  const gateDir = join(dir, 'gates');
  if (gates) {
    mkdirSync(gateDir, { recursive: true });
    config = `${config}\n[demo]\ngate_dir = ${JSON.stringify(gateDir)}\n`;
  }
  if (config) {
    const file = join(dir, 'agentmux.toml');
    writeFileSync(file, config);
    args.push('--config', file);
  }
  const child = spawn(join(BIN_DIR, 'agentmux'), args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((done) => child.once('exit', done));
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error('the server did not print its address')), WAIT_MS);
    child.once('exit', (code) => fail(new Error(`the server exited with ${code}`)));
    lines.once('line', (line) => {
      clearTimeout(timer);
      const m = /^listening on (http:\/\/\S+)$/.exec(line);
      if (m) done(m[1]);
      else fail(new Error(`unexpected first line: ${line}`));
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    dataDir: dir,
    async stop(signal = 'SIGKILL') {
      if (child.exitCode === null) child.kill(signal);
      await exited;
    },
    openGate(agentId, turn) {
      if (!gates) throw new Error('this server has no gates');
      writeFileSync(join(gateDir, `${agentId}.${turn}`), '');
    },
  };
}

/**
 * The stored `result` frames of a conversation, from the REST API.
 * @param {string} base
 * @param {string} agentId
 * @param {Record<string, string>} [headers]
 */
export async function storedResults(base, agentId, headers = {}) {
  const response = await fetch(`${base}/api/sessions/${agentId}/messages`, { headers, signal: AbortSignal.timeout(WAIT_MS) });
  if (response.status !== 200) throw new Error(`messages of ${agentId}: ${response.status}`);
  return (await response.json()).messages.filter((/** @type {any} */ m) => m.message_type === 'result');
}

/**
 * The footer a person expects under a finished turn, from the server's stored `result` and
 * that turn's own cost: what it cost, its tokens, how long it took, the model.
 * @param {any} result a stored `result` frame
 * @param {number} cost the turn's own cost in dollars
 * @param {string} [model]
 */
export function footerText(result, cost, model = 'demo') {
  const m = result.message;
  return `Done · $${cost.toFixed(4)} · ${m.usage.input_tokens} in / ${m.usage.output_tokens} out tokens · ${(m.duration_ms / 1000).toFixed(1)} s · ${model}`;
}

/** Removes a data dir made by {@link startServer}. */
export function removeDir(dir) {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Launches headless Chromium with a fresh profile (Playwright makes a temporary user-data dir).
 * @returns {Promise<import('playwright-core').Browser>}
 */
export function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-background-networking',
      '--disable-gpu',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/**
 * Opens the UI in a new page and records what a user would notice going wrong: page errors,
 * console errors (CSP violations among them) and dialogs; and the URLs of its requests and
 * sockets. Waits until the page is connected, unless `connected` is false.
 * @param {import('playwright-core').BrowserContext} context
 * @param {string} url
 * @param {{connected?: boolean}} [options]
 */
export async function openUi(context, url, { connected = true } = {}) {
  const page = await context.newPage();
  const problems = [];
  const sockets = [];
  const requests = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    // A server without the sessions API answers 404 there, and the UI falls back to its own list.
    if (msg.type() !== 'error' || msg.location().url.endsWith('/api/sessions?limit=100')) return;
    problems.push(`console error: ${msg.text()}`);
  });
  page.on('dialog', (dialog) => {
    problems.push(`dialog: ${dialog.message()}`);
    dialog.dismiss().catch(() => {});
  });
  page.on('websocket', (ws) => sockets.push(ws.url()));
  page.on('request', (request) => requests.push(request.url()));
  page.setDefaultTimeout(WAIT_MS);
  await page.goto(url);
  if (connected) await connection(page, 'Connected').waitFor();
  return { page, problems, sockets, requests };
}

/**
 * The page's connection state (its `status` named Connection); with `text`, only while it
 * says exactly that (`Connected`, `Reconnecting…`).
 * @param {import('playwright-core').Page} page
 * @param {string} [text]
 */
export function connection(page, text) {
  const status = page.getByRole('status', { name: 'Connection', exact: true });
  return text === undefined ? status : status.filter({ hasText: new RegExp(`^${text}$`) });
}

/**
 * The open conversation: the page's `log` of messages.
 * @param {import('playwright-core').Page} page
 */
function conversation(page) {
  return page.getByRole('log', { name: 'Conversation', exact: true });
}

/**
 * The messages of the open conversation from `from`, as each is named: `You` (`You, queued`
 * while it waits), `Agent` (`Agent, writing` while streamed), `Bash tool`, `Thinking`,
 * `Permission request`, `Turn summary`, `Notice`, `Error`.
 * @param {import('playwright-core').Page} page
 * @param {string} from
 */
export function messages(page, from) {
  return conversation(page).getByRole('article', { name: from, exact: true });
}

/**
 * Types a message into the composer and sends it with Enter.
 * @param {import('playwright-core').Page} page
 * @param {string} text
 */
export async function send(page, text) {
  const box = page.getByRole('textbox', { name: 'Message', exact: true });
  await box.fill(text);
  await box.press('Enter');
}

/**
 * Each message of the open conversation, in order, as `name: text` (see {@link messages});
 * without the reply being streamed, and without the text of buttons or of what is hidden from
 * assistive technology.
 * @param {import('playwright-core').Page} page
 */
export function transcript(page) {
  return conversation(page)
    .getByRole('article')
    .evaluateAll((nodes) =>
      nodes
        .filter((n) => n.getAttribute('aria-busy') !== 'true')
        .map((n) => {
          const shown = /** @type {Element} */ (n.cloneNode(true));
          for (const hidden of shown.querySelectorAll('button, [aria-hidden="true"]')) hidden.remove();
          return `${n.getAttribute('aria-label')}: ${shown.textContent}`;
        }),
    );
}

/** The agent_id of the open conversation (from the address bar). */
export async function currentAgent(page) {
  return decodeURIComponent(new URL(page.url()).hash.slice(1));
}

/**
 * The browser of a test file and what each test starts: `server()` and `context()` are
 * stopped and closed after the test that started them, in reverse order.
 */
export function browserTests() {
  /** @type {import('playwright-core').Browser} */
  let browser;
  /** @type {(() => Promise<void> | void)[]} */
  let cleanups = [];
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser.close();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    cleanups = [];
  });
  return {
    /** @param {Parameters<typeof startServer>[0]} [options] */
    async server(options) {
      const s = await startServer(options);
      cleanups.push(async () => {
        await s.stop();
        if (!options?.dataDir) removeDir(s.dataDir);
      });
      return s;
    },
    /** @param {import('playwright-core').BrowserContextOptions} [options] */
    async context(options = {}) {
      const c = await browser.newContext(options);
      cleanups.push(() => c.close());
      return c;
    },
  };
}

/**
 * Waits for a finished assistant reply containing `text`.
 * @param {import('playwright-core').Page} page
 * @param {string} text
 */
export function reply(page, text) {
  return messages(page, 'Agent').filter({ hasText: text }).waitFor();
}
