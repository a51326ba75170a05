//! Running agentmux as an installed service: what `--version` says, the logs, and the shipped
//! systemd unit.

/// The repository's commit as git names it (12 hex digits); None outside a checkout.
fn checkout_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let top = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let top = String::from_utf8(top.stdout).ok()?;
    let ours = std::fs::canonicalize(top.trim()).ok()?
        == std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).ok()?;
    (out.status.success() && ours).then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// `agentmux --version` names the package's version and the commit it was built from (the
/// one named at build time by `AGENTMUX_COMMIT`, else the checkout's), or only the version
/// when neither is known.
#[test]
fn the_version_names_the_commit_built_from() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let commit = option_env!("AGENTMUX_COMMIT")
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or_else(checkout_commit);
    let expected = match commit {
        Some(commit) => format!("agentmux {} (commit {commit})\n", env!("CARGO_PKG_VERSION")),
        None => format!("agentmux {}\n", env!("CARGO_PKG_VERSION")),
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}
