//! Bad input, with nothing changed (issue 16): every wrong setting, every
//! wrong mirror property, invalid patterns, unknown mirrors and topics,
//! malformed and oversized admin API bodies, a damaged, foreign or newer
//! data dir and one another daemon holds. Each must get a clear error
//! naming the problem, a non-zero exit or a 4xx — and change nothing: the
//! data dir's files (hashed), the event log (its end offset, read through
//! the API) and the clusters' topics (`kafka-topics --list`) are compared
//! before and after.
//!
//! The settings and the mirror properties are tables: a new key is a new
//! row.

mod common;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use common::*;
use kmirror_events::{MirrorConfig, MirrorConfigKey, Record, FORMAT_VERSION};
use kmirror_store::{EventLog, SledLog};
use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique};
use serde_json::Value;

/// `kmirror` run in `cwd` (so a relative path it wrongly accepts lands
/// where the test looks), with no `KMIRROR_` settings from outside.
fn kmirror_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(KMIRROR);
    cmd.args(args).current_dir(cwd).stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("KMIRROR_") && k != "KMIRROR_BED_ENV" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run kmirror")
}

/// Every file under `dir`, by relative path: its length and a hash of its
/// bytes. Equal before and after means nothing was written. sled's
/// `snap.*` files are left out: sled rewrites that cache of its page table
/// whenever it opens a database, before kmirror can read a byte, and it
/// holds no record.
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if name.starts_with("snap.") {
                continue;
            }
            if path.is_dir() {
                stack.push(path.clone());
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), (0, 0));
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let mut h = DefaultHasher::new();
                bytes.hash(&mut h);
                out.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    (bytes.len() as u64, h.finish()),
                );
            }
        }
    }
    out
}

/// A real event log in `dir` with one record, written and closed.
fn a_log(dir: &Path) {
    let log = SledLog::open(dir).unwrap();
    let config = MirrorConfig {
        source_bootstrap: "127.0.0.1:1".into(),
        topics_include: "orders".into(),
        source_cluster_id: "source-id".into(),
        ..MirrorConfig::default()
    };
    let key = MirrorConfigKey {
        mirror_name: "m".into(),
    };
    let log: Arc<dyn EventLog> = Arc::new(log);
    log.append(1, &[Record::MirrorConfig(key, Some(config))])
        .unwrap();
    drop(log);
}

// ---- the daemon's settings ----------------------------------------------

/// One wrong setting: the `section` it is in ("" for the top level), its
/// TOML line(s) — which replace the good file's line of the same key —
/// and the key the error must name.
struct Setting {
    section: &'static str,
    toml: &'static str,
    names: &'static str,
}

const fn row(section: &'static str, toml: &'static str, names: &'static str) -> Setting {
    Setting {
        section,
        toml,
        names,
    }
}

