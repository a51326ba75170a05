// @ts-check
/**
 * @file A conversation's own git worktree: its branch in the header, the Changes button with
 * how many files differ (from the server's `changes` status after each turn that changed
 * some), and the Changes panel, which lists what the agent changed with each file's diff and
 * commits it, merges it into its base, or discards it.
 */

import { gitDiffFiles, lineStat, renderDiff } from '../diff.js';
import { api, apiError } from './api.js';
import { ask } from './dialogs.js';
import { el, ui } from './dom.js';
import { plainTitle } from './format.js';
import { state } from './state.js';

/** @typedef {import('./state.js').ChangeCounts} ChangeCounts */
/** @typedef {import('./state.js').SessionInfo} SessionInfo */

/**
 * `GET /api/sessions/{agent_id}/changes` (the fields the panel reads).
 * @typedef {object} Changes
 * @property {string} branch
 * @property {string} base
 * @property {boolean} uncommitted
 * @property {{path: string, status: string, additions: number, deletions: number, binary: boolean}[]} files
 * @property {string} diff
 * @property {boolean} truncated
 */

/** Files whose diff shows open at once; the others open on a click. */
const OPEN_FILES = 20;
/** How a file's `status` reads. */
const STATUS_LABELS = /** @type {Record<string, string>} */ ({
  added: 'added',
  modified: 'modified',
  deleted: 'deleted',
  type_changed: 'type changed',
});

/** @param {string} agentId */
function changesUrl(agentId) {
  return `/api/sessions/${encodeURIComponent(agentId)}/changes`;
}

/**
 * `2 files changed (+5 −1), not committed yet`.
 * @param {ChangeCounts} counts
 */
function countsText(counts) {
  if (counts.files === 0) return counts.uncommitted ? 'Changes not committed yet' : 'No changes';
  const files = `${counts.files} file${counts.files === 1 ? '' : 's'} changed`;
  return `${files} (${lineStat(counts.additions, counts.deletions)})${counts.uncommitted ? ', not committed yet' : ''}`;
}

/** @param {Changes} changes @returns {ChangeCounts} */
function countsOf(changes) {
  return {
    files: changes.files.length,
    additions: changes.files.reduce((sum, f) => sum + f.additions, 0),
    deletions: changes.files.reduce((sum, f) => sum + f.deletions, 0),
    uncommitted: changes.uncommitted,
  };
}

/**
 * The header's part of the conversation on screen: its branch, and the Changes button with
 * the number of changed files (asked for once when not heard yet).
 * @param {SessionInfo | undefined} info
 */
export function renderWorktree(info) {
  const worktree = info?.worktree;
  if (ui.changes.open && state.changesFor !== info?.agent_id) ui.changes.close();
  ui.branch.hidden = !worktree;
  ui.changesOpen.hidden = !worktree;
  if (!info || !worktree) return;
  ui.branch.textContent = worktree.branch;
  ui.branch.title = `Works in a git worktree of its own, on branch ${worktree.branch} made from ${worktree.base}`;
  const counts = state.changes.get(info.agent_id);
  ui.changesCount.hidden = !counts?.files;
  ui.changesCount.textContent = String(counts?.files ?? '');
  ui.changesOpen.title = counts ? countsText(counts) : 'What the agent changed in its worktree';
  if (counts?.files) ui.changesOpen.setAttribute('aria-description', countsText(counts));
  else ui.changesOpen.removeAttribute('aria-description');
  if (!counts) askCounts(info.agent_id);
}

/**
 * Asks once what a conversation's worktree changed, for the button's count (later counts
 * come with the `changes` status after each turn).
 * @param {string} agentId
 */
async function askCounts(agentId) {
  if (state.changesAsked.has(agentId)) return;
  state.changesAsked.add(agentId);
  try {
    const response = await api(changesUrl(agentId));
    if (!response.ok || state.changes.has(agentId)) return;
    /** @type {Changes} */
    const changes = await response.json();
    countsHeard(agentId, countsOf(changes));
  } catch {
    // Offline: the count shows with the next turn's status.
  }
}

/**
 * Records what a conversation's worktree changed, and shows it when it is on screen.
 * @param {string} agentId
 * @param {ChangeCounts} counts
 */
function countsHeard(agentId, counts) {
  state.changes.set(agentId, counts);
  state.changesAsked.add(agentId);
  if (agentId === state.current) renderWorktree(state.sessions.get(agentId));
}

/**
 * A `changes` status: a turn changed files in the conversation's worktree. The count is
 * shown, and an open panel of it loads again.
 * @param {string} agentId
 * @param {ChangeCounts} counts
 */
