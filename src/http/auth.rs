//! Who is calling: every request and socket acts for one principal, and every conversation
//! lives in its principal's namespace.
//!
//! Authentication is on whenever an API token or a JWT key is configured. A request then
//! proves its principal with `Authorization: Bearer <token or JWT>`. Browsers can't set
//! headers on a WebSocket, so `POST /api/ws-ticket` (itself authenticated) hands out a
//! short-lived, single-use ticket (an HS256 JWT signed with the server's ticket key) that the
//! upgrade accepts as `?ticket=` or as the subprotocol `agentmux.ticket.<ticket>`. With no
//! credentials configured, the server only runs on a loopback address, and everyone is
//! [`LOCAL_PRINCIPAL`].
//!
//! An API token's principal is the name configured for it; a JWT's is its `sub` after
//! `auth.jwt_principal_prefix` (`jwt:`), so the two kinds of principal never meet by accident.
//! A JWT must carry `exp`, `sub`, and the configured `iss` and `aud`; `exp` and `nbf` are
//! checked with `auth.jwt_leeway_secs` of clock skew.
//!
//! Before any handler runs, every request's `Host` must be a loopback name or an allowed host
//! (so a page that rebinds its own DNS name to 127.0.0.1 can't reach an open server), and a
//! browser's `Origin` must be the server's own or an allowed one (so another site can't use a
//! user's ambient access, over REST or the WebSocket).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, header};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::config::{AuthConfig, ServerConfig};
use crate::http::ApiError;
use crate::http::AppState;
pub use crate::protocol::Principal;
use crate::protocol::{ErrorCode, MAX_PRINCIPAL_BYTES};

pub use crate::config::LOCAL_PRINCIPAL;
/// Prefix of the WebSocket subprotocol that carries a ticket.
pub const TICKET_PROTOCOL_PREFIX: &str = "agentmux.ticket.";
/// The `aud` claim of tickets, so that no other JWT passes as one.
const TICKET_AUDIENCE: &str = "agentmux:ws-ticket";
/// Secrets and tokens shorter than this get a warning at start-up.
const MIN_SECRET_BYTES: usize = 32;

/// Claims of a JWT presented as a bearer credential.
#[derive(Deserialize)]
struct JwtClaims {
    sub: String,
}

/// Claims of a WebSocket ticket.
#[derive(Serialize, Deserialize)]
struct TicketClaims {
    sub: String,
    aud: String,
    exp: u64,
    jti: String,
}

/// A ticket for one WebSocket upgrade.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Ticket {
    /// The ticket itself.
    pub ticket: String,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// The principal it signs in as (the caller): how a client learns its own name, to tell
    /// its messages from others' in a shared conversation.
    pub principal: String,
}

/// Checks credentials and issues tickets; built once from the settings.
pub struct Authenticator {
    /// Off: every caller is [`LOCAL_PRINCIPAL`].
    enabled: bool,
    /// `(token, principal)`, compared in constant time.
    tokens: Vec<(String, Principal)>,
    /// Key and rules for each accepted JWT algorithm.
    jwt: Vec<(DecodingKey, Validation)>,
    /// Put before a JWT's `sub` to make its principal.
    jwt_prefix: String,
    ticket_encoding: EncodingKey,
    ticket_decoding: DecodingKey,
    ticket_validation: Validation,
    ticket_ttl: Duration,
    /// `jti` → `exp` of redeemed tickets that have not expired yet.
    redeemed: Mutex<HashMap<String, u64>>,
    /// Allowed origins, lower case, without a trailing `/`.
    allowed_origins: Vec<String>,
    /// Allowed `Host` names (`name` or `name:port`), lower case.
    allowed_hosts: Vec<String>,
}

