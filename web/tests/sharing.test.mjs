// Sharing a conversation between two people, each in a browser of their own against a real
// `agentmux serve` with two tokens: the owner shares it from the Share dialog and makes a link;
// the viewer finds it under "Shared with me", reads it with the owner's name on the owner's
// messages, and finds every control a viewer may not use disabled, saying why; the owner sees
// who is viewing, and a revoked share leaves the viewer's pane.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { browserTests, connection, messages, openUi, reply, send } from './helpers.mjs';

const { server, context } = browserTests();

const ALICE = 'tok-web-share-alice-0123456789';
const BOB = 'tok-web-share-bob-0123456789ab';

/**
 * Opens the UI in a browser of its own and signs in with `token`.
 * @param {string} url
 * @param {string} token
 */
async function signedIn(url, token) {
  const opened = await openUi(await context(), url, { connected: false });
  const form = opened.page.getByRole('form', { name: 'Sign in' });
  await form.getByLabel('This server asks for an API token.').fill(token);
  await form.getByRole('button', { name: 'Sign in', exact: true }).click();
  await connection(opened.page, 'Connected').waitFor();
  return opened;
}

/**
 * A named button of `scope`.
 * @param {import('playwright-core').Page | import('playwright-core').Locator} scope
 * @param {string} name
 */
function button(scope, name) {
  return scope.getByRole('button', { name, exact: true });
}

test('the owner shares a conversation; the viewer reads it with every control it may not use disabled', async () => {
  const s = await server({ config: `[auth.tokens]\n"${ALICE}" = "alice"\n"${BOB}" = "bob"\n` });
  const alice = await signedIn(s.url, ALICE);
  await send(alice.page, 'hello team');
  await reply(alice.page, 'Echo: hello team (turn 1)');
  await messages(alice.page, 'Turn summary').waitFor();

  // Alice shares it with Bob as a viewer from the Share dialog, and makes a link.
  await button(alice.page, 'Share').click();
  const dialog = alice.page.getByRole('dialog', { name: 'Share this conversation' });
  await dialog.getByRole('textbox', { name: 'Principal to share with' }).fill('bob');
  await dialog.getByRole('combobox', { name: 'Role', exact: true }).selectOption('viewer');
  await button(dialog, 'Add').click();
  const shares = dialog.getByRole('list', { name: 'Shared with' });
  await shares.getByRole('listitem').filter({ hasText: 'bob' }).filter({ hasText: 'viewer' }).waitFor();
  // Sharing with someone who can't sign in is refused, and says so.
  await dialog.getByRole('textbox', { name: 'Principal to share with' }).fill('mallory');
  await button(dialog, 'Add').click();
  await dialog.getByRole('alert').filter({ hasText: 'mallory' }).waitFor();
  await button(dialog, 'Make link').click();
  const link = dialog.getByRole('textbox', { name: 'Share link' });
  await link.waitFor();
  assert.match(await link.inputValue(), /^http:\/\/127\.0\.0\.1:\d+\/#link=[0-9a-f]{16}\.[0-9a-f]{64}$/);
  await button(dialog, 'Close').click();

  // Bob finds it under "Shared with me", with its owner and his role, and opens it.
  const bob = await signedIn(s.url, BOB);
  const group = bob.page.getByRole('list', { name: 'Shared with me' });
  const entry = group.getByRole('button', { name: /^hello team / });
  await entry.filter({ hasText: 'alice · viewer' }).waitFor();
  await entry.click();
  await reply(bob.page, 'Echo: hello team (turn 1)');
  // Alice's message carries her name for him.
  const hers = messages(bob.page, 'alice');
  await hers.waitFor();
  assert.match(await hers.textContent(), /^alice/);

  // Every control a viewer may not use is disabled and says why.
  const why = 'Shared with you as a viewer: only its owner or an editor can do this';
  const owners = 'Only the owner of this conversation can do this';
  const box = bob.page.getByRole('textbox', { name: 'Message', exact: true });
  assert.equal(await box.isDisabled(), true);
  for (const [name, reason] of [
    ['Send', why],
    ['Attach image', why],
    ['Share', owners],
    ['Rename', owners],
    ['Delete', owners],
    ['Rewind to here', why],
  ]) {
    const control = button(bob.page, name).first();
    assert.equal(await control.isDisabled(), true, name);
    assert.equal(await control.getAttribute('title'), reason, name);
  }
  for (const name of ['Model', 'Permission mode']) {
    const picker = bob.page.getByRole('combobox', { name, exact: true });
    assert.equal(await picker.isDisabled(), true, name);
  }
  // What a viewer may do stays on: fork and export.
  assert.equal(await button(bob.page, 'Fork from here').isDisabled(), false);
  assert.equal(await button(bob.page, 'Export').isDisabled(), false);

  // Alice sees who is viewing.
  await alice.page.getByRole('status', { name: 'Who is viewing' }).filter({ hasText: 'Viewing: alice, bob' }).waitFor();

  // Alice revokes the share: Bob's pane says so.
  await button(alice.page, 'Share').click();
  await button(dialog, 'Revoke bob').click();
  await shares.getByRole('listitem').waitFor({ state: 'detached' });
  await messages(bob.page, 'Notice').filter({ hasText: 'no longer shared with you' }).waitFor();
  // The answers the page expects and handles: the sign-in's 401, the refused share's 400, and
  // the revoked alias's 404.
  const unexpected = (/** @type {string[]} */ list) => list.filter((p) => !/status of (400|401|404) /.test(p));
  assert.deepEqual(unexpected(alice.problems), []);
  assert.deepEqual(unexpected(bob.problems), []);
});
