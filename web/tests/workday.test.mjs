// Browser tests of the web UI's everyday features, driven through accessible names as a person
// would: session management, search, rewind and fork, settings, costs, code and diffs,
// attention and notifications, themes, shortcuts, drafts, two tabs, phone width, screenshots.

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { REPO, WAIT_MS, browserTests, currentAgent, messages, openUi, reply, send, transcript } from './helpers.mjs';

const { server, context } = browserTests();

/**
 * A turn: sends, then waits for its reply and its footer.
 * @param {import('playwright-core').Page} page
 * @param {string} text
 * @param {number} turn the turn number the demo agent will say
 */
async function turn(page, text, turn) {
  const footers = await page.locator('.msg.result').count();
  await send(page, text);
  await reply(page, `Echo: ${text} (turn ${turn})`);
  await page.locator('.msg.result').nth(footers).waitFor();
}

/**
 * @param {string} base
 * @param {string} path
 * @param {RequestInit} [init]
 */
async function rest(base, path, init) {
  const response = await fetch(`${base}${path}`, init);
  return { status: response.status, body: response.status === 204 ? null : await response.json() };
}

/**
 * Imports a transcript (one `{message_type, payload}` a line) as conversation `agentId`.
 * @param {string} base
 * @param {string} agentId
 * @param {object[]} lines
 */
