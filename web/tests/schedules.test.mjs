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
  await page.locator('#open-schedules').click();
  await page.locator('#schedules-empty').waitFor();

  // A zero interval is refused by the server, and its typed error shown.
  await page.locator('#schedule-name').fill('Heartbeat');
  await page.locator('#schedule-agent').fill('ui-sched');
  await page.locator('#schedule-content').fill('ping');
  await page.locator('#schedule-when').fill('0');
  await page.locator('#schedule-save').click();
  await page.locator('#schedule-error').filter({ hasText: 'invalid_schedule' }).waitFor();
  assert.deepEqual(await stored(s.url), []);

  await page.locator('#schedule-when').fill('3600');
  await page.locator('#schedule-save').click();
  const item = page.locator('.schedule').filter({ hasText: 'Heartbeat' });
  await item.waitFor();
  assert.equal(await item.locator('.schedule-timing').textContent(), 'every 3600 s');
  assert.match(await item.locator('.schedule-state').textContent() ?? '', /^next /);
  const [created] = await stored(s.url);
  assert.equal(created.name, 'Heartbeat');
  assert.equal(created.every_secs, 3600);
  assert.equal(created.mode, 'same');

  // Run now: the conversation shows up in the sidebar marked as scheduled, and its run is
  // marked before the prompt.
  await item.locator('.schedule-run').click();
  await item.locator('.schedule-state').filter({ hasText: 'last run' }).waitFor();
  await page.locator('#schedules-close').click();
  const entry = page.locator('.session[data-agent-id="ui-sched"]');
  await entry.waitFor();
  assert.equal(await entry.locator('.session-scheduled').textContent(), 'scheduled');
  assert.equal(await entry.locator('.session-title').textContent(), 'Heartbeat');
  await entry.click();
  await page.locator('.msg.assistant').filter({ hasText: 'Echo: ping (turn 1)' }).waitFor();
  await page.locator('.msg.result').waitFor();
  const lines = await transcript(page);
  const mark = lines.findIndex((l) => l.includes('Scheduled run: Heartbeat'));
  assert.ok(mark >= 0, lines.join('\n'));
  assert.equal(lines[mark + 1], 'user: ping');

  // Pause and resume.
  await page.locator('#open-schedules').click();
  await item.locator('.schedule-toggle').filter({ hasText: 'Pause' }).click();
  await item.locator('.schedule-state').filter({ hasText: /^paused/ }).waitFor();
  assert.equal((await stored(s.url))[0].enabled, false);
  await item.locator('.schedule-toggle').filter({ hasText: 'Resume' }).click();
  await item.locator('.schedule-state').filter({ hasText: /^next / }).waitFor();
  assert.equal((await stored(s.url))[0].enabled, true);

  // Edit: the form is filled with the schedule; a cron expression replaces the interval.
  await item.locator('.schedule-edit').click();
  assert.equal(await page.locator('#schedule-name').inputValue(), 'Heartbeat');
  assert.equal(await page.locator('#schedule-when').inputValue(), '3600');
  await page.locator('#schedule-name').fill('Weekday mornings');
  await page.locator('#schedule-kind').selectOption('cron');
  await page.locator('#schedule-when').fill('0 8 * * 1-5');
  await page.locator('#schedule-save').click();
  const edited = page.locator('.schedule').filter({ hasText: 'Weekday mornings' });
  await edited.waitFor();
  assert.equal(await edited.locator('.schedule-timing').textContent(), 'cron 0 8 * * 1-5');
  const [after] = await stored(s.url);
  assert.deepEqual([after.name, after.cron, after.every_secs], ['Weekday mornings', '0 8 * * 1-5', null]);

  // Delete, after confirming.
  await edited.locator('.schedule-delete').click();
  await page.locator('#dialog-ok').click();
  await page.locator('#schedules-empty').waitFor();
  assert.deepEqual(await stored(s.url), []);
  // The deliberate 400 is the only thing the console reported.
  assert.deepEqual(
    problems.filter((p) => !p.includes('status of 400')),
    [],
  );
});
