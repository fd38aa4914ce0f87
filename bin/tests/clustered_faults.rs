//! The clustered daemon under faults, against real Kafka: a destination
//! broker killed under load, nodes joining, leaving and restarting in turn
//! under load, two nodes racing conflicting operations, and a coordinator
//! killed while it runs a `mirror stop`. Each test prints its figures.
//!
//! Longer than 800 lines: four scenarios share the helpers that read the
//! cluster's own view (settled, owner, describe gaps) and Kafka's tools'
//! view (end offsets, values per partition); `common/` is for every binary.
//!
//! Processes here die (SIGKILL) or stop cleanly (SIGTERM); a node that is
//! frozen but alive (SIGSTOP) needs the data path fenced by the broker,
//! which is not in place yet, so no test here freezes a node.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::fault_checks::end_offsets;
use common::*;
use kmirror_events::coordinator_partition;
use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique, BrokerOp, PrivateBed};
use serde_json::Value;

/// `mirror`'s partitions as `daemon` describes them (forwarded to the
/// coordinator), or None while no coordinator answers.
fn partitions(daemon: &Daemon, mirror: &str) -> Option<Vec<Value>> {
    match daemon.try_http("GET", &format!("/mirrors/{mirror}/partitions"), None) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// All `n` partitions MIRRORING with lag 0 and `records` on the
/// destination in all (end offsets).
fn mirrored(daemon: &Daemon, mirror: &str, n: usize, records: i64) -> bool {
    let Some(parts) = partitions(daemon, mirror) else {
        return false;
    };
    parts.len() == n
        && parts
            .iter()
            .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
        && parts
            .iter()
            .map(|p| p["destination_offset"].as_i64().unwrap_or(-1))
            .sum::<i64>()
            == records
}

/// Every committed value of `topic`, per partition in offset order, as
/// Kafka's console consumer reads it.
fn values(bootstrap: &str, topic: &str, records: i64) -> BTreeMap<i32, Vec<String>> {
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            &records.to_string(),
            "--timeout-ms",
            "20000",
            "--property",
            "print.partition=true",
        ],
    );
    let mut by_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for line in out.lines() {
        let Some((p, v)) = line.split_once('\t') else {
            continue;
        };
        let Some(p) = p.strip_prefix("Partition:").and_then(|p| p.parse().ok()) else {
            continue;
        };
        by_partition.entry(p).or_default().push(v.to_owned());
    }
    by_partition
}

/// The destination holds exactly the source's records of `topic`: same end
/// offsets, and the same values per partition in the same order (so none
/// lost, none twice). Returns the record count.
fn assert_exact_copy(source: &str, destination: &str, topic: &str) -> i64 {
    let (src, dst) = (end_offsets(source, topic), end_offsets(destination, topic));
    assert_eq!(src, dst, "end offsets of {topic}: source vs destination");
    let total: i64 = src.values().sum();
    let (a, b) = (
        values(source, topic, total),
        values(destination, topic, total),
    );
    let count = |m: &BTreeMap<i32, Vec<String>>| m.values().map(Vec::len).sum::<usize>();
    assert_eq!(
        count(&a) as i64,
        total,
        "the console consumer read the source"
    );
    let distinct: BTreeSet<&String> = a.values().flatten().collect();
    assert_eq!(
        distinct.len() as i64,
        total,
        "the source's values are unique"
    );
    for (p, values) in &a {
        assert!(
            b.get(p) == Some(values),
            "partition {p}: destination values differ from the source's ({} vs {})",
            b.get(p).map_or(0, Vec::len),
            values.len()
        );
    }
    assert_eq!(count(&b), count(&a));
    total
}