async function importTranscript(base, agentId, lines) {
  const response = await fetch(`${base}/api/sessions/import?agent_id=${agentId}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-ndjson' },
    body: lines.map((l, i) => JSON.stringify({ seq: i + 1, ...l })).join('\n'),
  });
  assert.equal(response.status, 201, await response.text());
}

/** Polls `check` until it returns true, failing after {@link WAIT_MS}. */
async function until(check, what) {
  const deadline = Date.now() + WAIT_MS;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

test('every control has its accessible name', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await turn(page, 'names please', 1);
  for (const name of ['New session', 'Rename', 'Delete', 'Export', 'Send', 'Rewind to here', 'Fork from here']) {
    await page.getByRole('button', { name, exact: true }).first().waitFor();
  }
  assert.equal(await page.getByRole('button', { name: 'Stop', exact: true, includeHidden: true }).count(), 1);
  await page.getByRole('complementary', { name: 'Sessions' }).waitFor();
  await page.getByRole('searchbox', { name: 'Search sessions' }).waitFor();
  await page.getByRole('combobox', { name: 'Model' }).waitFor();
  await page.getByRole('combobox', { name: 'Permission mode' }).waitFor();
  await page.getByRole('textbox', { name: 'Message' }).waitFor();
  assert.deepEqual(problems, []);
});

test('rename shows in the sidebar and survives a reload; export downloads the transcript; delete removes it', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context({ acceptDownloads: true }), s.url);
  await turn(page, 'keep this one', 1);
  const agent = await currentAgent(page);
  await page.getByRole('button', { name: 'New session' }).click();
  await turn(page, 'and this one too', 1);
  const other = await currentAgent(page);
  await page.locator(`.session[data-agent-id="${agent}"]`).click();

  await page.getByRole('button', { name: 'Rename' }).click();
  const box = page.getByRole('dialog', { name: 'Rename session' }).getByRole('textbox');
  assert.equal(await box.inputValue(), 'keep this one');
  await box.fill('Release plan');
  await box.press('Enter');
  const entry = page.locator(`.session[data-agent-id="${agent}"] .session-title`);
  await entry.filter({ hasText: 'Release plan' }).waitFor();
  assert.equal(await page.locator('#title').textContent(), 'Release plan');
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await entry.filter({ hasText: 'Release plan' }).waitFor();

  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Export' }).click();
  const file = await (await download).path();
  const lines = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(
    lines.filter((l) => l.role).map((l) => [l.role, l.content]),
    [['user', 'keep this one'], ['assistant', 'Echo: keep this one (turn 1)']],
  );

  // Cancel keeps it; Delete removes it, here and on the server.
  await page.getByRole('button', { name: 'Delete' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Cancel' }).click();
  assert.equal(await page.locator(`.session[data-agent-id="${agent}"]`).count(), 1);
  await page.getByRole('button', { name: 'Delete' }).click();
  await page.getByRole('dialog', { name: /Delete the conversation “Release plan”/ }).getByRole('button', { name: 'Delete' }).click();
  await page.locator(`.session[data-agent-id="${agent}"]`).waitFor({ state: 'detached' });
  assert.equal(await currentAgent(page), other);
  assert.equal((await rest(s.url, `/api/sessions/${agent}`)).status, 404);
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await reply(page, 'Echo: and this one too (turn 1)');
  assert.deepEqual(await page.locator('.session').evaluateAll((n) => n.map((x) => x.dataset.agentId)), [other]);
  assert.deepEqual(problems, []);
});

test('search finds a conversation by a word of its reply; titles are plain text, newest activity first', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  // The distinctive word is past the title's 50 characters: only the messages hold it.
  const long = '## Notes on *the* build\nmany words to push the rare word out of the title: zanzibar';
  await send(page, long);
  await reply(page, 'zanzibar (turn 1)');
  const first = await currentAgent(page);
  await page.getByRole('button', { name: 'New session' }).click();
  await turn(page, 'something else entirely', 1);
  const second = await currentAgent(page);
  const titles = () => page.locator('.session .session-title').allTextContents();
  await until(async () => (await titles()).length === 2, 'two sessions');
  assert.deepEqual(await titles(), ['something else entirely', 'Notes on the build many words to push the rar']);

  const search = page.getByRole('searchbox', { name: 'Search sessions' });
  await search.fill('ZANZIBAR');
  await until(async () => (await titles()).length === 1, 'one match');
  assert.deepEqual(await page.locator('.session').evaluateAll((n) => n.map((x) => x.dataset.agentId)), [first]);
  await search.fill('no such words anywhere');
  await page.getByText('No session matches.').waitFor();
  await search.fill('');
  await until(async () => (await titles()).length === 2, 'both again');
  assert.equal(await currentAgent(page), second);
  assert.deepEqual(problems, []);
});

test('rewind to turn 1 then chat gives turn 2; fork from turn 1 opens a new conversation with that prefix', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await turn(page, 'first', 1);
  await turn(page, 'second', 2);
  const original = await currentAgent(page);

  await page.getByRole('button', { name: 'Fork from here' }).first().click();
  await until(async () => (await currentAgent(page)) !== original, 'the fork to open');
  const fork = await currentAgent(page);
  await reply(page, 'Echo: first (turn 1)');
  await page.locator('.msg.result').first().waitFor();
  assert.deepEqual((await transcript(page)).slice(0, 2), ['You: first', 'Agent: Echo: first (turn 1)']);
  assert.equal(await page.locator('.msg.assistant').filter({ hasText: 'second' }).count(), 0);
  await turn(page, 'on the fork', 2);
  await page.locator(`.session[data-agent-id="${fork}"]`).waitFor();

  await page.locator(`.session[data-agent-id="${original}"]`).click();
  await reply(page, 'Echo: second (turn 2)');
  await page.getByRole('button', { name: 'Rewind to here' }).first().click();
  await page.getByRole('dialog', { name: 'Rewind to here?' }).getByRole('button', { name: 'Rewind' }).click();
  await page.locator('.msg.notice').filter({ hasText: 'Rewound to an earlier turn' }).waitFor();
  assert.equal(await page.locator('.msg.assistant').filter({ hasText: 'second' }).count(), 0);
  await turn(page, 'after the rewind', 2);
  assert.deepEqual(problems, []);
});

test('each footer shows its own turn cost; the header shows the total the server reports', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  for (const [n, text] of ['one', 'two', 'three'].entries()) await turn(page, text, n + 1);
  const agent = await currentAgent(page);
  const { body: stored } = await rest(s.url, `/api/sessions/${agent}/messages`);
  // A result carries the agent process's running total: a turn costs the rise since the last.
  const running = stored.messages.filter((m) => m.message_type === 'result').map((m) => m.message.total_cost_usd);
  const own = running.map((total, i) => total - (i ? running[i - 1] : 0));
  const footers = await page.locator('.msg.result .result-text').allTextContents();
  assert.deepEqual(
    footers.map((f) => /\$(\d+\.\d{4})/.exec(f)?.[1]),
    own.map((c) => c.toFixed(4)),
  );
  const { body: session } = await rest(s.url, `/api/sessions/${agent}`);
  assert.ok(Math.abs(own.reduce((a, b) => a + b, 0) - session.total_cost_usd) < 1e-9);
  await page
    .locator('#totals')
    .filter({ hasText: `$${session.total_cost_usd.toFixed(4)} · ${session.input_tokens} in / ${session.output_tokens} out tokens` })
    .waitFor();
  assert.deepEqual(problems, []);
});

test('the model and permission mode picked apply from the next turn', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await turn(page, 'with the default', 1);
  assert.match(await page.locator('.msg.result .result-text').first().textContent(), / · demo$/);
  await page.getByRole('combobox', { name: 'Model' }).selectOption('demo-2');
  await page.getByRole('combobox', { name: 'Permission mode' }).selectOption('acceptEdits');
  await turn(page, 'with another model', 2);
  assert.match(await page.locator('.msg.result .result-text').nth(1).textContent(), / · demo-2$/);
  const { body } = await rest(s.url, `/api/sessions/${await currentAgent(page)}`);
  assert.equal(body.model, 'demo-2');
  assert.equal(body.permission_mode, 'acceptEdits');
  // After a reload the pickers show the conversation's settings.
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  await until(async () => (await page.getByRole('combobox', { name: 'Model' }).inputValue()) === 'demo-2', 'the model');
  assert.equal(await page.getByRole('combobox', { name: 'Permission mode' }).inputValue(), 'acceptEdits');
  assert.deepEqual(problems, []);
});

test('code is highlighted with its language and Copy; edits show as diffs; long output and thinking fold; hostile text stays text', async () => {
  const s = await server();
  const ctx = await context();
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: s.url });
  const evil = '<script>window.__pwned = 1</script>';
  const code = `fn main() {\n    let s = "${evil}"; // note\n    println!("{}", 42);\n}`;
  const big = Array.from({ length: 120 }, (_, i) => `line ${i} <b>${'x'.repeat(40)}</b>`).join('\n');
  const assistant = (content) => ({ message_type: 'assistant', payload: { type: 'assistant', message: { role: 'assistant', model: 'demo', content } } });
  const toolResult = (id, content) => ({
    message_type: 'user',
    payload: { type: 'user', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content }] } },
  });
  await importTranscript(s.url, 'rendering', [
    { message_type: 'user', payload: { type: 'user', message: { role: 'user', content: 'Show **me**\nthe `code`' } } },
    assistant([
      { type: 'thinking', thinking: 'I should <b>answer</b>' },
      { type: 'text', text: `Here:\n\`\`\`rust\n${code}\n\`\`\`\nand <img src=x onerror="window.__pwned = 2">` },
    ]),
    assistant([{ type: 'tool_use', id: 't1', name: 'Edit', input: { file_path: 'src/lib.rs', old_string: 'let a = 1;\nlet b = 2;', new_string: `let a = 1;\nlet b = 3; ${evil}` } }]),
    toolResult('t1', 'edited'),
    assistant([{ type: 'tool_use', id: 't2', name: 'Bash', input: { command: 'cat big.log' } }]),
    toolResult('t2', big),
    { message_type: 'result', payload: { type: 'result', subtype: 'success', is_error: false, total_cost_usd: 0.25, usage: { input_tokens: 3, output_tokens: 9 }, duration_ms: 1200 } },
  ]);
  const { page, problems } = await openUi(ctx, `${s.url}/#rendering`);
  const block = page.locator('.code-block');
  await block.waitFor();
  assert.equal(await block.locator('.code-lang').textContent(), 'rust');
  assert.equal(await block.locator('code').textContent(), code);
  const keywords = await block.locator('.tok-keyword').allTextContents();
  assert.ok(keywords.includes('fn') && keywords.includes('let'), keywords.join());
  assert.ok((await block.locator('.tok-string').allTextContents()).some((t) => t.includes(evil)));
  assert.deepEqual(await block.locator('.tok-comment').allTextContents(), ['// note']);
  await block.getByRole('button', { name: 'Copy rust' }).click();
  await block.getByRole('button', { name: 'Copy rust' }).filter({ hasText: 'Copied' }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), code);

  const edit = messages(page, 'Edit tool');
  assert.equal(await edit.locator('summary').textContent(), 'Edit: src/lib.rs +1 −1');
  assert.equal(await edit.locator('details').evaluate((d) => /** @type {HTMLDetailsElement} */ (d).open), true);
  assert.deepEqual(await edit.locator('.diff-del').allTextContents(), ['- let b = 2;']);
  assert.deepEqual(await edit.locator('.diff-add').allTextContents(), [`+ let b = 3; ${evil}`]);
  assert.deepEqual(await edit.locator('.diff-ctx').allTextContents(), ['  let a = 1;']);

  const bash = messages(page, 'Bash tool').filter({ hasText: 'Bash: cat big.log' });
  await bash.locator('summary').first().click();
  const fold = bash.locator('details.tool-fold');
  assert.match(await fold.locator('summary').textContent(), /^Result: \d+\.\d kB, 120 lines$/);
  assert.equal(await fold.locator('pre').isVisible(), false);
  await fold.locator('summary').click();
  assert.equal(await fold.locator('pre').textContent(), big);

  const thinking = messages(page, 'Thinking');
  assert.equal(await thinking.locator('details').evaluate((d) => /** @type {HTMLDetailsElement} */ (d).open), false);
  assert.equal(await thinking.locator('.thinking-text').textContent(), 'I should <b>answer</b>');
  // Times on hover; the title is one line of plain text.
  assert.ok(await page.locator('.msg.assistant').first().getAttribute('title'));
  assert.equal(await page.locator('.session[data-agent-id="rendering"] .session-title').textContent(), 'Show me the code');
  assert.equal(await page.locator('#title').textContent(), 'Show me the code');
  // Nothing hostile ran or became markup.
  assert.equal(await page.evaluate(() => /** @type {any} */ (window).__pwned), undefined);
  assert.equal(await page.locator('#messages img, #messages script, #messages b').count(), 0);
  assert.deepEqual(problems, []);
});

