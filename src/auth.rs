//! Who is calling: every request and socket acts for one principal, and every conversation
//! lives in its principal's namespace.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::AppState;

/// The principal of sockets and requests while authentication is off.
pub const LOCAL_PRINCIPAL: &str = "local";

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

impl FromRequestParts<AppState> for Principal {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        _parts: &mut Parts,
        _state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Principal(LOCAL_PRINCIPAL.to_owned()))
    }
}
