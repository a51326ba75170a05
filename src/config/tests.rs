//! Unit tests of settings.

use super::*;

#[test]
fn store_passwords_are_redacted() {
    let url = "postgres://app:s3cr%2Ft@db.example:5432/agentmux?sslmode=require";
    assert_eq!(
        redact_url(url),
        "postgres://app:***@db.example:5432/agentmux?sslmode=require"
    );
    assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
    assert_eq!(redact_url("-e"), "-e");
    assert_eq!(redact_url("postgres:/app:s3cret@db/x"), "***");
}

#[test]
fn the_shipped_default_file_matches_the_compiled_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
    let file = Config::from_file(&path).unwrap();
    assert_eq!(format!("{file:?}"), format!("{:?}", Config::default()));
}

/// `agent.max_live_processes` caps every agent process; the older
/// `claude.max_live_processes` counts when it is not set; 0 means 1.
#[test]
fn the_process_cap_takes_the_new_key_then_the_old_one() {
    let cap = |text: &str| toml::from_str::<Config>(text).unwrap().max_live_processes();
    assert_eq!(cap(""), DEFAULT_MAX_LIVE_PROCESSES);
    assert_eq!(cap("[claude]\nmax_live_processes = 3\n"), 3);
    assert_eq!(cap("[agent]\nmax_live_processes = 5\n"), 5);
    assert_eq!(
        cap("[agent]\nmax_live_processes = 5\n[claude]\nmax_live_processes = 3\n"),
        5
    );
    assert_eq!(cap("[agent]\nmax_live_processes = 0\n"), 1);
    assert!(toml::from_str::<Config>("[agent]\nmax_live_processes = -1\n").is_err());
}

