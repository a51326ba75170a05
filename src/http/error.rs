//! REST errors: the stable codes of the wire protocol, as JSON `{"code": "...", "error": "..."}`
//! with a matching HTTP status.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection, StringRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::protocol::{ErrorCode, FrameError};
use crate::session::SessionError;

/// The body of every REST error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable, snake_case code (the same codes as the WebSocket's `error` frames).
    pub code: ErrorCode,
    /// Human-readable explanation.
    pub error: String,
    /// For a `conflict` from a merge: the files that would conflict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// A failed REST request.
#[derive(Debug, Clone)]
pub struct ApiError(pub ErrorBody);

impl ApiError {
    /// An error with `code` and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError(ErrorBody {
            code,
            error: message.into(),
            paths: Vec::new(),
        })
    }

    /// A malformed request (`invalid_request`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// The HTTP status a code is answered with.
    pub fn status(&self) -> StatusCode {
        match self.0.code {
            ErrorCode::BadFrame
            | ErrorCode::UnknownType
            | ErrorCode::InvalidAgentId
            | ErrorCode::InvalidContent
            | ErrorCode::InvalidOptions
            | ErrorCode::InvalidSeq
            | ErrorCode::InvalidRequest
            | ErrorCode::InvalidSchedule => StatusCode::BAD_REQUEST,
            ErrorCode::UnknownAgent
            | ErrorCode::UnknownRequest
            | ErrorCode::UnknownSchedule
            | ErrorCode::UnknownSubscription
            | ErrorCode::UnknownLink => StatusCode::NOT_FOUND,
            ErrorCode::LinkExpired => StatusCode::GONE,
            ErrorCode::Busy | ErrorCode::AgentExists | ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::Unsupported => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::LimitExceeded | ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::BackendUnavailable
            | ErrorCode::StoreUnavailable
            | ErrorCode::OwnedElsewhere
            | ErrorCode::SearchTimeout => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::ForbiddenOrigin | ErrorCode::Forbidden | ErrorCode::CredentialsRequired => {
                StatusCode::FORBIDDEN
            }
            ErrorCode::BudgetExceeded => StatusCode::PAYMENT_REQUIRED,
            ErrorCode::ForbiddenHost => StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

impl From<FrameError> for ApiError {
    fn from(err: FrameError) -> Self {
        ApiError::new(err.code, err.message)
    }
}

impl From<crate::push::PushError> for ApiError {
    fn from(err: crate::push::PushError) -> Self {
        ApiError::new(err.code, err.message)
    }
}

impl From<SessionError> for ApiError {
    fn from(err: SessionError) -> Self {
        let mut api = ApiError::new(err.code, err.message);
        api.0.paths = err.paths;
        api
    }
}

impl From<QueryRejection> for ApiError {
    fn from(err: QueryRejection) -> Self {
        ApiError::invalid(err.body_text())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(err: JsonRejection) -> Self {
        ApiError::invalid(err.body_text())
    }
}

impl From<StringRejection> for ApiError {
    fn from(err: StringRejection) -> Self {
        ApiError::invalid(err.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, Json(self.0)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
