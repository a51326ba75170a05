//! The REST API against a real server: listing, paging, rename, errors, chat over REST,
//! Server-Sent Events with `Last-Event-ID`, export and import, and the OpenAPI document.

use serde_json::{Value, json};

use crate::common::*;

/// A small JSON client of the REST API.
pub struct Rest {
    pub http: reqwest::Client,
    pub base: String,
}

impl Rest {
    pub fn new(server: &TestServer) -> Self {
        Rest {
            http: reqwest::Client::new(),
            base: server.url(""),
        }
    }

    /// A client that sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(server: &TestServer, token: &str) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        Rest {
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .unwrap(),
            base: server.url(""),
        }
    }

    /// `(status, body as JSON or Null)`.
    pub async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.http.patch(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn delete(&self, path: &str) -> u16 {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
            .0
    }

    pub async fn text(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Runs one turn over a socket and returns its frames (ack first).
pub async fn turn(c: &mut Client, agent_id: &str, content: &str) -> Vec<Value> {
    c.chat(agent_id, content).await;
    c.until_result(agent_id).await
}

/// The list is newest activity first with totals, `q` filters titles, paging works, one
/// conversation and its messages read back exactly as the socket sent them, rename sticks,
/// and bad requests get typed errors.
#[tokio::test]
async fn rest_lists_reads_renames_and_answers_typed_errors() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let first = turn(&mut c, "r-one", "hello there").await;
    turn(&mut c, "r-two", "general kenobi").await;

    let (status, list) = rest.get("/api/sessions?total=true").await;
    assert_eq!(status, 200);
    assert_eq!(list["total"], 2);
    assert_eq!(list["next_before"], Value::Null);
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions[0]["agent_id"], "r-two");
    assert_eq!(sessions[1]["agent_id"], "r-one");
    let one = &sessions[1];
    assert_eq!(one["title"], "hello there");
    assert_eq!(one["message_count"], 4);
    assert_eq!(one["last_seq"], 4);
    assert_eq!(one["turn_count"], 1);
    assert_eq!(one["live"], true);
    assert_eq!(one["model"], Value::Null);
    // One demo turn: $0.0001, its words as tokens ("hello there" in, "Echo: hello there
    // (turn 1)" out), and the duration its result reported.
    assert_eq!(one["total_cost_usd"], 0.0001);
    assert_eq!(
        (one["input_tokens"].as_i64(), one["output_tokens"].as_i64()),
        (Some(2), Some(5))
    );
    assert_eq!(
        one["duration_ms"],
        first.last().unwrap()["message"]["duration_ms"]
    );
    for field in ["session_id", "status", "created_at", "last_active_at"] {
        assert!(one[field].is_string(), "{field} in {one}");
    }

    let (_, filtered) = rest.get("/api/sessions?q=HELLO&total=true").await;
    assert_eq!(filtered["total"], 1);
    assert_eq!(filtered["sessions"][0]["agent_id"], "r-one");
    let (_, paged) = rest.get("/api/sessions?limit=1&offset=1&total=true").await;
    assert_eq!(paged["total"], 2);
    assert_eq!(paged["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(paged["sessions"][0]["agent_id"], "r-one");
    // The next page from the cursor of the first; the count only when asked.
    let (_, page1) = rest.get("/api/sessions?limit=1").await;
    assert_eq!(
        (&page1["sessions"][0]["agent_id"], &page1["total"]),
        (&json!("r-two"), &Value::Null)
    );
    let before = page1["next_before"].as_str().unwrap();
    let (_, next) = rest
        .get(&format!("/api/sessions?limit=1&before={before}"))
        .await;
    assert_eq!(next["sessions"][0]["agent_id"], "r-one");
    assert_eq!(next["next_before"], Value::Null);

    let (status, got) = rest.get("/api/sessions/r-one").await;
    assert_eq!(status, 200);
    assert_eq!(got["session_id"], one["session_id"]);

    let (status, page) = rest
        .get("/api/sessions/r-one/messages?after_seq=1&limit=2")
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["has_more"], true);
    let stored: Vec<&Value> = first
        .iter()
        .filter(|f| f["seq"].is_i64() && f["message_type"] != "ack")
        .collect();
    assert_eq!(
        page["messages"].as_array().unwrap(),
        &vec![stored[1].clone(), stored[2].clone()]
    );
    let (_, rest_of) = rest.get("/api/sessions/r-one/messages?after_seq=3").await;
    assert_eq!(rest_of["has_more"], false);
    assert_eq!(rest_of["messages"][0]["message_type"], "result");

    let (status, renamed) = rest
        .patch("/api/sessions/r-one", json!({"title": "  Greetings  "}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(renamed["title"], "Greetings");
    let (_, list) = rest.get("/api/sessions?q=greet").await;
    assert_eq!(list["sessions"][0]["agent_id"], "r-one");

    let (status, err) = rest.get("/api/sessions/nobody").await;
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown_agent")));
    assert!(err["error"].is_string());
    let (status, err) = rest.get("/api/sessions?limit=lots").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, err) = rest.get("/api/sessions?limit=0").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, err) = rest.get("/api/sessions/bad%20id").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_agent_id"))
    );
    let (status, err) = rest
        .patch("/api/sessions/r-one", json!({"title": " "}))
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, err) = rest
        .patch("/api/sessions/nobody", json!({"title": "x"}))
        .await;
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown_agent")));
    assert_eq!(rest.delete("/api/sessions/nobody").await, 404);
}

