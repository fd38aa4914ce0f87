//! What the clustered daemon's tests share: a node of a cluster, and the
//! cluster's own view of itself (`/cluster`).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use kmirror_events::coordinator_partition;
use kmirror_tests::wire::{fetch_all, raw_batches};
use kmirror_tests::{bed, kafka_script};
use serde_json::Value;

use super::{free_port, ChildGuard, Daemon};

/// Few state partitions: every shard a node acquires is fenced and loaded.
pub const SHARDS: i32 = 6;
/// The group's session timeout: how long a dead node keeps its shards.
pub const SESSION_MS: u64 = 6000;

/// A node of cluster `cluster` on `destination`, its state in `state_topic`.
pub fn start_node(dir: &Path, destination: &str, cluster: &str, state_topic: &str) -> Daemon {
    start_node_with(dir, destination, cluster, state_topic, "")
}

/// [`start_node`] with more `[cluster]` lines.
pub fn start_node_with(
    dir: &Path,
    destination: &str,
    cluster: &str,
    state_topic: &str,
    more: &str,
) -> Daemon {
    start_node_env(dir, destination, cluster, state_topic, more, &[])
}

/// [`start_node_with`] with `env` added to the node's environment.
pub fn start_node_env(
    dir: &Path,
    destination: &str,
    cluster: &str,
    state_topic: &str,
    more: &str,
    env: &[(&str, &str)],
) -> Daemon {
    let port = free_port();
    let text = format!(
        "admin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\nstate_topic = \"{state_topic}\"\nstate_topic_num_partitions = {SHARDS}\n[destination]\nbootstrap_servers = \"{destination}\"\n[cluster]\nid = \"{cluster}\"\nsession_timeout_ms = {SESSION_MS}\nheartbeat_interval_ms = 1000\n{more}"
    );
    Daemon::start_config_env(dir, port, &text, env)
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

/// The values of one partition of `topic`, in offset order (markers are
/// not records).
pub fn values(bootstrap: &str, topic: &str, partition: i32) -> Vec<Vec<u8>> {
    fetch_all(bootstrap, topic, partition)
        .unwrap()
        .into_iter()
        .map(|r| r.value.map(|v| v.to_vec()).unwrap_or_default())
        .collect()
}

/// Nothing lost, nothing twice, order kept: every partition of the
/// destination holds exactly the source's records, in the same order.
pub fn assert_copy_exact(topic: &str, partitions: i32) {
    for p in 0..partitions {
        let (source, copy) = (
            values(&bed().source, topic, p),
            values(&bed().destination, topic, p),
        );
        assert_eq!(
            copy.len(),
            source.len(),
            "{topic}/{p}: {} records on the destination, {} on the source",
            copy.len(),
            source.len()
        );
        assert!(copy == source, "{topic}/{p}: the records differ");
    }
}

/// No data batch after a fence's marker was written under an older epoch:
/// once a node took a partition over, nothing of the previous owner landed.
pub fn assert_no_write_after_a_fence(topic: &str, partitions: i32) -> usize {
    let mut markers = 0;
    for p in 0..partitions {
        let mut fenced_at = i16::MIN;
        for b in raw_batches(&bed().destination, topic, p, 0).unwrap() {
            if b.is_control {
                markers += 1;
                fenced_at = fenced_at.max(b.producer_epoch);
            } else {
                assert!(
                    b.producer_epoch >= fenced_at,
                    "{topic}/{p}: a batch at offset {} of epoch {} landed after the fence of epoch {fenced_at}",
                    b.base_offset,
                    b.producer_epoch
                );
            }
        }
    }
    markers
}

/// `mirror`'s partitions as `daemon` describes them: all MIRRORING, lag 0,
/// and `records` source records mirrored in all (the destination's offsets
/// also count the fences' markers).
pub fn mirrored(daemon: &Daemon, mirror: &str, partitions: usize, records: i64) -> bool {
    let (status, body) = daemon.http("GET", &format!("/mirrors/{mirror}/partitions"), None);
    if status != 200 {
        return false;
    }
    let parts: Vec<Value> = serde_json::from_str(&body).unwrap();
    parts.len() == partitions
        && parts
            .iter()
            .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
        && parts
            .iter()
            .map(|p| p["source_offset"].as_i64().unwrap())
            .sum::<i64>()
            == records
}

/// At least `records` source records mirrored, whatever the states.
pub fn mirrored_at_least(daemon: &Daemon, mirror: &str, records: i64) -> bool {
    copied(daemon, mirror) >= records
}

/// Source records copied of `mirror`, as `daemon` describes it (nothing
/// if it does not answer; a partition no node runs counts nothing).
pub fn copied(daemon: &Daemon, mirror: &str) -> i64 {
    json(daemon, &format!("/mirrors/{mirror}/partitions"))
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|p| p["source_offset"].as_i64().unwrap_or(0).max(0))
        .sum()
}

/// Batches of 200 records produced to a topic one after another, by
/// Kafka's console producer, until stopped: records to copy at any moment.
pub struct Batches {
    writing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
}

impl Batches {
    pub fn start(topic: &str) -> Batches {
        let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (still, topic) = (writing.clone(), topic.to_string());
        let thread = std::thread::spawn(move || {
            let mut n = 0;
            while still.load(std::sync::atomic::Ordering::SeqCst) {
                super::produce(&topic, n, n + 200);
                n += 200;
            }
            n
        });
        Batches { writing, thread }
    }

    /// Ends the producing after the batch under way: how many records.
    pub fn stop(self) -> i64 {
        self.writing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap() as i64
    }
}

/// Sends `signal` to a daemon.
pub fn signal(daemon: &Daemon, signal: &str) {
    let pid = daemon.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap()
        .success());
}

pub fn node(nodes: &[Option<Daemon>], i: usize) -> &Daemon {
    nodes[i].as_ref().expect("a running node")
}
