//! Handlers of `/api/sessions`: every query is scoped to the caller's principal, and another
//! principal's conversation is answered as unknown.
//!
//! One job at about 700 lines: the conversation resource's handlers and the bodies they read
//! and write (its worktree's changes are `changes`, its summaries `summaries`).

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::de::{self, DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::summaries::{SessionSummary, acting_summary, shared_summaries, summary};
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::http::shared::named;
use crate::http::{ApiError, ErrorBody};
use crate::protocol::{self, AgentId, Frame};
use crate::session::{Audit, Cursor, ExportLine, Need, PageStart, SessionQuery};

/// Largest accepted import, in bytes.
pub const MAX_IMPORT_BYTES: usize = 64 << 20; // 64 MiB
/// Most conversations one list request returns.
const MAX_LIST: u32 = 500;
/// Longest search text of `GET /api/sessions?q=`, in characters.
const MAX_QUERY_CHARS: usize = 200;
/// Most messages one messages request returns.
const MAX_MESSAGES: u32 = 1000;

/// A page of conversations.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// Newest activity first.
    pub sessions: Vec<SessionSummary>,
    /// How many conversations match in all, when asked with `total=true`; else null.
    pub total: Option<i64>,
    /// The `before` of the next page; null when this page is the last.
    pub next_before: Option<String>,
    /// The conversations other principals shared with the caller, each under the alias the
    /// caller knows it by, with its `owner` and the caller's `role`: on the first page of a
    /// list without `q`, empty on the others.
    pub shared: Vec<SessionSummary>,
}

/// Paging and filtering of the list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Most conversations returned (1-500, default 50).
    limit: Option<u32>,
    /// The page after the one that gave this `next_before` (its cost does not grow with how
    /// far the page is). Not with `offset`.
    before: Option<String>,
    /// Conversations skipped (default 0; the cost grows with it). Not with `before`.
    offset: Option<u32>,
    /// Only conversations whose title, or one of whose messages, has for each word of this a
    /// word starting with it (case-insensitive; anything but letters and digits only separates
    /// words, and a `q` without any matches nothing; at most 200 characters).
    q: Option<String>,
    /// Whether to count every conversation that matches (`total`; default false: the count
    /// costs a look at each of them).
    total: Option<bool>,
}

/// A range of stored messages.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesParams {
    /// Only messages with a greater `seq` (default 0: from the start).
    after_seq: Option<i64>,
    /// Most messages returned (1-1000, default 200).
    limit: Option<u32>,
}

/// Stored messages, each exactly the frame a WebSocket subscriber gets for it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessagesPage {
    /// Frames in `seq` order: `seq`, `message_type`, `timestamp`, `agent_id`, `session_id`
    /// and either `message` (agent messages) or the frame's own fields (`status`, ...).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Box<serde_json::value::RawValue>>,
    /// Whether more messages follow the last one returned.
    pub has_more: bool,
}

/// A new title.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RenameBody {
    /// 1-200 characters.
    pub title: String,
}

/// A user turn sent over REST: the fields of a WebSocket `chat` frame, checked by the same
/// decoder, [`protocol::decode_chat`] (so a wrong type gets the same typed error).
///
/// The bodies that carry a frame's fields read each field as whatever JSON it is, for the
/// frame's decoder to judge; `null` is the same as leaving a field out, and other fields are
/// ignored, as in a frame.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatBody {
    /// The user's message: text, or text and image blocks.
    #[schema(value_type = crate::protocol::Content, required = true)]
    content: Option<Value>,
    /// Echoed in the ack.
    #[schema(value_type = Option<String>)]
    client_msg_id: Option<Value>,
    /// Options; see the protocol.
    #[schema(value_type = Option<crate::protocol::ChatOptions>)]
    options: Option<Value>,
}

/// The ack of a chat: exactly the WebSocket `ack` frame.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ack {
    /// Always `ack`.
    pub message_type: String,
    /// The conversation.
    pub agent_id: String,
    /// The server's id of the conversation.
    pub session_id: String,
    /// Echo of the request's `client_msg_id`.
    pub client_msg_id: Option<String>,
    /// `seq` of the stored user message.
    pub seq: i64,
    /// 0 when the turn runs now, else how many turns are ahead of it.
    pub queue_position: u64,
    /// RFC 3339.
    pub timestamp: String,
}