export function changesReported(agentId, counts) {
  countsHeard(agentId, counts);
  if (state.changesFor === agentId && ui.changes.open) loadPanel();
}

/**
 * A rewind put the worktree's files back: the count is asked for again, and an open panel of
 * it loads again.
 * @param {string} agentId
 */
export function filesRestored(agentId) {
  state.changes.delete(agentId);
  state.changesAsked.delete(agentId);
  if (agentId === state.current) renderWorktree(state.sessions.get(agentId));
  if (state.changesFor === agentId && ui.changes.open) loadPanel();
}

/** Opens the Changes panel of the conversation on screen. */
function openChanges() {
  const agentId = state.current;
  const worktree = agentId ? state.sessions.get(agentId)?.worktree : null;
  if (!agentId || !worktree) return;
  state.changesFor = agentId;
  ui.changesBranch.textContent = `Branch ${worktree.branch}, made from ${worktree.base}`;
  ui.changesStatus.textContent = 'Loading…';
  ui.changesError.replaceChildren();
  ui.changesFiles.replaceChildren();
  renderButtons(null);
  ui.changes.showModal();
  loadPanel();
}

/**
 * Loads what the panel's conversation changed and shows it, `note` (what an action just did)
 * first.
 * @param {string} [note]
 */
async function loadPanel(note = '') {
  const agentId = state.changesFor;
  if (!agentId) return;
  const serial = ++state.changesSerial;
  const current = () => serial === state.changesSerial && state.changesFor === agentId;
  try {
    const response = await api(changesUrl(agentId));
    if (!current()) return;
    if (!response.ok) {
      ui.changesStatus.textContent = note;
      showError(`Could not load the changes: ${await apiError(response)}`);
      return;
    }
    /** @type {Changes} */
    const changes = await response.json();
    if (current()) renderPanel(agentId, changes, note);
  } catch (err) {
    if (current()) showError(`Could not load the changes: ${/** @type {Error} */ (err).message}`);
  }
}

/**
 * @param {string} agentId
 * @param {Changes} changes
 * @param {string} note
 */
function renderPanel(agentId, changes, note) {
  const counts = countsOf(changes);
  countsHeard(agentId, counts);
  ui.changesBranch.textContent = `Branch ${changes.branch}, made from ${changes.base}`;
  const parts = [note, `${countsText(counts)}.`];
  if (counts.uncommitted) parts.push('Commit them to merge.');
  if (changes.truncated) parts.push("The diff is cut at the server's limit.");
  ui.changesStatus.textContent = parts.filter(Boolean).join(' ');
  const diffs = gitDiffFiles(changes.diff);
  ui.changesFiles.replaceChildren(
    ...changes.files.map((file, i) => {
      const li = el('li', 'changed-file');
      const details = li.appendChild(el('details'));
      details.open = i < OPEN_FILES;
      details
        .appendChild(el('summary'))
        .append(
          el('span', 'changed-path', file.path),
          el('span', `changed-status changed-${file.status}`, STATUS_LABELS[file.status] ?? file.status),
          el('span', 'diff-stat', file.binary ? 'binary' : lineStat(file.additions, file.deletions)),
        );
      const lines = diffs.get(`a/${file.path}`);
      if (file.binary) {
        details.append(el('p', 'changed-note', 'A binary file: no lines to show.'));
      } else if (lines?.length) {
        const diff = renderDiff(lines);
        diff.setAttribute('aria-label', `Changes to ${file.path}`);
        details.append(diff);
      } else {
        const why = lines || !changes.truncated ? 'No lines to show (an empty file, or only its mode changed).' : "Not shown: the diff was cut at the server's limit.";
        details.append(el('p', 'changed-note', why));
      }
      return li;
    }),
  );
  renderButtons(counts);
}

/**
 * What the panel's buttons allow: Commit with uncommitted changes, Merge once everything is
 * committed, Discard while there is anything; none while loading or acting (`counts` null).
 * @param {ChangeCounts | null} counts
 */
function renderButtons(counts) {
  ui.changesCommit.disabled = !counts?.uncommitted;
  ui.changesMerge.disabled = !counts || counts.uncommitted || counts.files === 0;
  ui.changesMerge.title = counts?.uncommitted ? 'Commit the changes first' : '';
  ui.changesStrategy.disabled = ui.changesMerge.disabled;
  ui.changesDiscard.disabled = !counts || (counts.files === 0 && !counts.uncommitted);
}

/**
 * Shows why something failed, in place of the last such message.
 * @param {string} text
 * @param {string[]} [paths] the files a merge conflicts in
 */
