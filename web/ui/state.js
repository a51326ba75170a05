// @ts-check
/**
 * @file The page's state, in one place: every value that changes while the page lives is a
 * field of {@link state}, which the other modules import and change; what the page keeps in
 * the browser's storage is named here too. The types of what the server sends live here.
 */

/** @typedef {import('./view.js').View} View */
/** @typedef {import('../images.js').ImageBlock} ImageBlock */

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
 * @property {Worktree | null} [worktree] Its own git worktree, when it works in one.
 * @property {number} [total_cost_usd] The conversation's total, from the server.
 * @property {number} [input_tokens]
 * @property {number} [output_tokens]
 * @property {number} [message_count] Its stored messages, from the server.
 * @property {'' | 'done' | 'permission'} [attention] Something happened there while it was
 *   not on screen: a turn finished, or a tool waits for approval.
 * @property {boolean} [stored] The server listed it: it exists there.
 * @property {boolean} [fresh] Started in this page, or found not to exist: new.
 * @property {string | null} [waiting_for_limit] While it waits for a rate limit to reset: when
 *   it continues by itself (RFC 3339).
 * @property {string} [owner] Whose it is, when another principal shared it with you.
 * @property {'viewer' | 'editor'} [role] What you may do with it, when it is shared with you.
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
 * @property {Worktree | null} [worktree]
 * @property {number} [total_cost_usd]
 * @property {number} [input_tokens]
 * @property {number} [output_tokens]
 * @property {number} [message_count]
 * @property {string | null} [waiting_for_limit]
 * @property {string} [owner]
 * @property {'viewer' | 'editor'} [role]
 */

/**
 * A conversation's own git worktree, as the server describes it: its branch, the branch (or
 * commit) it started from and merges into, and the repository's directory it was started in.
 * @typedef {{branch: string, base: string, project_dir: string}} Worktree
 */

/**
 * How much a conversation's worktree differs from its base: from the `changes` status after a
 * turn, or from the Changes panel's last load.
 * @typedef {import('../protocol').ChangeCounts} ChangeCounts
 */

/**
 * A project directory, as `GET /api/projects` lists it: `git` when it is in a git repository
 * (a conversation there may have a worktree of its own), `worktree_default` when its root
 * gives one unless asked not to.
 * @typedef {{path: string, name: string, sessions: number, cli_sessions: number,
 *   last_active_at: string | null, git?: boolean, worktree_default?: boolean}} Project
 */

/**
 * A session the Claude CLI keeps for a project, as `GET /api/projects/cli-sessions` lists it.
 * @typedef {{cli_session_id: string, title: string | null, message_count: number,
 *   modified_at: string, imported_as: string | null}} CliSession
 */

/**
 * An agent a new conversation can run, as `GET /api/agents` lists it: the permission modes
 * this server lets a chat pick, and the models the agent lists.
 * @typedef {{name: string, kind: string, default?: boolean, modes?: string[],
 *   models?: {id: string, name?: string, description?: string}[]}} Agent
 */

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
 * @property {{cwd?: string, model?: string, permission_mode?: string} | null} [options] what its
 *   runs send with their chat
 * @property {boolean} enabled
 * @property {string | null} next_run_at
 * @property {{agent_id: string, outcome: string, at: string, detail?: string} | null} last_run
 */

/**
 * News about a conversation not on screen: a turn ended, or a tool waits.
 * @typedef {{kind: 'done' | 'permission', text: string}} News
 */

/** `localStorage`: this browser's list of conversations (for a server without the API). */
export const SESSIONS_KEY = 'agentmux.sessions.v1';
/** `localStorage`: the conversation on screen, opened again on the next visit. */
export const CURRENT_KEY = 'agentmux.current';
/** `localStorage`: `dark` or `light` when chosen; none: as the system says. */
export const THEME_KEY = 'agentmux.theme';
/** `localStorage`: `on` when the user turned system notifications on. */
export const NOTIFY_KEY = 'agentmux.notify';
/** This device's push subscription id, while push is on here. */
export const PUSH_KEY = 'agentmux.push';
/** `localStorage`: a conversation's unsent text, after this prefix and its agent_id. */
export const DRAFT_PREFIX = 'agentmux.draft.';
/** `sessionStorage`: the API token, when the server asks for one: kept for this tab only. */
export const TOKEN_KEY = 'agentmux.token';

