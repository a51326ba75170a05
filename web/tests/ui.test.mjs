// End-to-end tests of the web UI: headless Chromium against a real `agentmux serve` running
// the demo agent, which replies `Echo: <content> (turn N)` one word at a time. The page is
// read as a person (or a screen reader) would: by role and accessible name.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  WAIT_MS,
  browserTests,
  connection,
  currentAgent,
  footerText,
  messages,
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

/**
 * The sidebar (its `complementary` region named Sessions).
 * @param {import('playwright-core').Page} page
 * @param {{includeHidden?: boolean}} [options]
 */
function sidebar(page, options = {}) {
  return page.getByRole('complementary', { name: 'Sessions', exact: true, ...options });
}

/**
 * The sidebar's entry of the conversation titled `title`: a button named by its title, then
 * its badge and age.
 * @param {import('playwright-core').Page} page
 * @param {string} title
 */
function entry(page, title) {
  const escaped = title.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return sidebar(page).getByRole('listitem').getByRole('button', { name: new RegExp(`^${escaped} `) });
}

/**
 * A named button of the page.
 * @param {import('playwright-core').Page | import('playwright-core').Locator} scope
 * @param {string} name
 */
function button(scope, name) {
  return scope.getByRole('button', { name, exact: true });
}

/**
 * Asks the server to rewind `agentId` to the end of its first turn, as another client would.
 * @param {string} base
 * @param {string} agentId
 */
async function rewindToFirstTurn(base, agentId) {
  const [first] = await storedResults(base, agentId);
  const response = await fetch(`${base}/api/sessions/${agentId}/rewind`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to_seq: first.seq }),
  });
  assert.equal(response.status, 200);
  return first;
}

test('a message gets a streamed reply, then its result footer', async () => {
  const s = await server({ gates: true });
  const { page, problems, sockets } = await openUi(await context(), s.url);
  await send(page, 'hello there streaming world');
  // Deltas are shown while the reply is still being written (it waits at its gate)...
  await messages(page, 'Agent, writing').filter({ hasText: 'Echo:' }).waitFor();
  assert.equal(await messages(page, 'Agent').count(), 0);
  const agent = await currentAgent(page);
  s.openGate(agent, 1);
  // ...and the stored message replaces them.
  await reply(page, 'Echo: hello there streaming world (turn 1)');
  const footer = messages(page, 'Turn summary');
  await footer.waitFor();
  assert.equal(await messages(page, 'Agent, writing').count(), 0);
  // The only turn: its own cost is the conversation's total, as the server counts it.
  const [result] = await storedResults(s.url, agent);
  const { total_cost_usd: cost } = await session(s.url, agent);
  assert.deepEqual(await transcript(page), [
    'You: hello there streaming world',
    'Agent: Echo: hello there streaming world (turn 1)',
    `Turn summary: ${footerText(result, cost)}`,
  ]);
  await button(footer, 'Rewind to here').waitFor();
  await button(footer, 'Fork from here').waitFor();
  assert.equal(await entry(page, 'hello there streaming world').getAttribute('aria-current'), 'true');
  assert.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'hello there streaming world');
  assert.deepEqual(sockets, [`${s.url.replace('http', 'ws')}/ws`]);
  assert.equal(await page.getByRole('form', { name: 'Sign in' }).isVisible(), false, 'no sign-in without authentication');
  assert.deepEqual(problems, []);
});

