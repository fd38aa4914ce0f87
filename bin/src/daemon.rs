//! `kmirror daemon`: settings, logging, the node, the admin API, signals.
//!
//! Start-up fails fast and loudly (bad settings, a data dir another daemon
//! holds, a busy admin port, an unreachable destination) so a supervisor
//! sees a non-zero exit instead of a daemon that half works.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use actix_web::middleware::from_fn;
use actix_web::{web::Data, App, HttpServer};
use clap::Args;
use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::cluster::SourceCluster;
use kmirror_actors::kafka::budget::MemoryBudget;
use kmirror_actors::kafka::fetch::FetchOptions;
use kmirror_actors::kafka::{ClientConfig, KafkaClient, KafkaError};
use kmirror_actors::node::{Node, NodeSettings, SourceConnector};
use kmirror_store::{EventLog, SledLog, SledOptions};
use rustls::ServerConfig;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::admin_auth::ClientAuth;
use crate::api::NodeHandle;
use crate::clustered::Clustered;
use crate::settings::{self, DaemonSettings, LogFormat, Overrides};

#[derive(Args)]
pub struct DaemonArgs {
    /// TOML settings file (optional when the flags say everything).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of the event log (wins over `data_dir`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<String>,
    /// Admin API address (wins over `admin_listen`).
    #[arg(long, value_name = "HOST:PORT")]
    admin_listen: Option<String>,
    /// Destination bootstrap servers (wins over `destination.bootstrap_servers`).
    #[arg(long, value_name = "BOOTSTRAP")]
    destination: Option<String>,
}

/// Admin requests in flight get this long to finish on shutdown.
const ADMIN_SHUTDOWN_TIMEOUT_SECS: u64 = 5;