/// `q` finds a conversation by the words of its messages (the agent's reply too) and of its
/// title, each word of `q` as the start of a word, never JSON keys, ids or wildcards; a hostile
/// `q` (too long, SQL, either engine's query syntax) is refused or taken literally, and so are
/// bad paging values.
#[tokio::test]
async fn search_finds_message_text_and_takes_hostile_queries_literally() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    turn(&mut c, "s-one", "alpha bravo").await;
    turn(&mut c, "s-two", "charlie delta").await;
    let (status, _) = rest
        .patch("/api/sessions/s-one", json!({"title": "Renamed"}))
        .await;
    assert_eq!(status, 200);
    let ids = |list: &Value| -> Vec<String> {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["agent_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let search = |q: String| {
        let rest = &rest;
        async move {
            let (status, found) = rest.get(&format!("/api/sessions?q={q}&total=true")).await;
            assert_eq!(status, 200, "q={q}: {found}");
            assert_eq!(
                found["total"],
                found["sessions"].as_array().unwrap().len(),
                "q={q}"
            );
            found
        }
    };
    // The user's words, and the demo's reply, which only the assistant message holds.
    assert_eq!(ids(&search("BRAVO".into()).await), ["s-one"]);
    assert_eq!(ids(&search("echo%3A%20charlie".into()).await), ["s-two"]);
    assert_eq!(ids(&search("echo".into()).await), ["s-two", "s-one"]);
    assert_eq!(ids(&search("ech%20tur".into()).await), ["s-two", "s-one"]);
    assert_eq!(ids(&search("renamed".into()).await), ["s-one"]);
    assert!(
        ids(&search("lpha".into()).await).is_empty(),
        "words start where they start"
    );
    // Keys, roles, types and ids of the stored JSON are not text; what is no word finds nothing.
    for q in [
        "role",
        "assistant",
        "content",
        "message_start",
        "%",
        "_",
        "%25",
        "%22",
        "*",
        "-",
        "%28%29",
    ] {
        assert!(ids(&search(q.into()).await).is_empty(), "q={q}");
    }
    // Either engine's query syntax is words or nothing: `"alpha" OR (bravo*) NEAR -x`.
    assert!(ids(&search("%22alpha%22%20OR%20(bravo*)%20NEAR%20-x".into()).await).is_empty());
    assert_eq!(
        ids(&search("%22alpha%22%20(bravo*)%20-".into()).await),
        ["s-one"]
    );
    assert!(ids(&search("%27)%20or%201%3D1%20--".into()).await).is_empty());
    assert!(ids(&search("%E2%9C%93%F0%9F%98%80".into()).await).is_empty());
    // At most 200 characters (not bytes); an empty `q` lists everything.
    let (status, _) = rest
        .get(&format!("/api/sessions?q={}", "é".repeat(200)))
        .await;
    assert_eq!(status, 200);
    let (_, all) = rest.get("/api/sessions?q=&total=true").await;
    assert_eq!(all["total"], 2);
    for bad in [
        format!("q={}", "a".repeat(201)),
        format!("q={}", "%25".repeat(10_000)),
        format!("q={}", "a%20".repeat(2_500)),
        "before=not-a-cursor".into(),
        "before=".into(),
        format!("before={}", "A".repeat(10_000)),
        "offset=1&before=x".into(),
        "total=maybe".into(),
        "limit=501".into(),
        "offset=-1".into(),
    ] {
        let (status, err) = rest.get(&format!("/api/sessions?{bad}")).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some("invalid_request")),
            "{bad}"
        );
    }
}

