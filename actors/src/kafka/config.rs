//! Client configuration from Kafka's own client property names.
//!
//! Operators already know `bootstrap.servers`, `security.protocol`,
//! `sasl.jaas.config`, … from every Kafka tool; accepting the same keys means a
//! mirror's source/destination section can be pasted from an existing
//! `client.properties`. Every error names the offending key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kmirror_events::ExponentialBackoff;

use super::error::{KafkaError, Result};
use super::tls::TlsConfig;

/// How bytes travel to the broker (`security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// Plain TCP.
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether the transport is TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
    /// Whether SASL authentication runs after connecting.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// SASL mechanism (`sasl.mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// RFC 4616 PLAIN.
    Plain,
    /// RFC 5802 SCRAM with SHA-256.
    ScramSha256,
    /// RFC 5802 SCRAM with SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism name as Kafka spells it.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL settings.
#[derive(Clone)]
pub struct SaslConfig {
    /// Mechanism.
    pub mechanism: SaslMechanism,
    /// User name.
    pub username: String,
    /// Password (never printed by `Debug`).
    pub password: String,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Everything a [`super::KafkaClient`] needs, with Kafka's defaults.
#[derive(Clone)]
pub struct ClientConfig {
    /// `bootstrap.servers` as `host:port` strings.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`.
    pub client_id: String,
    /// `security.protocol`.
    pub security_protocol: SecurityProtocol,
    /// Present when `security.protocol` is SASL_*.
    pub sasl: Option<SaslConfig>,
    /// Present when `security.protocol` is SSL or SASL_SSL: built (PEM
    /// parsed, certificates checked) once, shared by every connection.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `request.timeout.ms`: every broker call is bounded by this.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`: TCP + TLS + ApiVersions + SASL.
    pub connect_timeout: Duration,
    /// `reconnect.backoff.ms`.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`.
    pub reconnect_backoff_max: Duration,
    /// `retry.backoff.ms`.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`.
    pub retry_backoff_max: Duration,
    /// `metadata.max.age.ms`: the metadata refresh timer.
    pub metadata_max_age: Duration,
    /// `delivery.timeout.ms`: how long the producer retries one batch.
    pub delivery_timeout: Duration,
    /// Advertised `host:port` → the address to actually dial. For brokers
    /// reached through a tunnel or port-forward whose advertised listeners
    /// are not routable from here (and for fault-injecting proxies in tests).
    /// Not a Kafka client key; set programmatically.
    pub address_map: BTreeMap<String, String>,
    /// Where backoff jitter comes from; set programmatically.
    pub jitter: Jitter,
}

/// The source of backoff jitter: uniform samples in `[0, 1)`. Injected so
/// that tests can make every delay exact; `rand::random` by default.
pub type Jitter = Arc<dyn Fn() -> f64 + Send + Sync>;

/// By hand because rustls's own `Debug` would dump the whole trust store:
/// whether TLS is on is what a log reader needs.
impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("client_id", &self.client_id)
            .field("security_protocol", &self.security_protocol)
            .field("sasl", &self.sasl)
            .field("tls", &self.tls.is_some())
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_backoff", &self.reconnect_backoff)
            .field("reconnect_backoff_max", &self.reconnect_backoff_max)
            .field("retry_backoff", &self.retry_backoff)
            .field("retry_backoff_max", &self.retry_backoff_max)
            .field("metadata_max_age", &self.metadata_max_age)
            .field("delivery_timeout", &self.delivery_timeout)
            .field("address_map", &self.address_map)
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap_servers: Vec::new(),
            client_id: "kmirror".to_owned(),
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            tls: None,
            request_timeout: Duration::from_millis(30_000),
            connect_timeout: Duration::from_millis(10_000),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1_000),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(1_000),
            metadata_max_age: Duration::from_millis(300_000),
            delivery_timeout: Duration::from_millis(120_000),
            address_map: BTreeMap::new(),
            jitter: Arc::new(rand::random),
        }
    }
}

/// Keys that are Kafka client keys we deliberately ignore (they tune the Java
/// client's internals and have no meaning here). Unknown keys are an error so a
/// typo is not silently dropped.
const IGNORED_KEYS: &[&str] = &[
    "acks",
    "enable.idempotence",
    "max.in.flight.requests.per.connection",
    "linger.ms",
    "batch.size",
    "compression.type",
    "key.serializer",
    "value.serializer",
    "key.deserializer",
    "value.deserializer",
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "client.dns.lookup",
    "connections.max.idle.ms",
    "send.buffer.bytes",
    "receive.buffer.bytes",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
    "ssl.secure.random.implementation",
    "ssl.trustmanager.algorithm",
    "ssl.keymanager.algorithm",
    "sasl.login.class",
    "sasl.client.callback.handler.class",
    "isolation.level",
];

