//! The REST calls the client makes: listing conversations, renaming one, loading a
//! conversation's stored frames, a project's CLI sessions (listed and imported), and a
//! conversation's worktree changes (shown, committed, merged, discarded), usage reports and a
//! conversation's spending cap.

use std::fmt;

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
    /// The git worktree it works in, when it has one of its own.
    #[serde(default)]
    pub worktree: Option<Worktree>,
    /// Whose it is, when another principal shared it with us (`agent_id` is then our alias).
    #[serde(default)]
    pub owner: Option<String>,
    /// What we may do with it then: `viewer` or `editor`.
    #[serde(default)]
    pub role: Option<String>,
}

/// `GET /api/agents`, the fields read.
#[derive(Debug, Deserialize)]
struct AgentList {
    default: String,
    agents: Vec<AgentEntry>,
}

#[derive(Debug, Deserialize)]
struct AgentEntry {
    name: String,
    #[serde(default)]
    models: Vec<ModelEntry>,
}

#[derive(Debug, Deserialize)]
struct ModelEntry {
    id: String,
    name: Option<String>,
}

/// A conversation's own git worktree: its branch and the base it merges into.
#[derive(Debug, Clone, Deserialize)]
pub struct Worktree {
    pub branch: String,
    pub base: String,
}

/// What a conversation changed in its worktree, as `GET …/changes` answers it.
#[derive(Debug, Clone, Deserialize)]
pub struct Changes {
    pub branch: String,
    pub base: String,
    /// Whether the worktree has changes not committed on its branch.
    pub uncommitted: bool,
    pub files: Vec<ChangedFile>,
    /// The unified diff, cut at the server's cap when `truncated`.
    pub diff: String,
    pub truncated: bool,
}

/// One file of [`Changes`].
#[derive(Debug, Clone, Deserialize)]
pub struct ChangedFile {
    pub path: String,
    /// `added`, `modified`, `deleted` or `type_changed`.
    pub status: String,
    pub additions: u64,
    pub deletions: u64,
    pub binary: bool,
}

/// What a merge did to the base branch.
#[derive(Debug, Clone, Deserialize)]
pub struct Merged {
    /// The base branch's commit after it.
    pub commit: String,
    /// False when the base had everything already.
    pub changed: bool,
}

#[derive(Deserialize)]
struct Committed {
    commit: Option<String>,
}

/// A request the server refused: its status and what its error body says.
#[derive(Debug)]
pub struct Refused {
    pub status: reqwest::StatusCode,
    /// The error's `code` and `error` text, when the body has them.
    pub error: Option<(String, String)>,
    /// The conflicting files a refused merge names.
    pub paths: Vec<String>,
}

impl Refused {
    async fn read(response: reqwest::Response) -> Self {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or_default();
        let error = match (body["code"].as_str(), body["error"].as_str()) {
            (Some(code), Some(error)) => Some((code.to_owned(), error.to_owned())),
            _ => None,
        };
        let paths = body["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        Refused {
            status,
            error,
            paths,
        }
    }
}

/// The server's `error` text with its code, else the status.
impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            Some((code, error)) => write!(f, "{error} ({code})"),
            None => write!(f, "{}", self.status),
        }
    }
}

