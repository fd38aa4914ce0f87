//! One mirror's partitions spread over three `kmirror daemon` nodes
//! (`cluster.spread_partitions`, `mirror.partitions.spread=true`) on the
//! real test bed: each node copies the partitions placed in the shards it
//! owns, `describe` from any node shows them all, a source group's
//! offsets are synced for every partition, a node killed with
//! SIGKILL hands its partitions over without losing or repeating a
//! record, and a stop sent to any node waits for every partition.

mod common;

use std::collections::BTreeMap;

use common::cluster::*;
use common::*;
use kmirror_events::{coordinator_partition, placement_shard, MirrorPartitionKey};
use kmirror_tests::mirror::{describe_group, group_read, topic_id_of};
use kmirror_tests::{bed, create_topic, unique};
use serde_json::Value;

const PARTITIONS: i32 = 24;
/// What the second mirror's `client.id` names: set on nodes 0 and 1 only.
const CLIENT_ID_VAR: &str = "KMIRROR_SPREAD_TEST_CLIENT_ID";

/// `mirror`'s partitions as `daemon` answers for them (gathered from
/// every node for a spread mirror).
fn partitions(daemon: &Daemon, mirror: &str) -> Vec<Value> {
    json(daemon, &format!("/mirrors/{mirror}/partitions"))
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

#[test]
fn a_spread_mirror_runs_on_every_node_and_survives_the_loss_of_one() {
    let cluster = unique("ks");
    let state_topic = unique("__kmirror_state_s");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // Node 2 lacks a variable the second mirror's properties name.
    let mut nodes: Vec<Option<Daemon>> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let env = if i == 2 {
                &[][..]
            } else {
                &[(CLIENT_ID_VAR, "kmirror-spread")][..]
            };
            Some(start_node_env(
                d.path(),
                &bed().destination,
                &cluster,
                &state_topic,
                "spread_partitions = true\n",
                env,
            ))
        })
        .collect();
    wait_for("three members owning every shard", || {
        settled(node(&nodes, 0), 3)
    });

    let topic = unique("spread");
    create_topic(&bed().source, &topic, PARTITIONS as u32, &[]);
    produce(&topic, 0, 1200);
    let props = spread_properties(dirs[0].path(), "source.properties", &bed().source, "");
    let mirror = unique("sm");
    node(&nodes, 1).mirror_topics(&mirror, &props, &topic);
    for i in 0..3 {
        wait_for(&format!("{mirror} mirrored, seen from node {i}"), || {
            mirrored(node(&nodes, i), &mirror, PARTITIONS as usize, 1200)
        });
    }
    let shares: BTreeMap<usize, usize> = (0..3)
        .map(|i| (i, runs_here(node(&nodes, i), &mirror)))
        .collect();
    println!("partitions run per node: {shares:?}");
    assert_eq!(
        shares.values().sum::<usize>(),
        PARTITIONS as usize,
        "each partition runs once"
    );
    assert!(
        shares.values().filter(|n| **n > 0).count() >= 2,
        "one mirror's partitions run on several nodes: {shares:?}"
    );

    unhostable_partitions_are_described_with_the_reason(&nodes, dirs[0].path());

    // Recover asks every node for the FAILED partitions it hosts: none here.
    let out =
        node(&nodes, 2).cli_ok(&["mirror", "recover", "--mirror", &mirror, "--topics", &topic]);
    assert!(
        stdout(&out).contains("no FAILED partition to recover"),
        "{}",
        stdout(&out)
    );
    // What a coordinator asks of the hosts is not an operator's request.
    let body = serde_json::json!({ "topics": [topic] }).to_string();
    for (operation, status) in [("recover", 400), ("bogus", 404)] {
        let path = format!("/hosted/{mirror}/{operation}");
        let (got, text) = node(&nodes, 2).http("POST", &path, Some(&body));
        assert_eq!(got, status, "{path}: {text}");
    }

    // A source group's offsets reach the destination for every partition,
    // each translated through the map of the shard it is placed in, as
    // Kafka's own tools read them on both sides.
    let group = unique("sg");
    let read = group_read(&bed().source, &topic, &group, 1200, 30_000);
    assert_eq!(read.len(), 1200);
    let committed = describe_group(&bed().source, &group, &topic);
    assert_eq!(committed.len(), PARTITIONS as usize, "{committed:?}");
    wait_for("the group's offsets synced for every partition", || {
        describe_group(&bed().destination, &group, &topic) == committed
    });

    // kill -9 a node that runs some of them: the others take its shards,
    // and its partitions go on copying there, exactly. Meanwhile each
    // describe that answers shows every partition: one no node runs yet
    // by its coordinator, from its recorded state.
    let victim = (0..3).max_by_key(|i| shares[i]).unwrap();
    kill9(nodes[victim].take().unwrap());
    produce(&topic, 1200, 2400);
    let survivor = (0..3).find(|&i| nodes[i].is_some()).unwrap();
    let mut filled = 0;
    let mut described = |nodes: &[Option<Daemon>]| {
        let parts = partitions(node(nodes, survivor), &mirror);
        let shown: Vec<&Value> = parts.iter().map(|p| &p["partition"]).collect();
        assert!(
            parts.is_empty() || parts.len() == PARTITIONS as usize,
            "a describe that answers shows every partition, not only {shown:?}"
        );
        filled += parts
            .iter()
            .filter(|p| {
                p["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("no node describes"))
            })
            .count();
    };
    wait_for("two members owning every shard", || {
        described(&nodes);
        settled(node(&nodes, survivor), 2)
    });
    wait_for("everything mirrored after the handover", || {
        described(&nodes);
        mirrored(node(&nodes, survivor), &mirror, PARTITIONS as usize, 2400)
    });
    println!("partitions described by their coordinator during the handover: {filled}");
    assert_copy_exact(&topic, PARTITIONS);
    let markers = assert_no_write_after_a_fence(&topic, PARTITIONS);
    println!("fence markers after the kill: {markers} (one per partition the killed node ran)");
    assert_eq!(markers, shares[&victim]);

    // A stop's dry run previews every partition, wherever it runs, and
    // changes nothing.
    let body = serde_json::json!({ "topics": [topic], "dry_run": true }).to_string();
    let (status, text) =
        node(&nodes, survivor).http("POST", &format!("/mirrors/{mirror}/stop"), Some(&body));
    assert_eq!(status, 200, "{text}");
    let preview: Value = serde_json::from_str(&text).unwrap();
    let previewed = preview["partitions"].as_array().unwrap();
    assert_eq!(previewed.len(), PARTITIONS as usize, "{text}");
    for p in previewed {
        assert_eq!(p["state"], "MIRRORING", "{p}");
        assert!(p["source_error"].is_null(), "{p}");
    }
    let at: i64 = previewed
        .iter()
        .map(|p| p["source_offset"].as_i64().unwrap())
        .sum();
    assert_eq!(
        at, 2400,
        "every record mirrored, as the preview reads it: {text}"
    );
    assert!(mirrored(
        node(&nodes, survivor),
        &mirror,
        PARTITIONS as usize,
        2400
    ));

    // A stop sent to either survivor waits for every partition, wherever
    // it runs.
    let out =
        node(&nodes, survivor).cli_ok(&["mirror", "stop", "--mirror", &mirror, "--topics", &topic]);
    let text = stdout(&out);
    let parts = partitions(node(&nodes, survivor), &mirror);
    assert_eq!(parts.len(), PARTITIONS as usize, "{text}");
    for p in &parts {
        assert_eq!(p["state"], "STOPPED", "{p}\n{text}");
    }
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// A spread mirror whose properties name a variable node 2 lacks: node 2
/// cannot host the partitions placed in its shards, and a describe from any
/// node shows them with the reason (node 2's), not without them. The
/// others copy theirs. A stop then completes: what never started is idle.
fn unhostable_partitions_are_described_with_the_reason(
    nodes: &[Option<Daemon>],
    dir: &std::path::Path,
) {
    let (lacking, topic) = (node(nodes, 2), unique("unhosted"));
    create_topic(&bed().source, &topic, PARTITIONS as u32, &[]);
    produce(&topic, 0, 240);
    let props = spread_properties(
        dir,
        "unhosted.properties",
        &bed().source,
        &format!("client.id=${{env:{CLIENT_ID_VAR}}}\n"),
    );
    // Coordinated by a node that has the variable.
    let mirror = std::iter::repeat_with(|| unique("um"))
        .find(|m| owner_port(lacking, m) != lacking.port)
        .unwrap();
    node(nodes, 0).mirror_topics(&mirror, &props, &topic);

    let hosted_by_2 = |parts: &[Value]| -> Vec<Value> {
        parts
            .iter()
            .filter(|p| {
                p["error"]
                    .as_str()
                    .is_some_and(|e| e.contains(CLIENT_ID_VAR))
            })
            .cloned()
            .collect()
    };
    wait_for("node 2's partitions described with the reason", || {
        let parts = partitions(node(nodes, 1), &mirror);
        parts.len() == PARTITIONS as usize && !hosted_by_2(&parts).is_empty()
    });
    let unhosted = runs_here(lacking, &mirror);
    println!("partitions node 2 cannot host: {unhosted}");
    for i in 0..3 {
        let parts = partitions(node(nodes, i), &mirror);
        assert_eq!(parts.len(), PARTITIONS as usize, "from node {i}: {parts:?}");
        let failed = hosted_by_2(&parts);
        assert_eq!(failed.len(), unhosted, "from node {i}: {parts:?}");
        for p in &failed {
            assert_eq!(p["state"], "UNKNOWN", "{p}");
            assert_eq!(p["lag"], -1, "{p}");
        }
    }
    wait_for("the partitions the others host copied", || {
        partitions(node(nodes, 1), &mirror)
            .iter()
            .filter(|p| p["state"] == "MIRRORING" && p["error"].is_null())
            .count()
            == PARTITIONS as usize - unhosted
    });
    let out = node(nodes, 1).cli_ok(&["mirror", "stop", "--mirror", &mirror, "--topics", &topic]);
    let parts = partitions(node(nodes, 1), &mirror);
    assert!(
        parts
            .iter()
            .all(|p| p["state"] == "STOPPED" || p["state"] == "UNKNOWN"),
        "{}\n{parts:?}",
        stdout(&out)
    );
}

/// A stop runs one last group-offset pass over every partition before it
/// answers, wherever the partition runs: the periodic sync here runs once
/// an hour, so a group that committed after its first pass reaches the
/// destination only through the stop — the partitions hosted away from
/// the coordinator asking it for theirs. Kafka's own tools read the
/// offsets on both sides. The stop is a planned switchover
/// (`--fence-source`, quiet mode: the bed has no authorizer): the records
/// written just before it are drained from every host first, so the copy
/// is exact once it answers.
#[test]
fn a_stop_syncs_the_groups_of_every_partition_wherever_it_runs() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (nodes, _) = three_spread_nodes(&bed().destination, &dirs, 60);
    let count = 12;
    let topic = unique("final");
    create_topic(&bed().source, &topic, count as u32, &[]);
    // Keyed, so that every partition holds records to commit past.
    kmirror_tests::mirror::produce(&topic, &kmirror_tests::mirror::lines(1200, "f"), "none");
    let props = spread_properties(
        dirs[0].path(),
        "hourly.properties",
        &bed().source,
        "mirror.groups.sync.interval.ms=3600000\n",
    );
    let mirror = unique("fm");
    nodes[0].mirror_topics(&mirror, &props, &topic);
    wait_for("mirrored", || {
        mirrored(&nodes[1], &mirror, count as usize, 1200)
    });
    let coordinator = owner_port(&nodes[0], &mirror);
    let coordinator = nodes.iter().find(|n| n.port == coordinator).unwrap();
    let away: usize = nodes
        .iter()
        .filter(|n| n.port != coordinator.port)
        .map(|n| runs_here(n, &mirror))
        .sum();
    println!("partitions run away from the coordinator: {away} of {count}");
    assert!(away > 0, "some partitions run away from the coordinator");
    // The first periodic pass ran (no group yet); the next is an hour away.
    let gauge = format!("kmirror_sync_last_group_sync_timestamp_seconds{{mirror=\"{mirror}\"}} ");
    wait_for("the first periodic group pass", || {
        let (_, text) = coordinator.http("GET", "/metrics", None);
        text.lines()
            .find_map(|l| l.strip_prefix(&gauge))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|v| v > 0.0)
    });
    // A rebalance would start the sync again, and its first pass would
    // sync the group without the stop: the generation must not move.
    let generation = || json(&nodes[0], "/cluster").unwrap()["generation"].clone();
    let before = generation();
    let group = unique("fg");
    assert_eq!(
        group_read(&bed().source, &topic, &group, 1200, 30_000).len(),
        1200
    );
    let committed = describe_group(&bed().source, &group, &topic);
    assert_eq!(committed.len(), count as usize, "{committed:?}");
    println!("the group committed on the source: {committed:?}");

    // Records written just before a planned switchover are drained from
    // every host before anything stops.
    kmirror_tests::mirror::produce(&topic, &kmirror_tests::mirror::lines(240, "late"), "none");
    let out = nodes[2].cli_ok(&[
        "mirror",
        "stop",
        "--mirror",
        &mirror,
        "--topics",
        &topic,
        "--fence-source",
        "--quiet-ms",
        "1000",
    ]);
    println!("{}", stdout(&out));
    assert_copy_exact(&topic, count);
    let synced = describe_group(&bed().destination, &group, &topic);
    assert_eq!(generation(), before, "no rebalance during the test");
    println!(
        "as the stop answered, the destination held the group's offsets of {} partitions",
        synced.len()
    );
    assert_eq!(
        synced, committed,
        "every partition's offset synced by the stop: source {committed:?}, destination {synced:?}"
    );
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// A topic altered from `delete` to `compact` keeps the keyless records it
/// took before, and its destination, created compacted, refuses them. The
/// topic's one partition is hosted away from the mirror's coordinator, so
/// the coordinator runs none of it: the partition fails saying why, the
/// coordinator reads the refusal in the partition's shard and holds the
/// destination topic, and the retry copies every record, in order. Whether
/// the hosted copy caught up is known only where it runs: the coordinator
/// asks every node, and lets the hold go while the topic is mirrored once
/// the host says its copy caught up — the destination compacted again.
#[test]
fn keyless_records_of_a_partition_hosted_elsewhere_are_copied_under_a_hold() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (nodes, _) = three_spread_nodes(&bed().destination, &dirs, 60);
    let topic = unique("keyless");
    create_topic(&bed().source, &topic, 1, &[]);
    kmirror_tests::mirror::produce(
        &topic,
        "seq:0\tNULL\tbefore\nseq:1\tNULL\tbefore-too\n",
        "none",
    );
    kmirror_tests::mirror::alter_configs(
        "topics",
        &topic,
        "--add-config",
        "cleanup.policy=compact",
    );
    kmirror_tests::mirror::produce(&topic, "seq:2\tk\tafter\n", "none");
    let topic_id = topic_id_of(&bed().source, &topic);
    let props = spread_properties(dirs[0].path(), "keyless.properties", &bed().source, "");
    // A mirror whose coordinator shard is not the partition's.
    let mirror = std::iter::repeat_with(|| unique("km"))
        .find(|m| {
            let key = MirrorPartitionKey::new(m.as_str(), topic_id, 0);
            placement_shard(&key, true, SHARDS) != coordinator_partition(m, SHARDS)
        })
        .unwrap();
    nodes[0].mirror_topics(&mirror, &props, &topic);
    wait_for("the partition copied, its keyless records too", || {
        mirrored(&nodes[1], &mirror, 1, 3)
    });
    assert_copy_exact(&topic, 1);
    let overrides = || kmirror_tests::mirror::topic_overrides(&bed().destination, &topic);
    wait_for("the hold let go, the topic still mirrored", || {
        overrides().get("cleanup.policy").map(String::as_str) == Some("compact")
    });
    let logs: String = dirs
        .iter()
        .map(|d| std::fs::read_to_string(d.path().join("daemon.log")).unwrap_or_default())
        .collect();
    for said in [
        "the destination is held at cleanup.policy=delete",
        "the copy caught up: the keyless hold is let go",
    ] {
        assert!(logs.contains(said), "no node logged {said:?}");
    }
    let parts = partitions(&nodes[1], &mirror);
    assert_eq!(parts.len(), 1, "{parts:?}");
    assert_eq!(parts[0]["state"], "MIRRORING", "{parts:?}");
    // Keyed records go on being copied into the compacted topic.
    kmirror_tests::mirror::produce(&topic, "seq:3\tk2\tlater\n", "none");
    wait_for("the keyed record copied", || {
        mirrored(&nodes[1], &mirror, 1, 4)
    });
    assert_copy_exact(&topic, 1);
    // `/audit`, asked of any node, tells the topic's records from the
    // coordinator's shard and the partition's from the shard it is placed
    // in, each line naming its shard.
    let placed = placement_shard(
        &MirrorPartitionKey::new(mirror.as_str(), topic_id, 0),
        true,
        SHARDS,
    );
    let (status, body) = nodes[2].http(
        "GET",
        &format!("/audit?mirror={mirror}&topic={topic}&limit=1000"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let lines: Vec<Value> = serde_json::from_str(&body).unwrap();
    let told = |shard: i32, kind: &str| {
        lines
            .iter()
            .any(|l| l["shard"] == shard && l["type"] == kind)
    };
    let home = coordinator_partition(&mirror, SHARDS);
    for (shard, kind) in [
        (home, "MirrorTopicStateChange"),
        (placed, "MirrorPartitionState"),
        (placed, "OffsetMapRun"),
    ] {
        assert!(told(shard, kind), "no {kind} from shard {shard}: {body}");
    }
    nodes[2].cli_ok(&["mirror", "stop", "--mirror", &mirror, "--topics", &topic]);
    assert_eq!(
        overrides().get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// SIGSTOP a node that hosts partitions of a spread mirror it does not
/// coordinate, past the session timeout, under a continuous producer: the
/// others take its shards and fence the partitions it hosted (read from
/// the coordinator's shard, `hosted_writable`); when it runs again,
/// nothing it still had to send lands — the broker refuses it — it joins
/// again, and the copy is exact.
#[test]
fn a_stopped_host_lands_nothing_after_its_partitions_were_taken_over() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (nodes, _) = three_spread_nodes(&bed().destination, &dirs, 60);
    let count = 12;
    let (topic, mirror) = spread_mirror_of(&nodes[0], dirs[0].path(), &bed().source, count);
    let producer = Batches::start(&topic);
    wait_for("the mirror copying", || {
        mirrored_at_least(&nodes[1], &mirror, 200)
    });

    // The host to stop: not the coordinator, the one running the most.
    let coordinator = owner_port(&nodes[0], &mirror);
    let stopped = (0..3)
        .filter(|&i| nodes[i].port != coordinator)
        .max_by_key(|&i| runs_here(&nodes[i], &mirror))
        .unwrap();
    let hosted = runs_here(&nodes[stopped], &mirror);
    assert!(hosted > 0, "the node to stop hosts partitions");
    let other = (0..3).find(|&i| i != stopped).unwrap();
    let before = copied(&nodes[other], &mirror);
    signal(&nodes[stopped], "-STOP");
    let paused = std::time::Instant::now();
    // A describe while it is silent but still a member answers, without
    // it: its partitions from their recorded state.
    let parts = partitions(&nodes[other], &mirror);
    println!(
        "a describe while a member is silent answered in {:.1} s",
        paused.elapsed().as_secs_f64()
    );
    assert_eq!(parts.len(), count as usize, "{parts:?}");
    wait_for("the stopped node out of the group", || {
        json(&nodes[other], "/cluster").is_some_and(|s| s["members"].as_array().unwrap().len() == 2)
    });
    println!(
        "the stopped host was out after {:.1} s (session timeout {} s)",
        paused.elapsed().as_secs_f64(),
        SESSION_MS / 1000
    );
    // A describe meanwhile waits a few seconds for the silent node, and
    // shows its partitions from their recorded state.
    wait_for("the others owning every shard and copying on", || {
        settled(&nodes[other], 2) && copied(&nodes[other], &mirror) > before + 400
    });
    println!(
        "its {hosted} partitions copying elsewhere after {:.1} s",
        paused.elapsed().as_secs_f64()
    );
    signal(&nodes[stopped], "-CONT");
    wait_for("the stopped node back as a member", || {
        settled(&nodes[other], 3)
    });
    let produced = producer.stop();
    wait_for("everything mirrored", || {
        mirrored(&nodes[other], &mirror, count as usize, produced)
    });
    assert_copy_exact(&topic, count);
    let markers = assert_no_write_after_a_fence(&topic, count);
    let log = std::fs::read_to_string(dirs[stopped].path().join("daemon.log")).unwrap();
    println!(
        "{produced} records mirrored exactly; {markers} fence markers; the stopped host was refused by the broker {} time(s)",
        log.matches("another node owns this partition now").count()
    );
    assert!(
        markers >= hosted,
        "each partition the stopped host ran was fenced: {markers} markers, {hosted} hosted"
    );
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// Scaling 1 → 3 nodes, a rolling restart (SIGTERM one node at a time,
/// started again) and scaling back 3 → 1, under a continuous producer,
/// with one spread mirror: a node joining takes partitions over from one
/// that releases them, and a node leaving releases its shards first, so
/// every partition moves without a fence marker, and the copy is exact.
#[test]
fn scaling_and_a_rolling_restart_move_a_spread_mirror_without_a_marker() {
    let cluster = unique("kr");
    let state_topic = unique("__kmirror_state_r");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let start =
        |i: usize| start_spread_node(dirs[i].path(), &bed().destination, &cluster, &state_topic);
    let mut nodes: Vec<Option<Daemon>> = vec![Some(start(0)), None, None];
    wait_for("one member owning every shard", || {
        settled(node(&nodes, 0), 1)
    });
    let count = 12;
    let (topic, mirror) = spread_mirror_of(node(&nodes, 0), dirs[0].path(), &bed().source, count);
    let producer = Batches::start(&topic);
    wait_for("the mirror copying", || {
        mirrored_at_least(node(&nodes, 0), &mirror, 200)
    });
    // Copying on after a change: 400 more records than before it.
    let copying_on = |nodes: &[Option<Daemon>], at: usize, members: usize, what: &str| {
        let before = copied(node(nodes, at), &mirror);
        let changed = std::time::Instant::now();
        wait_for(what, || {
            settled(node(nodes, at), members) && copied(node(nodes, at), &mirror) > before + 400
        });
        println!(
            "{what}: copying on after {:.1} s",
            changed.elapsed().as_secs_f64()
        );
    };

    // 1 → 3: the partitions spread over the new nodes.
    for i in 1..3 {
        nodes[i] = Some(start(i));
        copying_on(&nodes, 0, i + 1, &format!("node {i} joined"));
    }
    let shares: Vec<usize> = (0..3)
        .map(|i| runs_here(node(&nodes, i), &mirror))
        .collect();
    println!("partitions run per node after scaling up: {shares:?}");
    assert_eq!(shares.iter().sum::<usize>(), count as usize, "{shares:?}");
    assert!(
        shares.iter().all(|n| *n > 0),
        "every node runs some: {shares:?}"
    );

    // A rolling restart.
    for i in 0..3 {
        let other = (i + 1) % 3;
        assert_eq!(nodes[i].take().unwrap().terminate().code(), Some(0));
        copying_on(&nodes, other, 2, &format!("node {i} stopped"));
        nodes[i] = Some(start(i));
        wait_for(&format!("node {i} back"), || {
            settled(node(&nodes, other), 3)
        });
    }

    // 3 → 1.
    for i in [2, 1] {
        assert_eq!(nodes[i].take().unwrap().terminate().code(), Some(0));
        copying_on(&nodes, 0, i, &format!("node {i} left"));
    }
    wait_for("node 0 running every partition", || {
        runs_here(node(&nodes, 0), &mirror) == count as usize
    });

    let produced = producer.stop();
    wait_for("everything mirrored", || {
        mirrored(node(&nodes, 0), &mirror, count as usize, produced)
    });
    assert_copy_exact(&topic, count);
    let markers = assert_no_write_after_a_fence(&topic, count);
    println!(
        "{produced} records mirrored exactly through 1 → 3 → 1 nodes and a rolling restart; {markers} fence markers"
    );
    assert_eq!(markers, 0, "every handover was clean");
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// Keys hash into shards unevenly, and a group that shares shards by their
/// count can leave most of a spread mirror's partitions on one node: node
/// 0 alone first owns every shard, and when two more join it keeps the
/// first 17 of 50 by name, where the mirror below is chosen to put most of
/// its partitions. Once the shards' weights hold still, the leader moves
/// shards, each by a clean handover, until the nodes share the
/// partitions, under a continuous producer: the copy exact, no fence
/// marker.
#[test]
fn the_leader_moves_shards_until_the_nodes_share_a_spread_mirrors_partitions() {
    const STATE_PARTITIONS: i32 = 50;
    let (cluster, state_topic) = (unique("kb"), unique("__kmirror_state_b"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let start = |i: usize| {
        let names = (
            bed().destination.as_str(),
            cluster.as_str(),
            state_topic.as_str(),
        );
        let spread = "spread_partitions = true\n";
        start_node_sharded(dirs[i].path(), names, STATE_PARTITIONS, spread, &[])
    };
    let first = start(0);
    wait_for("node 0 owning every shard", || {
        settled_in(&first, 1, STATE_PARTITIONS)
    });
    let nodes = [first, start(1), start(2)];
    wait_for("three members owning every shard", || {
        settled_in(&nodes[0], 3, STATE_PARTITIONS)
    });

    let topic = unique("spread");
    create_topic(&bed().source, &topic, PARTITIONS as u32, &[]);
    let topic_id = topic_id_of(&bed().source, &topic);
    let status = json(&nodes[0], "/cluster").unwrap();
    let owners: Vec<(String, Vec<i64>)> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let shards = m["shards"].as_array().unwrap();
            (
                m["url"].as_str().unwrap().to_owned(),
                shards.iter().filter_map(Value::as_i64).collect(),
            )
        })
        .collect();
    let placed = |mirror: &str| -> Vec<usize> {
        let shards: Vec<i64> = (0..PARTITIONS)
            .map(|p| {
                let key = MirrorPartitionKey::new(mirror, topic_id, p);
                i64::from(placement_shard(&key, true, STATE_PARTITIONS))
            })
            .collect();
        let mut per: Vec<usize> = owners
            .iter()
            .map(|(_, own)| shards.iter().filter(|s| own.contains(s)).count())
            .collect();
        per.sort_unstable();
        per
    };
    let (mirror, before) = std::iter::repeat_with(|| unique("bm"))
        .take(2000)
        .map(|m| {
            let per = placed(&m);
            (m, per)
        })
        .find(|(_, per)| per[2] - per[0] >= 6)
        .expect("a mirror name that the shard count leaves uneven");
    println!("partitions per node as the shards lie: {before:?}");

    let props = spread_properties(dirs[0].path(), "spread.properties", &bed().source, "");
    nodes[0].mirror_topics(&mirror, &props, &topic);
    let producer = Batches::start(&topic);
    let created = std::time::Instant::now();
    let mut shares = Vec::new();
    wait_secs("the nodes sharing the partitions", 180, || {
        shares = nodes.iter().map(|n| runs_here(n, &mirror)).collect();
        shares.sort_unstable();
        shares.iter().sum::<usize>() == PARTITIONS as usize && shares[2] - shares[0] <= 2
    });
    println!(
        "partitions per node {:.1} s after the mirror was created: {shares:?}",
        created.elapsed().as_secs_f64()
    );
    let produced = producer.stop();
    wait_for("everything mirrored", || {
        mirrored(&nodes[1], &mirror, PARTITIONS as usize, produced)
    });
    assert_copy_exact(&topic, PARTITIONS);
    let markers = assert_no_write_after_a_fence(&topic, PARTITIONS);
    println!("{produced} records mirrored exactly; {markers} fence markers");
    assert_eq!(markers, 0, "every shard moved by a clean handover");
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}