/** Records notifications and lets a test hide the tab. */
function spyScript() {
  const notes = [];
  /** @type {any} */ (window).__notes = notes;
  const Real = window.Notification;
  window.Notification = class extends Real {
    constructor(title, options) {
      super(title, options);
      notes.push({ title, body: options?.body });
    }
  };
  let hidden = false;
  Object.defineProperty(document, 'visibilityState', { get: () => (hidden ? 'hidden' : 'visible') });
  Object.defineProperty(document, 'hidden', { get: () => hidden });
  /** @type {any} */ (window).__setHidden = (h) => {
    hidden = h;
    document.dispatchEvent(new Event('visibilitychange'));
  };
}

test('a finished turn off screen marks the sidebar and the tab title; with permission, a hidden tab gets a notification', async () => {
  const s = await server({ gates: true });
  const ctx = await context();
  await ctx.grantPermissions(['notifications'], { origin: s.url });
  await ctx.addInitScript(spyScript);
  const { page, problems } = await openUi(ctx, s.url);
  const first = await currentAgent(page);
  s.openGate(first, 1);
  s.openGate(first, 3);
  await turn(page, 'the first one', 1);
  // The reply waits at its gate until another conversation is on screen.
  await send(page, 'a longer reply that takes a while to arrive');
  await page.locator('.msg.assistant.streaming').waitFor();
  await page.getByRole('button', { name: 'New session' }).click();
  s.openGate(first, 2);
  const marked = page.locator(`.session.attention[data-agent-id="${first}"]`);
  await marked.waitFor();
  assert.equal(await marked.locator('.attention-dot').textContent(), 'new');
  await until(async () => (await page.title()) === '(1) agentmux', 'the count in the title');
  assert.deepEqual(await page.evaluate(() => /** @type {any} */ (window).__notes), [], 'not without being asked');
  await marked.click();
  await page.locator(`.session.attention`).waitFor({ state: 'detached' });
  assert.equal(await page.title(), 'agentmux');

  const notify = page.getByRole('button', { name: 'Notifications' });
  await notify.click();
  await until(async () => (await notify.getAttribute('aria-pressed')) === 'true', 'notifications on');
  await page.evaluate(() => /** @type {any} */ (window).__setHidden(true));
  await send(page, 'while the tab is hidden');
  await until(async () => (await page.title()) === '(1) agentmux', 'the count for a hidden tab');
  const notes = await page.evaluate(() => /** @type {any} */ (window).__notes);
  assert.deepEqual(notes, [{ title: 'the first one', body: 'The reply is ready' }]);
  await page.evaluate(() => /** @type {any} */ (window).__setHidden(false));
  await until(async () => (await page.title()) === 'agentmux', 'the count cleared');
  assert.deepEqual(problems, []);
});