impl Authenticator {
    /// Builds the authenticator for a server that will listen on `bind`.
    ///
    /// # Errors
    /// When no credential is configured and `bind` is not a loopback address, or a JWT key
    /// can't be read.
    pub fn new(
        config: &AuthConfig,
        server: &ServerConfig,
        bind: SocketAddr,
    ) -> anyhow::Result<Self> {
        config.check_bind(bind)?;
        let enabled = config.is_configured();
        if !enabled {
            tracing::warn!(
                %bind,
                "authentication is off: anyone who can reach this loopback address acts as `{LOCAL_PRINCIPAL}`"
            );
        }
        for (token, principal) in &config.tokens {
            if token.trim().is_empty() || Principal::checked(principal).is_none() {
                anyhow::bail!(
                    "auth.tokens: every token and principal must be non-empty (principals at most {MAX_PRINCIPAL_BYTES} bytes)"
                );
            }
            if token.len() < MIN_SECRET_BYTES {
                tracing::warn!(
                    principal,
                    "the API token of this principal is short; use {MIN_SECRET_BYTES}+ random characters"
                );
            }
        }
        for (name, secret) in [
            ("auth.ticket_secret", &config.ticket_secret),
            ("auth.jwt_hs256_secret", &config.jwt_hs256_secret),
        ] {
            match secret.as_deref().map(str::len) {
                Some(0) => anyhow::bail!("{name} is empty"),
                Some(n) if n < MIN_SECRET_BYTES => {
                    tracing::warn!("{name} is short; use {MIN_SECRET_BYTES}+ random bytes");
                }
                _ => {}
            }
        }
        let mut jwt = Vec::new();
        if let Some(secret) = &config.jwt_hs256_secret {
            jwt.push((
                DecodingKey::from_secret(secret.as_bytes()),
                jwt_validation(Algorithm::HS256, config),
            ));
        }
        if let Some(pem) = &config.jwt_rs256_public_key_pem {
            let key = DecodingKey::from_rsa_pem(pem.as_bytes())
                .map_err(|e| anyhow::anyhow!("auth.jwt_rs256_public_key_pem: {e}"))?;
            jwt.push((key, jwt_validation(Algorithm::RS256, config)));
        }
        let ticket_secret = match &config.ticket_secret {
            Some(secret) => secret.as_bytes().to_vec(),
            // Two v4 UUIDs: 244 bits from the operating system's random source.
            None => [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
                .iter()
                .flat_map(|u| u.into_bytes())
                .collect(),
        };
        let mut ticket_validation = Validation::new(Algorithm::HS256);
        ticket_validation.leeway = 0;
        ticket_validation.set_audience(&[TICKET_AUDIENCE]);
        ticket_validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        Ok(Authenticator {
            enabled,
            tokens: config
                .tokens
                .iter()
                .map(|(t, p)| (t.clone(), Principal::new(p)))
                .collect(),
            jwt,
            jwt_prefix: config.jwt_principal_prefix.clone(),
            ticket_encoding: EncodingKey::from_secret(&ticket_secret),
            ticket_decoding: DecodingKey::from_secret(&ticket_secret),
            ticket_validation,
            ticket_ttl: Duration::from_secs(config.ticket_ttl_secs),
            redeemed: Mutex::new(HashMap::new()),
            allowed_origins: config
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            allowed_hosts: server
                .allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
        })
    }

    /// The principal of a request, from its `Authorization: Bearer` header.
    ///
    /// # Errors
    /// 401 when authentication is on and the header is missing or its credential is wrong.
    pub fn principal(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        if !self.enabled {
            return Ok(Principal::new(LOCAL_PRINCIPAL));
        }
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthorized("missing `Authorization: Bearer` credential"))?;
        let credential = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| unauthorized("the Authorization scheme must be Bearer"))?;
        self.check_credential(credential)
    }

    /// Checks an API token or a JWT.
    fn check_credential(&self, credential: &str) -> Result<Principal, ApiError> {
        // Every token is compared, so the time taken doesn't tell which one matched.
        let mut found = None;
        for (token, principal) in &self.tokens {
            if constant_time_eq(token.as_bytes(), credential.as_bytes()) {
                found = Some(principal);
            }
        }
        if let Some(principal) = found {
            return Ok(principal.clone());
        }
        let invalid = || unauthorized("invalid credential");
        let alg = jsonwebtoken::decode_header(credential)
            .map_err(|_| invalid())?
            .alg;
        let (key, validation) = self
            .jwt
            .iter()
            .find(|(_, v)| v.algorithms.contains(&alg))
            .ok_or_else(invalid)?;
        let claims = jsonwebtoken::decode::<JwtClaims>(credential, key, validation)
            .map_err(|_| invalid())?
            .claims;
        // The subject alone and with its prefix: a long prefix can't make a short one fit.
        Principal::checked(&claims.sub)
            .and_then(|sub| Principal::checked(&format!("{}{sub}", self.jwt_prefix)))
            .ok_or_else(invalid)
    }

    /// Issues a WebSocket ticket for `principal`.
    pub fn issue_ticket(&self, principal: &Principal) -> Ticket {
        let claims = TicketClaims {
            sub: principal.to_string(),
            aud: TICKET_AUDIENCE.to_owned(),
            exp: jsonwebtoken::get_current_timestamp() + self.ticket_ttl.as_secs(),
            jti: uuid::Uuid::new_v4().to_string(),
        };
        let ticket = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &self.ticket_encoding,
        )
        .expect("HS256 signing does not fail");
        Ticket {
            ticket,
            expires_in: self.ticket_ttl.as_secs(),
            principal: principal.to_string(),
        }
    }

    /// Redeems a ticket; each works once and only until it expires.
    fn redeem_ticket(&self, ticket: &str) -> Result<Principal, ApiError> {
        let invalid = || unauthorized("invalid, expired or already used ticket");
        let claims = jsonwebtoken::decode::<TicketClaims>(
            ticket,
            &self.ticket_decoding,
            &self.ticket_validation,
        )
        .map_err(|_| invalid())?
        .claims;
        let now = jsonwebtoken::get_current_timestamp();
        let mut redeemed = self.redeemed.lock().expect("ticket set lock");
        redeemed.retain(|_, exp| *exp >= now);
        if redeemed.insert(claims.jti, claims.exp).is_some() {
            return Err(invalid());
        }
        Principal::checked(&claims.sub).ok_or_else(invalid)
    }

    /// The principal of a WebSocket upgrade and the subprotocol to answer with: a ticket in
    /// `?ticket=` or in the subprotocol `agentmux.ticket.<ticket>`, else the bearer header.
    ///
    /// # Errors
    /// 401 when authentication is on and no valid credential came with the upgrade.
    pub fn socket_principal(
        &self,
        headers: &HeaderMap,
        query_ticket: Option<&str>,
    ) -> Result<(Principal, Option<String>), ApiError> {
        let protocol = headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .find(|p| p.starts_with(TICKET_PROTOCOL_PREFIX))
            .map(str::to_owned);
        let principal = if !self.enabled {
            Principal::new(LOCAL_PRINCIPAL)
        } else if let Some(ticket) = query_ticket {
            self.redeem_ticket(ticket)?
        } else if let Some(p) = &protocol {
            self.redeem_ticket(&p[TICKET_PROTOCOL_PREFIX.len()..])?
        } else {
            self.principal(headers)?
        };
        Ok((principal, protocol))
    }

    /// Checks the `Host` a request names: a loopback name (`localhost`, `*.localhost`, a
    /// `127.0.0.0/8` or `[::1]` address) or an allowed host. With authentication on and no
    /// allow-list, any host is served (credentials protect it).
    ///
    /// # Errors
    /// 421 `forbidden_host` otherwise, and when the request names no `Host`.
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(host) = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase)
        else {
            return Err(ApiError::new(
                ErrorCode::ForbiddenHost,
                "the request names no Host",
            ));
        };
        let Some(name) = host_name(&host) else {
            return Err(ApiError::new(
                ErrorCode::ForbiddenHost,
                format!(
                    "the Host `{}` is not a host name with an optional numeric port",
                    crate::protocol::truncate_chars(&host, 128)
                ),
            ));
        };
        let allowed = is_loopback_name(name)
            || self.allowed_hosts.iter().any(|a| *a == host || *a == name)
            || (self.enabled && self.allowed_hosts.is_empty());
        if allowed {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::ForbiddenHost,
                format!(
                    "this server does not answer to the host `{}`; add it to server.allowed_hosts",
                    crate::protocol::truncate_chars(&host, 128)
                ),
            ))
        }
    }

    /// Checks a browser's `Origin`: none is fine (not a browser); else it must be the server's
    /// own (`http` or `https` with the request's `Host`, which [`Self::check_host`] vouched
    /// for) or an allowed origin. An allowed entry without a scheme stands for `http` and
    /// `https`.
    ///
    /// # Errors
    /// 403 `forbidden_origin` otherwise.
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin
            .to_str()
            .map_err(|_| forbidden_origin())?
            .trim_end_matches('/')
            .to_ascii_lowercase();
        let Some((_, origin_host)) = origin
            .split_once("://")
            .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
        else {
            return Err(forbidden_origin());
        };
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase);
        let own = host.as_deref() == Some(origin_host);
        let allowed = self
            .allowed_origins
            .iter()
            .any(|a| match a.split_once("://") {
                Some(_) => *a == origin,
                None => a == origin_host,
            });
        if own || allowed {
            Ok(())
        } else {
            Err(forbidden_origin())
        }
    }
}