function showError(text, paths = []) {
  const list = el('ul', 'conflict-paths');
  list.append(...paths.map((path) => el('li', undefined, path)));
  ui.changesError.replaceChildren(el('p', undefined, text), ...(paths.length ? [list] : []));
}

/**
 * Runs one of the panel's actions on its conversation: the buttons are off meanwhile and the
 * last error goes. `action` returns what it did (shown with the changes loaded afresh), or
 * null when the user cancelled; a refusal is shown as an error.
 * @param {(agentId: string, worktree: import('./state.js').Worktree) => Promise<string | null>} action
 */
async function act(action) {
  const agentId = state.changesFor;
  const worktree = agentId ? state.sessions.get(agentId)?.worktree : null;
  if (!agentId || !worktree) return;
  ui.changesError.replaceChildren();
  renderButtons(null);
  try {
    const note = await action(agentId, worktree);
    if (note !== null) await loadPanel(note);
  } catch (err) {
    showError(/** @type {Error} */ (err).message, err instanceof Refused ? err.paths : []);
  } finally {
    if (state.changesFor === agentId) renderButtons(state.changes.get(agentId) ?? null);
  }
}

/** The server refused an action; `paths` are the files a merge conflicts in. */
class Refused extends Error {
  /**
   * @param {string} message
   * @param {string[]} paths
   */
  constructor(message, paths) {
    super(message);
    this.paths = paths;
  }
}

/**
 * POSTs an action on a conversation's changes; the answer when it succeeded.
 * @param {string} agentId
 * @param {'commit' | 'merge' | 'discard'} what
 * @param {string} failed what the error says first (`Not committed`)
 * @param {unknown} body
 */
async function post(agentId, what, failed, body) {
  const response = await api(`${changesUrl(agentId)}/${what}`, { method: 'POST', json: body });
  if (response.ok) return response;
  /** @type {string[]} */
  const paths = await response
    .clone()
    .json()
    .then((b) => (Array.isArray(b?.paths) ? b.paths.filter((/** @type {unknown} */ p) => typeof p === 'string') : []))
    .catch(() => []);
  const why = paths.length
    ? `it conflicts with its base in ${paths.length === 1 ? 'this file' : 'these files'}, and nothing was changed`
    : await apiError(response);
  throw new Refused(`${failed}: ${why}`, paths);
}

ui.changesCommit.addEventListener('click', () =>
  act(async (agentId, worktree) => {
    const title = plainTitle(state.sessions.get(agentId)?.title ?? '');
    const message = await ask({
      title: 'Commit message',
      text: `Everything changed in the worktree is committed on ${worktree.branch}.`,
      ok: 'Commit',
      value: title || 'Changes made by the agent',
    });
    if (message === null || !message.trim()) return null;
    const response = await post(agentId, 'commit', 'Not committed', { message: message.trim() });
    /** @type {{commit: string | null}} */
    const { commit } = await response.json();
    return commit ? `Committed ${commit.slice(0, 7)} on ${worktree.branch}.` : 'There was nothing to commit.';
  }),
);

ui.changesMerge.addEventListener('click', () =>
  act(async (agentId, worktree) => {
    const strategy = ui.changesStrategy.value === 'squash' ? 'squash' : 'merge';
    const how = strategy === 'squash' ? 'as one commit' : 'with a merge commit';
    const ok = await ask({
      title: `Merge ${worktree.branch} into ${worktree.base}?`,
      text: `What is committed on ${worktree.branch} lands on ${worktree.base} ${how}.`,
      ok: 'Merge',
    });
    if (ok === null) return null;
    const response = await post(agentId, 'merge', 'Not merged', { strategy });
    /** @type {{commit: string, changed: boolean}} */
    const merged = await response.json();
    return merged.changed
      ? `Merged into ${worktree.base} (${merged.commit.slice(0, 7)}).`
      : `${worktree.base} already has everything on ${worktree.branch}.`;
  }),
);

ui.changesDiscard.addEventListener('click', () =>
  act(async (agentId, worktree) => {
    const ok = await ask({
      title: 'Discard every change?',
      text: `The worktree goes back to ${worktree.base} as it is now: every change on ${worktree.branch}, committed or not, is dropped for good.`,
      ok: 'Discard',
      danger: true,
    });
    if (ok === null) return null;
    await post(agentId, 'discard', 'Not discarded', { confirm: true });
    return `Discarded: the worktree is back at ${worktree.base}.`;
  }),
);

ui.changesOpen.addEventListener('click', openChanges);
ui.changesClose.addEventListener('click', () => ui.changes.close());
ui.changes.addEventListener('close', () => {
  state.changesFor = null;
  state.changesSerial += 1;
});