/// Every key of the daemon's TOML, wrong in type and in value, and
/// unknown keys at every level.
const SETTINGS: &[Setting] = &[
    row("", "data_dir = 5", "data_dir"),
    row("", "data_dir = true", "data_dir"),
    row("", "data_dir = [\"a\"]", "data_dir"),
    row("", "data_dir = \"\"", "data_dir"),
    row("", "admin_listen = \"everywhere\"", "admin_listen"),
    row("", "admin_listen = 9650", "admin_listen"),
    row("", "admin_listen = \"127.0.0.1:99999\"", "admin_listen"),
    row("", "log_format = \"xml\"", "log_format"),
    row("", "log_format = true", "log_format"),
    row(
        "",
        "metadata_refresh_interval_ms = \"soon\"",
        "metadata_refresh_interval_ms",
    ),
    row(
        "",
        "metadata_refresh_interval_ms = 0",
        "metadata_refresh_interval_ms",
    ),
    row(
        "",
        "metadata_refresh_interval_ms = -5",
        "metadata_refresh_interval_ms",
    ),
    row(
        "",
        "metadata_refresh_interval_ms = true",
        "metadata_refresh_interval_ms",
    ),
    row(
        "",
        "metadata_refresh_interval_ms = 1.5",
        "metadata_refresh_interval_ms",
    ),
    row(
        "",
        "metadata_refresh_interval_ms = [1]",
        "metadata_refresh_interval_ms",
    ),
    row("", "max_memory_bytes = 1000", "max_memory_bytes"),
    row("", "max_memory_bytes = \"lots\"", "max_memory_bytes"),
    row("", "max_memory_bytes = true", "max_memory_bytes"),
    row("", "max_memory_bytes = 6.5e7", "max_memory_bytes"),
    row("", "state_topic = \"no spaces\"", "state_topic"),
    row("", "state_topic = \"\"", "state_topic"),
    row("", "state_topic = \"..\"", "state_topic"),
    row("", "state_topic = 5", "state_topic"),
    row(
        "",
        "state_topic_num_partitions = 0",
        "state_topic_num_partitions",
    ),
    row(
        "",
        "state_topic_num_partitions = 10001",
        "state_topic_num_partitions",
    ),
    row(
        "",
        "state_topic_num_partitions = \"many\"",
        "state_topic_num_partitions",
    ),
    row(
        "",
        "state_topic_num_partitions = true",
        "state_topic_num_partitions",
    ),
    row(
        "",
        "state_topic_num_partitions = 2.5",
        "state_topic_num_partitions",
    ),
    row("", "colour = \"blue\"", "colour"),
    row("", "data-dir = \"/tmp/x\"", "data-dir"),
    row("", "destination = \"127.0.0.1:9092\"", "destination"),
    row("", "cluster = 5", "cluster"),
    row(
        "destination",
        "bootstrap_servers = \"\"",
        "destination.bootstrap_servers",
    ),
    row(
        "destination",
        "bootstrap_servers = \"no-port\"",
        "destination.bootstrap_servers",
    ),
    row(
        "destination",
        "bootstrap_servers = \"h:99999\"",
        "destination.bootstrap_servers",
    ),
    row(
        "destination",
        "bootstrap_servers = [\"h:1\"]",
        "destination.bootstrap_servers",
    ),
    row(
        "destination",
        "bootstrap_servers = true",
        "destination.bootstrap_servers",
    ),
    row(
        "destination",
        "security_protocol = \"TLS\"",
        "destination.security_protocol",
    ),
    row(
        "destination",
        "request_timeout_ms = \"soon\"",
        "destination.request_timeout_ms",
    ),
    row(
        "destination",
        "request_timeout_ms = 0",
        "destination.request_timeout_ms",
    ),
    row(
        "destination",
        "request_timeout_ms = -1",
        "destination.request_timeout_ms",
    ),
    row(
        "destination",
        "retry_backoff_ms = 1.5",
        "destination.retry_backoff_ms",
    ),
    row(
        "destination",
        "metadata_max_age_ms = true",
        "destination.metadata_max_age_ms",
    ),
    row(
        "destination",
        "security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"GSSAPI\"",
        "destination.sasl_mechanism",
    ),
    row(
        "destination",
        "security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"",
        "destination.sasl_password",
    ),
    row(
        "destination",
        "security_protocol = \"SSL\"\nssl_truststore_location = \"/nonexistent.pem\"",
        "destination.ssl_truststore_location",
    ),
    row("destination", "colour = \"blue\"", "destination.colour"),
    row("cluster", "id = \"no spaces\"", "cluster.id"),
    row("cluster", "id = 5", "cluster.id"),
    row(
        "cluster",
        "advertised_url = \"https://h:1\"",
        "cluster.advertised_url",
    ),
    row("cluster", "advertised_url = 5", "cluster.advertised_url"),
    row("cluster", "capacity = 0", "cluster.capacity"),
    row("cluster", "capacity = \"lots\"", "cluster.capacity"),
    row("cluster", "capacity = true", "cluster.capacity"),
    row(
        "cluster",
        "session_timeout_ms = 10",
        "cluster.session_timeout_ms",
    ),
    row(
        "cluster",
        "session_timeout_ms = 1.5",
        "cluster.session_timeout_ms",
    ),
    row(
        "cluster",
        "heartbeat_interval_ms = 20000",
        "cluster.heartbeat_interval_ms",
    ),
    row(
        "cluster",
        "rebalance_timeout_ms = -1",
        "cluster.rebalance_timeout_ms",
    ),
    row("cluster", "colour = \"blue\"", "cluster.colour"),
];