/// Where to rewind to; checked by the decoder of the WebSocket `rewind` frame.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RewindBody {
    /// The `seq` of the `result` that ends the turn to go back to.
    #[schema(value_type = i64, required = true)]
    to_seq: Option<Value>,
}

/// The stored `rewound` status: exactly the frame subscribers get.
#[derive(Debug, Serialize, ToSchema)]
pub struct RewoundStatus {
    /// Always `status`.
    pub message_type: String,
    /// Always `rewound`.
    pub status: String,
    /// Its own `seq` (after every earlier one; `seq`s are never reused).
    pub seq: i64,
    /// Every stored message after this `seq` was dropped.
    pub dropped_after_seq: i64,
    /// Also dropped, at or before `dropped_after_seq`: the prompts of later turns that were
    /// queued while the kept turns ran.
    pub dropped_seqs: Vec<i64>,
    /// Human-readable explanation.
    pub detail: String,
    /// Whether the files of the conversation's worktree were put back as they were at that
    /// point too (never without a worktree: files on disk are not restored then).
    pub files_restored: bool,
}

/// Where to fork and under which new `agent_id`; checked by the decoder of the WebSocket
/// `fork` frame.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ForkBody {
    /// The new conversation's routing key.
    #[schema(value_type = String, required = true)]
    new_agent_id: Option<Value>,
    /// The `seq` of the `result` to fork at; the latest when absent.
    #[schema(value_type = Option<i64>)]
    at_seq: Option<Value>,
}

/// The conversation an import creates.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ImportParams {
    /// Routing key of the new conversation.
    agent_id: String,
}

/// Checks the `agent_id` of a path.
pub(crate) fn agent_id(raw: String) -> Result<AgentId, ApiError> {
    Ok(AgentId::parse(raw)?)
}

/// A REST body that carries the fields of a WebSocket frame, read as `T`: a JSON object, as a
/// frame is (a struct alone would also take an array, field by field), whose last field of a
/// name wins, as in a frame.
pub struct FrameBody<T>(pub(crate) T);

impl<'de, T: DeserializeOwned> Deserialize<'de> for FrameBody<T> {
    fn deserialize<D: Deserializer<'de>>(body: D) -> Result<Self, D::Error> {
        let fields = Map::<String, Value>::deserialize(body)?;
        T::deserialize(Value::Object(fields))
            .map(FrameBody)
            .map_err(de::Error::custom)
    }
}

/// The fields of a WebSocket frame that a REST body carried, by name, as the frame's decoder
/// reads them: those left out (or `null`) are absent.
fn frame_fields<const N: usize>(fields: [(&str, Option<Value>); N]) -> Map<String, Value> {
    fields
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value?)))
        .collect()
}

/// A frame that is already JSON text, as the response body.
fn frame_response(status: StatusCode, frame: Frame) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        frame.text.as_str().to_owned(),
    )
        .into_response()
}

/// Lists the caller's conversations, newest activity first.
#[utoipa::path(get, path = "/api/sessions", operation_id = "list_sessions", params(ListParams),
    responses((status = 200, body = SessionList), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<SessionList>, ApiError> {
    let Query(params) = params?;
    let limit = params.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_LIST {
        return Err(ApiError::invalid(format!("`limit` must be 1-{MAX_LIST}")));
    }
    if params
        .q
        .as_ref()
        .is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS)
    {
        return Err(ApiError::invalid(format!(
            "`q` must be at most {MAX_QUERY_CHARS} characters"
        )));
    }
    let start = match (params.before, params.offset) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give `before` or `offset`, not both")),
        (Some(token), None) => PageStart::Before(Cursor::from_token(&token).ok_or_else(|| {
            ApiError::invalid("`before` must be the `next_before` of a page of this list")
        })?),
        (None, offset) => PageStart::Offset(offset.unwrap_or(0)),
    };
    let first_page = matches!(start, PageStart::Offset(0)) && params.q.is_none();
    let query = SessionQuery {
        limit,
        start,
        search: params.q.filter(|q| !q.is_empty()),
        count: params.total.unwrap_or(false),
    };
    let page = app.manager.list(&principal, &query).await?;
    let next_before = page
        .rows
        .last()
        .filter(|_| page.more)
        .map(|last| Cursor::after(last).token());
    let owners = app.manager.owner_nodes(&page.rows).await;
    let sessions = page
        .rows
        .into_iter()
        .zip(owners)
        .map(|(record, owner)| {
            let status = app.manager.activity(&principal, &record.agent_id);
            SessionSummary::new(record, status, owner)
        })
        .collect();
    let shared = if first_page {
        shared_summaries(&app, &principal).await?
    } else {
        Vec::new()
    };
    Ok(Json(SessionList {
        sessions,
        total: page.total,
        next_before,
        shared,
    }))
}