/// The OpenAPI document is served and covers the handlers and their types.
#[tokio::test]
async fn openapi_document_describes_the_api() {
    let server = TestServer::start().await;
    let (status, doc) = Rest::new(&server).get("/api/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/api/sessions",
        "/api/sessions/{agent_id}",
        "/api/sessions/{agent_id}/messages",
        "/api/sessions/{agent_id}/export",
        "/api/sessions/import",
        "/api/sessions/{agent_id}/rewind",
        "/api/sessions/{agent_id}/fork",
        "/api/sessions/{agent_id}/events",
    ] {
        assert!(paths.contains_key(path), "{path} missing");
    }
    for method in ["get", "patch", "delete"] {
        assert!(paths["/api/sessions/{agent_id}"][method].is_object());
    }
    let schemas = &doc["components"]["schemas"];
    let summary = schemas["SessionSummary"]["properties"].as_object().unwrap();
    for field in [
        "agent_id",
        "session_id",
        "title",
        "live",
        "message_count",
        "last_seq",
        "total_cost_usd",
    ] {
        assert!(summary.contains_key(field), "SessionSummary.{field}");
    }
    let codes = schemas["ErrorCode"]["enum"].as_array().unwrap();
    assert!(codes.contains(&json!("unknown_agent")));
    assert!(codes.contains(&json!("invalid_seq")));
    let ticket = &paths["/api/ws-ticket"]["post"]["responses"]["200"];
    assert!(ticket.is_object(), "{ticket}");
    let fields = schemas["Ticket"]["properties"].as_object().unwrap();
    assert!(fields.contains_key("ticket") && fields.contains_key("expires_in"));
    // The bodies are the types the handlers read.
    let chat = &paths["/api/sessions/{agent_id}/messages"]["post"]["requestBody"];
    assert_eq!(
        chat["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ChatBody"
    );
    assert_eq!(schemas["ChatBody"]["required"], json!(["content"]));

    // Every operation has its own id; a query's fields are query parameters.
    let mut ids = std::collections::BTreeSet::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"].as_str().unwrap();
            assert!(
                ids.insert(id),
                "operationId {id} repeated at {method} {path}"
            );
        }
    }
    let list = &paths["/api/sessions"]["get"]["parameters"];
    for parameter in list.as_array().unwrap() {
        assert_eq!(parameter["in"], "query", "{parameter}");
        assert_ne!(parameter["required"], true, "{parameter}");
    }

    // Every route but the document itself and a notification's actions (whose token is the
    // credential) needs the bearer credential.
    let bearer = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (&bearer["type"], &bearer["scheme"]),
        (&json!("http"), &json!("bearer"))
    );
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let expected = match path.as_str() {
                "/api/openapi.json" | "/api/push/actions" => Value::Null,
                _ => json!([{"bearer": []}]),
            };
            assert_eq!(operation["security"], expected, "{method} {path}");
        }
    }
}

/// Every operation of the served document is answered by its handler (not with the router's
/// bare 404 or 405), and at each of its paths the router serves exactly the methods the
/// document lists there: the `Allow` of its 405 to another method names them. Routes and
/// document are registered together, so nothing else under `/api/` is served.
#[tokio::test]
async fn openapi_lists_every_api_route_the_router_serves() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let (_, doc) = rest.get("/api/openapi.json").await;
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() > 15, "{paths:?}");
    let methods = ["get", "post", "put", "patch", "delete"];
    for (path, item) in paths {
        let url = server.url(&probe_path(path));
        let documented: std::collections::BTreeSet<&str> = methods
            .into_iter()
            .filter(|method| item.get(*method).is_some())
            .collect();
        for method in &documented {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let resp = rest
                .http
                .request(method.clone(), &url)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            // Only a 404 is read: a served event stream never ends.
            let body: Value = match status {
                404 => serde_json::from_str(&resp.text().await.unwrap()).unwrap_or_default(),
                _ => Value::Null,
            };
            assert!(
                status != 405
                    && (status != 404
                        || body["code"] == "unknown_agent"
                        || body["code"] == "unknown_schedule"
                        || body["code"] == "unknown_subscription"),
                "{method} {path} is documented but not served: {status} {body}"
            );
        }
        let other = methods
            .into_iter()
            .find(|method| !documented.contains(method))
            .unwrap();
        let other = reqwest::Method::from_bytes(other.to_uppercase().as_bytes()).unwrap();
        let resp = rest.http.request(other.clone(), &url).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 405, "{other} {path}");
        let allow = resp.headers()["allow"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        let served: std::collections::BTreeSet<&str> = allow
            .split(',')
            .map(str::trim)
            .filter(|method| *method != "head")
            .collect();
        assert_eq!(served, documented, "methods served at {path}");
    }
}

