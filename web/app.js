// @ts-check
/**
 * @file The agentmux web UI: a session sidebar and one conversation pane, all over one
 * WebSocket (see client.js). Every piece of model output, user input and title is put into
 * the page as text nodes; Markdown is rendered by markdown.js, which builds elements too.
 */

import { AgentmuxClient, defaultUrl, randomId } from './client.js';
import { renderMarkdown } from './markdown.js';

/** @typedef {import('./protocol').ServerFrame} ServerFrame */
/** @typedef {import('./protocol').MessageFrame} MessageFrame */
/** @typedef {import('./protocol').PermissionRequestFrame} PermissionRequestFrame */
/** @typedef {import('./protocol').PermissionResolvedFrame} PermissionResolvedFrame */
/** @typedef {import('./client.js').ConnectionState} ConnectionState */

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
 */

/**
 * One entry of `GET /api/sessions` (the fields the UI reads).
 * @typedef {object} ApiSession
 * @property {string} agent_id
 * @property {string | null} title
 * @property {boolean} live
 * @property {string} created_at
 * @property {string} last_active_at
 */

/**
 * The parts of the agent's stream-json messages the UI reads (Claude Code CLI shapes).
 * @typedef {{type: 'text', text: string}
 *   | {type: 'thinking', thinking: string}
 *   | {type: 'tool_use', id: string, name: string, input: unknown}
 *   | {type: 'tool_result', tool_use_id: string, content: string | {type: string, text?: string}[], is_error?: boolean}} ContentBlock
 * @typedef {{message?: {content?: string | ContentBlock[]}, aborted?: boolean}} ChatMessage
 * @typedef {{event?: {type?: string, delta?: {type?: string, text?: string}}}} StreamEvent
 * @typedef {{input_tokens?: number, output_tokens?: number, cache_read_input_tokens?: number,
 *   cache_creation_input_tokens?: number}} Usage
 * @typedef {{is_error?: boolean, subtype?: string, terminal_reason?: string,
 *   total_cost_usd?: number, duration_ms?: number, usage?: Usage}} ResultMessage
 */

const SESSIONS_KEY = 'agentmux.sessions.v1';
const CURRENT_KEY = 'agentmux.current';
/** The API token, when the server asks for one: kept for this tab only. */
const TOKEN_KEY = 'agentmux.token';
/** How often the sidebar is refreshed from the server, in milliseconds. */
const SIDEBAR_REFRESH_MS = 30_000;
/** States after which a conversation's agent is no longer in the server's memory. */
const GONE = new Set(['evicted', 'crashed']);
/** Titles are the first 50 characters of the first message, as the server stores them. */
const TITLE_CHARS = 50;

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
 * @param {string} id
 * @returns {HTMLElement}
 */
function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`missing #${id}`);
  return node;
}

const ui = {
  sessions: byId('sessions'),
  newSession: byId('new-session'),
  toggleSidebar: byId('toggle-sidebar'),
  title: byId('title'),
  conn: byId('conn'),
  messages: byId('messages'),
  composer: /** @type {HTMLFormElement} */ (byId('composer')),
  input: /** @type {HTMLTextAreaElement} */ (byId('input')),
  stop: /** @type {HTMLButtonElement} */ (byId('stop')),
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

const client = new AgentmuxClient({ url: socketUrl });

/** @type {Map<string, SessionInfo>} */
const sessions = new Map();
/** @type {Map<string, View>} */
const views = new Map();
/** @type {string | null} */
let current = null;
/** Whether `GET /api/sessions` exists on this server (unknown until asked). */
let sessionsApi = true;

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
  const list = [...sessions.values()].map(({ agent_id, title, created_at, last_active_at }) => ({
    agent_id,
    title,
    created_at,
    last_active_at,
  }));
  localStorage.setItem(SESSIONS_KEY, JSON.stringify(list));
}

/**
 * Merges the server's list into the sidebar; a 404 means this server has no such API. Waits
 * while the sign-in form is up.
 */
async function refreshSessions() {
  if (!sessionsApi || signedIn) return;
  try {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const response = await fetch('/api/sessions?limit=100', {
      headers: { accept: 'application/json', ...authHeaders() },
    });
    if (response.status === 401) {
      signIn(token ? REFUSED : '').then(refreshSessions);
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
    const open = current ? sessions.get(current) : undefined;
    const titles = new Map([...sessions.values()].map((s) => [s.agent_id, s.title]));
    sessions.clear();
    for (const s of body.sessions) {
      sessions.set(s.agent_id, {
        agent_id: s.agent_id,
        title: s.title || titles.get(s.agent_id) || '',
        created_at: s.created_at,
        last_active_at: s.last_active_at,
        live: s.live,
      });
    }
    if (open && !sessions.has(open.agent_id)) sessions.set(open.agent_id, open);
    saveLocalSessions();
    renderSidebar();
    renderHeader();
  } catch {
    // Offline or restarting: the socket's state already says so.
  }
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let refreshTimer;

/** Refreshes the sidebar soon, once for a burst of finished turns. */
function scheduleSessionsRefresh() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refreshSessions, 500);
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
  if (views.get(info.agent_id)?.busy) return 'busy';
  return info.live ? 'live' : 'idle';
}

