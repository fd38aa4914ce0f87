//! Daemon settings: a TOML file, `KMIRROR_` environment overrides, then
//! command-line flags, all validated before anything starts.
//!
//! Every error names the key at fault, in the file's spelling, so an
//! operator knows which line (or which variable) to fix.
//!
//! Longer than 800 lines: its unit tests, one per key's errors (the code
//! alone is under 570).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use config::{Config, Environment, File, FileFormat, Value, ValueKind};
use kmirror_actors::kafka::{ClientConfig, KafkaError};

use crate::admin_auth::{self, AdminToken};

/// The admin API address when nothing else is said: loopback only, so a
/// fresh daemon never exposes its control plane.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9650";

/// The memory budget for bytes in flight when nothing else is said: what
/// a backlog on 100 partitions copies at full speed with.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 64 * 1024 * 1024;
/// Below this a budget cannot hold one batch of Kafka's default
/// `max.message.bytes` next to the one being acknowledged.
const MIN_MAX_MEMORY_BYTES: i64 = 1024 * 1024;

/// sled's page cache for the event log when nothing else is said. sled's
/// own default (256 MiB, also `SledOptions::default`) is the whole RSS
/// goal of 10 000 idle partitions, so it bounded nothing. Measured with
/// one binary: 10 000 idle partitions (a 28 MB log) 285 vs 281 MiB, their
/// restart 209 vs 228 MiB peak, 2 000 idle partitions 76 vs 82 MiB. Pages
/// not cached are read back from the file (mostly the OS's page cache).
/// 64 MiB rather than 16: it holds that 28 MB log whole, and one loaded
/// run copied a backlog slower with 16 MiB (25 vs 57 MB/s), not yet
/// explained, so the smaller cache waits for a quiet A/B run.
pub const DEFAULT_EVENT_LOG_CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// Below this sled evicts pages it is still writing, and every append
/// reads its tree path back from disk.
const MIN_EVENT_LOG_CACHE_BYTES: i64 = 1024 * 1024;

const TOP_LEVEL_KEYS: &[&str] = &[
    "data_dir",
    "admin_listen",
    "admin_token",
    "admin_tls_cert",
    "admin_tls_key",
    "admin_tls_ca",
    "log_format",
    "metadata_refresh_interval_ms",
    "state_topic",
    "state_topic_num_partitions",
    "max_memory_bytes",
    "event_log_cache_bytes",
    "destination",
    "cluster",
];

/// The keys of `[cluster]`.
const CLUSTER_KEYS: &[&str] = &[
    "id",
    "advertised_url",
    "capacity",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "rebalance_timeout_ms",
    "spread_partitions",
    "balance_partitions",
];

/// How log lines are written: text for people, JSON for log shippers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Validated daemon settings.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// The sled event log's directory (unused by a clustered node, whose
    /// log is the state topic).
    pub data_dir: PathBuf,
    pub admin_listen: SocketAddr,
    /// Set: every admin request needs `Authorization: Bearer <token>`, and
    /// a clustered node sends it when it forwards.
    pub admin_token: Option<AdminToken>,
    /// Set: the admin API speaks HTTPS only.
    pub admin_tls: Option<AdminTls>,
    /// Kafka client properties of the destination, with Kafka's own keys
    /// (`bootstrap.servers`, …), ready for `KafkaClient::from_properties`.
    pub destination: BTreeMap<String, String>,
    pub log_format: LogFormat,
    /// None: the node's own default.
    pub metadata_refresh_interval: Option<Duration>,
    /// The state topic on the destination (None: `__kmirror_state`).
    pub state_topic: Option<String>,
    /// Its partitions when kmirror creates it (None: 50).
    pub state_topic_partitions: Option<i32>,
    /// Set: this node is one of a clustered daemon's (`[cluster]`).
    pub cluster: Option<ClusterSettings>,
    /// The budget for bytes in flight (fetched, queued, unacknowledged)
    /// across every partition of every mirror.
    pub max_memory_bytes: usize,
    /// sled's page cache for the event log (`data_dir`); a clustered node
    /// has no sled log and ignores it.
    pub event_log_cache_bytes: u64,
}

