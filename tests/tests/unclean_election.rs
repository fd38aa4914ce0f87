//! An unclean leader election on the source, played for real on a
//! two-broker source: the follower is stopped (it falls behind), records
//! are acknowledged by the leader alone and mirrored, the leader is killed,
//! the follower started and elected with `kafka-leader-election
//! --election-type unclean`. The mirrored records no longer exist on the
//! source, and its offsets from there on name other records:
//!
//! - (a) the new leader is shorter than the mirrored position, and kmirror
//!   keeps running through the disaster;
//! - (b) the new leader has already grown past the mirrored position, with
//!   other records, when kmirror (down through the disaster) looks again —
//!   the source's end offset alone cannot tell.
//!
//! Each with `mirror.support.unclean.leader.election=true` (repaired: the
//! destination keeps the divergent records as a hole, the map is cut where
//! the histories part, the new leader's records follow and every one of its
//! offsets translates exactly) and without it (FAILED, not retryable, the
//! KIP's message).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_actors::kafka::admin::Admin;
use kmirror_actors::kafka::fetch::{FetchError, FetchOptions, FetchSession, TopicPartition};
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_actors::node::{Node, PartitionDescription};
use kmirror_events::{MirrorPartitionKey, OffsetMapHole};
use kmirror_store::EventLog;
use kmirror_tests::mirror::{
    connector, consume_sorted, describe_topic, lines, node_with, open_log, produce_with,
};
use kmirror_tests::{kafka_tool_ok, unique, BrokerOp, PrivateBed};

/// Records both brokers hold.
const BEFORE: usize = 100;
/// Records the leader alone acknowledged, mirrored, then lost with it.
const DIVERGENT: usize = 50;
/// Records written to the new leader after kmirror repaired (variant a).
const AFTER_A: usize = 30;
/// Records written to the new leader before kmirror looks again (variant b):
/// its end is then past the mirrored position.
const AFTER_B: usize = 80;

/// Whether the mirror property is set.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ule {
    On,
    Off,
}

impl Ule {
    fn mirror(self) -> &'static str {
        match self {
            Ule::On => "on",
            Ule::Off => "off",
        }
    }
}

