// @ts-check
/**
 * @file A small client for agentmux's WebSocket protocol v1, usable as it is by any frontend.
 *
 * One socket carries any number of conversations. The client sends `ping` every 15 s and
 * treats a socket that answers nothing for a whole interval as dead; it reconnects with
 * exponential backoff and then sends `subscribe` with the last `seq` it saw for every open
 * conversation, so nothing is missed; frames whose `seq` it has already delivered are dropped,
 * so nothing shows twice. Frame types come from `protocol.d.ts`, generated from the server's
 * Rust types.
 *
 * ```js
 * import { AgentmuxClient } from '/assets/client.js';
 * const client = new AgentmuxClient();
 * client.onState((state) => console.log(state));
 * client.open('my-agent', (frame) => console.log(frame));
 * const ack = await client.chat('my-agent', 'Hello');
 * ```
 */

/** @typedef {import('./protocol').ServerFrame} ServerFrame */
/** @typedef {import('./protocol').ClientFrame} ClientFrame */
/** @typedef {import('./protocol').AckFrame} AckFrame */
/** @typedef {import('./protocol').ErrorFrame} ErrorFrame */
/** @typedef {import('./protocol').ErrorCode} ErrorCode */
/** @typedef {import('./protocol').ChatOptions} ChatOptions */
/** @typedef {import('./protocol').PermissionDecision} PermissionDecision */

/**
 * `connecting`: the first attempt; `open`: frames flow; `reconnecting`: the socket was lost and
 * the client is trying again; `closed`: {@link AgentmuxClient#close} was called.
 * @typedef {'connecting' | 'open' | 'reconnecting' | 'closed'} ConnectionState
 */

/**
 * @typedef {object} ClientOptions
 * @property {string | (() => string | Promise<string>)} [url] WebSocket URL, default
 *   `ws(s)://<this page's host>/ws`; or a function called before every connection attempt, for
 *   URLs that carry a single-use credential (a rejected promise counts as a failed attempt).
 * @property {number} [pingIntervalMs] Heartbeat period; default 15000.
 * @property {number} [minBackoffMs] First reconnect delay; default 250.
 * @property {number} [maxBackoffMs] Longest reconnect delay; default 10000.
 * @property {typeof WebSocket} [WebSocket] WebSocket implementation; default the global one.
 */

/** @typedef {(frame: ServerFrame) => void} FrameListener */

/**
 * The server refused a frame (an `error` frame), or the socket closed before it answered.
 */
export class ClientError extends Error {
  /**
   * @param {ErrorCode | 'disconnected'} code
   * @param {string} message
   */
  constructor(code, message) {
    super(message);
    this.name = 'ClientError';
    /** A stable code: one of the server's error codes, or `disconnected`. */
    this.code = code;
  }
}

/**
 * @typedef {object} Conversation
 * @property {number} lastSeq Highest stored `seq` delivered.
 * @property {Set<FrameListener>} listeners
 * @property {Set<() => void>} onReplayed Called once the stored frames of a `subscribe` are in.
 * @property {boolean} unknown The last `subscribe` was answered `unknown_agent` and nothing has
 *   been delivered since: the conversation did not exist yet (it may by now).
 * @property {number} retries Re-subscribes tried since it was unknown.
 * @property {boolean} warm The next `subscribe` asks the server to start the agent (`warm`).
 * @property {boolean} fresh Known not to exist yet: not subscribed to until it does (its first
 *   `chat` from here is acknowledged, or {@link AgentmuxClient#follow} says so).
 * @property {ReturnType<typeof setTimeout> | undefined} retryTimer
 */

/** First and longest pause before asking again for a conversation that did not exist yet. */
const UNKNOWN_RETRY_MS = [1000, 30000];

/**
 * @typedef {object} PendingChat
 * @property {(ack: AckFrame) => void} resolve
 * @property {(err: ClientError) => void} reject
 */

