// End-to-end tests of the web UI: headless Chromium against a real `agentmux serve` running
// the demo agent, which replies `Echo: <content> (turn N)` one word at a time.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  WAIT_MS,
  browserTests,
  currentAgent,
  footerText,
  openUi,
  reply,
  send,
  storedResults,
  transcript,
} from './helpers.mjs';

const { server, context } = browserTests();

/**
 * A conversation as `GET /api/sessions/{agentId}` reports it.
 * @param {string} base
 * @param {string} agentId
 * @param {Record<string, string>} [headers]
 */
async function session(base, agentId, headers = {}) {
  const response = await fetch(`${base}/api/sessions/${agentId}`, { headers, signal: AbortSignal.timeout(WAIT_MS) });
  assert.equal(response.status, 200);
  return response.json();
}

test('a message gets a streamed reply, then its result footer', async () => {
  const s = await server({ gates: true });
  const { page, problems, sockets } = await openUi(await context(), s.url);
  await send(page, 'hello there streaming world');
  // Deltas are rendered while the reply is still being written (it waits at its gate)...
  await page.locator('.msg.assistant.streaming').filter({ hasText: 'Echo:' }).waitFor();
  assert.equal(await page.locator('.msg.assistant:not(.streaming)').count(), 0);
  const agent = await currentAgent(page);
  s.openGate(agent, 1);
  // ...and the stored message replaces them.
  await reply(page, 'Echo: hello there streaming world (turn 1)');
  const footer = page.locator('.msg.result');
  await footer.waitFor();
  // The only turn: its own cost is the conversation's total, as the server counts it.
  const [result] = await storedResults(s.url, agent);
  const { total_cost_usd: cost } = await session(s.url, agent);
  assert.equal(await footer.locator('.result-text').textContent(), footerText(result, cost));
  const lines = await transcript(page);
  assert.deepEqual(lines.slice(0, 2), [
    'user: hello there streaming world',
    'assistant: Echo: hello there streaming world (turn 1)',
  ]);
  assert.equal(lines.length, 3);
  assert.equal(await page.locator('.session[aria-current="true"] .session-title').textContent(), 'hello there streaming world');
  assert.equal(await page.locator('#title').textContent(), 'hello there streaming world');
  assert.deepEqual(sockets, [`${s.url.replace('http', 'ws')}/ws`]);
  assert.equal(await page.locator('#sign-in').isVisible(), false, 'no sign-in without authentication');
  assert.deepEqual(problems, []);
});