/// The good file, with `bad` in place of its key's line.
fn settings_file(data_dir: &Path, bad: &Setting) -> String {
    let key = |line: &str| line.split('=').next().unwrap_or("").trim().to_owned();
    let bad_keys: Vec<String> = bad.toml.lines().map(key).collect();
    let mut sections: Vec<(&str, Vec<String>)> = vec![
        (
            "",
            vec![
                format!("data_dir = \"{}\"", data_dir.display()),
                format!("admin_listen = \"127.0.0.1:{}\"", free_port()),
            ],
        ),
        (
            "destination",
            // Nothing listens: settings are refused before any connection.
            vec![format!("bootstrap_servers = \"127.0.0.1:{}\"", free_port())],
        ),
    ];
    if bad.section == "cluster" {
        sections.push(("cluster", vec!["id = \"c1\"".to_owned()]));
    }
    let mut text = String::new();
    for (name, lines) in &mut sections {
        if bad.section.is_empty() && bad_keys.iter().any(|k| k == name) {
            continue; // the bad line replaces the whole table
        }
        if bad.section == *name {
            lines.retain(|l| !bad_keys.contains(&key(l)));
            lines.extend(bad.toml.lines().map(str::to_owned));
        }
        if !name.is_empty() {
            text.push_str(&format!("[{name}]\n"));
        }
        for l in lines.iter() {
            text.push_str(l);
            text.push('\n');
        }
    }
    text
}

#[test]
fn every_wrong_setting_is_refused_naming_its_key_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    a_log(&data);
    let before = fingerprint(dir.path());
    let config = dir.path().join("kmirror.toml");
    for bad in SETTINGS {
        let text = settings_file(&data, bad);
        std::fs::write(&config, &text).unwrap();
        let out = kmirror_in(
            dir.path(),
            &["daemon", "--config", config.to_str().unwrap()],
            &[],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{text}\n{err}");
        assert!(
            err.starts_with("INVALID_CONFIG: ") && err.contains(bad.names),
            "`{}` should be refused naming `{}`, got: {err}",
            bad.toml,
            bad.names
        );
        std::fs::remove_file(&config).unwrap();
        assert_eq!(fingerprint(dir.path()), before, "after {text}");
    }
    // The same keys from the environment, where every value is a string.
    std::fs::write(&config, settings_file(&data, &row("", "", ""))).unwrap();
    for (var, value, names) in [
        (
            "KMIRROR_METADATA_REFRESH_INTERVAL_MS",
            "soon",
            "metadata_refresh_interval_ms",
        ),
        (
            "KMIRROR_STATE_TOPIC_NUM_PARTITIONS",
            "0",
            "state_topic_num_partitions",
        ),
        ("KMIRROR_LOG_FORMAT", "xml", "log_format"),
        (
            "KMIRROR_DESTINATION__REQUEST_TIMEOUT_MS",
            "-1",
            "destination.request_timeout_ms",
        ),
        ("KMIRROR_CLUSTER__CAPACITY", "0", "cluster"),
    ] {
        let out = kmirror_in(
            dir.path(),
            &["daemon", "--config", config.to_str().unwrap()],
            &[(var, value)],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(
            err.starts_with("INVALID_CONFIG: ") && err.contains(names),
            "{var}={value} should name `{names}`: {err}"
        );
    }
    std::fs::remove_file(&config).unwrap();
    assert_eq!(fingerprint(dir.path()), before);
    eprintln!(
        "{} wrong settings and 5 wrong variables refused, data dir unchanged",
        SETTINGS.len()
    );
}

// ---- the data dir ---------------------------------------------------------

/// Runs the daemon on `data` (nothing listens at its destination: the log
/// is opened first) and the read-only `kmirror log verify`; both must fail
/// naming `names`, and `data` must be unchanged.
fn refused_unchanged(cwd: &Path, data: &Path, names: &[&str]) {
    refused_dir(cwd, data, names, true)
}

/// [`refused_unchanged`], where `untouched` says whether the files must
/// be byte for byte the same afterwards.
fn refused_dir(cwd: &Path, data: &Path, names: &[&str], untouched: bool) {
    let before = fingerprint(data);
    let destination = format!("127.0.0.1:{}", free_port());
    let listen = format!("127.0.0.1:{}", free_port());
    let daemon = [
        "daemon",
        "--data-dir",
        data.to_str().unwrap(),
        "--destination",
        &destination,
        "--admin-listen",
        &listen,
    ];
    let verify = ["log", "verify", "--data-dir", data.to_str().unwrap()];
    for args in [&daemon[..], &verify[..]] {
        let out = kmirror_in(cwd, args, &[]);
        let err = stderr(&out);
        assert!(
            !out.status.success(),
            "{args:?} should fail: {}",
            stdout(&out)
        );
        for word in names {
            assert!(err.contains(word), "{args:?} should name `{word}`: {err}");
        }
        assert!(
            !err.contains("panicked"),
            "{args:?} panicked instead of refusing: {err}"
        );
        if untouched {
            let after = fingerprint(data);
            assert_eq!(after, before, "{args:?} changed {}", data.display());
        }
    }
}

#[test]
fn a_newer_format_in_the_data_dir_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    a_log(&data);
    {
        let db = kmirror_store::open_sled_waiting(&sled::Config::new().path(&data)).unwrap();
        db.insert(b"Mformat_version", &[FORMAT_VERSION + 1])
            .unwrap();
        db.flush().unwrap();
    }
    refused_unchanged(
        dir.path(),
        &data,
        &["newer kmirror", data.to_str().unwrap()],
    );
}

