//! The `[auth]` settings: API tokens, JWT keys, allowed origins, admins, and who may sign in.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use serde::Deserialize;

use super::{LOCAL_PRINCIPAL, secs};
use crate::protocol::MAX_PRINCIPAL_BYTES;

/// Authentication settings. Authentication is on whenever a token or a JWT key is set.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// API tokens: token → principal. `AGENTMUX_TOKENS` adds more.
    pub tokens: BTreeMap<String, String>,
    /// Key that signs WebSocket tickets; a random one is made at start-up when unset.
    pub ticket_secret: Option<String>,
    /// How long a WebSocket ticket is valid, in seconds.
    #[serde(deserialize_with = "secs")]
    pub ticket_ttl_secs: u64,
    /// Shared secret of HS256-signed JWTs; their `sub` claim, after
    /// [`Self::jwt_principal_prefix`], is the principal.
    pub jwt_hs256_secret: Option<String>,
    /// PEM public key of RS256-signed JWTs; their `sub` claim, after
    /// [`Self::jwt_principal_prefix`], is the principal.
    pub jwt_rs256_public_key_pem: Option<String>,
    /// When set, JWTs must carry this `iss` claim.
    pub jwt_issuer: Option<String>,
    /// When set, JWTs must carry this `aud` claim.
    pub jwt_audience: Option<String>,
    /// Clock skew allowed when checking a JWT's `exp` and `nbf`, in seconds.
    #[serde(deserialize_with = "secs")]
    pub jwt_leeway_secs: u64,
    /// Put before a JWT's `sub` to make its principal (`jwt:` by default), so that JWT
    /// subjects and API-token principals never share conversations by accident. Empty: a
    /// JWT with `sub` `alice` acts as the token principal `alice`.
    pub jwt_principal_prefix: String,
    /// Browser origins allowed besides the server's own (`https://app.example.com`).
    pub allowed_origins: Vec<String>,
    /// Principals that may see every principal's schedules (`GET /api/schedules?all=true`).
    /// With authentication off, the one principal [`LOCAL_PRINCIPAL`], who runs the server, is
    /// an admin anyway.
    pub admins: Vec<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: BTreeMap::new(),
            ticket_secret: None,
            ticket_ttl_secs: 60,
            jwt_hs256_secret: None,
            jwt_rs256_public_key_pem: None,
            jwt_issuer: None,
            jwt_audience: None,
            jwt_leeway_secs: 5,
            jwt_principal_prefix: "jwt:".to_owned(),
            allowed_origins: Vec::new(),
            admins: Vec::new(),
        }
    }
}

/// Shows which secrets are set, never their values.
impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &Option<String>| if s.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("AuthConfig")
            .field("principals", &self.tokens.values().collect::<Vec<_>>())
            .field("ticket_secret", &set(&self.ticket_secret))
            .field("ticket_ttl_secs", &self.ticket_ttl_secs)
            .field("jwt_hs256_secret", &set(&self.jwt_hs256_secret))
            .field(
                "jwt_rs256_public_key_pem",
                &set(&self.jwt_rs256_public_key_pem),
            )
            .field("jwt_issuer", &self.jwt_issuer)
            .field("jwt_audience", &self.jwt_audience)
            .field("jwt_leeway_secs", &self.jwt_leeway_secs)
            .field("jwt_principal_prefix", &self.jwt_principal_prefix)
            .field("allowed_origins", &self.allowed_origins)
            .field("admins", &self.admins)
            .finish()
    }
}

impl AuthConfig {
    /// Whether any credential is configured, which turns authentication on.
    pub fn is_configured(&self) -> bool {
        !self.tokens.is_empty() || self.verifies_jwts()
    }

    /// Whether JWTs are accepted.
    fn verifies_jwts(&self) -> bool {
        self.jwt_hs256_secret.is_some() || self.jwt_rs256_public_key_pem.is_some()
    }

    /// Whether `principal` can still sign in: with authentication off, only
    /// [`LOCAL_PRINCIPAL`]; else a principal of a configured token, or, while JWTs are
    /// accepted, any principal a JWT could have: [`Self::jwt_principal_prefix`] followed by a
    /// subject a JWT may carry (1 to [`MAX_PRINCIPAL_BYTES`] bytes). JWT subjects are not
    /// listed anywhere, so such a principal is never known to be gone; with an empty prefix
    /// that is every principal, a token's too (the operator made them one namespace).
    pub fn principal_exists(&self, principal: &str) -> bool {
        if !self.is_configured() {
            return principal == LOCAL_PRINCIPAL;
        }
        let from_jwt = || {
            principal
                .strip_prefix(self.jwt_principal_prefix.as_str())
                .is_some_and(|sub| (1..=MAX_PRINCIPAL_BYTES).contains(&sub.len()))
        };
        self.tokens.values().any(|p| p == principal) || (self.verifies_jwts() && from_jwt())
    }

    /// Whether `principal` is one of the server's admins ([`Self::admins`]).
    pub fn is_admin(&self, principal: &str) -> bool {
        (!self.is_configured() && principal == LOCAL_PRINCIPAL)
            || self.admins.iter().any(|a| a == principal)
    }

    /// Refuses to run without authentication anywhere but on a loopback address.
    ///
    /// # Errors
    /// When no credential is configured and `bind` is not a loopback address.
    pub fn check_bind(&self, bind: SocketAddr) -> anyhow::Result<()> {
        if !self.is_configured() && !bind.ip().is_loopback() {
            anyhow::bail!(
                "refusing to listen on {bind} without authentication: set API tokens \
                 (AGENTMUX_TOKENS or [auth] tokens) or a JWT key, or bind a loopback address"
            );
        }
        Ok(())
    }

    /// Adds tokens from a `token=principal,token=principal` list (the form of
    /// `AGENTMUX_TOKENS`). Each entry is split at its last `=`, so a token may end in `=`
    /// (base64 padding) and a principal never contains one.
    ///
    /// # Errors
    /// When an entry has no `=`, or an empty token or principal. The message names the entry
    /// by position, never by its token.
    pub fn add_token_list(&mut self, list: &str) -> anyhow::Result<()> {
        for (i, entry) in list.split(',').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            match entry.rsplit_once('=') {
                Some((token, principal))
                    if !token.trim().is_empty() && !principal.trim().is_empty() =>
                {
                    self.tokens
                        .insert(token.trim().to_owned(), principal.trim().to_owned());
                }
                _ => anyhow::bail!(
                    "AGENTMUX_TOKENS entry {} is not of the form token=principal",
                    i + 1
                ),
            }
        }
        Ok(())
    }
}