/// One conversation.
#[utoipa::path(get, path = "/api/sessions/{agent_id}", operation_id = "get_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = SessionSummary), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<SessionSummary>, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    Ok(Json(acting_summary(&app, &acting).await?))
}

/// Stored messages by `seq` range.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/messages", operation_id = "list_messages",
    params(("agent_id" = String, Path, description = "The conversation"), MessagesParams),
    responses((status = 200, body = MessagesPage), (status = 404, body = ErrorBody)))]
pub async fn messages(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    params: Result<Query<MessagesParams>, QueryRejection>,
) -> Result<Json<MessagesPage>, ApiError> {
    let id = agent_id(id)?;
    let Query(params) = params?;
    let limit = params.limit.unwrap_or(200);
    if limit == 0 || limit > MAX_MESSAGES {
        return Err(ApiError::invalid(format!(
            "`limit` must be 1-{MAX_MESSAGES}"
        )));
    }
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    let (frames, has_more) = app
        .manager
        .messages(
            &acting.principal,
            &acting.agent_id,
            params.after_seq.unwrap_or(0),
            limit,
        )
        .await?;
    let frames: Vec<Frame> = frames.into_iter().map(|f| named(&id, f)).collect();
    // A stored row that is not JSON (written by something other than this server) is left
    // out, never allowed to fail the page.
    let messages = frames
        .iter()
        .filter_map(|frame| {
            serde_json::value::RawValue::from_string(frame.text.as_str().to_owned())
                .inspect_err(|err| {
                    tracing::warn!(agent_id = %id.as_str(), seq = ?frame.seq, error = %err,
                        "a stored frame is not JSON; it is left out of the page");
                })
                .ok()
        })
        .collect();
    Ok(Json(MessagesPage { messages, has_more }))
}

/// Renames a conversation.
#[utoipa::path(patch, path = "/api/sessions/{agent_id}", operation_id = "rename_session",
    request_body = RenameBody,
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = SessionSummary), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn rename(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<RenameBody>, JsonRejection>,
) -> Result<Json<SessionSummary>, ApiError> {
    let id = agent_id(id)?;
    let Json(body) = body?;
    let renamed = async {
        app.manager.acting(&principal, &id, Need::Own).await?;
        app.manager.rename(&principal, &id, &body.title).await
    };
    let entry = Audit::new(&principal, "rename")
        .on(&principal, &id)
        .detail(serde_json::json!({ "title": body.title }));
    let record = app.manager.audited(entry, renamed.await).await?;
    Ok(Json(summary(&app, &principal, record).await))
}

/// What deleting a conversation with a worktree did with its branch.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedWorktree {
    /// The worktree's branch, kept because its base lacks some of it; None when it was
    /// removed with the worktree.
    pub kept_branch: Option<String>,
}

/// Deletes a conversation: stops its agent (mid-turn too) and removes every stored message and
/// its workspace directory, or its worktree (whose branch stays unless merged).
#[utoipa::path(delete, path = "/api/sessions/{agent_id}", operation_id = "delete_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 204, description = "Deleted"),
        (status = 200, description = "Deleted with its worktree", body = DeletedWorktree),
        (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let deleted = async {
        app.manager.acting(&principal, &id, Need::Own).await?;
        app.manager.delete(&principal, &id).await
    };
    let entry = Audit::new(&principal, "delete").on(&principal, &id);
    Ok(match app.manager.audited(entry, deleted.await).await? {
        Some(kept_branch) => Json(DeletedWorktree { kept_branch }).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// The conversation as JSONL, one stored message a line.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/export", operation_id = "export_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, description = "One `ExportLine` a line", content_type = "application/x-ndjson", body = ExportLine),
        (status = 404, body = ErrorBody)))]
