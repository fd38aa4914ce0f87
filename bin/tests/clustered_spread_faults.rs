//! A spread mirror (`mirror.partitions.spread=true`, its partitions run by
//! every node) under the faults issue 15 names, against real Kafka: its
//! coordinator killed while a `mirror stop` waits for the partitions other
//! nodes host, two nodes racing conflicting operations, a destination
//! broker that leads state-topic partitions killed under load, and its
//! coordinator and a host killed together. Each test prints its figures.

mod common;

use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;
use kmirror_tests::{bed, BrokerOp, PrivateBed};
use serde_json::Value;

/// `mirror`'s partitions as `daemon` describes them (gathered from every
/// node), or None while it does not answer.
fn partitions(daemon: &Daemon, mirror: &str) -> Option<Vec<Value>> {
    match daemon.try_http("GET", &format!("/mirrors/{mirror}/partitions"), None) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// [`three_spread_nodes`], each one that may be killed.
fn three_nodes(
    destination: &str,
    dirs: &[tempfile::TempDir],
    secs: u64,
) -> (Vec<Option<Daemon>>, String) {
    let (nodes, state_topic) = three_spread_nodes(destination, dirs, secs);
    (nodes.into_iter().map(Some).collect(), state_topic)
}

/// How many partitions each node runs.
fn shares(nodes: &[Option<Daemon>], mirror: &str) -> Vec<usize> {
    nodes
        .iter()
        .map(|n| n.as_ref().map_or(0, |n| runs_here(n, mirror)))
        .collect()
}

/// The coordinator of a spread mirror is killed while a stop waits for
/// every partition (the source frozen, so failover reports hold them in
/// STOPPING): the client's request fails with it, the node that takes its
/// shard finishes the stop, each partition — wherever it was hosted —
/// reaches STOPPED exactly once, and the copy is exact.
#[test]
fn a_coordinator_killed_during_a_spread_stop_the_next_one_finishes_it() {
    let bed = PrivateBed::start();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (mut nodes, state_topic) = three_nodes(&bed.destination, &dirs, 60);
    const PARTS: i32 = 12;
    let (topic, mirror) = spread_mirror_of(node(&nodes, 0), dirs[0].path(), &bed.source, PARTS);
    produce_to(&bed.source, &topic, 0, 1200);
    wait_secs("mirrored", 60, || {
        mirrored(node(&nodes, 0), &mirror, PARTS as usize, 1200)
    });
    let ran = shares(&nodes, &mirror);
    let owner = owner_port(node(&nodes, 0), &mirror);
    let victim = (0..3).find(|&i| node(&nodes, i).port == owner).unwrap();
    let via = (0..3).find(|&i| i != victim).unwrap();
    let watcher = (0..3).find(|&i| i != victim && i != via).unwrap();
    println!("partitions per node {ran:?}; the coordinator is node {victim}");
    assert!(
        ran.iter().enumerate().any(|(i, n)| i != victim && *n > 0),
        "other nodes host partitions: {ran:?}"
    );

    let dest = bed.destination.as_str();
    let killed = kill_during_stop(&bed, &mut nodes, (victim, via), &mirror, &topic, || {
        audit(dest, &state_topic, None, &mirror)
    });
    wait_secs("every partition STOPPED", 90, || {
        partitions(node(&nodes, watcher), &mirror)
            .is_some_and(|p| p.len() == PARTS as usize && p.iter().all(|p| p["state"] == "STOPPED"))
    });
    println!(
        "the new coordinator finished the stop {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    assert_stopped_once(&audit(dest, &state_topic, None, &mirror), PARTS as usize);
    assert_copy_exact_on(&bed.source, dest, &topic, PARTS);
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// Two nodes, neither the coordinator where possible, send conflicting
/// operations on one spread mirror at once, each guarded by the
/// StateValidationOffset it read: one wins, the other gets
/// INVALID_CLUSTER_MIRROR_STATES, and every partition, wherever it runs,
/// ends in the winner's state.
#[test]
fn two_conflicting_operations_on_a_spread_mirror_one_wins() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (nodes, _) = three_nodes(&bed().destination, &dirs, 60);
    const PARTS: i32 = 6;
    for (a_op, b_op) in [("pause", "stop"), ("pause", "pause")] {
        let (topic, mirror) =
            spread_mirror_of(node(&nodes, 0), dirs[0].path(), &bed().source, PARTS);
        produce(&topic, 0, 60);
        wait_for("mirrored", || {
            mirrored(node(&nodes, 1), &mirror, PARTS as usize, 60)
        });
        println!("partitions per node {:?}", shares(&nodes, &mirror));
        let live: Vec<&Daemon> = nodes.iter().flatten().collect();
        let expect = race_one_wins(&live, &mirror, &topic, (a_op, b_op));
        wait_for("the winner's state on every partition", || {
            partitions(node(&nodes, 2), &mirror).is_some_and(|p| {
                p.len() == PARTS as usize && p.iter().all(|p| p["state"] == expect)
            })
        });
        println!("  every partition {expect}");
    }
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// The destination broker that leads the most state-topic partitions is
/// killed while a spread mirror copies under a continuous producer, and
/// started again: two replicas of three still meet min.insync.replicas, so
/// every shard's log takes writes, the copy goes on and ends exact, and
/// the log verifies and tells every partition's story.
#[test]
fn a_destination_broker_killed_under_a_spread_mirror_loses_nothing() {
    let bed = PrivateBed::with_brokers(1, 3);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (nodes, state_topic) = three_nodes(&bed.destination, &dirs, 90);
    const PARTS: i32 = 6;
    let (topic, mirror) = spread_mirror_of(node(&nodes, 1), dirs[1].path(), &bed.source, PARTS);
    let producer = start_producer(&bed.source, &topic, 300);
    wait_secs("the mirror copying", 60, || {
        partitions(node(&nodes, 2), &mirror).is_some_and(|p| {
            p.len() == PARTS as usize && p.iter().all(|p| p["state"] == "MIRRORING")
        }) && mirrored_at_least(node(&nodes, 2), &mirror, 300)
    });
    println!("partitions per node {:?}", shares(&nodes, &mirror));

    let (victim, led) = busiest_state_leader(&bed.destination, &state_topic);
    println!("killing destination broker {victim} (leads {led} state-topic partitions)");
    let before = copied(node(&nodes, 0), &mirror);
    bed.destination_broker(victim as usize, BrokerOp::Kill);
    let killed = Instant::now();
    let on = wait_secs("the copy going on without the broker", 60, || {
        copied(node(&nodes, 0), &mirror) > before + 1500
    });
    println!(
        "with broker {victim} down, 1500 more records copied within {:.1} s",
        on.as_secs_f64()
    );
    bed.destination_broker(victim as usize, BrokerOp::Start);
    println!(
        "broker {victim} back after {:.1} s",
        killed.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(3));
    stop_producer(producer);

    let total: i64 = common::fault_checks::end_offsets(&bed.source, &topic)
        .values()
        .sum();
    let settle = wait_secs("every partition at lag 0", 90, || {
        mirrored(node(&nodes, 0), &mirror, PARTS as usize, total)
    });
    println!(
        "{total} records produced; at lag 0 {:.1} s after the producer stopped",
        settle.as_secs_f64()
    );
    assert_copy_exact_on(&bed.source, &bed.destination, &topic, PARTS);
    let markers = assert_no_write_after_a_fence_on(&bed.destination, &topic, PARTS);
    println!("the copy is exact; {markers} fence markers");

    assert_log_tells(&bed.destination, &state_topic, &mirror, PARTS);
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// The coordinator of a spread mirror and another node that hosts some of
/// its partitions are killed together (kill -9) under a continuous
/// producer: the one node left takes every shard — the coordinator's
/// topic records and both hosts' partitions — fences each partition the
/// two ran once, and copies on: 0 lost, 0 twice, nothing landed after a
/// fence, and a stop from it then completes.
#[test]
fn the_coordinator_and_a_host_killed_together_lose_nothing() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (mut nodes, _) = three_nodes(&bed().destination, &dirs, 60);
    const PARTS: i32 = 12;
    let (topic, mirror) = spread_mirror_of(node(&nodes, 0), dirs[0].path(), &bed().source, PARTS);
    let producer = Batches::start(&topic);
    wait_for("the mirror copying", || {
        mirrored_at_least(node(&nodes, 1), &mirror, 400)
    });
    let ran = shares(&nodes, &mirror);
    let owner = owner_port(node(&nodes, 0), &mirror);
    let coordinator = (0..3).find(|&i| node(&nodes, i).port == owner).unwrap();
    let host = (0..3)
        .filter(|&i| i != coordinator)
        .max_by_key(|&i| ran[i])
        .unwrap();
    let survivor = (0..3).find(|&i| i != coordinator && i != host).unwrap();
    println!(
        "partitions per node {ran:?}; killing the coordinator (node {coordinator}) and node {host} together"
    );
    assert!(ran[host] > 0, "the other node killed hosts partitions");
    let before = copied(node(&nodes, survivor), &mirror);
    kill9(nodes[coordinator].take().unwrap());
    kill9(nodes[host].take().unwrap());
    let killed = Instant::now();
    wait_secs("the survivor owning every shard and copying on", 90, || {
        settled(node(&nodes, survivor), 1) && copied(node(&nodes, survivor), &mirror) > before + 400
    });
    println!(
        "the survivor copies on {:.1} s after the kill (session timeout {} s)",
        killed.elapsed().as_secs_f64(),
        SESSION_MS / 1000
    );
    let produced = producer.stop();
    wait_secs("everything mirrored", 90, || {
        mirrored(node(&nodes, survivor), &mirror, PARTS as usize, produced)
    });
    assert_copy_exact(&topic, PARTS);
    let markers = assert_no_write_after_a_fence(&topic, PARTS);
    println!("{produced} records mirrored exactly; {markers} fence markers");
    assert_eq!(
        markers,
        ran[coordinator] + ran[host],
        "one marker per partition the killed nodes ran"
    );
    node(&nodes, survivor).cli_ok(&["mirror", "stop", "--mirror", &mirror, "--topics", &topic]);
    let parts = partitions(node(&nodes, survivor), &mirror).unwrap_or_default();
    assert_eq!(parts.len(), PARTS as usize);
    assert!(parts.iter().all(|p| p["state"] == "STOPPED"), "{parts:?}");
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}
