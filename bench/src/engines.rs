//! What a cluster of agentmux nodes runs on, started afresh for each run: a `nats-server`
//! process on a free loopback port, and databases of their own on a PostgreSQL server.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use sqlx::Connection;
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

/// How long a `nats-server` may take to listen.
const NATS_START_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up (another process may take a free port before NATS binds it).
const NATS_START_ATTEMPTS: usize = 3;

/// A `nats-server` listening on `127.0.0.1`, with the secret of the cluster that routes
/// through it; killed on drop.
pub struct Nats {
    port: u16,
    secret: String,
    _child: Child,
}

impl Nats {
    /// Starts `bin` on a free loopback port and waits until it accepts connections.
    pub async fn start(bin: &Path) -> anyhow::Result<Self> {
        let mut failure = None;
        for _ in 0..NATS_START_ATTEMPTS {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            match Self::spawn(bin, port).await {
                Ok(child) => {
                    let secret = format!(
                        "{}{}",
                        uuid::Uuid::new_v4().simple(),
                        uuid::Uuid::new_v4().simple()
                    );
                    return Ok(Nats {
                        port,
                        secret,
                        _child: child,
                    });
                }
                Err(err) => failure = Some(err),
            }
        }
        Err(failure.expect("at least one attempt"))
    }

    async fn spawn(bin: &Path, port: u16) -> anyhow::Result<Child> {
        let mut child = Command::new(bin)
            .args(["--addr", "127.0.0.1", "--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run nats-server {}: {e}", bin.display()))?;
        let deadline = Instant::now() + NATS_START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "nats-server {} exited before listening on port {port} ({status})",
                    bin.display()
                );
            }
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(child);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "nats-server {} did not listen on port {port} within {} s",
                bin.display(),
                NATS_START_TIMEOUT.as_secs()
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// The URL nodes connect to.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The secret the nodes routing through this server share.
    pub fn cluster_secret(&self) -> &str {
        &self.secret
    }
}

/// A PostgreSQL server URL, checked: the server a run makes its databases on.
#[derive(Clone)]
pub struct PgServer(url::Url);

impl PgServer {
    /// Parses `url`, which must be a `postgres://` or `postgresql://` URL. Errors never repeat
    /// the URL, which may hold a password.
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let parsed = url::Url::parse(url)
            .map_err(|e| anyhow::anyhow!("--store-server-url is not a URL: {e}"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "postgres" | "postgresql"),
            "--store-server-url must be a postgres:// or postgresql:// URL, not {}://",
            parsed.scheme()
        );
        Ok(PgServer(parsed))
    }

    /// The URL of database `name` on this server: the same URL with `name` as its path.
    fn database_url(&self, name: &str) -> String {
        let mut url = self.0.clone();
        url.set_path(&format!("/{name}"));
        url.to_string()
    }

    async fn execute(&self, sql: &str) -> anyhow::Result<()> {
        let mut conn = sqlx::PgConnection::connect(self.0.as_str())
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to --store-server-url: {e}"))?;
        let done = sqlx::query(sql).execute(&mut conn).await;
        let _ = conn.close().await;
        done?;
        Ok(())
    }
}

/// A database a run created on a PostgreSQL server, for the nodes of one measurement.
pub struct Database {
    server: PgServer,
    name: String,
    /// The URL nodes store in it with.
    pub url: String,
}

impl Database {
    /// Creates database `name` (letters, digits and `_` only) on `server`; it must not exist.
    pub async fn create(server: &PgServer, name: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "invalid database name {name:?}"
        );
        server
            .execute(&format!("create database \"{name}\""))
            .await
            .map_err(|e| anyhow::anyhow!("cannot create database {name}: {e:#}"))?;
        Ok(Database {
            url: server.database_url(name),
            server: server.clone(),
            name: name.to_owned(),
        })
    }

    /// Drops the database, disconnecting whoever still uses it.
    pub async fn drop_now(self) -> anyhow::Result<()> {
        let name = &self.name;
        self.server
            .execute(&format!("drop database if exists \"{name}\" with (force)"))
            .await
            .map_err(|e| anyhow::anyhow!("cannot drop database {name}: {e:#}"))
    }
}

/// Runs `f` on the URL of a new database `name`, then drops the database whatever `f` gave.
pub async fn in_database<T>(
    pg: &PgServer,
    name: &str,
    f: impl AsyncFnOnce(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let database = Database::create(pg, name).await?;
    let outcome = f(&database.url).await;
    let dropped = database.drop_now().await;
    let value = outcome?;
    dropped?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_is_the_server_url_with_another_path() {
        let server = PgServer::parse("postgres://agentmux@localhost/postgres?host=/tmp/pg.x1")
            .expect("a postgres URL");
        assert_eq!(
            server.database_url("bench_1"),
            "postgres://agentmux@localhost/bench_1?host=/tmp/pg.x1"
        );
        let server = PgServer::parse("postgresql://u:p%40ss@db.internal:5433").unwrap();
        assert_eq!(
            server.database_url("b"),
            "postgresql://u:p%40ss@db.internal:5433/b"
        );
    }

    #[test]
    fn only_postgres_urls_are_taken_and_errors_hide_them() {
        for bad in ["mysql://u:secret@h/db", "-h", "", "secret@h/db"] {
            let err = PgServer::parse(bad).err().expect(bad).to_string();
            assert!(err.contains("--store-server-url"), "{err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[tokio::test]
    async fn database_names_are_letters_digits_and_underscores() {
        let server = PgServer::parse("postgres://nobody@127.0.0.1:1/x").unwrap();
        for bad in ["", "a\"b", "a-b", "a b", "a;drop"] {
            let err = Database::create(&server, bad).await.err().expect(bad);
            assert!(err.to_string().contains("invalid database name"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_missing_nats_server_is_a_clear_error() {
        let err = Nats::start(Path::new("/nonexistent/nats-server"))
            .await
            .err()
            .expect("no such executable");
        assert!(err.to_string().contains("cannot run nats-server"), "{err}");
    }
}