function renderSidebar() {
  const now = Date.now();
  const list = [...sessions.values()].sort((a, b) =>
    (b.last_active_at || b.created_at).localeCompare(a.last_active_at || a.created_at),
  );
  ui.sessions.replaceChildren(
    ...list.map((info) => {
      const li = el('li');
      const button = li.appendChild(el('button', 'session'));
      button.type = 'button';
      button.dataset.agentId = info.agent_id;
      if (info.agent_id === current) button.setAttribute('aria-current', 'true');
      button.append(el('span', 'session-title', info.title || 'New session'));
      const meta = button.appendChild(el('span', 'session-meta'));
      const state = badge(info);
      meta.append(
        el('span', `badge badge-${state}`, state),
        el('span', 'session-age', age(info.last_active_at || info.created_at, now)),
      );
      button.addEventListener('click', () => openSession(info.agent_id));
      return li;
    }),
  );
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
    client.open(agentId, (frame) => this.onFrame(frame));
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
  }

  /**
   * @param {MessageFrame} frame
   * @param {ChatMessage} message
   */
  onUser(frame, message) {
    const content = message.message?.content;
    if (typeof content === 'string') {
      const msg = this.append(this.bubble('user', frame), frame);
      msg.lastElementChild?.append(content);
      this.open.push(msg);
      if (this.open.length > 1) setQueued(msg, true);
      const info = sessions.get(this.agentId);
      touchSession(this.agentId, {
        title: info?.title || content.trim().slice(0, TITLE_CHARS),
        last_active_at: frame.timestamp,
      });
      return;
    }
    for (const block of content ?? []) {
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
    for (const block of Array.isArray(content) ? content : []) {
      if (block.type === 'text' && block.text) {
        const msg = this.append(this.bubble('assistant', frame), frame);
        if (message.aborted) msg.classList.add('aborted');
        msg.lastElementChild?.append(renderMarkdown(block.text));
      } else if (block.type === 'tool_use') {
        const details = el('details', 'msg tool');
        details.append(el('summary', undefined, toolSummary(block.name, block.input)));
        details.append(el('pre', 'tool-input', JSON.stringify(block.input, null, 2)));
        this.tools.set(block.id, details);
        this.append(details, frame);
      } else if (block.type === 'thinking' && block.thinking) {
        const details = el('details', 'msg thinking');
        details.append(el('summary', undefined, 'Thinking'), el('div', 'thinking-text', block.thinking));
        this.append(details, frame);
      }
    }
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
    details.append(el('div', 'tool-label', block.is_error ? 'Error' : 'Result'));
    details.append(el('pre', 'tool-output', text));
  }

  /**
   * Shows a tool the agent wants to use, with Allow and Deny.
   * @param {PermissionRequestFrame} frame
   */
  onPermissionRequest(frame) {
    const card = el('div', 'msg permission');
    card.append(el('div', 'permission-title', `Allow ${frame.tool_name}?`));
    card.append(el('pre', 'tool-input', JSON.stringify(frame.input, null, 2)));
    const actions = card.appendChild(el('div', 'permission-actions'));
    /** @param {import('./protocol').PermissionDecision} decision */
    const answer = (decision) => {
      for (const button of actions.querySelectorAll('button')) button.disabled = true;
      client.respondToPermission(this.agentId, frame.request_id, decision);
    };
    const allow = actions.appendChild(el('button', 'allow', 'Allow'));
    allow.type = 'button';
    allow.addEventListener('click', () => answer({ behavior: 'allow' }));
    const deny = actions.appendChild(el('button', 'deny', 'Deny'));
    deny.type = 'button';
    deny.addEventListener('click', () =>
      answer({ behavior: 'deny', message: 'The user denied this tool use.' }),
    );
    this.permissions.set(frame.request_id, card);
    this.append(card, frame);
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
        this.streaming?.lastElementChild?.replaceChildren(renderMarkdown(this.streamText));
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
    footer.textContent = resultSummary(result);
    touchSession(this.agentId, { last_active_at: frame.timestamp });
    scheduleSessionsRefresh();
  }

  /** @param {import('./protocol').StatusFrame & {seq?: number, dropped_after_seq?: number}} frame */
  onStatus(frame) {
    const { status, detail } = frame;
    if (status === 'rewound' && typeof frame.dropped_after_seq === 'number') {
      this.rewind(frame.dropped_after_seq);
      this.append(el('div', 'msg notice', 'Rewound to an earlier turn'), frame);
    }
    if (status === 'idle') {
      for (const msg of this.open) setQueued(msg, false);
      this.open = [];
    }
    if (status === 'crashed' || status === 'resume_failed' || status === 'warning') {
      this.append(el('div', 'msg notice error', `${status}: ${detail}`));
    }
    if (status !== 'lagged') touchSession(this.agentId, { live: !GONE.has(status) });
  }

  /**
   * Removes what a rewind dropped: every message after the stored frame `after`.
   * @param {number} after
   */
  rewind(after) {
    const nodes = [...this.root.children];
    const cut = nodes.findIndex((n) => Number(/** @type {HTMLElement} */ (n).dataset.seq) > after);
    if (cut >= 0) for (const n of nodes.slice(cut)) n.remove();
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
   * Adds a stored message in `seq` order, before the streamed reply.
   * @template {HTMLElement} E
   * @param {E} node
   * @param {{seq?: number}} [frame] the stored frame it shows
   * @returns {E}
   */
  append(node, frame) {
    if (frame?.seq) node.dataset.seq = String(frame.seq);
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

/** @param {ResultMessage} result */
function resultSummary(result) {
  const parts = [];
  if (!result.is_error) parts.push('Done');
  else if (result.terminal_reason?.startsWith('aborted')) parts.push('Interrupted');
  else if (result.terminal_reason === 'server_restart') parts.push('Stopped by a server restart');
  else parts.push(`Error (${result.subtype ?? 'unknown'})`);
  if (typeof result.total_cost_usd === 'number') parts.push(`$${result.total_cost_usd.toFixed(4)}`);
  const usage = result.usage;
  if (usage) {
    const input =
      (usage.input_tokens ?? 0) +
      (usage.cache_read_input_tokens ?? 0) +
      (usage.cache_creation_input_tokens ?? 0);
    parts.push(`${input} in / ${usage.output_tokens ?? 0} out tokens`);
  }
  if (typeof result.duration_ms === 'number') parts.push(duration(result.duration_ms));
  return parts.join(' · ');
}

/** @param {number} ms */
function duration(ms) {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

// ---- the page -----------------------------------------------------------------------------

/** @param {string} agentId */
function openSession(agentId) {
  const previous = current ? sessions.get(current) : undefined;
  if (previous && !previous.title && previous.agent_id !== agentId) {
    // A new session left without a message is not worth a sidebar entry.
    sessions.delete(previous.agent_id);
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
  document.body.classList.remove('sidebar-open');
  renderHeader();
  renderControls();
  renderSidebar();
  ui.input.focus();
}

function newSession() {
  openSession(`web-${randomId()}`);
}

function renderHeader() {
  const info = current ? sessions.get(current) : undefined;
  ui.title.textContent = info?.title || 'New session';
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

function send() {
  const text = ui.input.value;
  if (!text.trim()) return;
  if (!current) newSession();
  const agentId = /** @type {string} */ (current);
  ui.input.value = '';
  autosize();
  client.chat(agentId, text).catch((err) => {
    views.get(agentId)?.append(el('div', 'msg notice error', `Not sent: ${err.message}`));
  });
}

function interrupt() {
  if (current && views.get(current)?.busy) client.interrupt(current);
}

function autosize() {
  ui.input.style.height = 'auto';
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 240)}px`;
}

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
ui.input.addEventListener('input', autosize);
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape') interrupt();
});
ui.stop.addEventListener('click', interrupt);
ui.newSession.addEventListener('click', newSession);
ui.toggleSidebar.addEventListener('click', (event) => {
  event.stopPropagation();
  document.body.classList.toggle('sidebar-open');
});
// At phone width a tap beside the open sidebar closes it, and does nothing else.
byId('main').addEventListener(
  'click',
  (event) => {
    if (!document.body.classList.contains('sidebar-open')) return;
    event.preventDefault();
    event.stopPropagation();
    document.body.classList.remove('sidebar-open');
  },
  true,
);
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
    wasConnected = true;
    refreshSessions();
  }
});

loadLocalSessions();
renderConnection(client.state);
client.connect();
const initial =
  decodeURIComponent(location.hash.slice(1)) ||
  localStorage.getItem(CURRENT_KEY) ||
  [...sessions.values()].sort((a, b) => b.last_active_at.localeCompare(a.last_active_at))[0]
    ?.agent_id;
if (initial) openSession(initial);
else newSession();
setInterval(() => {
  refreshSessions();
  renderSidebar();
}, SIDEBAR_REFRESH_MS);
