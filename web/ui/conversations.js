// @ts-check
/**
 * @file Opening, starting and managing conversations: which one is on screen, and renaming,
 * deleting, exporting, rewinding and forking them over the REST API.
 */

import { randomId } from '../client.js';
import { api, apiError, client } from './api.js';
import { autosize, saveDraft } from './composer.js';
import { ask } from './dialogs.js';
import { el, ui } from './dom.js';
import { plainTitle } from './format.js';
import { renderControls, renderHeader } from './header.js';
import { clearAttention, renderTabTitle } from './notifications.js';
import { sendPresence } from './push.js';
import { closeSidebar, fromApi, refreshSessions, renderSidebar, saveLocalSessions, sortedSessions } from './sidebar.js';
import { CURRENT_KEY, DRAFT_PREFIX, state } from './state.js';
import { View, notice } from './view.js';

/** @typedef {import('./state.js').ApiSession} ApiSession */

/** @param {string} agentId */
export function openSession(agentId) {
  if (state.current && state.current !== agentId) saveDraft(state.current);
  const previous = state.current ? state.sessions.get(state.current) : undefined;
  if (
    previous &&
    !previous.title &&
    previous.agent_id !== agentId &&
    client.lastSeq(previous.agent_id) === 0 &&
    !localStorage.getItem(DRAFT_PREFIX + previous.agent_id)
  ) {
    // A new session left without a message (or a draft) is not worth a sidebar entry.
    state.sessions.delete(previous.agent_id);
    state.views.get(previous.agent_id)?.close();
    state.views.delete(previous.agent_id);
    saveLocalSessions();
  }
  if (!state.sessions.has(agentId)) {
    const now = new Date().toISOString();
    state.sessions.set(agentId, { agent_id: agentId, title: '', created_at: now, last_active_at: now });
    saveLocalSessions();
  }
  state.current = agentId;
  sendPresence();
  localStorage.setItem(CURRENT_KEY, agentId);
  if (decodeURIComponent(location.hash.slice(1)) !== agentId) {
    history.replaceState(null, '', `#${encodeURIComponent(agentId)}`);
  }
  let view = state.views.get(agentId);
  if (!view) {
    const info = state.sessions.get(agentId);
    const known = info?.stored || !state.sessionsApi || client.lastSeq(agentId) > 0;
    view = new View(agentId, !known);
    state.views.set(agentId, view);
    if (!known && !state.newOptions.has(agentId) && !info?.fresh) confirm(agentId);
  }
  ui.messages.replaceChildren(view.root);
  view.scrollToEnd();
  closeSidebar();
  if (document.visibilityState === 'visible') clearAttention(agentId);
  ui.input.value = localStorage.getItem(DRAFT_PREFIX + agentId) ?? '';
  autosize();
  renderHeader();
  renderControls();
  renderSidebar();
  ui.input.focus();
}

/**
 * Asks the server whether a conversation this page has not seen listed exists (one named by
 * the address, remembered from an earlier visit, or this browser's own list): it is followed
 * when it does; when it does not, it is a new conversation, whatever this browser remembered of
 * it (another server's, or one deleted meanwhile).
 * @param {string} agentId
 */
async function confirm(agentId) {
  await refreshSessions();
  let exists = !!state.sessions.get(agentId)?.stored || !state.sessionsApi;
  // Not among the newest: asked for by itself, unless the list was all of them.
  if (!exists && !state.listedAll) {
    try {
      const response = await api(`/api/sessions/${encodeURIComponent(agentId)}`);
      if (response.ok) {
        const known = state.sessions.get(agentId);
        if (known) Object.assign(known, fromApi(await response.json()));
      }
      exists = response.ok || response.status !== 404;
    } catch {
      // Offline: followed as before, the socket tells.
      exists = true;
    }
  }
  if (exists) {
    client.follow(agentId);
    return;
  }
  const info = state.sessions.get(agentId);
  if (info) {
    const now = new Date().toISOString();
    state.sessions.set(agentId, { agent_id: agentId, title: '', created_at: now, last_active_at: now, fresh: true });
    saveLocalSessions();
  }
  renderSidebar();
  if (state.current === agentId) renderHeader();
}

/**
 * Starts a new conversation, in project directory `cwd` and run by agent `agent` when given,
 * in a worktree of its own or not when `worktree` says (sent as `options.cwd`,
 * `options.agent` and `options.worktree` with its first message).
 * @param {string | null} [cwd]
 * @param {string | null} [agent]
 * @param {boolean | null} [worktree] null: as the project's root says
 */
export function startSession(cwd = null, agent = null, worktree = null) {
  const agentId = `web-${randomId()}`;
  const now = new Date().toISOString();
  state.sessions.set(agentId, { agent_id: agentId, title: '', created_at: now, last_active_at: now, fresh: true });
  if (cwd || agent) {
    Object.assign(state.sessions.get(agentId) ?? {}, { cwd, backend: agent });
    state.newOptions.set(agentId, { cwd, agent, worktree });
  }
  openSession(agentId);
}

async function renameCurrent() {
  const agentId = state.current;
  if (!agentId) return;
  const info = state.sessions.get(agentId);
  const title = await ask({ title: 'Rename session', ok: 'Rename', value: plainTitle(info?.title ?? '') });
  if (title === null || !title.trim()) return;
  const response = await api(`/api/sessions/${encodeURIComponent(agentId)}`, {
    method: 'PATCH',
    json: { title: title.trim() },
  });
  if (!response.ok) {
    notice(agentId, `Not renamed: ${await apiError(response)}`);
    return;
  }
  /** @type {ApiSession} */
  const body = await response.json();
  state.sessions.set(agentId, fromApi(body));
  saveLocalSessions();
  renderSidebar();
  renderHeader();
}