/// A path of the document with each `{parameter}` filled in.
fn probe_path(path: &str) -> String {
    let mut probe = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}').unwrap();
        probe.push_str(&rest[..open]);
        probe.push_str("probe");
        rest = &rest[close + 1..];
    }
    probe + rest
}

/// A real OpenAPI validator (`openapi-spec-validator`, which `scripts/test.sh` installs)
/// accepts the served document: its schema and its rules (unique operation ids, a parameter
/// for every `{parameter}` of a path, ...), as client generators need them.
#[tokio::test]
#[cfg_attr(
    no_test_openapi_validator,
    ignore = "needs openapi-spec-validator (AGENTMUX_TEST_OPENAPI_VALIDATOR), not configured here"
)]
async fn a_validator_accepts_the_openapi_document() {
    let validator = std::env::var("AGENTMUX_TEST_OPENAPI_VALIDATOR").expect(
        "AGENTMUX_TEST_OPENAPI_VALIDATOR is set (scripts/test.sh installs openapi-spec-validator)",
    );
    let server = TestServer::start().await;
    let resp = reqwest::get(server.url("/api/openapi.json")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, resp.bytes().await.unwrap()).unwrap();
    let out = tokio::process::Command::new(&validator)
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the validator refused the document:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads Server-Sent Events from a response until `stop` holds for an event's data.
pub async fn sse_until(
    resp: &mut reqwest::Response,
    stop: impl Fn(&Value) -> bool,
) -> Vec<(Option<i64>, Value)> {
    let mut events = Vec::new();
    let mut buf = String::new();
    loop {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("an event in time")
            .unwrap()
            .expect("stream open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(v).unwrap());
                }
            }
            if let Some(data) = data {
                let done = stop(&data);
                events.push((id, data));
                if done {
                    return events;
                }
            }
        }
    }
}

