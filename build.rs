//! Rebuilds the server when a migration is added (the migrations are embedded at compile time),
//! names the commit it is built from in its version (`agentmux --version`), and tells the
//! integration tests which services they need are not configured here, and which store their
//! servers run on.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    version();
    // A test that needs a service nobody configured shows as ignored, saying which, instead of
    // passing without running; under CI it runs, and fails for the missing service.
    let ci = std::env::var("CI").as_deref() == Ok("true");
    println!("cargo:rerun-if-env-changed=CI");
    for (var, cfg) in [
        ("AGENTMUX_TEST_PG_URL", "no_test_pg"),
        ("AGENTMUX_TEST_NATS_BIN", "no_test_nats"),
        ("AGENTMUX_TEST_CLAUDE_BIN", "no_test_claude"),
        ("AGENTMUX_TEST_ACP_ADAPTER", "no_test_acp"),
        (
            "AGENTMUX_TEST_OPENAPI_VALIDATOR",
            "no_test_openapi_validator",
        ),
        ("AGENTMUX_TEST_SYSTEMD_ANALYZE", "no_test_systemd_analyze"),
        ("AGENTMUX_TEST_NGINX_BIN", "no_test_nginx"),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo:rerun-if-env-changed={var}");
        if !ci && std::env::var_os(var).is_none_or(|v| v.is_empty()) {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
    // The pass with every test server on PostgreSQL: the tests about the SQLite file itself
    // show as ignored there, saying so, instead of passing without running.
    println!("cargo::rustc-check-cfg=cfg(test_store_postgres)");
    println!("cargo:rerun-if-env-changed=AGENTMUX_TEST_STORE");
    if std::env::var("AGENTMUX_TEST_STORE").as_deref() == Ok("postgres") {
        println!("cargo:rustc-cfg=test_store_postgres");
    }
}

/// Sets `AGENTMUX_VERSION`: the package's version, and the commit it is built from when that is
/// known: `AGENTMUX_COMMIT` when set (a build from a source archive can name it so), else what
/// `git` says of the checkout. A build outside git, or without git, names no commit.
fn version() {
    println!("cargo:rerun-if-env-changed=AGENTMUX_COMMIT");
    let commit = match std::env::var("AGENTMUX_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => Some(commit.trim().to_owned()),
        _ => git_commit(),
    };
    let package = std::env::var("CARGO_PKG_VERSION").expect("cargo sets it");
    let version = match commit {
        Some(commit) => format!("{package} (commit {commit})"),
        None => package,
    };
    println!("cargo:rustc-env=AGENTMUX_VERSION={version}");
}

/// The checkout's commit (12 hex digits), watching the files that change when it does: `HEAD`,
/// the branch it names and the packed refs (those that exist: a missing one would rerun this
/// script at every build). None outside a git checkout of this repository (a source archive
/// unpacked inside another repository is not that repository's commit) or without git.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    if std::fs::canonicalize(top).ok()? != std::fs::canonicalize(manifest).ok()? {
        return None;
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}
