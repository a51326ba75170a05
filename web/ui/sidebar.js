// @ts-check
/**
 * @file The sidebar: the list of conversations (this browser's own, merged with the server's),
 * grouped by project, searched, each entry with its badge, age, agent and attention mark; and
 * the drawer it slides in as at phone width.
 */

import { api, client } from './api.js';
import { openSession } from './conversations.js';
import { el, ui } from './dom.js';
import { age, plainTitle } from './format.js';
import { renderHeader } from './header.js';
import { markUnlisted } from './notifications.js';
import { loadAgents, loadProjects } from './projects.js';
import { scheduleOf } from './schedules.js';
import { DRAFT_PREFIX, SESSIONS_KEY, state } from './state.js';

/** @typedef {import('./state.js').SessionInfo} SessionInfo */
/** @typedef {import('./state.js').ApiSession} ApiSession */

export function loadLocalSessions() {
  try {
    const list = JSON.parse(localStorage.getItem(SESSIONS_KEY) ?? '[]');
    if (Array.isArray(list)) {
      for (const s of list) if (s && typeof s.agent_id === 'string') state.sessions.set(s.agent_id, s);
    }
  } catch {
    // A corrupt list is dropped; the server's list still shows.
  }
}

export function saveLocalSessions() {
  const list = [...state.sessions.values()].map(({ agent_id, title, created_at, last_active_at, cwd, worktree, owner, role }) => ({
    agent_id,
    title,
    created_at,
    last_active_at,
    cwd,
    worktree,
    owner,
    role,
  }));
  localStorage.setItem(SESSIONS_KEY, JSON.stringify(list));
}

/**
 * A sidebar entry from the API's object, keeping what only this page knows.
 * @param {ApiSession} s
 * @returns {SessionInfo}
 */
export function fromApi(s) {
  const known = state.sessions.get(s.agent_id);
  return {
    agent_id: s.agent_id,
    title: s.title || known?.title || '',
    created_at: s.created_at,
    last_active_at: s.last_active_at,
    live: s.live,
    backend: s.backend ?? null,
    model: s.model ?? known?.model ?? null,
    permission_mode: s.permission_mode ?? known?.permission_mode ?? null,
    cwd: s.cwd ?? known?.cwd ?? null,
    worktree: s.worktree ?? null,
    total_cost_usd: s.total_cost_usd,
    input_tokens: s.input_tokens,
    output_tokens: s.output_tokens,
    message_count: s.message_count,
    attention: known?.attention ?? '',
    stored: true,
    waiting_for_limit: s.waiting_for_limit ?? null,
    owner: s.owner,
    role: s.role,
  };
}

/**
 * Merges the server's list into the sidebar; a 404 means this server has no such API. Waits
 * while the sign-in form is up.
 */
export async function refreshSessions() {
  if (!state.sessionsApi || state.signedIn) return;
  // The project names group the sidebar, once known; both lists are wanted by "New session",
  // whether or not the server lists sessions.
  if (!state.projectsLoaded) loadProjects().then(() => state.projects.length && renderSidebar());
  if (!state.agentsLoaded) loadAgents();
  try {
    const response = await api('/api/sessions?limit=100');
    if (response.status === 401) {
      // `api` brought up the sign-in form: list again once a token is entered.
      /** @type {Promise<void> | null} */ (state.signedIn)?.then(refreshSessions);
      return;
    }
    if (response.status === 404) {
      state.sessionsApi = false;
      return;
    }
    if (!response.ok) return;
    /** @type {{sessions: ApiSession[], total: number, next_before?: string | null, shared?: ApiSession[]}} */
    const body = await response.json();
    state.listedAll = !body.next_before;
    // The server's list is the truth (deleted conversations go); the open one stays.
    // So do new sessions that only have a draft so far.
    const keep = [...state.sessions.values()].filter(
      (s) => s.agent_id === state.current || (client.lastSeq(s.agent_id) === 0 && localStorage.getItem(DRAFT_PREFIX + s.agent_id)),
    );
    const fresh = [...body.sessions, ...(body.shared ?? [])].map(fromApi);
    state.sessions.clear();
    for (const info of fresh) state.sessions.set(info.agent_id, info);
    for (const info of keep) if (!state.sessions.has(info.agent_id)) state.sessions.set(info.agent_id, info);
    saveLocalSessions();
    renderSidebar();
    renderHeader();
    markUnlisted();
  } catch {
    // Offline or restarting: the socket's state already says so.
  }
}