test('with authentication on, the page asks for a token and keeps it for the tab', async () => {
  const token = 'tok-web-ui-0123456789abcdef';
  const s = await server({ gates: true, config: `[auth.tokens]\n"${token}" = "alice"\n` });
  const { page, problems, sockets, requests } = await openUi(await context(), s.url, { connected: false });
  const form = page.getByRole('form', { name: 'Sign in' });
  const field = form.getByLabel('This server asks for an API token.');
  const error = form.getByRole('alert');
  await form.waitFor();
  assert.equal(await error.isVisible(), false);
  assert.equal(await connection(page).textContent(), 'Connecting…');

  await field.fill('not-the-token');
  await field.press('Enter');
  await error.filter({ hasText: 'That token was not accepted.' }).waitFor();
  assert.equal(await form.isVisible(), true);
  assert.equal(await field.inputValue(), '');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agentmux.token')), null);
  assert.deepEqual(sockets, [], 'no socket before a token is accepted');

  await field.fill(token);
  // Once connected, the sidebar asks the API with the token.
  const listedInPage = page.waitForResponse((r) => r.url().includes('/api/sessions?'));
  await button(form, 'Sign in').click();
  await connection(page, 'Connected').waitFor();
  assert.equal((await listedInPage).status(), 200);
  assert.equal(await form.isVisible(), false);
  const agent = await currentAgent(page);
  s.openGate(agent, 2);
  await send(page, 'hello with a token');
  await messages(page, 'Agent, writing').filter({ hasText: 'Echo:' }).waitFor();
  s.openGate(agent, 1);
  await reply(page, 'Echo: hello with a token (turn 1)');
  await messages(page, 'Turn summary').waitFor();
  // The conversation is alice's: the API lists it for her token.
  const listed = await fetch(`${s.url}/api/sessions`, { headers: { authorization: `Bearer ${token}` } });
  assert.deepEqual((await listed.json()).sessions.map((x) => x.agent_id), [agent]);

  // A reload in the same tab signs in with the kept token.
  await page.reload();
  await connection(page, 'Connected').waitFor();
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
    if (n > 1) await button(writer.page, 'New session').click();
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
    assert.equal(lines[0], `You: topic number ${i + 1}`);
    assert.equal(lines.length, 3);
  }
  // Back to the first one through the sidebar; then a new turn there.
  await entry(reader.page, 'topic number 1').click();
  await reply(reader.page, 'Echo: topic number 1 (turn 1)');
  await send(reader.page, 'one more');
  await reply(reader.page, 'Echo: one more (turn 2)');
  assert.equal((await transcript(reader.page)).length, 6);
  // Switching in the writer, which has all three open already.
  for (const n of [1, 2, 3]) {
    await entry(writer.page, `topic number ${n}`).click();
    await reply(writer.page, `Echo: topic number ${n} (turn 1)`);
    assert.equal(await currentAgent(writer.page), agents[n - 1]);
  }
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
  await messages(page, 'Turn summary').nth(1).waitFor();
  const before = await transcript(page);
  const agent = await currentAgent(page);
  await page.reload();
  await connection(page, 'Connected').waitFor();
  await messages(page, 'Turn summary').nth(1).waitFor();
  assert.equal(await currentAgent(page), agent);
  assert.deepEqual(await transcript(page), before);
  await entry(page, 'first').waitFor();
  assert.deepEqual(problems, []);
});

test('a rewind made elsewhere removes the dropped turns from the open page', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'first');
  await reply(page, 'Echo: first (turn 1)');
  await send(page, 'second');
  await reply(page, 'Echo: second (turn 2)');
  await messages(page, 'Turn summary').nth(1).waitFor();
  // The first turn of its agent process: its own cost is the running total it reports.
  const first = await rewindToFirstTurn(s.url, await currentAgent(page));
  await messages(page, 'Notice').filter({ hasText: 'Rewound to an earlier turn' }).waitFor();
  const live = await transcript(page);
  assert.deepEqual(live, [
    'You: first',
    'Agent: Echo: first (turn 1)',
    `Turn summary: ${footerText(first, first.message.total_cost_usd)}`,
    'Notice: Rewound to an earlier turn',
  ]);
  await page.reload();
  await messages(page, 'Notice').waitFor();
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
  const asked = messages(page, 'Permission request').filter({ hasText: 'Allow Bash?' });
  await asked.waitFor();
  await send(page, 'second');
  await send(page, 'third');
  await messages(page, 'You, queued').nth(1).waitFor();
  await button(asked, 'Allow').click();
  await messages(page, 'Turn summary').nth(2).waitFor();
  await rewindToFirstTurn(s.url, await currentAgent(page));
  await messages(page, 'Notice').filter({ hasText: 'Rewound to an earlier turn' }).waitFor();
  const prompts = async () => (await transcript(page)).filter((l) => l.startsWith('You'));
  assert.deepEqual(await prompts(), ['You: please run TOOL:ls_it']);
  const live = await transcript(page);
  await page.reload();
  await messages(page, 'Notice').waitFor();
  assert.deepEqual(await transcript(page), live);
  assert.deepEqual(problems, []);
});

