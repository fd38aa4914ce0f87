//! Metadata sync against real Kafka, with Kafka's own tools as the clients:
//! a Java console-consumer group's committed offsets arrive exactly
//! translated on the destination (also through a compacted topic's gaps),
//! and a consumer in that group there reads exactly what the group had not
//! read on the source; a group with a live member on the destination is left
//! alone; topic configs and partition counts follow the source.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kmirror_actors::kafka::admin::{Admin, ConfigResource};
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_actors::node::Node;
use kmirror_tests::mirror::{
    alter_configs, consume_sorted, describe_group, group_read, mirror_props, node, produce,
    records, wait_caught_up,
};
use kmirror_tests::{bed, create_topic, kafka_script, kafka_tool_ok, unique};

async fn admin(bootstrap: &str) -> Admin {
    Admin::new(
        KafkaClient::connect(ClientConfig::plaintext(bootstrap))
            .await
            .expect("connect"),
    )
}

/// Waits (polling with kmirror's admin client, cheap) until the group's
/// destination offsets on `topic` are `expected`.
async fn wait_group_offsets(dest: &Admin, group: &str, topic: &str, expected: &BTreeMap<i32, i64>) {
    let start = Instant::now();
    loop {
        let have: BTreeMap<i32, i64> = dest
            .offset_fetch(group, None)
            .await
            .map(|m| {
                m.into_iter()
                    .filter(|((t, _), _)| t == topic)
                    .map(|((_, p), o)| (p, o.offset))
                    .collect()
            })
            .unwrap_or_default();
        if &have == expected {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "group {group} on the destination has {have:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The destination offset a consumer positioned at source offset `c` of a
/// partition must resume at: where the first source record at or after `c`
/// landed (records correspond in order), else the destination end.
fn expected_position(
    source: &[(i32, i64, String)],
    dest: &[(i32, i64, String)],
    partition: i32,
    c: i64,
) -> i64 {
    let s: Vec<_> = source.iter().filter(|r| r.0 == partition).collect();
    let d: Vec<_> = dest.iter().filter(|r| r.0 == partition).collect();
    assert_eq!(s.len(), d.len());
    match s.iter().position(|r| r.1 >= c) {
        Some(i) => d[i].1,
        None => d.last().map(|r| r.1 + 1).unwrap_or(0),
    }
}

/// The whole claim for one group: the destination shows the exactly
/// translated offsets (checked with `kafka-consumer-groups`), and a
/// consumer in the group on the destination reads exactly the records the
/// group had not read on the source.
/// Returns the source offsets the group had committed and the destination
/// offsets they translated to.
async fn assert_group_moves_exactly(
    topic: &str,
    group: &str,
    total: usize,
) -> (BTreeMap<i32, i64>, BTreeMap<i32, i64>) {
    let src = records(&bed().source, topic, total);
    let dst = records(&bed().destination, topic, total);
    assert_eq!(src.len(), total);
    let committed = describe_group(&bed().source, group, topic);
    assert!(!committed.is_empty(), "the source group committed nothing");
    let expected: BTreeMap<i32, i64> = committed
        .iter()
        .map(|(p, c)| (*p, expected_position(&src, &dst, *p, *c)))
        .collect();
    wait_group_offsets(&admin(&bed().destination).await, group, topic, &expected).await;
    assert_eq!(
        describe_group(&bed().destination, group, topic),
        expected,
        "kafka-consumer-groups on the destination shows the translated offsets"
    );
    // What the group has not read yet, by the source's own offsets.
    let mut unread: Vec<String> = src
        .iter()
        .filter(|(p, o, _)| committed.get(p).is_none_or(|c| o >= c))
        .map(|r| r.2.clone())
        .collect();
    let mut read = group_read(
        &bed().destination,
        topic,
        group,
        unread.len().max(1),
        10_000,
    );
    unread.sort();
    read.sort();
    assert_eq!(read, unread, "none twice, none skipped");
    (committed, expected)
}

async fn started(topic: &str, props: BTreeMap<String, String>, dir: &std::path::Path) -> Node {
    let node = node(dir).await;
    node.create_mirror("sync", props)
        .await
        .expect("create mirror");
    node.start_topics("sync", &[topic.to_string()], &[], None)
        .await
        .expect("start");
    node
}

/// A console consumer that stays in its group until dropped (SIGTERM, so it
/// leaves the group at once).
struct LiveConsumer(Child);

impl LiveConsumer {
    fn start(bootstrap: &str, topic: &str, group: &str) -> Self {
        let child = Command::new(kafka_script())
            .args([
                "tool",
                "kafka-console-consumer",
                "--bootstrap-server",
                bootstrap,
            ])
            .args(["--topic", topic, "--group", group, "--timeout-ms", "120000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start console consumer");
        LiveConsumer(child)
    }
}

impl Drop for LiveConsumer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

#[actix::test]
async fn group_offsets_move_exactly_and_live_groups_are_left_alone() {
    let topic = unique("sync-plain");
    create_topic(&bed().source, &topic, 3, &[]);
    let input: String = (0..300)
        .map(|i| format!("seq:{i}\tk{i}\tv-{i}\n"))
        .collect();
    produce(&topic, &input, "lz4");
    let dir = tempfile::tempdir().unwrap();
    let node = started(&topic, mirror_props(), dir.path()).await;
    wait_caught_up(&node, "sync", 300, Duration::from_secs(60)).await;

    // A group with a live member on the destination.
    let live = unique("g-live");
    let member = LiveConsumer::start(&bed().destination, &topic, &live);
    let dest = admin(&bed().destination).await;
    let start = Instant::now();
    loop {
        let groups = dest.list_groups(&[]).await.unwrap();
        if groups
            .iter()
            .any(|g| g.group_id == live && g.state.eq_ignore_ascii_case("stable"))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{live} never became stable: {groups:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Two source groups read part of the topic and commit.
    let group = unique("g-moves");
    assert_eq!(
        group_read(&bed().source, &topic, &group, 50, 20_000).len(),
        50
    );
    assert_eq!(
        group_read(&bed().source, &topic, &live, 40, 20_000).len(),
        40
    );
    assert_group_moves_exactly(&topic, &group, 300).await;

    // The live group was left untouched: it holds only what its own member
    // commits (its position: the end, as it started at latest), never the
    // source group's offsets. And the skip was counted.
    let ends: BTreeMap<i32, i64> = records(&bed().destination, &topic, 300).iter().fold(
        BTreeMap::new(),
        |mut m, (p, o, _)| {
            let e = m.entry(*p).or_insert(0);
            *e = (*e).max(o + 1);
            m
        },
    );
    let source_live = describe_group(&bed().source, &live, &topic);
    assert!(source_live.iter().any(|(p, o)| ends.get(p) != Some(o)));
    for (p, o) in describe_group(&bed().destination, &live, &topic) {
        assert_eq!(
            Some(&o),
            ends.get(&p),
            "partition {p}: only the live member commits"
        );
    }
    // The counters are those of finished passes: wait for one that ran
    // while the member was there (a pass over a bed with many groups, late
    // in the suite, can outlast the checks above).
    let waited = Instant::now();
    let m = loop {
        let m = node.sync_metrics().await;
        if m[0].active_groups_skipped >= 1 && m[0].last_group_sync_ms > 0 {
            break m;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "no finished group pass skipped {live} within 60 s: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "skip of the live group counted {:.1} s after the offsets moved: {m:?}",
        waited.elapsed().as_secs_f64()
    );

    // Its member leaves: the group is synced like any other.
    drop(member);
    assert_group_moves_exactly(&topic, &live, 300).await;
    node.shutdown().await;
}

#[actix::test]
async fn a_compacted_topic_with_gaps_translates_group_offsets_exactly() {
    let topic = unique("sync-compact");
    create_topic(
        &bed().source,
        &topic,
        1,
        &[
            "cleanup.policy=compact",
            "segment.ms=300",
            "min.cleanable.dirty.ratio=0.0001",
            "min.compaction.lag.ms=0",
            "max.compaction.lag.ms=500",
        ],
    );
    // Even offsets reuse 10 keys (all but the last ones compact away), odd
    // offsets are unique: gaps everywhere a group is likely to stop.
    let input: String = (0..300)
        .map(|i| {
            let key = if i % 2 == 0 {
                format!("even-{}", i % 20)
            } else {
                format!("odd-{i}")
            };
            format!("seq:{i}\t{key}\tv-{i}\n")
        })
        .collect();
    produce(&topic, &input, "none");
    tokio::time::sleep(Duration::from_millis(700)).await;
    produce(&topic, "seq:roll\troll\tv-roll\n", "none");
    let start = Instant::now();
    let surviving = loop {
        let n = consume_sorted(&bed().source, &topic, 301, 15_000).len();
        if n < 301 {
            break n;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no compaction");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = started(&topic, mirror_props(), dir.path()).await;
    wait_caught_up(&node, "sync", surviving as u64, Duration::from_secs(60)).await;
    let group = unique("g-compact");
    assert_eq!(
        group_read(&bed().source, &topic, &group, 7, 20_000).len(),
        7
    );
    let (committed, translated) = assert_group_moves_exactly(&topic, &group, surviving).await;
    assert_ne!(
        committed, translated,
        "compaction gaps make the offsets differ"
    );
    node.shutdown().await;
}

async fn wait_config(dest: &Admin, topic: &str, key: &str, value: &str) {
    let start = Instant::now();
    loop {
        let entries = dest
            .describe_configs(&ConfigResource::Topic(topic.to_string()))
            .await
            .unwrap();
        if entries
            .iter()
            .any(|e| e.name == key && e.value.as_deref() == Some(value))
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{key} never became {value}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[actix::test]
async fn configs_and_partition_counts_follow_the_source() {
    let topic = unique("sync-meta");
    create_topic(&bed().source, &topic, 8, &[]);
    let input: String = (0..80).map(|i| format!("seq:{i}\tk{i}\tv-{i}\n")).collect();
    produce(&topic, &input, "none");
    let mut props = mirror_props();
    props.insert(
        "topic.properties.exclude".into(),
        "delete.retention.ms".into(),
    );
    let dir = tempfile::tempdir().unwrap();
    let node = started(&topic, props, dir.path()).await;
    wait_caught_up(&node, "sync", 80, Duration::from_secs(60)).await;

    alter_configs(
        "topics",
        &topic,
        "--add-config",
        "retention.ms=86400000,delete.retention.ms=1000,unclean.leader.election.enable=true",
    );
    let dest = admin(&bed().destination).await;
    wait_config(&dest, &topic, "retention.ms", "86400000").await;
    let described = kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            &topic,
        ],
    );
    assert!(described.contains("retention.ms=86400000"), "{described}");
    assert!(
        !described.contains("delete.retention.ms=1000"),
        "the mirror's exclude: {described}"
    );
    assert!(
        !described.contains("unclean.leader.election.enable=true"),
        "the KIP's default exclude: {described}"
    );

    kafka_tool_ok(
        "kafka-topics",
        &[
            "--bootstrap-server",
            &bed().source,
            "--alter",
            "--topic",
            &topic,
            "--partitions",
            "12",
        ],
    );
    let input: String = (80..200)
        .map(|i| format!("seq:{i}\tk{i}\tv-{i}\n"))
        .collect();
    produce(&topic, &input, "none");
    let start = Instant::now();
    while node.describe(Some("sync")).await.unwrap().len() < 12 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "partitions never grew"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_caught_up(&node, "sync", 200, Duration::from_secs(60)).await;
    let described = kafka_tool_ok(
        "kafka-topics",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--describe",
            "--topic",
            &topic,
        ],
    );
    assert!(described.contains("PartitionCount: 12"), "{described}");
    assert_eq!(
        consume_sorted(&bed().source, &topic, 200, 30_000),
        consume_sorted(&bed().destination, &topic, 200, 30_000),
        "all 12 partitions mirrored, offsets identical"
    );
    let m = node.sync_metrics().await;
    assert_eq!(
        (m[0].partitions_added, m[0].config_sync_errors),
        (4, 0),
        "{m:?}"
    );
    node.shutdown().await;
}

/// A value set on one source broker (a dynamic per-broker config, which
/// DescribeConfigs reports for every topic that broker describes) is not a
/// topic's own setting: it is copied neither when the destination topic is
/// created nor by the config sync. Before, it became a permanent override
/// of every mirrored topic, as Kafka's tools show here.
#[actix::test]
async fn a_source_brokers_own_setting_is_not_copied_as_a_topic_config() {
    let broker_config = |op: &str, config: &str| alter_configs("brokers", "1", op, config);
    // One week and a millisecond: harmless to the other tests' topics.
    broker_config("--add-config", "log.retention.ms=604800001");
    let topic = unique("sync-broker-cfg");
    create_topic(&bed().source, &topic, 1, &[]);
    produce(&topic, "seq:0\tk\tv\n", "none");
    let dir = tempfile::tempdir().unwrap();
    let node = started(&topic, mirror_props(), dir.path()).await;
    wait_caught_up(&node, "sync", 1, Duration::from_secs(60)).await;
    // A topic setting made after the start arrives by the config sync: the
    // sync has run over this topic when it is there.
    alter_configs("topics", &topic, "--add-config", "segment.ms=86400001");
    wait_config(
        &admin(&bed().destination).await,
        &topic,
        "segment.ms",
        "86400001",
    )
    .await;
    let described = kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            &topic,
        ],
    );
    broker_config("--delete-config", "log.retention.ms");
    assert!(described.contains("segment.ms=86400001"), "{described}");
    assert!(
        !described.contains("retention.ms"),
        "the source broker's setting became the topic's: {described}"
    );
    node.shutdown().await;
}

#[actix::test]
async fn stop_syncs_group_offsets_one_last_time_after_the_final_checkpoint() {
    let topic = unique("sync-stop");
    create_topic(&bed().source, &topic, 1, &[]);
    produce(&topic, &kmirror_tests::mirror::lines(300, "stop"), "none");
    let dir = tempfile::tempdir().unwrap();
    let mut props = mirror_props();
    // The periodic pass comes once, early; after that only stop syncs.
    props.insert("mirror.groups.sync.interval.ms".into(), "3600000".into());
    let node = started(&topic, props, dir.path()).await;
    wait_caught_up(&node, "sync", 300, Duration::from_secs(60)).await;
    let start = Instant::now();
    while node.sync_metrics().await[0].last_group_sync_ms == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "no group pass");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The group reads 120 records on the source after that pass.
    group_read(&bed().source, &topic, "g-stop", 120, 20_000);
    let committed = describe_group(&bed().source, "g-stop", &topic);
    assert_eq!(committed, BTreeMap::from([(0, 120)]));
    node.change_topics(
        "sync",
        kmirror_actors::node::TopicChange::Stop,
        std::slice::from_ref(&topic),
        None,
    )
    .await
    .unwrap();
    let start = Instant::now();
    while node.describe(Some("sync")).await.unwrap()[0].state != "STOPPED" {
        assert!(start.elapsed() < Duration::from_secs(30), "not STOPPED");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Failed over, the group resumes exactly where it was on the source.
    assert_eq!(
        describe_group(&bed().destination, "g-stop", &topic),
        committed
    );
    node.shutdown().await;
}