/// The name of a `Host` value that is exactly `name[:port]` (a registered name, an IPv4
/// address or a bracketed IPv6 one, then nothing or a colon and a port number), else None: no
/// user info (`127.0.0.1:1@evil.example` names `evil.example`), no second colon, no empty or
/// non-numeric port.
fn host_name(host: &str) -> Option<&str> {
    let authority: Authority = host.parse().ok()?;
    if host.contains('@') {
        return None;
    }
    let (name, port) = host.split_at(authority.host().len());
    match port {
        "" => Some(name),
        port => port
            .strip_prefix(':')
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .map(|_| name),
    }
}

/// Whether a host name can only mean this machine: `localhost`, `*.localhost` (which
/// browsers resolve to loopback themselves), or a loopback address.
fn is_loopback_name(name: &str) -> bool {
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, message)
}

fn forbidden_origin() -> ApiError {
    ApiError::new(
        ErrorCode::ForbiddenOrigin,
        "requests from this Origin are not allowed here; add it to auth.allowed_origins",
    )
}

/// The rules a bearer JWT must pass: a valid `exp`, a `sub`, `nbf` when present, and the
/// configured `iss` and `aud`, which are then required, not only checked when present.
fn jwt_validation(alg: Algorithm, config: &AuthConfig) -> Validation {
    let mut validation = Validation::new(alg);
    let mut required = vec!["exp", "sub"];
    validation.leeway = config.jwt_leeway_secs;
    validation.validate_nbf = true;
    if let Some(iss) = &config.jwt_issuer {
        validation.set_issuer(&[iss]);
        required.push("iss");
    }
    match &config.jwt_audience {
        Some(aud) => {
            validation.set_audience(&[aud]);
            required.push("aud");
        }
        None => validation.validate_aud = false,
    }
    validation.set_required_spec_claims(&required);
    validation
}