test('with authentication on, the page asks for a token and keeps it for the tab', async () => {
  const token = 'tok-web-ui-0123456789abcdef';
  const s = await server({ gates: true, config: `[auth.tokens]\n"${token}" = "alice"\n` });
  const { page, problems, sockets, requests } = await openUi(await context(), s.url, { connected: false });
  const form = page.locator('#sign-in');
  const error = page.locator('#sign-in-error');
  await form.waitFor();
  assert.equal(await error.isVisible(), false);
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'connecting');

  await page.locator('#token').fill('not-the-token');
  await page.locator('#token').press('Enter');
  await error.filter({ hasText: 'That token was not accepted.' }).waitFor();
  assert.equal(await form.isVisible(), true);
  assert.equal(await page.locator('#token').inputValue(), '');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agentmux.token')), null);
  assert.deepEqual(sockets, [], 'no socket before a token is accepted');

  await page.locator('#token').fill(token);
  // Once connected, the sidebar asks the API with the token.
  const listedInPage = page.waitForResponse((r) => r.url().includes('/api/sessions?'));
  await page.locator('#sign-in button').click();
  await page.locator('#conn[data-state="open"]').waitFor();
  assert.equal((await listedInPage).status(), 200);
  assert.equal(await form.isVisible(), false);
  const agent = await currentAgent(page);
  s.openGate(agent, 2);
  await send(page, 'hello with a token');
  await page.locator('.msg.assistant.streaming').filter({ hasText: 'Echo:' }).waitFor();
  s.openGate(agent, 1);
  await reply(page, 'Echo: hello with a token (turn 1)');
  await page.locator('.msg.result').waitFor();
  // The conversation is alice's: the API lists it for her token.
  const listed = await fetch(`${s.url}/api/sessions`, { headers: { authorization: `Bearer ${token}` } });
  assert.deepEqual((await listed.json()).sessions.map((x) => x.agent_id), [agent]);

  // A reload in the same tab signs in with the kept token.
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await reply(page, 'Echo: hello with a token (turn 1)');
  assert.equal(await form.isVisible(), false);
  await send(page, 'and after a reload');
  await reply(page, 'Echo: and after a reload (turn 2)');

  // A kept token the server no longer accepts is dropped, and the form says so.
  await page.evaluate(() => sessionStorage.setItem('agentmux.token', 'revoked-token'));
  await page.reload();
  await error.filter({ hasText: 'That token was not accepted.' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agentmux.token')), null);

  const wsUrl = `${s.url.replace('http', 'ws')}/ws?ticket=`;
  assert.equal(sockets.length, 2);
  for (const socket of sockets) assert.ok(socket.startsWith(wsUrl), socket);
  assert.deepEqual(
    [...sockets, ...requests].filter((u) => [token, 'not-the-token', 'revoked-token'].some((t) => u.includes(t))),
    [],
    'the token is never in a URL',
  );
  // Chromium logs every 401 answer; those are expected here.
  assert.deepEqual(
    problems.filter((p) => !p.includes('status of 401 (Unauthorized)')),
    [],
  );
});

test('switching between three sessions uses the one socket', async () => {
  const s = await server();
  const writer = await openUi(await context(), s.url);
  const agents = [];
  for (const n of [1, 2, 3]) {
    if (n > 1) await writer.page.locator('#new-session').click();
    await send(writer.page, `topic number ${n}`);
    await reply(writer.page, `Echo: topic number ${n} (turn 1)`);
    agents.push(await currentAgent(writer.page));
  }
  assert.equal(new Set(agents).size, 3);

  // A fresh browser opens each conversation for the first time: its history comes from the store.
  const reader = await openUi(await context(), `${s.url}/#${agents[0]}`);
  for (const [i, agent] of agents.entries()) {
    if (i > 0) await reader.page.evaluate((id) => (location.hash = id), agent);
    await reply(reader.page, `Echo: topic number ${i + 1} (turn 1)`);
    const lines = await transcript(reader.page);
    assert.equal(lines[0], `user: topic number ${i + 1}`);
    assert.equal(lines.length, 3);
  }
  // Back to the first one through the sidebar; then a new turn there.
  await reader.page.locator(`.session[data-agent-id="${agents[0]}"]`).click();
  await reply(reader.page, 'Echo: topic number 1 (turn 1)');
  await send(reader.page, 'one more');
  await reply(reader.page, 'Echo: one more (turn 2)');
  assert.equal((await transcript(reader.page)).length, 6);
  // Switching in the writer, which has all three open already.
  for (const [i, agent] of agents.entries()) {
    await writer.page.locator(`.session[data-agent-id="${agent}"]`).click();
    await reply(writer.page, `Echo: topic number ${i + 1} (turn 1)`);
  }
  await reply(writer.page, 'Echo: topic number 3 (turn 1)');
  assert.equal(reader.sockets.length, 1, 'the reader opened exactly one WebSocket');
  assert.equal(writer.sockets.length, 1, 'the writer opened exactly one WebSocket');
  assert.deepEqual([...reader.problems, ...writer.problems], []);
});

test('a reload shows the history', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'first');
  await reply(page, 'Echo: first (turn 1)');
  await send(page, 'second');
  await reply(page, 'Echo: second (turn 2)');
  await page.locator('.msg.result').nth(1).waitFor();
  const before = await transcript(page);
  const agent = await currentAgent(page);
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await page.locator('.msg.result').nth(1).waitFor();
  assert.equal(await currentAgent(page), agent);
  assert.deepEqual(await transcript(page), before);
  assert.equal(await page.locator('.session-title').first().textContent(), 'first');
  assert.deepEqual(problems, []);
});