export const state = {
  // ---- signing in
  /** Set once the server has handed out a ticket without credentials: it runs open. */
  authOff: false,
  /** @type {Promise<void> | null} resolved by the sign-in form's next submit */
  signedIn: null,
  /** @type {() => void} resolves {@link state.signedIn} */
  resolveSignIn: () => {},
  /** Whether the socket was open before: a reconnect drops the replies it cut. */
  wasConnected: false,
  /** @type {string | null} the principal this page is signed in as, once the server said */
  me: null,

  // ---- conversations
  /** @type {Map<string, SessionInfo>} the sidebar's conversations by agent_id */
  sessions: new Map(),
  /** @type {Map<string, View>} the panes opened while the page lives, by agent_id */
  views: new Map(),
  /** @type {string | null} the conversation on screen */
  current: null,
  /**
   * New conversations' project directory, agent and worktree choice (null: the server's
   * default), sent with their first chat.
   * @type {Map<string, {cwd: string | null, agent: string | null, worktree: boolean | null}>}
   */
  newOptions: new Map(),
  /** @type {Set<string>} conversations the activity feed says are running a turn */
  running: new Set(),
  /** @type {Map<string, News>} news about conversations not listed yet */
  unlisted: new Map(),

  // ---- the sidebar
  /** Whether `GET /api/sessions` exists on this server (unknown until asked). */
  sessionsApi: true,
  /** Whether the server's last list held all of this principal's conversations. */
  listedAll: false,
  /** @type {string[] | null} agent_ids matching the search box, newest first; null: no search */
  searchResults: null,
  /** Counts searches: an answer to an older one is dropped. */
  searchSerial: 0,
  /**
   * @type {AbortController | null} cancels the search request under way when another starts:
   * the server runs only a few of a principal's searches at once
   */
  searchAbort: null,
  /** @type {ReturnType<typeof setTimeout> | undefined} the search waiting for typing to pause */
  searchTimer: undefined,
  /** @type {ReturnType<typeof setTimeout> | undefined} the refresh after a burst of turns */
  refreshTimer: undefined,

  // ---- projects and agents (the new-session dialog)
  /** @type {Project[]} the server's project directories; empty when it has no roots */
  projects: [],
  /** Whether {@link state.projects} was loaded from the server at least once. */
  projectsLoaded: false,
  /**
   * The agents a new conversation can run (the default first); empty until loaded or when
   * the server has no such API.
   * @type {Agent[]}
   */
  agents: [],
  /** Whether {@link state.agents} was loaded from the server at least once. */
  agentsListed: false,
  /** Whether every agent in {@link state.agents} has said what it offers (else it is asked again). */
  agentsLoaded: false,

  // ---- worktrees: the Changes button and panel
  /** @type {Map<string, ChangeCounts>} what each conversation's worktree changed, as last heard */
  changes: new Map(),
  /** @type {Set<string>} conversations whose counts were asked for once (the page needs no more) */
  changesAsked: new Set(),
  /** @type {string | null} the conversation whose Changes panel is open */
  changesFor: null,
  /** Counts loads of the panel: an answer to an older one is dropped. */
  changesSerial: 0,

  // ---- permission requests
  /** @type {Map<string, Set<string>>} the tools the user always allows, by conversation */
  alwaysAllowed: new Map(),

  // ---- the composer
  /** @type {ImageBlock[]} images waiting in the composer, sent with the next message */
  attachments: [],

  // ---- schedules
  /** @type {Schedule[]} */
  schedules: [],
  /** @type {string | null} the schedule the form edits; null: the form creates one */
  editing: null,
};
