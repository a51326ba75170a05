//! The REST calls the client makes: listing conversations, renaming one, loading a
//! conversation's stored frames, and a project's CLI sessions (listed and imported).

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};

/// A conversation as the REST list returns it (the fields the client shows).
#[derive(Debug, Clone, Deserialize)]
pub struct Summary {
    pub agent_id: String,
    pub session_id: String,
    pub title: Option<String>,
    pub message_count: i64,
    pub last_active_at: String,
}

/// A session the Claude CLI keeps for a project, as `GET /api/projects/cli-sessions` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct CliSession {
    pub cli_session_id: String,
    pub title: Option<String>,
    pub message_count: i64,
    pub modified_at: String,
    /// The conversation that holds it already, if any.
    pub imported_as: Option<String>,
}

#[derive(Deserialize)]
struct CliSessionList {
    sessions: Vec<CliSession>,
}

#[derive(Deserialize)]
struct Project {
    path: String,
}

#[derive(Deserialize)]
struct ProjectList {
    projects: Vec<Project>,
}

#[derive(Deserialize)]
struct SessionList {
    sessions: Vec<Summary>,
}

#[derive(Deserialize)]
struct MessagesPage {
    messages: Vec<Value>,
    has_more: bool,
}

/// How a rename went.
pub enum Renamed {
    Done,
    /// The conversation has no stored message yet.
    NotFound,
    Failed(String),
}

/// The server's REST API.
pub struct Rest {
    http: reqwest::Client,
    /// `http://host:port`.
    base: String,
    /// The bearer credential, when the server has authentication on.
    token: Option<String>,
}

impl Rest {
    /// The REST API of the server whose socket is at `ws_url`, called with `token` when given.
    pub fn for_socket(ws_url: &str, token: Option<String>) -> anyhow::Result<Self> {
        Ok(Rest {
            http: reqwest::Client::new(),
            base: http_base(ws_url)?,
            token,
        })
    }

    /// A request to `path` (from `/api/…`) with the credential.
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The project directories the server offers this principal (its roots and the
    /// directories directly under them); empty when it has none.
    pub async fn projects(&self) -> anyhow::Result<Vec<String>> {
        let response = self
            .request(reqwest::Method::GET, "/api/projects")
            .send()
            .await
            .context("cannot list projects")?;
        if !response.status().is_success() {
            bail!("cannot list projects: {}", response.status());
        }
        let list: ProjectList = response.json().await?;
        Ok(list.projects.into_iter().map(|p| p.path).collect())
    }

    /// The Claude CLI's sessions for project `cwd`, most recently changed first.
    pub async fn cli_sessions(&self, cwd: &str) -> anyhow::Result<Vec<CliSession>> {
        let response = self
            .request(reqwest::Method::GET, "/api/projects/cli-sessions")
            .query(&[("cwd", cwd)])
            .send()
            .await
            .context("cannot list the CLI sessions")?;
        if !response.status().is_success() {
            bail!(
                "cannot list the CLI sessions: {}",
                error_text(response).await
            );
        }
        Ok(response.json::<CliSessionList>().await?.sessions)
    }

    /// Imports CLI session `cli_session_id` of project `cwd` as a conversation.
    pub async fn import(&self, cwd: &str, cli_session_id: &str) -> anyhow::Result<Summary> {
        let response = self
            .request(reqwest::Method::POST, "/api/projects/cli-sessions/import")
            .json(&json!({"cwd": cwd, "cli_session_id": cli_session_id}))
            .send()
            .await
            .context("cannot import the CLI session")?;
        if !response.status().is_success() {
            bail!("import failed: {}", error_text(response).await);
        }
        Ok(response.json().await?)
    }

    /// The `limit` conversations with the most recent activity.
    pub async fn list(&self, limit: usize) -> anyhow::Result<Vec<Summary>> {
        let response = self
            .request(
                reqwest::Method::GET,
                &format!("/api/sessions?limit={limit}"),
            )
            .send()
            .await
            .context("cannot list sessions")?;
        if !response.status().is_success() {
            bail!("cannot list sessions: {}", error_text(response).await);
        }
        Ok(response.json::<SessionList>().await?.sessions)
    }

    /// Sets the title of `agent_id`'s conversation.
    pub async fn rename(&self, agent_id: &str, title: &str) -> Renamed {
        match self
            .request(reqwest::Method::PATCH, &format!("/api/sessions/{agent_id}"))
            .json(&json!({"title": title}))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => Renamed::Done,
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => Renamed::NotFound,
            Ok(r) => Renamed::Failed(r.text().await.unwrap_or_default()),
            Err(err) => Renamed::Failed(err.to_string()),
        }
    }

    /// Every stored frame of `agent_id`'s conversation, in `seq` order, and the last `seq`.
    pub async fn history(&self, agent_id: &str) -> anyhow::Result<(Vec<Value>, i64)> {
        let mut frames = Vec::new();
        let mut after = 0;
        loop {
            let path = format!("/api/sessions/{agent_id}/messages?after_seq={after}&limit=1000");
            let page: MessagesPage = self
                .request(reqwest::Method::GET, &path)
                .send()
                .await
                .context("cannot load the history")?
                .error_for_status()?
                .json()
                .await?;
            after = page
                .messages
                .last()
                .and_then(|m| m["seq"].as_i64())
                .unwrap_or(after);
            frames.extend(page.messages);
            if !page.has_more {
                return Ok((frames, after));
            }
        }
    }
}

/// What a refused request says: the server's `error` text (with its code), else the status.
async fn error_text(response: reqwest::Response) -> String {
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    match (body["code"].as_str(), body["error"].as_str()) {
        (Some(code), Some(error)) => format!("{error} ({code})"),
        _ => status.to_string(),
    }
}

/// The REST base (`http://host:port`) of a WebSocket URL.
fn http_base(ws_url: &str) -> anyhow::Result<String> {
    let rest = if let Some(r) = ws_url.strip_prefix("ws://") {
        format!("http://{r}")
    } else if let Some(r) = ws_url.strip_prefix("wss://") {
        format!("https://{r}")
    } else {
        bail!("the URL must start with ws:// or wss://: {ws_url}");
    };
    let base = rest.trim_end_matches('/');
    Ok(base.strip_suffix("/ws").unwrap_or(base).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_base_comes_from_the_socket_url() {
        assert_eq!(
            http_base("ws://127.0.0.1:7878/ws").unwrap(),
            "http://127.0.0.1:7878"
        );
        assert_eq!(http_base("wss://h/ws/").unwrap(), "https://h");
        assert!(http_base("http://h/ws").is_err());
    }
}
