// Browser tests of agents in the web UI: with more than one agent configured, "New session" asks
// which one runs the conversation, the first message carries it, and the sidebar shows it; with
// one agent, nothing is asked.

import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { REPO, browserTests, currentAgent, openUi, reply, send } from './helpers.mjs';

const { server, context } = browserTests();

/** A second agent besides the built-in demo one. */
const config = '[agents.helper]\nkind = "demo"\n';

test('a new session runs the agent picked for it, and the sidebar says which', async () => {
  const s = await server({ config });
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  const picker = dialog.getByRole('combobox', { name: 'Agent' });
  await picker.waitFor();
  assert.deepEqual(await picker.locator('option').allTextContents(), ['demo (demo)', 'helper (demo)']);
  assert.equal(await dialog.getByRole('combobox', { name: 'Project' }).count(), 0, 'no roots: no project to pick');
  await picker.selectOption('helper');
  await dialog.getByRole('button', { name: 'Start' }).click();
  await dialog.waitFor({ state: 'hidden' });
  await send(page, 'who runs this');
  await reply(page, 'Echo: who runs this (turn 1)');
  const agentId = await currentAgent(page);
  const response = await fetch(`${s.url}/api/sessions/${agentId}`);
  assert.equal((await response.json()).backend, 'helper');
  await page.locator(`#sessions [data-agent-id="${agentId}"] .session-agent`).getByText('helper').waitFor();
  assert.deepEqual(problems, []);
});

test('with a single agent, "New session" asks nothing', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  await send(page, 'just go');
  await reply(page, 'Echo: just go (turn 1)');
  assert.equal(await page.getByRole('dialog', { name: 'New session' }).count(), 0);
  assert.deepEqual(problems, []);
});

test("an ACP agent's own permission modes are offered once it has said them, and the one picked is used", async () => {
  const fakeAcp = join(REPO, 'target', 'debug', 'fake-acp');
  const state = mkdtempSync(join(tmpdir(), 'acp-state-'));
  const config = `[agents.gem]\nkind = "acp"\ncommand = [${JSON.stringify(fakeAcp)}, "--state", ${JSON.stringify(state)}, "--modes", "gemini"]\n`;
  const s = await server({ config });
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  await dialog.getByRole('combobox', { name: 'Agent' }).selectOption('gem');
  await dialog.getByRole('button', { name: 'Start' }).click();
  await dialog.waitFor({ state: 'hidden' });
  await send(page, 'first');
  await reply(page, 'Echo: first (history 1)');
  const modes = page.getByRole('combobox', { name: 'Permission mode' });
  const offered = async () => (await modes.locator('option').allTextContents()).join(',');
  const deadline = Date.now() + 10_000;
  // Not `yolo`: it runs tools without asking, which this server does not allow.
  while ((await offered()) !== 'Default permissions,default,autoEdit,plan') {
    assert.ok(Date.now() < deadline, `the agent's modes, not: ${await offered()}`);
    await new Promise((done) => setTimeout(done, 100));
  }
  await modes.selectOption('plan');
  await send(page, 'second');
  await reply(page, 'Echo: second (history 2)');
  const agentId = await currentAgent(page);
  const response = await fetch(`${s.url}/api/sessions/${agentId}`);
  assert.equal((await response.json()).permission_mode, 'plan');
  assert.deepEqual(problems, []);
});