test('a conversation this tab never opened (started elsewhere) is marked when its turn ends; a hidden tab is notified', async () => {
  const s = await server();
  const ctx = await context();
  await ctx.grantPermissions(['notifications'], { origin: s.url });
  await ctx.addInitScript(spyScript);
  const { page, problems } = await openUi(ctx, s.url);
  await turn(page, 'on screen', 1);
  const notify = page.getByRole('button', { name: 'Notifications' });
  await notify.click();
  await until(async () => (await notify.getAttribute('aria-pressed')) === 'true', 'notifications on');
  await page.evaluate(() => /** @type {any} */ (window).__setHidden(true));
  // A script (or a schedule, or another device) runs a turn in a new conversation.
  const posted = await rest(s.url, '/api/sessions/from-elsewhere/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content: 'started by a script' }),
  });
  assert.equal(posted.status, 202);
  const marked = page.locator('.session.attention[data-agent-id="from-elsewhere"]');
  await marked.waitFor();
  assert.equal(await marked.locator('.attention-dot').textContent(), 'new');
  await until(async () => (await page.title()) === '(1) agentmux', 'the count in the title');
  const notes = await page.evaluate(() => /** @type {any} */ (window).__notes);
  assert.deepEqual(notes, [{ title: 'started by a script', body: 'The reply is ready' }]);
  await page.evaluate(() => /** @type {any} */ (window).__setHidden(false));
  await marked.click();
  await reply(page, 'Echo: started by a script (turn 1)');
  await until(async () => (await page.title()) === 'agentmux', 'the count cleared');
  assert.deepEqual(problems, []);
});

