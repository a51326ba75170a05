//! The `agentmux-chat` executable on its own: its help, and a clear failure when no server
//! listens. Conversations with a real server are tested in the server's integration tests
//! (`tests/it/cli_chat.rs`, and reviewing a worktree in `tests/it/cli_review.rs`), through
//! `agentmux chat`.

use std::process::Command;

#[test]
fn help_lists_the_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentmux-chat"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for option in [
        "--url",
        "--resume",
        "--last",
        "--cwd",
        "--token",
        "--worktree",
    ] {
        assert!(help.contains(option), "{help}");
    }
}

#[test]
fn no_server_is_a_clear_error() {
    // A port that was free a moment ago: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_agentmux-chat"))
        .args(["--url", &format!("ws://127.0.0.1:{port}/ws")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("cannot connect to ws://127.0.0.1:"), "{err}");
}

#[test]
fn a_cwd_that_is_not_a_directory_is_refused_before_connecting() {
    let dir = std::env::temp_dir();
    let file = dir.join(format!("agentmux-chat-{}.txt", std::process::id()));
    std::fs::write(&file, "x").unwrap();
    for cwd in [
        file.to_string_lossy().into_owned(),
        "/no/such/dir".to_owned(),
        "-rf".to_owned(),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_agentmux-chat"))
            .arg(format!("--cwd={cwd}"))
            .args(["--url", "ws://127.0.0.1:9/ws"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{cwd}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(&format!("cannot use --cwd {cwd}")), "{err}");
    }
    std::fs::remove_file(file).unwrap();
}
