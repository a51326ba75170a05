//! The TLS recipe of `deploy/agentmux.nginx.conf`, run as shipped: nginx from the
//! distribution, as this user in a directory of its own, terminates TLS with a self-signed
//! certificate in front of agentmux, which is set up as the recipe says (its public name
//! allowed, the proxy trusted for the client's address). A turn goes through it over a
//! WebSocket and one over Server-Sent Events, each seen streaming while it is held at a gate
//! (nothing buffered on the way), and the checks of Host and Origin hold for the public name.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures_util::{SinkExt as _, StreamExt as _};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::common::*;

/// The public name the test gives the server.
const NAME: &str = "agentmux.test";
/// A token of the principal the test acts as.
const TOKEN: &str = "tok-tls-0123456789abcdef0123456789abcdef";
/// Where the test's requests come from: another loopback address than the proxy's, so that
/// the log can tell them apart.
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A free port on loopback (free when this returns).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `program` with `args` in `dir`; panics with its output when it fails.
fn run(program: &str, args: &[&str], dir: &Path) {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shipped site file with `replacements` made, each of which must find its text.
fn site(replacements: &[(&str, &str)]) -> String {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/agentmux.nginx.conf");
    let mut site = std::fs::read_to_string(shipped).unwrap();
    for (from, to) in replacements {
        assert!(site.contains(from), "the recipe has `{from}`");
        site = site.replace(from, to);
    }
    site
}

/// nginx running the recipe, on its own ports, and its certificate.
struct Proxy {
    _child: tokio::process::Child,
    https: SocketAddr,
    http: SocketAddr,
    cert: CertificateDer<'static>,
}

impl Proxy {
    /// Starts nginx (`AGENTMUX_TEST_NGINX_BIN`) in `dir` in front of agentmux at `upstream`.
    async fn start(dir: &Path, upstream: &str) -> Proxy {
        let nginx = std::env::var("AGENTMUX_TEST_NGINX_BIN")
            .expect("AGENTMUX_TEST_NGINX_BIN is set (scripts/test.sh installs nginx)");
        run(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
                "-days",
                "2",
                "-subj",
                &format!("/CN={NAME}"),
                "-addext",
                &format!("subjectAltName=DNS:{NAME}"),
                "-addext",
                "basicConstraints=critical,CA:FALSE",
            ],
            dir,
        );
        let https: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()).into();
        let http: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()).into();
        let shown = |path: PathBuf| path.to_str().unwrap().to_owned();
        std::fs::write(
            dir.join("site.conf"),
            site(&[
                (
                    "/etc/letsencrypt/live/agents.example.com/fullchain.pem",
                    &shown(dir.join("cert.pem")),
                ),
                (
                    "/etc/letsencrypt/live/agents.example.com/privkey.pem",
                    &shown(dir.join("key.pem")),
                ),
                ("agents.example.com", NAME),
                ("listen 443 ssl;", &format!("listen {https} ssl;")),
                ("listen 80;", &format!("listen {http};")),
                ("server 127.0.0.1:7878;", &format!("server {upstream};")),
            ]),
        )
        .unwrap();
        let d = dir.display();
        std::fs::write(
            dir.join("nginx.conf"),
            format!(
                "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log stderr warn;\n\
                 events {{ worker_connections 64; }}\n\
                 http {{\n  access_log off;\n  client_body_temp_path {d}/client_body;\n  \
                 proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
                 uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/site.conf;\n}}\n"
            ),
        )
        .unwrap();
        let mut child = tokio::process::Command::new(&nginx)
            .args(["-e", "stderr", "-p"])
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start nginx");
        let deadline = tokio::time::Instant::now() + WAIT;
        while TcpStream::connect(https).await.is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let mut said = String::new();
                use tokio::io::AsyncReadExt as _;
                let _ = child.stderr.take().unwrap().read_to_string(&mut said).await;
                panic!("nginx ended ({status}): {said}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "nginx did not listen"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let cert = CertificateDer::from_pem_file(dir.join("cert.pem")).unwrap();
        Proxy {
            _child: child,
            https,
            http,
            cert,
        }
    }

    /// The public name with the port, as a browser sends it in `Host`.
    fn host(&self) -> String {
        format!("{NAME}:{}", self.https.port())
    }

    /// The origin of the web UI served through the proxy.
    fn origin(&self) -> String {
        format!("https://{}", self.host())
    }

    /// A TLS connection to the proxy from [`CLIENT`], checked against its certificate for
    /// the public name.
    async fn tls(&self) -> TlsStream<TcpStream> {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((CLIENT, 0).into()).unwrap();
        let tcp = socket.connect(self.https).await.unwrap();
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        roots.add(self.cert.clone()).unwrap();
        let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from(NAME).unwrap(), tcp)
            .await
            .expect("a TLS connection to the public name")
    }

    /// `request` over HTTPS (its `Host` the public name unless it sets one).
    async fn send(
        &self,
        mut request: Request<Body>,
    ) -> (StatusCode, axum::http::HeaderMap, Incoming) {
        if !request.headers().contains_key(header::HOST) {
            request
                .headers_mut()
                .insert(header::HOST, self.host().parse().unwrap());
        }
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(self.tls().await))
                .await
                .unwrap();
        tokio::spawn(connection);
        let response = sender.send_request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        (parts.status, parts.headers, body)
    }
}

