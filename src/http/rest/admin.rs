//! Handler of `/api/admin/backup`: a consistent copy of the server's SQLite database, made while
//! it serves, for its admins.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use tokio_util::io::ReaderStream;

use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};

/// The whole database as a SQLite file, copied in one transaction while the server goes on
/// serving (for the server's admins, `auth.admins`; with authentication off, anyone on the
/// loopback address). `agentmux backup --to FILE` calls it and checks what it gets.
#[utoipa::path(get, path = "/api/admin/backup", operation_id = "backup",
    responses(
        (status = 200, description = "The database: a SQLite file, `application/vnd.sqlite3`"),
        (status = 403, description = "`forbidden`: not an admin", body = ErrorBody),
        (status = 422, description = "`unsupported`: the store is PostgreSQL (use pg_dump)", body = ErrorBody),
        (status = 503, description = "`store_unavailable`: the copy failed", body = ErrorBody)))]
pub async fn backup(
    State(app): State<AppState>,
    principal: Principal,
) -> Result<Response, ApiError> {
    let copy = app.manager.backup(&principal).await?;
    let permit = copy.permit;
    let chunks = ReaderStream::new(tokio::fs::File::from_std(copy.file)).map(move |chunk| {
        // The admin's transfer place is held until the last chunk has gone.
        let _held = &permit;
        chunk
    });
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    Ok((
        [
            (header::CONTENT_TYPE, "application/vnd.sqlite3".to_owned()),
            (header::CONTENT_LENGTH, copy.bytes.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"agentmux-{stamp}.db\""),
            ),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}
