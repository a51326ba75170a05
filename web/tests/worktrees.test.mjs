// Browser tests of conversations in git worktrees of their own, driven through accessible
// names against a real server and a real git repository under a project root: "New session"
// offers the worktree, the header shows the branch, and the Changes panel lists and diffs what
// changed, commits it, merges it into its base (seen with git), discards it after asking, and
// names the files of a merge conflict; the count follows each turn without polling; a rewind
// says what happens to the files and, in a worktree, puts them back, or says they stay when
// there were too many to record.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { browserTests, currentAgent, messages, openUi, reply, send } from './helpers.mjs';

const { server, context } = browserTests();

const base = realpathSync(mkdtempSync(join(tmpdir(), 'agentmux-worktrees-')));
after(() => rmSync(base, { recursive: true, force: true }));

/**
 * Runs git in `dir`; its output without the last newline.
 * @param {string} dir
 * @param {...string} args
 */
function git(dir, ...args) {
  return execFileSync('git', args, { cwd: dir, encoding: 'utf8' }).replace(/\n$/, '');
}

/**
 * A project root of its own with a repository `repo` (`a.txt` committed on `main`) and a
 * plain directory `plain`.
 * @param {string} name
 * @param {string} [rootOptions] more of the root's entry (`, worktrees = true`)
 */
function project(name, rootOptions = '') {
  const root = join(base, name);
  const repo = join(root, 'repo');
  mkdirSync(repo, { recursive: true });
  mkdirSync(join(root, 'plain'));
  git(repo, 'init', '-q', '-b', 'main');
  git(repo, 'config', 'user.name', 'Dev');
  git(repo, 'config', 'user.email', 'dev@example.com');
  writeFileSync(join(repo, 'a.txt'), 'one\ntwo\n');
  git(repo, 'add', '.');
  git(repo, 'commit', '-q', '-m', 'first');
  const config = `[projects]\nroots = [{ path = ${JSON.stringify(root)}${rootOptions} }]\n`;
  return { root, repo, plain: join(root, 'plain'), config };
}

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

/**
 * Starts a new session in `dir` through the dialog, the worktree box as `worktree` says.
 * @param {import('playwright-core').Page} page
 * @param {string} dir
 * @param {boolean} worktree
 */
async function newSessionIn(page, dir, worktree) {
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(dir);
  await dialog.getByRole('checkbox', { name: 'Isolated worktree' }).setChecked(worktree);
  await dialog.getByRole('button', { name: 'Start' }).click();
  await dialog.waitFor({ state: 'hidden' });
}

/**
 * Starts a conversation in a worktree of `repo` whose first turn, held at its gate, finds the
 * files `files` written into the worktree meanwhile (as an agent would). Returns its agent_id
 * and summary.
 * @param {import('playwright-core').Page} page
 * @param {import('./helpers.mjs').Server} s
 * @param {string} repo
 * @param {Record<string, string>} files
 */
async function agentWrites(page, s, repo, files) {
  await newSessionIn(page, repo, true);
  await send(page, 'write the files');
  await messages(page, 'You').waitFor();
  const agentId = await currentAgent(page);
  const summary = await session(s.url, agentId);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(summary.cwd, name), text);
  s.openGate(agentId, 1);
  await reply(page, 'Echo: write the files (turn 1)');
  return { agentId, summary };
}

/**
 * Runs turn `turn` of conversation `agentId` (sent by `sendIt`), held at its gate until `write`
 * has changed files in the worktree, as the agent would.
 * @param {import('playwright-core').Page} page
 * @param {import('./helpers.mjs').Server} s
 * @param {string} agentId
 * @param {number} turn
 * @param {() => Promise<unknown>} sendIt
 * @param {() => void} write
 */
async function turnWrites(page, s, agentId, turn, sendIt, write) {
  await sendIt();
  // The reply's first word: the turn runs, its checkpoint taken. (By class: an open dialog
  // hides the conversation from the accessibility tree.)
  const writing = page.locator('#messages .msg.streaming');
  await writing.waitFor();
  write();
  s.openGate(agentId, turn);
  await writing.waitFor({ state: 'detached' });
}

/**
 * The Changes button once it says `description` (the count of changed files).
 * @param {import('playwright-core').Page} page
 * @param {string} description
 */
