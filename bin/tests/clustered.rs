//! Three `kmirror daemon` processes as one clustered daemon, against the
//! real test bed: they share the state topic's partitions through a group
//! on the destination, answer for each other's mirrors, and take over the
//! work of a node killed with SIGKILL.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;
use kmirror_events::coordinator_partition;
use kmirror_tests::{bed, create_topic, unique, OwnPair};
use serde_json::Value;

fn start_node_here(dir: &Path, cluster: &str, state_topic: &str) -> Daemon {
    start_node(dir, &bed().destination, cluster, state_topic)
}

#[test]
fn clustered_nodes_share_the_work_and_take_over_a_killed_one() {
    let cluster = unique("kc");
    let state_topic = unique("__kmirror_state_c");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<Daemon>> = dirs
        .iter()
        .map(|d| Some(start_node_here(d.path(), &cluster, &state_topic)))
        .collect();
    wait_for("three members owning every shard", || {
        settled(node(&nodes, 0), 3)
    });
    let out = node(&nodes, 1).cli_ok(&["cluster", "status"]);
    let text = stdout(&out);
    assert!(text.contains("3 member(s)"), "{text}");
    assert!(text.contains("(this node)"), "{text}");
    let status = json(node(&nodes, 1), "/cluster").expect("/cluster answers");
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
    let all: Vec<Value> =
        serde_json::from_value(json(node(&nodes, 2), "/partitions").expect("/partitions answers"))
            .unwrap();
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
    // A forwarded request carries the sender's group generation. The
    // coordinator refuses one from a sender that has seen a newer generation
    // than it has (it may have lost the shard in a rebalance it has not
    // heard of yet) and serves one from the same generation.
    let coordinator = (0..3).find(|&i| node(&nodes, i).port == owner).unwrap();
    let coordinator = node(&nodes, coordinator);
    let generation = json(coordinator, "/cluster").expect("/cluster answers")["generation"]
        .as_i64()
        .expect("a generation");
    let path = format!("/mirrors/{mirror}/partitions");
    let newer = (generation + 1).to_string();
    let (status, body) = coordinator
        .try_http_with("GET", &path, None, &[("kmirror-forwarded", &newer)])
        .expect("admin API answers");
    assert!(
        status >= 400
            && body.contains("NOT_COORDINATOR")
            && body.contains(&format!("generation {generation}")),
        "{status} {body}"
    );
    let same = generation.to_string();
    let (status, body) = coordinator
        .try_http_with("GET", &path, None, &[("kmirror-forwarded", &same)])
        .expect("admin API answers");
    assert_eq!(status, 200, "{body}");
    // The status page's log read goes to the mirror's coordinator too: its
    // shard's log (the state topic partition) tells the pause.
    let (status, body) = node(&nodes, other).http(
        "GET",
        &format!("/audit?mirror={mirror}&type=MirrorPartitionState&limit=20"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let lines: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["text"].as_str().unwrap().contains("-> PAUSED")),
        "{body}"
    );
    assert_eq!(node(&nodes, other).http("GET", "/ui", None).0, 200);

    // kill -9 the coordinator of the first mirror while Kafka's verifiable
    // producer writes to its topic: the others take its shards over and the
    // copy goes on, exactly.
    let (mirror, topic) = &mirrors[0];
    let producer = start_producer(&bed().source, topic, 200);
    let owner = owner_port(node(&nodes, 0), mirror);
    let victim = (0..3).find(|&i| node(&nodes, i).port == owner).unwrap();
    let copied = |d: &Daemon| -> Option<i64> {
        let parts: Vec<Value> =
            serde_json::from_value(json(d, &format!("/mirrors/{mirror}/partitions"))?).ok()?;
        (parts.len() == 2 && parts.iter().all(|p| p["state"] == "MIRRORING")).then(|| {
            parts
                .iter()
                .map(|p| p["source_offset"].as_i64().unwrap_or(0))
                .sum()
        })
    };
    wait_for("the producer's records being copied", || {
        copied(node(&nodes, victim)).is_some_and(|n| n > 300)
    });
    let at_kill = copied(node(&nodes, victim)).unwrap();
    kill9(nodes[victim].take().unwrap());
    let killed = Instant::now();
    let survivor = (0..3).find(|&i| nodes[i].is_some()).unwrap();
    let deadline = killed + Duration::from_secs(90);
    // Handed over: another node copies the mirror past where it stood.
    while copied(node(&nodes, survivor)).is_none_or(|n| n <= at_kill) {
        assert!(
            Instant::now() < deadline,
            "the killed node's mirror did not resume elsewhere within 90 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let handover = killed.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    stop_producer(producer);
    let written: usize = (0..2).map(|p| values(&bed().source, topic, p).len()).sum();
    wait_for("everything the producer wrote mirrored", || {
        mirrored(node(&nodes, survivor), mirror, 2, written as i64)
    });
    println!(
        "handover: {mirror} copying again on another node {:.1} s after its coordinator was killed \
         under a producer at 200 records/s (session timeout {} s); {written} records, 0 lost, 0 twice",
        handover.as_secs_f64(),
        SESSION_MS / 1000
    );
    wait_for("two members owning every shard", || {
        settled(node(&nodes, survivor), 2)
    });
    // Nothing lost, nothing twice: the destination holds exactly what the
    // source does (the takeover's fence took one offset per partition).
    assert_copy_exact(topic, 2);
    assert_eq!(assert_no_write_after_a_fence(topic, 2), 2);
    // The other mirrors may still be aligning where their shard moved.
    for (mirror, _) in &mirrors[1..] {
        wait_for(&format!("{mirror} copied whole on the survivor"), || {
            mirrored(node(&nodes, survivor), mirror, 2, 200)
        });
    }
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

#[test]
fn a_stopped_node_lands_nothing_after_its_work_was_taken_over() {
    let cluster = unique("kz");
    let state_topic = unique("__kmirror_state_z");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Daemon> = dirs
        .iter()
        .map(|d| start_node_here(d.path(), &cluster, &state_topic))
        .collect();
    wait_for("three members owning every shard", || settled(&nodes[0], 3));
    let topic = unique("cz");
    create_topic(&bed().source, &topic, 2, &[]);
    let mirror = unique("zm");
    let props = write_properties(dirs[0].path());
    nodes[0].cli_ok(&[
        "mirror",
        "create",
        "--mirror",
        &mirror,
        "--mirror-config",
        &props,
        "--topics",
        &topic,
    ]);
    // A producer writes all along: the stopped node's pumps have records
    // to copy the moment it runs again.
    let producer = Batches::start(&topic);
    wait_for("the mirror copying", || {
        mirrored_at_least(&nodes[1], &mirror, 200)
    });
    let owner = owner_port(&nodes[0], &mirror);
    let stopped = nodes.iter().position(|n| n.port == owner).unwrap();
    let other = (stopped + 1) % 3;
    signal(&nodes[stopped], "-STOP");
    let paused = Instant::now();
    // The others take its shards over once its session times out…
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = json(&nodes[other], "/cluster").expect("/cluster answers");
        let gone = status["members"].as_array().unwrap().len() == 2;
        if gone && settled(&nodes[other], 2) && mirrored_at_least(&nodes[other], &mirror, 400) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no takeover within 90 s: {status}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "takeover of a stopped node's mirror after {:.1} s (session timeout 6 s)",
        paused.elapsed().as_secs_f64()
    );
    // …and when it runs again, whatever it still had to send is refused at
    // the broker; it learns it is out, and joins again.
    signal(&nodes[stopped], "-CONT");
    wait_for("the stopped node back as a member", || {
        settled(&nodes[other], 3)
    });
    let produced = producer.stop();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !mirrored(&nodes[other], &mirror, 2, produced) {
        assert!(Instant::now() < deadline, "not caught up within 90 s");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_copy_exact(&topic, 2);
    let markers = assert_no_write_after_a_fence(&topic, 2);
    let log = std::fs::read_to_string(dirs[stopped].path().join("daemon.log")).unwrap();
    println!(
        "{produced} records mirrored exactly; {markers} fence markers on the destination; the stopped node was refused by the broker {} time(s) and told it was out {} time(s)",
        log.matches("another node owns this partition now").count(),
        log.matches("UnknownMemberId").count() + log.matches("IllegalGeneration").count()
    );
    for n in nodes {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// A source that takes SASL/SCRAM only: the mirror's password is a
/// `${file:…}` reference, which travels through the state topic as written
/// (a literal password would be stripped there) and is resolved from the
/// file on whichever node runs the mirror — so the node that takes over
/// from a killed coordinator connects too.
#[test]
fn a_secret_by_reference_follows_the_mirror_to_another_node() {
    let pair = OwnPair::start("kmirror-cluster-sasl-bed", &["--security"]);
    let cluster = unique("ks");
    let state_topic = unique("__kmirror_state_s");
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<Daemon>> = dirs
        .iter()
        .map(|d| {
            Some(start_node(
                d.path(),
                &pair.destination,
                &cluster,
                &state_topic,
            ))
        })
        .collect();
    wait_for("two members owning every shard", || {
        settled(node(&nodes, 0), 2)
    });
    let secrets = dirs[0].path().join("secrets.properties");
    std::fs::write(
        &secrets,
        format!("source.password={}\n", pair.get("SCRAM_PASSWORD")),
    )
    .unwrap();
    let props = dirs[0].path().join("source.properties");
    std::fs::write(
        &props,
        format!(
            "bootstrap.servers={}\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"${{file:{}:source.password}}\";\n",
            pair.get("CLUSTER_1_SASL"),
            pair.get("SCRAM_USER"),
            secrets.display()
        ),
    )
    .unwrap();
    let topic = unique("sasl");
    create_topic(&pair.source, &topic, 2, &[]);
    produce_to(&pair.source, &topic, 0, 100);
    let mirror = unique("sm");
    node(&nodes, 0).cli_ok(&[
        "mirror",
        "create",
        "--mirror",
        &mirror,
        "--mirror-config",
        props.to_str().unwrap(),
        "--topics",
        &topic,
    ]);
    wait_for("mirrored", || mirrored(node(&nodes, 1), &mirror, 2, 100));
    let owner = owner_port(node(&nodes, 0), &mirror);
    let victim = (0..2).find(|&i| node(&nodes, i).port == owner).unwrap();
    kill9(nodes[victim].take().unwrap());
    produce_to(&pair.source, &topic, 100, 200);
    let survivor = 1 - victim;
    let deadline = Instant::now() + Duration::from_secs(90);
    while !mirrored(node(&nodes, survivor), &mirror, 2, 200) {
        assert!(
            Instant::now() < deadline,
            "the other node did not take the SASL mirror over within 90 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The password never reached the state topic; the reference did.
    let published = kmirror_tests::kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            &pair.destination,
            "--topic",
            &state_topic,
            "--from-beginning",
            "--timeout-ms",
            "5000",
        ],
    );
    assert!(
        published.contains("source.password"),
        "the reference travels"
    );
    assert!(
        !published.contains(&pair.get("SCRAM_PASSWORD")),
        "the password itself never leaves the node"
    );
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// The lines of `dir`'s daemon log that say how a shard was handed over.
fn handover_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("daemon.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("handover of shard"))
        .map(str::to_owned)
        .collect()
}

/// `mirror`'s partitions as `daemon` describes them, with `offsets_identical`.
fn offsets_identical(daemon: &Daemon, mirror: &str) -> Vec<bool> {
    let parts: Vec<Value> = serde_json::from_value(
        json(daemon, &format!("/mirrors/{mirror}/partitions")).expect("describe answers"),
    )
    .unwrap();
    parts
        .iter()
        .map(|p| p["offsets_identical"].as_bool().unwrap())
        .collect()
}

#[test]
fn a_rolling_restart_hands_shards_over_without_a_marker() {
    let cluster = unique("kr");
    let state_topic = unique("__kmirror_state_r");
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<Daemon>> = dirs
        .iter()
        .map(|d| Some(start_node_here(d.path(), &cluster, &state_topic)))
        .collect();
    wait_for("two members owning every shard", || {
        settled(node(&nodes, 0), 2)
    });
    let props = write_properties(dirs[0].path());
    let topic = unique("rr");
    create_topic(&bed().source, &topic, 2, &[]);
    produce(&topic, 0, 200);
    let mirror = unique("rm");
    node(&nodes, 0).cli_ok(&[
        "mirror",
        "create",
        "--mirror",
        &mirror,
        "--mirror-config",
        &props,
        "--topics",
        &topic,
    ]);
    wait_for("mirrored", || mirrored(node(&nodes, 0), &mirror, 2, 200));

    // SIGTERM the mirror's coordinator: it stops its shards (every pump
    // closed and awaited), releases them, and leaves the group.
    let owner = owner_port(node(&nodes, 0), &mirror);
    let victim = (0..2).find(|&i| node(&nodes, i).port == owner).unwrap();
    let survivor = 1 - victim;
    let stopped = Instant::now();
    assert_eq!(nodes[victim].take().unwrap().terminate().code(), Some(0));
    produce(&topic, 200, 400);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !mirrored(node(&nodes, survivor), &mirror, 2, 400) {
        assert!(Instant::now() < deadline, "no takeover within 90 s");
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "clean handover: {mirror} mirrored again on the other node {:.1} s after SIGTERM",
        stopped.elapsed().as_secs_f64()
    );

    // Start it again: the group rebalances, and the shard may move back
    // (revoked from the survivor: a second clean handover).
    nodes[victim] = Some(start_node_here(dirs[victim].path(), &cluster, &state_topic));
    wait_for("two members again", || settled(node(&nodes, survivor), 2));
    produce(&topic, 400, 600);
    wait_for("600 mirrored", || {
        mirrored(node(&nodes, survivor), &mirror, 2, 600)
    });
    let back = owner_port(node(&nodes, survivor), &mirror) == node(&nodes, victim).port;
    println!(
        "after the restart the shard is on the {} node",
        if back { "restarted" } else { "other" }
    );

    let markers = assert_no_write_after_a_fence(&topic, 2);
    let identical = offsets_identical(node(&nodes, survivor), &mirror);
    let lines: Vec<String> = dirs.iter().flat_map(|d| handover_lines(d.path())).collect();
    let shard = coordinator_partition(&mirror, SHARDS);
    // (clean, partitions) of every start of the mirror's shard; the first,
    // on an empty log before the mirror existed, had nothing to fence.
    let starts: Vec<(bool, i64)> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["shard"] == shard)
        .map(|l| {
            let message = l["fields"]["message"].as_str().unwrap().to_owned();
            (
                message.starts_with("clean handover"),
                l["fields"]["partitions"].as_i64().unwrap(),
            )
        })
        .collect();
    println!("markers on the destination partitions: {markers}; offsets_identical: {identical:?}");
    println!("starts of shard {shard} (clean, partitions to fence): {starts:?}");
    assert_eq!(markers, 0, "a clean handover writes no marker");
    assert_eq!(identical, vec![true, true]);
    let clean_takeovers = starts.iter().filter(|&&(clean, n)| clean && n == 2).count();
    assert_eq!(clean_takeovers, if back { 2 } else { 1 }, "{starts:?}");
    assert!(
        starts.iter().all(|&(clean, n)| clean || n == 0),
        "no start of the mirror's shard fenced a partition: {starts:?}"
    );
    assert_copy_exact(&topic, 2);
    for n in nodes.into_iter().flatten() {
        assert_eq!(n.terminate().code(), Some(0));
    }
}

/// Runs a node with the settings `text` (its admin listener added) and
/// waits for it to exit; its log. Panics if it still runs after 60 s.
fn refused_start(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kmirror.toml");
    let port = free_port();
    std::fs::write(
        &config,
        format!("admin_listen = \"127.0.0.1:{port}\"\n{text}"),
    )
    .unwrap();
    let log = dir.path().join("daemon.log");
    let mut child = ChildGuard(
        std::process::Command::new(KMIRROR)
            .args(["daemon", "--config", config.to_str().unwrap()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn kmirror daemon"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running after 60 s: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "it should refuse: {err}");
    err
}

/// Settings the destination makes wrong refuse the node's start, naming
/// the setting and what would do:
/// - a `state_topic_num_partitions` that differs from the state topic's
///   partition count (made by nodes configured otherwise). Before, the
///   node joined and routed mirrors by its own count: shards past it were
///   never loaded (their mirrors vanished from `list`), and a mirror
///   routed to another shard could be created again under the same name;
/// - a session timeout below the group coordinator's minimum (6 s by
///   default). Before, every join was refused with INVALID_SESSION_TIMEOUT
///   and retried forever, the node owning nothing.
#[test]
fn a_node_the_destination_would_refuse_does_not_start() {
    let state_topic = unique("__kmirror_state_count");
    let partitions = (SHARDS + 2).to_string();
    kmirror_tests::kafka_tool_ok(
        "kafka-topics",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--create",
            "--topic",
            &state_topic,
            "--partitions",
            &partitions,
            "--config",
            "cleanup.policy=compact",
        ],
    );
    let settings = |partitions: i32, session_ms: u64| {
        format!(
            "state_topic = \"{state_topic}\"\nstate_topic_num_partitions = {partitions}\n[destination]\nbootstrap_servers = \"{}\"\n[cluster]\nid = \"{}\"\nsession_timeout_ms = {session_ms}\nheartbeat_interval_ms = 1000\n",
            bed().destination,
            unique("refused")
        )
    };
    let err = refused_start(&settings(SHARDS, SESSION_MS));
    assert!(
        err.contains("state_topic_num_partitions") && err.contains(&partitions),
        "{err}"
    );
    let err = refused_start(&settings(SHARDS + 2, 3000));
    assert!(
        err.contains("cluster.session_timeout_ms") && err.contains("group.min.session.timeout.ms"),
        "{err}"
    );
}