test('after a server restart the page reconnects and catches up, with no duplicates', async () => {
  const first = await server();
  const a = await openUi(await context(), first.url);
  await send(a.page, 'before the restart');
  await reply(a.page, 'Echo: before the restart (turn 1)');
  await messages(a.page, 'Turn summary').waitFor();
  const agent = await currentAgent(a.page);

  await first.stop('SIGKILL');
  await connection(a.page, 'Reconnecting…').waitFor();
  // Same data dir, same port: the page's reconnects land on the new process.
  await server({ dataDir: first.dataDir, port: first.port });
  // Another tab adds a turn; the first page gets it by catching up or live.
  const b = await openUi(await context(), `${first.url}/#${agent}`);
  await reply(b.page, 'Echo: before the restart (turn 1)');
  await send(b.page, 'after the restart');
  await reply(b.page, 'Echo: after the restart (turn 2)');
  await messages(b.page, 'Turn summary').nth(1).waitFor();

  await connection(a.page, 'Connected').waitFor();
  await reply(a.page, 'Echo: after the restart (turn 2)');
  await messages(a.page, 'Turn summary').nth(1).waitFor();
  const lines = await transcript(a.page);
  assert.deepEqual(lines, await transcript(b.page));
  // Each turn is the first of its agent process: its own cost is the running total it reports.
  const [before, afterwards] = await storedResults(first.url, agent);
  assert.deepEqual(lines, [
    'You: before the restart',
    'Agent: Echo: before the restart (turn 1)',
    `Turn summary: ${footerText(before, before.message.total_cost_usd)}`,
    'You: after the restart',
    'Agent: Echo: after the restart (turn 2)',
    `Turn summary: ${footerText(afterwards, afterwards.message.total_cost_usd)}`,
  ]);
  assert.ok(a.sockets.length >= 2, 'the page opened a new socket');
  // The restart itself is logged by Chromium as failed connection attempts (the socket's, and
  // a request the page made as the server went down); nothing else.
  assert.deepEqual(
    a.problems.filter((p) => !p.includes('WebSocket connection') && !p.includes('net::ERR_CONNECTION_REFUSED')),
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
  await messages(a.page, 'You').filter({ hasText: 'tab b speaks' }).waitFor();
  await messages(a.page, 'Agent, writing').filter({ hasText: 'Echo:' }).waitFor();
  s.openGate(agent, 2);
  await reply(a.page, 'Echo: tab b speaks with several words (turn 2)');

  await send(a.page, 'tab a answers with several words');
  await messages(b.page, 'Agent, writing').filter({ hasText: 'Echo:' }).waitFor();
  s.openGate(agent, 3);
  await reply(b.page, 'Echo: tab a answers with several words (turn 3)');

  await messages(a.page, 'Turn summary').nth(2).waitFor();
  await messages(b.page, 'Turn summary').nth(2).waitFor();
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
  await messages(page, 'Agent, writing').filter({ hasText: 'Echo:' }).waitFor();
  await send(page, 'queued behind it');
  const queued = messages(page, 'You, queued').filter({ hasText: 'queued behind it' });
  await queued.getByText('queued', { exact: true }).waitFor();
  await button(page, 'Stop').click();
  await messages(page, 'Turn summary').filter({ hasText: 'Interrupted' }).waitFor();
  const cut = await messages(page, 'Agent').first().textContent();
  assert.ok(cut.startsWith('Echo:'), cut);
  assert.ok(!cut.includes('(turn 1)'), `the reply was cut short: ${cut}`);

  // The queued message runs next; Esc stops it too.
  await queued.waitFor({ state: 'detached' });
  await messages(page, 'You').filter({ hasText: 'queued behind it' }).waitFor();
  await send(page, `${long} again`);
  await messages(page, 'You').nth(2).waitFor();
  await messages(page, 'Turn summary').nth(1).waitFor();
  await messages(page, 'Agent, writing').filter({ hasText: 'Echo:' }).waitFor();
  await page.getByRole('textbox', { name: 'Message', exact: true }).press('Escape');
  await messages(page, 'Turn summary').nth(2).filter({ hasText: 'Interrupted' }).waitFor();
  await button(page, 'Stop').waitFor({ state: 'hidden' });
  assert.deepEqual(problems, []);
});

test('HTML in a reply is shown as text', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  const evil = '<img src=x onerror=alert(1)> [link](javascript:alert(2)) **bold**';
  await send(page, evil);
  await reply(page, 'Echo: <img src=x onerror=alert(1)>');
  const said = messages(page, 'Agent');
  assert.equal(await said.textContent(), 'Echo: <img src=x onerror=alert(1)> [link](javascript:alert(2)) bold (turn 1)');
  assert.equal(await said.getByRole('strong').textContent(), 'bold');
  // Any element, not only what has a role: an `<img alt="">` or an `<a>` without `href` has none.
  assert.equal(await page.locator('img').count(), 0);
  assert.equal(await page.locator('a').count(), 0);
  await entry(page, evil.slice(0, 50)).waitFor();
  assert.deepEqual(problems, []);
});