test('a permission request marks its conversation and stays answerable after a reload', async () => {
  const s = await server({ fakeClaude: true });
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'please run TOOL:make_it');
  await page.locator('.msg.permission').filter({ hasText: 'Allow Bash?' }).waitFor();
  const agent = await currentAgent(page);
  await page.getByRole('button', { name: 'New session' }).click();
  // Not news: it was already seen. A reload, then answering it.
  await page.locator(`.session[data-agent-id="${agent}"]`).click();
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  const card = page.locator('.msg.permission');
  await card.getByRole('button', { name: 'Allow', exact: true }).click();
  await card.locator('.permission-outcome').filter({ hasText: 'Allowed' }).waitFor();
  await page.locator('.msg.result').waitFor();

  // A request that arrives while another conversation is on screen marks the sidebar.
  const other = await openUi(page.context(), `${s.url}/#${agent}`);
  await other.page.locator('.msg.result').waitFor();
  await page.getByRole('button', { name: 'New session' }).click();
  await send(other.page, 'again TOOL:later_one');
  const marked = page.locator(`.session.attention-permission[data-agent-id="${agent}"]`);
  await marked.waitFor();
  assert.equal(await marked.locator('.attention-dot').textContent(), 'approval');
  assert.equal(await page.title(), '(1) agentmux');
  await marked.click();
  await page.getByRole('button', { name: 'Allow', exact: true }).click();
  await page.locator('.msg.result').nth(1).waitFor();
  assert.equal(await page.title(), 'agentmux');
  assert.deepEqual([...problems, ...other.problems], []);
});

