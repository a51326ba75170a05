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
import { client } from './api.js';
import { changesReported, filesRestored } from './changes.js';
import { conversationDeleted, forkFrom, rewindTo } from './conversations.js';
import { button, el, ui } from './dom.js';
import { resultSummary, size, toolSummary } from './format.js';
import { renderControls, renderHeader } from './header.js';
import { needsAttention, renderTabTitle } from './notifications.js';
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

/** States after which a conversation's agent is no longer in the server's memory. */
const GONE = new Set(['evicted', 'crashed', 'moved']);
/** Titles are the first 50 characters of the first message, as the server stores them. */
const TITLE_CHARS = 50;
/** Tool output longer than this (characters or lines) is folded behind its size. */
const FOLD_CHARS = 2000;
const FOLD_LINES = 30;

/** One conversation's pane, kept while the page lives so switching back is instant. */
export class View {
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
    /** @type {Map<string, HTMLElement>} tool_use id → its message */
    this.tools = new Map();
    /** @type {Map<string, HTMLElement>} permission request id → its card */
    this.permissions = new Map();
    /** Set once the stored history has been delivered: later frames are news. */
    this.live = false;
    /** @type {string} model of the running turn, from its `system` `init` */
    this.turnModel = '';
    /** @type {Set<string>} the principals who wrote in it */
    this.senders = new Set();
    if (isShared(agentId)) this.root.classList.add('shared');
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
      case 'viewers':
        viewersChanged(this.agentId, frame);
        this.root.classList.toggle('shared', isShared(this.agentId));
        break;
      case 'error':
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
    const prompt = promptOf(message);
    if (prompt) {
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
   * Shows a tool the agent wants to use, with Allow and Deny.
   * @param {PermissionRequestFrame} frame
   */
  onPermissionRequest(frame) {
    const card = messageElement('permission', 'Permission request');
    card.append(el('div', 'permission-title', `Allow ${frame.tool_name}?`));
    const edit = toolDiff(frame.tool_name, frame.input);
    if (edit) card.append(el('div', 'permission-path', edit.path), renderDiff(edit.lines));
    else card.append(el('pre', 'tool-input', JSON.stringify(frame.input, null, 2)));
    const actions = card.appendChild(el('div', 'permission-actions'));
    /** @param {import('../protocol').PermissionDecision} decision */
    const answer = (decision) => {
      for (const b of actions.querySelectorAll('button')) b.disabled = true;
      client.respondToPermission(this.agentId, frame.request_id, decision);
    };
    actions.append(
      button('Allow', 'allow', () => answer({ behavior: 'allow' })),
      button('Deny', 'deny', () => answer({ behavior: 'deny', message: 'The user denied this tool use.' })),
    );
    limitActions(this.agentId, card);
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
    const by = frame.sender && frame.sender !== state.me ? ` by ${frame.sender}` : '';
    card.append(el('div', 'permission-outcome', `${labels[frame.outcome] ?? frame.outcome}${by}`));
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

  /** @param {import('../protocol').StatusFrame & {seq?: number, dropped_after_seq?: number, dropped_seqs?: number[], files_restored?: boolean, schedule_name?: string}} frame */
  onStatus(frame) {
    const { status, detail } = frame;
    if (status === 'rewound' && typeof frame.dropped_after_seq === 'number') {
      this.rewind(frame.dropped_after_seq, frame.dropped_seqs ?? []);
      const files = frame.files_restored ? ', its files too' : '';
      this.append(messageElement('notice', 'Notice', `Rewound to an earlier turn${files}`), frame);
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
    if (status === 'crashed' || status === 'resume_failed' || status === 'warning') {
      this.append(messageElement('notice error', 'Error', `${status}: ${detail}`));
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
