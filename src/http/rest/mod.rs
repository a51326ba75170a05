//! The REST API under `/api/` and its OpenAPI document at `/api/openapi.json`, both built from
//! one list of routes: a route is registered together with its operation, so the document names
//! every route served and nothing else.
//!
//! Every handler acts for the caller's [`Principal`](crate::http::auth::Principal) and sees only
//! that principal's conversations. Errors are JSON `{"code": "...", "error": "..."}` with the
//! stable codes of the WebSocket protocol.

mod admin;
mod agents;
mod audit;
mod changes;
mod links;
mod projects;
mod push;
mod schedules;
mod sessions;
mod shares;
mod spend;
mod summaries;
mod turns;

pub(super) use sessions::{agent_id, last_event_id};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension};
use axum::http::header;
use axum::middleware;
use axum::response::IntoResponse;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, Ref, ResponseBuilder};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, auth, sse};

/// The name of the security scheme of the routes that need credentials.
const BEARER: &str = "bearer";

/// The principal a path segment or query parameter, `field`, names.
fn principal_named(raw: &str, field: &str) -> Result<auth::Principal, super::ApiError> {
    auth::Principal::checked(raw)
        .ok_or_else(|| super::ApiError::invalid(format!("`{field}` is not a principal's name")))
}

/// What the document says besides its routes and the types they use.
#[derive(OpenApi)]
#[openapi(info(
    title = "agentmux",
    description = "Conversations with AI agents: history, rename, delete, export/import, rewind, fork, chat and events; projects and the CLI sessions in them; scheduled prompts; sharing conversations, share links and the audit log; tickets for the WebSocket; each principal's own agent credentials, spending caps and usage; a backup of the database, for admins."
))]
struct ApiDoc;

/// Every route that acts for a principal, each with its operation.
fn authenticated() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(auth::ws_ticket))
        .routes(routes!(agents::list))
        .routes(routes!(sessions::list))
        .routes(routes!(sessions::import))
        .routes(routes!(
            sessions::get_one,
            sessions::rename,
            sessions::delete
        ))
        .routes(routes!(sessions::messages, turns::chat))
        .routes(routes!(sessions::export))
        .routes(routes!(turns::rewind))
        .routes(routes!(turns::fork))
        .routes(routes!(turns::warm))
        .routes(routes!(turns::interrupt))
        .routes(routes!(turns::answer_permission))
        .routes(routes!(changes::get_changes))
        .routes(routes!(changes::commit))
        .routes(routes!(changes::merge))
        .routes(routes!(changes::discard))
        .routes(routes!(shares::put_share, shares::delete_share))
        .routes(routes!(shares::list_shares))
        .routes(routes!(shares::shared_with_me))
        .routes(routes!(links::make, links::list))
        .routes(routes!(links::revoke))
        .routes(routes!(links::open))
        .routes(routes!(audit::list))
        .routes(routes!(sse::events))
        .routes(routes!(projects::sync))
        .routes(routes!(projects::list))
        .routes(routes!(projects::cli_sessions))
        .routes(routes!(projects::import))
        .routes(routes!(schedules::list, schedules::create))
        .routes(routes!(
            schedules::get_one,
            schedules::update,
            schedules::delete
        ))
        .routes(routes!(schedules::run))
        .merge(
            OpenApiRouter::default()
                .routes(routes!(push::key))
                .routes(routes!(push::list, push::subscribe))
                .routes(routes!(push::unsubscribe))
                .routes(routes!(push::test))
                .layer(DefaultBodyLimit::max(push::MAX_BODY_BYTES)),
        )
        .routes(routes!(admin::backup))
        .routes(routes!(spend::list_credentials))
        .routes(routes!(
            spend::get_credentials,
            spend::put_credentials,
            spend::delete_credentials
        ))
        .routes(routes!(
            spend::get_budget,
            spend::put_budget,
            spend::delete_budget
        ))
        .routes(routes!(spend::put_conversation_budget))
        .routes(routes!(spend::usage))
}

/// The REST API as served: every route of [`authenticated`] behind the check of credentials
/// and the principal's connection count (and so marked in the document as needing a bearer
/// credential), and the document itself, served to anyone.
pub fn router(state: &AppState) -> Router<AppState> {
    let mut counted =
        authenticated().route_layer(middleware::from_fn_with_state(state.clone(), super::count));
    require_credentials(counted.get_openapi_mut());
    let (router, document) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(openapi))
        // A notification's buttons: the token in the body is the credential.
        .merge(
            OpenApiRouter::default()
                .routes(routes!(push::act))
                .layer(DefaultBodyLimit::max(push::MAX_BODY_BYTES)),
        )
        .merge(counted)
        .split_for_parts();
    let document = Document(Bytes::from(
        document.to_json().expect("the OpenAPI document is JSON"),
    ));
    router.layer(Extension(document))
}

/// The document as served, written out once.
#[derive(Clone)]
struct Document(Bytes);

/// Declares the `bearer` scheme and requires it of every operation of `document`, each of which
/// may then also be answered `401 unauthorized` or `429 limit_exceeded` (too many connections
/// of the principal) before its handler runs.
fn require_credentials(document: &mut utoipa::openapi::OpenApi) {
    document.components.get_or_insert_default().add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An API token or a JWT, when authentication is on (without it, anyone on the loopback address)",
                ))
                .build(),
        ),
    );
    let refusal = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name("ErrorBody"))),
            )
            .build()
    };
    for item in document.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            operation.security = Some(vec![SecurityRequirement::new(BEARER, [""; 0])]);
            let responses = &mut operation.responses.responses;
            for (status, description) in [
                ("401", "`unauthorized`: no valid credential"),
                (
                    "429",
                    "`limit_exceeded`: the principal's connections are all in use",
                ),
            ] {
                responses
                    .entry(status.to_owned())
                    .or_insert_with(|| refusal(description).into());
            }
        }
    }
}

/// This document: every route of the REST API, the types it reads and answers, and which
/// routes need a credential.
#[utoipa::path(get, path = "/api/openapi.json", operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object)))]
async fn openapi(Extension(Document(json)): Extension<Document>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], json)
}
