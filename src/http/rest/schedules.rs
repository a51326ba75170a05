//! Handlers of `/api/schedules`: the caller's scheduled prompts, each sending a chat to one of
//! its conversations at every tick. Another principal's schedule answers like an unknown one.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::session::{LastRun, Schedule, ScheduleBody};

/// The caller's schedules.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleList {
    /// Oldest first.
    pub schedules: Vec<Schedule>,
}

/// Creates a schedule. Its first tick is counted from now.
#[utoipa::path(post, path = "/api/schedules", operation_id = "create_schedule",
    request_body = ScheduleBody,
    responses((status = 201, body = Schedule), (status = 400, body = ErrorBody),
        (status = 429, body = ErrorBody)))]
pub async fn create(
    State(app): State<AppState>,
    principal: Principal,
    body: Result<Json<ScheduleBody>, JsonRejection>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    let Json(body) = body?;
    let schedule = app.scheduler.create(&principal, body).await?;
    Ok((StatusCode::CREATED, Json(schedule)))
}

/// The query of `GET /api/schedules`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Every principal's schedules instead of the caller's: for the server's admins
    /// (`auth.admins`) only, 403 `forbidden` for anyone else.
    #[serde(default)]
    pub all: bool,
}

/// Lists the caller's schedules (`?all=true`: every principal's, for an admin).
#[utoipa::path(get, path = "/api/schedules", operation_id = "list_schedules", params(ListQuery),
    responses((status = 200, body = ScheduleList), (status = 403, body = ErrorBody)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ScheduleList>, ApiError> {
    let Query(query) = query?;
    let schedules = if query.all {
        app.scheduler.list_all(&principal).await?
    } else {
        app.scheduler.list(&principal).await?
    };
    Ok(Json(ScheduleList { schedules }))
}

/// One schedule, with its next tick and latest run.
#[utoipa::path(get, path = "/api/schedules/{id}", operation_id = "get_schedule",
    params(("id" = String, Path, description = "The schedule")),
    responses((status = 200, body = Schedule), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    Ok(Json(app.scheduler.get(&principal, &id).await?))
}

/// Changes a schedule; `{"enabled": false}` pauses it and `{"enabled": true}` resumes it.
#[utoipa::path(patch, path = "/api/schedules/{id}", operation_id = "update_schedule",
    request_body = ScheduleBody,
    params(("id" = String, Path, description = "The schedule")),
    responses((status = 200, body = Schedule), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn update(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<ScheduleBody>, JsonRejection>,
) -> Result<Json<Schedule>, ApiError> {
    let Json(body) = body?;
    Ok(Json(app.scheduler.update(&principal, &id, body).await?))
}

/// Deletes a schedule; no run of it starts afterwards (conversations it made stay).
#[utoipa::path(delete, path = "/api/schedules/{id}", operation_id = "delete_schedule",
    params(("id" = String, Path, description = "The schedule")),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    app.scheduler.delete(&principal, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a schedule now (paused or not) without moving its next tick; the answer says whether
/// the run started, was skipped (its previous run is still running or queued) or refused.
#[utoipa::path(post, path = "/api/schedules/{id}/run", operation_id = "run_schedule",
    params(("id" = String, Path, description = "The schedule")),
    responses((status = 202, body = LastRun), (status = 404, body = ErrorBody)))]
pub async fn run(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<LastRun>), ApiError> {
    let last = app.scheduler.run_now(&principal, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(last)))
}
