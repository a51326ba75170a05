// The schedules dialog of the web UI against a real `agentmux serve` (demo agent): create (with
// the server's typed refusal shown), run now, the run marked in the sidebar and the
// conversation, pause and resume, edit, delete.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { WAIT_MS, browserTests, openUi, transcript } from './helpers.mjs';

const { server, context } = browserTests();

/**
 * The server's list of schedules.
 * @param {string} base
 */
async function stored(base) {
  const response = await fetch(`${base}/api/schedules`, { signal: AbortSignal.timeout(WAIT_MS) });
  assert.equal(response.status, 200);
  return (await response.json()).schedules;
}

test('schedules are created, run, marked, paused, edited and deleted from the page', async () => {
  const s = await server();
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'Schedules', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'Schedules' });
  await dialog.getByText('No schedule yet.').waitFor();
  const field = (/** @type {string} */ name) => dialog.getByRole('textbox', { name, exact: true });

  // A zero interval is refused by the server, and its typed error shown.
  await field('Name').fill('Heartbeat');
  await field('Prompt').fill('ping');
  await field('Interval or cron expression').fill('0');
  await dialog.getByRole('button', { name: 'Create' }).click();
  await dialog.getByRole('alert').filter({ hasText: 'invalid_schedule' }).waitFor();
  assert.deepEqual(await stored(s.url), []);

  await field('Interval or cron expression').fill('3600');
  await dialog.getByRole('button', { name: 'Create' }).click();
  const item = dialog.getByRole('listitem').filter({ hasText: 'Heartbeat' });
  await item.getByText('every 3600 s', { exact: true }).waitFor();
  await item.getByText(/^next /).waitFor();
  const [created] = await stored(s.url);
  assert.equal(created.name, 'Heartbeat');
  assert.equal(created.every_secs, 3600);
  assert.equal(created.mode, 'same');

  // Run now: the conversation shows up in the sidebar marked as scheduled, and its run is
  // marked before the prompt.
  await item.getByRole('button', { name: 'Run now' }).click();
  await item.getByText(/last run/).waitFor();
  await dialog.getByRole('button', { name: 'Close' }).click();
  const entry = page.getByRole('button', { name: /^Heartbeat/ });
  await entry.getByText('scheduled', { exact: true }).waitFor();
  await entry.click();
  await page.getByText('Echo: ping (turn 1)').first().waitFor();
  const lines = await transcript(page);
  const mark = lines.findIndex((l) => l.includes('Scheduled run: Heartbeat'));
  assert.ok(mark >= 0, lines.join('\n'));
  assert.equal(lines[mark + 1], 'You: ping');

  // Pause and resume.
  await page.getByRole('button', { name: 'Schedules', exact: true }).click();
  await item.getByRole('button', { name: 'Pause' }).click();
  await item.getByText(/^paused/).waitFor();
  assert.equal((await stored(s.url))[0].enabled, false);
  await item.getByRole('button', { name: 'Resume' }).click();
  await item.getByText(/^next /).waitFor();
  assert.equal((await stored(s.url))[0].enabled, true);

  // Edit: the form is filled with the schedule; a cron expression replaces the interval.
  await item.getByRole('button', { name: 'Edit' }).click();
  assert.equal(await field('Name').inputValue(), 'Heartbeat');
  assert.equal(await field('Interval or cron expression').inputValue(), '3600');
  await field('Name').fill('Weekday mornings');
  await dialog.getByRole('combobox', { name: 'Timing' }).selectOption('cron');
  await field('Interval or cron expression').fill('0 8 * * 1-5');
  await dialog.getByRole('button', { name: 'Save' }).click();
  const edited = dialog.getByRole('listitem').filter({ hasText: 'Weekday mornings' });
  await edited.getByText('cron 0 8 * * 1-5', { exact: true }).waitFor();
  const [after] = await stored(s.url);
  assert.deepEqual([after.name, after.cron, after.every_secs], ['Weekday mornings', '0 8 * * 1-5', null]);

  // Delete, after confirming.
  await edited.getByRole('button', { name: 'Delete' }).click();
  await page
    .getByRole('dialog', { name: 'Delete the schedule “Weekday mornings”?' })
    .getByRole('button', { name: 'Delete' })
    .click();
  await dialog.getByText('No schedule yet.').waitFor();
  assert.deepEqual(await stored(s.url), []);
  // The deliberate 400 is the only thing the console reported.
  assert.deepEqual(
    problems.filter((p) => !p.includes('status of 400')),
    [],
  );
});