/// Creates `mirror` of `topic` through `node`, retrying while its shard is
/// still loading or moving (retriable, as a Kafka admin client treats them).
fn create_mirror(node: &Daemon, dir: &Path, source: &str, mirror: &str, topic: &str) {
    let props = dir.join("source.properties");
    std::fs::write(&props, format!("bootstrap.servers={source}\n")).unwrap();
    let args = [
        "mirror",
        "create",
        "--mirror",
        mirror,
        "--mirror-config",
        props.to_str().unwrap(),
        "--topics",
        topic,
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = node.cli(&args);
        if out.status.success() {
            return;
        }
        let err = stderr(&out);
        let retriable = [
            "COORDINATOR_LOAD_IN_PROGRESS",
            "COORDINATOR_NOT_AVAILABLE",
            "NOT_COORDINATOR",
        ]
        .iter()
        .any(|c| err.starts_with(c));
        assert!(retriable && Instant::now() < deadline, "{args:?}: {err}");
        println!("create {mirror}: {}; retrying", err.trim());
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_destination_broker_killed_under_load_loses_nothing() {
    let bed = PrivateBed::with_brokers(1, 3);
    let (cluster, state_topic) = (unique("kf"), unique("__kmirror_state_f"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Daemon> = dirs
        .iter()
        .map(|d| start_node(d.path(), &bed.destination, &cluster, &state_topic))
        .collect();
    wait_secs("three members owning every shard", 90, || {
        settled(&nodes[0], 3)
    });

    let (parts, header) = describe_state_topic(&bed.destination, &state_topic);
    println!("state topic: {header}");
    assert!(header.contains("ReplicationFactor: 3"), "{header}");
    assert!(header.contains("min.insync.replicas=2"), "{header}");
    assert_eq!(parts.len(), SHARDS as usize);

    let topic = unique("bk");
    let mirror = unique("bkm");
    create_topic(&bed.source, &topic, 3, &[]);
    let producer = start_producer(&bed.source, &topic, 300);
    create_mirror(&nodes[1], dirs[1].path(), &bed.source, &mirror, &topic);
    wait_secs("the mirror running", 60, || {
        partitions(&nodes[2], &mirror)
            .is_some_and(|p| p.len() == 3 && p.iter().all(|p| p["state"] == "MIRRORING"))
    });
    std::thread::sleep(Duration::from_secs(3));

    // The broker that leads the most state-topic partitions.
    let (victim, count) = busiest_state_leader(&bed.destination, &state_topic);
    println!("killing broker {victim} (leads {count})");
    bed.destination_broker(victim as usize, BrokerOp::Kill);
    let killed = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let (parts, _) = describe_state_topic(&bed.destination, &state_topic);
    println!("10 s after the kill: state-topic (leader, ISR size) per partition {parts:?}");
    assert!(parts.iter().all(|(l, _)| *l != victim));
    // Two replicas of three still meet min.insync.replicas=2: the state log
    // takes writes and the copy goes on without the broker.
    let during = partitions(&nodes[0], &mirror).unwrap_or_default();
    println!(
        "with broker {victim} down: partitions {:?}, total lag {}",
        during
            .iter()
            .map(|p| p["state"].as_str().unwrap_or("?"))
            .collect::<Vec<_>>(),
        during
            .iter()
            .map(|p| p["lag"].as_i64().unwrap_or(0).max(0))
            .sum::<i64>()
    );
    bed.destination_broker(victim as usize, BrokerOp::Start);
    println!(
        "broker {victim} back after {:.1} s",
        killed.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(5));
    stop_producer(producer);

    let total: i64 = end_offsets(&bed.source, &topic).values().sum();
    let settle = wait_secs("every partition MIRRORING with lag 0", 90, || {
        mirrored(&nodes[0], &mirror, 3, total)
    });
    println!(
        "{total} records produced; mirror at lag 0 {:.1} s after the producer stopped",
        settle.as_secs_f64()
    );
    wait_secs("every shard owned", 60, || settled(&nodes[2], 3));
    let copied = assert_exact_copy(&bed.source, &bed.destination, &topic);
    println!("destination holds exactly the source's {copied} records (0 lost, 0 duplicated, same order per partition)");

    assert_log_tells(&bed.destination, &state_topic, &mirror, 3);
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// The longest time any of `mirror`'s partitions was seen not MIRRORING
/// while `during` ran, sampling `describe` (through any live node) every
/// 250 ms.
struct GapMeter {
    since: BTreeMap<String, Instant>,
    longest: Duration,
    unanswered_since: Option<Instant>,
}

impl GapMeter {
    fn new() -> Self {
        GapMeter {
            since: BTreeMap::new(),
            longest: Duration::ZERO,
            unanswered_since: None,
        }
    }

    fn sample(&mut self, parts: Option<Vec<Value>>) {
        let now = Instant::now();
        let Some(parts) = parts else {
            // No answer at all counts as every partition down.
            let since = *self.unanswered_since.get_or_insert(now);
            self.longest = self.longest.max(now - since);
            return;
        };
        if let Some(since) = self.unanswered_since.take() {
            self.longest = self.longest.max(now - since);
        }
        for p in parts {
            let key = format!("{}[{}]", p["topic"], p["partition"]);
            if p["state"] == "MIRRORING" {
                if let Some(since) = self.since.remove(&key) {
                    self.longest = self.longest.max(now - since);
                }
            } else {
                let since = *self.since.entry(key).or_insert(now);
                self.longest = self.longest.max(now - since);
            }
        }
    }
}

#[test]
fn scaling_and_a_rolling_restart_under_load_lose_nothing() {
    let (cluster, state_topic) = (unique("kr"), unique("__kmirror_state_r"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dest = bed().destination.as_str();
    let mut nodes: Vec<Option<Daemon>> = vec![None, None, None];
    nodes[0] = Some(start_node(dirs[0].path(), dest, &cluster, &state_topic));
    wait_secs("one member owning every shard", 60, || {
        settled(nodes[0].as_ref().unwrap(), 1)
    });

    let topic = unique("roll");
    create_topic(&bed().source, &topic, 3, &[]);
    let producer = start_producer(&bed().source, &topic, 200);
    // Two mirrors of the same topic would copy it twice; several mirrors
    // (spread by coordinator) each of their own topic.
    let mut mirrors = Vec::new();
    for k in 0..3 {
        let t = if k == 0 {
            topic.clone()
        } else {
            unique(&format!("roll{k}"))
        };
        if k > 0 {
            create_topic(&bed().source, &t, 2, &[]);
            produce(&t, 0, 100);
        }
        let m = unique(&format!("rm{k}"));
        create_mirror(
            nodes[0].as_ref().unwrap(),
            dirs[0].path(),
            &bed().source,
            &m,
            &t,
        );
        mirrors.push((m, t, if k == 0 { 3 } else { 2 }));
    }
    wait_secs("every mirror running", 60, || {
        mirrors.iter().all(|(m, _, n)| {
            partitions(nodes[0].as_ref().unwrap(), m)
                .is_some_and(|p| p.len() == *n && p.iter().all(|p| p["state"] == "MIRRORING"))
        })
    });

    // A step changes the membership, then we wait until the group has
    // settled and every mirror is MIRRORING, sampling all the while.
    let step = |name: &str,
                nodes: &mut Vec<Option<Daemon>>,
                change: &dyn Fn(&mut Vec<Option<Daemon>>)| {
        let started = Instant::now();
        let mut meters: Vec<GapMeter> = mirrors.iter().map(|_| GapMeter::new()).collect();
        change(nodes);
        let members = nodes.iter().flatten().count();
        loop {
            let live: Vec<&Daemon> = nodes.iter().flatten().collect();
            for (i, (m, _, _)) in mirrors.iter().enumerate() {
                let via = live[i % live.len()];
                meters[i].sample(partitions(via, m));
            }
            let calm = settled(live[0], members)
                && mirrors.iter().all(|(m, _, n)| {
                    partitions(live[0], m).is_some_and(|p| {
                        p.len() == *n && p.iter().all(|p| p["state"] == "MIRRORING")
                    })
                })
                && meters
                    .iter()
                    .all(|g| g.since.is_empty() && g.unanswered_since.is_none());
            if calm {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "{name}: not settled within 90 s"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let longest = meters.iter().map(|g| g.longest).max().unwrap();
        println!(
            "{name}: settled after {:.1} s with {members} member(s); longest not-MIRRORING gap {:.1} s",
            started.elapsed().as_secs_f64(),
            longest.as_secs_f64()
        );
        if longest >= Duration::from_millis(SESSION_MS + 5000) {
            for (i, dir) in dirs.iter().enumerate() {
                eprintln!(
                    "node {i}'s log, newest 60 lines:\n{}",
                    log_tail(dir.path(), 60)
                );
            }
            panic!("{name}: a partition stayed not MIRRORING {longest:?}");
        }
    };

    let start = |i: usize| {
        let (dir, cluster, state_topic) = (
            dirs[i].path().to_owned(),
            cluster.clone(),
            state_topic.clone(),
        );
        move |nodes: &mut Vec<Option<Daemon>>| {
            nodes[i] = Some(start_node(
                &dir,
                bed().destination.as_str(),
                &cluster,
                &state_topic,
            ));
        }
    };
    let stop = |i: usize| {
        move |nodes: &mut Vec<Option<Daemon>>| {
            let n = nodes[i].take().unwrap();
            assert_eq!(n.terminate().code(), Some(0));
        }
    };
    step("scale 1 -> 2", &mut nodes, &start(1));
    step("scale 2 -> 3", &mut nodes, &start(2));
    step("scale 3 -> 2", &mut nodes, &stop(1));
    step("scale 2 -> 1", &mut nodes, &stop(2));
    step("scale 1 -> 2", &mut nodes, &start(1));
    step("scale 2 -> 3", &mut nodes, &start(2));
    for i in 0..3 {
        step(&format!("rolling: node {i} SIGTERM"), &mut nodes, &stop(i));
        step(&format!("rolling: node {i} back"), &mut nodes, &start(i));
    }
    stop_producer(producer);

    let live = nodes.iter().flatten().next().unwrap();
    let total: i64 = end_offsets(&bed().source, &topic).values().sum();
    wait_secs("the loaded mirror at lag 0", 60, || {
        mirrored(live, &mirrors[0].0, 3, total)
    });
    let copied = assert_exact_copy(&bed().source, &bed().destination, &topic);
    println!(
        "destination holds exactly the source's {copied} records of {topic} (0 lost, 0 duplicated)"
    );
    for (m, t, n) in &mirrors[1..] {
        wait_for(&format!("{m} copied whole"), || mirrored(live, m, *n, 100));
        assert_eq!(records_on(&bed().destination, t), 100);
    }
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

#[test]
fn two_conflicting_operations_on_two_nodes_one_wins() {
    let (cluster, state_topic) = (unique("kx"), unique("__kmirror_state_x"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dest = bed().destination.as_str();
    let nodes: Vec<Daemon> = dirs
        .iter()
        .map(|d| start_node(d.path(), dest, &cluster, &state_topic))
        .collect();
    wait_secs("three members owning every shard", 60, || {
        settled(&nodes[0], 3)
    });
    for (k, (a_op, b_op)) in [("pause", "stop"), ("pause", "pause")]
        .into_iter()
        .enumerate()
    {
        let topic = unique(&format!("race{k}"));
        create_topic(&bed().source, &topic, 2, &[]);
        produce(&topic, 0, 50);
        let mirror = unique(&format!("xm{k}"));
        create_mirror(&nodes[0], dirs[0].path(), &bed().source, &mirror, &topic);
        wait_for("mirrored", || mirrored(&nodes[1], &mirror, 2, 50));
        let expect = race_one_wins(
            &nodes.iter().collect::<Vec<_>>(),
            &mirror,
            &topic,
            (a_op, b_op),
        );
        wait_for("the winner's state", || {
            partitions(&nodes[2], &mirror).is_some_and(|p| p.iter().all(|p| p["state"] == expect))
        });
        println!("  every partition {expect}");
    }
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

#[test]
fn a_coordinator_killed_during_a_stop_the_next_one_finishes_it() {
    // A source of our own, to stall: a stop's failover reports read the
    // source (for up to 10 s), so its partitions stay STOPPING while it is
    // frozen — a window in which to kill the coordinator. (Unstalled, 48
    // partitions stop in 0.6 s, faster than `describe` can see it.)
    let bed = PrivateBed::start();
    let (cluster, state_topic) = (unique("ks"), unique("__kmirror_state_s"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dest = bed.destination.as_str();
    let mut nodes: Vec<Option<Daemon>> = dirs
        .iter()
        .map(|d| Some(start_node(d.path(), dest, &cluster, &state_topic)))
        .collect();
    wait_secs("three members owning every shard", 60, || {
        settled(nodes[0].as_ref().unwrap(), 3)
    });
    const PARTS: usize = 4;
    let topic = unique("st");
    let mirror = unique("stm");
    create_topic(&bed.source, &topic, PARTS as u32, &[]);
    let input: String = (0..400).map(|i| format!("v-{i}\n")).collect();
    let out = kmirror_tests::kafka_tool_stdin(
        "kafka-console-producer",
        &["--bootstrap-server", &bed.source, "--topic", &topic],
        input.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n0 = nodes[0].as_ref().unwrap();
    create_mirror(n0, dirs[0].path(), &bed.source, &mirror, &topic);
    wait_secs("mirrored", 60, || mirrored(n0, &mirror, PARTS, 400));

    let shard = coordinator_partition(&mirror, SHARDS).to_string();
    let owner = owner_port(n0, &mirror);
    let victim = (0..3)
        .find(|&i| nodes[i].as_ref().unwrap().port == owner)
        .unwrap();
    let via = (0..3).find(|&i| i != victim).unwrap();
    let watcher = (0..3).find(|&i| i != victim && i != via).unwrap();
    let killed = kill_during_stop(&bed, &mut nodes, (victim, via), &mirror, &topic, || {
        audit(dest, &state_topic, Some(&shard), &mirror)
    });
    let w = nodes[watcher].as_ref().unwrap();
    wait_secs("every partition STOPPED", 90, || {
        partitions(w, &mirror)
            .is_some_and(|p| p.len() == PARTS && p.iter().all(|p| p["state"] == "STOPPED"))
    });
    println!(
        "the new coordinator finished the stop {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    let log = audit(dest, &state_topic, Some(&shard), &mirror);
    let stops: Vec<&str> = log.lines().filter(|l| l.contains("STOP")).collect();
    println!(
        "kmirror log audit --state-partition {shard}, the stop:\n  {}",
        stops.join("\n  ")
    );
    assert_stopped_once(&log, PARTS);
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}