#[test]
fn a_foreign_data_dir_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // A directory of someone else's files (here: a Kafka log dir's).
    let foreign = dir.path().join("kafka-logs");
    std::fs::create_dir_all(foreign.join("orders-0")).unwrap();
    std::fs::write(foreign.join("meta.properties"), "node.id=1\nversion=1\n").unwrap();
    std::fs::write(foreign.join("orders-0/00000000000000000000.log"), [0u8; 64]).unwrap();
    refused_unchanged(dir.path(), &foreign, &[foreign.to_str().unwrap()]);

    // A file where the log's directory should be.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory\n").unwrap();
    refused_unchanged(dir.path(), &file, &[file.to_str().unwrap()]);

    // sled's own files replaced by foreign bytes.
    let data = dir.path().join("data");
    a_log(&data);
    std::fs::write(
        data.join("db"),
        b"PK\x03\x04 this is a zip, not a log".repeat(50),
    )
    .unwrap();
    refused_unchanged(dir.path(), &data, &[data.to_str().unwrap()]);
}

#[test]
fn a_truncated_log_is_refused() {
    // sled opened a cut `db` as an empty database: the daemon started over
    // with no mirrors, and `kmirror log` said "no records". Cut before its
    // first segment header, the file is refused untouched; cut inside the
    // segment, sled cuts its torn tail on opening (as after a crash, before
    // kmirror can look) and the log without its format marker is refused.
    for (cut, untouched) in [(0, true), (12, true), (100, false)] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        a_log(&data);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(data.join("db"))
            .unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let names = ["truncated", data.to_str().unwrap()];
        refused_dir(dir.path(), &data, &names, untouched);
    }
}

