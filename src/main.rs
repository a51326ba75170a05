//! The `agentmux` command: `agentmux serve` runs the server; `agentmux chat` (the terminal
//! client) and `agentmux bench` (the load generator and fault harness) hand over to their own
//! executables, `agentmux-chat` and `agentmux-bench`, installed next to this one.

use std::ffi::OsString;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agentmux::Server;
use agentmux::config::{BackendKind, Config};
use clap::{Args, Parser, Subcommand};

/// mimalloc instead of the system allocator: frames are many small, short-lived allocations
/// handed between threads, where glibc's allocator spent about a seventh of the server's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "agentmux",
    version = env!("AGENTMUX_VERSION"),
    about = "One WebSocket, many AI agent sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(Box<ServeArgs>),
    /// Chat with a running server from the terminal (runs `agentmux-chat`).
    #[command(disable_help_flag = true)]
    Chat(Forwarded),
    /// Measure the server against a bare WebSocket baseline, or run the kill -9 fault harness
    /// (runs `agentmux-bench`).
    #[command(disable_help_flag = true)]
    Bench(Forwarded),
    /// Look at the nodes that share a PostgreSQL store.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Copy the database into a new file, checked: made by the running server (on its
    /// address, as one of its admins), or read from the file while no server runs.
    Backup(BackupArgs),
    /// Put a backup in place of the database of a stopped server (the one it replaces is kept
    /// beside it).
    Restore(RestoreArgs),
    /// Check what a server with these settings (the options of `serve`) needs: the settings,
    /// the data dir, the store, the agents (is the Claude CLI signed in?), git, PostgreSQL and
    /// NATS when set; and say what to fix. Exits with 1 when something must be fixed.
    Doctor(Box<ServeArgs>),
}

/// Where a server keeps its conversations and listens: the settings `backup` and `restore`
/// read, as `serve` does.
#[derive(Args)]
struct Place {
    /// Address to listen on (port 0 picks a free port) [default: 127.0.0.1:7878]
    #[arg(long, env = "AGENTMUX_BIND")]
    bind: Option<SocketAddr>,
    /// Directory for the database and the agents' workspaces [default: ./data]
    #[arg(long, env = "AGENTMUX_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where conversations are stored: a postgres:// URL, or empty for the SQLite file in the
    /// data directory [default: empty]. Prefer AGENTMUX_STORE_URL or PGPASSWORD for a password
    #[arg(long, env = "AGENTMUX_STORE_URL", hide_env_values = true)]
    store_url: Option<String>,
    /// TOML file of settings (see config/default.toml)
    #[arg(long, env = "AGENTMUX_CONFIG")]
    config: Option<PathBuf>,
}

impl Place {
    /// The settings of the file, then these flags (or their variables) over them.
    fn into_config(self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(bind) = self.bind {
            config.bind = bind;
        }
        if let Some(dir) = self.data_dir {
            config.data_dir = dir;
        }
        if let Some(url) = self.store_url {
            config.store.url = url;
        }
        Ok(config)
    }
}

#[derive(Args)]
struct BackupArgs {
    /// The file to write; it must not exist
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// An admin's API token or JWT, for a server with authentication on
    #[arg(long, env = "AGENTMUX_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    place: Place,
}

#[derive(Args)]
struct RestoreArgs {
    /// The backup to restore
    #[arg(long, value_name = "FILE")]
    from: PathBuf,
    #[command(flatten)]
    place: Place,
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// List the nodes and the conversations each runs now.
    Status(StatusArgs),
}

#[derive(Args)]
struct StatusArgs {
    /// The nodes' store: a postgres:// URL (or AGENTMUX_STORE_URL, or store.url of --config)
    #[arg(long, env = "AGENTMUX_STORE_URL", hide_env_values = true)]
    store_url: Option<String>,
    /// TOML file of settings, for its store.url
    #[arg(long, env = "AGENTMUX_CONFIG")]
    config: Option<PathBuf>,
}

