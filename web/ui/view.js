// @ts-check
/**
 * @file One conversation's pane ({@link View}): its history and live frames as messages,
 * streamed replies, tool calls and their results, diffs, permission prompts, turn footers with
 * rewind and fork. Every piece of model output and user input is put into the page as text
 * nodes; Markdown is rendered by markdown.js, which builds elements too.
 */

import { diffStat, renderDiff, toolDiff } from '../diff.js';
import { IMAGE_TYPES, imageUrl } from '../images.js';
import { renderMarkdown } from '../markdown.js';
import { budgetNotice } from './account.js';
import { client } from './api.js';
import { changesReported, filesRestored } from './changes.js';
import { conversationDeleted, forkFrom, rewindTo } from './conversations.js';
import { button, el, ui } from './dom.js';
import { resultSummary, size, toolSummary } from './format.js';
import { renderControls, renderHeader } from './header.js';
import { needsAttention, renderTabTitle } from './notifications.js';
import { isAlwaysAllowed, permissionCard, settleCard } from './permissions.js';
import { isShared, limitActions, viewersChanged } from './sharing.js';
import { renderSidebar, scheduleSessionsRefresh, touchSession } from './sidebar.js';
import { state } from './state.js';

/** @typedef {import('../protocol').ServerFrame} ServerFrame */
/** @typedef {import('../protocol').MessageFrame} MessageFrame */
/** @typedef {import('../protocol').PermissionRequestFrame} PermissionRequestFrame */
/** @typedef {import('../protocol').PermissionResolvedFrame} PermissionResolvedFrame */
/** @typedef {import('../images.js').ImageBlock} ImageBlock */

/**
 * The parts of the agent's stream-json messages the UI reads (Claude Code CLI shapes).
 * @typedef {{type: 'text', text: string}
 *   | {type: 'thinking', thinking: string}
 *   | {type: 'tool_use', id: string, name: string, input: unknown}
 *   | {type: 'tool_result', tool_use_id: string, content: string | {type: string, text?: string}[], is_error?: boolean}
 *   | ImageBlock} ContentBlock
 * @typedef {{message?: {content?: string | ContentBlock[], model?: string}, aborted?: boolean,
 *   subtype?: string, model?: string, uuid?: string, sender?: string}} ChatMessage
 * @typedef {{event?: {type?: string, delta?: {type?: string, text?: string}}}} StreamEvent
 * @typedef {{input_tokens?: number, output_tokens?: number, cache_read_input_tokens?: number,
 *   cache_creation_input_tokens?: number}} Usage
 * @typedef {{is_error?: boolean, subtype?: string, terminal_reason?: string, session_id?: string,
 *   total_cost_usd?: number, duration_ms?: number, usage?: Usage}} ResultMessage
 */

/** The statuses of a wait for a rate limit, and what each says. */
const LIMIT_NOTICES = new Map([
  ['limit_continued', 'The rate limit has reset: continuing'],
  ['limit_wait_cancelled', 'No longer waiting for the rate limit: nothing continues by itself'],
  ['limit_gave_up', 'Not continuing by itself'],
]);
/** States after which a conversation's agent is no longer in the server's memory. */
const GONE = new Set(['evicted', 'crashed', 'moved']);
/** Titles are the first 50 characters of the first message, as the server stores them. */
const TITLE_CHARS = 50;
/** Tool output longer than this (characters or lines) is folded behind its size. */
const FOLD_CHARS = 2000;
const FOLD_LINES = 30;