async function deleteCurrent() {
  const agentId = state.current;
  if (!agentId) return;
  const info = state.sessions.get(agentId);
  const title = plainTitle(info?.title ?? '') || 'New session';
  // Titles repeat (a fork keeps its source's): its id, place, size and age tell which it is.
  const facts = [
    agentId,
    info?.cwd && state.projects.some((p) => info.cwd?.startsWith(p.path)) ? `in ${info.cwd}` : '',
    typeof info?.message_count === 'number' ? `${info.message_count} messages` : '',
    info?.last_active_at ? `last active ${new Date(info.last_active_at).toLocaleString()}` : '',
  ].filter(Boolean);
  const ok = await ask({
    title: `Delete the conversation “${title}”?`,
    text: `“${title}” (${facts.join(', ')}) is removed with all its messages${info?.worktree ? ' and its worktree' : ''}, for good. Other conversations, its forks among them, stay.`,
    ok: 'Delete',
    danger: true,
  });
  if (ok === null) return;
  const response = await api(`/api/sessions/${encodeURIComponent(agentId)}`, { method: 'DELETE' });
  if (!response.ok && response.status !== 404) {
    notice(agentId, `Not deleted: ${await apiError(response)}`);
    return;
  }
  conversationDeleted(agentId);
}

/**
 * Forgets a deleted conversation; when it was on screen, another one opens.
 * @param {string} agentId
 */
export function conversationDeleted(agentId) {
  if (!state.sessions.has(agentId) && !state.views.has(agentId)) return;
  state.sessions.delete(agentId);
  localStorage.removeItem(DRAFT_PREFIX + agentId);
  const view = state.views.get(agentId);
  state.views.delete(agentId);
  view?.close();
  saveLocalSessions();
  if (state.searchResults) state.searchResults = state.searchResults.filter((id) => id !== agentId);
  if (state.current === agentId) {
    state.current = null;
    const next = sortedSessions()[0];
    if (next) openSession(next.agent_id);
    else startSession();
  } else {
    renderSidebar();
  }
  renderTabTitle();
}

async function exportCurrent() {
  const agentId = state.current;
  if (!agentId) return;
  const response = await api(`/api/sessions/${encodeURIComponent(agentId)}/export`);
  if (!response.ok) {
    notice(agentId, `Not exported: ${await apiError(response)}`);
    return;
  }
  const blob = await response.blob();
  const url = URL.createObjectURL(blob);
  const link = el('a');
  link.href = url;
  const name = plainTitle(state.sessions.get(agentId)?.title ?? '').replace(/[^\w .-]+/g, '').trim();
  link.download = `${name || agentId}.jsonl`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * Imports an export (a `.jsonl` file) as a new conversation, and opens it.
 * @param {File} file
 */
async function importExport(file) {
  const agentId = `import-${randomId()}`;
  const response = await api(`/api/sessions/import?agent_id=${encodeURIComponent(agentId)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-ndjson' },
    body: file,
  });
  if (!response.ok) {
    const why = await apiError(response);
    if (state.current) notice(state.current, `Not imported: ${file.name}: ${why}`);
    return;
  }
  /** @type {ApiSession} */
  const body = await response.json();
  state.sessions.set(agentId, fromApi(body));
  saveLocalSessions();
  openSession(agentId);
}

/**
 * Goes back to the end of a turn: later messages are dropped and the agent forgets them.
 * @param {string} agentId
 * @param {number | undefined} seq the turn's `result`
 */
export async function rewindTo(agentId, seq) {
  if (!seq) return;
  const files = state.sessions.get(agentId)?.worktree
    ? 'The files in its worktree go back to how they were at this turn too.'
    : 'Files on disk are not restored: only the messages go back.';
  const ok = await ask({
    title: 'Rewind to here?',
    text: `Every message after this turn is dropped, and the agent forgets it. ${files}`,
    ok: 'Rewind',
    danger: true,
  });
  if (ok === null) return;
  const response = await api(`/api/sessions/${encodeURIComponent(agentId)}/rewind`, {
    method: 'POST',
    json: { to_seq: seq },
  });
  if (!response.ok) notice(agentId, `Not rewound: ${await apiError(response)}`);
}

/**
 * Starts a new conversation with this one's history up to a turn, and opens it.
 * @param {string} agentId
 * @param {number | undefined} seq the turn's `result`
 */
export async function forkFrom(agentId, seq) {
  if (!seq) return;
  const newId = `web-${randomId()}`;
  const response = await api(`/api/sessions/${encodeURIComponent(agentId)}/fork`, {
    method: 'POST',
    json: { new_agent_id: newId, at_seq: seq },
  });
  if (!response.ok) {
    notice(agentId, `Not forked: ${await apiError(response)}`);
    return;
  }
  /** @type {ApiSession} */
  const body = await response.json();
  state.sessions.set(newId, fromApi(body));
  saveLocalSessions();
  openSession(newId);
}

ui.rename.addEventListener('click', renameCurrent);
ui.deleteButton.addEventListener('click', deleteCurrent);
ui.exportButton.addEventListener('click', exportCurrent);
ui.importButton.addEventListener('click', () => ui.importFile.click());
ui.importFile.addEventListener('change', () => {
  const file = ui.importFile.files?.[0];
  ui.importFile.value = '';
  if (file) importExport(file);
});
