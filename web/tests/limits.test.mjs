// Browser test of a conversation that waits for a rate limit, against a real server and the
// fake Claude CLI reporting a subscription's usage limit: the notice says when it continues and
// has a Cancel button, the sidebar marks the conversation, and Cancel (an interrupt) ends the
// wait, which the history still says after a reload.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { browserTests, currentAgent, messages, openUi, send } from './helpers.mjs';

const { server, context } = browserTests();

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

test('a rate-limited turn shows when it continues, and Cancel ends the wait', async () => {
  const s = await server({ fakeClaude: true, config: '[session]\nauto_continue = true\n' });
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'please USAGELIMIT:600');
  const waiting = messages(page, 'Notice').filter({ hasText: 'Rate limited: continuing by itself at' });
  await waiting.waitFor();
  assert.match(await waiting.innerText(), /at \d{1,2}:\d{2}/);
  const agent = await currentAgent(page);
  assert.ok((await session(s.url, agent)).waiting_for_limit, 'REST shows the wait');
  const mark = page.getByRole('complementary', { name: 'Sessions' }).getByText('rate limited', { exact: true });
  await mark.waitFor();

  await waiting.getByRole('button', { name: 'Cancel' }).click();
  const cancelled = messages(page, 'Notice').filter({ hasText: 'No longer waiting for the rate limit' });
  await cancelled.waitFor();
  assert.equal(await waiting.getByRole('button', { name: 'Cancel' }).count(), 0);
  await mark.waitFor({ state: 'detached' });
  assert.equal((await session(s.url, agent)).waiting_for_limit, null);

  await page.reload();
  await cancelled.waitFor();
  assert.equal(await messages(page, 'Notice').getByRole('button', { name: 'Cancel' }).count(), 0);
  assert.equal(await mark.count(), 0);
  assert.deepEqual(problems, []);
});
