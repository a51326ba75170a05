// Browser tests of details a new user trips over, driven through accessible names: pickers
// that offer what the agent and server offer, a refused message kept, the CLI's own command
// lines, forks and deletes named plainly, no subscription to what does not exist, and
// permission cards that read well and keep their decision.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { WAIT_MS, browserTests, currentAgent, messages, openUi, reply, send, transcript } from './helpers.mjs';

const { server, context } = browserTests();

/**
 * The options of a picker, as `value=label`.
 * @param {import('playwright-core').Page} page
 * @param {string} name
 */
function options(page, name) {
  return page
    .getByRole('combobox', { name, exact: true })
    .locator('option')
    .evaluateAll((nodes) => nodes.map((o) => `${/** @type {HTMLOptionElement} */ (o).value}=${o.textContent}`));
}

/**
 * `agentmux_errors_total` for `code`, from the server's metrics.
 * @param {string} base
 * @param {string} code
 */
async function errors(base, code) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`agentmux_errors_total{code="${code}"}`));
  return line ? Number(line.split(' ').pop()) : 0;
}

/** Polls `check` until it returns true, failing after {@link WAIT_MS}. */
async function until(check, what) {
  const deadline = Date.now() + WAIT_MS;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

test("the pickers offer the agent's own models and only the modes the server allows", async () => {
  const s = await server({ fakeClaude: true });
  const { page, problems } = await openUi(await context(), s.url);
  const model = page.getByRole('combobox', { name: 'Model', exact: true });
  await model.locator('option', { hasText: 'Haiku' }).waitFor({ state: 'attached' });
  assert.deepEqual(await options(page, 'Model'), ['=Default model', 'sonnet=Sonnet', 'haiku=Haiku']);
  const modes = await options(page, 'Permission mode');
  assert.ok(modes.includes('plan=Plan only'), modes.join());
  assert.ok(!modes.some((m) => m.startsWith('bypassPermissions') || m.startsWith('auto=')), modes.join());
  await model.selectOption('haiku');
  await send(page, 'hello');
  await messages(page, 'Turn summary').waitFor();
  const agent = await currentAgent(page);
  const session = await (await fetch(`${s.url}/api/sessions/${agent}`)).json();
  assert.equal(session.model, 'haiku');
  assert.deepEqual(problems, []);
});

test('a refused message shows its error once and stays in the composer', async () => {
  const s = await server({ config: '[socket]\nmax_content_bytes = 64\n' });
  const { page, problems } = await openUi(await context(), s.url);
  const long = 'a message far longer than this server takes in one chat, so it is refused';
  await send(page, long);
  await messages(page, 'Error').waitFor();
  const box = page.getByRole('textbox', { name: 'Message', exact: true });
  assert.equal(await box.inputValue(), long);
  await send(page, 'short one');
  await reply(page, 'Echo: short one (turn 1)');
  assert.equal(await messages(page, 'Error').count(), 1);
  assert.deepEqual(problems, []);
});

test("the CLI's own command lines show as small system lines, not as prompts", async () => {
  const s = await server();
  const uuid = (n) => `00000000-0000-4000-8000-00000000000${n}`;
  const user = (n, content) => ({
    message_type: 'user',
    payload: { type: 'user', uuid: uuid(n), message: { role: 'user', content } },
  });
  const lines = [
    { message_type: 'user', payload: { type: 'user', message: { role: 'user', content: 'first question' } } },
    { message_type: 'assistant', payload: { type: 'assistant', uuid: uuid(1), message: { role: 'assistant', content: [{ type: 'text', text: 'first answer' }] } } },
    { message_type: 'result', payload: { type: 'result', subtype: 'success', is_error: false } },
    user(2, '<local-command-caveat>The command below was run directly in Claude Code.</local-command-caveat>'),
    user(3, '<command-name>/model</command-name>\n            <command-message>model</command-message>\n            <command-args>haiku</command-args>'),
    user(4, [{ type: 'text', text: '<local-command-stdout>Set model to `Haiku 5.5` for this session only</local-command-stdout>' }]),
  ];
  const response = await fetch(`${s.url}/api/sessions/import?agent_id=imported`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-ndjson' },
    body: lines.map((l, i) => JSON.stringify({ seq: i + 1, ...l })).join('\n'),
  });
  assert.equal(response.status, 201, await response.text());
  const { page, problems } = await openUi(await context(), `${s.url}/#imported`);
  await messages(page, 'System').nth(1).waitFor();
  const shown = await transcript(page);
  assert.deepEqual(
    shown.filter((l) => !l.startsWith('Turn summary')),
    ['You: first question', 'Agent: first answer', 'System: /model haiku', 'System: Set model to `Haiku 5.5` for this session only'],
  );
  assert.deepEqual(problems, []);
});