test('dark mode follows prefers-color-scheme, and the toggle overrides it across reloads', async () => {
  const s = await server();
  const background = (page) => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const dark = await openUi(await context({ colorScheme: 'dark' }), s.url);
  const toggle = dark.page.getByRole('button', { name: 'Dark mode' });
  assert.equal(await toggle.getAttribute('aria-pressed'), 'true');
  assert.equal(await background(dark.page), 'rgb(15, 18, 24)');
  await toggle.click();
  assert.equal(await toggle.getAttribute('aria-pressed'), 'false');
  assert.equal(await background(dark.page), 'rgb(246, 247, 249)');
  await dark.page.reload();
  await dark.page.locator('#conn[data-state="open"]').waitFor();
  assert.equal(await background(dark.page), 'rgb(246, 247, 249)');

  const light = await openUi(await context({ colorScheme: 'light' }), s.url);
  assert.equal(await light.page.getByRole('button', { name: 'Dark mode' }).getAttribute('aria-pressed'), 'false');
  assert.equal(await background(light.page), 'rgb(246, 247, 249)');
  await light.page.getByRole('button', { name: 'Dark mode' }).click();
  assert.equal(await background(light.page), 'rgb(15, 18, 24)');
  assert.deepEqual([...dark.problems, ...light.problems], []);
});

test('keyboard shortcuts, listed under ?, and a draft kept per conversation', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await turn(page, 'older one', 1);
  const older = await currentAgent(page);
  await page.getByRole('button', { name: 'New session' }).click();
  await turn(page, 'newer one', 1);
  const newer = await currentAgent(page);
  const input = page.getByRole('textbox', { name: 'Message' });
  await input.fill('half a thought');

  await input.press('Alt+ArrowDown');
  await until(async () => (await currentAgent(page)) === older, 'the next session');
  assert.equal(await input.inputValue(), '');
  await input.fill('another draft');
  await input.press('Alt+ArrowUp');
  await until(async () => (await currentAgent(page)) === newer, 'the previous session');
  assert.equal(await input.inputValue(), 'half a thought');
  await page.reload();
  await page.locator('#conn[data-state="open"]').waitFor();
  assert.equal(await page.getByRole('textbox', { name: 'Message' }).inputValue(), 'half a thought');

  await page.locator('#messages').click();
  await page.keyboard.press('/');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'input');
  await page.locator('#messages').click();
  await page.keyboard.press('?');
  const help = page.getByRole('dialog', { name: 'Keyboard shortcuts' });
  await help.waitFor();
  for (const what of ['New session', 'Next session', 'Previous session', 'Focus the message box', 'Stop the running turn']) {
    await help.getByText(what).waitFor();
  }
  await help.getByRole('button', { name: 'Close' }).click();
  await help.waitFor({ state: 'hidden' });
  await page.keyboard.press('Alt+N');
  await until(async () => ![older, newer].includes(await currentAgent(page)), 'a new session');
  assert.equal(await page.getByRole('textbox', { name: 'Message' }).inputValue(), '');
  assert.deepEqual(problems, []);
});

test('a second tab that opened the conversation before its first message shows the same history', async () => {
  const s = await server();
  const ctx = await context();
  const a = await openUi(ctx, s.url);
  const agent = await currentAgent(a.page);
  // Tab b opens the conversation while it does not exist yet.
  const b = await openUi(ctx, `${s.url}/#${agent}`);
  await turn(a.page, 'said in tab a first', 1);
  await reply(b.page, 'Echo: said in tab a first (turn 1)');
  await turn(b.page, 'then tab b', 2);
  await reply(a.page, 'Echo: then tab b (turn 2)');
  await a.page.locator('.msg.result').nth(1).waitFor();
  assert.deepEqual(await transcript(b.page), await transcript(a.page));
  assert.equal((await transcript(a.page)).length, 6);
  assert.deepEqual([...a.problems, ...b.problems], []);
});

/** A real 1×1 PNG, base64. */
const PNG_1X1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