/// A conversation of large frames, with `session.page_bytes` far below its size, is read
/// whole and in order over `GET .../messages` pages, a socket's replay and an event stream's:
/// each REST page holds fewer messages than its `limit`, no more bytes than the cap (a frame
/// larger than the cap comes alone), and `has_more` and `after_seq` continue where it stopped.
#[tokio::test]
async fn large_frames_are_paged_by_bytes_on_every_path() {
    const CAP: usize = 100_000;
    let (server, _cfg) =
        crate::security::server_with(&format!("[session]\npage_bytes = {CAP}\n")).await;
    let big = 13;
    let body: String = (1..=25)
        .map(|seq| {
            let size = if seq == big { 250_000 } else { 40_000 };
            let (kind, role) = if seq % 2 == 1 {
                ("user", "user")
            } else {
                ("assistant", "assistant")
            };
            let content = format!("{seq}:{}", "x".repeat(size));
            json!({"seq": seq, "message_type": kind,
                "payload": {"type": kind, "message": {"role": role, "content": content}}})
            .to_string()
                + "\n"
        })
        .collect();
    let (status, imported) = crate::imports::import(&server, "none", "big", body).await;
    assert!((200..300).contains(&status), "{status} {imported}");
    let rest = Rest::new(&server);
    let (_, summary) = rest.get("/api/sessions/big").await;
    let stored = summary["message_count"].as_u64().unwrap() as usize;
    // The 25 imported rows and the import's own status line.
    assert_eq!(stored, 26, "{summary}");

    let mut paged: Vec<Value> = Vec::new();
    let mut pages = 0;
    let mut after = 0;
    loop {
        let (status, page) = rest
            .get(&format!(
                "/api/sessions/big/messages?limit=100&after_seq={after}"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        let messages = page["messages"].as_array().unwrap();
        assert!(
            !messages.is_empty() && messages.len() < 100,
            "{}",
            messages.len()
        );
        let bytes: usize = messages.iter().map(|m| m.to_string().len()).sum();
        // Each frame's header adds a few hundred bytes to its stored payload.
        assert!(
            messages.len() == 1 || bytes <= CAP + 512 * messages.len(),
            "a page of {} messages holds {bytes} bytes",
            messages.len()
        );
        if messages.iter().any(|m| {
            m["message"]["message"]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with(&format!("{big}:")))
        }) {
            assert_eq!(
                messages.len(),
                1,
                "the frame larger than the cap comes alone"
            );
        }
        pages += 1;
        paged.extend(messages.iter().cloned());
        after = paged.last().unwrap()["seq"].as_i64().unwrap();
        if page["has_more"] != true {
            break;
        }
    }
    assert_eq!(paged.len(), stored);
    // Two 40 KB rows fit under the cap, the 250 KB one comes alone: 6 + 1 + 6 pages.
    assert_eq!(pages, 13, "{pages} pages");
    let seqs: Vec<i64> = paged.iter().map(|m| m["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let last = *seqs.last().unwrap();

    let mut c = server.client().await;
    c.send(json!({"type": "subscribe", "agent_id": "big", "since_seq": 0}))
        .await;
    c.send(json!({"type": "ping", "ts": "replayed"})).await;
    let replayed: Vec<Value> = c
        .recv_until(|f| f["message_type"] == "pong")
        .await
        .into_iter()
        .filter(|f| f["seq"].is_i64())
        .collect();
    assert!(
        replayed == paged,
        "the socket's replay differs: seqs {:?}",
        replayed
            .iter()
            .map(|f| f["seq"].clone())
            .collect::<Vec<_>>()
    );

    let mut events = rest
        .http
        .get(server.url("/api/sessions/big/events"))
        .send()
        .await
        .unwrap();
    let streamed: Vec<Value> = sse_until(&mut events, |d| d["seq"] == last)
        .await
        .into_iter()
        .map(|(_, data)| data)
        .filter(|f| f["seq"].is_i64())
        .collect();
    assert!(
        streamed == paged,
        "the event stream's replay differs: seqs {:?}",
        streamed
            .iter()
            .map(|f| f["seq"].clone())
            .collect::<Vec<_>>()
    );
}

/// A chat over REST is validated and acked like a socket chat; its frames stream as events
/// with `id: <seq>`, and a reconnect with `Last-Event-ID` resumes right after that seq and
/// then follows live frames.
#[tokio::test]
async fn rest_chat_and_events_resume_from_last_event_id() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let (status, ack) = rest
        .post(
            "/api/sessions/e1/messages",
            json!({"content": "one two", "client_msg_id": "m1"}),
        )
        .await;
    assert_eq!(status, 202);
    assert_eq!(ack["message_type"], "ack");
    assert_eq!(ack["seq"], 1);
    assert_eq!(ack["client_msg_id"], "m1");
    for (body, code) in [
        (json!({"content": ""}), "invalid_content"),
        (
            json!({"content": "x", "options": {"model": "--evil"}}),
            "invalid_options",
        ),
        (
            json!({"content": "x", "options": {"cwd": "/"}}),
            "invalid_options",
        ),
        (json!([1]), "invalid_request"),
    ] {
        let (status, err) = rest.post("/api/sessions/e1/messages", body).await;
        assert_eq!((status, err["code"].as_str()), (400, Some(code)));
    }

    let url = server.url("/api/sessions/e1/events");
    let mut resp = rest.http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = sse_until(&mut resp, |d| d["message_type"] == "result").await;
    let ids: Vec<i64> = events.iter().filter_map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    for (id, data) in &events {
        assert_eq!(data["seq"].as_i64(), *id);
    }
    assert_eq!(
        events.last().unwrap().1["message"]["result"],
        "Echo: one two (turn 1)"
    );
    drop(resp);

    let mut resp = rest
        .http
        .get(&url)
        .header("Last-Event-ID", "2")
        .send()
        .await
        .unwrap();
    let replayed = sse_until(&mut resp, |d| d["seq"] == 4).await;
    let ids: Vec<i64> = replayed.iter().filter_map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![3, 4]);
    let (status, _) = rest
        .post("/api/sessions/e1/messages", json!({"content": "three"}))
        .await;
    assert_eq!(status, 202);
    let live = sse_until(&mut resp, |d| d["message_type"] == "result").await;
    let ids: Vec<i64> = live.iter().filter_map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![5, 6, 7, 8]);
    assert!(
        live.iter()
            .any(|(_, d)| d["message_type"] == "stream_event")
    );
    assert_eq!(
        live.last().unwrap().1["message"]["result"],
        "Echo: three (turn 2)"
    );

    drop(resp);

    // Without Last-Event-ID, `?since_seq=` is the starting point; Last-Event-ID wins over it.
    let mut resp = rest
        .http
        .get(format!("{url}?since_seq=5"))
        .send()
        .await
        .unwrap();
    let replayed = sse_until(&mut resp, |d| d["seq"] == 8).await;
    let ids: Vec<i64> = replayed.iter().filter_map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![6, 7, 8]);
    assert_eq!(
        replayed.iter().map(|(_, d)| d).collect::<Vec<_>>(),
        live.iter()
            .filter(|(id, _)| *id > Some(5))
            .map(|(_, d)| d)
            .collect::<Vec<_>>(),
        "replayed as sent live"
    );
    drop(resp);
    let mut resp = rest
        .http
        .get(format!("{url}?since_seq=1"))
        .header("Last-Event-ID", "7")
        .send()
        .await
        .unwrap();
    let replayed = sse_until(&mut resp, |d| d["seq"] == 8).await;
    let ids: Vec<i64> = replayed.iter().filter_map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![8]);
    drop(resp);

    let (status, err) = rest.get("/api/sessions/nobody/events").await;
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown_agent")));
    let bad = rest
        .http
        .get(&url)
        .header("Last-Event-ID", "soon")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

