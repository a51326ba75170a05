//! `agentmux doctor`: checks what a server with these settings needs, the way `serve` would
//! find out (or, for the agents, only at their first turn), and says what to fix. It changes
//! nothing: the store is read, never migrated; agents are asked about themselves, never started.
//!
//! Each check gives a line: `ok`, `warn` (works, but likely not as meant) or `FAIL` (the server
//! refuses to start, or turns fail), with what to do under anything that is not ok.

use std::fmt::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use crate::config::Config;
use crate::store::backup::{CopyError, check_in_place};

/// How a check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// As it should be.
    Ok,
    /// Works, but likely not as meant.
    Warn,
    /// The server won't start, or turns will fail.
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Finding {
    /// How it went.
    pub verdict: Verdict,
    /// What was checked (`config`, `data dir`, `store`, `agent claude`, `git`, `nats`).
    pub topic: String,
    /// What was found.
    pub said: String,
    /// What to do about it.
    pub fix: Option<String>,
}

/// Everything `agentmux doctor` found.
#[derive(Debug, Default)]
pub struct Report(pub Vec<Finding>);

impl Report {
    fn add(&mut self, verdict: Verdict, topic: &str, said: impl Into<String>, fix: Option<&str>) {
        self.0.push(Finding {
            verdict,
            topic: topic.to_owned(),
            said: said.into(),
            fix: fix.map(str::to_owned),
        });
    }

    fn ok(&mut self, topic: &str, said: impl Into<String>) {
        self.add(Verdict::Ok, topic, said, None);
    }

    /// Whether anything failed.
    pub fn failed(&self) -> bool {
        self.0.iter().any(|f| f.verdict == Verdict::Fail)
    }

    /// The report as printed: a line per check, `fix:` under those that need one, and a count.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for finding in &self.0 {
            let mark = match finding.verdict {
                Verdict::Ok => "ok  ",
                Verdict::Warn => "warn",
                Verdict::Fail => "FAIL",
            };
            let _ = writeln!(out, "{mark}  {:<14} {}", finding.topic, finding.said);
            if let Some(fix) = &finding.fix {
                let _ = writeln!(out, "      {:<14} fix: {fix}", "");
            }
        }
        let count = |v: Verdict| self.0.iter().filter(|f| f.verdict == v).count();
        let (fail, warn) = (count(Verdict::Fail), count(Verdict::Warn));
        let _ = match (fail, warn) {
            (0, 0) => writeln!(out, "everything checked is in order"),
            _ => writeln!(out, "{fail} to fix, {warn} to look at"),
        };
        out
    }
}

/// Runs every check on `config`.
pub async fn doctor(config: &Config) -> Report {
    let mut report = Report::default();
    report.ok("agentmux", env!("AGENTMUX_VERSION"));
    settings(config, &mut report);
    data_dir(&config.data_dir, &mut report);
    store(config, &mut report).await;
    agents(config, &mut report).await;
    git(config, &mut report).await;
    nats(config, &mut report).await;
    report
}