/// The next chunk of `body`'s data, as text; None at its end.
async fn next_text(body: &mut Incoming) -> Option<String> {
    loop {
        let frame = tokio::time::timeout(
            WAIT,
            std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)),
        )
        .await
        .expect("data in time")?
        .unwrap();
        if let Ok(data) = frame.into_data() {
            return Some(String::from_utf8(data.to_vec()).unwrap());
        }
    }
}

/// A whole body, as text.
async fn text(mut body: Incoming) -> String {
    let mut all = String::new();
    while let Some(chunk) = next_text(&mut body).await {
        all.push_str(&chunk);
    }
    all
}

/// The frames of an event stream, as they arrive.
struct Events {
    body: Incoming,
    pending: String,
}

impl Events {
    /// Frames until (and including) the first that matches `pred`, which must come within
    /// [`WAIT`] (keep-alive comments trickling through a buffering proxy don't count).
    async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut got = Vec::new();
        loop {
            while let Some(end) = self.pending.find("\n\n") {
                let event: String = self.pending.drain(..end + 2).collect();
                for data in event.lines().filter_map(|l| l.strip_prefix("data:")) {
                    let frame: Value = serde_json::from_str(data.trim()).unwrap();
                    let done = pred(&frame);
                    got.push(frame);
                    if done {
                        return got;
                    }
                }
            }
            let chunk = tokio::time::timeout_at(deadline, next_text(&mut self.body))
                .await
                .expect("the frame in time")
                .expect("the stream goes on");
            self.pending.push_str(&chunk);
        }
    }
}

/// The agentmux server of the recipe, its log collected as it is written.
struct Upstream {
    _child: tokio::process::Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Upstream {
    async fn start(gates: &Gates) -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--demo-delay-ms",
                "0",
                "--config",
            ])
            .arg(&gates.config)
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("AGENTMUX_CONFIG")
            .env_remove("AGENTMUX_STORE_URL")
            .env("AGENTMUX_TOKENS", format!("{TOKEN}=alice"))
            .env("RUST_LOG", "agentmux=info,tower_http=debug")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("agentmux starts")
            .unwrap()
            .expect("it prints its address");
        let addr = line
            .strip_prefix("listening on http://")
            .expect(&line)
            .to_owned();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        Upstream {
            _child: child,
            addr,
            log,
            _dir: dir,
        }
    }

    /// Waits until a log line of a request to `route` names `client`.
    async fn logged(&self, route: &str, client: &str) {
        let needle = format!("route=\"{route}\" client={client}");
        eventually(&format!("a request line with {needle}"), || async {
            self.log
                .lock()
                .unwrap()
                .iter()
                .any(|line| line.contains(&needle))
                .then_some(())
        })
        .await;
    }
}

