//! Reaching a PostgreSQL store: its password kept out of every error, and the read-only look
//! `agentmux doctor` takes at one.

use std::str::FromStr;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::postgres::PgConnectOptions;

use crate::config::redact_url;
use crate::store::schema;

pub(super) fn scrub(url: &str, text: &str) -> String {
    let Some(password) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?', '#']).next())
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty())
    else {
        return text.to_owned();
    };
    let mut out = text.replace(password, "***");
    if let Ok(decoded) = percent_decode(password)
        && !decoded.is_empty()
    {
        out = out.replace(&decoded, "***");
    }
    out
}

/// Decodes `%XX` escapes.
fn percent_decode(s: &str) -> std::result::Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or(())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// What a PostgreSQL store holds, as `agentmux doctor` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSummary {
    /// The server's version (`server_version`).
    pub server: String,
    /// The schema version of agentmux's tables; None before the first node started on it.
    pub schema: Option<i64>,
    /// Conversations (imports left unfinished not counted).
    pub conversations: u64,
}

/// Connects to the store at `url` and reads what it holds, changing nothing.
///
/// # Errors
/// When the server can't be reached or refuses the login, or its schema is newer than this
/// build's; the password of `url` never appears.
pub async fn inspect(url: &str) -> anyhow::Result<PgSummary> {
    use sqlx::Connection as _;
    let shown = redact_url(url);
    let fail = |err: &dyn std::fmt::Display| {
        anyhow::anyhow!("the store at {shown}: {}", scrub(url, &err.to_string()))
    };
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| fail(&e))?
        .application_name("agentmux doctor");
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        PgConnection::connect_with(&options),
    )
    .await
    .map_err(|_| fail(&"no answer within 10 s"))?
    .map_err(|e| fail(&e))?;
    let server: String = sqlx::query_scalar("show server_version")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| fail(&e))?;
    let made: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| fail(&e))?;
    let mut summary = PgSummary {
        server,
        schema: None,
        conversations: 0,
    };
    if made {
        let schema: i64 = sqlx::query_scalar(
            "select coalesce(max(version), 0) from _sqlx_migrations where success",
        )
        .fetch_one(&mut conn)
        .await
        .map_err(|e| fail(&e))?;
        if schema > schema::newest(&schema::POSTGRES) {
            return Err(fail(&schema::newer(schema, &schema::POSTGRES)));
        }
        let conversations: i64 =
            sqlx::query_scalar("select count(*) from session_info where not pending")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| fail(&e))?;
        summary.schema = Some(schema);
        summary.conversations = conversations as u64;
    }
    let _ = conn.close().await;
    Ok(summary)
}