impl ClientConfig {
    /// A plaintext config for the given bootstrap string (tests, tools).
    pub fn plaintext(bootstrap: &str) -> Self {
        ClientConfig {
            bootstrap_servers: split_servers(bootstrap),
            ..ClientConfig::default()
        }
    }

    /// The wait before retry number `attempt` (0-based: attempt 0 waits
    /// `retry.backoff.ms`), doubling up to `retry.backoff.max.ms`, ±20%.
    pub fn retry_delay(&self, attempt: u32) -> Duration {
        ExponentialBackoff::doubling(self.retry_backoff, self.retry_backoff_max)
            .delay(attempt, (self.jitter)())
    }

    /// The wait before reconnecting after `failures` failed attempts, from
    /// `reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms`, ±20%.
    pub fn reconnect_delay(&self, failures: u32) -> Duration {
        ExponentialBackoff::doubling(self.reconnect_backoff, self.reconnect_backoff_max)
            .delay(failures, (self.jitter)())
    }

    /// Parses Kafka client properties. Errors name the key at fault.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Self> {
        let mut cfg = ClientConfig::default();
        let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        for key in props.keys() {
            if !is_known_key(key) {
                return Err(KafkaError::config(
                    key,
                    "unknown or unsupported client property",
                ));
            }
        }
        let bootstrap = get("bootstrap.servers")
            .ok_or_else(|| KafkaError::config("bootstrap.servers", "is required"))?;
        cfg.bootstrap_servers = split_servers(bootstrap);
        for s in &cfg.bootstrap_servers {
            parse_host_port(s).map_err(|m| KafkaError::config("bootstrap.servers", m))?;
        }
        if let Some(id) = get("client.id") {
            cfg.client_id = id.to_owned();
        }
        let ms = |key: &str, default: Duration| -> Result<Duration> {
            match get(key) {
                None => Ok(default),
                Some(v) => v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
                    KafkaError::config(key, format!("`{v}` is not a number of milliseconds"))
                }),
            }
        };
        cfg.request_timeout = ms("request.timeout.ms", cfg.request_timeout)?;
        cfg.connect_timeout = ms("socket.connection.setup.timeout.ms", cfg.connect_timeout)?;
        cfg.reconnect_backoff = ms("reconnect.backoff.ms", cfg.reconnect_backoff)?;
        cfg.reconnect_backoff_max = ms("reconnect.backoff.max.ms", cfg.reconnect_backoff_max)?;
        cfg.retry_backoff = ms("retry.backoff.ms", cfg.retry_backoff)?;
        cfg.retry_backoff_max = ms("retry.backoff.max.ms", cfg.retry_backoff_max)?;
        cfg.metadata_max_age = ms("metadata.max.age.ms", cfg.metadata_max_age)?;
        cfg.delivery_timeout = ms("delivery.timeout.ms", cfg.delivery_timeout)?;
        if cfg.request_timeout.is_zero() {
            return Err(KafkaError::config("request.timeout.ms", "must be > 0"));
        }

        cfg.security_protocol = match get("security.protocol")
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("PLAINTEXT") => SecurityProtocol::Plaintext,
            Some("SSL") => SecurityProtocol::Ssl,
            Some("SASL_PLAINTEXT") => SecurityProtocol::SaslPlaintext,
            Some("SASL_SSL") => SecurityProtocol::SaslSsl,
            Some(other) => {
                return Err(KafkaError::config(
                    "security.protocol",
                    format!("`{other}`: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
                ))
            }
        };

        if cfg.security_protocol.uses_sasl() {
            let mechanism = match get("sasl.mechanism").map(str::to_ascii_uppercase).as_deref() {
                None | Some("GSSAPI") => {
                    return Err(KafkaError::config(
                        "sasl.mechanism",
                        "must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (GSSAPI, Kafka's default, is not supported)",
                    ))
                }
                Some("PLAIN") => SaslMechanism::Plain,
                Some("SCRAM-SHA-256") => SaslMechanism::ScramSha256,
                Some("SCRAM-SHA-512") => SaslMechanism::ScramSha512,
                Some(other) => {
                    return Err(KafkaError::config(
                        "sasl.mechanism",
                        format!("`{other}` is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
                    ))
                }
            };
            let (username, password) = match (get("sasl.username"), get("sasl.password")) {
                (Some(u), Some(p)) => (u.to_owned(), p.to_owned()),
                (Some(_), None) => {
                    return Err(KafkaError::config(
                        "sasl.password",
                        "is required with sasl.username",
                    ))
                }
                (None, Some(_)) => {
                    return Err(KafkaError::config(
                        "sasl.username",
                        "is required with sasl.password",
                    ))
                }
                (None, None) => {
                    let jaas = get("sasl.jaas.config").ok_or_else(|| {
                        KafkaError::config(
                            "sasl.jaas.config",
                            "is required (or sasl.username and sasl.password)",
                        )
                    })?;
                    parse_jaas(jaas, mechanism)?
                }
            };
            cfg.sasl = Some(SaslConfig {
                mechanism,
                username,
                password,
            });
        }

        if cfg.security_protocol.uses_tls() {
            let mut tls = TlsConfig {
                verify_hostname: true,
                ..TlsConfig::default()
            };
            if let Some(alg) = props.get("ssl.endpoint.identification.algorithm") {
                tls.verify_hostname = match alg.trim().to_ascii_lowercase().as_str() {
                    "" => false,
                    "https" => true,
                    other => {
                        return Err(KafkaError::config(
                            "ssl.endpoint.identification.algorithm",
                            format!("`{other}`: expected `https` or empty"),
                        ))
                    }
                };
            }
            for key in ["ssl.truststore.type", "ssl.keystore.type"] {
                if let Some(t) = get(key) {
                    if !t.eq_ignore_ascii_case("PEM") {
                        return Err(KafkaError::config(
                            key,
                            format!("`{t}`: only PEM is supported"),
                        ));
                    }
                }
            }
            if get("ssl.key.password").is_some() || get("ssl.keystore.password").is_some() {
                let key = if get("ssl.key.password").is_some() {
                    "ssl.key.password"
                } else {
                    "ssl.keystore.password"
                };
                return Err(KafkaError::config(
                    key,
                    "encrypted PEM keys are not supported; use an unencrypted key",
                ));
            }
            if let Some(pem) = get("ssl.truststore.certificates") {
                tls.trusted_certs_pem = pem.as_bytes().to_vec();
            } else if let Some(path) = get("ssl.truststore.location") {
                tls.trusted_certs_pem = read_file("ssl.truststore.location", path)?;
            }
            if let Some(chain) = get("ssl.keystore.certificate.chain") {
                let key = get("ssl.keystore.key").ok_or_else(|| {
                    KafkaError::config(
                        "ssl.keystore.key",
                        "is required with ssl.keystore.certificate.chain",
                    )
                })?;
                tls.client_cert_chain_pem = Some(chain.as_bytes().to_vec());
                tls.client_key_pem = Some(key.as_bytes().to_vec());
            } else if let Some(path) = get("ssl.keystore.location") {
                let pem = read_file("ssl.keystore.location", path)?;
                tls.client_key_pem = Some(pem.clone());
                tls.client_cert_chain_pem = Some(pem);
            }
            cfg.tls = Some(tls.build()?);
        }
        Ok(cfg)
    }
}

