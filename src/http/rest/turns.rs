//! Handlers of what `/api/sessions/{agent_id}/…` asks of a conversation's turns, as the
//! WebSocket frames of the same names do (chat, interrupt, permission answer, rewind, fork,
//! warm), and the REST bodies that carry those frames' fields to the frames' own decoders.

use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::{self, DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::sessions::agent_id;
use super::summaries::{SessionSummary, summary};
use crate::http::ApiError;
use crate::http::AppState;
use crate::http::ErrorBody;
use crate::http::auth::Principal;
use crate::http::shared::named;
use crate::protocol::{self, Frame};
use crate::session::Need;

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
