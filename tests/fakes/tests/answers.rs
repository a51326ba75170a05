//! The fakes start and answer as the tests rely on: the model API streams an echo, the CLI
//! answers `initialize` (this also makes `cargo test` build both executables).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn the_model_api_streams_an_echo() {
    let mut api = Command::new(env!("CARGO_BIN_EXE_fake-anthropic"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(api.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap()
        .to_owned();
    let body = r#"{"model":"m","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hello there"}]}"#;
    let mut conn = TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /v1/messages HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    api.kill().unwrap();
    let _ = api.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    for word in ["message_start", "\"Echo:", "hello", "there", "message_stop"] {
        assert!(answer.contains(word), "{word} in {answer}");
    }
}

#[test]
fn the_cli_answers_initialize() {
    let mut cli = Command::new(env!("CARGO_BIN_EXE_fake-claude"))
        .args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = cli.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"type":"control_request","request_id":"init-1","request":{{"subtype":"initialize"}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(cli.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let _ = cli.wait();
    let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["type"], "control_response", "{line}");
    assert_eq!(answer["response"]["request_id"], "init-1", "{line}");
}