test('a rewind made elsewhere removes the dropped turns from the open page', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'first');
  await reply(page, 'Echo: first (turn 1)');
  await send(page, 'second');
  await reply(page, 'Echo: second (turn 2)');
  await page.locator('.msg.result').nth(1).waitFor();
  const toSeq = Number(await page.locator('.msg.result').first().getAttribute('data-seq'));
  const agent = await currentAgent(page);
  // The first turn of its agent process: its own cost is the running total it reports.
  const [first] = await storedResults(s.url, agent);
  const response = await fetch(`${s.url}/api/sessions/${agent}/rewind`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to_seq: toSeq }),
  });
  assert.equal(response.status, 200);
  await page.locator('.msg.notice').filter({ hasText: 'Rewound to an earlier turn' }).waitFor();
  const live = await transcript(page);
  assert.deepEqual(live, [
    'user: first',
    'assistant: Echo: first (turn 1)',
    `result: ${footerText(first, first.message.total_cost_usd)}`,
    'notice: Rewound to an earlier turn',
  ]);
  await page.reload();
  await page.locator('.msg.notice').waitFor();
  assert.deepEqual(await transcript(page), live);
  await send(page, 'third');
  await reply(page, 'Echo: third (turn 2)');
  assert.deepEqual(problems, []);
});

test('a rewind also removes the prompts of later turns that were queued before its point', async () => {
  const s = await server({ fakeClaude: true });
  const { page, problems } = await openUi(await context(), s.url);
  // Turn 1 waits for the permission answer while turns 2 and 3 are queued behind it.
  await send(page, 'please run TOOL:ls_it');
  const asked = page.locator('.msg.permission').first();
  await asked.filter({ hasText: 'Allow Bash?' }).waitFor();
  await send(page, 'second');
  await send(page, 'third');
  await page.locator('.msg.user').nth(2).waitFor();
  await asked.locator('button.allow').click();
  await page.locator('.msg.result').nth(2).waitFor();
  const toSeq = Number(await page.locator('.msg.result').first().getAttribute('data-seq'));
  const agent = await currentAgent(page);
  const response = await fetch(`${s.url}/api/sessions/${agent}/rewind`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to_seq: toSeq }),
  });
  assert.equal(response.status, 200);
  await page.locator('.msg.notice').filter({ hasText: 'Rewound to an earlier turn' }).waitFor();
  const prompts = async () => (await transcript(page)).filter((l) => l.startsWith('user: '));
  assert.deepEqual(await prompts(), ['user: please run TOOL:ls_it']);
  const live = await transcript(page);
  await page.reload();
  await page.locator('.msg.notice').waitFor();
  assert.deepEqual(await transcript(page), live);
  assert.deepEqual(problems, []);
});

test('after a server restart the page reconnects and catches up, with no duplicates', async () => {
  const first = await server();
  const a = await openUi(await context(), first.url);
  await send(a.page, 'before the restart');
  await reply(a.page, 'Echo: before the restart (turn 1)');
  await a.page.locator('.msg.result').waitFor();
  const agent = await currentAgent(a.page);

  await first.stop('SIGKILL');
  await a.page.locator('#conn[data-state="reconnecting"]').waitFor();
  // Same data dir, same port: the page's reconnects land on the new process.
  await server({ dataDir: first.dataDir, port: first.port });
  // Another tab adds a turn; the first page gets it by catching up or live.
  const b = await openUi(await context(), `${first.url}/#${agent}`);
  await reply(b.page, 'Echo: before the restart (turn 1)');
  await send(b.page, 'after the restart');
  await reply(b.page, 'Echo: after the restart (turn 2)');
  await b.page.locator('.msg.result').nth(1).waitFor();

  await a.page.locator('#conn[data-state="open"]').waitFor();
  await reply(a.page, 'Echo: after the restart (turn 2)');
  await a.page.locator('.msg.result').nth(1).waitFor();
  const lines = await transcript(a.page);
  assert.deepEqual(lines, await transcript(b.page));
  // Each turn is the first of its agent process: its own cost is the running total it reports.
  const [before, afterwards] = await storedResults(first.url, agent);
  assert.deepEqual(lines, [
    'user: before the restart',
    'assistant: Echo: before the restart (turn 1)',
    `result: ${footerText(before, before.message.total_cost_usd)}`,
    'user: after the restart',
    'assistant: Echo: after the restart (turn 2)',
    `result: ${footerText(afterwards, afterwards.message.total_cost_usd)}`,
  ]);
  assert.ok(a.sockets.length >= 2, 'the page opened a new socket');
  // The restart itself is logged by Chromium as failed connection attempts; nothing else.
  assert.deepEqual(
    a.problems.filter((p) => !p.includes('WebSocket connection')),
    [],
  );
});

