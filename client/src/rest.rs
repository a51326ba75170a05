//! The REST calls the client makes: listing conversations, renaming one, and loading a
//! conversation's stored frames.

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
}

impl Rest {
    /// The REST API of the server whose socket is at `ws_url`.
    pub fn for_socket(ws_url: &str) -> anyhow::Result<Self> {
        Ok(Rest {
            http: reqwest::Client::new(),
            base: http_base(ws_url)?,
        })
    }

    /// The `limit` conversations with the most recent activity.
    pub async fn list(&self, limit: usize) -> anyhow::Result<Vec<Summary>> {
        let url = format!("{}/api/sessions?limit={limit}", self.base);
        let response = self
            .http
            .get(url)
            .send()
            .await
            .context("cannot list sessions")?;
        if !response.status().is_success() {
            bail!(
                "cannot list sessions: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(response.json::<SessionList>().await?.sessions)
    }

    /// Sets the title of `agent_id`'s conversation.
    pub async fn rename(&self, agent_id: &str, title: &str) -> Renamed {
        let url = format!("{}/api/sessions/{agent_id}", self.base);
        match self
            .http
            .patch(url)
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
            let url = format!(
                "{}/api/sessions/{agent_id}/messages?after_seq={after}&limit=1000",
                self.base
            );
            let page: MessagesPage = self
                .http
                .get(url)
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