/** Refreshes the sidebar soon, once for a burst of finished turns. */
export function scheduleSessionsRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refreshSessions, 300);
}

/** Looks the search box's text up in titles and message text (`q=` on the API). */
async function runSearch() {
  const q = ui.search.value.trim();
  const serial = ++state.searchSerial;
  state.searchAbort?.abort();
  state.searchAbort = null;
  if (!q) {
    state.searchResults = null;
    renderSidebar();
    return;
  }
  if (!state.sessionsApi) {
    const needle = q.toLowerCase();
    state.searchResults = [...state.sessions.values()]
      .filter((s) => s.title.toLowerCase().includes(needle))
      .map((s) => s.agent_id);
    renderSidebar();
    return;
  }
  const abort = new AbortController();
  state.searchAbort = abort;
  try {
    const response = await api(`/api/sessions?limit=100&q=${encodeURIComponent(q.slice(0, 200))}`, {
      signal: abort.signal,
    });
    if (!response.ok || serial !== state.searchSerial) return;
    /** @type {{sessions: ApiSession[]}} */
    const body = await response.json();
    for (const s of body.sessions) state.sessions.set(s.agent_id, fromApi(s));
    state.searchResults = body.sessions.map((s) => s.agent_id);
    renderSidebar();
  } catch {
    // Offline, or a newer search cancelled this one: the list stays as it was.
  }
}

/** @param {SessionInfo} info */
function badge(info) {
  if (state.views.get(info.agent_id)?.busy || state.running.has(info.agent_id)) return 'busy';
  return info.live ? 'live' : 'idle';
}

/**
 * The sidebar's groups: with no search and some conversation in a project, one group per
 * project (the most recently active first, conversations newest first in each); otherwise one
 * group without a name.
 * @returns {{cwd: string | null, sessions: SessionInfo[]}[] | null} null: not grouped
 */
function projectGroups() {
  if (state.searchResults || state.projects.length === 0) return null;
  const all = ownSessions();
  if (!all.some((s) => projectOf(s))) return null;
  /** @type {Map<string, SessionInfo[]>} */
  const groups = new Map();
  for (const info of all) {
    const key = projectOf(info) ?? '';
    groups.set(key, [...(groups.get(key) ?? []), info]);
  }
  return [...groups].map(([cwd, list]) => ({ cwd: cwd || null, sessions: list }));
}

/**
 * The project a conversation works in: its `cwd` when that is one of the server's project
 * directories or inside one; null for a conversation in a workspace of its own.
 * @param {SessionInfo} info
 */
function projectOf(info) {
  const cwd = info.cwd;
  if (!cwd) return null;
  return state.projects.some((p) => cwd === p.path || cwd.startsWith(`${p.path.replace(/\/$/, '')}/`)) ? cwd : null;
}

/**
 * A project's name in the sidebar: as the server names it, else its last path component.
 * @param {string | null} cwd
 */
export function projectName(cwd) {
  if (!cwd) return 'No project';
  return state.projects.find((p) => p.path === cwd)?.name || cwd.split('/').filter(Boolean).pop() || cwd;
}

/** The conversations in the order the sidebar shows them. */
function displayOrder() {
  if (state.searchResults) return state.searchResults;
  const groups = projectGroups();
  const own = groups ? groups.flatMap((g) => g.sessions) : ownSessions();
  return [...own, ...sortedSessions().filter((s) => s.owner)].map((s) => s.agent_id);
}

export function renderSidebar() {
  renderOwn();
  const shared = state.searchResults ? [] : sortedSessions().filter((s) => s.owner);
  if (shared.length === 0) return;
  const li = el('li', 'project-group shared-group');
  const heading = li.appendChild(el('h2', 'project-name', 'Shared with me'));
  heading.id = 'shared-group';
  const list = li.appendChild(el('ul', 'project-sessions'));
  list.setAttribute('aria-labelledby', heading.id);
  list.append(...shared.map(sessionEntry));
  ui.sessions.append(li);
}

/** The principal's own conversations in the sidebar (or the search's results). */
function renderOwn() {
  const groups = projectGroups();
  if (groups) {
    ui.searchEmpty.hidden = true;
    ui.sessions.replaceChildren(
      ...groups.map((group, i) => {
        const li = el('li', 'project-group');
        const name = projectName(group.cwd);
        const heading = li.appendChild(el('h2', 'project-name', name));
        heading.id = `project-group-${i}`;
        if (group.cwd) heading.title = group.cwd;
        const list = li.appendChild(el('ul', 'project-sessions'));
        list.setAttribute('aria-labelledby', heading.id);
        list.append(...group.sessions.map(sessionEntry));
        return li;
      }),
    );
    return;
  }
  const list = state.searchResults
    ? state.searchResults.map((id) => state.sessions.get(id)).filter((s) => s !== undefined)
    : ownSessions();
  ui.searchEmpty.hidden = !(state.searchResults && list.length === 0);
  ui.sessions.replaceChildren(...list.map(sessionEntry));
}

