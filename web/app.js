// @ts-check
/**
 * @file The agentmux web UI: a session sidebar (search, activity, attention marks) and one
 * conversation pane (history, streaming, tools, diffs, per-turn rewind and fork, settings),
 * all over one WebSocket (see client.js) plus the REST API for session management. Every
 * piece of model output, user input and title is put into the page as text nodes; Markdown is
 * rendered by markdown.js, which builds elements too.
 */

import { AgentmuxClient, defaultUrl, randomId } from './client.js';
import { diffStat, renderDiff, toolDiff } from './diff.js';
import { IMAGE_TYPES, imageBlock, imageUrl } from './images.js';
import { parseInline, renderMarkdown } from './markdown.js';

/** @typedef {import('./protocol').ServerFrame} ServerFrame */
/** @typedef {import('./protocol').MessageFrame} MessageFrame */
/** @typedef {import('./protocol').PermissionRequestFrame} PermissionRequestFrame */
/** @typedef {import('./protocol').PermissionResolvedFrame} PermissionResolvedFrame */
/** @typedef {import('./protocol').ChatOptions} ChatOptions */
/** @typedef {import('./client.js').ConnectionState} ConnectionState */
/** @typedef {import('./images.js').ImageBlock} ImageBlock */

/**
 * A conversation as the sidebar knows it: from `GET /api/sessions` when the server has it,
 * else from this browser's own list.
 * @typedef {object} SessionInfo
 * @property {string} agent_id
 * @property {string} title
 * @property {string} created_at RFC 3339.
 * @property {string} last_active_at RFC 3339.
 * @property {boolean} [live] Whether its agent is in the server's memory: from the API, or
 *   from the last `status` frame seen.
 * @property {string | null} [backend] The agent behind it (`claude`, `demo`).
 * @property {string | null} [model]
 * @property {string | null} [permission_mode]
 * @property {string | null} [cwd] The project directory it works in (none: its own workspace).
 * @property {number} [total_cost_usd] The conversation's total, from the server.
 * @property {number} [input_tokens]
 * @property {number} [output_tokens]
 * @property {'' | 'done' | 'permission'} [attention] Something happened there while it was
 *   not on screen: a turn finished, or a tool waits for approval.
 */

/**
 * One entry of `GET /api/sessions` (the fields the UI reads).
 * @typedef {object} ApiSession
 * @property {string} agent_id
 * @property {string | null} title
 * @property {boolean} live
 * @property {string} created_at
 * @property {string} last_active_at
 * @property {string | null} [backend]
 * @property {string | null} [model]
 * @property {string | null} [permission_mode]
 * @property {string | null} [cwd]
 * @property {number} [total_cost_usd]
 * @property {number} [input_tokens]
 * @property {number} [output_tokens]
 */

/**
 * A project directory, as `GET /api/projects` lists it.
 * @typedef {{path: string, name: string, sessions: number, cli_sessions: number,
 *   last_active_at: string | null}} Project
 */

/**
 * A session the Claude CLI keeps for a project, as `GET /api/projects/cli-sessions` lists it.
 * @typedef {{cli_session_id: string, title: string | null, message_count: number,
 *   modified_at: string, imported_as: string | null}} CliSession
 */

/**
 * The parts of the agent's stream-json messages the UI reads (Claude Code CLI shapes).
 * @typedef {{type: 'text', text: string}
 *   | {type: 'thinking', thinking: string}
 *   | {type: 'tool_use', id: string, name: string, input: unknown}
 *   | {type: 'tool_result', tool_use_id: string, content: string | {type: string, text?: string}[], is_error?: boolean}
 *   | ImageBlock} ContentBlock
 * @typedef {{message?: {content?: string | ContentBlock[], model?: string}, aborted?: boolean,
 *   subtype?: string, model?: string, uuid?: string}} ChatMessage
 * @typedef {{event?: {type?: string, delta?: {type?: string, text?: string}}}} StreamEvent
 * @typedef {{input_tokens?: number, output_tokens?: number, cache_read_input_tokens?: number,
 *   cache_creation_input_tokens?: number}} Usage
 * @typedef {{is_error?: boolean, subtype?: string, terminal_reason?: string, session_id?: string,
 *   total_cost_usd?: number, duration_ms?: number, usage?: Usage}} ResultMessage
 */

const SESSIONS_KEY = 'agentmux.sessions.v1';
const CURRENT_KEY = 'agentmux.current';
const THEME_KEY = 'agentmux.theme';
const NOTIFY_KEY = 'agentmux.notify';
const DRAFT_PREFIX = 'agentmux.draft.';
/** The API token, when the server asks for one: kept for this tab only. */
const TOKEN_KEY = 'agentmux.token';
/** How often the sidebar is refreshed from the server, in milliseconds. */
const SIDEBAR_REFRESH_MS = 30_000;
/** States after which a conversation's agent is no longer in the server's memory. */
const GONE = new Set(['evicted', 'crashed', 'moved']);
/** Titles are the first 50 characters of the first message, as the server stores them. */
const TITLE_CHARS = 50;
/** Tool output longer than this (characters or lines) is folded behind its size. */
const FOLD_CHARS = 2000;
const FOLD_LINES = 30;
/**
 * Base64 characters of images one message may carry: the server's default frame limit is
 * 1 MiB, and the text and JSON around the images need room too.
 */
const IMAGE_BUDGET = 900_000;

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * A button with a visible label (also its accessible name).
 * @param {string} label
 * @param {string} [className]
 * @param {() => void} [onClick]
 */
function button(label, className, onClick) {
  const b = el('button', className, label);
  b.type = 'button';
  if (onClick) b.addEventListener('click', onClick);
  return b;
}

/**
 * @param {string} id
 * @returns {HTMLElement}
 */
function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`missing #${id}`);
  return node;
}

const ui = {
  sidebar: byId('sidebar'),
  sessions: byId('sessions'),
  search: /** @type {HTMLInputElement} */ (byId('search')),
  searchEmpty: byId('search-empty'),
  newSession: byId('new-session'),
  toggleSidebar: byId('toggle-sidebar'),
  title: byId('title'),
  totals: byId('totals'),
  rename: /** @type {HTMLButtonElement} */ (byId('rename')),
  exportButton: /** @type {HTMLButtonElement} */ (byId('export')),
  deleteButton: /** @type {HTMLButtonElement} */ (byId('delete')),
  conn: byId('conn'),
  messages: byId('messages'),
  composer: /** @type {HTMLFormElement} */ (byId('composer')),
  input: /** @type {HTMLTextAreaElement} */ (byId('input')),
  attachments: byId('attachments'),
  attach: byId('attach'),
  imageFile: /** @type {HTMLInputElement} */ (byId('image-file')),
  model: /** @type {HTMLSelectElement} */ (byId('model')),
  permissionMode: /** @type {HTMLSelectElement} */ (byId('permission-mode')),
  stop: /** @type {HTMLButtonElement} */ (byId('stop')),
  theme: /** @type {HTMLButtonElement} */ (byId('theme')),
  notify: /** @type {HTMLButtonElement} */ (byId('notify')),
  help: byId('help'),
  dialog: /** @type {HTMLDialogElement} */ (byId('dialog')),
  dialogForm: /** @type {HTMLFormElement} */ (byId('dialog-form')),
  dialogTitle: byId('dialog-title'),
  dialogText: byId('dialog-text'),
  dialogInput: /** @type {HTMLInputElement} */ (byId('dialog-input')),
  dialogOk: /** @type {HTMLButtonElement} */ (byId('dialog-ok')),
  dialogCancel: byId('dialog-cancel'),
  shortcuts: /** @type {HTMLDialogElement} */ (byId('shortcuts')),
  shortcutsClose: byId('shortcuts-close'),
  projectDialog: /** @type {HTMLDialogElement} */ (byId('project-dialog')),
  projectForm: /** @type {HTMLFormElement} */ (byId('project-form')),
  project: /** @type {HTMLSelectElement} */ (byId('project')),
  projectField: byId('project-field'),
  agent: /** @type {HTMLSelectElement} */ (byId('agent')),
  agentField: byId('agent-field'),
  projectCli: /** @type {HTMLButtonElement} */ (byId('project-cli')),
  projectCancel: byId('project-cancel'),
  cliSessions: byId('cli-sessions'),
  cliStatus: byId('cli-status'),
  cliList: byId('cli-list'),
  openSchedules: byId('open-schedules'),
  schedules: /** @type {HTMLDialogElement} */ (byId('schedules')),
  scheduleList: byId('schedule-list'),
  schedulesEmpty: byId('schedules-empty'),
  schedulesClose: byId('schedules-close'),
  scheduleForm: /** @type {HTMLFormElement} */ (byId('schedule-form')),
  scheduleFormTitle: byId('schedule-form-title'),
  scheduleName: /** @type {HTMLInputElement} */ (byId('schedule-name')),
  scheduleAgent: /** @type {HTMLInputElement} */ (byId('schedule-agent')),
  scheduleContent: /** @type {HTMLTextAreaElement} */ (byId('schedule-content')),
  scheduleKind: /** @type {HTMLSelectElement} */ (byId('schedule-kind')),
  scheduleWhen: /** @type {HTMLInputElement} */ (byId('schedule-when')),
  scheduleMode: /** @type {HTMLSelectElement} */ (byId('schedule-mode')),
  scheduleError: byId('schedule-error'),
  scheduleReset: byId('schedule-reset'),
  scheduleSave: /** @type {HTMLButtonElement} */ (byId('schedule-save')),
  signIn: /** @type {HTMLFormElement} */ (byId('sign-in')),
  token: /** @type {HTMLInputElement} */ (byId('token')),
  signInError: byId('sign-in-error'),
};