impl std::error::Error for Refused {}

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
    /// The conversations shared with us (on a first page; absent from older servers).
    #[serde(default)]
    shared: Vec<Summary>,
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

    /// Sends `request`: its response when it succeeded, else [`Refused`] as the error.
    async fn call(&self, request: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let response = request.send().await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(Refused::read(response).await.into())
        }
    }

    /// The models agent `name` offers (the server's default agent without a name), as
    /// `GET /api/agents` lists them: id and name.
    pub async fn models(
        &self,
        name: Option<&str>,
    ) -> anyhow::Result<Vec<(String, Option<String>)>> {
        let list: AgentList = self
            .call(self.request(reqwest::Method::GET, "/api/agents"))
            .await
            .context("cannot list the agents")?
            .json()
            .await?;
        let wanted = name.unwrap_or(&list.default);
        let agent = list
            .agents
            .into_iter()
            .find(|a| a.name == wanted)
            .with_context(|| format!("the server has no agent `{wanted}`"))?;
        Ok(agent.models.into_iter().map(|m| (m.id, m.name)).collect())
    }

    /// The project directories the server offers this principal (its roots and the
    /// directories directly under them); empty when it has none.
    pub async fn projects(&self) -> anyhow::Result<Vec<String>> {
        let list: ProjectList = self
            .call(self.request(reqwest::Method::GET, "/api/projects"))
            .await
            .context("cannot list projects")?
            .json()
            .await?;
        Ok(list.projects.into_iter().map(|p| p.path).collect())
    }

    /// The Claude CLI's sessions for project `cwd`, most recently changed first.
    pub async fn cli_sessions(&self, cwd: &str) -> anyhow::Result<Vec<CliSession>> {
        let request = self
            .request(reqwest::Method::GET, "/api/projects/cli-sessions")
            .query(&[("cwd", cwd)]);
        let response = self
            .call(request)
            .await
            .context("cannot list the CLI sessions")?;
        Ok(response.json::<CliSessionList>().await?.sessions)
    }

    /// Imports CLI session `cli_session_id` of project `cwd` as a conversation.
    pub async fn import(&self, cwd: &str, cli_session_id: &str) -> anyhow::Result<Summary> {
        let request = self
            .request(reqwest::Method::POST, "/api/projects/cli-sessions/import")
            .json(&json!({"cwd": cwd, "cli_session_id": cli_session_id}));
        let response = self.call(request).await.context("import failed")?;
        Ok(response.json().await?)
    }

    /// The `limit` conversations with the most recent activity, then those other principals
    /// shared with us.
    pub async fn list(&self, limit: usize) -> anyhow::Result<Vec<Summary>> {
        let request = self.request(
            reqwest::Method::GET,
            &format!("/api/sessions?limit={limit}"),
        );
        let response = self.call(request).await.context("cannot list sessions")?;
        let SessionList {
            mut sessions,
            shared,
        } = response.json().await?;
        sessions.extend(shared);
        Ok(sessions)
    }

    /// `agent_id`'s conversation.
    pub async fn session(&self, agent_id: &str) -> anyhow::Result<Summary> {
        let request = self.request(reqwest::Method::GET, &format!("/api/sessions/{agent_id}"));
        Ok(self.call(request).await?.json().await?)
    }

    /// What `agent_id`'s conversation changed in its worktree.
    pub async fn changes(&self, agent_id: &str) -> anyhow::Result<Changes> {
        let path = format!("/api/sessions/{agent_id}/changes");
        let response = self.call(self.request(reqwest::Method::GET, &path)).await?;
        Ok(response.json().await?)
    }

    /// POSTs `body` to `…/changes/<action>` of `agent_id`'s conversation.
    async fn change(
        &self,
        agent_id: &str,
        action: &str,
        body: Value,
    ) -> anyhow::Result<reqwest::Response> {
        let path = format!("/api/sessions/{agent_id}/changes/{action}");
        self.call(self.request(reqwest::Method::POST, &path).json(&body))
            .await
    }

    /// Commits everything in the worktree on its branch: the new commit, or `None` when there
    /// was nothing to commit.
    pub async fn commit(&self, agent_id: &str, message: &str) -> anyhow::Result<Option<String>> {
        let response = self
            .change(agent_id, "commit", json!({"message": message}))
            .await?;
        Ok(response.json::<Committed>().await?.commit)
    }

    /// Merges the worktree's branch into its base (`squash`: as one commit), with `message`
    /// or the server's default.
    pub async fn merge(
        &self,
        agent_id: &str,
        squash: bool,
        message: Option<&str>,
    ) -> anyhow::Result<Merged> {
        let mut body = json!({"strategy": if squash { "squash" } else { "merge" }});
        if let Some(message) = message {
            body["message"] = json!(message);
        }
        Ok(self.change(agent_id, "merge", body).await?.json().await?)
    }

    /// Returns the worktree to its base, dropping every change.
    pub async fn discard(&self, agent_id: &str) -> anyhow::Result<()> {
        self.change(agent_id, "discard", json!({"confirm": true}))
            .await
            .map(drop)
    }

    /// The caller's usage report of the last 30 days, grouped by `group_by`.
    pub async fn usage(&self, group_by: &str) -> anyhow::Result<Value> {
        let request = self
            .request(reqwest::Method::GET, "/api/usage")
            .query(&[("group_by", group_by)]);
        Ok(self.call(request).await?.json().await?)
    }

    /// Sets the own spending cap of `agent_id`'s conversation.
    pub async fn set_cap(&self, agent_id: &str, usd: f64) -> anyhow::Result<()> {
        let path = format!("/api/sessions/{agent_id}/budget");
        self.call(
            self.request(reqwest::Method::PUT, &path)
                .json(&json!({"budget_usd": usd})),
        )
        .await
        .map(drop)
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
                .call(self.request(reqwest::Method::GET, &path))
                .await
                .context("cannot load the history")?
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