/// Equality whose time depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Counted requests were authenticated once already.
        if let Some(principal) = parts.extensions.get::<Principal>() {
            return Ok(principal.clone());
        }
        state.auth.principal(&parts.headers)
    }
}

/// `POST /api/ws-ticket`: a short-lived, single-use ticket for one WebSocket upgrade, for
/// clients (browsers) that can't set headers on it.
#[utoipa::path(post, path = "/api/ws-ticket", operation_id = "ws_ticket",
    description = "A single-use ticket that opens one WebSocket for the caller: `GET /ws?ticket=<ticket>`, or the subprotocol `agentmux.ticket.<ticket>`, within `expires_in` seconds. Send the bearer credential here.",
    responses((status = 200, body = Ticket), (status = 401, body = crate::http::ErrorBody)))]
pub async fn ws_ticket(State(app): State<AppState>, principal: Principal) -> Json<Ticket> {
    Json(app.auth.issue_ticket(&principal))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(config: AuthConfig) -> Authenticator {
        Authenticator::new(
            &config,
            &ServerConfig::default(),
            SocketAddr::from(([127, 0, 0, 1], 0)),
        )
        .unwrap()
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), axum::http::HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn open_mode_needs_a_loopback_bind() {
        let config = AuthConfig::default();
        let err = Authenticator::new(
            &config,
            &ServerConfig::default(),
            "0.0.0.0:7878".parse().unwrap(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("refusing to listen"));
        let open = auth(config);
        assert_eq!(
            open.principal(&HeaderMap::new()).unwrap().as_str(),
            LOCAL_PRINCIPAL
        );
    }

    #[test]
    fn tokens_map_to_principals() {
        let mut config = AuthConfig::default();
        config.tokens.insert("t-alice".into(), "alice".into());
        let a = auth(config);
        let ok = headers(&[(header::AUTHORIZATION, "Bearer t-alice")]);
        assert_eq!(a.principal(&ok).unwrap(), "alice");
        for bad in [
            "Bearer t-alic",
            "Bearer t-alice2",
            "Basic t-alice",
            "Bearer ",
        ] {
            let h = headers(&[(header::AUTHORIZATION, bad)]);
            assert_eq!(
                a.principal(&h).unwrap_err().status(),
                axum::http::StatusCode::UNAUTHORIZED
            );
        }
        assert!(a.principal(&HeaderMap::new()).is_err());
    }

    #[test]
    fn empty_tokens_and_secrets_are_refused() {
        let mut config = AuthConfig::default();
        config.tokens.insert(String::new(), "alice".into());
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        assert!(Authenticator::new(&config, &ServerConfig::default(), bind).is_err());
        let config = AuthConfig {
            jwt_hs256_secret: Some(String::new()),
            ..AuthConfig::default()
        };
        assert!(Authenticator::new(&config, &ServerConfig::default(), bind).is_err());
    }

    #[test]
    fn tickets_work_once() {
        let mut config = AuthConfig::default();
        config.tokens.insert("t".into(), "alice".into());
        let a = auth(config);
        let ticket = a.issue_ticket(&Principal::new("alice")).ticket;
        let (p, _) = a
            .socket_principal(&HeaderMap::new(), Some(&ticket))
            .unwrap();
        assert_eq!(p, "alice");
        assert!(
            a.socket_principal(&HeaderMap::new(), Some(&ticket))
                .is_err()
        );
        // A ticket is not a bearer credential.
        let h = headers(&[(header::AUTHORIZATION, &format!("Bearer {ticket}"))]);
        assert!(a.principal(&h).is_err());
    }

    #[test]
    fn origins_must_be_our_own_or_allowed_scheme_host_and_port() {
        let a = auth(AuthConfig {
            allowed_origins: vec!["https://App.example.com/".into(), "tool.example".into()],
            ..AuthConfig::default()
        });
        let check = |origin: &str| {
            a.check_origin(&headers(&[
                (header::HOST, "gw.example.com:8443"),
                (header::ORIGIN, origin),
            ]))
            .is_ok()
        };
        assert!(check("https://gw.example.com:8443"));
        assert!(check("http://gw.example.com:8443"));
        assert!(check("https://app.example.com"));
        assert!(check("http://tool.example"));
        assert!(!check("http://app.example.com"));
        assert!(!check("chrome-extension://gw.example.com:8443"));
        assert!(!check("https://evil.example.com"));
        assert!(!check("https://gw.example.com"));
        assert!(!check("null"));
        assert!(a.check_origin(&headers(&[(header::HOST, "x")])).is_ok());
    }

    #[test]
    fn an_open_server_answers_only_loopback_and_allowed_hosts() {
        let open = |allowed: &[&str]| {
            Authenticator::new(
                &AuthConfig::default(),
                &ServerConfig {
                    allowed_hosts: allowed.iter().map(|h| (*h).to_owned()).collect(),
                    ..ServerConfig::default()
                },
                SocketAddr::from(([127, 0, 0, 1], 0)),
            )
            .unwrap()
        };
        let a = open(&["Agents.example.com", "pinned.example:9000"]);
        let check = |host: &str| a.check_host(&headers(&[(header::HOST, host)])).is_ok();
        for ok in [
            "localhost",
            "localhost:7878",
            "app.localhost:7878",
            "127.0.0.1:7878",
            "127.9.9.9",
            "[::1]:7878",
            "agents.example.com:443",
            "pinned.example:9000",
        ] {
            assert!(check(ok), "{ok} is served");
        }
        for bad in [
            "rebind.evil.example:7878",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "pinned.example:9001",
            "[::2]:7878",
            "10.0.0.1:7878",
            "",
            "127.0.0.1:1@evil.example",
            "localhost:7878@evil.example",
            "127.0.0.1:evil",
            "127.0.0.1:1:2",
            "127.0.0.1:",
            "127.0.0.1:+1",
            "localhost:65536",
            "[::1]:x",
        ] {
            assert!(!check(bad), "{bad} is refused");
        }
        assert!(a.check_host(&HeaderMap::new()).is_err());
        // With credentials and no allow-list any host is served; with a list, only it.
        let mut config = AuthConfig::default();
        config.tokens.insert("t".into(), "alice".into());
        let authed = auth(config.clone());
        assert!(
            authed
                .check_host(&headers(&[(header::HOST, "10.0.0.1:7878")]))
                .is_ok()
        );
        let listed = Authenticator::new(
            &config,
            &ServerConfig {
                allowed_hosts: vec!["agents.example.com".into()],
                ..ServerConfig::default()
            },
            SocketAddr::from(([0, 0, 0, 0], 0)),
        )
        .unwrap();
        assert!(
            listed
                .check_host(&headers(&[(header::HOST, "10.0.0.1:7878")]))
                .is_err()
        );
    }
}