fn props(source: &str, ule: Ule) -> BTreeMap<String, String> {
    let mut p: BTreeMap<String, String> = [
        ("bootstrap.servers", source),
        ("request.timeout.ms", "5000"),
        ("mirror.failed.retry.initial.backoff.ms", "200"),
        ("mirror.failed.retry.max.backoff.ms", "1000"),
        // The source has no leader for a while: retry through it.
        ("mirror.failed.retry.max.attempts", "10000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if ule == Ule::On {
        p.insert(
            "mirror.support.unclean.leader.election".into(),
            "true".into(),
        );
    }
    p
}

/// A node with mirrors `on` and `off`, each copying its topic.
async fn start_node(
    dir: &std::path::Path,
    bed: &PrivateBed,
    topics: &[(Ule, &str)],
    create: bool,
) -> Node {
    let node = node_with(dir, ClientConfig::plaintext(&bed.destination), connector()).await;
    if create {
        for (ule, topic) in topics {
            node.create_mirror(ule.mirror(), props(&bed.source, *ule))
                .await
                .unwrap();
            node.start_topics(ule.mirror(), &[topic.to_string()], &[], None)
                .await
                .unwrap();
        }
    }
    node
}

async fn describe(node: &Node, mirror: &str) -> PartitionDescription {
    let parts = node.describe(Some(mirror)).await.unwrap();
    assert_eq!(parts.len(), 1, "{parts:#?}");
    parts.into_iter().next().unwrap()
}

/// Waits until `mirror`'s partition satisfies `done`, or panics with what
/// describe shows.
async fn wait_for(
    node: &Node,
    mirror: &str,
    what: &str,
    done: impl Fn(&PartitionDescription) -> bool,
) {
    let start = Instant::now();
    loop {
        let parts = node.describe(Some(mirror)).await.unwrap();
        if parts.len() == 1 && done(&parts[0]) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{mirror}: {what}: not after 120 s: {parts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn caught_up(node: &Node, mirror: &str, destination_end: usize) {
    wait_for(node, mirror, "caught up", |p| {
        p.state == "MIRRORING" && p.lag == 0 && p.destination_offset == destination_end as i64
    })
    .await;
}

fn produce(bootstrap: &str, topic: &str, input: &str, acks: &str) {
    produce_with(
        bootstrap,
        topic,
        input,
        &[&format!("acks={acks}"), "linger.ms=20"],
    );
}

/// Polls `kafka-topics --describe` until its partition line contains `what`.
fn wait_topic(bootstrap: &str, topic: &str, what: &str) {
    let start = Instant::now();
    loop {
        let d = describe_topic(bootstrap, topic);
        if d.lines()
            .any(|l| l.contains("Partition: 0") && l.contains(what))
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{topic}: no {what:?} after 60 s: {d}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn without_offsets(lines: &[String]) -> Vec<String> {
    kmirror_tests::mirror::without_offsets(lines)
}

/// The repaired mirror of `topic`: the destination still holds what it
/// held before the disaster (`kept`: the common history, then the divergent
/// records, which Kafka cannot truncate), then the new leader's `new`
/// records; each of the new leader's offsets translates exactly past the
/// kept tail.
async fn check_repaired(node: &Node, bed: &PrivateBed, topic: &str, kept: &[String], new: usize) {
    let src = consume_sorted(&bed.source, topic, BEFORE + new, 30_000);
    assert_eq!(src.len(), BEFORE + new);
    let dst = consume_sorted(&bed.destination, topic, BEFORE + DIVERGENT + new, 30_000);
    assert_eq!(dst.len(), BEFORE + DIVERGENT + new, "{topic}");
    assert_eq!(
        kept,
        &dst[..BEFORE + DIVERGENT],
        "{topic}: the destination keeps its records"
    );
    let (src, dst) = (without_offsets(&src), without_offsets(&dst));
    assert_eq!(src[..BEFORE], dst[..BEFORE], "{topic}: the common history");
    assert_eq!(
        src[BEFORE..],
        dst[BEFORE + DIVERGENT..],
        "{topic}: the new leader's records follow the kept tail"
    );
    for offset in (0..BEFORE + new).step_by(7).chain([BEFORE - 1, BEFORE]) {
        let t = node.translate("on", topic, 0, offset as i64).await.unwrap();
        let expected = if offset < BEFORE {
            offset
        } else {
            offset + DIVERGENT
        };
        assert_eq!(
            (t.kind.as_str(), t.destination_offset),
            ("exact", Some(expected as i64)),
            "{topic}: source offset {offset}"
        );
    }
}

/// The leader epoch of the batch holding `offset` of partition 0, as the
/// source's current leader serves it.
async fn batch_epoch(bootstrap: &str, topic: &str, offset: i64) -> i32 {
    let client = KafkaClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .unwrap();
    let (leader, epoch) = client.leader(topic, 0).await.unwrap();
    let tp = TopicPartition::new(topic, 0);
    let mut s = FetchSession::new(client, leader, FetchOptions::default());
    s.add(tp.clone(), offset, epoch, uuid::Uuid::nil());
    for (t, r) in s.fetch().await.unwrap() {
        if t == tp {
            let fetched = r.unwrap();
            let batch = fetched.batches().next().unwrap().unwrap();
            return batch.partition_leader_epoch();
        }
    }
    panic!("{topic}: nothing fetched at {offset}");
}

/// What kmirror's detection stands on, asked of Kafka itself: the new
/// leader answers a consumer's fetch (replica id −1) that carries the
/// divergent records' epoch as LastFetchedEpoch with a DivergingEpoch, and
/// OffsetForLeaderEpoch for that epoch with where it ends on its log.
async fn check_kafka_answers(new_leader: &str, topic: &str, divergent_epoch: i32) {
    let client = KafkaClient::connect(ClientConfig::plaintext(new_leader))
        .await
        .unwrap();
    let (leader, epoch) = client.leader(topic, 0).await.unwrap();
    assert_eq!(leader, 2, "{topic}: the follower was elected");
    assert!(epoch > divergent_epoch, "{topic}: a new leader epoch");
    let (known, end) = Admin::new(client.clone())
        .offset_for_leader_epoch(topic, 0, divergent_epoch)
        .await
        .unwrap();
    assert_eq!((known, end), (divergent_epoch, BEFORE as i64), "{topic}");
    let tp = TopicPartition::new(topic, 0);
    let mut s = FetchSession::new(client, leader, FetchOptions::default());
    let position = (BEFORE + DIVERGENT) as i64;
    s.add(tp.clone(), position, epoch, uuid::Uuid::nil());
    s.set_last_fetched_epoch(&tp, divergent_epoch);
    let r = s.fetch().await.unwrap();
    match &r[..] {
        [(
            t,
            Err(FetchError::Diverged {
                epoch,
                end_offset,
                fetch_offset,
            }),
        )] if *t == tp => {
            assert_eq!(
                (*epoch, *end_offset, *fetch_offset),
                (divergent_epoch, BEFORE as i64, position)
            );
        }
        other => panic!("{topic}: expected a diverging epoch, got {other:?}"),
    }
}

/// The log of the node in `dir` records the divergent range as a gap and
/// its destination records as a hole.
async fn check_recorded(dir: &std::path::Path, topic: &str) {
    let log = open_log(dir).await;
    let image = log.replay_all().unwrap();
    let entry = image.topic_by_name("on", topic).expect("topic in the log");
    let key = MirrorPartitionKey::new("on", entry.change.topic_id, 0);
    let gaps = image.gaps(&key);
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(
        (gaps[0].source_start, gaps[0].source_end),
        (BEFORE as i64, (BEFORE + DIVERGENT) as i64),
        "{gaps:?}"
    );
    assert!(
        gaps[0].reason.contains("unclean leader election"),
        "{gaps:?}"
    );
    let holes: Vec<OffsetMapHole> = image.offset_map(&key).holes().copied().collect();
    assert_eq!(
        holes,
        [OffsetMapHole {
            destination_start: BEFORE as i64,
            length: DIVERGENT as i64
        }]
    );
}

async fn check_failed(node: &Node) {
    wait_for(node, "off", "FAILED", |p| {
        p.state == "FAILED" && p.retry_attempt == -1
    })
    .await;
    let p = describe(node, "off").await;
    let error = p.error.unwrap_or_default();
    assert!(
        error.starts_with("Detected log truncation during mirroring")
            && error.contains(
                "unclean leader election in source cluster, but mirror.support.unclean.leader.election is disabled"
            ),
        "{error}"
    );
}

#[actix::test]
async fn an_unclean_election_on_the_source_is_detected_by_leader_epoch() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kmirror_actors=info".into()),
        )
        .with_test_writer()
        .try_init();
    let bed = PrivateBed::with_source_brokers(2);
    let name = |v: &str, ule: Ule| unique(&format!("ule-{v}-{}", ule.mirror()));
    let a = [
        (Ule::On, name("a", Ule::On)),
        (Ule::Off, name("a", Ule::Off)),
    ];
    let b = [
        (Ule::On, name("b", Ule::On)),
        (Ule::Off, name("b", Ule::Off)),
    ];
    let all: Vec<&str> = a.iter().chain(&b).map(|(_, t)| t.as_str()).collect();
    for topic in &all {
        kafka_tool_ok(
            "kafka-topics",
            &[
                "--bootstrap-server",
                &bed.source,
                "--create",
                "--topic",
                topic,
                "--replica-assignment",
                "1:2",
                "--config",
                "min.insync.replicas=1",
            ],
        );
        produce(&bed.source, topic, &lines(BEFORE, "common"), "all");
    }
    let a_topics: Vec<(Ule, &str)> = a.iter().map(|(u, t)| (*u, t.as_str())).collect();
    let b_topics: Vec<(Ule, &str)> = b.iter().map(|(u, t)| (*u, t.as_str())).collect();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let node_a = start_node(dir_a.path(), &bed, &a_topics, true).await;
    let node_b = start_node(dir_b.path(), &bed, &b_topics, true).await;
    for node in [&node_a, &node_b] {
        for ule in [Ule::On, Ule::Off] {
            caught_up(node, ule.mirror(), BEFORE).await;
        }
    }

    // The follower falls behind: the leader alone acknowledges the next
    // records, and kmirror mirrors them.
    bed.source_broker(2, BrokerOp::Stop);
    for topic in &all {
        wait_topic(&bed.source, topic, "Isr: 1\t");
        produce(
            &bed.source_brokers[0],
            topic,
            &lines(DIVERGENT, "divergent"),
            "1",
        );
    }
    for node in [&node_a, &node_b] {
        for ule in [Ule::On, Ule::Off] {
            caught_up(node, ule.mirror(), BEFORE + DIVERGENT).await;
        }
    }
    let kept = |topic: &str| consume_sorted(&bed.destination, topic, BEFORE + DIVERGENT, 30_000);
    let divergent_epoch = batch_epoch(&bed.source, &b[1].1, BEFORE as i64).await;
    let (kept_a, kept_b) = (kept(&a[0].1), kept(&b[0].1));
    // Variant (b)'s kmirror is down through the disaster.
    node_b.shutdown().await;
    drop(node_b);

    // The leader is lost; the stale follower is elected uncleanly.
    bed.source_broker(1, BrokerOp::Kill);
    bed.source_broker(2, BrokerOp::Start);
    let new_leader = &bed.source_brokers[1];
    for topic in &all {
        wait_topic(new_leader, topic, "Leader: none");
    }
    let election = tempfile::NamedTempFile::new().unwrap();
    let partitions: Vec<String> = all
        .iter()
        .map(|t| format!(r#"{{"topic":"{t}","partition":0}}"#))
        .collect();
    std::fs::write(
        election.path(),
        format!(r#"{{"partitions":[{}]}}"#, partitions.join(",")),
    )
    .unwrap();
    let out = kafka_tool_ok(
        "kafka-leader-election",
        &[
            "--bootstrap-server",
            new_leader,
            "--election-type",
            "unclean",
            "--path-to-json-file",
            election.path().to_str().unwrap(),
        ],
    );
    eprintln!("{out}");
    for topic in &all {
        wait_topic(new_leader, topic, "Leader: 2\t");
    }
    check_kafka_answers(new_leader, &b[1].1, divergent_epoch).await;

    // (b): the new leader grows past the mirrored position before kmirror
    // looks again.
    for (_, topic) in &b {
        produce(new_leader, topic, &lines(AFTER_B, "new-leader"), "1");
    }
    let node_b = start_node(dir_b.path(), &bed, &b_topics, false).await;

    // (a), property on: repaired once the new leader answers; its next
    // records follow the kept tail.
    wait_for(&node_a, "on", "repaired", |p| {
        p.state == "MIRRORING" && p.source_offset == BEFORE as i64
    })
    .await;
    produce(new_leader, &a[0].1, &lines(AFTER_A, "new-leader"), "1");
    caught_up(&node_a, "on", BEFORE + DIVERGENT + AFTER_A).await;
    check_repaired(&node_a, &bed, &a[0].1, &kept_a, AFTER_A).await;
    // (a), property off: FAILED for good.
    check_failed(&node_a).await;

    // (b), property on and off.
    caught_up(&node_b, "on", BEFORE + DIVERGENT + AFTER_B).await;
    check_repaired(&node_b, &bed, &b[0].1, &kept_b, AFTER_B).await;
    check_failed(&node_b).await;

    node_a.shutdown().await;
    node_b.shutdown().await;
    drop((node_a, node_b));
    check_recorded(dir_a.path(), &a[0].1).await;
    check_recorded(dir_b.path(), &b[0].1).await;
}