test('an image pasted, dropped or picked goes with the message, is shown, and is still there after a reload', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  // Paste a small PNG into the message box: it is sent as it is.
  await page.getByRole('textbox', { name: 'Message' }).evaluate((input, data) => {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([bytes], 'dot.png', { type: 'image/png' }));
    input.dispatchEvent(new ClipboardEvent('paste', { clipboardData: transfer, bubbles: true, cancelable: true }));
  }, PNG_1X1);
  await page.getByRole('img', { name: 'Attached image 1' }).waitFor();
  await send(page, 'what is this');
  await reply(page, 'Echo: what is this [image/png 70 bytes] (turn 1)');
  await page.getByRole('img', { name: 'Image 1 of the message' }).waitFor();
  assert.equal(await page.getByRole('img', { name: 'Attached image 1' }).count(), 0, 'the composer is empty again');

  // Drop a large noisy PNG: it is scaled down to a JPEG that fits in one frame. Removing it
  // takes it out of the message.
  const drop = () =>
    page.locator('#composer').evaluate((composer) => {
      const canvas = document.createElement('canvas');
      canvas.width = 2400;
      canvas.height = 1800;
      const context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
      const pixels = context.createImageData(canvas.width, canvas.height);
      for (let i = 0; i < pixels.data.length; i += 1) pixels.data[i] = (i * 2654435761) >>> 24;
      context.putImageData(pixels, 0, 0);
      return new Promise((done) =>
        canvas.toBlob((blob) => {
          const transfer = new DataTransfer();
          transfer.items.add(new File([/** @type {Blob} */ (blob)], 'noise.png', { type: 'image/png' }));
          composer.dispatchEvent(new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true }));
          done(/** @type {Blob} */ (blob).size);
        }, 'image/png'),
      );
    });
  const original = await drop();
  assert.ok(original > 1_000_000, `the dropped image is large (${original} bytes)`);
  await page.getByRole('img', { name: 'Attached image 1' }).waitFor();
  await page.getByRole('button', { name: 'Remove image' }).click();
  assert.equal(await page.getByRole('img', { name: 'Attached image 1' }).count(), 0);
  await drop();
  await page.getByRole('img', { name: 'Attached image 1' }).waitFor();
  await send(page, 'and this');
  await page.getByText(/Echo: and this \[image\/jpeg \d+ bytes\] \(turn 2\)/).waitFor();
  const [stored] = (await rest(s.url, `/api/sessions/${await currentAgent(page)}/messages?after_seq=4`)).body.messages;
  const sent = stored.message.message.content[1].source;
  assert.equal(sent.media_type, 'image/jpeg');
  assert.ok(sent.data.length < 900_000, `scaled to fit (${sent.data.length} base64 characters)`);

  // Picked with the file chooser.
  const chooser = page.waitForEvent('filechooser');
  await page.getByRole('button', { name: 'Attach image' }).click();
  await (await chooser).setFiles({ name: 'dot.png', mimeType: 'image/png', buffer: Buffer.from(PNG_1X1, 'base64') });
  await send(page, 'one more');
  await reply(page, 'Echo: one more [image/png 70 bytes] (turn 3)');

  await page.reload();
  await reply(page, 'Echo: one more [image/png 70 bytes] (turn 3)');
  assert.equal(await page.locator('#messages .msg.user img').count(), 3, 'every sent image is shown again');
  assert.deepEqual(problems, []);
});

test('prompts an import left without a reply are not shown as queued, and the next turn pairs with its own reply', async () => {
  const s = await server();
  const prompt = (content) => ({ message_type: 'user', payload: { type: 'user', message: { role: 'user', content } } });
  await importTranscript(s.url, 'never-ran', [prompt('first, never answered'), prompt('second, never answered')]);
  const { page, problems } = await openUi(await context(), `${s.url}/#never-ran`);
  await page.locator('.msg.user').filter({ hasText: 'second, never answered' }).waitFor();
  await until(async () => (await page.locator('.msg.user.queued').count()) === 0, 'no queued prompt');
  await send(page, 'now one that runs');
  await reply(page, 'Echo: now one that runs (turn 1)');
  await page.locator('.msg.result').waitFor();
  assert.equal(await page.locator('.msg.user.queued').count(), 0);
  assert.deepEqual(problems, []);
});

