// Generated from src/protocol.rs by its unit tests; do not edit.
// Regenerate: UPDATE_PROTOCOL_TS=1 cargo test --lib protocol

export type ErrorCode = "bad_frame" | "unknown_type" | "invalid_agent_id" | "invalid_content" | "invalid_options" | "unknown_agent" | "backend_unavailable" | "limit_exceeded" | "rate_limited" | "store_unavailable" | "unauthorized" | "unknown_request" | "invalid_seq" | "busy" | "agent_exists" | "invalid_request" | "forbidden_origin" | "forbidden_host" | "unsupported_media_type" | "unsupported" | "invalid_schedule" | "unknown_schedule" | "owned_elsewhere" | "forbidden" | "conflict" | "unknown_subscription" | "search_timeout" | "budget_exceeded" | "credentials_required" | "unknown_link" | "link_expired";

export type ChatOptions = { 
/**
 * Model name for the agent.
 */
model?: string, 
/**
 * Permission mode for the agent: one of the modes its agent offers (for the Claude CLI,
 * its permission modes). The protocol checks only its form ([`valid_mode_id`]); the
 * conversation's agent checks the id, and whether the server allows a mode that runs
 * tools without asking.
 */
permission_mode?: string, 
/**
 * The agent's working directory: an absolute path of a directory inside a project root
 * the principal may use. Only on a conversation's first chat (later chats may repeat it).
 */
cwd?: string, 
/**
 * Text appended to the agent's own system prompt.
 */
system_prompt?: string, 
/**
 * Tool-name patterns the agent may use without asking (`Read`, `Bash(git:*)`).
 */
allowed_tools?: Array<string>, 
/**
 * Tool-name patterns the agent may never use.
 */
disallowed_tools?: Array<string>, 
/**
 * Most agentic turns (model calls) per user turn, 1 to [`MAX_TURNS_LIMIT`].
 */
max_turns?: number, 
/**
 * More directories the agent may read and change, each inside a project root the
 * principal may use.
 */
add_dirs?: Array<string>, 
/**
 * The agent (by name) of a new conversation; on a later chat it must name the
 * conversation's own agent.
 */
agent?: string, 
/**
 * Whether a new conversation in a git repository works in a worktree of its own (on
 * its own branch): `true`, `false`, or where it starts and which branch it makes. Only on
 * a conversation's first chat (later chats may repeat it).
 */
worktree?: WorktreeOption, 
/**
 * The conversation's own spending cap in US dollars (0 to [`super::MAX_CAP_USD`]); only
 * its owner may set it. A turn that would start with the conversation's spending at or
 * over it is refused with `budget_exceeded`.
 */
budget_usd?: number, 
/**
 * Whether a turn the model API's rate limit ends continues by itself once the limit
 * resets (a "continue" turn, after a `status` `waiting_for_limit`). Kept for the
 * conversation's later turns; absent follows the server's `session.auto_continue`.
 */
auto_continue?: boolean, };

export type WorktreeOption = boolean | { 
/**
 * A branch or commit of the repository.
 */
base?: string, 
/**
 * The new branch.
 */
branch?: string, };

export type PermissionDecision = { "behavior": "allow", 
/**
 * The edited tool input, when the user changed it.
 */
updated_input?: Record<string, unknown>, 
/**
 * Allow this tool for the rest of the conversation, where the agent offers that (an
 * Agent Client Protocol agent's `allow_always`); otherwise the same as once.
 */
always?: boolean, } | { "behavior": "deny", 
/**
 * Shown to the agent.
 */
message: string, };

export type ImageSource = { "type": "base64", 
/**
 * One of [`IMAGE_MEDIA_TYPES`].
 */
media_type: string, 
/**
 * The file's bytes, base64-encoded.
 */
data: string, };

export type ContentBlock = { "type": "text", 
/**
 * The text.
 */
text: string, } | { "type": "image", 
/**
 * Where the image's bytes are.
 */
source: ImageSource, };

export type Content = string | Array<ContentBlock>;

export type Chat = { 
/**
 * Routing key of the conversation.
 */
agent_id: string, 
/**
 * The user's message.
 */
content: Content, 
/**
 * Echoed in the `ack`.
 */
client_msg_id?: string, 
/**
 * Validated agent options.
 */
options?: ChatOptions, };