/**
 * One conversation's entry in the sidebar.
 * @param {SessionInfo} info
 */
function sessionEntry(info) {
  const now = Date.now();
  const li = el('li');
  const entry = li.appendChild(el('button', 'session'));
  entry.type = 'button';
  entry.dataset.agentId = info.agent_id;
  if (info.agent_id === state.current) entry.setAttribute('aria-current', 'true');
  const title = plainTitle(info.title) || 'New session';
  entry.append(el('span', 'session-title', title));
  const meta = entry.appendChild(el('span', 'session-meta'));
  const status = badge(info);
  const when = el('time', 'session-age', age(info.last_active_at || info.created_at, now));
  when.dateTime = info.last_active_at || info.created_at;
  when.title = new Date(when.dateTime).toLocaleString();
  meta.append(el('span', `badge badge-${status}`, status), when);
  if (info.owner) meta.append(el('span', 'session-owner', `${info.owner} · ${info.role}`));
  const agent = [info.backend, info.model].filter(Boolean).join(' · ');
  if (agent) meta.append(el('span', 'session-agent', agent));
  const by = scheduleOf(info.agent_id);
  if (by) {
    const mark = meta.appendChild(el('span', 'session-scheduled', 'scheduled'));
    mark.title = `Started by the schedule “${by.name}”`;
    entry.classList.add('scheduled');
  }
  if (info.waiting_for_limit) {
    const at = new Date(info.waiting_for_limit);
    const mark = meta.appendChild(el('span', 'session-waiting', 'rate limited'));
    mark.title = `Waits for a rate limit; continues by itself at ${at.toLocaleString()}`;
  }
  if (info.attention) {
    entry.classList.add('attention', `attention-${info.attention}`);
    const what = info.attention === 'permission' ? 'waits for approval' : 'has a new reply';
    meta.append(el('span', 'attention-dot', info.attention === 'permission' ? 'approval' : 'new'));
    entry.setAttribute('aria-description', what);
  }
  entry.addEventListener('click', () => openSession(info.agent_id));
  return li;
}

/**
 * Records activity seen in a conversation.
 * @param {string} agentId
 * @param {Partial<SessionInfo>} change
 */
export function touchSession(agentId, change) {
  const info = state.sessions.get(agentId);
  if (!info) return;
  Object.assign(info, change);
  saveLocalSessions();
  renderSidebar();
  if (agentId === state.current) renderHeader();
}

/** The principal's own conversations, newest activity first. */
function ownSessions() {
  return sortedSessions().filter((s) => !s.owner);
}

export function sortedSessions() {
  return [...state.sessions.values()].sort((a, b) =>
    (b.last_active_at || b.created_at).localeCompare(a.last_active_at || a.created_at),
  );
}

/** @param {number} step +1 for the next session in the sidebar, -1 for the previous */
export function stepSession(step) {
  const list = displayOrder();
  if (!list.length) return;
  const at = state.current ? list.indexOf(state.current) : -1;
  const next = list[(at + step + list.length) % list.length];
  if (next) openSession(next);
}

export function closeSidebar() {
  document.body.classList.remove('sidebar-open');
  ui.toggleSidebar.setAttribute('aria-expanded', 'false');
}

ui.toggleSidebar.addEventListener('click', (event) => {
  event.stopPropagation();
  const open = document.body.classList.toggle('sidebar-open');
  ui.toggleSidebar.setAttribute('aria-expanded', String(open));
});
// At phone width a tap beside the open sidebar closes it, and does nothing else.
ui.main.addEventListener(
  'click',
  (event) => {
    if (!document.body.classList.contains('sidebar-open')) return;
    event.preventDefault();
    event.stopPropagation();
    closeSidebar();
  },
  true,
);

ui.search.addEventListener('input', () => {
  clearTimeout(state.searchTimer);
  state.searchTimer = setTimeout(runSearch, 200);
});
ui.search.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && ui.search.value) {
    event.stopPropagation();
    ui.search.value = '';
    runSearch();
  }
});