test('tool calls show collapsed with their results; permission requests are answered in the page', async () => {
  const s = await server({ fakeClaude: true });
  const { page, problems } = await openUi(await context(), s.url);

  await send(page, 'please run TOOL:ls_it');
  const asked = messages(page, 'Permission request').first();
  await asked.getByText('Allow Bash?', { exact: true }).waitFor();
  await asked.getByText('ls_it', { exact: true }).waitFor();
  await button(asked, 'Allow').click();
  await asked.getByText('Allowed', { exact: true }).waitFor();
  await messages(page, 'Turn summary').waitFor();
  // A call that asked shows open, its decision then its output; it folds like any other.
  const tool = messages(page, 'Bash tool').first();
  const call = tool.getByText('Bash: ls_it', { exact: true });
  const output = tool.getByText('ran: ls_it', { exact: true });
  await output.waitFor();
  assert.equal(await tool.getByText(/"command": "ls_it"/).isVisible(), true);
  await call.click();
  assert.equal(await output.isVisible(), false, 'folded');
  await call.click();

  await send(page, 'please run TOOL:rm_it');
  const second = messages(page, 'Permission request').nth(1);
  await button(second, 'Deny').click();
  await second.getByText('Denied', { exact: true }).waitFor();
  await messages(page, 'Turn summary').nth(1).waitFor();
  const denied = messages(page, 'Bash tool').nth(1);
  await denied.getByText(/^The user denied this tool use\./).waitFor();

  // After a reload the answered requests come back from the store, without buttons.
  await page.reload();
  await messages(page, 'Turn summary').nth(1).waitFor();
  const answered = messages(page, 'Permission request');
  await answered.first().getByText('Allowed', { exact: true }).waitFor();
  await answered.nth(1).getByText('Denied', { exact: true }).waitFor();
  assert.equal(await answered.count(), 2);
  assert.equal(await answered.getByRole('button').count(), 0);
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
  // Each entry is named by its title (as text: no markup), badge and age.
  const entries = sidebar(page).getByRole('listitem').getByRole('button');
  const first = entries.first();
  await first.and(button(page, 'From the <b>server</b> live 2 h')).waitFor();
  assert.equal(await first.getAttribute('aria-current'), 'true');
  await entries.nth(1).and(button(page, 'New session idle 3 d')).waitFor();
  assert.equal(await entries.count(), 2);
  assert.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'From the <b>server</b>');
  assert.deepEqual(problems, []);
});

test('without the sessions API the sidebar lists the sessions of this browser', async () => {
  const s = await server();
  const ctx = await context();
  await ctx.route('**/api/sessions?*', (route) => route.fulfill({ status: 404, body: 'not here' }));
  const { page, problems } = await openUi(ctx, s.url);
  await send(page, 'kept locally');
  await reply(page, 'Echo: kept locally (turn 1)');
  await button(page, 'New session').click();
  await send(page, 'also kept');
  await reply(page, 'Echo: also kept (turn 1)');
  await page.reload();
  await connection(page, 'Connected').waitFor();
  await reply(page, 'Echo: also kept (turn 1)');
  const entries = sidebar(page).getByRole('listitem').getByRole('button');
  await entries.first().and(entry(page, 'also kept')).waitFor();
  await entries.nth(1).and(entry(page, 'kept locally')).waitFor();
  assert.equal(await entries.count(), 2);
  await entries.nth(1).click();
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
  const drawer = await sidebar(page, { includeHidden: true }).elementHandle();
  const closed = () => page.waitForFunction((aside) => aside.getBoundingClientRect().right <= 0, drawer);
  const open = () => page.waitForFunction((aside) => aside.getBoundingClientRect().left === 0, drawer);
  const toggle = button(page, 'Show sessions');
  // The closed drawer is out of sight and out of the tab order.
  await closed();
  await sidebar(page).waitFor({ state: 'hidden' });
  await button(page, 'New session').waitFor({ state: 'hidden' });
  await toggle.click();
  await open();
  assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
  await sidebar(page).waitFor();
  // A tap beside it closes it, and does not reach what is underneath.
  await page.mouse.click(370, 400);
  await closed();
  assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
  await toggle.click();
  await open();
  await button(page, 'New session').click();
  await closed();
  assert.equal(await page.getByRole('textbox', { name: 'Message', exact: true }).isVisible(), true);
  assert.equal(await sidebar(page, { includeHidden: true }).getByRole('listitem', { includeHidden: true }).count(), 2);
  assert.deepEqual(problems, []);
});