/// The admin API's TLS, parsed once at start-up so a bad file is an
/// `INVALID_CONFIG` naming its key before anything starts.
#[derive(Debug, Clone)]
pub struct AdminTls {
    pub server: Arc<rustls::ServerConfig>,
    /// Whom a clustered node trusts when it forwards to an `https://` peer:
    /// `admin_tls_ca`, else the certificates in `admin_tls_cert`.
    pub peers: Arc<rustls::ClientConfig>,
}

/// `[cluster]`: nodes with the same `id` share the work through a group on
/// the destination cluster. Timeouts default to Kafka Connect's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    pub id: String,
    /// The admin URL the other nodes forward requests to.
    pub advertised_url: String,
    /// This node's share of the work, relative to the others'.
    pub capacity: u32,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub rebalance_timeout: Duration,
    /// Whether mirrors may be created with `mirror.partitions.spread=true`
    /// (experimental; see the README): the node then follows every shard
    /// of the state topic, which the spread mirrors need and cost a fetch
    /// session per state-topic leader.
    pub spread_partitions: bool,
    /// With `spread_partitions`: whether the group's leader weighs each
    /// shard by the partitions that run in it, and rebalances once they
    /// sit unevenly on the nodes (a spread mirror's partitions hash into
    /// shards unevenly). Off: shards move only when members come and go,
    /// as Kafka's `auto.leader.rebalance.enable=false` keeps leaders.
    pub balance_partitions: bool,
}

/// What the `daemon` command line says; it wins over the file and the
/// environment.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub data_dir: Option<String>,
    pub admin_listen: Option<String>,
    pub destination: Option<String>,
}

/// A setting that is missing or wrong: `key` is as written in the TOML file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "INVALID_CONFIG: {}: {}", self.key, self.message)
    }
}

impl std::error::Error for SettingsError {}

fn err(key: impl Into<String>, message: impl Into<String>) -> SettingsError {
    SettingsError {
        key: key.into(),
        message: message.into(),
    }
}

/// The `KMIRROR_` variables that are settings. Other `KMIRROR_` variables
/// (the test bed's, the CLI's) are none of the daemon's business, so they
/// are left out rather than refused as unknown keys.
fn setting_vars(env: impl IntoIterator<Item = (String, String)>) -> config::Map<String, String> {
    env.into_iter()
        .filter(|(name, _)| {
            let Some(rest) = name.strip_prefix("KMIRROR_") else {
                return false;
            };
            let rest = rest.to_ascii_lowercase();
            rest.starts_with("destination__")
                || rest.starts_with("cluster__")
                || TOP_LEVEL_KEYS.contains(&rest.as_str())
        })
        .collect()
}

