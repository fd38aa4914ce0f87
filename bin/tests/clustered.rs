//! Three `kmirror daemon` processes as one clustered daemon, against the
//! real test bed: they share the state topic's partitions through a group
//! on the destination, answer for each other's mirrors, and take over the
//! work of a node killed with SIGKILL.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use kmirror_events::coordinator_partition;
use kmirror_tests::{bed, create_topic, unique};
use serde_json::Value;

/// Few state partitions: every shard a node acquires is fenced and loaded.
const SHARDS: i32 = 6;

fn start_node(dir: &Path, cluster: &str, state_topic: &str) -> Daemon {
    let port = free_port();
    let text = format!(
        "admin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\nstate_topic = \"{state_topic}\"\nstate_topic_num_partitions = {SHARDS}\n[destination]\nbootstrap_servers = \"{}\"\n[cluster]\nid = \"{cluster}\"\nsession_timeout_ms = 6000\nheartbeat_interval_ms = 1000\n",
        bed().destination
    );
    Daemon::start_config(dir, port, &text)
}

fn json(daemon: &Daemon, path: &str) -> Value {
    let (status, body) = daemon.http("GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Every shard owned, by `members` members, as `daemon` sees it.
fn settled(daemon: &Daemon, members: usize) -> bool {
    let status = json(daemon, "/cluster");
    let listed = status["members"].as_array().unwrap();
    let owned: BTreeSet<i64> = listed
        .iter()
        .flat_map(|m| m["shards"].as_array().unwrap().iter())
        .map(|s| s.as_i64().unwrap())
        .collect();
    listed.len() == members && owned == (0..SHARDS as i64).collect()
}

/// The port of the node that coordinates `mirror`.
fn owner_port(daemon: &Daemon, mirror: &str) -> u16 {
    let shard = coordinator_partition(mirror, SHARDS) as i64;
    let status = json(daemon, "/cluster");
    let url = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["shards"].as_array().unwrap().contains(&shard.into()))
        .map(|m| m["url"].as_str().unwrap().to_owned())
        .expect("an owner");
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// `mirror`'s partitions as `daemon` describes them: all MIRRORING, lag 0,
/// and `records` on the destination in all.
fn mirrored(daemon: &Daemon, mirror: &str, partitions: usize, records: i64) -> bool {
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
            .map(|p| p["destination_offset"].as_i64().unwrap())
            .sum::<i64>()
            == records
}

fn node(nodes: &[Option<Daemon>], i: usize) -> &Daemon {
    nodes[i].as_ref().expect("a running node")
}

#[test]
fn clustered_nodes_share_the_work_and_take_over_a_killed_one() {
    let cluster = unique("kc");
    let state_topic = unique("__kmirror_state_c");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<Daemon>> = dirs
        .iter()
        .map(|d| Some(start_node(d.path(), &cluster, &state_topic)))
        .collect();
    wait_for("three members owning every shard", || {
        settled(node(&nodes, 0), 3)
    });
    let out = node(&nodes, 1).cli_ok(&["cluster", "status"]);
    let text = stdout(&out);
    assert!(text.contains("3 member(s)"), "{text}");
    assert!(text.contains("(this node)"), "{text}");
    let status = json(node(&nodes, 1), "/cluster");
    for m in status["members"].as_array().unwrap() {
        assert!(
            !m["shards"].as_array().unwrap().is_empty(),
            "every node has work: {status}"
        );
    }

    // Three mirrors, each created through a different node: the request is
    // forwarded to the mirror's coordinator wherever it arrives.
    let props = write_properties(dirs[0].path());
    let mut mirrors = Vec::new();
    for k in 0..3 {
        let topic = unique(&format!("cl-{k}"));
        create_topic(&bed().source, &topic, 2, &[]);
        produce(&topic, 0, 200);
        let mirror = unique(&format!("cm{k}"));
        node(&nodes, k).cli_ok(&[
            "mirror",
            "create",
            "--mirror",
            &mirror,
            "--mirror-config",
            &props,
            "--topics",
            &topic,
        ]);
        mirrors.push((mirror, topic));
    }
    for (mirror, _) in &mirrors {
        for i in 0..3 {
            wait_for(&format!("{mirror} mirrored, seen from node {i}"), || {
                mirrored(node(&nodes, i), mirror, 2, 200)
            });
        }
    }
    // `describe` of everything from any node lists every partition.
    let all: Vec<Value> = serde_json::from_value(json(node(&nodes, 2), "/partitions")).unwrap();
    for (mirror, _) in &mirrors {
        assert_eq!(all.iter().filter(|p| p["mirror"] == *mirror).count(), 2);
    }

    // An operation sent to a node that does not coordinate the mirror acts
    // on the one that does.
    let (mirror, topic) = &mirrors[1];
    let owner = owner_port(node(&nodes, 0), mirror);
    let other = (0..3).find(|&i| node(&nodes, i).port != owner).unwrap();
    node(&nodes, other).cli_ok(&["mirror", "pause", "--mirror", mirror, "--topics", topic]);
    wait_for("paused, seen from the coordinator", || {
        let (_, body) = node(&nodes, 0).http("GET", &format!("/mirrors/{mirror}/partitions"), None);
        let parts: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        parts.len() == 2 && parts.iter().all(|p| p["state"] == "PAUSED")
    });
    node(&nodes, other).cli_ok(&["mirror", "resume", "--mirror", mirror, "--topics", topic]);

    // kill -9 the coordinator of the first mirror; the others take its
    // shards over and the copy goes on, exactly.
    let (mirror, topic) = &mirrors[0];
    let owner = owner_port(node(&nodes, 0), mirror);
    let victim = (0..3).find(|&i| node(&nodes, i).port == owner).unwrap();
    kill9(nodes[victim].take().unwrap());
    let killed = Instant::now();
    produce(topic, 200, 400);
    let survivor = (0..3).find(|&i| nodes[i].is_some()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !mirrored(node(&nodes, survivor), mirror, 2, 400) {
        assert!(
            Instant::now() < deadline,
            "the killed node's mirror did not resume elsewhere within 90 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "handover: {mirror} mirrored again {:.1} s after its coordinator was killed (session timeout 6 s)",
        killed.elapsed().as_secs_f64()
    );
    wait_for("two members owning every shard", || {
        settled(node(&nodes, survivor), 2)
    });
    // Nothing lost, nothing twice: the destination holds exactly what the
    // source does, at the same offsets.
    assert_eq!(records_on(&bed().destination, topic), 400);
    assert_eq!(records_on(&bed().source, topic), 400);
    for (mirror, _) in &mirrors[1..] {
        assert!(mirrored(node(&nodes, survivor), mirror, 2, 200));
    }
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}