/** One socket for many conversations. */
export class AgentmuxClient {
  /** @param {ClientOptions} [options] */
  constructor(options = {}) {
    /** @private */
    this.url = options.url ?? defaultUrl();
    /** @private */
    this.pingIntervalMs = options.pingIntervalMs ?? 15000;
    /** @private */
    this.minBackoffMs = options.minBackoffMs ?? 250;
    /** @private */
    this.maxBackoffMs = options.maxBackoffMs ?? 10000;
    /** @private */
    this.WebSocketImpl = options.WebSocket ?? globalThis.WebSocket;
    /** @private @type {WebSocket | null} */
    this.socket = null;
    /** @private @type {ConnectionState} */
    this.currentState = 'connecting';
    /** @private @type {Set<(state: ConnectionState) => void>} */
    this.stateListeners = new Set();
    /** @private @type {Map<string, Conversation>} */
    this.conversations = new Map();
    /** @private @type {Set<(frame: import('./protocol').ActivityFrame) => void>} */
    this.activityListeners = new Set();
    /** @private @type {Map<string, PendingChat>} client_msg_id → waiting `chat` */
    this.pending = new Map();
    /** @private @type {string[]} frames written while the socket was not open */
    this.outbox = [];
    /** @private @type {ClientFrame | null} the last `presence`, said again on each reconnect */
    this.presenceFrame = null;
    /** @private */
    this.attempt = 0;
    /** @private @type {ReturnType<typeof setTimeout> | undefined} */
    this.retryTimer = undefined;
    /** @private @type {ReturnType<typeof setInterval> | undefined} */
    this.pingTimer = undefined;
    /** @private Whether anything arrived since the last ping. */
    this.heardSincePing = true;
    /** @private */
    this.stopped = false;
    /** @private Whether a `url` function is being waited for. */
    this.resolvingUrl = false;
  }

  /** The connection's state. */
  get state() {
    return this.currentState;
  }

  /**
   * Calls `listener` with every new connection state; returns a function that stops it.
   * @param {(state: ConnectionState) => void} listener
   * @returns {() => void}
   */
  onState(listener) {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Opens the socket (once; later reconnects are automatic). */
  connect() {
    if (this.socket || this.resolvingUrl || this.stopped) return;
    const url = this.url;
    if (typeof url === 'string') {
      this.openSocket(url);
      return;
    }
    this.resolvingUrl = true;
    Promise.resolve()
      .then(url)
      .then(
        (resolved) => {
          this.resolvingUrl = false;
          if (!this.stopped) this.openSocket(resolved);
        },
        () => {
          this.resolvingUrl = false;
          this.retry();
        },
      );
  }

  /**
   * @private
   * @param {string} url
   */
  openSocket(url) {
    const socket = new this.WebSocketImpl(url);
    this.socket = socket;
    socket.onopen = () => this.onOpen();
    socket.onmessage = (event) => this.onMessage(String(event.data));
    socket.onclose = () => this.onClose(socket);
  }

  /** Closes the socket for good. */
  close() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    for (const conversation of this.conversations.values()) clearTimeout(conversation.retryTimer);
    clearInterval(this.pingTimer);
    this.socket?.close(1000, 'client closed');
    this.socket = null;
    this.failPending();
    this.setState('closed');
  }

  /**
   * Calls `listener` with every `activity` frame: a turn started or ended, or a tool waits for
   * approval, in any conversation of this principal (followed or not). Returns a function that
   * stops it. The socket `watch`es while there are listeners, again after each reconnect.
   * @param {(frame: import('./protocol').ActivityFrame) => void} listener
   */
  watchActivity(listener) {
    this.activityListeners.add(listener);
    if (this.activityListeners.size === 1) this.send({ type: 'watch' });
    return () => {
      if (this.activityListeners.delete(listener) && this.activityListeners.size === 0) {
        this.send({ type: 'unwatch' });
      }
    };
  }