/// A batch of the log whose checksum fails is damage to acknowledged
/// records (sled writes each batch atomically, so a crash leaves none):
/// the daemon and `kmirror log verify` refuse it untouched, naming the
/// directory and the damage; only `kmirror log repair` cuts it. Before,
/// the daemon cut it on opening with a warning and ran on.
#[test]
fn a_damaged_tail_is_refused_untouched_and_cut_only_by_a_repair() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    a_log(&data);
    {
        let db = kmirror_store::open_sled_waiting(&sled::Config::new().path(&data)).unwrap();
        let (key, value) = db.range(&b"L"[..]..&b"M"[..]).last().unwrap().unwrap();
        let mut damaged = value.to_vec();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0xff;
        db.insert(key, damaged).unwrap();
        db.flush().unwrap();
    }
    refused_unchanged(dir.path(), &data, &["damaged", data.to_str().unwrap()]);
    let out = kmirror_in(
        dir.path(),
        &["log", "repair", "--data-dir", data.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("REPAIRED: cut 1 damaged records (82 bytes) from offset 0"),
        "{}",
        stdout(&out)
    );
    let out = kmirror_in(
        dir.path(),
        &["log", "verify", "--data-dir", data.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", stdout(&out));
}

/// A `--destination-config` that cannot be read is named with its flag
/// (the error said only "No such file or directory").
#[test]
fn a_missing_destination_config_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    a_log(&data);
    let out = kmirror_in(
        dir.path(),
        &[
            "log",
            "verify",
            "--data-dir",
            data.to_str().unwrap(),
            "--destination",
            "127.0.0.1:1",
            "--destination-config",
            "/nonexistent/destination.properties",
        ],
        &[],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--destination-config /nonexistent/destination.properties"),
        "{err}"
    );
}

// ---- a running daemon: properties, patterns, names, bodies ---------------

/// One wrong mirror property: its line and what the error must name.
const PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers=", "bootstrap.servers"),
    ("bootstrap.servers=no-port", "bootstrap.servers"),
    ("security.protocol=TLS", "security.protocol"),
    ("request.timeout.ms=soon", "request.timeout.ms"),
    ("request.timeout.ms=0", "request.timeout.ms"),
    ("retry.backoff.ms=-1", "retry.backoff.ms"),
    (
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI",
        "sasl.mechanism",
    ),
    (
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u",
        "sasl.password",
    ),
    (
        "security.protocol=SSL\nssl.truststore.location=/nonexistent.pem",
        "ssl.truststore.location",
    ),
    ("colour=blue", "colour"),
    ("mirror.topics.include=([", "mirror.topics.include"),
    ("mirror.topics.exclude=([", "mirror.topics.exclude"),
    ("mirror.groups.include=([", "mirror.groups.include"),
    ("mirror.groups.exclude=([", "mirror.groups.exclude"),
    (
        "mirror.groups.sync.interval.ms=soon",
        "mirror.groups.sync.interval.ms",
    ),
    (
        "mirror.verify.interval.ms=soon",
        "mirror.verify.interval.ms",
    ),
    (
        "mirror.risk.refresh.interval.ms=soon",
        "mirror.risk.refresh.interval.ms",
    ),
    (
        "mirror.retention.margin.ms=soon",
        "mirror.retention.margin.ms",
    ),
    (
        "mirror.failed.retry.max.attempts=many",
        "mirror.failed.retry.max.attempts",
    ),
    (
        "mirror.failed.retry.initial.backoff.ms=-1",
        "mirror.failed.retry.initial.backoff.ms",
    ),
    (
        "mirror.failed.retry.max.backoff.ms=soon",
        "mirror.failed.retry.max.backoff.ms",
    ),
    (
        "mirror.failback.divergent.tail=sideways",
        "mirror.failback.divergent.tail",
    ),
    (
        "mirror.failback.quarantine.suffix=no spaces",
        "mirror.failback.quarantine.suffix",
    ),
    (
        "mirror.support.unclean.leader.election=maybe",
        "mirror.support.unclean.leader.election",
    ),
    ("mirror.colour=blue", "mirror.colour"),
    ("topic.properties.exclude=([", "topic.properties.exclude"),
    ("acls.include=CLUSTER;x", "acls.include"),
];

/// What bad input must leave alone: the event log's end, the mirrors, and
/// the topics on both clusters.
#[derive(Debug, PartialEq)]
struct World {
    state_offset: String,
    mirrors: String,
    source_topics: Vec<String>,
    destination_topics: Vec<String>,
}