pub async fn export(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    let exported = app
        .manager
        .export(&acting.principal, &acting.agent_id)
        .await;
    let entry = Audit::new(&principal, "export").on(&acting.principal, &acting.agent_id);
    let lines = app.manager.audited(entry, exported).await?;
    let body =
        Body::from_stream(lines.map(|line| line.map_err(|err| std::io::Error::other(err.message))));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{id}.jsonl\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// Creates a conversation from an export (JSONL). Its messages keep their order and content
/// (`seq`s are assigned anew from 1); its agent starts fresh, and a stored `status`
/// `imported` says so. The body is stored as it arrives; the conversation appears only once
/// all of it is stored, and nothing is left of a failed import.
#[utoipa::path(post, path = "/api/sessions/import", operation_id = "import_session",
    params(ImportParams),
    request_body(content = String, content_type = "application/x-ndjson", description = "An export: one `ExportLine` a line"),
    responses((status = 201, body = SessionSummary), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn import(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<ImportParams>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<SessionSummary>), ApiError> {
    let Query(params) = params?;
    let id = agent_id(params.agent_id)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_IMPORT_BYTES as u64) {
        return Err(ApiError::invalid(format!(
            "an import is at most {} MiB",
            MAX_IMPORT_BYTES >> 20
        )));
    }
    // Read as it arrives: the body is never held whole.
    let lines = body.into_data_stream();
    let imported = app
        .manager
        .import(&principal, &id, lines, MAX_IMPORT_BYTES)
        .await;
    let entry = Audit::new(&principal, "import").on(&principal, &id);
    let record = app.manager.audited(entry, imported).await?;
    Ok((
        StatusCode::CREATED,
        Json(summary(&app, &principal, record).await),
    ))
}

/// Sends a user turn, as a WebSocket `chat` does (same validation, same ack). Creates the
/// conversation when it is new. Follow the reply with `GET .../events`.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/messages", operation_id = "chat",
    request_body = ChatBody,
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 202, body = Ack), (status = 400, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn chat(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<FrameBody<ChatBody>>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let Json(FrameBody(ChatBody {
        content,
        client_msg_id,
        options,
    })) = body?;
    let fields = frame_fields([
        ("content", content),
        ("client_msg_id", client_msg_id),
        ("options", options),
    ]);
    let chat = protocol::decode_chat(id.clone(), &fields, app.config.decode_limits())?;
    let client_msg_id = chat.client_msg_id.clone();
    let accepted = app.manager.chat(&principal, chat).await?.stored().await?;
    let ack = protocol::ack_frame(
        accepted.conversation.tag(),
        client_msg_id.as_deref(),
        accepted.seq,
        accepted.queue_position,
    );
    Ok(frame_response(StatusCode::ACCEPTED, named(&id, ack)))
}

/// Keeps exactly the turns up to a turn's `result`, dropping every later message (and later
/// turns' prompts queued before it), and makes the agent forget them.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/rewind", operation_id = "rewind",
    request_body = RewindBody,
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = RewoundStatus), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn rewind(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<FrameBody<RewindBody>>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let Json(FrameBody(RewindBody { to_seq })) = body?;
    let to_seq = protocol::decode_rewind(&frame_fields([("to_seq", to_seq)]))?;
    let status = app.manager.rewind_to(&principal, &id, to_seq).await?;
    Ok(frame_response(StatusCode::OK, named(&id, status)))
}

/// What `POST /api/sessions/{agent_id}/interrupt` answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct InterruptOutcome {
    /// Whether a turn was running (and is now being stopped: its `result` follows on the
    /// event stream). False when there was nothing to stop.
    pub was_running: bool,
    /// Whether, with no turn running, the conversation's wait for a rate limit was cancelled
    /// (a stored `status` `limit_wait_cancelled` follows on the event stream).
    pub cancelled_wait: bool,
}