  /**
   * Follows a conversation: `listener` gets its frames, each stored frame once and in order.
   * The first time an `agent_id` is opened it is replayed from the start; later (and after
   * every reconnect) from the last `seq` seen. A conversation that does not exist yet
   * (`unknown_agent`) is asked for again, after a pause that grows to 30 s, and right before
   * this client sends it a `chat`: so a conversation that another tab or client starts is
   * followed from its first message. `onReplayed` is called each time the stored frames of a
   * subscription have all been delivered (what follows is live). Returns a function that stops
   * following. With `warm`, the server is asked to start the conversation's agent in the
   * background, so that a message typed next skips its start-up (once, not on reconnects).
   * With `fresh`, the conversation is known not to exist yet (a new one): nothing is asked of
   * the server until it does. Its first `chat` from this client makes the server send its
   * frames here; one started elsewhere is followed once {@link AgentmuxClient#follow} is called.
   * @param {string} agentId
   * @param {FrameListener} listener
   * @param {{onReplayed?: () => void, warm?: boolean, fresh?: boolean}} [options]
   * @returns {() => void}
   */
  open(agentId, listener, options = {}) {
    const conversation = this.conversation(agentId);
    conversation.listeners.add(listener);
    if (options.warm) conversation.warm = true;
    if (options.fresh && conversation.lastSeq === 0) conversation.fresh = true;
    const replayed = options.onReplayed;
    if (replayed) conversation.onReplayed.add(replayed);
    if (conversation.listeners.size === 1 && !conversation.fresh) this.subscribe(agentId, conversation);
    return () => {
      conversation.listeners.delete(listener);
      if (replayed) conversation.onReplayed.delete(replayed);
      if (conversation.listeners.size === 0) {
        clearTimeout(conversation.retryTimer);
        if (!conversation.fresh) this.send({ type: 'unsubscribe', agent_id: agentId });
      }
    };
  }

  /**
   * Follows a conversation opened as `fresh` that exists now (started elsewhere: another tab,
   * a schedule); nothing for any other.
   * @param {string} agentId
   */
  follow(agentId) {
    const conversation = this.conversations.get(agentId);
    if (!conversation?.fresh) return;
    conversation.fresh = false;
    if (conversation.listeners.size > 0) this.subscribe(agentId, conversation);
  }

  /**
   * The highest stored `seq` delivered for a conversation; 0 before any.
   * @param {string} agentId
   */
  lastSeq(agentId) {
    return this.conversations.get(agentId)?.lastSeq ?? 0;
  }

  /**
   * Sends a user turn. Resolves with the `ack` once the server has stored it; rejects with a
   * {@link ClientError} on an `error` frame or when the socket closes first (the turn may or
   * may not have been stored: the conversation's frames will tell).
   * @param {string} agentId
   * @param {import('./protocol').Content} content text, or text and image blocks
   * @param {{clientMsgId?: string, options?: ChatOptions}} [extra]
   * @returns {Promise<AckFrame>}
   */
  chat(agentId, content, extra = {}) {
    const clientMsgId = extra.clientMsgId ?? randomId();
    const conversation = this.conversation(agentId);
    // A conversation that did not exist when it was opened may have been started elsewhere
    // since: subscribe first, so that its history comes before this turn (the server follows
    // a chatting socket only from the chat's own message on).
    if (conversation.unknown && conversation.listeners.size > 0) this.subscribe(agentId, conversation);
    return new Promise((resolve, reject) => {
      this.pending.set(clientMsgId, {
        // Acknowledged, it exists; cut off, it may: either way it is followed from now on.
        resolve: (ack) => {
          conversation.fresh = false;
          resolve(ack);
        },
        reject: (err) => {
          if (err.code === 'disconnected') conversation.fresh = false;
          reject(err);
        },
      });
      this.send({
        type: 'chat',
        agent_id: agentId,
        content,
        client_msg_id: clientMsgId,
        ...(extra.options ? { options: extra.options } : {}),
      });
    });
  }

  /**
   * Stops the turn running in a conversation; queued turns run next.
   * @param {string} agentId
   */
  interrupt(agentId) {
    this.send({ type: 'interrupt', agent_id: agentId });
  }

