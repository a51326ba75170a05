//! `fake-anthropic`: a stand-in for the Anthropic Messages API, enough for the Claude Code CLI to
//! run fully offline against it (`ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`).
//!
//! Usage: `fake-anthropic [--port N] [--log FILE]`. With `--port 0` (the default) a free port is
//! picked. The first stdout line is `listening on http://127.0.0.1:<port>`.
//!
//! Routes:
//!
//! * `POST /v1/messages` (query string ignored): a streamed (SSE) reply when the request says
//!   `"stream": true`, else a JSON message (the CLI's model check on `set_model` leaves it out).
//!   The events are `message_start`, `ping`, `content_block_start`,
//!   one `content_block_delta` per word (`text_delta`, or `input_json_delta` for a tool call),
//!   `content_block_stop`, `message_delta`, `message_stop`.
//! * `HEAD /`, `/api/hello`: 200.
//! * anything else: logged on stderr, 404.
//!
//! The reply is chosen from the last `role:"user"` message (`<system-reminder>` blocks and
//! `role:"system"` messages are skipped). After a turn that got no reply (an API error, or an
//! interrupt before the reply began) the CLI merges that turn's text and the next one into one
//! user message: the keywords below are read from its newest text block only, and the echo
//! repeats all of its texts, one per line.
//!
//! * the last user message holds a `tool_result` → `Tool said: <tool result text>`;
//! * the prompt contains `TOOL:<cmd>` → a `Bash` tool call `{"command":"<cmd>","description":"run it"}`
//!   with `stop_reason: "tool_use"` (`+` in `<cmd>` stands for a space: `TOOL:touch+a.txt`);
//! * the prompt contains `HTTPERR:<status>` → that HTTP status with an API error body
//!   (`fake server: forced <status>`);
//! * the prompt contains `RATELIMIT:<secs>` → 429 `rate_limit_error` with the headers the API
//!   sends with it for an API key: `retry-after: <secs>` and the `anthropic-ratelimit-requests-*`
//!   and `-tokens-*` limits, each `-reset` at now + `<secs>` (RFC 3339);
//! * the prompt contains `USAGELIMIT:<secs>` → 429 with the headers of a subscription's usage
//!   limit: `anthropic-ratelimit-unified-status: rejected`, `-reset` at now + `<secs>` (seconds
//!   since the epoch) and `-representative-claim: five_hour`;
//! * otherwise `Echo: <prompt> (history <N>)`, where N is the number of user messages holding real
//!   text (not only tool results, system reminders or the interruption marker). With `SLOW` in the
//!   prompt, the reply is padded to 50 words and each word waits 200 ms; with `LATE`, the reply
//!   starts after 1 s.
//! * A request with `output_config.format.type == "json_schema"` gets `{"title":"Fake title"}`.
//!
//! `--log FILE` appends each `/v1/messages` request body as one JSON line, with the request's
//! `x-api-key` header added as `_x_api_key`.

use std::convert::Infallible;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use clap::Parser;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const SLOW_WORDS: usize = 50;
const SLOW_DELAY: Duration = Duration::from_millis(200);
const LATE_DELAY: Duration = Duration::from_secs(1);
const INTERRUPT_MARKER: &str = "[Request interrupted by user]";

#[derive(Parser)]
#[command(about = "A fake Anthropic Messages API for tests")]
struct Args {
    /// Port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Append each request body to this file, one JSON line each.
    #[arg(long)]
    log: Option<PathBuf>,
}

struct App {
    log: Option<Mutex<std::fs::File>>,
    counter: AtomicU64,
}

impl App {
    fn log_body(&self, body: &Value) {
        if let Some(file) = &self.log {
            let mut line = body.to_string();
            line.push('\n');
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
                eprintln!("fake-anthropic: cannot write the log: {e}");
            }
        }
    }
}

/// What the fake model answers.
#[derive(Debug, PartialEq)]
enum Reply {
    Text {
        text: String,
        slow: bool,
        late: bool,
    },
    Tool {
        command: String,
    },
    Error {
        status: u16,
    },
    /// 429 with the reset `secs` ahead, told as the API does for an API key (`unified` false)
    /// or for a subscription's usage limit.
    RateLimited {
        secs: u64,
        unified: bool,
    },
}

fn is_reminder(text: &str) -> bool {
    text.trim_start().starts_with("<system-reminder>")
}

