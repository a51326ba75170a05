//! The `agentmux` command: `agentmux serve` runs the server, `agentmux chat` is a terminal
//! client of one, `agentmux bench` measures one.

mod bench;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agentmux::Server;
use agentmux::config::{BackendKind, Config};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "agentmux",
    version,
    about = "One WebSocket, many AI agent sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Chat with a running server from the terminal.
    Chat(ChatArgs),
    /// Measure the server against a bare WebSocket baseline, or run the kill -9 fault harness.
    Bench(bench::BenchArgs),
}

#[derive(Args)]
struct ChatArgs {
    /// WebSocket URL of the server
    #[arg(long, env = "AGENTMUX_URL", default_value = "ws://127.0.0.1:7878/ws")]
    url: String,
    /// Resume a session: by agent_id, session_id or a unique prefix; without a value, pick
    /// from a list (or, with --last, the most recent)
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    resume: Option<String>,
    /// With --resume: the session with the most recent activity
    #[arg(long)]
    last: bool,
}

impl ChatArgs {
    fn into_options(self) -> agentmux::cli_chat::ChatOptions {
        use agentmux::cli_chat::Resume;
        let resume = match (self.resume, self.last) {
            (_, true) => Some(Resume::Last),
            (Some(id), false) => Some(Resume::parse(&id)),
            (None, false) => None,
        };
        agentmux::cli_chat::ChatOptions {
            url: self.url,
            resume,
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port) [default: 127.0.0.1:7878]
    #[arg(long, env = "AGENTMUX_BIND")]
    bind: Option<SocketAddr>,
    /// Directory for the database and the agents' workspaces [default: ./data]
    #[arg(long, env = "AGENTMUX_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Agent backend [default: claude when a Claude binary is set, else demo]
    #[arg(long, env = "AGENTMUX_BACKEND", value_enum)]
    backend: Option<BackendKind>,
    /// Path of the Claude Code CLI binary
    #[arg(long, env = "AGENTMUX_CLAUDE_BIN")]
    claude_bin: Option<PathBuf>,
    /// Pause after each word of the demo agent, in milliseconds [default: 20]
    #[arg(long, env = "AGENTMUX_DEMO_DELAY_MS")]
    demo_delay_ms: Option<u64>,
    /// TOML file of settings (see config/default.toml)
    #[arg(long, env = "AGENTMUX_CONFIG")]
    config: Option<PathBuf>,
}

impl ServeArgs {
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
        if let Some(bin) = self.claude_bin {
            config.claude.bin = Some(bin);
        }
        if let Some(delay) = self.demo_delay_ms {
            config.demo.delay_ms = delay;
        }
        if let Some(backend) = self.backend {
            config.backend = Some(backend);
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
        ] {
            if let Ok(value) = std::env::var(var) {
                *secret = Some(value);
            }
        }
        Ok(config)
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "agentmux=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            tracing::error!("cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Chat(args) => runtime.block_on(agentmux::cli_chat::run(args.into_options())),
        Command::Bench(args) => runtime.block_on(bench::run(args)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.into_config()?;
    agentmux::raise_fd_limit();
    // Refuse an unauthenticated public bind before anything listens.
    config.auth.check_bind(config.bind)?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.bind))?;
    let server = Server::new(config).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    std::io::stdout().flush()?;
    server.run(listener, shutdown_signal()).await
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending().await,
            }
        } => {}
    }
    tracing::info!("shutting down");
}
