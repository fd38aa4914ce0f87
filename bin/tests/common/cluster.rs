//! What the clustered daemon's tests share: a node of a cluster, and the
//! cluster's own view of itself (`/cluster`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kmirror_events::coordinator_partition;
use kmirror_tests::wire::{fetch_all, raw_batches};
use kmirror_tests::{bed, create_topic, kafka_script, unique, PrivateBed};
use serde_json::Value;

use super::{free_port, kmirror, stderr, stdout, ChildGuard, Daemon};

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
    start_node_sharded(dir, (destination, cluster, state_topic), SHARDS, more, env)
}

/// [`start_node_env`] with a state topic of `shards` partitions.
pub fn start_node_sharded(
    dir: &Path,
    (destination, cluster, state_topic): (&str, &str, &str),
    shards: i32,
    more: &str,
    env: &[(&str, &str)],
) -> Daemon {
    let port = free_port();
    let text = format!(
        "admin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\nstate_topic = \"{state_topic}\"\nstate_topic_num_partitions = {shards}\n[destination]\nbootstrap_servers = \"{destination}\"\n[cluster]\nid = \"{cluster}\"\nsession_timeout_ms = {SESSION_MS}\nheartbeat_interval_ms = 1000\n{more}"
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
    settled_in(daemon, members, SHARDS)
}

/// [`settled`] for a state topic of `shards` partitions.
pub fn settled_in(daemon: &Daemon, members: usize, shards: i32) -> bool {
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
        && owned == (0..i64::from(shards)).collect()
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
    assert_copy_exact_on(&bed().source, &bed().destination, topic, partitions)
}

/// [`assert_copy_exact`] between two clusters of a test's own.
pub fn assert_copy_exact_on(source: &str, destination: &str, topic: &str, partitions: i32) {
    for p in 0..partitions {
        let (source, copy) = (values(source, topic, p), values(destination, topic, p));
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
    assert_no_write_after_a_fence_on(&bed().destination, topic, partitions)
}

/// [`assert_no_write_after_a_fence`] on a destination of a test's own.
pub fn assert_no_write_after_a_fence_on(destination: &str, topic: &str, partitions: i32) -> usize {
    let mut markers = 0;
    for p in 0..partitions {
        let mut fenced_at = i16::MIN;
        for b in raw_batches(destination, topic, p, 0).unwrap() {
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

/// `kafka-topics --describe` of the state topic: (leader, ISR size) per
/// partition, and the topic's header line.
pub fn describe_state_topic(destination: &str, state_topic: &str) -> (Vec<(i32, usize)>, String) {
    let (header, partitions) = kmirror_tests::mirror::describe_partitions(destination, state_topic);
    let parts = partitions
        .into_iter()
        .map(|(_, leader, isr)| (leader.unwrap_or(-1), isr))
        .collect();
    (parts, header)
}

/// The broker that leads the most state-topic partitions, and how many.
pub fn busiest_state_leader(destination: &str, state_topic: &str) -> (i32, usize) {
    let (parts, _) = describe_state_topic(destination, state_topic);
    let mut led: BTreeMap<i32, usize> = BTreeMap::new();
    for (leader, _) in &parts {
        *led.entry(*leader).or_default() += 1;
    }
    println!("state-topic leaders per broker: {led:?}");
    led.into_iter().max_by_key(|(_, n)| *n).unwrap()
}

/// The CLI's standard output; the test fails if it did.
pub fn kmirror_ok(args: &[&str]) -> String {
    let out = kmirror(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// `kmirror log audit` of `mirror` in the state topic on `destination`:
/// one shard's log, or every shard's in time order.
pub fn audit(destination: &str, state_topic: &str, shard: Option<&str>, mirror: &str) -> String {
    let mut args = vec![
        "log",
        "audit",
        "--bootstrap-server",
        destination,
        "--state-topic",
        state_topic,
        "--mirror",
        mirror,
    ];
    if let Some(shard) = shard {
        args.extend(["--state-partition", shard]);
    }
    kmirror_ok(&args)
}

/// How many of `mirror`'s partitions `daemon` itself runs: its own
/// answer, not gathered (a request marked forwarded is not fanned out).
pub fn runs_here(daemon: &Daemon, mirror: &str) -> usize {
    let generation = json(daemon, "/cluster").expect("/cluster answers")["generation"]
        .as_i64()
        .expect("a generation")
        .to_string();
    let (status, body) = daemon
        .try_http_with(
            "GET",
            "/partitions",
            None,
            &[("kmirror-forwarded", &generation)],
        )
        .expect("admin API answers");
    assert_eq!(status, 200, "{body}");
    let parts: Vec<Value> = serde_json::from_str(&body).unwrap();
    parts.iter().filter(|p| p["mirror"] == *mirror).count()
}

/// A node of `cluster` on `destination` that runs spread mirrors.
pub fn start_spread_node(
    dir: &Path,
    destination: &str,
    cluster: &str,
    state_topic: &str,
) -> Daemon {
    start_node_with(
        dir,
        destination,
        cluster,
        state_topic,
        "spread_partitions = true\n",
    )
}

/// Three spread nodes of a new cluster on `destination`, every shard owned
/// within `secs`: the nodes and the state topic.
pub fn three_spread_nodes(
    destination: &str,
    dirs: &[tempfile::TempDir],
    secs: u64,
) -> (Vec<Daemon>, String) {
    let (cluster, state_topic) = (unique("kz"), unique("__kmirror_state_z"));
    let nodes: Vec<Daemon> = dirs
        .iter()
        .map(|d| start_spread_node(d.path(), destination, &cluster, &state_topic))
        .collect();
    super::wait_secs("three members owning every shard", secs, || {
        settled(&nodes[0], 3)
    });
    (nodes, state_topic)
}

/// A spread mirror's properties file `name` in `dir`, on `source`, with
/// `more` lines (each ending in a newline): its path.
pub fn spread_properties(dir: &Path, name: &str, source: &str, more: &str) -> String {
    let props = dir.join(name);
    std::fs::write(
        &props,
        format!("bootstrap.servers={source}\nmirror.partitions.spread=true\n{more}"),
    )
    .unwrap();
    props.to_str().unwrap().to_owned()
}

/// A topic of `count` partitions on `source` and a spread mirror of it,
/// created and started through `daemon`: (topic, mirror).
pub fn spread_mirror_of(daemon: &Daemon, dir: &Path, source: &str, count: i32) -> (String, String) {
    let topic = unique("spread");
    create_topic(source, &topic, count as u32, &[]);
    let props = spread_properties(dir, "spread.properties", source, "");
    let mirror = unique("sm");
    daemon.mirror_topics(&mirror, &props, &topic);
    (topic, mirror)
}

/// Stops `topic` of `mirror` through node `via` with `bed`'s source frozen,
/// so that its partitions wait in STOPPING for their failover reports;
/// once the state log on the destination (`log`, an audit) shows a
/// STOPPING, kills node `victim` and thaws the source. The client's stop
/// fails with the node it reached (else the stop finished before the kill:
/// no handover to test). Returns when the kill happened.
pub fn kill_during_stop(
    bed: &PrivateBed,
    nodes: &mut [Option<Daemon>],
    (victim, via): (usize, usize),
    mirror: &str,
    topic: &str,
    log: impl Fn() -> String,
) -> Instant {
    let admin = node(nodes, via).admin();
    bed.stall_source();
    let stop = std::thread::spawn({
        let (mirror, topic) = (mirror.to_owned(), topic.to_owned());
        move || {
            let started = Instant::now();
            let out = kmirror(&[
                "mirror", "stop", "--mirror", &mirror, "--topics", &topic, "--admin", &admin,
            ]);
            (out, started.elapsed())
        }
    });
    let started = Instant::now();
    let before = loop {
        let text = log();
        if text.contains("-> STOPPING") {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no STOPPING: {text}"
        );
    };
    let port = node(nodes, victim).port;
    super::kill9(nodes[victim].take().unwrap());
    let killed = Instant::now();
    let count = |what: &str| before.lines().filter(|l| l.contains(what)).count();
    println!(
        "killed the coordinator :{port} {:.1} s into the stop: the log then held {} STOPPING and {} STOPPED transitions",
        started.elapsed().as_secs_f64(),
        count("-> STOPPING"),
        count("-> STOPPED")
    );
    bed.resume_source();
    let (out, took) = stop.join().unwrap();
    println!(
        "the client's stop: exit {:?} after {:.1} s: {}",
        out.status.code(),
        took.as_secs_f64(),
        stderr(&out).trim()
    );
    assert!(
        !out.status.success(),
        "the stop finished before the kill: no handover to test"
    );
    killed
}

/// Each of partitions 0..`partitions` reached STOPPED exactly once in an
/// audit of the stop.
pub fn assert_stopped_once(log: &str, partitions: usize) {
    for p in 0..partitions {
        let label = format!("[{p}]");
        let n = log
            .lines()
            .filter(|l| l.contains(&label) && l.contains("-> STOPPED"))
            .count();
        assert_eq!(n, 1, "one STOPPED transition of partition {p}:\n{log}");
    }
}

/// Sends `ops.0` and `ops.1` on `mirror`'s `topic` at once through two of
/// `nodes` other than its coordinator where possible (both forwarded, to
/// race there), each guarded by the StateValidationOffset its node read:
/// exactly one wins, the other gets INVALID_CLUSTER_MIRROR_STATES. The
/// state the winner's operation leads to.
pub fn race_one_wins(
    nodes: &[&Daemon],
    mirror: &str,
    topic: &str,
    (a_op, b_op): (&str, &str),
) -> &'static str {
    let owner = owner_port(nodes[0], mirror);
    let mut order: Vec<&Daemon> = nodes.iter().copied().filter(|n| n.port != owner).collect();
    order.extend(nodes.iter().copied().filter(|n| n.port == owner));
    let (a, b) = (order[0], order[1]);
    let offset = |n: &Daemon| -> u64 {
        json(n, &format!("/state-offset?mirror={mirror}")).unwrap()["state_validation_offset"]
            .as_u64()
            .unwrap()
    };
    // Both read the coordinator's log: b's reading lies between two of a's
    // (a checkpoint may land between two reads of a mirror that has just
    // caught up).
    let (oa, ob, again) = (offset(a), offset(b), offset(a));
    assert!(
        oa <= ob && ob <= again,
        "two nodes read one coordinator's offset: {oa} <= {ob} <= {again}"
    );
    let operate = |n: &Daemon, op: &str, at: u64| {
        let body = format!("{{\"topics\":[\"{topic}\"],\"state_validation_offset\":{at}}}");
        n.http("POST", &format!("/mirrors/{mirror}/{op}"), Some(&body))
    };
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| operate(a, a_op, oa));
        let tb = s.spawn(|| operate(b, b_op, ob));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    println!(
        "{a_op} via :{} -> {} | {b_op} via :{} -> {} (state_validation_offset {oa}, coordinator :{owner})",
        a.port, ra.0, b.port, rb.0
    );
    let wins = [&ra, &rb].iter().filter(|r| r.0 == 200).count();
    assert_eq!(wins, 1, "exactly one wins: {ra:?} {rb:?}");
    let (loser, winner) = if ra.0 == 200 {
        (&rb, a_op)
    } else {
        (&ra, b_op)
    };
    assert_eq!(loser.0, 409, "{loser:?}");
    assert!(
        loser.1.contains("INVALID_CLUSTER_MIRROR_STATES"),
        "{loser:?}"
    );
    println!("  winner: {winner}");
    if winner == "pause" {
        "PAUSED"
    } else {
        "STOPPED"
    }
}

/// The state topic on `destination` verifies (`kmirror log verify`), and
/// its audit, every shard in time order, tells the story of each of
/// `mirror`'s partitions 0..`partitions`.
pub fn assert_log_tells(destination: &str, state_topic: &str, mirror: &str, partitions: i32) {
    let out = kmirror_ok(&[
        "log",
        "verify",
        "--bootstrap-server",
        destination,
        "--state-topic",
        state_topic,
    ]);
    println!("kmirror log verify: {}", out.trim());
    let log = audit(destination, state_topic, None, mirror);
    let told: BTreeMap<i32, usize> = (0..partitions)
        .map(|p| {
            let label = format!("[{p}]");
            (p, log.lines().filter(|l| l.contains(&label)).count())
        })
        .collect();
    println!(
        "kmirror log audit: {} lines for {mirror}, per partition {told:?}",
        log.lines().count()
    );
    assert!(told.values().all(|n| *n > 0), "{log}");
}
