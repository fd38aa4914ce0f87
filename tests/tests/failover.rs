//! Failover (`stop`) against real Kafka: the report a stop answers with,
//! checked against the source's own batches read by the bed's independent
//! wire client, a stop whose source has gone dark, and a node restarted
//! while its source is down.

use std::time::{Duration, Instant};

use kmirror_actors::node::{StopOptions, TopicChange};
use kmirror_tests::mirror::{
    lines, mirror_props, node, node_on, produce, produce_to, wait_caught_up,
};
use kmirror_tests::wire::raw_batches;
use kmirror_tests::{bed, create_topic, unique, BrokerOp, PrivateBed};

async fn wait_state(node: &kmirror_actors::node::Node, mirror: &str, state: &str) {
    let start = Instant::now();
    loop {
        let parts = node.describe(Some(mirror)).await.unwrap();
        if !parts.is_empty() && parts.iter().all(|p| p.state == state) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{parts:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix::test]
async fn a_stop_reports_exactly_what_a_held_back_mirror_did_not_copy() {
    let topic = unique("failover-report");
    create_topic(&bed().source, &topic, 2, &[]);
    produce(&topic, &lines(400, "mirrored"), "none");
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("fo", mirror_props()).await.unwrap();
    node.start_topics("fo", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "fo", 400, Duration::from_secs(60)).await;
    node.change_topics("fo", TopicChange::Pause, std::slice::from_ref(&topic), None)
        .await
        .unwrap();
    wait_state(&node, "fo", "PAUSED").await;
    // Held back by the pause: records the failover will leave behind.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    produce(&topic, &lines(700, "held-back"), "lz4");

    let report = node
        .stop_topics("fo", std::slice::from_ref(&topic), StopOptions::default())
        .await
        .unwrap();
    assert_eq!(report.partitions.len(), 2, "{report:#?}");
    let mut left = 0;
    for p in &report.partitions {
        assert_eq!(p.state, "STOPPED", "{p:?}");
        let src = raw_batches(&bed().source, &topic, p.partition, 0).unwrap();
        let dst = raw_batches(&bed().destination, &topic, p.partition, 0).unwrap();
        let end = |b: &[kmirror_tests::wire::RawBatch]| b.last().map_or(0, |b| b.next_offset);
        let newest = |b: &[kmirror_tests::wire::RawBatch]| b.iter().map(|b| b.max_timestamp).max();
        // Offsets are identical here: the last mirrored source offset is the
        // destination's end.
        assert_eq!(p.source_offset, end(&dst), "{p:?}");
        assert_eq!(p.destination_offset, end(&dst), "{p:?}");
        let behind: Vec<_> = src
            .iter()
            .filter(|b| b.next_offset > p.source_offset)
            .collect();
        let u = p.unmirrored.as_ref().expect("the source answers");
        assert_eq!(u.source_high_watermark, end(&src));
        assert_eq!(u.records, end(&src) - p.source_offset);
        assert_eq!(
            u.bytes,
            behind.iter().map(|b| b.bytes.len() as i64).sum::<i64>()
        );
        assert!(!u.bytes_at_least);
        let newest_source = behind.iter().map(|b| b.max_timestamp).max().unwrap();
        let expected = (newest_source - newest(&dst).unwrap()) as f64 / 1000.0;
        assert_eq!(u.seconds_behind, expected, "{p:?}");
        assert!(
            u.seconds_behind >= 1.0,
            "produced after a 1.5 s pause: {p:?}"
        );
        println!(
            "partition {}: stopped at {}; not mirrored: {} records, {} bytes, {:.3} s behind",
            p.partition, p.source_offset, u.records, u.bytes, u.seconds_behind
        );
        left += u.records;
    }
    assert_eq!(left, 700, "every held-back record is counted, once");
    node.shutdown().await;
}

/// A bed whose source a test may stop, a topic of `partitions` holding
/// `records`, and a node that copied them all through mirror `mirror`.
async fn copied_on_a_bed_of_its_own(
    mirror: &str,
    partitions: u32,
    records: usize,
) -> (
    PrivateBed,
    String,
    tempfile::TempDir,
    kmirror_actors::node::Node,
) {
    let pair = PrivateBed::start();
    let topic = unique(&format!("failover-{mirror}"));
    create_topic(&pair.source, &topic, partitions, &[]);
    produce_to(&pair.source, &topic, &lines(records, "x"), "none");
    let dir = tempfile::tempdir().unwrap();
    let node = node_on(dir.path(), &pair.destination).await;
    let mut props = mirror_props();
    props.insert("bootstrap.servers".into(), pair.source.clone());
    // A dead source answers nothing; do not wait Kafka's 30 s for each
    // question a stop still asks it (the last group sync, the report).
    props.insert("request.timeout.ms".into(), "5000".into());
    node.create_mirror(mirror, props).await.unwrap();
    node.start_topics(mirror, std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, mirror, records as u64, Duration::from_secs(60)).await;
    (pair, topic, dir, node)
}

async fn stop_within_90_s(
    node: &kmirror_actors::node::Node,
    mirror: &str,
    topic: &str,
) -> kmirror_actors::node::StopReport {
    node.stop_topics(
        mirror,
        &[topic.to_string()],
        StopOptions {
            timeout: Duration::from_secs(90),
            ..StopOptions::default()
        },
    )
    .await
    .unwrap()
}

#[actix::test]
async fn a_stop_with_the_source_unreachable_still_stops_and_says_so() {
    let (pair, topic, _dir, node) = copied_on_a_bed_of_its_own("dark", 1, 150).await;

    pair.stall_source();
    let started = Instant::now();
    let report = stop_within_90_s(&node, "dark", &topic).await;
    let p = &report.partitions[0];
    assert_eq!(p.state, "STOPPED");
    assert_eq!((p.source_offset, p.destination_offset), (150, 150), "{p:?}");
    assert!(!p.source_reachable && p.unmirrored.is_none(), "{p:?}");
    let why = p.source_error.as_deref().unwrap();
    println!(
        "stopped in {:.1} s with the source stalled; the report says: {why}",
        started.elapsed().as_secs_f64()
    );
    pair.resume_source();
    node.shutdown().await;
}

/// The disaster itself: the source is gone when kmirror (re)starts — its
/// host rebooted, or it crashed, during the outage. The node must start
/// all the same (it needs nothing of the source to do so), describe the
/// mirror's partitions, and fail them over with `stop`.
#[actix::test]
async fn a_node_restarted_while_its_source_is_down_starts_and_fails_over() {
    let (pair, topic, dir, node) = copied_on_a_bed_of_its_own("gone", 2, 120).await;
    node.shutdown().await;
    drop(node);

    pair.source_broker(1, BrokerOp::Stop);
    let started = Instant::now();
    let node = node_on(dir.path(), &pair.destination).await;
    println!(
        "restarted with the source down in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Listed within seconds: nothing waits on the source to start them.
    let listed = Instant::now();
    while node.describe(Some("gone")).await.unwrap().len() < 2 {
        assert!(
            listed.elapsed() < Duration::from_secs(3),
            "every partition listed within 3 s: {:?}",
            node.describe(Some("gone")).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = stop_within_90_s(&node, "gone", &topic).await;
    assert_eq!(report.partitions.len(), 2);
    for p in &report.partitions {
        assert_eq!(p.state, "STOPPED", "{p:?}");
        assert!(!p.source_reachable, "{p:?}");
    }
    let copied: i64 = report.partitions.iter().map(|p| p.destination_offset).sum();
    assert_eq!(copied, 120, "{:?}", report.partitions);
    println!(
        "failed over {:.1} s after the restart",
        started.elapsed().as_secs_f64()
    );
    node.shutdown().await;
}