pub fn run(args: DaemonArgs) -> ExitCode {
    let overrides = Overrides {
        config: args.config,
        data_dir: args.data_dir,
        admin_listen: args.admin_listen,
        destination: args.destination,
    };
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let settings = match settings::load(&overrides, env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    init_logging(settings.log_format);
    // A clustered node's log is the state topic, opened per shard it owns.
    let log = match settings.cluster.is_none().then(|| open_log(&settings)) {
        None => None,
        Some(Ok(log)) => Some(log),
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match actix::System::new().block_on(serve(settings, log)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Opened before the actix System exists: sled's recovery is blocking work
/// that has no business on an arbiter thread.
fn open_log(settings: &DaemonSettings) -> Result<Arc<dyn EventLog>, settings::SettingsError> {
    let dir = &settings.data_dir;
    let fail = |what: String| settings::SettingsError {
        key: "data_dir".into(),
        message: format!("{}: {what}", dir.display()),
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create it: {e}")))?;
    // The data dir *is* the sled directory, so `kmirror log … --data-dir`
    // reads the same path.
    let options = SledOptions {
        cache_capacity_bytes: settings.event_log_cache_bytes,
        ..SledOptions::default()
    };
    let log = SledLog::open_with(dir, options)
        .map_err(|e| fail(format!("cannot open the event log: {e}")))?;
    Ok(Arc::new(log))
}

/// SIGTERM and SIGINT, as one stream.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn new() -> Result<Self, String> {
        let install = |kind| {
            signal(kind).map_err(|e| format!("INTERNAL: cannot install signal handlers: {e}"))
        };
        Ok(Signals {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// What the daemon runs: one node over its sled log, or a clustered node.
enum Running {
    Single(Node),
    Clustered(Clustered),
}

impl Running {
    fn handle(&self) -> NodeHandle {
        match self {
            Running::Single(node) => NodeHandle::new(node.clone()),
            Running::Clustered(c) => {
                NodeHandle::clustered(c.shards.clone(), c.status.clone(), c.state_log.clone())
            }
        }
    }

    /// The local event log's failure (see [`Node::log_failed`]); a
    /// clustered node's shard logs are reopened by their shards instead.
    async fn log_failed(&self) -> String {
        match self {
            Running::Single(node) => node.log_failed().await,
            Running::Clustered(_) => std::future::pending().await,
        }
    }

    async fn shutdown(self) {
        match self {
            Running::Single(node) => node.shutdown().await,
            Running::Clustered(c) => c.shutdown().await,
        }
    }
}

async fn start(
    settings: &DaemonSettings,
    log: Option<Arc<dyn EventLog>>,
    budget: &Arc<MemoryBudget>,
    peers: &ClientAuth,
) -> Result<Running, String> {
    match (log, &settings.cluster) {
        (Some(log), _) => start_node(settings, log, budget).await.map(Running::Single),
        (None, Some(cluster)) => Clustered::start(
            settings,
            cluster,
            node_settings(settings),
            source_connector(budget.clone()),
            peers.clone(),
        )
        .await
        .map(Running::Clustered),
        (None, None) => Err("INTERNAL: no event log and no [cluster]".into()),
    }
}

async fn serve(settings: DaemonSettings, log: Option<Arc<dyn EventLog>>) -> Result<(), String> {
    let mut signals = Signals::new()?;
    let budget = MemoryBudget::new(settings.max_memory_bytes);
    // Bound before the slow part, so a busy port fails at once; connections
    // that arrive before the node is up wait in the backlog.
    let listener = std::net::TcpListener::bind(settings.admin_listen).map_err(|e| {
        format!(
            "INVALID_CONFIG: admin_listen: cannot listen on {}: {e}",
            settings.admin_listen
        )
    })?;

    // What this node presents to its peers: the nodes of a cluster share
    // `admin_token` and trust each other's admin TLS.
    let peers = ClientAuth {
        token: settings.admin_token.clone(),
        tls: settings.admin_tls.as_ref().map(|t| t.peers.clone()),
    };
    let running = tokio::select! {
        running = start(&settings, log, &budget, &peers) => running?,
        why = signals.recv() => {
            tracing::info!(signal = why, "stopped during start-up");
            return Ok(());
        }
    };

    let data = Data::new(running.handle());
    let memory = Data::from(budget);
    let token = settings.admin_token.clone().map(Data::new);
    let peers = Data::new(peers);
    let server = HttpServer::new(move || {
        let mut app = App::new()
            .app_data(data.clone())
            .app_data(peers.clone())
            .app_data(memory.clone());
        if let Some(token) = &token {
            app = app.app_data(token.clone());
        }
        app.wrap(from_fn(crate::api::auth::require_token))
            .configure(crate::api::configure)
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(ADMIN_SHUTDOWN_TIMEOUT_SECS);
    let server = match &settings.admin_tls {
        None => server.listen(listener),
        Some(tls) => server.listen_rustls_0_23(listener, ServerConfig::clone(&tls.server)),
    }
    .map_err(|e| format!("INVALID_CONFIG: admin_listen: {e}"))?
    .run();
    let handle = server.handle();
    let mut server = actix_web::rt::spawn(server);
    match &settings.cluster {
        None => {
            tracing::info!(admin = %settings.admin_listen, admin_tls = settings.admin_tls.is_some(), admin_token = settings.admin_token.is_some(), data_dir = %settings.data_dir.display(), "kmirror daemon ready")
        }
        Some(c) => {
            tracing::info!(admin = %settings.admin_listen, admin_tls = settings.admin_tls.is_some(), admin_token = settings.admin_token.is_some(), cluster = %c.id, "kmirror daemon ready, joining its cluster")
        }
    }

    let outcome = tokio::select! {
        why = signals.recv() => {
            tracing::info!(signal = why, "shutting down");
            Ok(())
        }
        ended = &mut server => Err(format!("INTERNAL: the admin API stopped: {ended:?}")),
        failure = running.log_failed() => {
            // No graceful stop: it would only try to record more. Exiting
            // now is a crash the next start aligns from, as after kill -9.
            let message = format!(
                "KAFKA_STORAGE_ERROR: the event log in {} cannot take records: {failure}; nothing more is copied. Start the daemon again once the disk has room: it resumes where the log ends",
                settings.data_dir.display()
            );
            handle.stop(false).await;
            return Err(message);
        }
    };
    handle.stop(true).await;
    tokio::select! {
        _ = running.shutdown() => tracing::info!("node stopped; state is durable"),
        why = signals.recv() => return Err(format!("INTERNAL: second {why} during shutdown; exiting at once")),
    }
    outcome
}

fn node_settings(settings: &DaemonSettings) -> NodeSettings {
    let mut node_settings = NodeSettings::default();
    if let Some(interval) = settings.metadata_refresh_interval {
        node_settings.refresh_interval = interval;
    }
    if let Some(topic) = &settings.state_topic {
        node_settings.state_topic = topic.clone();
    }
    if let Some(n) = settings.state_topic_partitions {
        node_settings.state_topic_partitions = n;
    }
    node_settings
}

async fn start_node(
    settings: &DaemonSettings,
    log: Arc<dyn EventLog>,
    budget: &Arc<MemoryBudget>,
) -> Result<Node, String> {
    let bootstrap = &settings.destination["bootstrap.servers"];
    let client = KafkaClient::from_properties(&settings.destination)
        .await
        .map_err(|e| format!("NETWORK_EXCEPTION: destination {bootstrap}: {e}"))?;
    let node_settings = node_settings(settings);
    Node::start(
        log,
        Arc::new(KafkaCluster::new(client, FetchOptions::default())),
        source_connector(budget.clone()),
        node_settings,
    )
    .await
    .map_err(|e| e.to_string())
}

/// Every mirror's source reads within the one budget of the daemon.
fn source_connector(budget: Arc<MemoryBudget>) -> SourceConnector {
    Arc::new(move |properties: BTreeMap<String, String>| {
        let budget = budget.clone();
        Box::pin(async move {
            let (client_props, fetch) = source_properties(&properties)?;
            let client = KafkaClient::connect_lazy(ClientConfig::from_properties(&client_props)?)?;
            Ok(
                Arc::new(KafkaCluster::new(client, fetch).with_budget(budget))
                    as Arc<dyn SourceCluster>,
            )
        })
    })
}

/// Keys of a mirror's configuration that are not Kafka client keys: the
/// mirror's own (`mirror.*`, the KIP's unprefixed filter keys) and fetch
/// tuning that has no client counterpart here.
fn is_mirror_key(key: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "mirror.",
        "topics.",
        "groups.",
        "acls.",
        "topic.properties.",
    ];
    const KEYS: &[&str] = &[
        "fetch.backoff.ms",
        "socket.timeout.ms",
        "socket.receive.buffer.bytes",
    ];
    PREFIXES.iter().any(|p| key.starts_with(p)) || KEYS.contains(&key)
}

/// Splits a mirror's properties into the source client's properties and
/// the fetch options (the KIP's mirror-level fetch keys).
fn source_properties(
    properties: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, FetchOptions), KafkaError> {
    let mut fetch = FetchOptions::default();
    let mut client = BTreeMap::new();
    for (key, value) in properties {
        let number = || {
            value
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| KafkaError::Config {
                    key: key.clone(),
                    message: format!("`{value}` is not a non-negative number"),
                })
        };
        match key.as_str() {
            "fetch.wait.max.ms" | "fetch.max.wait.ms" => {
                fetch.max_wait = Duration::from_millis(number()? as u64)
            }
            "fetch.min.bytes" => fetch.min_bytes = number()?,
            "fetch.response.max.bytes" => fetch.max_bytes = number()?,
            "fetch.max.bytes" | "max.partition.fetch.bytes" => {
                fetch.partition_max_bytes = number()?
            }
            k if is_mirror_key(k) => {}
            _ => {
                client.insert(key.clone(), value.clone());
            }
        }
    }
    Ok((client, fetch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_keys_are_split_from_client_keys() {
        let props: BTreeMap<String, String> = [
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("security.protocol", "PLAINTEXT"),
            ("mirror.topics.include", "orders-.*"),
            ("mirror.topics.exclude", "orders-tmp.*"),
            ("topic.properties.exclude", "retention.ms"),
            ("fetch.wait.max.ms", "250"),
            ("fetch.max.bytes", "1048576"),
            ("fetch.response.max.bytes", "10485760"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let (client, fetch) = source_properties(&props).unwrap();
        assert_eq!(
            client.keys().collect::<Vec<_>>(),
            ["bootstrap.servers", "security.protocol"]
        );
        assert_eq!(fetch.max_wait, Duration::from_millis(250));
        assert_eq!(fetch.partition_max_bytes, 1_048_576);
        assert_eq!(fetch.max_bytes, 10_485_760);

        let bad: BTreeMap<String, String> =
            [("fetch.min.bytes".to_owned(), "lots".to_owned())].into();
        match source_properties(&bad) {
            Err(KafkaError::Config { key, .. }) => assert_eq!(key, "fetch.min.bytes"),
            other => panic!("expected a config error, got {:?}", other.map(|(c, _)| c)),
        }
    }
}