test('a fork is titled as one, and delete names which conversation it removes', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'plan the release');
  await reply(page, 'Echo: plan the release (turn 1)');
  const source = await currentAgent(page);
  await page.getByRole('button', { name: 'Fork from here' }).click();
  const heading = page.getByRole('heading', { level: 1 });
  await heading.filter({ hasText: 'plan the release (fork)' }).waitFor();
  const fork = await currentAgent(page);
  assert.notEqual(fork, source);
  await page.getByRole('button', { name: 'Delete', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'Delete the conversation “plan the release (fork)”?' });
  await dialog.waitFor();
  const text = await dialog.textContent();
  assert.ok(text?.includes(fork), text ?? '');
  assert.match(text ?? '', /\d+ messages, last active/);
  await dialog.getByRole('button', { name: 'Delete', exact: true }).click();
  await until(async () => (await fetch(`${s.url}/api/sessions/${fork}`)).status === 404, 'the fork to go');
  assert.equal((await fetch(`${s.url}/api/sessions/${source}`)).status, 200, 'the source stays');
  assert.deepEqual(problems, []);
});

test('an ordinary session subscribes to nothing that does not exist, and remembers nothing of another server', async () => {
  const first = await server();
  const ctx = await context();
  const { page, problems } = await openUi(ctx, first.url);
  await send(page, 'from the first server');
  await reply(page, 'Echo: from the first server (turn 1)');
  await page.getByRole('button', { name: 'New session' }).click();
  await send(page, 'second conversation');
  await reply(page, 'Echo: second conversation (turn 1)');
  await page.getByRole('button', { name: 'New session' }).click();
  await page.getByRole('button', { name: /^from the first server/ }).click();
  await page.reload();
  await reply(page, 'Echo: from the first server (turn 1)');
  await page.getByRole('button', { name: 'New session' }).click();
  await page.reload();
  await page.getByRole('button', { name: /^second conversation/ }).waitFor();
  assert.equal(await errors(first.url, 'unknown_agent'), 0);

  // The same address, a server with a fresh data dir: nothing of the first one shows. The page
  // is away while the address has no server, so nothing of it fails to reach one meanwhile.
  await page.goto('about:blank');
  await first.stop();
  const second = await server({ port: first.port });
  await page.goto(first.url);
  await page.getByRole('status', { name: 'Connection', exact: true }).filter({ hasText: /^Connected$/ }).waitFor();
  await page.getByRole('heading', { level: 1, name: 'New session' }).waitFor();
  await until(async () => (await page.locator('#sessions .session').count()) <= 1, 'the old list to go');
  assert.equal(await page.getByRole('button', { name: /from the first server|second conversation/ }).count(), 0);
  await send(page, 'on the second server');
  await reply(page, 'Echo: on the second server (turn 1)');
  assert.equal(await errors(second.url, 'unknown_agent'), 0);
  assert.deepEqual(problems, []);
});

test('a permission card reads as the command, keeps its decision before the result, and can always allow or deny with a reason', async () => {
  const s = await server({ fakeClaude: true });
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'please run TOOL:ls_it');
  const tool = messages(page, 'Bash tool').first();
  const card = tool.getByRole('article', { name: 'Permission request' });
  await card.getByText('ls_it', { exact: true }).waitFor();
  assert.equal(await card.getByText(/"command"/).count(), 0, 'no JSON');
  await card.getByRole('textbox', { name: 'Reason for denying' }).fill('not in this folder');
  await card.getByRole('button', { name: 'Deny', exact: true }).click();
  await card.getByText('Denied', { exact: true }).waitFor();
  await card.getByText('Reason: not in this folder').waitFor();
  await tool.getByText(/not in this folder/).last().waitFor();
  // The request, its decision, then the result, in that order inside the tool call.
  const order = await tool.evaluate((node) =>
    [...node.querySelectorAll('.permission, .tool-output')].map((n) => n.className),
  );
  assert.deepEqual(order, ['msg permission permission-denied', 'tool-output']);
  await messages(page, 'Turn summary').waitFor();

  await send(page, 'again TOOL:pwd_it');
  const second = messages(page, 'Bash tool').nth(1).getByRole('article', { name: 'Permission request' });
  await second.getByRole('button', { name: 'Always allow', exact: true }).click();
  await second.getByText('Allowed', { exact: true }).waitFor();
  await messages(page, 'Turn summary').nth(1).waitFor();
  // Asked again for the same tool: allowed without a question.
  await send(page, 'once more TOOL:date_it');
  const third = messages(page, 'Bash tool').nth(2).getByRole('article', { name: 'Permission request' });
  await third.getByText('Allowed', { exact: true }).waitFor();
  await messages(page, 'Turn summary').nth(2).waitFor();
  assert.deepEqual(problems, []);
});