test('two tabs on one session stay in sync, streaming included', async () => {
  const s = await server({ gates: true });
  const ctx = await context();
  const a = await openUi(ctx, s.url);
  s.openGate(await currentAgent(a.page), 1);
  await send(a.page, 'opening line');
  await reply(a.page, 'Echo: opening line (turn 1)');
  const agent = await currentAgent(a.page);
  const b = await openUi(ctx, `${s.url}/#${agent}`);
  await reply(b.page, 'Echo: opening line (turn 1)');

  // Each reply waits at its gate until the other tab has seen it streaming.
  await send(b.page, 'tab b speaks with several words');
  await a.page.locator('.msg.user').filter({ hasText: 'tab b speaks' }).waitFor();
  await a.page.locator('.msg.assistant.streaming').filter({ hasText: 'Echo:' }).waitFor();
  s.openGate(agent, 2);
  await reply(a.page, 'Echo: tab b speaks with several words (turn 2)');

  await send(a.page, 'tab a answers with several words');
  await b.page.locator('.msg.assistant.streaming').filter({ hasText: 'Echo:' }).waitFor();
  s.openGate(agent, 3);
  await reply(b.page, 'Echo: tab a answers with several words (turn 3)');

  await a.page.locator('.msg.result').nth(2).waitFor();
  await b.page.locator('.msg.result').nth(2).waitFor();
  assert.deepEqual(await transcript(a.page), await transcript(b.page));
  assert.equal((await transcript(a.page)).length, 9);
  assert.deepEqual([...a.problems, ...b.problems], []);
});

test('Stop and Esc interrupt a long reply; a message sent meanwhile waits in the queue', async () => {
  // Turns 1 and 3 wait at gates that never open: only Stop or Esc ends them.
  const s = await server({ gates: true });
  const { page, problems } = await openUi(await context(), s.url);
  s.openGate(await currentAgent(page), 2);
  const long = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ');
  await send(page, long);
  await page.locator('.msg.assistant.streaming').filter({ hasText: 'Echo:' }).waitFor();
  await send(page, 'queued behind it');
  await page.locator('.msg.user.queued').filter({ hasText: 'queued behind it' }).waitFor();
  await page.locator('#stop').click();
  await page.locator('.msg.result').filter({ hasText: 'Interrupted' }).waitFor();
  const cut = await page.locator('.msg.assistant').first().textContent();
  assert.ok(cut.startsWith('Echo:'), cut);
  assert.ok(!cut.includes('(turn 1)'), `the reply was cut short: ${cut}`);

  // The queued message runs next; Esc stops it too.
  await page.locator('.msg.user.queued').waitFor({ state: 'detached' });
  await send(page, `${long} again`);
  await page.locator('.msg.user').nth(2).waitFor();
  await page.locator('.msg.result').nth(1).waitFor();
  await page.locator('.msg.assistant.streaming').filter({ hasText: 'Echo:' }).waitFor();
  await page.locator('#input').press('Escape');
  await page.locator('.msg.result').nth(2).filter({ hasText: 'Interrupted' }).waitFor();
  await page.locator('#stop').waitFor({ state: 'hidden' });
  assert.deepEqual(problems, []);
});

