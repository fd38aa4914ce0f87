//! Failover (`stop`) against real Kafka: the report a stop answers with,
//! checked against the source's own batches read by the bed's independent
//! wire client, and a stop whose source has gone dark.

use std::time::{Duration, Instant};

use kmirror_actors::node::{StopOptions, TopicChange};
use kmirror_tests::mirror::{
    lines, mirror_props, node, node_on, produce, produce_to, wait_caught_up,
};
use kmirror_tests::wire::raw_batches;
use kmirror_tests::{bed, create_topic, unique, PrivateBed};

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

#[actix::test]
async fn a_stop_with_the_source_unreachable_still_stops_and_says_so() {
    let pair = PrivateBed::start();
    let topic = unique("failover-dark");
    create_topic(&pair.source, &topic, 1, &[]);
    produce_to(&pair.source, &topic, &lines(150, "x"), "none");
    let dir = tempfile::tempdir().unwrap();
    let node = node_on(dir.path(), &pair.destination).await;
    let mut props = mirror_props();
    props.insert("bootstrap.servers".into(), pair.source.clone());
    // A dead source answers nothing; do not wait Kafka's 30 s for each
    // question the stop still asks it (the last group sync, the report).
    props.insert("request.timeout.ms".into(), "5000".into());
    node.create_mirror("dark", props).await.unwrap();
    node.start_topics("dark", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "dark", 150, Duration::from_secs(60)).await;

    pair.stall_source();
    let started = Instant::now();
    let report = node
        .stop_topics(
            "dark",
            std::slice::from_ref(&topic),
            StopOptions {
                timeout: Duration::from_secs(90),
                ..StopOptions::default()
            },
        )
        .await
        .unwrap();
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
