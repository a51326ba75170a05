//! Handlers of `/api/push/`: the server's Web Push key, the caller's subscriptions (one per
//! browser it enabled), a test notification, and the actions of a notification's buttons,
//! which carry a single-use token instead of a credential.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::protocol;
use crate::push::{Subscription, SubscriptionBody};

/// Most bytes of a push request's body: a browser's subscription is well under 1 KiB, and a
/// reply from a notification is a line or two.
pub(super) const MAX_BODY_BYTES: usize = 16 << 10;

/// The server's public key.
#[derive(Debug, Serialize, ToSchema)]
pub struct PushKey {
    /// The VAPID public key (an uncompressed P-256 point, base64url): a browser's
    /// `applicationServerKey`.
    pub public_key: String,
}

/// The caller's subscriptions.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionList {
    /// Oldest first.
    pub subscriptions: Vec<Subscription>,
}

/// The key browsers subscribe with.
#[utoipa::path(get, path = "/api/push/key", operation_id = "push_key",
    responses((status = 200, body = PushKey), (status = 422, body = ErrorBody)))]
pub async fn key(
    State(app): State<AppState>,
    _principal: Principal,
) -> Result<Json<PushKey>, ApiError> {
    let public_key = app.push.public_key()?.to_owned();
    Ok(Json(PushKey { public_key }))
}

/// Subscribes a browser (its `PushSubscription` JSON): the caller's news is pushed to it
/// while none of the caller's pages shows the conversation. The same endpoint again updates
/// its keys and events.
#[utoipa::path(post, path = "/api/push/subscriptions", operation_id = "subscribe_push",
    request_body = SubscriptionBody,
    responses((status = 201, body = Subscription), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn subscribe(
    State(app): State<AppState>,
    principal: Principal,
    body: Result<Json<SubscriptionBody>, JsonRejection>,
) -> Result<(StatusCode, Json<Subscription>), ApiError> {
    let Json(body) = body?;
    let subscription = app.push.subscribe(&principal, body).await?;
    Ok((StatusCode::CREATED, Json(subscription)))
}

/// The caller's subscriptions, without their endpoints' paths or keys.
#[utoipa::path(get, path = "/api/push/subscriptions", operation_id = "list_push_subscriptions",
    responses((status = 200, body = SubscriptionList)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
) -> Result<Json<SubscriptionList>, ApiError> {
    let subscriptions = app.push.subscriptions(&principal).await?;
    Ok(Json(SubscriptionList { subscriptions }))
}

/// Deletes one of the caller's subscriptions.
#[utoipa::path(delete, path = "/api/push/subscriptions/{id}", operation_id = "unsubscribe_push",
    params(("id" = String, Path, description = "The subscription")),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn unsubscribe(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    app.push.unsubscribe(&principal, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a test notification to each of the caller's subscriptions.
#[utoipa::path(post, path = "/api/push/test", operation_id = "test_push",
    responses((status = 202, description = "Queued"), (status = 422, body = ErrorBody)))]
pub async fn test(
    State(app): State<AppState>,
    principal: Principal,
) -> Result<StatusCode, ApiError> {
    app.push.test(&principal)?;
    Ok(StatusCode::ACCEPTED)
}

/// What a notification's button does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Allow the waiting tool, once.
    Allow,
    /// Deny the waiting tool.
    Deny,
    /// Send `text` to the conversation as the next turn.
    Reply,
}

/// A notification's button pressed: what it was, and the token the notification carried.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionBody {
    /// The token of the notification.
    pub token: String,
    /// The button.
    pub action: ActionKind,
    /// For `reply`: the message.
    #[serde(default)]
    pub text: Option<String>,
}

/// Does what a notification's button asks, for the principal, conversation and (Allow, Deny)
/// permission request the token was made for. Needs no credential: the token is one, good
/// once and for a few minutes (`push.action_token_secs`); a used, expired, forged or
/// mismatched token changes nothing and answers 403 `forbidden`.
#[utoipa::path(post, path = "/api/push/actions", operation_id = "push_action",
    request_body = ActionBody,
    responses((status = 204, description = "Done"), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn act(
    State(app): State<AppState>,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let Json(body) = body?;
    let text = match (body.action, body.text) {
        (ActionKind::Reply, Some(text)) if !text.trim().is_empty() => Some(text),
        (ActionKind::Reply, _) => return Err(ApiError::invalid("`reply` needs a `text`")),
        (_, Some(_)) => return Err(ApiError::invalid("only `reply` takes a `text`")),
        (_, None) => None,
    };
    let action = app.push.take_action(&body.token).await?;
    // Checked now, not when the notification was sent: a share revoked or downgraded since
    // leaves its token nothing to do.
    let (principal, agent_id) = (&action.principal, &action.agent_id);
    match (body.action, action.request_id, text) {
        (ActionKind::Allow | ActionKind::Deny, Some(request_id), None) => {
            let mut fields = Map::from_iter([("request_id".to_owned(), json!(request_id))]);
            match body.action {
                ActionKind::Allow => fields.insert("behavior".into(), json!("allow")),
                _ => {
                    fields.insert("message".into(), json!("Denied from a notification"));
                    fields.insert("behavior".into(), json!("deny"))
                }
            };
            let (request_id, decision) = protocol::decode_permission_response(&fields)?;
            let answered = app
                .manager
                .answer_prompt(principal, agent_id, request_id, decision);
            answered.await?;
        }
        (ActionKind::Reply, None, Some(text)) => {
            let fields = Map::from_iter([("content".to_owned(), Value::String(text))]);
            let limits = app.config.decode_limits();
            let chat = protocol::decode_chat(agent_id.clone(), &fields, limits)?;
            app.manager.chat(principal, chat).await?.stored().await?;
        }
        _ => {
            return Err(ApiError::new(
                protocol::ErrorCode::Forbidden,
                "this action token is not valid for that action",
            ));
        }
    }
    Ok(StatusCode::NO_CONTENT)
}