/** One conversation's pane, kept while the page lives so switching back is instant. */
export class View {
  /**
   * @param {string} agentId
   * @param {boolean} fresh the conversation does not exist yet: there is nothing to replay
   */
  constructor(agentId, fresh) {
    this.agentId = agentId;
    this.root = el('div', 'conversation');
    /** @type {HTMLElement | null} the reply being streamed */
    this.streaming = null;
    this.streamText = '';
    this.renderQueued = false;
    /** @type {HTMLElement[]} user turns not yet answered by a `result`, oldest first */
    this.open = [];
    /** @type {Map<string, HTMLElement>} tool_use id → its message */
    this.tools = new Map();
    /** @type {Map<string, HTMLElement>} permission request id → its card */
    this.permissions = new Map();
    /** Set once the stored history has been delivered: later frames are news. */
    this.live = fresh;
    /** @type {string} model of the running turn, from its `system` `init` */
    this.turnModel = '';
    /** @type {HTMLElement | null} the notice of the wait for a rate limit, while it waits */
    this.waitNotice = null;
    /** @type {Set<string>} the principals who wrote in it */
    this.senders = new Set();
    if (isShared(agentId)) this.root.classList.add('shared');
    // A person opened it: the agent starts meanwhile, so a message typed next skips start-up.
    this.close = client.open(agentId, (frame) => this.onFrame(frame), {
      onReplayed: () => (this.live = true),
      warm: !fresh,
      fresh,
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
      case 'viewers':
        viewersChanged(this.agentId, frame);
        this.root.classList.toggle('shared', isShared(this.agentId));
        break;
      case 'error':
        // A refused chat is told by the composer, which sent it.
        if (frame.client_msg_id) break;
        if (frame.code !== 'unknown_agent' || this.root.childElementCount > 0) {
          this.append(messageElement('notice error', 'Error', `Error (${frame.code}): ${frame.error}`));
        }
        break;
    }
    if (stick) this.scrollToEnd();
    if (wasBusy !== this.busy) {
      renderSidebar();
      if (this.agentId === state.current) renderControls();
    }
    if (this.agentId === state.current && 'seq' in frame) renderHeader();
  }

  /**
   * @param {MessageFrame} frame
   * @param {ChatMessage} message
   */
  onUser(frame, message) {
    const content = message.message?.content;
    const local = localCommand(message);
    if (local !== null) {
      if (local) this.append(messageElement('notice local-command', 'System', local), frame);
      return;
    }
    const prompt = promptOf(message);
    if (prompt) {
      // A turn sent while the conversation waited for a rate limit ended the wait.
      this.endWait();
      const msg = this.append(this.bubble('user', frame), frame);
      if (typeof message.sender === 'string') {
        // Shown while several principals work on it (the `shared` class of the pane).
        // For the eye: the message's name says who wrote it, when it was not you.
        const name = el('div', 'sender', message.sender);
        name.setAttribute('aria-hidden', 'true');
        msg.prepend(name);
        msg.dataset.sender = message.sender;
        if (state.me !== null && message.sender !== state.me) msg.setAttribute('aria-label', message.sender);
        this.senders.add(message.sender);
        this.root.classList.toggle('shared', isShared(this.agentId) || this.senders.size > 1);
      }
      const bubble = /** @type {HTMLElement} */ (msg.lastElementChild);
      bubble.append(prompt.text);
      prompt.images.forEach((image, i) => bubble.append(imageElement(image, `Image ${i + 1} of the message`)));
      this.open.push(msg);
      if (this.open.length > 1) setQueued(msg, true);
      const info = state.sessions.get(this.agentId);
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
        this.append(messageElement('notice', 'Notice', 'Interrupted'), frame);
      } else if (block.type === 'text') {
        this.append(messageElement('notice', 'Notice', block.text), frame);
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
        const thinking = messageElement('thinking', 'Thinking');
        const details = thinking.appendChild(el('details'));
        details.append(el('summary', undefined, 'Thinking'), el('div', 'thinking-text', block.thinking));
        this.append(thinking, frame);
      }
    }
  }

  /**
   * A tool call: collapsed with a one-line summary; file edits open, as a diff.
   * @param {MessageFrame} frame
   * @param {Extract<ContentBlock, {type: 'tool_use'}>} block
   */
  onToolUse(frame, block) {
    const tool = messageElement('tool', `${block.name} tool`);
    tool.dataset.tool = block.name;
    const details = tool.appendChild(el('details'));
    const summary = details.appendChild(el('summary', undefined, toolSummary(block.name, block.input)));
    const edit = toolDiff(block.name, block.input);
    if (edit) {
      tool.classList.add('edit');
      details.open = true;
      summary.textContent = `${block.name}: ${edit.path || 'a file'}`;
      summary.append(el('span', 'diff-stat', ` ${diffStat(edit.lines)}`));
      details.append(renderDiff(edit.lines));
    } else {
      details.append(el('pre', 'tool-input', JSON.stringify(block.input, null, 2)));
    }
    this.tools.set(block.id, tool);
    this.append(tool, frame);
  }

