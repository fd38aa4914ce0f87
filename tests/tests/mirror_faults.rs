//! Faults against real Kafka: a retryable failure goes through FAILED (with
//! PreviousState) and retries at growing delays back to MIRRORING, and the
//! event log says so.

use std::time::{Duration, Instant};

use kmirror_events::{PartitionState, Record};
use kmirror_store::{EventLog, SledLog};
use kmirror_tests::mirror::{consume_sorted, mirror_props, node, wait_caught_up, without_offsets};
use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique};

#[actix::test]
async fn a_retryable_fault_retries_at_growing_delays_then_mirrors() {
    let topic = unique("fault-too-large");
    create_topic(&bed().source, &topic, 1, &[]);
    // The destination refuses the source's 5 KB records until an operator
    // raises its limit: every produce fails with MESSAGE_TOO_LARGE meanwhile.
    create_topic(&bed().destination, &topic, 1, &["max.message.bytes=2000"]);
    let props = format!("bootstrap.servers={}", bed().source);
    kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            &topic,
            "--num-records",
            "20",
            "--record-size",
            "5000",
            "--throughput",
            "-1",
            "--producer-props",
            &props,
            "batch.size=1",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    let mut props = mirror_props();
    props.insert(
        "mirror.failed.retry.initial.backoff.ms".into(),
        "100".into(),
    );
    node.create_mirror("mf", props).await.unwrap();
    node.start_topics("mf", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();

    // Let it fail and retry a few times (100, 200, 400, 800 ms ± 20%).
    let start = Instant::now();
    loop {
        let p = &node.describe(Some("mf")).await.unwrap()[0];
        if p.retry_attempt >= 4 {
            assert_eq!(p.state, "FAILED");
            assert!(
                p.error
                    .as_deref()
                    .unwrap_or("")
                    .contains("exceeds the destination limit"),
                "{p:?}"
            );
            assert_eq!(
                (p.lag, p.lag_seconds),
                (20, -1.0),
                "lag seconds unknown until a record is copied: {p:?}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no retries: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            &topic,
            "--add-config",
            "max.message.bytes=1048588",
        ],
    );
    wait_caught_up(&node, "mf", 20, Duration::from_secs(60)).await;
    let p = &node.describe(Some("mf")).await.unwrap()[0];
    assert_eq!((p.state.as_str(), p.retry_attempt), ("MIRRORING", 0));
    let a = consume_sorted(&bed().source, &topic, 20, 30_000);
    let b = consume_sorted(&bed().destination, &topic, 20, 30_000);
    assert_eq!(without_offsets(&a), without_offsets(&b));
    node.shutdown().await;
    drop(node);

    // The log: FAILED records keep PreviousState MIRRORING and count attempts
    // up; the delay from each failure to its retry grows.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = SledLog::open(dir.path()).unwrap();
    let mut states = Vec::new();
    for e in log.read(0).unwrap() {
        let e = e.unwrap();
        if let Record::MirrorPartitionState(_, Some(v)) = e.record {
            states.push((e.timestamp_ms, v));
        }
    }
    let failed: Vec<_> = states
        .iter()
        .filter(|(_, v)| v.state == PartitionState::Failed)
        .collect();
    assert!(failed.len() >= 4, "{states:#?}");
    for (i, (_, v)) in failed.iter().enumerate() {
        assert_eq!(v.previous_state, PartitionState::Mirroring);
        assert_eq!(v.retry_attempt, i as i16 + 1);
    }
    let mut delays = Vec::new();
    for w in states.windows(2) {
        if w[0].1.state == PartitionState::Failed && w[1].1.state != PartitionState::Failed {
            delays.push(w[1].0 - w[0].0);
        }
    }
    // Each delay is at least its backoff's floor (100, 200, 400 ms, less the
    // 20% jitter, less 5 ms for the two records' millisecond timestamps):
    // load can only lengthen a delay, so floors hold on a busy machine where
    // comparing neighbours (120 ms at most against 160 at least) did not.
    assert!(delays.len() >= 3, "{delays:?}");
    for (i, delay) in delays.iter().take(3).enumerate() {
        let floor = (80 << i) - 5;
        assert!(
            *delay >= floor,
            "retry delay {i} below {floor} ms: {delays:?}"
        );
    }
    assert_eq!(states.last().unwrap().1.state, PartitionState::Mirroring);
}