test('a new session works in a folder deeper than a project, and a root is never picked for you', async () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'agentmux-root-')));
  mkdirSync(join(root, 'shop', 'services', 'api'), { recursive: true });
  const s = await server({ config: `[[projects.roots]]\npath = ${JSON.stringify(root)}\n` });
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  const project = dialog.getByRole('combobox', { name: 'Project' });
  assert.notEqual(await project.inputValue(), root, 'the root itself is not preselected');
  await project.selectOption(join(root, 'shop'));
  await dialog.getByRole('textbox', { name: 'Folder inside it (optional)' }).fill('services/api');
  await dialog.getByRole('button', { name: 'Start' }).click();
  await send(page, 'where am I');
  await reply(page, 'Echo: where am I (turn 1)');
  const session = await (await fetch(`${s.url}/api/sessions/${await currentAgent(page)}`)).json();
  assert.equal(session.cwd, join(root, 'shop', 'services', 'api'));
  assert.deepEqual(problems, []);
});

test('a schedule picks a conversation by its title and the mode of its runs, and an export is imported from the page', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'release notes');
  await reply(page, 'Echo: release notes (turn 1)');
  const agent = await currentAgent(page);
  await page.getByRole('button', { name: 'Schedules', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'Schedules' });
  await dialog.getByRole('textbox', { name: 'Name', exact: true }).fill('Nightly notes');
  await dialog.getByRole('combobox', { name: 'Conversation' }).selectOption({ label: 'release notes' });
  await dialog.getByRole('textbox', { name: 'Prompt', exact: true }).fill('summarize');
  await dialog.getByRole('textbox', { name: 'Interval or cron expression' }).fill('3600');
  await dialog.getByRole('combobox', { name: 'Permission mode' }).selectOption('plan');
  await dialog.getByRole('button', { name: 'Create' }).click();
  await dialog.getByRole('listitem').filter({ hasText: 'Nightly notes' }).waitFor();
  const [made] = (await (await fetch(`${s.url}/api/schedules`)).json()).schedules;
  assert.equal(made.agent_id, agent);
  assert.deepEqual(made.options, { permission_mode: 'plan' });
  await dialog.getByRole('button', { name: 'Close' }).click();

  const exported = await (await fetch(`${s.url}/api/sessions/${agent}/export`)).text();
  const chooser = page.waitForEvent('filechooser');
  await page.getByRole('button', { name: 'Import', exact: true }).click();
  await (await chooser).setFiles({ name: 'notes.jsonl', mimeType: 'application/x-ndjson', buffer: Buffer.from(exported) });
  await until(async () => (await currentAgent(page)) !== agent, 'the import to open');
  await reply(page, 'Echo: release notes (turn 1)');
  assert.match(await currentAgent(page), /^import-/);
  assert.equal(await page.getByRole('button', { name: /^release notes/ }).count(), 2);
  assert.deepEqual(problems, []);
});

test('icons are drawn, not emoji; on a phone Enter makes a new line and the placeholder fits', async () => {
  const s = await server();
  const { page, problems } = await openUi(
    await context({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true }),
    s.url,
  );
  for (const name of ['Attach image', 'Show sessions']) {
    const icon = page.getByRole('button', { name, exact: true });
    assert.equal((await icon.textContent())?.trim(), '', name);
    assert.equal(await icon.locator('svg').count(), 1, name);
  }
  const box = page.getByRole('textbox', { name: 'Message', exact: true });
  assert.equal(await box.getAttribute('placeholder'), 'Message');
  await box.fill('first line');
  await box.press('Enter');
  await box.pressSequentially('second line');
  assert.equal(await box.inputValue(), 'first line\nsecond line');
  assert.equal(await messages(page, 'You').count(), 0, 'nothing sent');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await reply(page, 'second line (turn 1)');
  assert.deepEqual(problems, []);
});

test('signing out forgets the token and what the page kept; notifications say when the page is not secure', async () => {
  const token = 'tok-sign-out-0123456789abcdef';
  const s = await server({ config: `[auth.tokens]\n"${token}" = "alice"\n` });
  const ctx = await context();
  const { page, problems } = await openUi(ctx, s.url, { connected: false });
  const form = page.getByRole('form', { name: 'Sign in' });
  await form.getByLabel('This server asks for an API token.').fill(token);
  await form.getByRole('button', { name: 'Sign in' }).click();
  await send(page, 'private words');
  await reply(page, 'Echo: private words (turn 1)');
  await page.getByRole('button', { name: 'Sign out', exact: true }).click();
  await form.waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agentmux.token')), null);
  assert.equal(await page.evaluate(() => localStorage.getItem('agentmux.sessions.v1')), null);
  assert.equal(await page.getByRole('button', { name: /private words/ }).count(), 0);
  assert.equal(await page.getByRole('button', { name: 'Sign out', exact: true }).isVisible(), false);
  assert.deepEqual(
    problems.filter((p) => !p.includes('status of 401 (Unauthorized)')),
    [],
  );

  // The same page as a browser sees it over plain http from another machine.
  const plain = await context();
  await plain.addInitScript(() => Object.defineProperty(window, 'isSecureContext', { value: false }));
  const open = await openUi(plain, (await server()).url);
  const notify = open.page.getByRole('button', { name: 'Notifications need HTTPS', exact: true });
  assert.equal(await notify.isDisabled(), true);
  assert.match((await notify.getAttribute('title')) ?? '', /HTTPS/);
  assert.deepEqual(open.problems, []);
});