/// The checks `serve` makes of its settings before anything starts, and who can get in.
fn settings(config: &Config, report: &mut Report) {
    let topic = "config";
    let mut checked = config.clone();
    let refusals = [
        checked.projects.canonicalize().err(),
        crate::http::auth::Authenticator::new(&config.auth, &config.server, config.bind).err(),
        config.store.wal_restart_pages().err(),
        config
            .schedules
            .time_zone
            .parse::<chrono_tz::Tz>()
            .err()
            .map(|_| {
                anyhow::anyhow!(
                    "schedules.time_zone: unknown time zone `{}`",
                    config.schedules.time_zone
                )
            }),
    ];
    let mut refused = false;
    for err in refusals.into_iter().flatten() {
        refused = true;
        report.add(
            Verdict::Fail,
            topic,
            format!("{err:#}"),
            Some("correct the setting: the server refuses to start with it"),
        );
    }
    if !refused {
        report.ok(
            topic,
            format!(
                "listens on {}, data dir {}, {} project root(s)",
                config.bind,
                config.data_dir.display(),
                config.projects.roots.len()
            ),
        );
    }
    let auth = &config.auth;
    if auth.is_configured() {
        report.ok(
            "auth",
            format!(
                "on: {} API token(s){}, admins: {}",
                auth.tokens.len(),
                if auth.jwt_hs256_secret.is_some() || auth.jwt_rs256_public_key_pem.is_some() {
                    " and JWTs"
                } else {
                    ""
                },
                if auth.admins.is_empty() {
                    "none".to_owned()
                } else {
                    auth.admins.join(", ")
                }
            ),
        );
    } else if !config.server.allowed_hosts.is_empty() {
        report.add(
            Verdict::Warn,
            "auth",
            format!(
                "off, while server.allowed_hosts admits {}: whoever reaches the server by that \
                 name (through a proxy) acts as `local`, with its agents",
                config.server.allowed_hosts.join(", ")
            ),
            Some("set AGENTMUX_TOKENS (token=principal, …) or a JWT key"),
        );
    } else {
        report.ok(
            "auth",
            "off: loopback names only, for the one person on this machine",
        );
    }
}

/// The data dir: the server's user's alone, and writable.
fn data_dir(dir: &Path, report: &mut Report) {
    let topic = "data dir";
    let shown = dir.display();
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report.ok(
                topic,
                format!("{shown} does not exist yet: made (0700) at start"),
            );
            return;
        }
        Err(e) => {
            report.add(
                Verdict::Fail,
                topic,
                format!("{shown} can't be read: {e}"),
                Some("give the server's user access to it, or set --data-dir"),
            );
            return;
        }
    };
    if !meta.is_dir() {
        report.add(
            Verdict::Fail,
            topic,
            format!("{shown} is not a directory"),
            Some("set --data-dir (data_dir) to a directory"),
        );
        return;
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        report.add(
            Verdict::Fail,
            topic,
            format!(
                "{shown} belongs to uid {}, not to this user (uid {me})",
                meta.uid()
            ),
            Some("run as the user that owns it, or chown -R it to the server's user"),
        );
        return;
    }
    if rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_err() {
        report.add(
            Verdict::Fail,
            topic,
            format!("{shown} is not writable"),
            Some("chmod u+rwx it"),
        );
        return;
    }
    let open: Vec<String> = [dir.to_path_buf(), dir.join("agentmux.db")]
        .into_iter()
        .filter_map(|path| {
            let mode = std::fs::metadata(&path).ok()?.permissions().mode();
            (mode & 0o077 != 0).then(|| format!("{} ({:o})", path.display(), mode & 0o777))
        })
        .collect();
    if open.is_empty() {
        report.ok(topic, format!("{shown}: this user's alone"));
    } else {
        report.add(
            Verdict::Warn,
            topic,
            format!("other users may read: {}", open.join(", ")),
            Some("chmod -R go= the data dir (conversations are the server's user's alone)"),
        );
    }
}

/// The store: whole, at a schema this build can serve.
async fn store(config: &Config, report: &mut Report) {
    let topic = "store";
    if !config.store.url.is_empty() {
        match crate::store::postgres::inspect(&config.store.url).await {
            Ok(found) => report.ok(
                topic,
                match found.schema {
                    Some(schema) => format!(
                        "PostgreSQL {}: {} conversations, schema version {schema}",
                        found.server, found.conversations
                    ),
                    None => format!(
                        "PostgreSQL {}: no agentmux tables yet (made at first start)",
                        found.server
                    ),
                },
            ),
            Err(err) => report.add(
                Verdict::Fail,
                topic,
                format!("{err:#}"),
                Some("check --store-url (AGENTMUX_STORE_URL), the server and its pg_hba.conf"),
            ),
        }
        return;
    }
    let db = config.database_path();
    let checked = tokio::task::spawn_blocking({
        let db = db.clone();
        move || check_in_place(&db)
    })
    .await;
    match checked {
        Ok(Ok(summary)) => report.ok(
            topic,
            format!(
                "{}: intact, {} conversations, {} messages, schema version {}",
                db.display(),
                summary.conversations,
                summary.messages,
                summary.schema
            ),
        ),
        Ok(Err(CopyError::Missing(_))) => {
            report.ok(
                topic,
                format!("{}: none yet, made at first start", db.display()),
            );
        }
        Ok(Err(CopyError::InUse(_))) => {
            let addr = super::backup::local_address(config.bind);
            let answers = crate::http::client::healthz(addr).await;
            let said = format!(
                "{} is held by a running server{}: it is checked while no server runs",
                db.display(),
                if answers {
                    format!(" (answering at {addr})")
                } else {
                    String::new()
                }
            );
            report.add(
                Verdict::Warn,
                topic,
                said,
                Some("stop the server to check the file, or `agentmux backup`, which checks the copy"),
            );
        }
        Ok(Err(err)) => report.add(
            Verdict::Fail,
            topic,
            err.to_string(),
            Some("restore a backup (`agentmux restore`), see docs/operating.md"),
        ),
        Err(err) => report.add(Verdict::Fail, topic, err.to_string(), None),
    }
}

