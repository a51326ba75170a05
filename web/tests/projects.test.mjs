// Browser tests of projects in the web UI, driven through accessible names: a new session in a
// chosen project (the server then reports that directory), the sidebar grouped by project, and
// a Claude CLI session of a project imported from the UI; a server without roots asks nothing.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { browserTests, currentAgent, openUi, reply, send } from './helpers.mjs';

const { server, context } = browserTests();

/** A project root with projects `app` and `lib`, and a Claude CLI config dir. */
const base = realpathSync(mkdtempSync(join(tmpdir(), 'agentmux-projects-')));
after(() => rmSync(base, { recursive: true, force: true }));
const root = join(base, 'root');
const app = join(root, 'app');
const lib = join(root, 'lib');
const home = join(base, 'claude-home');
for (const dir of [app, lib, home]) mkdirSync(dir, { recursive: true });
const config = `[projects]\nroots = [{ path = ${JSON.stringify(root)} }]\n[claude]\nconfig_dir = ${JSON.stringify(home)}\n`;

/**
 * A conversation as the REST API reports it.
 * @param {string} url
 * @param {string} agentId
 */
async function session(url, agentId) {
  const response = await fetch(`${url}/api/sessions/${agentId}`);
  assert.equal(response.status, 200);
  return response.json();
}

/**
 * Starts a new session in `project` (its directory) through the dialog.
 * @param {import('playwright-core').Page} page
 * @param {string} project
 */
async function newSessionIn(page, project) {
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(project);
  await dialog.getByRole('button', { name: 'Start' }).click();
  await dialog.waitFor({ state: 'hidden' });
}

test('a new session works in the chosen project, and the sidebar groups sessions by project', async () => {
  const s = await server({ config });
  const { page, problems } = await openUi(await context(), s.url);

  await newSessionIn(page, lib);
  await send(page, 'hello from lib');
  await reply(page, 'Echo: hello from lib (turn 1)');
  const inLib = await currentAgent(page);
  assert.equal((await session(s.url, inLib)).cwd, lib);

  await newSessionIn(page, app);
  await send(page, 'hello from app');
  await reply(page, 'Echo: hello from app (turn 1)');
  const inApp = await currentAgent(page);
  assert.equal((await session(s.url, inApp)).cwd, app);
  await send(page, 'still in app');
  await reply(page, 'Echo: still in app (turn 2)');

  // No project: a workspace of its own, as on a server without roots.
  await newSessionIn(page, '');
  await send(page, 'no project here');
  await reply(page, 'Echo: no project here (turn 1)');
  const own = await currentAgent(page);
  const ownCwd = (await session(s.url, own)).cwd;
  assert.ok(ownCwd.startsWith(join(s.dataDir, 'workspaces')), ownCwd);

  const group = (/** @type {string} */ name) => page.getByRole('complementary', { name: 'Sessions' }).getByRole('list', { name, exact: true });
  await group('app').getByRole('button', { name: /hello from app/ }).waitFor();
  await group('lib').getByRole('button', { name: /hello from lib/ }).waitFor();
  await group('No project').getByRole('button', { name: /no project here/ }).waitFor();
  assert.equal(await group('app').getByRole('button').count(), 1);
  // The most recently active project first.
  const order = await page.locator('.project-name').allTextContents();
  assert.deepEqual(order, ['No project', 'app', 'lib']);

  // After a reload the grouping comes from the server's own list.
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await group('lib').getByRole('button', { name: /hello from lib/ }).waitFor();
  // The dialog offers the project last used, and Cancel starts nothing.
  await page.locator(`.session[data-agent-id="${inApp}"]`).click();
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  assert.equal(await dialog.getByRole('combobox', { name: 'Project' }).inputValue(), app);
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  assert.equal(await currentAgent(page), inApp);
  assert.deepEqual(problems, []);
});

test("a project's CLI session is imported from the UI and opens with its history", async () => {
  const id = '3c9e1b2a-4a43-4a53-9d5c-3a3c7d2c1f00';
  const line = (/** @type {string} */ type, /** @type {string} */ uuid, /** @type {unknown} */ content) =>
    JSON.stringify({
      type,
      uuid,
      parentUuid: null,
      sessionId: id,
      isSidechain: false,
      timestamp: '2026-01-02T03:04:05.000Z',
      cwd: app,
      message: { role: type === 'assistant' ? 'assistant' : 'user', content },
    });
  const dir = join(home, 'projects', app.replace(/[^A-Za-z0-9]/g, '-'));
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, `${id}.jsonl`),
    [
      line('user', 'u1', 'what is in this repo'),
      line('assistant', 'a1', [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls -la' } }]),
      line('user', 'u2', [{ type: 'tool_result', tool_use_id: 't1', content: 'README.md' }]),
      line('assistant', 'a2', [{ type: 'text', text: 'Only a README so far.' }]),
    ].join('\n'),
  );
  const s = await server({ config });
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(app);
  await dialog.getByRole('button', { name: 'CLI sessions' }).click();
  const list = dialog.getByRole('region', { name: 'CLI sessions' });
  await list.getByRole('status').filter({ hasText: '1 Claude CLI session in app' }).waitFor();
  await list.getByRole('button', { name: 'Import what is in this repo' }).click();
  await dialog.waitFor({ state: 'hidden' });

  await reply(page, 'Only a README so far.');
  await page.locator('.msg.user').filter({ hasText: 'what is in this repo' }).waitFor();
  await page.locator('#messages').getByText('ls -la').first().waitFor();
  assert.equal(await currentAgent(page), id);
  const imported = await session(s.url, id);
  assert.equal(imported.cwd, app);
  assert.equal(imported.session_id, id);
  await page
    .getByRole('complementary', { name: 'Sessions' })
    .getByRole('list', { name: 'app', exact: true })
    .getByRole('button', { name: /what is in this repo/ })
    .waitFor();

  // It goes on where the CLI left off; listed again, it is opened, not imported twice.
  await send(page, 'and now?');
  await reply(page, 'Echo: and now?');
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(app);
  await dialog.getByRole('button', { name: 'CLI sessions' }).click();
  await list.getByRole('button', { name: 'Open what is in this repo' }).click();
  await dialog.waitFor({ state: 'hidden' });
  assert.equal(await currentAgent(page), id);
  assert.deepEqual(problems, []);
});

test('without project roots, New session starts one at once', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'first');
  await reply(page, 'Echo: first (turn 1)');
  const first = await currentAgent(page);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  assert.equal(await page.getByRole('dialog', { name: 'New session' }).isVisible(), false);
  await send(page, 'second');
  await reply(page, 'Echo: second (turn 1)');
  assert.notEqual(await currentAgent(page), first);
  assert.equal(await page.locator('.project-name').count(), 0);
  assert.deepEqual(problems, []);
});