test('phone width: a drawer for the sessions, the composer in reach, no horizontal scroll', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context({ viewport: { width: 390, height: 760 } }), s.url);
  await turn(page, 'a fairly long message that has to wrap on a small screen without any sideways scrolling', 1);
  const noSideways = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth && document.body.scrollWidth <= window.innerWidth);
  assert.ok(await noSideways(), 'no horizontal scroll');
  const composer = await page.getByRole('textbox', { name: 'Message' }).boundingBox();
  assert.ok(composer && composer.y + composer.height <= 760 && composer.x >= 0 && composer.x + composer.width <= 390);
  for (const name of ['Send', 'Rename', 'Export', 'Delete']) {
    const box = await page.getByRole('button', { name, exact: true }).boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= 390, name);
  }
  await page.getByRole('button', { name: 'Show sessions' }).click();
  const search = page.getByRole('searchbox', { name: 'Search sessions' });
  await search.waitFor();
  await page.waitForFunction(() => document.getElementById('sidebar')?.getBoundingClientRect().left === 0);
  await page.getByRole('button', { name: 'New session' }).click();
  await page.waitForFunction(() => (document.getElementById('sidebar')?.getBoundingClientRect().right ?? 1) <= 0);
  assert.ok(await noSideways(), 'no horizontal scroll');
  assert.deepEqual(problems, []);
});

test('screenshots at desktop and phone width', async () => {
  const s = await server({ fakeClaude: true });
  const code = 'async fn serve(addr: &str) -> Result<()> {\n    let listener = TcpListener::bind(addr).await?; // one socket\n    axum::serve(listener, app()).await?;\n    Ok(())\n}';
  await importTranscript(s.url, 'web-release-notes', [
    { message_type: 'user', payload: { type: 'user', message: { role: 'user', content: 'Make the server port configurable' } } },
    { message_type: 'assistant', payload: { type: 'assistant', message: { role: 'assistant', model: 'claude-sonnet-4-5', content: [
      { type: 'thinking', thinking: 'The bind address is hard-coded in main.rs.' },
      { type: 'text', text: `The address comes from \`--bind\` now:\n\`\`\`rust\n${code}\n\`\`\`` },
      { type: 'tool_use', id: 'e1', name: 'Edit', input: { file_path: 'src/main.rs', old_string: '    serve("127.0.0.1:7878").await?;\n    Ok(())', new_string: '    let args = Args::parse();\n    serve(&args.bind).await?;\n    Ok(())' } },
    ] } } },
    { message_type: 'user', payload: { type: 'user', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'e1', content: 'The file src/main.rs has been updated.' }] } } },
    { message_type: 'result', payload: { type: 'result', subtype: 'success', is_error: false, total_cost_usd: 0.0421, usage: { input_tokens: 2100, output_tokens: 310 }, duration_ms: 8400 } },
  ]);
  const out = join(REPO, 'target');
  mkdirSync(out, { recursive: true });
  const shots = [];
  for (const [name, options] of [
    ['screenshot.png', { viewport: { width: 1280, height: 800 }, colorScheme: 'light' }],
    ['screenshot-dark.png', { viewport: { width: 1280, height: 800 }, colorScheme: 'dark' }],
    ['screenshot-phone.png', { viewport: { width: 390, height: 800 }, colorScheme: 'light', deviceScaleFactor: 2 }],
  ]) {
    const { page, problems } = await openUi(await context(/** @type {any} */ (options)), s.url);
    if (!shots.length) {
      for (const text of ['Plan the release notes', 'Which tests cover reconnects?']) {
        await send(page, text);
        await reply(page, `Echo: ${text}`);
        await page.getByRole('button', { name: 'New session' }).click();
      }
      await send(page, 'please run TOOL:cargo_test');
      await page.locator('.msg.permission').waitFor();
      await page.getByRole('button', { name: 'New session' }).click();
    }
    await page.evaluate(() => (location.hash = 'web-release-notes'));
    await page.locator('.code-block').waitFor();
    if (shots.length === 0) await send(page, 'Thanks, that is what I wanted');
    await page.locator('.msg.result').nth(1).waitFor();
    await page.locator('.session').nth(3).waitFor({ state: 'attached' });
    await page.locator('#totals').filter({ hasText: '$' }).waitFor();
    const file = join(out, `web-${name}`);
    await page.screenshot({ path: file });
    shots.push([file, name]);
    assert.deepEqual(problems, []);
  }
  if (process.env.UPDATE_SCREENSHOT) for (const [file, name] of shots) copyFileSync(file, join(REPO, 'docs', name));
});