fn is_known_key(key: &str) -> bool {
    const KNOWN: &[&str] = &[
        "bootstrap.servers",
        "client.id",
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.endpoint.identification.algorithm",
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "metadata.max.age.ms",
        "delivery.timeout.ms",
    ];
    KNOWN.contains(&key) || IGNORED_KEYS.contains(&key)
}

fn read_file(key: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| KafkaError::config(key, format!("cannot read `{path}`: {e}")))
}

fn split_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Splits `host:port` (IPv6 as `[::1]:9092`).
pub(crate) fn parse_host_port(s: &str) -> std::result::Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}` is not host:port"))?;
    let port: u16 = port.parse().map_err(|_| format!("`{s}`: bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{s}`: empty host"));
    }
    Ok((host.to_owned(), port))
}

/// Extracts username and password from a JAAS line such as
/// `org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";`.
fn parse_jaas(jaas: &str, mechanism: SaslMechanism) -> Result<(String, String)> {
    let key = "sasl.jaas.config";
    let mut words = jaas.split_whitespace();
    let module = words
        .next()
        .ok_or_else(|| KafkaError::config(key, "empty"))?;
    let expected = match mechanism {
        SaslMechanism::Plain => "org.apache.kafka.common.security.plain.PlainLoginModule",
        _ => "org.apache.kafka.common.security.scram.ScramLoginModule",
    };
    if module != expected {
        return Err(KafkaError::config(
            key,
            format!(
                "login module `{module}` does not match sasl.mechanism {} (expected {expected})",
                mechanism.name()
            ),
        ));
    }
    let rest = jaas[jaas.find(module).unwrap() + module.len()..].trim();
    let rest = rest
        .strip_prefix("required")
        .ok_or_else(|| KafkaError::config(key, "expected `required` after the login module"))?;
    let mut opts = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some(';') => break,
            _ => {}
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            name.push(c);
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(KafkaError::config(
                key,
                format!("expected `=` after option `{name}`"),
            ));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => {
                        return Err(KafkaError::config(
                            key,
                            format!("unterminated quote in option `{name}`"),
                        ))
                    }
                    Some('\\') => {
                        if let Some(c) = chars.next() {
                            value.push(c)
                        }
                    }
                    Some('"') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == ';' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        opts.insert(name, value);
    }
    let username = opts
        .remove("username")
        .ok_or_else(|| KafkaError::config(key, "missing username=\"…\""))?;
    let password = opts
        .remove("password")
        .ok_or_else(|| KafkaError::config(key, "missing password=\"…\""))?;
    Ok((username, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plaintext_defaults() {
        let c = ClientConfig::from_properties(&props(&[(
            "bootstrap.servers",
            "127.0.0.1:9092, 127.0.0.1:9093",
        )]))
        .unwrap();
        assert_eq!(
            c.bootstrap_servers,
            vec!["127.0.0.1:9092", "127.0.0.1:9093"]
        );
        assert_eq!(c.security_protocol, SecurityProtocol::Plaintext);
        assert_eq!(c.request_timeout, Duration::from_secs(30));
    }

    #[test]
    fn errors_name_the_key() {
        let e = ClientConfig::from_properties(&props(&[])).unwrap_err();
        assert!(
            matches!(e, KafkaError::Config { ref key, .. } if key == "bootstrap.servers"),
            "{e}"
        );
        let e = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("request.timeout.ms", "x"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("request.timeout.ms"), "{e}");
        let e = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("securty.protocol", "SSL"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("securty.protocol"), "{e}");
        let e = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("sasl.mechanism"), "{e}");
        let e = ClientConfig::from_properties(&props(&[("bootstrap.servers", "nohostport")]))
            .unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"), "{e}");
    }

    #[test]
    fn jaas_scram() {
        let c = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p a\"ss";"#,
            ),
        ]))
        .unwrap();
        let s = c.sasl.unwrap();
        assert_eq!(s.mechanism, SaslMechanism::ScramSha512);
        assert_eq!(s.username, "alice");
        assert_eq!(s.password, "p a\"ss");
        assert!(!format!("{s:?}").contains("p a"));
    }

    #[test]
    fn jaas_module_mismatch() {
        let e = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";"#,
            ),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("sasl.jaas.config"), "{e}");
    }

    #[test]
    fn truststore_must_be_pem() {
        let e = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("security.protocol", "SSL"),
            ("ssl.truststore.type", "JKS"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("ssl.truststore.type"), "{e}");
    }

    #[test]
    fn backoffs_follow_kafka_keys_with_injected_jitter() {
        let c = ClientConfig {
            jitter: Arc::new(|| 0.5),
            ..ClientConfig::default()
        };
        let ms = |d: Duration| d.as_millis();
        assert_eq!(
            ms(c.retry_delay(0)),
            100,
            "attempt 0 waits retry.backoff.ms"
        );
        assert_eq!((ms(c.retry_delay(1)), ms(c.retry_delay(9))), (200, 1_000));
        assert_eq!(
            (ms(c.reconnect_delay(0)), ms(c.reconnect_delay(2))),
            (50, 200)
        );
        let low = ClientConfig {
            jitter: Arc::new(|| 0.0),
            ..c
        };
        assert_eq!(ms(low.retry_delay(0)), 80);
    }

    #[test]
    fn tls_is_built_at_parse_time_and_errors_name_the_key() {
        for pem in [None, Some("not a certificate")] {
            let mut p = props(&[("bootstrap.servers", "h:1"), ("security.protocol", "SSL")]);
            if let Some(pem) = pem {
                p.insert("ssl.truststore.certificates".into(), pem.into());
            }
            let e = ClientConfig::from_properties(&p).unwrap_err();
            assert!(
                matches!(e, KafkaError::Config { ref key, .. } if key == "ssl.truststore.location"),
                "{e}"
            );
        }
    }
}