fn topics(bootstrap: &str) -> Vec<String> {
    kafka_tool_ok("kafka-topics", &["--bootstrap-server", bootstrap, "--list"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn world(daemon: &Daemon) -> World {
    let (status, state_offset) = daemon.http("GET", "/state-offset", None);
    assert_eq!(status, 200, "{state_offset}");
    let (status, mirrors) = daemon.http("GET", "/mirrors", None);
    assert_eq!(status, 200, "{mirrors}");
    World {
        state_offset,
        mirrors,
        source_topics: topics(&bed().source),
        destination_topics: topics(&bed().destination),
    }
}

/// Asserts a CLI refusal: non-zero, `CODE: ` first, `word` named.
fn refused(daemon: &Daemon, args: &[&str], code: &str, word: &str) {
    let out = daemon.cli(args);
    assert!(
        !out.status.success(),
        "{args:?} succeeded: {}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("{code}: ")) && err.contains(word),
        "{args:?} should fail with {code} naming `{word}`: {err}"
    );
}

#[test]
fn bad_requests_to_a_running_daemon_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let topic = unique("bad");
    create_topic(&bed().source, &topic, 1, &[]);
    produce(&topic, 0, 10);
    let props = write_properties(dir.path());
    daemon.mirror_topics("m", &props, &topic);
    wait_for("10 records mirrored", || {
        records_on(&bed().destination, &topic) == 10
    });
    // Settled: no checkpoint, sync or verify record is still on its way.
    let mut before = world(&daemon);
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = world(&daemon);
        if now == before {
            break;
        }
        before = now;
    }

    // Every wrong mirror property, through the CLI.
    let file = dir.path().join("bad.properties");
    for (line, names) in PROPERTIES {
        let text = if line.starts_with("bootstrap.servers=") {
            format!("{line}\n")
        } else {
            format!("bootstrap.servers={}\n{line}\n", bed().source)
        };
        std::fs::write(&file, text).unwrap();
        let args = [
            "mirror",
            "create",
            "--mirror",
            "bad",
            "--mirror-config",
            file.to_str().unwrap(),
        ];
        let out = daemon.cli(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "`{line}` was accepted");
        assert!(
            err.starts_with("INVALID_CONFIG: ") && err.contains(names),
            "`{line}` should be INVALID_CONFIG naming `{names}`: {err}"
        );
    }
    assert_eq!(world(&daemon), before, "after the wrong properties");

    // Invalid patterns, unknown mirrors and topics.
    let start = ["mirror", "start", "--mirror", "m", "--topics"];
    refused(
        &daemon,
        &[&start[..], &["(["]].concat(),
        "INVALID_CONFIG",
        "([",
    );
    refused(
        &daemon,
        &[&start[..], &[topic.as_str(), "--exclude", "*x"]].concat(),
        "INVALID_CONFIG",
        "*x",
    );
    for verb in ["start", "stop", "pause", "resume", "recover"] {
        let args = ["mirror", verb, "--mirror", "nope", "--topics", &topic];
        refused(&daemon, &args, "UNKNOWN_CLUSTER_MIRROR", "nope");
    }
    refused(
        &daemon,
        &["mirror", "delete", "--mirror", "nope"],
        "UNKNOWN_CLUSTER_MIRROR",
        "nope",
    );
    refused(
        &daemon,
        &["mirror", "describe", "--mirror", "nope"],
        "UNKNOWN_CLUSTER_MIRROR",
        "nope",
    );
    for verb in ["stop", "pause", "resume"] {
        let args = ["mirror", verb, "--mirror", "m", "--topics", "no-such-topic"];
        refused(
            &daemon,
            &args,
            "TOPIC_NOT_IN_CLUSTER_MIRROR",
            "no-such-topic",
        );
    }
    let translate = |mirror: &str, topic: &str, partition: &str| {
        [
            "offsets",
            "translate",
            "--mirror",
            mirror,
            "--topic",
            topic,
            "--partition",
            partition,
            "--offset",
            "0",
        ]
        .map(str::to_owned)
    };
    let t = translate("nope", &topic, "0");
    refused(
        &daemon,
        &t.each_ref().map(String::as_str),
        "UNKNOWN_CLUSTER_MIRROR",
        "nope",
    );
    let t = translate("m", "no-such-topic", "0");
    refused(
        &daemon,
        &t.each_ref().map(String::as_str),
        "TOPIC_NOT_IN_CLUSTER_MIRROR",
        "no-such-topic",
    );
    let t = translate("m", &topic, "7");
    refused(
        &daemon,
        &t.each_ref().map(String::as_str),
        "UNKNOWN_TOPIC_OR_PARTITION",
        "7",
    );
    assert_eq!(world(&daemon), before, "after bad names and patterns");

    // Malformed and oversized bodies on every route that reads one.
    for route in [
        "/mirrors",
        "/mirrors/m/start",
        "/mirrors/m/stop",
        "/mirrors/m/verify",
    ] {
        for body in [
            "{",
            "[]",
            "null",
            "{\"topics\": 5}",
            "\u{0}",
            "{\"name\":\"m\"}x",
        ] {
            let (status, answer) = daemon.http("POST", route, Some(body));
            assert_eq!(status, 400, "POST {route} {body:?}: {answer}");
            let json: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(json["error"], "INVALID_REQUEST", "{answer}");
        }
        let huge = format!("{{\"name\":\"{}\"}}", "x".repeat(2 << 20));
        let (status, answer) = daemon.http("POST", route, Some(&huge));
        assert_eq!(status, 413, "POST {route} with 2 MiB: {answer}");
        assert!(answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");
    }
    assert_eq!(world(&daemon), before, "after bad bodies");

    // A second daemon on the same data dir: refused, the first unharmed.
    let out = kmirror_in(
        dir.path(),
        &[
            "daemon",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--destination",
            &bed().destination,
            "--admin-listen",
            &format!("127.0.0.1:{}", free_port()),
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("INVALID_CONFIG: data_dir: ") && err.contains("another process"),
        "{err}"
    );
    assert_eq!(world(&daemon), before, "after a second daemon");
    eprintln!(
        "{} wrong properties, 15 bad names and patterns, 28 bad bodies and a second daemon: \
         state offset {}, mirrors and topics unchanged",
        PROPERTIES.len(),
        before.state_offset.trim()
    );
    assert_eq!(daemon.terminate().code(), Some(0));
}