export type ClientFrame = { "type": "chat" } & Chat | { "type": "interrupt", 
/**
 * The conversation.
 */
agent_id: string, } | { "type": "ping", 
/**
 * Any JSON value, echoed in the `pong`.
 */
ts?: unknown, } | { "type": "subscribe", 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The last `seq` the client has; 0 for everything.
 */
since_seq: number, 
/**
 * Start the conversation's agent in the background if it is not running, so that the
 * next chat skips its start-up (a hint: refused by limits, a `status` says so).
 */
warm?: boolean, } | { "type": "unsubscribe", 
/**
 * The conversation.
 */
agent_id: string, } | { "type": "watch" } | { "type": "unwatch" } | { "type": "presence", 
/**
 * Whether the page is visible (not a background tab, not a locked phone).
 */
visible: boolean, 
/**
 * The conversation open in the page, if any.
 */
agent_id?: string, } | { "type": "permission_response", 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The request being answered.
 */
request_id: string, } & ({ "behavior": "allow", 
/**
 * The edited tool input, when the user changed it.
 */
updated_input?: Record<string, unknown>, 
/**
 * Allow this tool for the rest of the conversation, where the agent offers that (an
 * Agent Client Protocol agent's `allow_always`); otherwise the same as once.
 */
always?: boolean, } | { "behavior": "deny", 
/**
 * Shown to the agent.
 */
message: string, }) | { "type": "rewind", 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The `seq` of the `result` that ends the turn to go back to.
 */
to_seq: number, } | { "type": "fork", 
/**
 * The conversation to fork.
 */
agent_id: string, 
/**
 * The new conversation's routing key.
 */
new_agent_id: string, 
/**
 * The `seq` of the `result` to fork at; the latest when absent.
 */
at_seq?: number, };

export type SessionHeader = { 
/**
 * What the frame is.
 */
message_type: string, 
/**
 * The client's routing key.
 */
agent_id: string, 
/**
 * The server's conversation id.
 */
session_id: string, 
/**
 * The stored sequence number; absent on frames that are not stored.
 */
seq?: number, 
/**
 * RFC 3339; for a stored frame, when it was stored.
 */
timestamp: string, 
/**
 * On a `result`: what this turn cost, in US dollars (the agent's own `total_cost_usd` is
 * a running total of its process).
 */
turn_cost_usd?: number, };

export type AckFrame = { 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The server's conversation id.
 */
session_id: string, 
/**
 * RFC 3339.
 */
timestamp: string, 
/**
 * The `chat`'s `client_msg_id`, or null.
 */
client_msg_id: string | null, 
/**
 * The `seq` of the stored user message.
 */
seq: number, 
/**
 * Turns ahead of this one; 0 when it runs now.
 */
queue_position: number, };

export type ErrorFrame = { 
/**
 * RFC 3339.
 */
timestamp: string, 
/**
 * Stable code.
 */
code: ErrorCode, 
/**
 * Human-readable explanation.
 */
error: string, 
/**
 * The failed frame's `agent_id`, when it had a readable one.
 */
agent_id?: string, 
/**
 * The failed frame's `client_msg_id`, when it had one.
 */
client_msg_id?: string, };

export type PongFrame = { 
/**
 * RFC 3339.
 */
timestamp: string, 
/**
 * The `ping`'s `ts`, or null.
 */
ts: unknown, };

export type ChangeCounts = { 
/**
 * Files that differ.
 */
files: number, 
/**
 * Lines added.
 */
additions: number, 
/**
 * Lines deleted.
 */
deletions: number, 
/**
 * Whether some of it is not committed on the branch.
 */
uncommitted: boolean, };

export type WorktreeInfo = { 
/**
 * The conversation's own branch.
 */
branch: string, 
/**
 * The branch (or commit) it started from and merges into.
 */
base: string, 
/**
 * The directory the agent runs in: the same place in the worktree as the conversation's
 * directory was in the repository.
 */
path: string, };

