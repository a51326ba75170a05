//! `agentmux backup` and `agentmux restore`.
//!
//! A running server holds its SQLite file alone, so a backup of a live store is made by the
//! server itself (`GET /api/admin/backup`, on its loopback address) and only checked and
//! kept here; with no server answering there, the file is copied directly, which works only
//! while no server holds it. Either way the copy is checked (SQLite's integrity check, an
//! agentmux schema this build knows) before it gets its name. A restore puts a checked copy in
//! place of the database of a stopped server.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::store::backup::{CopyError, Summary, check, copy, new_private_file};

/// Where a backup came from.
enum Source {
    /// The server answering at this address made it.
    Server(SocketAddr),
    /// The database file of a stopped server, read directly.
    File(PathBuf),
}

/// Backs the store of `config` up into `to`, a file that must not exist yet.
///
/// # Errors
/// When the store is PostgreSQL, `to` exists, the server refuses (not an admin's `token`), the
/// database is held by a server that does not answer at the configured address, or the copy
/// fails its check.
pub async fn backup(config: &Config, to: &Path, token: Option<&str>) -> anyhow::Result<String> {
    refuse_postgres(config, "pg_dump")?;
    if to.exists() {
        anyhow::bail!("{} exists: back up into a new file", to.display());
    }
    let mut partial_name = to.as_os_str().to_owned();
    partial_name.push(".partial");
    let partial = PathBuf::from(partial_name);
    let file = new_private_file(&partial)?;
    let outcome = fill(config, &partial, file, token)
        .await
        .and_then(|source| {
            let summary = check(&partial)?;
            // A link fails when `to` was made meanwhile: a backup never replaces a file.
            std::fs::hard_link(&partial, to)
                .map_err(|e| anyhow::anyhow!("cannot name the backup {}: {e}", to.display()))?;
            Ok((source, summary))
        });
    let _ = std::fs::remove_file(&partial);
    let (source, summary) = outcome?;
    let from = match source {
        Source::Server(addr) => format!("the server at {addr}"),
        Source::File(db) => format!("{} (no server was running)", db.display()),
    };
    Ok(format!(
        "backed up {} to {}, from {from}",
        describe(&summary),
        to.display()
    ))
}

/// Writes the backup into `partial` (open as `file`): made by the server at the configured
/// address, or copied from the database file when nothing listens there.
async fn fill(
    config: &Config,
    partial: &Path,
    file: std::fs::File,
    token: Option<&str>,
) -> anyhow::Result<Source> {
    let addr = local_address(config.bind);
    let mut out = tokio::fs::File::from_std(file);
    let fetched = crate::http::client::fetch_backup(addr, token, &mut out)
        .await
        .map_err(|e| {
            let unauthorized = e
                .downcast_ref::<crate::http::client::Refused>()
                .is_some_and(|r| r.code == "unauthorized");
            match unauthorized && token.is_none() {
                true => {
                    anyhow::anyhow!("{e}; give an admin's token with --token or AGENTMUX_TOKEN")
                }
                false => e,
            }
        })?;
    drop(out);
    if fetched.is_some() {
        return Ok(Source::Server(addr));
    }
    let db = config.database_path();
    let (from, to) = (db.clone(), partial.to_owned());
    tokio::task::spawn_blocking(move || copy(&from, &to, Duration::ZERO))
        .await?
        .map_err(|e| match e {
            CopyError::InUse(_) => anyhow::anyhow!(
                "{e}, but no server answers at {addr}: give its address with --bind (or \
                 AGENTMUX_BIND), or its settings with --config"
            ),
            other => other.into(),
        })?;
    Ok(Source::File(db))
}

/// Puts the backup `from` in place of the database of `config`'s data dir, whose server must
/// be stopped.
///
/// # Errors
/// When the store is PostgreSQL, `from` is that database itself, fails its check, or a server
/// holds the database.
pub fn restore(config: &Config, from: &Path) -> anyhow::Result<String> {
    refuse_postgres(config, "pg_restore")?;
    let db = config.database_path();
    if let (Ok(a), Ok(b)) = (std::fs::canonicalize(from), std::fs::canonicalize(&db))
        && a == b
    {
        anyhow::bail!(
            "{} is the database itself: restore from a backup",
            from.display()
        );
    }
    let restored = crate::store::backup::restore(from, &db)?;
    let mut said = format!(
        "restored {} from {} into {}",
        describe(&restored.summary),
        from.display(),
        db.display()
    );
    if let Some(aside) = restored.replaced {
        said.push_str(&format!(
            "; the database it replaced is kept as {}",
            aside.display()
        ));
    }
    Ok(said)
}

/// What a copy holds, for a person.
fn describe(summary: &Summary) -> String {
    let conversations = match summary.conversations {
        1 => "1 conversation".to_owned(),
        n => format!("{n} conversations"),
    };
    format!(
        "{conversations} ({} messages, {} bytes, schema version {})",
        summary.messages, summary.bytes, summary.schema
    )
}

/// Refuses a PostgreSQL store, naming its own `tool`.
fn refuse_postgres(config: &Config, tool: &str) -> anyhow::Result<()> {
    if !config.store.url.is_empty() {
        anyhow::bail!(
            "the store is PostgreSQL ({}): use {tool}, as docs/operating.md shows",
            crate::config::redact_url(&config.store.url)
        );
    }
    Ok(())
}

/// The address to reach a server bound to `bind` from this machine: a wildcard address
/// (`0.0.0.0`, `::`) is reached on loopback.
pub(super) fn local_address(bind: SocketAddr) -> SocketAddr {
    match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, bind.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, bind.port()).into(),
        _ => bind,
    }
}