function changesButton(page, description) {
  return page
    .getByRole('button', { name: 'Changes', exact: true })
    .and(page.locator(`[aria-description="${description}"]`))
    .waitFor();
}

/**
 * The open Changes panel, once it shows `status`.
 * @param {import('playwright-core').Page} page
 * @param {string | RegExp} status
 */
async function changesShowing(page, status) {
  const panel = page.getByRole('dialog', { name: 'Changes', exact: true });
  await panel.getByRole('status').filter({ hasText: status }).waitFor();
  return panel;
}

/**
 * Answers the question asked in the page's dialog (`title`) with its button `ok`, after
 * typing `text` when given.
 * @param {import('playwright-core').Page} page
 * @param {string} title
 * @param {string} ok
 * @param {string} [text]
 */
async function answer(page, title, ok, text) {
  const question = page.getByRole('dialog', { name: title, exact: true });
  if (text !== undefined) await question.getByRole('textbox').fill(text);
  await question.getByRole('button', { name: ok, exact: true }).click();
  await question.waitFor({ state: 'hidden' });
}

test("a worktree conversation's changes are reviewed, committed and merged into its base from the Changes panel", async () => {
  const { repo, plain, config } = project('review');
  const s = await server({ config, gates: true });
  const { page, problems, requests } = await openUi(await context(), s.url);

  // The box is offered in a repository only, unchecked by default there.
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  const box = dialog.getByRole('checkbox', { name: 'Isolated worktree' });
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(plain);
  assert.equal(await box.isVisible(), false);
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(repo);
  assert.equal(await box.isChecked(), false);
  await dialog.getByRole('button', { name: 'Cancel' }).click();

  const { agentId, summary } = await agentWrites(page, s, repo, { 'a.txt': 'one\nTWO\n', 'note.txt': 'hello\nworld\n' });
  const branch = `agentmux/${agentId}`;
  assert.equal(summary.worktree.branch, branch);
  assert.equal(summary.worktree.base, 'main');
  await page.locator('#branch', { hasText: branch }).waitFor();
  await changesButton(page, '2 files changed (+3 −1), not committed yet');

  // The next turn's changes reach the button with the turn's status: no asking, no polling.
  const asked = () => requests.filter((url) => new URL(url).pathname.endsWith('/changes')).length;
  const before = asked();
  await turnWrites(page, s, agentId, 2, () => send(page, 'one more'), () => writeFileSync(join(summary.cwd, 'more.txt'), 'more\n'));
  await changesButton(page, '3 files changed (+4 −1), not committed yet');
  assert.equal(asked(), before);

  // An open panel follows a turn sent from elsewhere.
  await page.getByRole('button', { name: 'Changes', exact: true }).click();
  const panel = await changesShowing(page, '3 files changed (+4 −1), not committed yet.');
  await turnWrites(
    page,
    s,
    agentId,
    3,
    () => fetch(`${s.url}/api/sessions/${agentId}/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: 'from a script' }) }),
    () => rmSync(join(summary.cwd, 'more.txt')),
  );
  await changesShowing(page, '2 files changed (+3 −1), not committed yet.');
  const file = (/** @type {string} */ path) => panel.getByRole('listitem').filter({ hasText: path });
  await file('note.txt').getByText('added').waitFor();
  await file('note.txt').getByText('+2 −0').waitFor();
  await file('a.txt').getByText('+1 −1').waitFor();
  const noteDiff = panel.getByRole('group', { name: 'Changes to note.txt' });
  assert.deepEqual(await noteDiff.locator('.diff-line').allTextContents(), ['+ hello', '+ world']);
  const aDiff = panel.getByRole('group', { name: 'Changes to a.txt' });
  assert.deepEqual(await aDiff.locator('.diff-line').allTextContents(), ['  one', '- two', '+ TWO']);
  // Nothing is merged before it is committed.
  assert.equal(await panel.getByRole('button', { name: 'Merge', exact: true }).isDisabled(), true);

  await panel.getByRole('button', { name: 'Commit', exact: true }).click();
  await answer(page, 'Commit message', 'Commit', 'Add a note');
  await changesShowing(page, /^Committed [0-9a-f]{7} on agentmux\/.* 2 files changed \(\+3 −1\)\.$/);
  assert.equal(git(repo, 'log', '-1', '--format=%s', branch), 'Add a note');

  await panel.getByRole('button', { name: 'Merge', exact: true }).click();
  await answer(page, `Merge ${branch} into main?`, 'Merge');
  await changesShowing(page, /^Merged into main \([0-9a-f]{7}\)\. No changes\.$/);
  // The base branch has it, and its clean checkout moved with it.
  assert.equal(git(repo, 'log', '-1', '--format=%s', 'main'), `Merge branch '${branch}'`);
  assert.equal(git(repo, 'show', 'main:note.txt'), 'hello\nworld');
  assert.equal(readFileSync(join(repo, 'a.txt'), 'utf8'), 'one\nTWO\n');
  assert.equal(git(repo, 'status', '--porcelain'), '');

  // In a worktree, a rewind takes the files back too.
  await panel.getByRole('button', { name: 'Close', exact: true }).click();
  await page.getByRole('button', { name: 'Rewind to here' }).first().click();
  const rewind = page.getByRole('dialog', { name: 'Rewind to here?' });
  await rewind.getByText('The files in its worktree go back to how they were at this turn too.').waitFor();
  await rewind.getByRole('button', { name: 'Cancel' }).click();
  assert.deepEqual(problems, []);
});

test('Discard asks first, and a merge conflict names its files and changes nothing', async () => {
  const { repo, config } = project('conflict');
  const s = await server({ config, gates: true });
  const { page, problems } = await openUi(await context(), s.url);
  // A name git quotes in its diff, and markup in a name and in a file: all shown as text.
  const odd = 'café <img src=x onerror=alert(1)>.txt';
  const { agentId, summary } = await agentWrites(page, s, repo, { 'a.txt': 'one\nmine\n', [odd]: '<script>alert(2)</script>\n' });
  const branch = `agentmux/${agentId}`;
  // Meanwhile the base moves on in the same line.
  writeFileSync(join(repo, 'a.txt'), 'one\ntheirs\n');
  git(repo, 'commit', '-q', '-am', 'theirs');
  const before = git(repo, 'rev-parse', 'main');

  await page.getByRole('button', { name: 'Changes', exact: true }).click();
  const panel = await changesShowing(page, '2 files changed (+2 −1), not committed yet.');
  const oddDiff = panel.getByRole('group', { name: `Changes to ${odd}` });
  assert.deepEqual(await oddDiff.locator('.diff-line').allTextContents(), ['+ <script>alert(2)</script>']);
  assert.equal(await page.locator('img, script:not([src])').count(), 0);
  await panel.getByRole('button', { name: 'Commit', exact: true }).click();
  await answer(page, 'Commit message', 'Commit', 'Mine');
  await changesShowing(page, /^Committed /);
  await panel.getByRole('combobox', { name: 'Merge strategy' }).selectOption('squash');
  await panel.getByRole('button', { name: 'Merge', exact: true }).click();
  await answer(page, `Merge ${branch} into main?`, 'Merge');
  const alert = panel.getByRole('alert');
  await alert.getByText('Not merged: it conflicts with its base in this file, and nothing was changed').waitFor();
  assert.deepEqual(await alert.getByRole('listitem').allTextContents(), ['a.txt']);
  assert.equal(git(repo, 'rev-parse', 'main'), before);
  assert.equal(readFileSync(join(repo, 'a.txt'), 'utf8'), 'one\ntheirs\n');

  // Cancelled, a discard drops nothing; confirmed, the worktree is its base again.
  await panel.getByRole('button', { name: 'Discard', exact: true }).click();
  await answer(page, 'Discard every change?', 'Cancel');
  assert.equal(readFileSync(join(summary.cwd, 'a.txt'), 'utf8'), 'one\nmine\n');
  await panel.getByRole('button', { name: 'Discard', exact: true }).click();
  await answer(page, 'Discard every change?', 'Discard');
  await changesShowing(page, 'Discarded: the worktree is back at main. No changes.');
  assert.equal(await alert.count(), 0, 'the error went with the next action');
  assert.equal(readFileSync(join(summary.cwd, 'a.txt'), 'utf8'), 'one\ntheirs\n');
  assert.equal(existsSync(join(summary.cwd, odd)), false);
  assert.equal(git(summary.cwd, 'rev-parse', 'HEAD'), before);
  // The browser logs the refused merge, and nothing else went wrong.
  assert.deepEqual(problems, ['console error: Failed to load resource: the server responded with a status of 409 (Conflict)']);
});

test('a root that makes worktrees the default checks the box, and unchecking it works in the repository itself', async () => {
  const { repo, config } = project('default', ', worktrees = true');
  const s = await server({ config });
  const { page, problems } = await openUi(await context(), s.url);
  await page.getByRole('button', { name: 'New session', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'New session' });
  await dialog.getByRole('combobox', { name: 'Project' }).selectOption(repo);
  assert.equal(await dialog.getByRole('checkbox', { name: 'Isolated worktree' }).isChecked(), true);
  await dialog.getByRole('button', { name: 'Cancel' }).click();

  await newSessionIn(page, repo, false);
  await send(page, 'in the repository');
  await reply(page, 'Echo: in the repository (turn 1)');
  const shared = await session(s.url, await currentAgent(page));
  assert.equal(shared.worktree, null);
  assert.equal(shared.cwd, repo);
  assert.equal(await page.getByRole('button', { name: 'Changes', exact: true }).isVisible(), false);
  // Without a worktree, a rewind says plainly that files stay as they are.
  await page.getByRole('button', { name: 'Rewind to here' }).click();
  const rewind = page.getByRole('dialog', { name: 'Rewind to here?' });
  await rewind.getByText('Files on disk are not restored: only the messages go back.').waitFor();
  await rewind.getByRole('button', { name: 'Cancel' }).click();
  assert.deepEqual(problems, []);
});

test('a rewind in a worktree puts its files back, and the count with them', async () => {
  const { repo, config } = project('rewind');
  const s = await server({ config, gates: true });
  const { page, problems } = await openUi(await context(), s.url);
  const { agentId, summary } = await agentWrites(page, s, repo, { 'a.txt': 'one\nTWO\n' });
  await changesButton(page, '1 file changed (+1 −1), not committed yet');
  await turnWrites(page, s, agentId, 2, () => send(page, 'and a new file'), () => writeFileSync(join(summary.cwd, 'new.txt'), 'new\n'));
  await changesButton(page, '2 files changed (+2 −1), not committed yet');

  await page.getByRole('button', { name: 'Rewind to here' }).first().click();
  await answer(page, 'Rewind to here?', 'Rewind');
  await messages(page, 'Notice').filter({ hasText: 'Rewound to an earlier turn, its files too' }).waitFor();
  await changesButton(page, '1 file changed (+1 −1), not committed yet');
  assert.equal(existsSync(join(summary.cwd, 'new.txt')), false);
  assert.equal(readFileSync(join(summary.cwd, 'a.txt'), 'utf8'), 'one\nTWO\n');
  assert.deepEqual(problems, []);
});

test('a rewind to a turn whose files were too many to record says they stay as they are', async () => {
  const { repo, config } = project('capped');
  const s = await server({ config: `${config}[worktrees]\nmax_checkpoint_bytes = 1000\n`, gates: true });
  const { page, problems } = await openUi(await context(), s.url);
  const { agentId, summary } = await agentWrites(page, s, repo, { 'a.txt': 'one\nTWO\n' });
  writeFileSync(join(summary.cwd, 'big.txt'), 'x'.repeat(2000));
  await turnWrites(page, s, agentId, 2, () => send(page, 'and a new file'), () => writeFileSync(join(summary.cwd, 'new.txt'), 'new\n'));
  await messages(page, 'Error').filter({ hasText: 'over worktrees.max_checkpoint_bytes' }).waitFor();
  // The page knows the conversation has a worktree once it shows its branch.
  await page.locator('#branch', { hasText: `agentmux/${agentId}` }).waitFor();

  await page.getByRole('button', { name: 'Rewind to here' }).first().click();
  await answer(page, 'Rewind to here?', 'Rewind');
  const notice = messages(page, 'Notice').filter({ hasText: 'Rewound to an earlier turn; its files stay as they are' });
  await notice.waitFor();
  assert.match((await notice.getAttribute('title')) ?? '', /over worktrees\.max_checkpoint_bytes/);
  assert.equal(readFileSync(join(summary.cwd, 'new.txt'), 'utf8'), 'new\n');
  assert.deepEqual(problems, []);
});