/// The names of the fields of each event in an SSE text (`data`, `id`, ...), and the JSON keys
/// of each event's data at its top level, in order; `…` stands for elided text.
fn sse_shape(text: &str) -> Vec<(Vec<String>, Vec<String>)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut fields = Vec::new();
            let mut keys = Vec::new();
            for line in block.lines() {
                let (field, value) = line.split_once(": ").unwrap();
                fields.push(field.to_owned());
                if field == "data" {
                    // Top-level keys: a `"name":` at nesting depth 1.
                    let mut depth = 0;
                    let mut in_string = false;
                    let mut current = String::new();
                    let mut chars = value.chars().peekable();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' if in_string => {
                                chars.next();
                            }
                            '"' if in_string => {
                                in_string = false;
                                if depth == 1 && chars.peek() == Some(&':') {
                                    keys.push(std::mem::take(&mut current));
                                }
                            }
                            '"' => {
                                in_string = true;
                                current.clear();
                            }
                            _ if in_string => current.push(c),
                            '{' | '[' => depth += 1,
                            '}' | ']' => depth -= 1,
                            _ => {}
                        }
                    }
                }
            }
            (fields, keys)
        })
        .collect()
}

/// The Server-Sent Events example of `docs/api.md` has the shape of a real stream: the same
/// fields in the same order per event, and the same JSON keys in the same order.
#[tokio::test]
async fn the_sse_example_in_the_docs_matches_a_real_stream() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md"),
    )
    .unwrap();
    let section = docs
        .split("### `GET /api/sessions/{agent_id}/events`")
        .nth(1)
        .unwrap();
    let example = section
        .split("```\n")
        .nth(1)
        .expect("the section has an example");
    let documented = sse_shape(example);
    assert_eq!(documented.len(), 2, "{example}");

    let server = TestServer::start_with(&["--demo-delay-ms", "20"]).await;
    let rest = Rest::new(&server);
    let (status, _) = rest
        .post(
            "/api/sessions/sse-doc/messages",
            json!({"content": "hello there"}),
        )
        .await;
    assert_eq!(status, 202);
    let mut resp = rest
        .http
        .get(server.url("/api/sessions/sse-doc/events"))
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while !text.contains("\"stream_event\"") || !text.ends_with("\n\n") {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("an event in time")
            .unwrap()
            .expect("stream open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let event = |message_type: &str| {
        let block = text
            .split("\n\n")
            .find(|b| b.contains(&format!("{{\"message_type\":\"{message_type}\"")))
            .unwrap_or_else(|| panic!("no {message_type} event in:\n{text}"));
        sse_shape(block).remove(0)
    };
    assert_eq!(documented[0], event("user"), "stored event:\n{text}");
    assert_eq!(
        documented[1],
        event("stream_event"),
        "stream event:\n{text}"
    );
}

