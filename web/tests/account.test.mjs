// Browser tests of the Settings dialog: a member sets their own agent credential by name (the
// value is never shown again) and removes it; a turn refused over a conversation's cap shows the
// figures, and its owner raises the cap there; the usage of the day shows as a bar of the chart;
// an admin sets a member's daily cap there.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { browserTests, currentAgent, messages, openUi, reply, send } from './helpers.mjs';

const { server, context } = browserTests();

/** A secret key, so that the server keeps credentials. */
const KEY = '[credentials]\nsecret_key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="\n';

test('a member sets their own credential by name, never sees it again, and removes it', async () => {
  const s = await server({ fakeClaude: true, config: KEY });
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'Settings', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'Settings' });
  const claude = dialog.locator('form[data-agent="claude"]');
  await claude.getByText('Nothing set.').waitFor();
  await claude.getByRole('combobox', { name: 'Variable for claude' }).selectOption('ANTHROPIC_API_KEY');
  await claude.getByRole('textbox', { name: 'Value for claude' }).fill('sk-web-secret-1234');
  await claude.getByRole('button', { name: 'Save' }).click();
  await dialog.getByText('Saved for claude').waitFor();
  await claude.getByText(/^Set: ANTHROPIC_API_KEY \(set /).waitFor();
  assert.equal(await claude.getByRole('textbox', { name: 'Value for claude' }).inputValue(), '');
  assert.ok(!(await page.content()).includes('sk-web-secret-1234'), 'the value is not on the page');
  const listed = await (await fetch(`${s.url}/api/me/credentials/claude`)).json();
  assert.deepEqual(listed.set.map((/** @type {any} */ c) => c.name), ['ANTHROPIC_API_KEY']);

  await claude.getByRole('button', { name: 'Remove all' }).click();
  await page.getByRole('dialog', { name: 'Remove your credentials for claude?' }).getByRole('button', { name: 'Remove' }).click();
  await claude.getByText('Nothing set.').waitFor();
  assert.deepEqual(problems, []);
});

test("a turn over the conversation's cap shows the figures, its owner raises it, and the day's usage is charted", async () => {
  const s = await server({ delayMs: 0 });
  const { page, problems } = await openUi(await context(), s.url);
  await send(page, 'one');
  await reply(page, 'Echo: one (turn 1)');
  const agentId = await currentAgent(page);
  const capped = await fetch(`${s.url}/api/sessions/${agentId}/budget`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ budget_usd: 0.0001 }),
  });
  assert.equal(capped.status, 200);

  await send(page, 'two');
  const notice = messages(page, 'Notice').filter({ hasText: "this conversation's spending cap of $0.0001 is reached" });
  await notice.waitFor();
  await notice.getByRole('button', { name: 'Raise cap' }).click();
  const ask = page.getByRole('dialog', { name: 'Raise this conversation’s cap' });
  await ask.getByRole('textbox').fill('1');
  await ask.getByRole('button', { name: 'Raise' }).click();
  await notice.getByText('Cap raised to $1.00; send again.').waitFor();
  await send(page, 'three');
  await reply(page, 'Echo: three (turn 2)');

  await page.getByRole('button', { name: 'Settings', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'Settings' });
  const today = new Date().toISOString().slice(0, 10);
  const bar = dialog.locator(`svg.usage-chart rect[data-day="${today}"]`);
  await bar.waitFor();
  assert.ok(Number(await bar.getAttribute('height')) > 0, 'the day has a bar');
  assert.equal(await bar.locator('title').textContent(), `${today}: $0.0002`);
  const total = dialog.locator('.usage-table tbody tr').last();
  assert.equal((await total.locator('td').first().textContent()), 'total');
  assert.equal((await total.locator('td').last().textContent()), '2');
  // The server's only principal is its admin: they cap a day at what was spent, and the
  // next turn is refused.
  await dialog.getByRole('textbox', { name: 'Daily cap (USD)' }).fill('0.0002');
  await dialog.getByRole('button', { name: 'Set caps' }).click();
  await dialog.getByText('today: $0.0002 of $0.0002').waitFor();
  const budget = await (await fetch(`${s.url}/api/budgets/me`)).json();
  assert.equal(budget.daily_usd, 0.0002);
  await dialog.getByRole('button', { name: 'Close' }).click();
  await send(page, 'four');
  await messages(page, 'Notice').filter({ hasText: 'your daily spending cap of $0.0002 is reached' }).waitFor();
  // The refused turn's error is shown as such; nothing else went wrong.
  assert.deepEqual(
    problems.filter((p) => !p.includes('budget_exceeded')),
    [],
  );
});
