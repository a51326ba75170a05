//! An in-process server on the library's own `Server::run`, for tests where spawning the
//! binary adds nothing: started in the test's runtime, shut down when dropped. In the
//! PostgreSQL pass it stores in its data dir's own database, like `TestServer`.

use std::path::PathBuf;

use agentmux::Server;
use agentmux::config::Config;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::common::{Client, WAIT};

/// A running in-process server with its own data directory.
pub struct InProcess {
    pub addr: String,
    pub data_dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    run: Option<JoinHandle<anyhow::Result<()>>>,
    tmp: Option<tempfile::TempDir>,
}

impl InProcess {
    /// Starts a demo-backed server with the settings of `toml`, over a demo agent with no
    /// per-word delay unless `toml` sets one.
    pub async fn start(toml: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let mut table: toml::Table = toml::from_str(toml).expect("a valid configuration");
        if let toml::Value::Table(demo) = table
            .entry("demo")
            .or_insert_with(|| toml::Table::new().into())
        {
            demo.entry("delay_ms").or_insert(0.into());
        }
        let mut config: Config = table.try_into().expect("a valid configuration");
        config.data_dir = tmp.path().to_path_buf();
        if crate::common::on_postgres() {
            let server = crate::common::pg_url().unwrap();
            let name = crate::common::database_for(tmp.path());
            config.store.url = crate::common::create_database(&server, &name).await;
        }
        let server = Server::new(config).await.expect("the server starts");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let run = tokio::spawn(server.run(listener, async move {
            let _ = stopped.await;
        }));
        InProcess {
            addr,
            data_dir: tmp.path().to_path_buf(),
            stop: Some(stop),
            run: Some(run),
            tmp: Some(tmp),
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.addr).await
    }

    /// Shuts down gracefully (as on SIGTERM) and waits until it is done; the data directory
    /// lives as long as the returned handle.
    pub async fn shutdown(mut self) -> tempfile::TempDir {
        let _ = self.stop.take().unwrap().send(());
        let run = self.run.take().unwrap();
        tokio::time::timeout(WAIT, run)
            .await
            .expect("the server shuts down in time")
            .unwrap()
            .unwrap();
        self.tmp.take().unwrap()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