  /**
   * Answers a `permission_request`: allow (optionally with edited `updated_input`) or deny
   * (with a `message` for the agent). The outcome arrives as a `permission_resolved` frame.
   * @param {string} agentId
   * @param {string} requestId
   * @param {PermissionDecision} decision
   */
  respondToPermission(agentId, requestId, decision) {
    this.send({ type: 'permission_response', agent_id: agentId, request_id: requestId, ...decision });
  }

  /**
   * @private
   * @param {string} agentId
   * @returns {Conversation}
   */
  conversation(agentId) {
    let conversation = this.conversations.get(agentId);
    if (!conversation) {
      conversation = {
        lastSeq: 0,
        listeners: new Set(),
        onReplayed: new Set(),
        unknown: false,
        retries: 0,
        warm: false,
        fresh: false,
        retryTimer: undefined,
      };
      this.conversations.set(agentId, conversation);
    }
    return conversation;
  }

  /**
   * @private
   * @param {string} agentId
   * @param {Conversation} conversation
   */
  subscribe(agentId, conversation) {
    clearTimeout(conversation.retryTimer);
    /** @type {ClientFrame} */
    const frame = { type: 'subscribe', agent_id: agentId, since_seq: conversation.lastSeq };
    if (conversation.warm && this.socket && this.socket.readyState === this.WebSocketImpl.OPEN) {
      frame.warm = true;
      conversation.warm = false;
    }
    this.send(frame);
    // The server answers frames in order and replays within its answer to `subscribe`: the
    // pong of this ping comes after the last stored frame.
    this.send({ type: 'ping', ts: { replayed: agentId } });
  }

  /**
   * Asks again, later, for a conversation that did not exist.
   * @private
   * @param {string} agentId
   * @param {Conversation} conversation
   */
  retryUnknown(agentId, conversation) {
    clearTimeout(conversation.retryTimer);
    const [first, longest] = UNKNOWN_RETRY_MS;
    const delay = Math.min(longest, first * 2 ** conversation.retries);
    conversation.retries += 1;
    conversation.retryTimer = setTimeout(() => {
      if (conversation.unknown && conversation.listeners.size > 0) this.subscribe(agentId, conversation);
    }, delay);
  }

  /**
   * Tells the server which conversation this page shows: `agentId` while `visible`. Web Push
   * sends nothing about a conversation a visible page shows. Said again after each reconnect.
   * @param {boolean} visible
   * @param {string | null} agentId
   */
  presence(visible, agentId) {
    this.presenceFrame = agentId ? { type: 'presence', visible, agent_id: agentId } : { type: 'presence', visible };
    this.send(this.presenceFrame);
  }

  /**
   * Writes a frame now, or when the socket opens.
   * @private
   * @param {ClientFrame} frame
   */
  send(frame) {
    const text = JSON.stringify(frame);
    if (this.socket && this.socket.readyState === this.WebSocketImpl.OPEN) {
      this.socket.send(text);
    } else if (!['subscribe', 'unsubscribe', 'watch', 'unwatch', 'ping', 'presence'].includes(frame.type)) {
      // Subscriptions are re-sent from `conversations` (`watch` from its listeners, and the
      // last `presence`) on open; only user actions wait here.
      this.outbox.push(text);
    }
  }

  /** @private */
  onOpen() {
    this.attempt = 0;
    this.heardSincePing = true;
    clearInterval(this.pingTimer);
    this.pingTimer = setInterval(() => this.heartbeat(), this.pingIntervalMs);
    this.setState('open');
    if (this.activityListeners.size > 0) this.send({ type: 'watch' });
    if (this.presenceFrame) this.send(this.presenceFrame);
    for (const [agentId, conversation] of this.conversations) {
      if (conversation.listeners.size > 0 && !conversation.fresh) this.subscribe(agentId, conversation);
    }
    const outbox = this.outbox.splice(0);
    for (const text of outbox) this.socket?.send(text);
  }