export type StatusFrame = { 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The server's conversation id; absent when the conversation does not exist yet.
 */
session_id?: string, 
/**
 * RFC 3339.
 */
timestamp: string, 
/**
 * The state.
 */
status: string, 
/**
 * Human-readable detail.
 */
detail: string, 
/**
 * For `forked`: the conversation this one was forked from.
 */
forked_from?: string, 
/**
 * For `forked`: the `seq` the copied history ends at.
 */
at_seq?: number, 
/**
 * For `changes`: what the conversation's worktree now differs from its base by.
 */
changes?: ChangeCounts, 
/**
 * For `creating`, `resuming` and `active` of a conversation in a git worktree of its
 * own: where its agent runs.
 */
worktree?: WorktreeInfo, 
/**
 * For `interrupted` (and the stored `rewound`): the principal who asked for it.
 */
sender?: string, };

export type LimitWait = { 
/**
 * When the "continue" turn is due (RFC 3339).
 */
continue_at: string, 
/**
 * When the limit resets, as the agent said (RFC 3339); null when it said nothing, and
 * the wait is a back-off.
 */
resets_at: string | null, 
/**
 * Rate-limited turns in a row, this one included.
 */
try: number, 
/**
 * Rate-limited turns in a row after which the conversation no longer continues by
 * itself.
 */
max_tries: number, };

export type Activity = "turn_started" | "turn_ended" | "permission_request" | "permission_resolved";

export type ActivityFrame = { 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The server's conversation id.
 */
session_id: string, 
/**
 * RFC 3339.
 */
timestamp: string, 
/**
 * What happened.
 */
activity: Activity, 
/**
 * The `seq` of the stored message it is about.
 */
seq: number, 
/**
 * For `permission_request`: the tool.
 */
tool_name?: string, 
/**
 * For `turn_ended`: whether the turn ended with an error.
 */
is_error?: boolean, };

export type Viewing = "joined" | "left";

export type ViewersFrame = { 
/**
 * The conversation.
 */
agent_id: string, 
/**
 * The server's conversation id.
 */
session_id: string, 
/**
 * RFC 3339.
 */
timestamp: string, 
/**
 * Who joined or left.
 */
viewer: string, 
/**
 * Which of the two.
 */
event: Viewing, 
/**
 * Everyone viewing it now, by name.
 */
viewers: Array<string>, };

export type ControlFrame = { "message_type": "ack" } & AckFrame | { "message_type": "error" } & ErrorFrame | { "message_type": "pong" } & PongFrame | { "message_type": "status" } & StatusFrame | { "message_type": "activity" } & ActivityFrame | { "message_type": "viewers" } & ViewersFrame;

export type PermissionRequest = { 
/**
 * Echoed in the `permission_response`.
 */
request_id: string, 
/**
 * The tool, e.g. `Bash`.
 */
tool_name: string, 
/**
 * The tool's input as the agent proposes it.
 */
input: Record<string, unknown>, 
/**
 * Permission suggestions the agent offers.
 */
suggestions: unknown, };

export type PermissionResolved = { 
/**
 * The request that ended.
 */
request_id: string, 
/**
 * `allowed`, `denied`, `timed_out` or `cancelled`.
 */
outcome: string, 
/**
 * For `allowed` and `denied`: the principal who answered.
 */
sender?: string, };

/** Message types whose frame carries the agent's own message under `message`. */
export type AgentMessageType = "user" | "system" | "assistant" | "result" | "stream_event" | "agent_event";

/** A conversation frame carrying the agent's message verbatim; `seq` is absent on `stream_event`. */
export type MessageFrame = Omit<SessionHeader, "message_type"> & { message_type: AgentMessageType, message: unknown };

/** A stored conversation frame whose fields follow the header (see `session_frame`). */
export type StoredFrame<T extends string, F> = Omit<SessionHeader, "message_type"> & { message_type: T, seq: number } & F;

export type PermissionRequestFrame = StoredFrame<"permission_request", PermissionRequest>;

export type PermissionResolvedFrame = StoredFrame<"permission_resolved", PermissionResolved>;

/** Every frame the server sends. */
export type ServerFrame = ControlFrame | MessageFrame | PermissionRequestFrame | PermissionResolvedFrame;