// ---- signing in ---------------------------------------------------------------------------

/** Set once the server has handed out a ticket without credentials: it runs open. */
let authOff = false;
/** @type {Promise<void> | null} resolved by the sign-in form's next submit */
let signedIn = null;
/** @type {() => void} */
let resolveSignIn = () => {};

/** What the sign-in form says when the server refused the token it was sent. */
const REFUSED = 'That token was not accepted.';

/**
 * `Authorization` for REST calls: the token, when this tab has one.
 * @returns {Record<string, string>}
 */
function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { authorization: `Bearer ${token}` } : {};
}

/**
 * Forgets the token (it was refused, or there is none yet) and shows the sign-in form.
 * Resolves once a new token has been entered.
 * @param {string} [message] why, when a token was refused
 * @returns {Promise<void>}
 */
function signIn(message = '') {
  sessionStorage.removeItem(TOKEN_KEY);
  ui.signInError.textContent = message;
  ui.signIn.hidden = false;
  ui.token.focus();
  signedIn ??= new Promise((resolve) => (resolveSignIn = resolve));
  return signedIn;
}

ui.signIn.addEventListener('submit', (event) => {
  event.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.token.value = '';
  ui.signIn.hidden = true;
  signedIn = null;
  resolveSignIn();
});

/**
 * The URL of the next connection attempt. With authentication on, it carries a fresh
 * single-use ticket (browsers can't send headers on a WebSocket); a refused token brings up
 * the sign-in form, and the attempt waits for it.
 * @returns {Promise<string>}
 */
async function socketUrl() {
  if (authOff) return defaultUrl();
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const response = await fetch('/api/ws-ticket', { method: 'POST', headers: authHeaders() });
    if (response.status === 401) {
      await signIn(token ? REFUSED : '');
      continue;
    }
    if (!response.ok) throw new Error(`no ticket: HTTP ${response.status}`);
    if (!token) {
      authOff = true;
      return defaultUrl();
    }
    /** @type {{ticket: string}} */
    const { ticket } = await response.json();
    return `${defaultUrl()}?ticket=${encodeURIComponent(ticket)}`;
  }
}

/**
 * A REST call with the tab's credentials. A refused token brings up the sign-in form.
 * @param {string} path
 * @param {RequestInit & {json?: unknown}} [init]
 * @returns {Promise<Response>}
 */
async function api(path, init = {}) {
  const { json, ...rest } = init;
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json', ...authHeaders() };
  if (json !== undefined) headers['content-type'] = 'application/json';
  const token = sessionStorage.getItem(TOKEN_KEY);
  const response = await fetch(path, {
    ...rest,
    headers,
    ...(json !== undefined ? { body: JSON.stringify(json) } : {}),
  });
  if (response.status === 401) signIn(token ? REFUSED : '');
  return response;
}

/**
 * The `error` text of a failed REST answer.
 * @param {Response} response
 */