/// A turn over a WebSocket and one over Server-Sent Events through nginx terminating TLS,
/// each seen streaming while held at a gate; the public name and its origin are served, any
/// other name or origin refused; plain HTTP only redirects; and agentmux logs the client's
/// own address, taken from the proxy only.
#[tokio::test]
#[cfg_attr(
    no_test_nginx,
    ignore = "needs nginx and openssl (AGENTMUX_TEST_NGINX_BIN), not configured here"
)]
#[cfg_attr(
    test_store_postgres,
    ignore = "the proxy works the same on either store; run in the SQLite pass"
)]
async fn a_turn_goes_through_nginx_terminating_tls() {
    let gates = Gates::new(&format!(
        "[server]\nallowed_hosts = [\"{NAME}\"]\ntrusted_proxies = [\"127.0.0.1\"]\n"
    ));
    let upstream = Upstream::start(&gates).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(dir.path(), &upstream.addr).await;
    let bearer = format!("Bearer {TOKEN}");

    // A WebSocket from the web UI's origin, with a token (a browser would use a ticket).
    let mut request = format!("wss://{}/ws", proxy.host())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", bearer.parse().unwrap());
    request
        .headers_mut()
        .insert("origin", proxy.origin().parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(request, proxy.tls().await)
        .await
        .expect("the upgrade goes through");
    let chat = json!({"type": "chat", "agent_id": "over-ws", "content": "through TLS"});
    ws.send(Message::text(chat.to_string())).await.unwrap();
    let mut frames = Vec::new();
    let mut next = async || loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .unwrap();
        if let Message::Text(text) = msg {
            return serde_json::from_str::<Value>(text.as_str()).unwrap();
        }
    };
    while !frames
        .iter()
        .any(|f: &Value| f["message_type"] == "stream_event")
    {
        frames.push(next().await);
    }
    gates.open("over-ws", 1);
    loop {
        let frame = next().await;
        let done = frame["message_type"] == "result";
        frames.push(frame);
        if done {
            break;
        }
    }
    assert_eq!(reply_text(&frames), "Echo: through TLS (turn 1)");

    // Turns over REST, followed as an event stream: the first makes the conversation, the
    // second is seen streaming while it is held.
    let post = async |content: &str| {
        let (status, _, _) = proxy
            .send(
                Request::post("/api/sessions/over-sse/messages")
                    .header(header::AUTHORIZATION, &bearer)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(json!({"content": content}).to_string()))
                    .unwrap(),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
    };
    gates.open("over-sse", 1);
    post("first").await;
    let (status, headers, body) = proxy
        .send(
            Request::get("/api/sessions/over-sse/events")
                .header(header::AUTHORIZATION, &bearer)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    let mut events = Events {
        body,
        pending: String::new(),
    };
    events.until(|f| f["message_type"] == "result").await;
    post("streamed").await;
    events.until(|f| f["message_type"] == "stream_event").await;
    gates.open("over-sse", 2);
    let rest = events.until(|f| f["message_type"] == "result").await;
    assert_eq!(reply_text(&rest), "Echo: streamed (turn 2)");

    // The public name serves REST; another name or another site's origin is refused.
    let get = |host: Option<String>, origin: Option<&str>| {
        let mut request = Request::get("/api/sessions").header(header::AUTHORIZATION, &bearer);
        if let Some(host) = host {
            request = request.header(header::HOST, host);
        }
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        request.body(Body::empty()).unwrap()
    };
    let (status, _, body) = proxy.send(get(None, Some(&proxy.origin()))).await;
    assert_eq!(status, StatusCode::OK);
    let listed: Value = serde_json::from_str(&text(body).await).unwrap();
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    let other = format!("other.example:{}", proxy.https.port());
    let (status, _, _) = proxy.send(get(Some(other), None)).await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    let (status, _, _) = proxy.send(get(None, Some("https://evil.example"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Plain HTTP answers only with the way to HTTPS.
    let mut plain = TcpStream::connect(proxy.http).await.unwrap();
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    plain
        .write_all(
            format!("GET /api/sessions HTTP/1.1\r\nHost: {NAME}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    plain.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 301"), "{answer}");
    assert!(
        answer.contains(&format!("Location: https://{NAME}/api/sessions")),
        "{answer}"
    );

    // agentmux saw the client's own address, from the proxy; the same claim made directly
    // by another client is not believed.
    upstream.logged("/api/sessions", &CLIENT.to_string()).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 3], 0).into()).unwrap();
    let mut direct = socket
        .connect(upstream.addr.parse().unwrap())
        .await
        .unwrap();
    direct
        .write_all(
            format!(
                "GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Forwarded-For: 203.0.113.66\r\n\
                 Connection: close\r\n\r\n",
                upstream.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    direct.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    upstream.logged("/healthz", "127.0.0.3").await;
    assert!(
        !upstream
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("client=203.0.113.66")),
        "a forged address is not logged"
    );
}