  /** @param {Extract<ContentBlock, {type: 'tool_result'}>} block */
  onToolResult(block) {
    const text =
      typeof block.content === 'string'
        ? block.content
        : (block.content ?? []).map((c) => c.text ?? `[${c.type}]`).join('\n');
    let tool = this.tools.get(block.tool_use_id);
    if (!tool) {
      tool = messageElement('tool', 'Tool');
      tool.appendChild(el('details')).append(el('summary', undefined, 'Tool result'));
      this.append(tool);
    }
    const details = /** @type {HTMLDetailsElement} */ (tool.firstElementChild);
    tool.dataset.done = 'true';
    if (block.is_error) tool.classList.add('error');
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
   * Shows a tool the agent wants to use and asks (see permissions.js): inside its tool call
   * when that is on screen, so the decision stays next to the request, before the result.
   * @param {PermissionRequestFrame} frame
   */
  onPermissionRequest(frame) {
    const { card, allow } = permissionCard(this.agentId, frame, messageElement);
    limitActions(this.agentId, card);
    this.permissions.set(frame.request_id, card);
    const tool = this.waitingTool(frame.tool_name);
    const details = tool?.querySelector('details');
    if (details) {
      details.open = true;
      details.append(card);
    } else {
      this.append(card, frame);
    }
    if (!this.live) return;
    if (isAlwaysAllowed(this.agentId, frame.tool_name)) allow();
    else needsAttention(this.agentId, 'permission', `${frame.tool_name} waits for your approval`);
  }

  /**
   * The latest call of `name` that has no result and no permission card yet.
   * @param {string} name
   */
  waitingTool(name) {
    const calls = [...this.tools.values()].reverse();
    return calls.find((t) => t.dataset.tool === name && !t.dataset.done && !t.querySelector('.permission'));
  }

  /** @param {PermissionResolvedFrame} frame */
  onPermissionResolved(frame) {
    const card = this.permissions.get(frame.request_id);
    if (!card) return;
    settleCard(card, frame.outcome, frame.sender && frame.sender !== state.me ? frame.sender : null);
    const info = state.sessions.get(this.agentId);
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
      this.streaming = this.append(messageElement('assistant streaming', 'Agent, writing'));
      this.streaming.setAttribute('aria-busy', 'true');
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
    const footer = this.append(messageElement('result', 'Turn summary'), frame);
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
    limitActions(this.agentId, actions);
    touchSession(this.agentId, { last_active_at: frame.timestamp });
    scheduleSessionsRefresh();
    if (this.live) {
      const outcome = result.is_error ? 'The turn ended with an error' : 'The reply is ready';
      needsAttention(this.agentId, 'done', outcome);
    }
  }

  /** @param {import('../protocol').StatusFrame & {seq?: number, dropped_after_seq?: number, dropped_seqs?: number[], files_restored?: boolean, schedule_name?: string, cap?: string, limit_usd?: number, spent_usd?: number}} frame */
  onStatus(frame) {
    const { status, detail } = frame;
    if (status === 'rewound' && typeof frame.dropped_after_seq === 'number') {
      // A wait for a rate limit goes with the turns a rewind drops.
      this.endWait();
      this.rewind(frame.dropped_after_seq, frame.dropped_seqs ?? []);
      // In a worktree whose files could not go back (no record of that turn), the notice says
      // so, and why on hover.
      const worktree = state.sessions.get(this.agentId)?.worktree;
      const files = frame.files_restored ? ', its files too' : worktree ? '; its files stay as they are' : '';
      const notice = messageElement('notice', 'Notice', `Rewound to an earlier turn${files}`);
      if (worktree && !frame.files_restored) notice.title = detail;
      this.append(notice, frame);
      if (frame.files_restored && this.live) filesRestored(this.agentId);
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
    if (status === 'access_revoked') {
      this.append(messageElement('notice error', 'Notice', `This conversation is ${detail.replace(/^this conversation is /, '')}`));
      scheduleSessionsRefresh();
      return;
    }
    if (status === 'changes' && frame.changes) changesReported(this.agentId, frame.changes);
    if (status === 'scheduled_run') {
      const name = typeof frame.schedule_name === 'string' ? frame.schedule_name : 'a schedule';
      this.append(messageElement('notice scheduled-run', 'Notice', `Scheduled run: ${name}`), frame);
    }
    if (status === 'budget_exceeded') this.append(budgetNotice(this.agentId, frame), frame);
    if (status === 'waiting_for_limit' || LIMIT_NOTICES.has(status)) this.onLimit(frame);
    if (status === 'crashed' || status === 'resume_failed' || status === 'warning') {
      this.append(messageElement('notice error', 'Error', `${status}: ${detail}`));
    }
    if (status !== 'lagged') touchSession(this.agentId, { live: !GONE.has(status) });
  }

  /**
   * A rate limit ended a turn: the conversation waits to continue by itself (its notice has a
   * Cancel button, which interrupts: that cancels the wait), continues, was told not to, or
   * stopped trying.
   * @param {import('../protocol').StatusFrame & Partial<import('../protocol').LimitWait> & {seq?: number}} frame
   */
  onLimit(frame) {
    this.endWait();
    const waiting = frame.status === 'waiting_for_limit';
    if (waiting) {
      const at = typeof frame.continue_at === 'string' ? new Date(frame.continue_at).toLocaleTimeString() : 'later';
      const notice = messageElement('notice limit-wait', 'Notice', `Rate limited: continuing by itself at ${at}`);
      notice.title = frame.detail;
      notice.append(button('Cancel', 'limit-cancel', () => client.interrupt(this.agentId)));
      this.waitNotice = this.append(notice, frame);
    } else {
      const text = LIMIT_NOTICES.get(frame.status) ?? frame.status;
      const full = frame.status === 'limit_gave_up' ? `${text}: ${frame.detail}` : text;
      this.append(messageElement('notice limit-wait', 'Notice', full), frame);
    }
    touchSession(this.agentId, { waiting_for_limit: waiting ? (frame.continue_at ?? null) : null });
  }

  /** The wait for a rate limit is over: its notice loses its Cancel button. */
  endWait() {
    if (!this.waitNotice) return;
    this.waitNotice.querySelector('.limit-cancel')?.remove();
    this.waitNotice = null;
    touchSession(this.agentId, { waiting_for_limit: null });
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
    const msg = messageElement(role, role === 'user' ? 'You' : 'Agent');
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
    return this.agentId !== state.current || box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  scrollToEnd() {
    if (this.agentId === state.current) ui.messages.scrollTop = ui.messages.scrollHeight;
  }
}

/**
 * Marks a user message as waiting for earlier turns.
 * @param {HTMLElement} msg
 * @param {boolean} queued
 */
function setQueued(msg, queued) {
  msg.classList.toggle('queued', queued);
  const from = msg.dataset.sender && state.me !== null && msg.dataset.sender !== state.me ? msg.dataset.sender : 'You';
  msg.setAttribute('aria-label', queued ? `${from}, queued` : from);
  msg.querySelector('.queued-tag')?.remove();
  // The name says it: the tag is for the eye.
  if (queued) msg.appendChild(el('span', 'queued-tag', 'queued')).setAttribute('aria-hidden', 'true');
}

/**
 * Shows a notice in a conversation (an action failed).
 * @param {string} agentId
 * @param {string} text
 */
export function notice(agentId, text) {
  state.views.get(agentId)?.append(messageElement('notice error', 'Error', text));
}

/**
 * One message of a conversation: an article named by who or what it comes from.
 * @param {string} kind its classes besides `msg` (`user`, `assistant`, `tool`, `notice error`, …)
 * @param {string} from its accessible name: `You`, `Agent`, `Bash tool`, `Notice`, …
 * @param {string} [text]
 */
function messageElement(kind, from, text) {
  const msg = el('article', `msg ${kind}`, text);
  msg.setAttribute('aria-label', from);
  return msg;
}

/** The Claude CLI's wrappers of what a slash command run in it printed. */
const LOCAL_OUTPUT = /^\s*<local-command-(stdout|stderr)>([\s\S]*?)<\/local-command-\1>\s*$/;
const LOCAL_COMMAND = /^\s*<command-name>([^<]*)<\/command-name>/;
const LOCAL_ARGS = /<command-args>([^<]*)<\/command-args>/;

/**
 * What a `user` message the Claude CLI wrote about a slash command run in it says (`/model
 * haiku`, `Set model to Haiku`), as a line for the eye; `''` for its caveat, shown as nothing;
 * null for any other message. Only the agent's own messages (with a `uuid`) are read so.
 * @param {ChatMessage} message
 * @returns {string | null}
 */
function localCommand(message) {
  if (message.uuid === undefined) return null;
  const content = message.message?.content;
  const only = Array.isArray(content) && content.length === 1 ? content[0] : null;
  const text = typeof content === 'string' ? content : only?.type === 'text' ? only.text : null;
  if (text === null) return null;
  if (/^\s*<local-command-caveat>/.test(text)) return '';
  const output = LOCAL_OUTPUT.exec(text);
  if (output) return output[2].trim();
  const command = LOCAL_COMMAND.exec(text);
  if (command) return `${command[1].trim()} ${LOCAL_ARGS.exec(text)?.[1].trim() ?? ''}`.trim();
  return null;
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
export function imageElement(image, alt) {
  if (!IMAGE_TYPES.includes(image.source?.media_type) || typeof image.source?.data !== 'string') {
    return el('span', 'image-placeholder', '[image]');
  }
  const img = el('img', 'msg-image');
  img.alt = alt;
  img.src = imageUrl(image);
  return img;
}