  /** @private */
  heartbeat() {
    if (!this.heardSincePing) {
      // Nothing came back for a whole interval: the connection is dead even if the browser
      // has not noticed yet.
      this.socket?.close(4000, 'heartbeat timeout');
      if (this.socket) this.onClose(this.socket);
      return;
    }
    this.heardSincePing = false;
    this.send({ type: 'ping', ts: Date.now() });
  }

  /**
   * @private
   * @param {WebSocket} socket
   */
  onClose(socket) {
    if (this.socket !== socket) return;
    socket.onmessage = null;
    this.socket = null;
    clearInterval(this.pingTimer);
    this.failPending();
    this.retry();
  }

  /**
   * Schedules the next connection attempt.
   * @private
   */
  retry() {
    if (this.stopped) return;
    this.setState('reconnecting');
    const ceiling = Math.min(this.maxBackoffMs, this.minBackoffMs * 2 ** this.attempt);
    this.attempt += 1;
    // Jitter spreads the reconnects of many tabs after a server restart.
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }

  /** @private */
  failPending() {
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      p.reject(new ClientError('disconnected', 'the connection closed before the server answered'));
    }
  }

  /**
   * @private
   * @param {string} text
   */
  onMessage(text) {
    this.heardSincePing = true;
    /** @type {ServerFrame} */
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    switch (frame.message_type) {
      case 'pong': {
        const ts = /** @type {{replayed?: unknown} | null} */ (frame.ts);
        const replayed = ts && typeof ts === 'object' ? ts.replayed : undefined;
        if (typeof replayed === 'string') {
          for (const callback of this.conversations.get(replayed)?.onReplayed ?? []) callback();
        }
        return;
      }
      case 'activity':
        // About a conversation, but not one of its frames: its `seq` is not this socket's.
        for (const listener of this.activityListeners) listener(frame);
        return;
      case 'ack':
        this.settle(frame.client_msg_id, (p) => p.resolve(frame));
        break;
      case 'error':
        this.settle(frame.client_msg_id, (p) => p.reject(new ClientError(frame.code, frame.error)));
        break;
    }
    if (!('agent_id' in frame) || !frame.agent_id) return;
    const conversation = this.conversations.get(frame.agent_id);
    if (!conversation) return;
    if ('seq' in frame && typeof frame.seq === 'number' && frame.message_type !== 'ack') {
      if (frame.seq <= conversation.lastSeq) return;
      conversation.lastSeq = frame.seq;
      conversation.fresh = false;
      conversation.unknown = false;
      conversation.retries = 0;
      clearTimeout(conversation.retryTimer);
    } else if (frame.message_type === 'error' && frame.code === 'unknown_agent' && conversation.lastSeq === 0) {
      conversation.unknown = true;
      if (conversation.listeners.size > 0) this.retryUnknown(frame.agent_id, conversation);
    }
    for (const listener of conversation.listeners) listener(frame);
  }

  /**
   * @private
   * @param {string | null | undefined} clientMsgId
   * @param {(pending: PendingChat) => void} action
   */
  settle(clientMsgId, action) {
    if (!clientMsgId) return;
    const pending = this.pending.get(clientMsgId);
    if (!pending) return;
    this.pending.delete(clientMsgId);
    action(pending);
  }

  /**
   * @private
   * @param {ConnectionState} state
   */
  setState(state) {
    if (this.currentState === state) return;
    this.currentState = state;
    for (const listener of this.stateListeners) listener(state);
  }
}

/** `ws(s)://<host>/ws` for the page this runs in: the client's default `url`. */
export function defaultUrl() {
  const { protocol, host } = globalThis.location;
  return `${protocol === 'https:' ? 'wss' : 'ws'}://${host}/ws`;
}

/**
 * A random id for `client_msg_id` and new conversations: 32 hex digits. (`crypto.randomUUID`
 * exists only in secure contexts, and a server on a LAN address is reached over plain http.)
 */
export function randomId() {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