/// The user-written text blocks of a message (system reminders and the interruption marker left
/// out).
fn real_texts(message: &Value) -> Vec<String> {
    let keep = |t: &str| !t.trim().is_empty() && !is_reminder(t) && t.trim() != INTERRUPT_MARKER;
    match &message["content"] {
        Value::String(s) if keep(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .filter(|t| keep(t))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// The text of the last `tool_result` block of a message, if it has one.
fn tool_result(message: &Value) -> Option<String> {
    let blocks = message["content"].as_array()?;
    let result = blocks.iter().rev().find(|b| b["type"] == "tool_result")?;
    Some(match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    })
}

fn keyword<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix))
        .filter(|v| !v.is_empty())
}

fn choose_reply(request: &Value) -> Reply {
    if request["output_config"]["format"]["type"] == "json_schema" {
        return Reply::Text {
            text: json!({"title": "Fake title"}).to_string(),
            slow: false,
            late: false,
        };
    }
    let empty = Vec::new();
    let users: Vec<&Value> = request["messages"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    let history = users.iter().filter(|m| !real_texts(m).is_empty()).count();
    if let Some(output) = users.last().and_then(|m| tool_result(m)) {
        return Reply::Text {
            text: format!("Tool said: {output}"),
            slow: false,
            late: false,
        };
    }
    // After a turn that got no reply (an API error, an interrupt before the reply began) the CLI
    // sends that turn's text and the next one as one user message: the keywords are read from
    // the newest text only, the echo repeats them all.
    let texts = users.last().map(|m| real_texts(m)).unwrap_or_default();
    let newest = texts.last().map(|t| t.trim()).unwrap_or_default();
    let prompt = texts
        .iter()
        .map(|t| t.trim())
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(status) = keyword(newest, "HTTPERR:").and_then(|s| s.parse().ok()) {
        return Reply::Error { status };
    }
    if let Some(secs) = keyword(newest, "RATELIMIT:").and_then(|s| s.parse().ok()) {
        return Reply::RateLimited {
            secs,
            unified: false,
        };
    }
    if let Some(secs) = keyword(newest, "USAGELIMIT:").and_then(|s| s.parse().ok()) {
        return Reply::RateLimited {
            secs,
            unified: true,
        };
    }
    if let Some(command) = keyword(newest, "TOOL:") {
        return Reply::Tool {
            command: command.replace('+', " "),
        };
    }
    let slow = newest.contains("SLOW");
    let mut text = format!("Echo: {prompt} (history {history})");
    if slow {
        let words = text.split_whitespace().count();
        for i in words..SLOW_WORDS {
            text.push_str(&format!(" chunk{i:02}"));
        }
    }
    let late = newest.contains("LATE");
    Reply::Text { text, slow, late }
}

fn sse(event: &Value) -> Bytes {
    let name = event["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {name}\ndata: {event}\n\n"))
}

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn api_error(status: u16, message: String) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A 429 whose limit resets `secs` from now, with the headers the API sends with it.
fn rate_limited(secs: u64, unified: bool) -> Response {
    let mut response = api_error(
        429,
        "fake server: rate limited (this request would exceed your rate limit)".into(),
    );
    let reset = chrono::Utc::now() + chrono::Duration::seconds(secs as i64);
    let headers: Vec<(&'static str, String)> = if unified {
        vec![
            ("anthropic-ratelimit-unified-status", "rejected".into()),
            (
                "anthropic-ratelimit-unified-reset",
                reset.timestamp().to_string(),
            ),
            (
                "anthropic-ratelimit-unified-representative-claim",
                "five_hour".into(),
            ),
        ]
    } else {
        let at = reset.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        vec![
            ("retry-after", secs.to_string()),
            ("anthropic-ratelimit-requests-limit", "50".into()),
            ("anthropic-ratelimit-requests-remaining", "0".into()),
            ("anthropic-ratelimit-requests-reset", at.clone()),
            ("anthropic-ratelimit-tokens-limit", "40000".into()),
            ("anthropic-ratelimit-tokens-remaining", "0".into()),
            ("anthropic-ratelimit-tokens-reset", at),
        ]
    };
    for (name, value) in headers {
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert(header::HeaderName::from_static(name), value);
        }
    }
    response
}