/// (message_type, payload) of every line of an export.
fn content_of(export: &str) -> Vec<(String, Value)> {
    export
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["message_type"].as_str().unwrap().to_owned(),
                v["payload"].clone(),
            )
        })
        .collect()
}

/// An export imported as a new conversation holds the same messages in the same order (plus
/// a status saying its agent starts fresh); the imported agent indeed starts fresh.
#[tokio::test]
async fn export_then_import_round_trips_by_content() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    turn(&mut c, "x1", "first message").await;
    turn(&mut c, "x1", "second message").await;

    let export = rest.text("/api/sessions/x1/export").await;
    let lines: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8);
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[0]["role"], "user");
    assert_eq!(lines[0]["content"], "first message");
    let assistant = lines
        .iter()
        .find(|l| l["message_type"] == "assistant")
        .unwrap();
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "Echo: first message (turn 1)");

    let resp = rest
        .http
        .post(server.url("/api/sessions/import?agent_id=x2"))
        .header("content-type", "application/x-ndjson")
        .body(export.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let imported: Value = resp.json().await.unwrap();
    assert_eq!(imported["agent_id"], "x2");
    assert_eq!(imported["title"], "first message");
    assert_eq!(imported["message_count"], 9);
    assert_eq!(imported["turn_count"], 2);
    let (_, original) = rest.get("/api/sessions/x1").await;
    assert!(imported["session_id"].is_string(), "{imported}");
    assert_ne!(imported["session_id"], original["session_id"]);
    // Totals start at zero: the imported turns were not spent here.
    for total in [
        "total_cost_usd",
        "input_tokens",
        "output_tokens",
        "duration_ms",
    ] {
        assert_eq!(imported[total].as_f64(), Some(0.0), "{total}: {imported}");
    }

    let again = content_of(&rest.text("/api/sessions/x2/export").await);
    assert_eq!(again[..8], content_of(&export)[..]);
    assert_eq!(again[8].0, "status");
    assert_eq!(again[8].1["status"], "imported");

    let frames = turn(&mut c, "x2", "hello again").await;
    assert_eq!(reply_text(&frames), "Echo: hello again (turn 1)");

    let (status, err) = rest
        .send(
            rest.http
                .post(server.url("/api/sessions/import?agent_id=x2"))
                .header("content-type", "application/x-ndjson")
                .body(export),
        )
        .await;
    assert_eq!((status, err["code"].as_str()), (409, Some("agent_exists")));
    let (status, err) = rest
        .send(
            rest.http
                .post(server.url("/api/sessions/import?agent_id=x3"))
                .header("content-type", "application/x-ndjson")
                .body("{\"nope\": 1}\n"),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
}

/// An event stream that stops being read while the conversation goes on is told it `lagged`
/// and then gets every stored frame it missed, in order and without gaps, as on a socket.
#[tokio::test]
async fn a_stalled_event_stream_lags_and_catches_up() {
    let (_dir, cfg) = config_file("[socket]\nsession_buffer_frames = 16\n");
    let server = TestServer::start_with(&["--config", &cfg, "--demo-delay-ms", "0"]).await;
    let rest = Rest::new(&server);
    let mut driver = server.client().await;
    turn(&mut driver, "slow", "warm up").await;
    let mut resp = rest
        .http
        .get(server.url("/api/sessions/slow/events?since_seq=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    sse_until(&mut resp, |d| d["seq"] == 4).await;
    // Large turns (a delta per word) fill the stream's buffers while it reads nothing.
    let big = "data ".repeat(40_000);
    for _ in 0..4 {
        turn(&mut driver, "slow", &big).await;
    }
    let (_, info) = rest.get("/api/sessions/slow").await;
    let last_seq = info["last_seq"].as_i64().unwrap();
    let mut lagged = false;
    let mut got = Vec::new();
    let events = sse_until(&mut resp, |d| d["seq"] == last_seq).await;
    for (id, data) in &events {
        if data["message_type"] == "status" && data["status"] == "lagged" {
            lagged = true;
        }
        if let Some(id) = id {
            assert_eq!(data["seq"], *id);
            got.push(*id);
        }
    }
    assert!(lagged, "the stalled stream was told it lagged");
    assert_eq!(got, (5..=last_seq).collect::<Vec<_>>());
}