test('HTML in a reply is shown as text', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  const evil = '<img src=x onerror=alert(1)> [link](javascript:alert(2)) **bold**';
  await send(page, evil);
  await reply(page, 'Echo: <img src=x onerror=alert(1)>');
  const bubble = page.locator('.msg.assistant .bubble');
  assert.equal(await bubble.textContent(), 'Echo: <img src=x onerror=alert(1)> [link](javascript:alert(2)) bold (turn 1)');
  assert.equal(await bubble.locator('strong').textContent(), 'bold');
  assert.equal(await page.locator('img').count(), 0);
  assert.equal(await page.locator('a').count(), 0);
  assert.equal(await page.locator('.session-title').first().textContent(), evil.slice(0, 50));
  assert.deepEqual(problems, []);
});

test('tool calls show collapsed with their results; permission requests are answered in the page', async () => {
  const s = await server({ fakeClaude: true });
  const { page, problems } = await openUi(await context(), s.url);

  await send(page, 'please run TOOL:ls_it');
  const asked = page.locator('.msg.permission').first();
  await asked.filter({ hasText: 'Allow Bash?' }).waitFor();
  assert.match(await asked.locator('pre').textContent(), /"command": "ls_it"/);
  await asked.locator('button.allow').click();
  await asked.locator('.permission-outcome').filter({ hasText: 'Allowed' }).waitFor();
  await page.locator('.msg.result').waitFor();
  const tool = page.locator('details.msg.tool').first();
  assert.equal(await tool.locator('summary').textContent(), 'Bash: ls_it');
  assert.equal(await tool.evaluate((d) => /** @type {HTMLDetailsElement} */ (d).open), false);
  assert.equal(await tool.locator('.tool-output').isVisible(), false);
  await tool.locator('summary').click();
  assert.equal(await tool.locator('.tool-output').textContent(), 'ran: ls_it');
  assert.match(await tool.locator('.tool-input').textContent(), /"command": "ls_it"/);

  await send(page, 'please run TOOL:rm_it');
  const second = page.locator('.msg.permission').nth(1);
  await second.locator('button.deny').click();
  await second.locator('.permission-outcome').filter({ hasText: 'Denied' }).waitFor();
  await page.locator('.msg.result').nth(1).waitFor();
  const denied = page.locator('details.msg.tool').nth(1);
  assert.match(await denied.locator('.tool-output').textContent(), /^The user denied this tool use\./);

  // After a reload the answered requests come back from the store, without buttons.
  await page.reload();
  await page.locator('.msg.result').nth(1).waitFor();
  assert.equal(await page.locator('.msg.permission .permission-outcome').count(), 2);
  assert.equal(await page.locator('.msg.permission button').count(), 0);
  assert.deepEqual(problems, []);
});

test('the sidebar lists the sessions the server reports', async () => {
  const s = await server();
  const ctx = await context();
  const hoursAgo = (h) => new Date(Date.now() - h * 3_600_000).toISOString();
  // The shape of `GET /api/sessions`, served here by the test so the UI's use of it is checked
  // whether or not this server has the endpoint.
  await ctx.route('**/api/sessions?*', (route) =>
    route.fulfill({
      json: {
        sessions: [
          { agent_id: 'srv-1', session_id: 'u1', title: 'From the <b>server</b>', status: 'idle', live: true,
            message_count: 4, last_seq: 4, created_at: hoursAgo(5), last_active_at: hoursAgo(2), total_cost_usd: 0.01 },
          { agent_id: 'srv-2', session_id: 'u2', title: null, status: 'idle', live: false,
            message_count: 0, last_seq: 0, created_at: hoursAgo(72), last_active_at: hoursAgo(72), total_cost_usd: 0 },
        ],
        total: 2,
      },
    }),
  );
  const { page, problems } = await openUi(ctx, `${s.url}/#srv-1`);
  const first = page.locator('.session[data-agent-id="srv-1"]');
  await first.waitFor();
  assert.equal(await first.locator('.session-title').textContent(), 'From the <b>server</b>');
  assert.equal(await first.locator('.badge').textContent(), 'live');
  assert.equal(await first.locator('.session-age').textContent(), '2 h');
  assert.equal(await first.getAttribute('aria-current'), 'true');
  assert.equal(await page.locator('#title').textContent(), 'From the <b>server</b>');
  const second = page.locator('.session[data-agent-id="srv-2"]');
  assert.equal(await second.locator('.session-title').textContent(), 'New session');
  assert.equal(await second.locator('.badge').textContent(), 'idle');
  assert.equal(await second.locator('.session-age').textContent(), '3 d');
  assert.equal(await page.locator('#sidebar b').count(), 0);
  assert.deepEqual(problems, []);
});