async function apiError(response) {
  try {
    const body = await response.json();
    return `${body.error ?? response.statusText} (${body.code ?? response.status})`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

const client = new AgentmuxClient({ url: socketUrl });
client.watchActivity((frame) => onActivity(frame));

/** @type {Map<string, SessionInfo>} */
const sessions = new Map();
/** @type {Map<string, View>} */
const views = new Map();
/** @type {string | null} */
let current = null;
/** Whether `GET /api/sessions` exists on this server (unknown until asked). */
let sessionsApi = true;
/** @type {string[] | null} agent_ids matching the search box, newest first; null: no search */
let searchResults = null;
/** @type {Project[]} the server's project directories; empty when it has no roots */
let projects = [];
/** Whether {@link projects} was loaded from the server at least once. */
let projectsLoaded = false;
/**
 * The agents a new conversation can run, as `GET /api/agents` lists them (the default first);
 * empty until loaded or when the server has no such API.
 * @type {{name: string, kind: string, modes?: string[]}[]}
 */
let agents = [];
/** Whether {@link agents} was loaded from the server at least once. */
let agentsListed = false;
/** Whether every agent in {@link agents} has said what it offers (else it is asked again). */
let agentsLoaded = false;
/**
 * New conversations' project directory and agent, sent with their first chat.
 * @type {Map<string, {cwd: string | null, agent: string | null}>}
 */
const newOptions = new Map();

// ---- schedules ----------------------------------------------------------------------------

/**
 * A schedule as `GET /api/schedules` lists it (the fields the UI reads).
 * @typedef {object} Schedule
 * @property {string} id
 * @property {string} name
 * @property {string} agent_id
 * @property {string} content
 * @property {string | null} cron
 * @property {number | null} every_secs
 * @property {'same' | 'new'} mode
 * @property {boolean} enabled
 * @property {string | null} next_run_at
 * @property {{agent_id: string, outcome: string, at: string, detail?: string} | null} last_run
 */

/** @type {Schedule[]} */
let schedules = [];
/** The schedule the form edits; null: the form creates one. */
let editing = /** @type {string | null} */ (null);

/**
 * The schedule that started conversation `agentId`: its own conversation (`same`), or one of
 * the `<agent_id>-<time>` conversations it creates (`new`).
 * @param {string} agentId
 */
function scheduleOf(agentId) {
  return schedules.find((sc) =>
    sc.mode === 'new'
      ? agentId.startsWith(`${sc.agent_id}-`) && /^\d{8}T\d{6}\.\d{3}Z$/.test(agentId.slice(sc.agent_id.length + 1))
      : agentId === sc.agent_id,
  );
}

async function loadSchedules() {
  if (signedIn) return;
  try {
    const response = await api('/api/schedules');
    if (!response.ok) return;
    schedules = (await response.json()).schedules;
    renderSchedules();
    renderSidebar();
  } catch {
    // Offline: the list stays as it was.
  }
}

/** @param {Schedule} sc */
function timing(sc) {
  return sc.cron ? `cron ${sc.cron}` : `every ${sc.every_secs} s`;
}

function renderSchedules() {
  ui.schedulesEmpty.hidden = schedules.length > 0;
  ui.scheduleList.replaceChildren(
    ...schedules.map((sc) => {
      const li = el('li', 'schedule');
      li.dataset.scheduleId = sc.id;
      const head = li.appendChild(el('div', 'schedule-head'));
      head.append(el('strong', 'schedule-name', sc.name), el('span', 'schedule-timing', timing(sc)));
      const where = sc.mode === 'new' ? `new conversation per run (${sc.agent_id}-…)` : sc.agent_id;
      li.append(el('div', 'schedule-where', where));
      const state = sc.enabled && sc.next_run_at ? `next ${new Date(sc.next_run_at).toLocaleString()}` : 'paused';
      const last = sc.last_run ? ` · last run ${sc.last_run.outcome}${sc.last_run.detail ? `: ${sc.last_run.detail}` : ''}` : '';
      li.append(el('div', 'schedule-state', state + last));
      const actions = li.appendChild(el('div', 'schedule-actions'));
      actions.append(
        button('Edit', 'schedule-edit', () => editSchedule(sc)),
        button(sc.enabled ? 'Pause' : 'Resume', 'schedule-toggle', () => changeSchedule(sc, { enabled: !sc.enabled })),
        button('Run now', 'schedule-run', () => runSchedule(sc)),
        button('Delete', 'schedule-delete danger', () => deleteSchedule(sc)),
      );
      return li;
    }),
  );
}

function resetScheduleForm() {
  editing = null;
  ui.scheduleForm.reset();
  ui.scheduleError.textContent = '';
  ui.scheduleFormTitle.textContent = 'New schedule';
  ui.scheduleSave.textContent = 'Create';
  ui.scheduleAgent.disabled = false;
}

/** @param {Schedule} sc */
function editSchedule(sc) {
  editing = sc.id;
  ui.scheduleError.textContent = '';
  ui.scheduleFormTitle.textContent = `Edit “${sc.name}”`;
  ui.scheduleSave.textContent = 'Save';
  ui.scheduleName.value = sc.name;
  ui.scheduleAgent.value = sc.agent_id;
  ui.scheduleContent.value = sc.content;
  ui.scheduleKind.value = sc.cron ? 'cron' : 'every';
  ui.scheduleWhen.value = sc.cron ?? String(sc.every_secs);
  ui.scheduleMode.value = sc.mode;
  ui.scheduleName.focus();
}

async function saveSchedule() {
  const when = ui.scheduleWhen.value.trim();
  /** @type {Record<string, unknown>} */
  const body = {
    name: ui.scheduleName.value,
    agent_id: ui.scheduleAgent.value.trim(),
    content: ui.scheduleContent.value,
    mode: ui.scheduleMode.value,
  };
  if (ui.scheduleKind.value === 'cron') body.cron = when;
  else body.every_secs = Number(when);
  const response = editing
    ? await api(`/api/schedules/${encodeURIComponent(editing)}`, { method: 'PATCH', json: body })
    : await api('/api/schedules', { method: 'POST', json: body });
  if (!response.ok) {
    ui.scheduleError.textContent = await apiError(response);
    return;
  }
  resetScheduleForm();
  await loadSchedules();
}

/**
 * @param {Schedule} sc
 * @param {Record<string, unknown>} change
 */
async function changeSchedule(sc, change) {
  const response = await api(`/api/schedules/${encodeURIComponent(sc.id)}`, { method: 'PATCH', json: change });
  if (!response.ok) ui.scheduleError.textContent = await apiError(response);
  await loadSchedules();
}

/** @param {Schedule} sc */
async function runSchedule(sc) {
  const response = await api(`/api/schedules/${encodeURIComponent(sc.id)}/run`, { method: 'POST' });
  if (!response.ok) ui.scheduleError.textContent = await apiError(response);
  await loadSchedules();
  scheduleSessionsRefresh();
}

/** @param {Schedule} sc */
async function deleteSchedule(sc) {
  const sure = await ask({
    title: `Delete the schedule “${sc.name}”?`,
    text: 'No run of it starts any more; the conversations it started stay.',
    ok: 'Delete',
    danger: true,
  });
  if (sure === null) return;
  const response = await api(`/api/schedules/${encodeURIComponent(sc.id)}`, { method: 'DELETE' });
  if (!response.ok && response.status !== 404) ui.scheduleError.textContent = await apiError(response);
  if (editing === sc.id) resetScheduleForm();
  await loadSchedules();
}

// ---- the sidebar --------------------------------------------------------------------------

function loadLocalSessions() {
  try {
    const list = JSON.parse(localStorage.getItem(SESSIONS_KEY) ?? '[]');
    if (Array.isArray(list)) {
      for (const s of list) if (s && typeof s.agent_id === 'string') sessions.set(s.agent_id, s);
    }
  } catch {
    // A corrupt list is dropped; the server's list still shows.
  }
}

function saveLocalSessions() {
  const list = [...sessions.values()].map(({ agent_id, title, created_at, last_active_at, cwd }) => ({
    agent_id,
    title,
    created_at,
    last_active_at,
    cwd,
  }));
  localStorage.setItem(SESSIONS_KEY, JSON.stringify(list));
}

/**
 * A sidebar entry from the API's object, keeping what only this page knows.
 * @param {ApiSession} s
 * @returns {SessionInfo}
 */
function fromApi(s) {
  const known = sessions.get(s.agent_id);
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
    total_cost_usd: s.total_cost_usd,
    input_tokens: s.input_tokens,
    output_tokens: s.output_tokens,
    attention: known?.attention ?? '',
  };
}

/**
 * Merges the server's list into the sidebar; a 404 means this server has no such API. Waits
 * while the sign-in form is up.
 */
async function refreshSessions() {
  if (!sessionsApi || signedIn) return;
  // The project names group the sidebar, once known; both lists are wanted by "New session",
  // whether or not the server lists sessions.
  if (!projectsLoaded) loadProjects().then(() => projects.length && renderSidebar());
  if (!agentsLoaded) loadAgents();
  try {
    const response = await api('/api/sessions?limit=100');
    if (response.status === 401) {
      // `api` brought up the sign-in form: list again once a token is entered.
      /** @type {Promise<void> | null} */ (signedIn)?.then(refreshSessions);
      return;
    }
    if (response.status === 404) {
      sessionsApi = false;
      return;
    }
    if (!response.ok) return;
    /** @type {{sessions: ApiSession[], total: number}} */
    const body = await response.json();
    // The server's list is the truth (deleted conversations go); the open one stays.
    // So do new sessions that only have a draft so far.
    const keep = [...sessions.values()].filter(
      (s) => s.agent_id === current || (client.lastSeq(s.agent_id) === 0 && localStorage.getItem(DRAFT_PREFIX + s.agent_id)),
    );
    const fresh = body.sessions.map(fromApi);
    sessions.clear();
    for (const info of fresh) sessions.set(info.agent_id, info);
    for (const info of keep) if (!sessions.has(info.agent_id)) sessions.set(info.agent_id, info);
    saveLocalSessions();
    renderSidebar();
    renderHeader();
    markUnlisted();
  } catch {
    // Offline or restarting: the socket's state already says so.
  }
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let refreshTimer;

/** Refreshes the sidebar soon, once for a burst of finished turns. */
function scheduleSessionsRefresh() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refreshSessions, 300);
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let searchTimer;
let searchSerial = 0;

/** Looks the search box's text up in titles and message text (`q=` on the API). */
async function runSearch() {
  const q = ui.search.value.trim();
  const serial = ++searchSerial;
  if (!q) {
    searchResults = null;
    renderSidebar();
    return;
  }
  if (!sessionsApi) {
    const needle = q.toLowerCase();
    searchResults = [...sessions.values()]
      .filter((s) => s.title.toLowerCase().includes(needle))
      .map((s) => s.agent_id);
    renderSidebar();
    return;
  }
  try {
    const response = await api(`/api/sessions?limit=100&q=${encodeURIComponent(q.slice(0, 200))}`);
    if (!response.ok || serial !== searchSerial) return;
    /** @type {{sessions: ApiSession[]}} */
    const body = await response.json();
    for (const s of body.sessions) sessions.set(s.agent_id, fromApi(s));
    searchResults = body.sessions.map((s) => s.agent_id);
    renderSidebar();
  } catch {
    // Offline: the list stays as it was.
  }
}

/**
 * @param {string} iso
 * @param {number} now
 */
function age(iso, now) {
  const seconds = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(seconds) || seconds < 45) return 'just now';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h`;
  return `${Math.round(hours / 24)} d`;
}

/** @param {SessionInfo} info */
function badge(info) {
  if (views.get(info.agent_id)?.busy || running.has(info.agent_id)) return 'busy';
  return info.live ? 'live' : 'idle';
}

/**
 * @typedef {import('./markdown.js').Inline} Inline
 */

/**
 * A title as one line of plain text: no Markdown markers, no line breaks.
 * @param {string} title
 */
function plainTitle(title) {
  const lines = title
    .split(/\r?\n/)
    .filter((line) => !/^\s*(`{3,}|~{3,})/.test(line))
    .map((line) => line.replace(/^\s*(#{1,6}\s+|>\s?|[-*+]\s+|\d{1,9}[.)]\s+)/, ''));
  /** @param {Inline[]} nodes @returns {string} */
  const flat = (nodes) =>
    nodes
      .map((n) => (n.type === 'text' || n.type === 'code' ? n.text : n.type === 'br' ? ' ' : flat(n.children)))
      .join('');
  return flat(parseInline(lines.join(' '))).replace(/\s+/g, ' ').trim();
}

/**
 * The sidebar's groups: with no search and some conversation in a project, one group per
 * project (the most recently active first, conversations newest first in each); otherwise one
 * group without a name.
 * @returns {{cwd: string | null, sessions: SessionInfo[]}[] | null} null: not grouped
 */
function projectGroups() {
  if (searchResults || projects.length === 0) return null;
  const all = sortedSessions();
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
  return projects.some((p) => cwd === p.path || cwd.startsWith(`${p.path.replace(/\/$/, '')}/`)) ? cwd : null;
}

/**
 * A project's name in the sidebar: as the server names it, else its last path component.
 * @param {string | null} cwd
 */
function projectName(cwd) {
  if (!cwd) return 'No project';
  return projects.find((p) => p.path === cwd)?.name || cwd.split('/').filter(Boolean).pop() || cwd;
}

/** The conversations in the order the sidebar shows them. */
function displayOrder() {
  if (searchResults) return searchResults;
  const groups = projectGroups();
  return (groups ? groups.flatMap((g) => g.sessions) : sortedSessions()).map((s) => s.agent_id);
}

function renderSidebar() {
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
  const list = searchResults
    ? searchResults.map((id) => sessions.get(id)).filter((s) => s !== undefined)
    : sortedSessions();
  ui.searchEmpty.hidden = !(searchResults && list.length === 0);
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
  if (info.agent_id === current) entry.setAttribute('aria-current', 'true');
  const title = plainTitle(info.title) || 'New session';
  entry.append(el('span', 'session-title', title));
  const meta = entry.appendChild(el('span', 'session-meta'));
  const state = badge(info);
  const when = el('time', 'session-age', age(info.last_active_at || info.created_at, now));
  when.dateTime = info.last_active_at || info.created_at;
  when.title = new Date(when.dateTime).toLocaleString();
  meta.append(el('span', `badge badge-${state}`, state), when);
  const agent = [info.backend, info.model].filter(Boolean).join(' · ');
  if (agent) meta.append(el('span', 'session-agent', agent));
  const by = scheduleOf(info.agent_id);
  if (by) {
    const mark = meta.appendChild(el('span', 'session-scheduled', 'scheduled'));
    mark.title = `Started by the schedule “${by.name}”`;
    entry.classList.add('scheduled');
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
function touchSession(agentId, change) {
  const info = sessions.get(agentId);
  if (!info) return;
  Object.assign(info, change);
  saveLocalSessions();
  renderSidebar();
  if (agentId === current) renderHeader();
}

// ---- attention ----------------------------------------------------------------------------

/** Whether the user can see this conversation right now. */
function onScreen(/** @type {string} */ agentId) {
  return agentId === current && document.visibilityState === 'visible';
}

/**
 * Marks a conversation that needs a look, counts it in the tab title and, when the user
 * allowed it, shows a system notification.
 * @param {string} agentId
 * @param {'done' | 'permission'} kind
 * @param {string} text
 */
function needsAttention(agentId, kind, text) {
  if (onScreen(agentId)) return;
  const info = sessions.get(agentId);
  if (!info) return;
  if (info.attention !== 'permission') info.attention = kind;
  renderSidebar();
  renderTabTitle();
  if (notificationsOn()) {
    try {
      const note = new Notification(plainTitle(info.title) || 'agentmux', { body: text, tag: agentId });
      note.onclick = () => {
        window.focus();
        openSession(agentId);
        note.close();
      };
    } catch {
      // Some browsers only notify from a service worker; the sidebar mark stays.
    }
  }
}

/** @param {string} agentId */
function clearAttention(agentId) {
  const info = sessions.get(agentId);
  if (!info?.attention) return;
  info.attention = '';
  renderSidebar();
  renderTabTitle();
}

/** @type {Map<string, {kind: 'done' | 'permission', text: string}>} news about conversations not listed yet */
const unlisted = new Map();
/** @type {Set<string>} conversations the activity feed says are running a turn */
const running = new Set();

/**
 * An `activity` line about any conversation of ours: the sidebar shows which run, and one not
 * on screen is marked when its turn ends or a tool waits (the open one's frames say so).
 * @param {import('./protocol').ActivityFrame} frame
 */
function onActivity(frame) {
  const agentId = frame.agent_id;
  if (frame.activity === 'turn_started') running.add(agentId);
  if (frame.activity === 'turn_ended') running.delete(agentId);
  const news =
    frame.activity === 'turn_ended'
      ? { kind: /** @type {const} */ ('done'), text: frame.is_error ? 'The turn ended with an error' : 'The reply is ready' }
      : frame.activity === 'permission_request'
        ? { kind: /** @type {const} */ ('permission'), text: `${frame.tool_name ?? 'A tool'} waits for your approval` }
        : null;
  if (!sessions.has(agentId)) {
    // Started elsewhere (another tab, a schedule): listed at the next refresh.
    if (news) unlisted.set(agentId, news);
    scheduleSessionsRefresh();
    return;
  }
  if (frame.activity === 'turn_started' || frame.activity === 'turn_ended') {
    touchSession(agentId, { last_active_at: frame.timestamp });
  }
  if (news && !views.get(agentId)?.live) needsAttention(agentId, news.kind, news.text);
}

/** Marks the conversations news came for before they were listed. */
function markUnlisted() {
  for (const [agentId, news] of unlisted) {
    if (!sessions.has(agentId)) continue;
    unlisted.delete(agentId);
    needsAttention(agentId, news.kind, news.text);
  }
}

function renderTabTitle() {
  const count = [...sessions.values()].filter((s) => s.attention).length;
  document.title = count ? `(${count}) agentmux` : 'agentmux';
}

function notificationsOn() {
  return (
    typeof Notification !== 'undefined' &&
    Notification.permission === 'granted' &&
    localStorage.getItem(NOTIFY_KEY) === 'on'
  );
}

function renderNotifyButton() {
  const supported = typeof Notification !== 'undefined';
  ui.notify.disabled = !supported || Notification.permission === 'denied';
  ui.notify.setAttribute('aria-pressed', String(supported && notificationsOn()));
  ui.notify.title = !supported
    ? 'This browser has no notifications'
    : Notification.permission === 'denied'
      ? 'Notifications are blocked for this site in the browser'
      : 'Notify me when a turn finishes or a tool waits, while I look elsewhere';
}

ui.notify.addEventListener('click', async () => {
  if (typeof Notification === 'undefined') return;
  if (notificationsOn()) {
    localStorage.setItem(NOTIFY_KEY, 'off');
  } else {
    const permission =
      Notification.permission === 'default' ? await Notification.requestPermission() : Notification.permission;
    localStorage.setItem(NOTIFY_KEY, permission === 'granted' ? 'on' : 'off');
  }
  renderNotifyButton();
});

document.addEventListener('visibilitychange', () => {
  if (current && document.visibilityState === 'visible') clearAttention(current);
});

// ---- a conversation -----------------------------------------------------------------------

/** One conversation's pane, kept while the page lives so switching back is instant. */
class View {
  /** @param {string} agentId */
  constructor(agentId) {
    this.agentId = agentId;
    this.root = el('div', 'conversation');
    /** @type {HTMLElement | null} the reply being streamed */
    this.streaming = null;
    this.streamText = '';
    this.renderQueued = false;
    /** @type {HTMLElement[]} user turns not yet answered by a `result`, oldest first */
    this.open = [];
    /** @type {Map<string, HTMLDetailsElement>} tool_use id → its element */
    this.tools = new Map();
    /** @type {Map<string, HTMLElement>} permission request id → its card */
    this.permissions = new Map();
    /** Set once the stored history has been delivered: later frames are news. */
    this.live = false;
    /** @type {string} model of the running turn, from its `system` `init` */
    this.turnModel = '';
    // A person opened it: the agent starts meanwhile, so a message typed next skips start-up.
    this.close = client.open(agentId, (frame) => this.onFrame(frame), {
      onReplayed: () => (this.live = true),
      warm: true,
    });
  }

  /** Whether a turn is running (or waiting in the queue). */
  get busy() {
    return this.open.length > 0;
  }

  /** @param {ServerFrame} frame */
  onFrame(frame) {
    const stick = this.atBottom();
    const wasBusy = this.busy;
    switch (frame.message_type) {
      case 'user':
        this.onUser(frame, /** @type {ChatMessage} */ (frame.message));
        break;
      case 'system': {
        const message = /** @type {ChatMessage} */ (frame.message);
        if (message.subtype === 'init' && typeof message.model === 'string') this.turnModel = message.model;
        break;
      }
      case 'assistant':
        this.onAssistant(frame, /** @type {ChatMessage} */ (frame.message));
        break;
      case 'stream_event':
        this.onStreamEvent(/** @type {StreamEvent} */ (frame.message));
        break;
      case 'result':
        this.onResult(frame, /** @type {ResultMessage} */ (frame.message));
        break;
      case 'status':
        this.onStatus(frame);
        break;
      case 'permission_request':
        this.onPermissionRequest(frame);
        break;
      case 'permission_resolved':
        this.onPermissionResolved(frame);
        break;
      case 'error':
        if (frame.code !== 'unknown_agent' || this.root.childElementCount > 0) {
          this.append(el('div', 'msg notice error', `Error (${frame.code}): ${frame.error}`));
        }
        break;
    }
    if (stick) this.scrollToEnd();
    if (wasBusy !== this.busy) {
      renderSidebar();
      if (this.agentId === current) renderControls();
    }
    if (this.agentId === current && 'seq' in frame) renderHeader();
  }

  /**
   * @param {MessageFrame} frame
   * @param {ChatMessage} message
   */
  onUser(frame, message) {
    const content = message.message?.content;
    const prompt = promptOf(message);
    if (prompt) {
      const msg = this.append(this.bubble('user', frame), frame);
      const bubble = /** @type {HTMLElement} */ (msg.firstElementChild);
      bubble.append(prompt.text);
      prompt.images.forEach((image, i) => bubble.append(imageElement(image, `Image ${i + 1} of the message`)));
      this.open.push(msg);
      if (this.open.length > 1) setQueued(msg, true);
      const info = sessions.get(this.agentId);
      touchSession(this.agentId, {
        title: info?.title || (prompt.text.trim() || '[image]').slice(0, TITLE_CHARS),
        last_active_at: frame.timestamp,
      });
      return;
    }
    for (const block of Array.isArray(content) ? content : []) {
      if (block.type === 'tool_result') {
        this.onToolResult(block);
      } else if (block.type === 'text' && block.text.startsWith('[Request interrupted')) {
        this.append(el('div', 'msg notice', 'Interrupted'), frame);
      } else if (block.type === 'text') {
        this.append(el('div', 'msg notice', block.text), frame);
      }
    }
  }

  /**
   * @param {MessageFrame} frame
   * @param {ChatMessage} message
   */
  onAssistant(frame, message) {
    this.endStream();
    const content = message.message?.content;
    if (typeof message.message?.model === 'string' && message.message.model !== '<synthetic>') {
      this.turnModel = message.message.model;
    }
    for (const block of Array.isArray(content) ? content : []) {
      if (block.type === 'text' && block.text) {
        const msg = this.append(this.bubble('assistant', frame), frame);
        if (message.aborted) msg.classList.add('aborted');
        msg.firstElementChild?.append(renderMarkdown(block.text));
      } else if (block.type === 'tool_use') {
        this.onToolUse(frame, block);
      } else if (block.type === 'thinking' && block.thinking) {
        const details = el('details', 'msg thinking');
        details.append(el('summary', undefined, 'Thinking'), el('div', 'thinking-text', block.thinking));
        this.append(details, frame);
      }
    }
  }

  /**
   * A tool call: collapsed with a one-line summary; file edits open, as a diff.
   * @param {MessageFrame} frame
   * @param {Extract<ContentBlock, {type: 'tool_use'}>} block
   */
  onToolUse(frame, block) {
    const details = el('details', 'msg tool');
    const summary = details.appendChild(el('summary', undefined, toolSummary(block.name, block.input)));
    const edit = toolDiff(block.name, block.input);
    if (edit) {
      details.classList.add('edit');
      details.open = true;
      summary.textContent = `${block.name}: ${edit.path || 'a file'}`;
      summary.append(el('span', 'diff-stat', ` ${diffStat(edit.lines)}`));
      details.append(renderDiff(edit.lines));
    } else {
      details.append(el('pre', 'tool-input', JSON.stringify(block.input, null, 2)));
    }
    this.tools.set(block.id, details);
    this.append(details, frame);
  }

  /** @param {Extract<ContentBlock, {type: 'tool_result'}>} block */
  onToolResult(block) {
    const text =
      typeof block.content === 'string'
        ? block.content
        : (block.content ?? []).map((c) => c.text ?? `[${c.type}]`).join('\n');
    let details = this.tools.get(block.tool_use_id);
    if (!details) {
      details = el('details', 'msg tool');
      details.append(el('summary', undefined, 'Tool result'));
      this.append(details);
    }
    if (block.is_error) details.classList.add('error');
    const label = block.is_error ? 'Error' : 'Result';
    const lines = text.split('\n').length;
    if (text.length > FOLD_CHARS || lines > FOLD_LINES) {
      const fold = el('details', 'tool-fold');
      fold.append(el('summary', 'tool-label', `${label}: ${size(text)}, ${lines} lines`));
      fold.append(el('pre', 'tool-output', text));
      details.append(fold);
    } else {
      details.append(el('div', 'tool-label', label), el('pre', 'tool-output', text));
    }
  }

  /**
   * Shows a tool the agent wants to use, with Allow and Deny.
   * @param {PermissionRequestFrame} frame
   */
  onPermissionRequest(frame) {
    const card = el('div', 'msg permission');
    card.append(el('div', 'permission-title', `Allow ${frame.tool_name}?`));
    const edit = toolDiff(frame.tool_name, frame.input);
    if (edit) card.append(el('div', 'permission-path', edit.path), renderDiff(edit.lines));
    else card.append(el('pre', 'tool-input', JSON.stringify(frame.input, null, 2)));
    const actions = card.appendChild(el('div', 'permission-actions'));
    /** @param {import('./protocol').PermissionDecision} decision */
    const answer = (decision) => {
      for (const b of actions.querySelectorAll('button')) b.disabled = true;
      client.respondToPermission(this.agentId, frame.request_id, decision);
    };
    actions.append(
      button('Allow', 'allow', () => answer({ behavior: 'allow' })),
      button('Deny', 'deny', () => answer({ behavior: 'deny', message: 'The user denied this tool use.' })),
    );
    this.permissions.set(frame.request_id, card);
    this.append(card, frame);
    if (this.live) needsAttention(this.agentId, 'permission', `${frame.tool_name} waits for your approval`);
  }

  /** @param {PermissionResolvedFrame} frame */
  onPermissionResolved(frame) {
    const card = this.permissions.get(frame.request_id);
    if (!card) return;
    const labels = /** @type {Record<string, string>} */ ({
      allowed: 'Allowed',
      denied: 'Denied',
      timed_out: 'Denied: nobody answered in time',
      cancelled: 'Withdrawn by the agent',
    });
    card.querySelector('.permission-actions')?.remove();
    card.classList.add(`permission-${frame.outcome}`);
    card.append(el('div', 'permission-outcome', labels[frame.outcome] ?? frame.outcome));
    const info = sessions.get(this.agentId);
    if (info?.attention === 'permission' && !this.root.querySelector('.permission-actions')) {
      info.attention = '';
      renderSidebar();
      renderTabTitle();
    }
  }

  /** @param {StreamEvent} message */
  onStreamEvent(message) {
    const event = message.event;
    if (event?.type !== 'content_block_delta' || event.delta?.type !== 'text_delta') return;
    if (!this.streaming) {
      this.streaming = this.append(el('div', 'msg assistant streaming'));
      this.streaming.append(el('div', 'bubble'));
      this.streamText = '';
    }
    this.streamText += event.delta.text ?? '';
    if (!this.renderQueued) {
      this.renderQueued = true;
      requestAnimationFrame(() => {
        this.renderQueued = false;
        const stick = this.atBottom();
        this.streaming?.firstElementChild?.replaceChildren(renderMarkdown(this.streamText));
        if (stick) this.scrollToEnd();
      });
    }
  }

  /** Drops the streamed reply: the stored message replaces it, or a reconnect cut it. */
  endStream() {
    this.streaming?.remove();
    this.streaming = null;
    this.streamText = '';
  }

  /**
   * @param {MessageFrame} frame
   * @param {ResultMessage} result
   */
  onResult(frame, result) {
    this.endStream();
    const answered = this.open.shift();
    if (answered) setQueued(answered, false);
    if (this.open[0]) setQueued(this.open[0], false);
    const footer = this.append(el('div', 'msg result'), frame);
    if (result.is_error) footer.classList.add('error');
    // The server tells each turn's own cost; the result's `total_cost_usd` is a running
    // total of the agent process.
    const cost = frame.turn_cost_usd;
    footer.append(el('span', 'result-text', resultSummary(result, cost, this.turnModel)));
    const seq = frame.seq;
    const actions = footer.appendChild(el('span', 'turn-actions'));
    actions.append(
      button('Rewind to here', 'turn-rewind', () => rewindTo(this.agentId, seq)),
      button('Fork from here', 'turn-fork', () => forkFrom(this.agentId, seq)),
    );
    touchSession(this.agentId, { last_active_at: frame.timestamp });
    scheduleSessionsRefresh();
    if (this.live) {
      const outcome = result.is_error ? 'The turn ended with an error' : 'The reply is ready';
      needsAttention(this.agentId, 'done', outcome);
    }
  }

  /** @param {import('./protocol').StatusFrame & {seq?: number, dropped_after_seq?: number, dropped_seqs?: number[], schedule_name?: string}} frame */
  onStatus(frame) {
    const { status, detail } = frame;
    if (status === 'rewound' && typeof frame.dropped_after_seq === 'number') {
      this.rewind(frame.dropped_after_seq, frame.dropped_seqs ?? []);
      this.append(el('div', 'msg notice', 'Rewound to an earlier turn'), frame);
      scheduleSessionsRefresh();
    }
    // Nothing runs after `idle`, and the prompts an import left without a reply never ran:
    // none of them waits any more.
    if (status === 'idle' || status === 'imported') {
      for (const msg of this.open) setQueued(msg, false);
      this.open = [];
    }
    if (status === 'deleted') {
      conversationDeleted(this.agentId);
      return;
    }
    if (status === 'scheduled_run') {
      const name = typeof frame.schedule_name === 'string' ? frame.schedule_name : 'a schedule';
      this.append(el('div', 'msg notice scheduled-run', `Scheduled run: ${name}`), frame);
    }
    if (status === 'crashed' || status === 'resume_failed' || status === 'warning') {
      this.append(el('div', 'msg notice error', `${status}: ${detail}`));
    }
    if (status !== 'lagged') touchSession(this.agentId, { live: !GONE.has(status) });
  }

  /**
   * Removes what a rewind dropped: every message after the stored frame `after`, and the
   * earlier frames `dropped` (prompts of later turns that were queued before it).
   * @param {number} after
   * @param {number[]} dropped
   */
  rewind(after, dropped) {
    const nodes = [...this.root.children];
    const cut = nodes.findIndex((n) => Number(/** @type {HTMLElement} */ (n).dataset.seq) > after);
    if (cut >= 0) for (const n of nodes.slice(cut)) n.remove();
    const gone = new Set(dropped);
    for (const n of nodes.slice(0, cut >= 0 ? cut : nodes.length)) {
      if (gone.has(Number(/** @type {HTMLElement} */ (n).dataset.seq))) n.remove();
    }
    this.open = this.open.filter((msg) => msg.isConnected);
    this.endStream();
  }

  /**
   * @param {'user' | 'assistant'} role
   * @param {MessageFrame} frame
   */
  bubble(role, frame) {
    const msg = el('div', `msg ${role}`);
    msg.append(el('div', 'bubble'));
    msg.title = new Date(frame.timestamp).toLocaleString();
    return msg;
  }

  /**
   * Adds a stored message in `seq` order, before the streamed reply; its time shows on hover.
   * @template {HTMLElement} E
   * @param {E} node
   * @param {{seq?: number, timestamp?: string}} [frame] the stored frame it shows
   * @returns {E}
   */
  append(node, frame) {
    if (frame?.seq) node.dataset.seq = String(frame.seq);
    if (frame?.timestamp && !node.title) node.title = new Date(frame.timestamp).toLocaleString();
    if (this.streaming && node !== this.streaming) this.root.insertBefore(node, this.streaming);
    else this.root.append(node);
    return node;
  }

  atBottom() {
    const box = ui.messages;
    return this.agentId !== current || box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  scrollToEnd() {
    if (this.agentId === current) ui.messages.scrollTop = ui.messages.scrollHeight;
  }
}

/**
 * Marks a user message as waiting for earlier turns.
 * @param {HTMLElement} msg
 * @param {boolean} queued
 */
function setQueued(msg, queued) {
  msg.classList.toggle('queued', queued);
  msg.querySelector('.queued-tag')?.remove();
  if (queued) msg.append(el('span', 'queued-tag', 'queued'));
}

/** Input fields that say best what a tool call does, most telling first. */
const TOOL_HINTS = ['command', 'file_path', 'path', 'pattern', 'url', 'query', 'description'];

/**
 * `Bash: ls -la`: the tool's name and the most telling field of its input.
 * @param {string} name
 * @param {unknown} input
 */
function toolSummary(name, input) {
  const fields = /** @type {Record<string, unknown>} */ (input && typeof input === 'object' ? input : {});
  const hint = TOOL_HINTS.map((key) => fields[key]).find((v) => typeof v === 'string');
  if (typeof hint !== 'string') return name;
  const line = hint.split('\n')[0];
  return `${name}: ${line.length > 80 ? `${line.slice(0, 79)}…` : line}`;
}

/**
 * `12.3 kB`: the size of a text in UTF-8.
 * @param {string} text
 */
function size(text) {
  const bytes = new TextEncoder().encode(text).length;
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1_000_000) return `${(bytes / 1000).toFixed(1)} kB`;
  return `${(bytes / 1_000_000).toFixed(1)} MB`;
}

/**
 * @param {number} usd
 */
function dollars(usd) {
  return `$${usd.toFixed(4)}`;
}

/**
 * @param {ResultMessage} result
 * @param {number | undefined} cost this turn's own cost
 * @param {string} model
 */
function resultSummary(result, cost, model) {
  const parts = [];
  if (!result.is_error) parts.push('Done');
  else if (result.terminal_reason?.startsWith('aborted')) parts.push('Interrupted');
  else if (result.terminal_reason === 'server_restart') parts.push('Stopped by a server restart');
  else if (result.terminal_reason === 'node_lost') parts.push('Stopped: the node running it was lost');
  else parts.push(`Error (${result.subtype ?? 'unknown'})`);
  if (typeof cost === 'number') parts.push(dollars(cost));
  const usage = result.usage;
  if (usage) {
    const input =
      (usage.input_tokens ?? 0) +
      (usage.cache_read_input_tokens ?? 0) +
      (usage.cache_creation_input_tokens ?? 0);
    parts.push(`${input} in / ${usage.output_tokens ?? 0} out tokens`);
  }
  if (typeof result.duration_ms === 'number') parts.push(duration(result.duration_ms));
  if (model) parts.push(model);
  return parts.join(' · ');
}

/** @param {number} ms */
function duration(ms) {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

// ---- dialogs ------------------------------------------------------------------------------

/**
 * Asks the user in a modal dialog; resolves with the entered text (or `''` without an input
 * field) on OK, null on Cancel or Esc.
 * @param {{title: string, text?: string, ok: string, value?: string, danger?: boolean}} question
 * @returns {Promise<string | null>}
 */
function ask({ title, text = '', ok, value, danger = false }) {
  ui.dialogTitle.textContent = title;
  ui.dialogText.textContent = text;
  ui.dialogText.hidden = !text;
  ui.dialogOk.textContent = ok;
  ui.dialogOk.classList.toggle('danger', danger);
  const withInput = value !== undefined;
  ui.dialogInput.hidden = !withInput;
  ui.dialogInput.value = value ?? '';
  return new Promise((resolve) => {
    /** @param {string | null} answer */
    const finish = (answer) => {
      ui.dialogForm.removeEventListener('submit', onSubmit);
      ui.dialogCancel.removeEventListener('click', onCancel);
      ui.dialog.removeEventListener('close', onCancel);
      if (ui.dialog.open) ui.dialog.close();
      resolve(answer);
    };
    /** @param {Event} event */
    const onSubmit = (event) => {
      event.preventDefault();
      finish(withInput ? ui.dialogInput.value : '');
    };
    const onCancel = () => finish(null);
    ui.dialogForm.addEventListener('submit', onSubmit);
    ui.dialogCancel.addEventListener('click', onCancel);
    ui.dialog.addEventListener('close', onCancel);
    ui.dialog.showModal();
    if (withInput) {
      ui.dialogInput.focus();
      ui.dialogInput.select();
    } else {
      ui.dialogOk.focus();
    }
  });
}

/**
 * Shows a notice in a conversation (an action failed).
 * @param {string} agentId
 * @param {string} text
 */
function notice(agentId, text) {
  views.get(agentId)?.append(el('div', 'msg notice error', text));
}

// ---- session management -------------------------------------------------------------------

async function renameCurrent() {
  const agentId = current;
  if (!agentId) return;
  const info = sessions.get(agentId);
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
  sessions.set(agentId, fromApi(body));
  saveLocalSessions();
  renderSidebar();
  renderHeader();
}

async function deleteCurrent() {
  const agentId = current;
  if (!agentId) return;
  const title = plainTitle(sessions.get(agentId)?.title ?? '') || 'this session';
  const ok = await ask({
    title: `Delete “${title}”?`,
    text: 'The conversation and all its messages are removed for good.',
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
function conversationDeleted(agentId) {
  if (!sessions.has(agentId) && !views.has(agentId)) return;
  sessions.delete(agentId);
  localStorage.removeItem(DRAFT_PREFIX + agentId);
  const view = views.get(agentId);
  views.delete(agentId);
  view?.close();
  saveLocalSessions();
  if (searchResults) searchResults = searchResults.filter((id) => id !== agentId);
  if (current === agentId) {
    current = null;
    const next = sortedSessions()[0];
    if (next) openSession(next.agent_id);
    else startSession();
  } else {
    renderSidebar();
  }
  renderTabTitle();
}

async function exportCurrent() {
  const agentId = current;
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
  const name = plainTitle(sessions.get(agentId)?.title ?? '').replace(/[^\w .-]+/g, '').trim();
  link.download = `${name || agentId}.jsonl`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * Goes back to the end of a turn: later messages are dropped and the agent forgets them.
 * @param {string} agentId
 * @param {number | undefined} seq the turn's `result`
 */
async function rewindTo(agentId, seq) {
  if (!seq) return;
  const ok = await ask({
    title: 'Rewind to here?',
    text: 'Every message after this turn is dropped, and the agent forgets it.',
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
async function forkFrom(agentId, seq) {
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
  sessions.set(newId, fromApi(body));
  saveLocalSessions();
  openSession(newId);
}

// ---- the page -----------------------------------------------------------------------------

function sortedSessions() {
  return [...sessions.values()].sort((a, b) =>
    (b.last_active_at || b.created_at).localeCompare(a.last_active_at || a.created_at),
  );
}

/** @param {string} agentId */
function openSession(agentId) {
  if (current && current !== agentId) saveDraft(current);
  const previous = current ? sessions.get(current) : undefined;
  if (
    previous &&
    !previous.title &&
    previous.agent_id !== agentId &&
    client.lastSeq(previous.agent_id) === 0 &&
    !localStorage.getItem(DRAFT_PREFIX + previous.agent_id)
  ) {
    // A new session left without a message (or a draft) is not worth a sidebar entry.
    sessions.delete(previous.agent_id);
    views.get(previous.agent_id)?.close();
    views.delete(previous.agent_id);
    saveLocalSessions();
  }
  if (!sessions.has(agentId)) {
    const now = new Date().toISOString();
    sessions.set(agentId, { agent_id: agentId, title: '', created_at: now, last_active_at: now });
    saveLocalSessions();
  }
  current = agentId;
  localStorage.setItem(CURRENT_KEY, agentId);
  if (decodeURIComponent(location.hash.slice(1)) !== agentId) {
    history.replaceState(null, '', `#${encodeURIComponent(agentId)}`);
  }
  let view = views.get(agentId);
  if (!view) {
    view = new View(agentId);
    views.set(agentId, view);
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
 * Starts a new conversation, in project directory `cwd` and run by agent `agent` when given
 * (sent as `options.cwd` and `options.agent` with its first message).
 * @param {string | null} [cwd]
 * @param {string | null} [agent]
 */
function startSession(cwd = null, agent = null) {
  const agentId = `web-${randomId()}`;
  if (cwd || agent) {
    const now = new Date().toISOString();
    sessions.set(agentId, { agent_id: agentId, title: '', created_at: now, last_active_at: now, cwd, backend: agent });
    newOptions.set(agentId, { cwd, agent });
  }
  openSession(agentId);
}

/**
 * "New session": when the server has project roots, asks in which project first (the list is
 * refreshed for next time meanwhile); without roots, starts one at once.
 */
async function newSession() {
  // Both lists are loaded with the sidebar; only a click before that waits for them (an agent
  // that has not said what it offers yet is asked again later, not waited for).
  if (!projectsLoaded || !agentsListed) {
    await Promise.all([projectsLoaded || loadProjects(), agentsLoaded || loadAgents()]);
  }
  if (projects.length === 0 && agents.length <= 1) startSession();
  else chooseProject();
  loadProjects();
}

/** Loads the agents a conversation can run (none known when the server has no such API). */
async function loadAgents() {
  try {
    const response = await api('/api/agents');
    if (!response.ok) return;
    /** @type {{default: string, agents: {name: string, kind: string, modes?: string[], supports?: {known?: boolean}}[]}} */
    const body = await response.json();
    // The built-in demo agent is offered only where it is the default: beside a real agent it
    // would turn every "New session" into a question nobody needs.
    agents = body.agents
      .filter((a) => a.name !== 'demo' || a.kind !== 'demo' || body.default === 'demo')
      .sort((a, b) => Number(b.name === body.default) - Number(a.name === body.default));
    // An ACP agent says what it offers (its modes) once it has run: asked again until then.
    agentsListed = true;
    agentsLoaded = body.agents.every((a) => a.supports?.known !== false);
    renderPickers(current ? sessions.get(current) : undefined);
  } catch {
    // Offline: the last list stays.
  }
}

/** Loads the server's project directories (none when it has no roots or no such API). */
async function loadProjects() {
  try {
    const response = await api('/api/projects');
    if (!response.ok) return;
    /** @type {{projects: Project[]}} */
    const body = await response.json();
    projects = body.projects;
    projectsLoaded = true;
  } catch {
    // Offline: the last list stays.
  }
}

/**
 * The new-session dialog: pick a project (or none) and start, or list the project's CLI
 * sessions and import one.
 */
function chooseProject() {
  if (ui.projectDialog.open) return;
  const last = current ? sessions.get(current)?.cwd : null;
  ui.project.replaceChildren(
    ...projects.map((p) => {
      const option = new Option(`${p.name} \u2014 ${p.path}`, p.path);
      option.title = p.path;
      return option;
    }),
    new Option('No project (a workspace of its own)', ''),
  );
  ui.project.value = last && projects.some((p) => p.path === last) ? last : projects[0]?.path ?? '';
  ui.projectField.hidden = projects.length === 0;
  ui.agent.replaceChildren(...agents.map((a) => new Option(`${a.name} (${a.kind})`, a.name)));
  ui.agentField.hidden = agents.length <= 1;
  hideCliSessions();
  ui.projectDialog.showModal();
  ui.project.focus();
}

function hideCliSessions() {
  ui.cliSessions.hidden = true;
  ui.cliList.replaceChildren();
  ui.cliStatus.textContent = '';
  ui.projectCli.disabled = !ui.project.value;
  ui.projectCli.hidden = projects.length === 0;
}

/** Lists the chosen project's CLI sessions in the dialog, each with an Import (or Open) button. */
async function showCliSessions() {
  const cwd = ui.project.value;
  if (!cwd) return;
  ui.cliSessions.hidden = false;
  ui.cliList.replaceChildren();
  ui.cliStatus.textContent = 'Loading…';
  try {
    const response = await api(`/api/projects/cli-sessions?cwd=${encodeURIComponent(cwd)}`);
    if (!response.ok) throw new Error(await apiError(response));
    /** @type {{sessions: CliSession[]}} */
    const body = await response.json();
    if (ui.project.value !== cwd) return;
    const now = Date.now();
    ui.cliStatus.textContent = body.sessions.length
      ? `${body.sessions.length} Claude CLI session${body.sessions.length === 1 ? '' : 's'} in ${projectName(cwd)}`
      : `No Claude CLI sessions in ${projectName(cwd)}.`;
    ui.cliList.replaceChildren(
      ...body.sessions.map((cli) => {
        const title = plainTitle(cli.title ?? '') || cli.cli_session_id;
        const li = el('li');
        li.append(
          el('span', 'cli-title', title),
          el('span', 'cli-meta', `${cli.message_count} messages · ${age(cli.modified_at, now)}`),
        );
        const action = cli.imported_as
          ? button('Open', 'cli-open', () => {
              ui.projectDialog.close();
              openSession(/** @type {string} */ (cli.imported_as));
            })
          : button('Import', 'cli-import', () => importCliSession(cwd, cli, action));
        action.setAttribute('aria-label', `${cli.imported_as ? 'Open' : 'Import'} ${title}`);
        li.append(action);
        return li;
      }),
    );
  } catch (err) {
    ui.cliStatus.textContent = `Could not list the CLI sessions: ${/** @type {Error} */ (err).message}`;
  }
}

/**
 * Imports a CLI session as a conversation and opens it.
 * @param {string} cwd
 * @param {CliSession} cli
 * @param {HTMLButtonElement} action
 */
async function importCliSession(cwd, cli, action) {
  action.disabled = true;
  ui.cliStatus.textContent = 'Importing…';
  try {
    const response = await api('/api/projects/cli-sessions/import', {
      method: 'POST',
      json: { cwd, cli_session_id: cli.cli_session_id },
    });
    if (!response.ok) throw new Error(await apiError(response));
    /** @type {ApiSession} */
    const imported = await response.json();
    sessions.set(imported.agent_id, fromApi(imported));
    saveLocalSessions();
    ui.projectDialog.close();
    openSession(imported.agent_id);
    scheduleSessionsRefresh();
  } catch (err) {
    action.disabled = false;
    ui.cliStatus.textContent = `Not imported: ${/** @type {Error} */ (err).message}`;
  }
}

/** @param {number} step +1 for the next session in the sidebar, -1 for the previous */
function stepSession(step) {
  const list = displayOrder();
  if (!list.length) return;
  const at = current ? list.indexOf(current) : -1;
  const next = list[(at + step + list.length) % list.length];
  if (next) openSession(next);
}

function renderHeader() {
  const info = current ? sessions.get(current) : undefined;
  ui.title.textContent = plainTitle(info?.title ?? '') || 'New session';
  ui.title.title = info?.title ?? '';
  const exists = !!current && (client.lastSeq(current) > 0 || typeof info?.total_cost_usd === 'number');
  for (const b of [ui.rename, ui.exportButton, ui.deleteButton]) b.disabled = !exists;
  const spent = (info?.total_cost_usd ?? 0) > 0 || (info?.input_tokens ?? 0) + (info?.output_tokens ?? 0) > 0;
  if (info && typeof info.total_cost_usd === 'number' && spent) {
    ui.totals.textContent = `${dollars(info.total_cost_usd)} · ${info.input_tokens ?? 0} in / ${info.output_tokens ?? 0} out tokens`;
    ui.totals.title = 'What this conversation has cost so far';
  } else {
    ui.totals.textContent = '';
  }
  renderPickers(info);
}

/**
 * Shows the conversation's model and permission mode in the pickers.
 * @param {SessionInfo | undefined} info
 */
function renderPickers(info) {
  renderModeOptions(info);
  for (const [select, value] of /** @type {[HTMLSelectElement, string][]} */ ([
    [ui.model, info?.model ?? ''],
    [ui.permissionMode, info?.permission_mode ?? ''],
  ])) {
    if (value && ![...select.options].some((o) => o.value === value)) {
      select.append(new Option(value, value));
    }
    select.value = value;
  }
}

/** @type {string[][] | null} the permission modes the page offers for the Claude CLI (and the demo agent) */
let cliModeOptions = null;

/**
 * Offers the permission modes of the conversation's agent: an ACP agent's own, once the server
 * knows them, else the Claude CLI's.
 * @param {SessionInfo | undefined} info
 */
function renderModeOptions(info) {
  cliModeOptions ??= [...ui.permissionMode.options].map((o) => [o.value, o.text]);
  const name = info?.backend ?? (info ? newOptions.get(info.agent_id)?.agent : null);
  const agent = agents.find((a) => a.name === name);
  const own = agent?.kind === 'acp' && agent.modes?.length ? agent.modes : null;
  const options = own ? [['', 'Default permissions'], ...own.map((m) => [m, m])] : cliModeOptions;
  const have = [...ui.permissionMode.options].map((o) => o.value).join('\n');
  if (have === options.map(([value]) => value).join('\n')) return;
  ui.permissionMode.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
}

function renderControls() {
  const busy = current ? (views.get(current)?.busy ?? false) : false;
  ui.stop.hidden = !busy;
  document.body.classList.toggle('busy', busy);
}

/** @param {ConnectionState} state */
function renderConnection(state) {
  const labels = {
    connecting: 'Connecting…',
    open: 'Connected',
    reconnecting: 'Reconnecting…',
    closed: 'Disconnected',
  };
  ui.conn.textContent = labels[state];
  ui.conn.dataset.state = state;
}

/**
 * What the user wrote in a stored `user` message: its text and images, when the user sent it
 * (plain text, or text and image blocks in a message without the `uuid` an agent's messages
 * carry); `null` for tool results and the agent's notices.
 * @param {ChatMessage} message
 * @returns {{text: string, images: ImageBlock[]} | null}
 */
function promptOf(message) {
  const content = message.message?.content;
  if (typeof content === 'string') return { text: content, images: [] };
  if (!Array.isArray(content) || message.uuid !== undefined) return null;
  if (!content.every((b) => b.type === 'text' || b.type === 'image')) return null;
  const text = content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n\n');
  const images = /** @type {ImageBlock[]} */ (content.filter((b) => b.type === 'image'));
  return { text, images };
}

/**
 * An image block as an element: the picture when it is of a type a turn may carry, else a
 * placeholder.
 * @param {ImageBlock} image
 * @param {string} alt
 */
function imageElement(image, alt) {
  if (!IMAGE_TYPES.includes(image.source?.media_type) || typeof image.source?.data !== 'string') {
    return el('span', 'image-placeholder', '[image]');
  }
  const img = el('img', 'msg-image');
  img.alt = alt;
  img.src = imageUrl(image);
  return img;
}

// ---- images in the composer -----------------------------------------------------------------

/** Images waiting in the composer, sent with the next message. */
/** @type {ImageBlock[]} */
let attachments = [];

function renderAttachments() {
  ui.attachments.replaceChildren(
    ...attachments.map((image, i) => {
      const item = el('div', 'attachment');
      item.append(
        imageElement(image, `Attached image ${i + 1}`),
        button('Remove image', 'remove-image', () => {
          attachments.splice(i, 1);
          renderAttachments();
        }),
      );
      return item;
    }),
  );
  ui.attachments.hidden = attachments.length === 0;
}

/**
 * Adds the images among `files` to the composer, scaled to fit what is left of the budget.
 * @param {Iterable<File>} files
 */
async function attach(files) {
  if (!current) startSession();
  const agentId = /** @type {string} */ (current);
  for (const file of files) {
    const used = attachments.reduce((sum, a) => sum + a.source.data.length, 0);
    try {
      if (used >= IMAGE_BUDGET * 0.9) throw new Error('no room for more images in this message');
      attachments.push(await imageBlock(file, IMAGE_BUDGET - used));
    } catch (err) {
      notice(agentId, `Not attached: ${/** @type {Error} */ (err).message}`);
    }
    renderAttachments();
  }
}

/** @param {string} agentId */
function saveDraft(agentId) {
  const text = ui.input.value;
  if (text) localStorage.setItem(DRAFT_PREFIX + agentId, text);
  else localStorage.removeItem(DRAFT_PREFIX + agentId);
}

function send() {
  const text = ui.input.value;
  if (!text.trim() && attachments.length === 0) return;
  if (!current) startSession();
  const agentId = /** @type {string} */ (current);
  const content = attachments.length
    ? [...(text.trim() ? [{ type: /** @type {const} */ ('text'), text }] : []), ...attachments]
    : text;
  attachments = [];
  renderAttachments();
  ui.input.value = '';
  localStorage.removeItem(DRAFT_PREFIX + agentId);
  autosize();
  /** @type {ChatOptions} */
  const options = {};
  if (ui.model.value) options.model = ui.model.value;
  if (ui.permissionMode.value) options.permission_mode = ui.permissionMode.value;
  // A new conversation names its project and agent; the server keeps them from then on.
  const chosen = newOptions.get(agentId);
  if (chosen && client.lastSeq(agentId) === 0) {
    if (chosen.cwd) options.cwd = chosen.cwd;
    if (chosen.agent) options.agent = chosen.agent;
  }
  const hasOptions = Object.keys(options).length > 0;
  client.chat(agentId, content, hasOptions ? { options } : {}).catch((err) => {
    notice(agentId, `Not sent: ${err.message}`);
  });
}

function interrupt() {
  if (current && views.get(current)?.busy) client.interrupt(current);
}

function autosize() {
  ui.input.style.height = 'auto';
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 240)}px`;
}

/** The settings pickers apply from the next turn: remembered for the conversation. */
for (const [select, field] of /** @type {[HTMLSelectElement, 'model' | 'permission_mode'][]} */ ([
  [ui.model, 'model'],
  [ui.permissionMode, 'permission_mode'],
])) {
  select.addEventListener('change', () => {
    const info = current ? sessions.get(current) : undefined;
    if (info) info[field] = select.value || null;
  });
}

// ---- theme --------------------------------------------------------------------------------

const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');

function renderTheme() {
  const chosen = localStorage.getItem(THEME_KEY);
  if (chosen === 'dark' || chosen === 'light') document.documentElement.dataset.theme = chosen;
  else delete document.documentElement.dataset.theme;
  const dark = chosen ? chosen === 'dark' : darkQuery.matches;
  ui.theme.setAttribute('aria-pressed', String(dark));
}

ui.theme.addEventListener('click', () => {
  const dark = ui.theme.getAttribute('aria-pressed') === 'true';
  // Back to following the system when the choice matches it.
  const next = dark ? 'light' : 'dark';
  if ((next === 'dark') === darkQuery.matches) localStorage.removeItem(THEME_KEY);
  else localStorage.setItem(THEME_KEY, next);
  renderTheme();
});
darkQuery.addEventListener('change', renderTheme);

// ---- sidebar drawer -----------------------------------------------------------------------

function closeSidebar() {
  document.body.classList.remove('sidebar-open');
  ui.toggleSidebar.setAttribute('aria-expanded', 'false');
}

ui.toggleSidebar.addEventListener('click', (event) => {
  event.stopPropagation();
  const open = document.body.classList.toggle('sidebar-open');
  ui.toggleSidebar.setAttribute('aria-expanded', String(open));
});
// At phone width a tap beside the open sidebar closes it, and does nothing else.
byId('main').addEventListener(
  'click',
  (event) => {
    if (!document.body.classList.contains('sidebar-open')) return;
    event.preventDefault();
    event.stopPropagation();
    closeSidebar();
  },
  true,
);

// ---- input --------------------------------------------------------------------------------

ui.composer.addEventListener('submit', (event) => {
  event.preventDefault();
  send();
});
ui.input.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
ui.input.addEventListener('input', () => {
  autosize();
  if (current) saveDraft(current);
});
ui.input.addEventListener('paste', (event) => {
  const files = [...(event.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/'));
  if (files.length === 0) return;
  event.preventDefault();
  attach(files);
});
ui.composer.addEventListener('dragover', (event) => {
  if (event.dataTransfer?.types.includes('Files')) event.preventDefault();
});
ui.composer.addEventListener('drop', (event) => {
  if (!event.dataTransfer?.files.length) return;
  event.preventDefault();
  attach(event.dataTransfer.files);
});
ui.attach.addEventListener('click', () => ui.imageFile.click());
ui.imageFile.addEventListener('change', () => {
  attach([...(ui.imageFile.files ?? [])]);
  ui.imageFile.value = '';
});
ui.search.addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(runSearch, 200);
});
ui.search.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && ui.search.value) {
    event.stopPropagation();
    ui.search.value = '';
    runSearch();
  }
});

/** @param {EventTarget | null} target */
function typing(target) {
  return (
    target instanceof HTMLElement &&
    (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName))
  );
}

document.addEventListener('keydown', (event) => {
  if (ui.dialog.open || ui.shortcuts.open || ui.projectDialog.open || !ui.signIn.hidden) return;
  if (event.key === 'Escape') {
    interrupt();
    return;
  }
  if (event.altKey && !event.ctrlKey && !event.metaKey) {
    if (event.code === 'KeyN') {
      event.preventDefault();
      newSession();
    } else if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      event.preventDefault();
      stepSession(event.key === 'ArrowDown' ? 1 : -1);
    }
    return;
  }
  if (typing(event.target) || event.ctrlKey || event.metaKey) return;
  if (event.key === '/') {
    event.preventDefault();
    ui.input.focus();
  } else if (event.key === '?') {
    event.preventDefault();
    ui.shortcuts.showModal();
  }
});
ui.help.addEventListener('click', () => ui.shortcuts.showModal());
ui.openSchedules.addEventListener('click', () => {
  resetScheduleForm();
  renderSchedules();
  ui.schedules.showModal();
  loadSchedules();
});
ui.schedulesClose.addEventListener('click', () => ui.schedules.close());
ui.scheduleReset.addEventListener('click', resetScheduleForm);
ui.scheduleKind.addEventListener('change', () => {
  ui.scheduleWhen.placeholder = ui.scheduleKind.value === 'cron' ? '0 8 * * 1-5' : '3600';
});
ui.scheduleForm.addEventListener('submit', (event) => {
  event.preventDefault();
  saveSchedule();
});
ui.shortcutsClose.addEventListener('click', () => ui.shortcuts.close());
ui.stop.addEventListener('click', interrupt);
ui.newSession.addEventListener('click', newSession);
ui.project.addEventListener('change', hideCliSessions);
ui.projectCli.addEventListener('click', showCliSessions);
ui.projectCancel.addEventListener('click', () => ui.projectDialog.close());
ui.projectForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const cwd = ui.project.value || null;
  const agent = agents.length > 1 ? ui.agent.value || null : null;
  ui.projectDialog.close();
  startSession(cwd, agent);
});
ui.rename.addEventListener('click', renameCurrent);
ui.deleteButton.addEventListener('click', deleteCurrent);
ui.exportButton.addEventListener('click', exportCurrent);
window.addEventListener('hashchange', () => {
  const agentId = decodeURIComponent(location.hash.slice(1));
  if (agentId && agentId !== current) openSession(agentId);
});

let wasConnected = false;
client.onState((state) => {
  renderConnection(state);
  if (state === 'open') {
    // A reply that was streaming when the socket dropped is replaced by the stored one.
    if (wasConnected) for (const view of views.values()) view.endStream();
    // Turns that ended while the socket was down sent no activity line.
    running.clear();
    wasConnected = true;
    refreshSessions();
    loadSchedules();
  }
});

renderTheme();
renderNotifyButton();
loadLocalSessions();
renderConnection(client.state);
client.connect();
const initial =
  decodeURIComponent(location.hash.slice(1)) ||
  localStorage.getItem(CURRENT_KEY) ||
  sortedSessions()[0]?.agent_id;
if (initial) openSession(initial);
else startSession();
setInterval(() => {
  refreshSessions();
  loadSchedules();
  renderSidebar();
}, SIDEBAR_REFRESH_MS);