/// Loads and validates the settings. `env` is the process environment
/// (a parameter so tests do not depend on, or change, the real one).
pub fn load(
    overrides: &Overrides,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<DaemonSettings, SettingsError> {
    let mut builder = Config::builder();
    if let Some(path) = &overrides.config {
        if !path.is_file() {
            return Err(err(
                "--config",
                format!("{} does not exist or is not a file", path.display()),
            ));
        }
        builder = builder.add_source(File::from(path.as_path()).format(FileFormat::Toml));
    }
    builder = builder.add_source(
        Environment::with_prefix("KMIRROR")
            .prefix_separator("_")
            .separator("__")
            .source(Some(setting_vars(env))),
    );
    let flags = [
        ("data_dir", &overrides.data_dir),
        ("admin_listen", &overrides.admin_listen),
        ("destination.bootstrap_servers", &overrides.destination),
    ];
    for (key, value) in flags {
        if let Some(value) = value {
            builder = builder
                .set_override(key, value.as_str())
                .map_err(|e| err(key, e.to_string()))?;
        }
    }
    let table = builder
        .build()
        .and_then(|c| c.try_deserialize::<config::Map<String, Value>>())
        .map_err(|e| {
            let file = overrides
                .config
                .as_deref()
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_else(|| "settings".into());
            err(file, e.to_string())
        })?;
    from_table(table)
}

fn from_table(table: config::Map<String, Value>) -> Result<DaemonSettings, SettingsError> {
    for key in table.keys() {
        if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
            return Err(err(
                key,
                format!("unknown key; expected one of {}", TOP_LEVEL_KEYS.join(", ")),
            ));
        }
    }
    let string = |key: &str| -> Result<Option<String>, SettingsError> {
        match table.get(key) {
            None => Ok(None),
            Some(v) => text_of(key, v).map(|s| Some(s.trim().to_owned()).filter(|s| !s.is_empty())),
        }
    };

    let listen = string("admin_listen")?.unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into());
    let admin_listen = listen.parse::<SocketAddr>().map_err(|_| {
        err(
            "admin_listen",
            format!("`{listen}` is not an address like {DEFAULT_ADMIN_LISTEN}"),
        )
    })?;
    let admin_token = string("admin_token")?
        .map(|t| AdminToken::new(&t).map_err(|m| err("admin_token", m)))
        .transpose()?;
    let admin_tls = match (string("admin_tls_cert")?, string("admin_tls_key")?) {
        (None, None) => {
            if string("admin_tls_ca")?.is_some() {
                return Err(err(
                    "admin_tls_ca",
                    "needs admin_tls_cert and admin_tls_key (it is whom a TLS node trusts when it forwards to its peers)",
                ));
            }
            None
        }
        (Some(_), None) => return Err(err("admin_tls_key", "is required with admin_tls_cert")),
        (None, Some(_)) => return Err(err("admin_tls_cert", "is required with admin_tls_key")),
        (Some(cert), Some(key)) => {
            let server = admin_auth::server_config(Path::new(&cert), Path::new(&key))
                .map_err(|(key, message)| err(key, message))?;
            let (ca_key, ca) = match string("admin_tls_ca")? {
                Some(ca) => ("admin_tls_ca", ca),
                None => ("admin_tls_cert", cert),
            };
            let peers = admin_auth::client_config(Path::new(&ca)).map_err(|m| err(ca_key, m))?;
            Some(AdminTls {
                server: Arc::new(server),
                peers,
            })
        }
    };
    if !admin_listen.ip().is_loopback() && admin_token.is_none() && admin_tls.is_none() {
        return Err(err(
            "admin_listen",
            format!("{admin_listen} is not a loopback address: anyone who reaches it could stop mirrors; set admin_token (a bearer token) or admin_tls_cert and admin_tls_key, or listen on 127.0.0.1"),
        ));
    }
    let cluster = cluster_settings(table.get("cluster"), admin_listen, admin_tls.is_some())?;

    let data_dir = match string("data_dir")? {
        Some(dir) => PathBuf::from(dir),
        None if cluster.is_some() => PathBuf::new(),
        None => {
            return Err(err(
                "data_dir",
                "is required (in the config file, KMIRROR_DATA_DIR or --data-dir)",
            ))
        }
    };

    let log_format = match string("log_format")?.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(err(
                "log_format",
                format!("`{other}`: expected text or json"),
            ))
        }
    };

    let metadata_refresh_interval = match table.get("metadata_refresh_interval_ms") {
        None => None,
        Some(v) => {
            let key = "metadata_refresh_interval_ms";
            let ms = integer_of(key, v, "a number of milliseconds")?;
            if ms <= 0 {
                return Err(err(key, "must be > 0"));
            }
            Some(Duration::from_millis(ms as u64))
        }
    };

    let state_topic = match table.get("state_topic") {
        None => None,
        Some(v) => {
            let name = text_of("state_topic", v)?;
            // Kafka refuses "." and ".." as topic names too.
            let legal = !matches!(name.as_str(), "" | "." | "..")
                && name.len() <= 249
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !legal {
                return Err(err(
                    "state_topic",
                    format!("`{v}` is not a Kafka topic name (letters, digits, '.', '_', '-')"),
                ));
            }
            Some(name)
        }
    };
    let state_topic_partitions = match table.get("state_topic_num_partitions") {
        None => None,
        Some(v) => {
            let key = "state_topic_num_partitions";
            let n = integer_of(key, v, "a number")?;
            if !(1..=10_000).contains(&n) {
                return Err(err(key, "must be from 1 to 10000"));
            }
            Some(n as i32)
        }
    };

    let max_memory_bytes = match table.get("max_memory_bytes") {
        None => DEFAULT_MAX_MEMORY_BYTES,
        Some(v) => {
            let key = "max_memory_bytes";
            let n = integer_of(key, v, "a number of bytes")?;
            if n < MIN_MAX_MEMORY_BYTES {
                return Err(err(
                    key,
                    format!("{n} is below the smallest budget, {MIN_MAX_MEMORY_BYTES} (1 MiB)"),
                ));
            }
            usize::try_from(n).map_err(|_| err(key, format!("{n} is too large")))?
        }
    };

    let event_log_cache_bytes = match table.get("event_log_cache_bytes") {
        None => DEFAULT_EVENT_LOG_CACHE_BYTES,
        Some(v) => {
            let key = "event_log_cache_bytes";
            let n = integer_of(key, v, "a number of bytes")?;
            if n < MIN_EVENT_LOG_CACHE_BYTES {
                return Err(err(
                    key,
                    format!("{n} is below the smallest cache, {MIN_EVENT_LOG_CACHE_BYTES} (1 MiB)"),
                ));
            }
            n as u64
        }
    };

    let destination = destination_properties(table.get("destination"))?;

    Ok(DaemonSettings {
        data_dir,
        admin_listen,
        admin_token,
        admin_tls,
        destination,
        log_format,
        metadata_refresh_interval,
        state_topic,
        state_topic_partitions,
        cluster,
        max_memory_bytes,
        event_log_cache_bytes,
    })
}

