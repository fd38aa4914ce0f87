//! What the clustered daemon's tests share: a node of a cluster, and the
//! cluster's own view of itself (`/cluster`).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use kmirror_events::coordinator_partition;
use kmirror_tests::kafka_script;
use serde_json::Value;

use super::{free_port, ChildGuard, Daemon};

/// Few state partitions: every shard a node acquires is fenced and loaded.
pub const SHARDS: i32 = 6;
/// The group's session timeout: how long a dead node keeps its shards.
pub const SESSION_MS: u64 = 6000;

/// A node of cluster `cluster` on `destination`, its state in `state_topic`.
pub fn start_node(dir: &Path, destination: &str, cluster: &str, state_topic: &str) -> Daemon {
    let port = free_port();
    let text = format!(
        "admin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\nstate_topic = \"{state_topic}\"\nstate_topic_num_partitions = {SHARDS}\n[destination]\nbootstrap_servers = \"{destination}\"\n[cluster]\nid = \"{cluster}\"\nsession_timeout_ms = {SESSION_MS}\nheartbeat_interval_ms = 1000\n"
    );
    Daemon::start_config(dir, port, &text)
}

/// The last `lines` lines of a node's log below DEBUG, oldest first: what a
/// failed timing assertion prints, so a flake in CI can be read afterwards.
pub fn log_tail(dir: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    let kept: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("\"level\":\"DEBUG\"") && !l.contains("\"level\":\"TRACE\""))
        .collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

/// The JSON a GET answers with 200, or None.
pub fn json(daemon: &Daemon, path: &str) -> Option<Value> {
    match daemon.try_http("GET", path, None) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Every shard owned, by `members` members, as `daemon` sees it — and
/// loaded: a shard answers COORDINATOR_LOAD_IN_PROGRESS until its log is
/// fenced and read, and the fan-out of `/mirrors` reaches every shard.
pub fn settled(daemon: &Daemon, members: usize) -> bool {
    let Some(status) = json(daemon, "/cluster") else {
        return false;
    };
    let listed = status["members"].as_array().cloned().unwrap_or_default();
    let owned: BTreeSet<i64> = listed
        .iter()
        .flat_map(|m| m["shards"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s.as_i64())
        .collect();
    listed.len() == members
        && owned == (0..SHARDS as i64).collect()
        && matches!(daemon.try_http("GET", "/mirrors", None), Ok((200, _)))
}

/// The port of the node that coordinates `mirror`, as `daemon` sees it.
pub fn owner_port(daemon: &Daemon, mirror: &str) -> u16 {
    let shard = coordinator_partition(mirror, SHARDS) as i64;
    let status = json(daemon, "/cluster").expect("/cluster answers");
    let url = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["shards"].as_array().unwrap().contains(&shard.into()))
        .map(|m| m["url"].as_str().unwrap().to_owned())
        .expect("an owner");
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// Kafka's verifiable producer: unique values ("0", "1", …), acks=all,
/// idempotent, `rate` records a second until killed.
pub fn start_producer(bootstrap: &str, topic: &str, rate: u32) -> ChildGuard {
    let child = Command::new(kafka_script())
        .args([
            "tool",
            "kafka-verifiable-producer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--throughput",
            &rate.to_string(),
            "--max-messages",
            "-1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kafka-verifiable-producer");
    ChildGuard(child)
}

pub fn stop_producer(mut p: ChildGuard) {
    let _ = p.0.kill();
    let _ = p.0.wait();
}