test('without the sessions API the sidebar lists the sessions of this browser', async () => {
  const s = await server();
  const ctx = await context();
  await ctx.route('**/api/sessions?*', (route) => route.fulfill({ status: 404, body: 'not here' }));
  const { page, problems } = await openUi(ctx, s.url);
  await send(page, 'kept locally');
  await reply(page, 'Echo: kept locally (turn 1)');
  await page.locator('#new-session').click();
  await send(page, 'also kept');
  await reply(page, 'Echo: also kept (turn 1)');
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await reply(page, 'Echo: also kept (turn 1)');
  assert.deepEqual(await page.locator('.session-title').allTextContents(), ['also kept', 'kept locally']);
  await page.locator('.session').nth(1).click();
  await reply(page, 'Echo: kept locally (turn 1)');
  assert.deepEqual(problems, []);
});

test('the UI is served with its content types and a strict CSP', async () => {
  const s = await server();
  const index = await fetch(`${s.url}/`);
  assert.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
  const csp = index.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self';/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  for (const [name, type] of [
    ['app.js', 'text/javascript; charset=utf-8'],
    ['client.js', 'text/javascript; charset=utf-8'],
    ['app.css', 'text/css; charset=utf-8'],
  ]) {
    const asset = await fetch(`${s.url}/assets/${name}`);
    assert.equal(asset.status, 200);
    assert.equal(asset.headers.get('content-type'), type);
  }
  assert.equal((await fetch(`${s.url}/assets/nope.js`)).status, 404);
});

test('phone width: the sidebar slides in and out', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context({ viewport: { width: 390, height: 760 } }), s.url);
  await send(page, 'small screen');
  await reply(page, 'Echo: small screen (turn 1)');
  // The closed drawer is out of sight and out of the tab order.
  assert.equal(await page.locator('#new-session').isVisible(), false);
  const sidebarBox = async () => (await page.locator('#sidebar').boundingBox())?.x ?? 0;
  await page.waitForFunction(() => (document.getElementById('sidebar')?.getBoundingClientRect().right ?? 1) <= 0);
  await page.locator('#toggle-sidebar').click();
  await page.waitForFunction(() => document.getElementById('sidebar')?.getBoundingClientRect().left === 0);
  assert.equal(await sidebarBox(), 0);
  // A tap beside it closes it, and does not reach what is underneath.
  await page.mouse.click(370, 400);
  await page.waitForFunction(() => (document.getElementById('sidebar')?.getBoundingClientRect().right ?? 1) <= 0);
  await page.locator('#toggle-sidebar').click();
  await page.waitForFunction(() => document.getElementById('sidebar')?.getBoundingClientRect().left === 0);
  await page.locator('#new-session').click();
  await page.waitForFunction(() => (document.getElementById('sidebar')?.getBoundingClientRect().right ?? 1) <= 0);
  assert.equal(await page.locator('#input').isVisible(), true);
  assert.equal(await page.locator('.session').count(), 2);
  assert.deepEqual(problems, []);
});