/// A string setting. TOML strings only — an environment variable is always
/// one — because `data_dir = 5` or `admin_listen = 9650` is a mistake that
/// `config` would otherwise turn into the path `5` or the text "9650".
fn text_of(key: &str, v: &Value) -> Result<String, SettingsError> {
    match &v.kind {
        ValueKind::String(s) => Ok(s.clone()),
        _ => Err(err(key, format!("`{v}` is not a string; quote it"))),
    }
}

/// A whole-number setting: a TOML integer, or digits in a string (the
/// environment's form). `config` alone reads `true` as 1 and `1.5` as 2.
fn integer_of(key: &str, v: &Value, what: &str) -> Result<i64, SettingsError> {
    let n = match &v.kind {
        ValueKind::I64(n) => Some(*n),
        ValueKind::U64(n) => i64::try_from(*n).ok(),
        ValueKind::I128(n) => i64::try_from(*n).ok(),
        ValueKind::U128(n) => i64::try_from(*n).ok(),
        ValueKind::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    n.ok_or_else(|| err(key, format!("`{v}` is not {what}")))
}

fn cluster_settings(
    value: Option<&Value>,
    admin_listen: SocketAddr,
    admin_tls: bool,
) -> Result<Option<ClusterSettings>, SettingsError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let table = value
        .clone()
        .into_table()
        .map_err(|_| err("cluster", "must be a table ([cluster])"))?;
    if let Some(key) = table.keys().find(|k| !CLUSTER_KEYS.contains(&k.as_str())) {
        return Err(err(
            format!("cluster.{key}"),
            format!("unknown key; expected one of {}", CLUSTER_KEYS.join(", ")),
        ));
    }
    let text = |key: &str| -> Result<Option<String>, SettingsError> {
        table
            .get(key)
            .map(|v| text_of(&format!("cluster.{key}"), v).map(|s| s.trim().to_owned()))
            .transpose()
    };
    let number = |key: &str, default: i64, range: std::ops::RangeInclusive<i64>| {
        let Some(v) = table.get(key) else {
            return Ok(default);
        };
        let n = integer_of(&format!("cluster.{key}"), v, "a number")?;
        if !range.contains(&n) {
            return Err(err(
                format!("cluster.{key}"),
                format!("{n} is outside {}..={}", range.start(), range.end()),
            ));
        }
        Ok(n)
    };
    let id = text("id")?.unwrap_or_default();
    let legal = !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !legal {
        return Err(err(
            "cluster.id",
            format!("`{id}`: required, letters, digits, '.', '_' and '-' only"),
        ));
    }
    let scheme = if admin_tls { "https" } else { "http" };
    let advertised_url = text("advertised_url")?
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| format!("{scheme}://{admin_listen}"));
    if !advertised_url.starts_with(&format!("{scheme}://")) {
        return Err(err(
            "cluster.advertised_url",
            format!(
                "`{advertised_url}`: expected {scheme}://HOST:PORT (the admin API speaks {scheme})"
            ),
        ));
    }
    crate::http::BaseUrl::parse(&advertised_url).map_err(|e| err("cluster.advertised_url", e))?;
    // Peers forward requests to it: an unspecified address (the default
    // when admin_listen binds every interface) would send them to
    // themselves.
    let host = advertised_url[scheme.len() + 3..]
        .split('/')
        .next()
        .unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    if host
        .trim_matches(['[', ']'])
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return Err(err(
            "cluster.advertised_url",
            format!("`{advertised_url}`: an address other nodes cannot reach this one at (admin_listen binds every interface; set cluster.advertised_url to this node's reachable {scheme}://HOST:PORT)"),
        ));
    }
    let ms = |n: i64| Duration::from_millis(n as u64);
    let session = number("session_timeout_ms", 10_000, 1_000..=3_600_000)?;
    let heartbeat = number("heartbeat_interval_ms", 3_000, 100..=3_600_000)?;
    if heartbeat >= session {
        return Err(err(
            "cluster.heartbeat_interval_ms",
            format!("{heartbeat} must be below cluster.session_timeout_ms ({session})"),
        ));
    }
    let flag = |key: &str, default: bool| match table.get(key) {
        None => Ok(default),
        Some(v) => v
            .clone()
            .into_bool()
            .map_err(|_| err(format!("cluster.{key}"), "expected true or false")),
    };
    Ok(Some(ClusterSettings {
        spread_partitions: flag("spread_partitions", false)?,
        balance_partitions: flag("balance_partitions", true)?,
        id,
        advertised_url,
        capacity: number("capacity", 1, 1..=1_000)? as u32,
        session_timeout: ms(session),
        heartbeat_interval: ms(heartbeat),
        rebalance_timeout: ms(number("rebalance_timeout_ms", 60_000, 1_000..=3_600_000)?),
    }))
}