/// The agents as `serve` sets them up (without a pre-warmed spare), and what each program
/// says of itself.
async fn agents(config: &Config, report: &mut Report) {
    let mut quiet = config.clone();
    quiet.claude.prewarm = false;
    let agents = match crate::agent::registry::Agents::from_config(&quiet) {
        Ok(agents) => agents,
        Err(err) => {
            report.add(
                Verdict::Fail,
                "agents",
                format!("{err:#}"),
                Some("correct claude.bin (--claude-bin) or the [agents.NAME] settings"),
            );
            return;
        }
    };
    let names: Vec<String> = agents.names();
    report.ok(
        "agents",
        format!("{} (default {})", names.join(", "), agents.default_name()),
    );
    for (name, check) in agents.self_checks().await {
        let topic = format!("agent {name}");
        match check.problem() {
            None => report.ok(&topic, check.summary()),
            Some(problem) => report.add(
                if problem.fatal {
                    Verdict::Fail
                } else {
                    Verdict::Warn
                },
                &topic,
                problem.what,
                Some(&problem.fix),
            ),
        }
    }
}

/// git, which conversations' worktrees need.
async fn git(config: &Config, report: &mut Report) {
    let wanted =
        config.worktrees.git.is_some() || config.projects.roots.iter().any(|r| r.worktrees);
    let Some(program) = config
        .worktrees
        .git
        .clone()
        .or_else(crate::worktrees::find_on_path)
    else {
        report.add(
            if wanted { Verdict::Fail } else { Verdict::Warn },
            "git",
            "no `git` on PATH: conversations can't have worktrees",
            Some("install git, or set worktrees.git"),
        );
        return;
    };
    let git = crate::worktrees::Git::new(program.clone(), false);
    match git.version().await {
        Ok(version) if version >= crate::worktrees::MIN_VERSION => report.ok(
            "git",
            format!("{} ({}.{})", program.display(), version.0, version.1),
        ),
        Ok(version) => report.add(
            if wanted { Verdict::Fail } else { Verdict::Warn },
            "git",
            format!(
                "{} is {}.{}; worktrees need {}.{}",
                program.display(),
                version.0,
                version.1,
                crate::worktrees::MIN_VERSION.0,
                crate::worktrees::MIN_VERSION.1
            ),
            Some("install a newer git, or set worktrees.git"),
        ),
        Err(err) => report.add(
            if wanted { Verdict::Fail } else { Verdict::Warn },
            "git",
            err.to_string(),
            Some("install git, or set worktrees.git"),
        ),
    }
}

/// The cluster's NATS servers, when there are any.
async fn nats(config: &Config, report: &mut Report) {
    if config.cluster.nats.is_empty() {
        return;
    }
    match crate::session::Bus::check(&config.cluster).await {
        Ok(said) => report.ok("nats", said),
        Err(err) => report.add(
            Verdict::Fail,
            "nats",
            format!("{err:#}"),
            Some("check --cluster-nats, its login and AGENTMUX_CLUSTER_SECRET (docs/cluster.md)"),
        ),
    }
}