/// Stops the conversation's running turn, as a WebSocket `interrupt` does.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/interrupt", operation_id = "interrupt",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = InterruptOutcome), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn interrupt(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<InterruptOutcome>, ApiError> {
    let id = agent_id(id)?;
    let interrupted = app.manager.interrupt_turn(&principal, &id).await?;
    Ok(Json(InterruptOutcome {
        was_running: interrupted.was_running,
        cancelled_wait: interrupted.cancelled_wait,
    }))
}

/// The answer to a tool permission request: the fields of a WebSocket `permission_response`
/// frame, checked by the same decoder, [`protocol::decode_permission_response`].
#[derive(Debug, Deserialize, ToSchema)]
pub struct PermissionAnswerBody {
    /// The `request_id` of the `permission_request` answered.
    #[schema(value_type = String, required = true)]
    request_id: Option<Value>,
    /// `allow` or `deny`.
    #[schema(value_type = String, required = true)]
    behavior: Option<Value>,
    /// With `allow`: the tool input as the user edited it.
    #[schema(value_type = Option<Object>)]
    updated_input: Option<Value>,
    /// With `allow`: allow this tool for the rest of the conversation, where the agent offers
    /// that.
    #[schema(value_type = Option<bool>)]
    always: Option<Value>,
    /// With `deny`: shown to the agent.
    #[schema(value_type = Option<String>)]
    message: Option<Value>,
}

/// Answers a pending tool permission request of the conversation, as a WebSocket
/// `permission_response` does: `204` once the agent has it, `404 unknown_request` when no
/// such request is pending (answered already, timed out, or never asked).
#[utoipa::path(post, path = "/api/sessions/{agent_id}/permission-response",
    operation_id = "answer_permission",
    request_body = PermissionAnswerBody,
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 204, description = "Answered"), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn answer_permission(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<FrameBody<PermissionAnswerBody>>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let id = agent_id(id)?;
    let Json(FrameBody(PermissionAnswerBody {
        request_id,
        behavior,
        updated_input,
        always,
        message,
    })) = body?;
    let (request_id, decision) = protocol::decode_permission_response(&frame_fields([
        ("request_id", request_id),
        ("behavior", behavior),
        ("updated_input", updated_input),
        ("always", always),
        ("message", message),
    ]))?;
    app.manager
        .answer_prompt(&principal, &id, request_id, decision)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What `POST /api/sessions/{agent_id}/warm` answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Warmed {
    /// `warming` (its agent is running or starting in the background) or `refused` (the live
    /// limits are reached; the next chat starts it as usual).
    pub status: String,
    /// Human-readable explanation.
    pub detail: String,
}

/// Starts the conversation's agent in the background if it is not running, so that the next
/// chat skips its start-up. A hint: when the live limits are reached it answers `refused`
/// (still 202), and it never stops a running turn.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/warm", operation_id = "warm",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 202, body = Warmed), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn warm(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::Edit).await?;
    let warmed = match app
        .manager
        .warm(&acting.principal, &acting.agent_id)
        .await?
    {
        crate::session::Warm::Started => Warmed {
            status: "warming".into(),
            detail: "the agent is running or starting".into(),
        },
        crate::session::Warm::Refused(detail) => Warmed {
            status: "refused".into(),
            detail,
        },
    };
    Ok((StatusCode::ACCEPTED, Json(warmed)).into_response())
}

/// Creates a new conversation from this one's history up to a turn.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/fork", operation_id = "fork",
    request_body = ForkBody,
    params(("agent_id" = String, Path, description = "The conversation to fork")),
    responses((status = 201, body = SessionSummary), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn fork(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<FrameBody<ForkBody>>, JsonRejection>,
) -> Result<(StatusCode, Json<SessionSummary>), ApiError> {
    let id = agent_id(id)?;
    let Json(FrameBody(ForkBody {
        new_agent_id,
        at_seq,
    })) = body?;
    let fields = frame_fields([("new_agent_id", new_agent_id), ("at_seq", at_seq)]);
    let (new_agent_id, at_seq) = protocol::decode_fork(&id, &fields)?;
    let record = app
        .manager
        .fork(&principal, &id, new_agent_id, at_seq)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(summary(&app, &principal, record).await),
    ))
}

/// The `Last-Event-ID` header: the last `seq` an event stream client saw.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| ApiError::invalid("`Last-Event-ID` must be a non-negative integer")),
    }
}