#[test]
fn durations_are_numbers_or_written_out() {
    let config: Config = toml::from_str(
        "[socket]\nidle_timeout_secs = \"2m\"\nhandshake_timeout_secs = 7\n\
         [session]\nidle_evict_secs = \"1h 30m\"\nrespawn_backoff_ms = \"1s 500ms\"\n\
         [demo]\ndelay_ms = 15\n",
    )
    .unwrap();
    assert_eq!(config.socket.idle_timeout_secs, 120);
    assert_eq!(config.socket.handshake_timeout_secs, 7);
    assert_eq!(config.session.idle_evict_secs, 5400);
    assert_eq!(config.session.respawn_backoff_ms, 1500);
    assert_eq!(config.demo.delay_ms, 15);
    for (line, says) in [
        (
            "idle_timeout_secs = \"1500ms\"",
            "not a whole number of seconds",
        ),
        ("idle_timeout_secs = \"soon\"", "\"soon\" is not a duration"),
        ("idle_timeout_secs = \"-5s\"", "is not a duration"),
        (
            "idle_timeout_secs = -1",
            "expected a number of seconds or a duration",
        ),
        (
            "idle_timeout_secs = 1.5",
            "expected a number of seconds or a duration",
        ),
    ] {
        let err = toml::from_str::<Config>(&format!("[socket]\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(says) && err.contains("idle_timeout_secs"),
            "{line}: {err}"
        );
    }
}

#[test]
fn a_node_is_named_plainly_and_leases_last_a_while() {
    let bind = SocketAddr::from(([127, 0, 0, 1], 9000));
    let named = |id: &str| {
        ClusterConfig {
            node_id: id.into(),
            ..ClusterConfig::default()
        }
        .node_name(bind)
    };
    assert_eq!(named("node-1.eu:9000").unwrap(), "node-1.eu:9000");
    let default = named("").unwrap();
    assert!(default.ends_with(":9000"), "{default}");
    for bad in ["-rf", "a b", "a/b", "x\0", &"n".repeat(129)] {
        assert!(named(bad).is_err(), "{bad:?}");
    }
    let no_lease = ClusterConfig {
        lease_secs: 0,
        ..ClusterConfig::default()
    };
    assert!(no_lease.node_name(bind).is_err());
}

/// A schedule's principal is gone when no credential could sign in as it any more: a
/// token principal once its token is removed (JWTs accepted or not, unless the JWT prefix
/// is empty), a JWT principal once JWTs are not accepted.
#[test]
fn a_principal_exists_while_a_credential_could_sign_in_as_it() {
    let auth = |tokens: &[(&str, &str)], jwt: bool, prefix: &str| AuthConfig {
        tokens: tokens
            .iter()
            .map(|(t, p)| ((*t).to_owned(), (*p).to_owned()))
            .collect(),
        jwt_hs256_secret: jwt.then(|| "a secret".to_owned()),
        jwt_principal_prefix: prefix.to_owned(),
        ..AuthConfig::default()
    };
    let open = auth(&[], false, "jwt:");
    assert!(open.principal_exists(LOCAL_PRINCIPAL));
    assert!(!open.principal_exists("alice"));

    let tokens = auth(&[("tok-alice", "alice")], false, "jwt:");
    assert!(tokens.principal_exists("alice"));
    assert!(!tokens.principal_exists("bob"));
    assert!(!tokens.principal_exists("jwt:bob"), "no JWTs accepted");
    assert!(!tokens.principal_exists(LOCAL_PRINCIPAL));

    let both = auth(&[("tok-alice", "alice")], true, "jwt:");
    assert!(both.principal_exists("alice"));
    assert!(both.principal_exists("jwt:bob"));
    assert!(!both.principal_exists("bob"), "a removed token's principal");
    assert!(
        !both.principal_exists("jwt:"),
        "no JWT has an empty subject"
    );
    let long = format!(
        "jwt:{}",
        "b".repeat(crate::protocol::MAX_PRINCIPAL_BYTES + 1)
    );
    assert!(!both.principal_exists(&long), "nor one that long");

    // With no prefix a JWT's subject is the principal: any principal may sign in so.
    let shared = auth(&[("tok-alice", "alice")], true, "");
    assert!(shared.principal_exists("alice"));
    assert!(shared.principal_exists("bob"));
    assert!(shared.principal_exists("jwt:bob"));
    assert!(!shared.principal_exists(""));
}

#[test]
fn token_lists_parse_and_errors_hide_tokens() {
    let mut auth = AuthConfig::default();
    auth.add_token_list(" tok1=alice, tok2 = bob ,").unwrap();
    assert_eq!(auth.tokens["tok1"], "alice");
    assert_eq!(auth.tokens["tok2"], "bob");
    assert!(auth.is_configured());
    let err = auth.add_token_list("ok=carol,secret-token").unwrap_err();
    assert!(err.to_string().contains("entry 2"));
    assert!(!err.to_string().contains("secret-token"));
    assert!(!format!("{auth:?}").contains("tok1"));
}

#[test]
fn project_roots_are_canonical_merged_and_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    let mut projects = ProjectsConfig {
        roots: vec![ProjectRoot {
            principals: vec!["alice".into()],
            ..ProjectRoot::open(dir.path().join("link"))
        }],
    };
    projects.add_root_list(&format!("{}::", real.display()));
    projects.canonicalize().unwrap();
    let canonical = std::fs::canonicalize(&real).unwrap();
    assert_eq!(projects.roots, [ProjectRoot::open(canonical)]);
    assert!(projects.roots[0].allows("bob"), "the open entry wins");

    let mut missing = ProjectsConfig::default();
    missing.add_root_list(&dir.path().join("nope").to_string_lossy());
    let err = missing.canonicalize().unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
    let mut file = ProjectsConfig::default();
    std::fs::write(dir.path().join("f"), b"").unwrap();
    file.add_root_list(&dir.path().join("f").to_string_lossy());
    assert!(file.canonicalize().is_err(), "a file is not a root");
}

#[test]
fn base64_padded_tokens_keep_their_padding() {
    let mut auth = AuthConfig::default();
    auth.add_token_list("dG9rZW4tYQ===alice, YWJj=bob").unwrap();
    assert_eq!(auth.tokens["dG9rZW4tYQ=="], "alice");
    assert_eq!(auth.tokens["YWJj"], "bob");
    assert_eq!(auth.tokens.len(), 2);
    // A padded token with nothing after its padding names no principal.
    assert!(auth.add_token_list("YWJjZA==").is_err());
}