/// The arguments of a subcommand that another executable implements, passed on untouched.
#[derive(Args)]
struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    place: Place,
    /// The default agent: `claude`, `demo` or the name of an `[agents.NAME]` of the config
    /// file [default: claude when a Claude binary is set, else demo]
    #[arg(long, env = "AGENTMUX_BACKEND")]
    backend: Option<String>,
    /// Path of the Claude Code CLI binary
    #[arg(long, env = "AGENTMUX_CLAUDE_BIN")]
    claude_bin: Option<PathBuf>,
    /// Pause after each word of the demo agent, in milliseconds [default: 20]
    #[arg(long, env = "AGENTMUX_DEMO_DELAY_MS")]
    demo_delay_ms: Option<u64>,
    /// This node's name among the nodes sharing a PostgreSQL store [default: HOST:PORT]
    #[arg(long, env = "AGENTMUX_NODE_ID")]
    node_id: Option<String>,
    /// NATS server(s) the nodes of a cluster route through, nats://HOST:PORT [default: none]
    #[arg(long, env = "AGENTMUX_CLUSTER_NATS", hide_env_values = true)]
    cluster_nats: Option<String>,
    /// A directory conversations may work in (`options.cwd`); repeatable. Adds to
    /// AGENTMUX_PROJECT_ROOTS (colon-separated) and projects.roots of the config file
    #[arg(long = "project-root", value_name = "DIR")]
    project_roots: Vec<PathBuf>,
    /// How the log (on stderr) is written: `text`, coloured only on a terminal, or `json`, one
    /// object a line. `RUST_LOG` chooses what is logged [default: agentmux=info,warn]
    #[arg(long, env = "AGENTMUX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How the server writes its log.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Lines of text.
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields` (with `message`) and
    /// the spans it happened in.
    Json,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut config = self.place.into_config()?;
        if let Some(node) = self.node_id {
            config.cluster.node_id = node;
        }
        if let Some(nats) = self.cluster_nats {
            config.cluster.nats = nats;
        }
        if let Some(bin) = self.claude_bin {
            config.claude.bin = Some(bin);
        }
        if let Some(delay) = self.demo_delay_ms {
            config.demo.delay_ms = delay;
        }
        if let Some(name) = self.backend {
            match name.as_str() {
                "claude" => config.backend = Some(BackendKind::Claude),
                "demo" => config.backend = Some(BackendKind::Demo),
                _ => {}
            }
            config.agent.default = Some(name);
        }
        if let Ok(list) = std::env::var("AGENTMUX_PROJECT_ROOTS") {
            config.projects.add_root_list(&list);
        }
        for root in self.project_roots {
            config
                .projects
                .roots
                .push(agentmux::config::ProjectRoot::open(root));
        }
        // Secrets come from the environment, never from flags (the process list shows flags).
        if let Ok(list) = std::env::var("AGENTMUX_TOKENS") {
            config.auth.add_token_list(&list)?;
        }
        for (var, secret) in [
            ("AGENTMUX_TICKET_SECRET", &mut config.auth.ticket_secret),
            (
                "AGENTMUX_JWT_HS256_SECRET",
                &mut config.auth.jwt_hs256_secret,
            ),
            ("AGENTMUX_CLUSTER_SECRET", &mut config.cluster.secret),
            ("AGENTMUX_SECRET_KEY", &mut config.credentials.secret_key),
        ] {
            if let Ok(value) = std::env::var(var) {
                *secret = Some(value);
            }
        }
        Ok(config)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => *args,
        Command::Chat(forwarded) => return exec_sibling("chat", "agentmux-chat", forwarded.args),
        Command::Bench(forwarded) => {
            return exec_sibling("bench", "agentmux-bench", forwarded.args);
        }
        Command::Cluster(ClusterCommand::Status(args)) => return cluster_status(args),
        Command::Backup(args) => return backup(args),
        Command::Doctor(args) => return doctor(*args),
        Command::Restore(args) => {
            return report(
                args.place
                    .into_config()
                    .and_then(|config| agentmux::operate::backup::restore(&config, &args.from)),
            );
        }
    };
    init_logging(args.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            tracing::error!("cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `agentmux=info,warn`, also when `RUST_LOG`
/// is not a filter, which is logged): as text, coloured only on a terminal (and never with
/// `NO_COLOR` set), or as one JSON object a line. A line that can't be written (stderr closed:
/// the journal restarted, a pipe's reader gone) is dropped; the logger's own complaint about it
/// would go to that same stderr, and failing there would end the task that logged.
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    const DEFAULT: &str = "agentmux=info,warn";
    let (filter, refused) = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(err) => (
            DEFAULT.into(),
            std::env::var_os("RUST_LOG").map(|_| err.to_string()),
        ),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    let logs = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            logs.with(layer.with_ansi(colour)).init();
        }
        LogFormat::Json => logs.with(layer.json().with_span_list(true)).init(),
    }
    if let Some(err) = refused {
        tracing::warn!("RUST_LOG is not a log filter ({err}): logging {DEFAULT}");
    }
}

/// `agentmux backup`, on a runtime of its own.
fn backup(args: BackupArgs) -> ExitCode {
    report(args.place.into_config().and_then(|config| {
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(agentmux::operate::backup::backup(
            &config,
            &args.to,
            args.token.as_deref(),
        ))
    }))
}

/// `agentmux doctor`: the report, and exit code 1 when something must be fixed.
fn doctor(args: ServeArgs) -> ExitCode {
    let config = match args.into_config() {
        Ok(config) => config,
        Err(err) => {
            println!("FAIL  {:<14} {err:#}", "config");
            return ExitCode::FAILURE;
        }
    };
    let report = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(agentmux::operate::doctor::doctor(&config)),
        Err(err) => return report(Err(err.into())),
    };
    print!("{}", report.render());
    match report.failed() {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
}

/// Prints what a command did, or why it failed (then exits with 1).
fn report(outcome: anyhow::Result<String>) -> ExitCode {
    match outcome {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the nodes sharing the store and the conversations each runs.
fn cluster_status(args: StatusArgs) -> ExitCode {
    let url = match (&args.store_url, &args.config) {
        (Some(url), _) => Ok(url.clone()),
        (None, Some(path)) => Config::from_file(path).map(|c| c.store.url),
        (None, None) => Ok(String::new()),
    };
    let status = url.and_then(|url| {
        if url.is_empty() {
            anyhow::bail!(
                "give the nodes' PostgreSQL store: --store-url, AGENTMUX_STORE_URL or --config"
            );
        }
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(agentmux::store::cluster_status(&url))
    });
    match status {
        Ok(nodes) => {
            println!(
                "{:<24} {:<22} {:<8} {:<25} conversations",
                "node", "address", "state", "last seen"
            );
            for node in nodes {
                println!(
                    "{:<24} {:<22} {:<8} {:<25} {}",
                    node.node_id,
                    node.address,
                    node.state,
                    node.last_seen.as_deref().unwrap_or("-"),
                    node.conversations.len()
                );
                for conversation in &node.conversations {
                    println!("    {conversation}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Replaces this process with the executable `name` from this one's directory, run as
/// `agentmux <subcommand>` with `args`; returns only when that fails.
fn exec_sibling(subcommand: &str, name: &str, args: Vec<OsString>) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    let sibling = std::env::current_exe().map(|exe| exe.with_file_name(name));
    let err = match &sibling {
        Ok(path) if path.is_file() => std::process::Command::new(path)
            .arg0(format!("agentmux {subcommand}"))
            .args(args)
            .exec(),
        Ok(path) => {
            eprintln!(
                "error: `agentmux {subcommand}` runs `{name}`, which is not at {}; build it with \
                 `cargo build -p {name}` (add `--release` for target/release), or `cargo build` \
                 in the repository root for every executable",
                path.display()
            );
            return ExitCode::FAILURE;
        }
        Err(err) => std::io::Error::other(format!("cannot find this executable: {err}")),
    };
    eprintln!("error: cannot run {name}: {err}");
    ExitCode::FAILURE
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    tracing::info!("agentmux {}", env!("AGENTMUX_VERSION"));
    let config = args.into_config()?;
    agentmux::raise_fd_limit();
    // Refuse an unauthenticated public bind before anything listens.
    config.auth.check_bind(config.bind)?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.bind))?;
    let server = Server::new(config).await?;
    let addr = listener.local_addr()?;
    // Handled from before the address is printed: a SIGTERM as soon as a supervisor (or a
    // test) sees it is a graceful shutdown, not the default kill.
    let shutdown = shutdown_signal()?;
    println!("listening on http://{addr}");
    std::io::stdout().flush()?;
    server.run(listener, shutdown).await
}

/// Resolves at the first SIGINT or SIGTERM; both are handled from the moment this returns.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
    })
}