/// `[destination]` keys are Kafka's with `.` written as `_` (so that they
/// can be environment variables); a nested TOML table (`bootstrap.servers
/// = …` unquoted) is accepted too. The result is checked by the Kafka
/// client's own parser, whose errors are mapped back to our spelling.
fn destination_properties(
    value: Option<&Value>,
) -> Result<BTreeMap<String, String>, SettingsError> {
    let missing = || {
        err(
            "destination.bootstrap_servers",
            "is required (in [destination], KMIRROR_DESTINATION__BOOTSTRAP_SERVERS or --destination)",
        )
    };
    let Some(value) = value else {
        return Err(missing());
    };
    let table = value
        .clone()
        .into_table()
        .map_err(|_| err("destination", "must be a table of Kafka client properties"))?;
    let mut props = BTreeMap::new();
    flatten("", table, &mut props)?;
    if !props.contains_key("bootstrap.servers") {
        return Err(missing());
    }
    ClientConfig::from_properties(&props).map_err(|e| match e {
        KafkaError::Config { key, message } => {
            err(format!("destination.{}", key.replace('.', "_")), message)
        }
        other => err("destination", other.to_string()),
    })?;
    Ok(props)
}

fn flatten(
    prefix: &str,
    table: config::Map<String, Value>,
    out: &mut BTreeMap<String, String>,
) -> Result<(), SettingsError> {
    for (key, value) in table {
        let kafka_key = format!("{prefix}{}", key.replace('_', "."));
        if let ValueKind::Table(inner) = value.kind {
            flatten(&format!("{kafka_key}."), inner, out)?;
            continue;
        }
        let text = value.into_string().map_err(|e| {
            err(
                format!("destination.{}", kafka_key.replace('.', "_")),
                e.to_string(),
            )
        })?;
        out.insert(kafka_key, text);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("kmirror.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load_file(text: &str, env: &[(&str, &str)]) -> Result<DaemonSettings, SettingsError> {
        let dir = tempfile::tempdir().unwrap();
        let overrides = Overrides {
            config: Some(write(dir.path(), text)),
            ..Overrides::default()
        };
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        load(&overrides, env)
    }

    const GOOD: &str = r#"
data_dir = "/tmp/kmirror-data"
admin_listen = "127.0.0.1:9700"
log_format = "json"
metadata_refresh_interval_ms = 2000

[destination]
bootstrap_servers = "127.0.0.1:9092"
security_protocol = "PLAINTEXT"
request_timeout_ms = 15000
"#;

    #[test]
    fn a_full_file_loads() {
        let s = load_file(GOOD, &[]).unwrap();
        assert_eq!(s.data_dir, PathBuf::from("/tmp/kmirror-data"));
        assert_eq!(s.admin_listen, "127.0.0.1:9700".parse().unwrap());
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!(s.metadata_refresh_interval, Some(Duration::from_secs(2)));
        assert_eq!(s.destination["bootstrap.servers"], "127.0.0.1:9092");
        assert_eq!(s.destination["security.protocol"], "PLAINTEXT");
        assert_eq!(s.destination["request.timeout.ms"], "15000");
        assert_eq!(s.event_log_cache_bytes, DEFAULT_EVENT_LOG_CACHE_BYTES);
    }

    /// The environment's form is how scripts/bench measures sled's old
    /// 256 MiB cache against the default with one binary.
    #[test]
    fn the_event_log_cache_is_set_in_the_file_or_the_environment() {
        let file = format!("event_log_cache_bytes = 33554432\n{GOOD}");
        assert_eq!(
            load_file(&file, &[]).unwrap().event_log_cache_bytes,
            32 * 1024 * 1024
        );
        let s = load_file(GOOD, &[("KMIRROR_EVENT_LOG_CACHE_BYTES", "268435456")]).unwrap();
        assert_eq!(s.event_log_cache_bytes, 256 * 1024 * 1024);
    }

    #[test]
    fn environment_overrides_the_file_and_flags_override_both() {
        let env = [
            ("KMIRROR_DATA_DIR", "/env/data"),
            ("KMIRROR_ADMIN_LISTEN", "127.0.0.1:9800"),
            ("KMIRROR_DESTINATION__BOOTSTRAP_SERVERS", "127.0.0.1:1111"),
            // Not a setting: ignored, not refused.
            ("KMIRROR_BED_ENV", "/tmp/env"),
        ];
        let s = load_file(GOOD, &env).unwrap();
        assert_eq!(s.data_dir, PathBuf::from("/env/data"));
        assert_eq!(s.admin_listen.port(), 9800);
        assert_eq!(s.destination["bootstrap.servers"], "127.0.0.1:1111");

        let dir = tempfile::tempdir().unwrap();
        let overrides = Overrides {
            config: Some(write(dir.path(), GOOD)),
            data_dir: Some("/flag/data".into()),
            admin_listen: Some("127.0.0.1:9900".into()),
            destination: Some("127.0.0.1:2222".into()),
        };
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let s = load(&overrides, env).unwrap();
        assert_eq!(s.data_dir, PathBuf::from("/flag/data"));
        assert_eq!(s.admin_listen.port(), 9900);
        assert_eq!(s.destination["bootstrap.servers"], "127.0.0.1:2222");
        assert_eq!(s.destination["security.protocol"], "PLAINTEXT");
    }

    #[test]
    fn flags_alone_are_enough_and_defaults_apply() {
        let overrides = Overrides {
            data_dir: Some("/d".into()),
            destination: Some("127.0.0.1:9092".into()),
            ..Overrides::default()
        };
        let s = load(&overrides, []).unwrap();
        assert_eq!(s.admin_listen.to_string(), DEFAULT_ADMIN_LISTEN);
        assert_eq!(s.log_format, LogFormat::Text);
        assert_eq!(s.metadata_refresh_interval, None);
    }

    #[test]
    fn dotted_destination_keys_are_accepted() {
        let text = "data_dir = \"/d\"\n[destination]\nbootstrap.servers = \"127.0.0.1:9092\"\n";
        let s = load_file(text, &[]).unwrap();
        assert_eq!(s.destination["bootstrap.servers"], "127.0.0.1:9092");
    }

    fn key_of(text: &str) -> String {
        load_file(text, &[]).unwrap_err().key
    }

    #[test]
    fn every_error_names_its_key() {
        let dest = "[destination]\nbootstrap_servers = \"127.0.0.1:9092\"\n";
        assert_eq!(key_of(dest), "data_dir");
        assert_eq!(
            key_of("data_dir = \"/d\"\n"),
            "destination.bootstrap_servers"
        );
        assert_eq!(
            key_of(&format!(
                "data_dir = \"/d\"\nadmin_listen = \"nowhere\"\n{dest}"
            )),
            "admin_listen"
        );
        assert_eq!(
            key_of(&format!("data_dir = \"/d\"\nlog_format = \"xml\"\n{dest}")),
            "log_format"
        );
        assert_eq!(
            key_of(&format!(
                "data_dir = \"/d\"\nmetadata_refresh_interval_ms = \"soon\"\n{dest}"
            )),
            "metadata_refresh_interval_ms"
        );
        assert_eq!(
            key_of(&format!(
                "data_dir = \"/d\"\nmetadata_refresh_interval_ms = 0\n{dest}"
            )),
            "metadata_refresh_interval_ms"
        );
        assert_eq!(
            key_of(&format!("data_dir = \"/d\"\nadmin_port = 1\n{dest}")),
            "admin_port"
        );
        for bad in ["\"lots\"", "1000", "-1", "true", "6.5e7"] {
            assert_eq!(
                key_of(&format!(
                    "data_dir = \"/d\"\nmax_memory_bytes = {bad}\n{dest}"
                )),
                "max_memory_bytes"
            );
            assert_eq!(
                key_of(&format!(
                    "data_dir = \"/d\"\nevent_log_cache_bytes = {bad}\n{dest}"
                )),
                "event_log_cache_bytes"
            );
        }
        assert_eq!(
            key_of(&format!(
                "data_dir = \"/d\"\n{dest}security_protocol = \"TLS\"\n"
            )),
            "destination.security_protocol"
        );
        assert_eq!(
            key_of(&format!(
                "data_dir = \"/d\"\n{dest}bootstrap_serverz = \"x\"\n"
            )),
            "destination.bootstrap_serverz"
        );
        assert_eq!(
            key_of("data_dir = \"/d\"\n[destination]\nbootstrap_servers = \"no-port\"\n"),
            "destination.bootstrap_servers"
        );
    }

    #[test]
    fn a_cluster_section_makes_a_clustered_node() {
        let dest = "[destination]\nbootstrap_servers = \"127.0.0.1:9092\"\n";
        let s = load_file(
            &format!("admin_listen = \"127.0.0.1:9700\"\n{dest}[cluster]\nid = \"dr-1\"\n"),
            &[("KMIRROR_CLUSTER__CAPACITY", "2")],
        )
        .unwrap();
        let c = s.cluster.unwrap();
        assert_eq!(c.id, "dr-1");
        assert_eq!(c.advertised_url, "http://127.0.0.1:9700");
        assert_eq!(c.capacity, 2);
        assert_eq!(c.session_timeout, Duration::from_secs(10));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.rebalance_timeout, Duration::from_secs(60));
        let bad = |cluster: &str| key_of(&format!("{dest}[cluster]\n{cluster}"));
        assert_eq!(bad("id = \"a b\"\n"), "cluster.id");
        assert_eq!(bad("capacity = 1\n"), "cluster.id");
        assert_eq!(bad("id = \"x\"\nport = 1\n"), "cluster.port");
        assert_eq!(bad("id = \"x\"\ncapacity = 0\n"), "cluster.capacity");
        assert!(!c.spread_partitions, "off unless asked for");
        assert!(c.balance_partitions, "on unless turned off");
        assert_eq!(
            bad("id = \"x\"\nspread_partitions = \"sometimes\"\n"),
            "cluster.spread_partitions"
        );
        assert_eq!(
            bad("id = \"x\"\nbalance_partitions = \"often\"\n"),
            "cluster.balance_partitions"
        );
        let spread = load_file(
            &format!("admin_listen = \"127.0.0.1:9700\"\n{dest}[cluster]\nid = \"x\"\n"),
            &[("KMIRROR_CLUSTER__SPREAD_PARTITIONS", "true")],
        )
        .unwrap();
        assert!(spread.cluster.unwrap().spread_partitions);
        assert_eq!(
            bad("id = \"x\"\nheartbeat_interval_ms = 20000\n"),
            "cluster.heartbeat_interval_ms"
        );
        assert_eq!(
            bad("id = \"x\"\nadvertised_url = \"ftp://h\"\n"),
            "cluster.advertised_url"
        );
        assert_eq!(
            bad("id = \"x\"\nadvertised_url = \"http://\"\n"),
            "cluster.advertised_url"
        );
        assert_eq!(
            bad("id = \"x\"\nadvertised_url = \"http://[::]:9700\"\n"),
            "cluster.advertised_url"
        );
        // The default, admin_listen's address, when it binds everything.
        assert_eq!(
            key_of(&format!(
                "admin_listen = \"0.0.0.0:9700\"\nadmin_token = \"0123456789abcdef0123456789abcdef\"\n{dest}[cluster]\nid = \"x\"\n"
            )),
            "cluster.advertised_url"
        );
    }

    #[test]
    fn the_message_names_the_key() {
        let e = load_file("data_dir = \"/d\"\n", &[]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("INVALID_CONFIG: destination.bootstrap_servers: "),
            "{text}"
        );
    }

    #[test]
    fn a_missing_or_broken_file_is_named() {
        let overrides = Overrides {
            config: Some("/nonexistent/kmirror.toml".into()),
            ..Overrides::default()
        };
        assert_eq!(load(&overrides, []).unwrap_err().key, "--config");
        let e = load_file("data_dir = \n", &[]).unwrap_err();
        assert!(e.key.ends_with("kmirror.toml"), "{e}");
    }

    #[test]
    fn the_admin_api_leaves_loopback_only_behind_a_token_or_tls() {
        let dest = "data_dir = \"/d\"\n[destination]\nbootstrap_servers = \"127.0.0.1:9092\"\n";
        let open = format!("admin_listen = \"0.0.0.0:9650\"\n{dest}");
        let e = load_file(&open, &[]).unwrap_err();
        assert_eq!(e.key, "admin_listen", "{e}");
        assert!(e.message.contains("admin_token"), "{e}");
        let s = load_file(&open, &[("KMIRROR_ADMIN_TOKEN", "t0ken")]).unwrap();
        assert!(s.admin_token.unwrap().accepts(Some(b"Bearer t0ken")));
        assert!(load_file(&format!("admin_listen = \"[::1]:9650\"\n{dest}"), &[]).is_ok());
        assert_eq!(
            key_of(&format!("admin_tls_cert = \"/c.pem\"\n{dest}")),
            "admin_tls_key"
        );
        assert_eq!(
            key_of(&format!("admin_tls_key = \"/k.pem\"\n{dest}")),
            "admin_tls_cert"
        );
        assert_eq!(
            key_of(&format!("admin_tls_ca = \"/ca.pem\"\n{dest}")),
            "admin_tls_ca"
        );
        assert_eq!(
            key_of(&format!(
                "admin_tls_cert = \"/nonexistent/c.pem\"\nadmin_tls_key = \"/k.pem\"\n{dest}"
            )),
            "admin_tls_cert"
        );
        assert_eq!(
            key_of(&format!("admin_token = \"a b\"\n{dest}")),
            "admin_token"
        );
    }
}