async fn messages(
    State(app): State<Arc<App>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let n = app.counter.fetch_add(1, Ordering::Relaxed) + 1;
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return api_error(400, format!("invalid JSON body: {e}")),
    };
    // The key the request came with, logged beside the body (tests check whose key a
    // principal's turns ran on).
    let mut logged = request.clone();
    if let (Some(object), Some(key)) = (
        logged.as_object_mut(),
        headers.get("x-api-key").and_then(|v| v.to_str().ok()),
    ) {
        object.insert("_x_api_key".into(), json!(key));
    }
    app.log_body(&logged);
    let model = request["model"]
        .as_str()
        .unwrap_or("claude-opus-5-5")
        .to_string();
    let input_tokens = (body.len() / 4).max(1) as u64;
    let message_id = format!("msg_fake_{n}");

    let (content, deltas, stop_reason, slow, late) = match choose_reply(&request) {
        Reply::Error { status } => {
            return api_error(status, format!("fake server: forced {status}"));
        }
        Reply::RateLimited { secs, unified } => return rate_limited(secs, unified),
        Reply::Text { text, slow, late } => {
            let deltas: Vec<Value> = text
                .split_inclusive(' ')
                .map(|w| json!({"type": "text_delta", "text": w}))
                .collect();
            let block = json!({"type": "text", "text": text});
            (block, deltas, "end_turn", slow, late)
        }
        Reply::Tool { command } => {
            let input = json!({"command": command, "description": "run it"});
            let raw = input.to_string();
            let middle = (0..=raw.len() / 2)
                .rev()
                .find(|&i| raw.is_char_boundary(i))
                .unwrap_or(0);
            let (head, tail) = raw.split_at(middle);
            let deltas = [head, tail]
                .iter()
                .map(|part| json!({"type": "input_json_delta", "partial_json": part}))
                .collect();
            let block = json!({
                "type": "tool_use",
                "id": format!("toolu_fake_{n}"),
                "name": "Bash",
                "input": input,
            });
            (block, deltas, "tool_use", false, false)
        }
    };
    let output_tokens = deltas.len() as u64;

    // The Messages API streams only when asked; the CLI's model check on `set_model` asks for a
    // plain JSON reply by leaving `stream` out.
    if request["stream"] != true {
        let message = json!({
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [content],
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        });
        return (
            [
                (header::CONTENT_TYPE, "application/json".to_string()),
                (
                    header::HeaderName::from_static("request-id"),
                    format!("req_fake_{n}"),
                ),
            ],
            message.to_string(),
        )
            .into_response();
    }

    let start_block = match content["type"].as_str() {
        Some("tool_use") => json!({
            "type": "tool_use",
            "id": content["id"],
            "name": content["name"],
            "input": {},
        }),
        _ => json!({"type": "text", "text": ""}),
    };
    let head = vec![
        json!({
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1},
            },
        }),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 0, "content_block": start_block}),
    ];
    let tail = vec![
        json!({"type": "content_block_stop", "index": 0}),
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens},
        }),
        json!({"type": "message_stop"}),
    ];

    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        if late {
            tokio::time::sleep(LATE_DELAY).await;
        }
        let deltas = deltas
            .into_iter()
            .map(|delta| json!({"type": "content_block_delta", "index": 0, "delta": delta}));
        for (i, event) in head.into_iter().chain(deltas).chain(tail).enumerate() {
            if slow && event["type"] == "content_block_delta" && i > 3 {
                tokio::time::sleep(SLOW_DELAY).await;
            }
            if tx.send(sse(&event)).await.is_err() {
                eprintln!("fake-anthropic: client went away during {message_id}");
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream".to_string()),
            (header::CACHE_CONTROL, "no-cache".to_string()),
            (
                header::HeaderName::from_static("request-id"),
                format!("req_fake_{n}"),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn ok() -> StatusCode {
    StatusCode::OK
}

async fn not_found(method: Method, uri: Uri) -> StatusCode {
    eprintln!("fake-anthropic: no route for {method} {uri}");
    StatusCode::NOT_FOUND
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let log = args.log.map(|path| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        Mutex::new(file)
    });
    let app = Arc::new(App {
        log,
        counter: AtomicU64::new(0),
    });
    let router = Router::new()
        .route("/", any(ok))
        .route("/api/hello", any(ok))
        .route("/v1/messages", post(messages).fallback(not_found))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(256 << 20))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:{}: {e}", args.port));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(args.port);
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "listening on http://127.0.0.1:{port}");
    let _ = stdout.flush();
    if let Err(e) = axum::serve(listener, router).await {
        eprintln!("fake-anthropic: server error: {e}");
        std::process::exit(1);
    }
}
