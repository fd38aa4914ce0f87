//! The exactly-once promises against real Kafka, under the sequences a
//! line-by-line review of the data path suspected would break them. Each
//! test is named after the sequence it plays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kmirror_actors::kafka::ClientConfig;
use kmirror_actors::node::Node;
use kmirror_tests::mirror::{
    connector_through, consume_sorted, lines, node_with, produce_to, without_offsets,
};
use kmirror_tests::proxy::{FaultProxy, FETCH, PRODUCE};
use kmirror_tests::{bed, create_topic, unique};

/// Waits until every partition of `mirror` satisfies `done`, or panics with
/// what describe shows.
async fn wait_for(
    node: &Node,
    mirror: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&kmirror_actors::node::PartitionDescription) -> bool,
) {
    let start = Instant::now();
    loop {
        let parts = node.describe(Some(mirror)).await.unwrap();
        if !parts.is_empty() && parts.iter().all(&done) {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "{what}: not after {timeout:?}: {parts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_until(timeout: Duration, what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what}: not after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix::test]
async fn an_abandoned_producer_lands_nothing_after_the_partition_realigns() {
    let topic = unique("abandoned-producer");
    create_topic(&bed().source, &topic, 1, &[]);
    create_topic(&bed().destination, &topic, 1, &[]);
    // Few batches: the pump waits on its fetch, not on a full pipeline.
    produce_to(&bed().source, &topic, &lines(200, "abandoned"), "none");
    let source = Arc::new(FaultProxy::start(&bed().source).await);
    let destination = FaultProxy::start(&bed().destination).await;
    let mut dest_config = ClientConfig::plaintext(&bed().destination);
    destination.route(&mut dest_config);
    dest_config.request_timeout = Duration::from_secs(2);

    // Every produce is held in the network: the first producer keeps
    // retrying what it queued.
    destination.hold(&[PRODUCE]);
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        dest_config,
        connector_through(Some(source.clone())),
    )
    .await;
    let props = [
        ("bootstrap.servers", bed().source.as_str()),
        // The source fetch times out soon after the source stops answering.
        ("request.timeout.ms", "2000"),
        ("mirror.failed.retry.initial.backoff.ms", "100"),
        ("mirror.failed.retry.max.backoff.ms", "500"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    node.create_mirror("ab", props).await.unwrap();
    node.start_topics("ab", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_for(&node, "ab", Duration::from_secs(30), "MIRRORING", |p| {
        p.state == "MIRRORING"
    })
    .await;
    wait_until(Duration::from_secs(30), "a produce is held", || {
        destination.held() > 0
    })
    .await;

    // The source stops answering fetches past the fetch timeout: the pump
    // fails with its produces still queued. Then the source answers again
    // and the partition realigns; its new producer's batches are held too.
    source.hold(&[FETCH]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    source.release();
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The network heals: whatever any producer queued reaches the broker.
    destination.release();
    wait_for(&node, "ab", Duration::from_secs(90), "caught up", |p| {
        (p.state == "MIRRORING" && p.lag == 0) || p.retry_attempt == -1
    })
    .await;
    let parts = node.describe(Some("ab")).await.unwrap();
    assert_eq!(
        (parts[0].state.as_str(), parts[0].destination_offset),
        ("MIRRORING", 200),
        "{parts:#?}"
    );
    let a = consume_sorted(&bed().source, &topic, 200, 30_000);
    let b = consume_sorted(&bed().destination, &topic, 201, 10_000);
    assert_eq!(b.len(), 200, "duplicates on the destination");
    assert_eq!(without_offsets(&a), without_offsets(&b));
    node.shutdown().await;
}

#[actix::test]
async fn a_foreign_write_above_the_last_checkpoint_is_not_taken_for_kmirrors_own() {
    let topic = unique("foreign-above-checkpoint");
    create_topic(&bed().source, &topic, 1, &[]);
    create_topic(&bed().destination, &topic, 1, &[]);
    produce_to(&bed().source, &topic, &lines(100, "ours"), "none");
    let dir = tempfile::tempdir().unwrap();
    let props: std::collections::BTreeMap<String, String> = [
        ("bootstrap.servers".to_string(), bed().source.clone()),
        (
            "mirror.failed.retry.initial.backoff.ms".into(),
            "100".into(),
        ),
    ]
    .into();
    let node = node_with(
        dir.path(),
        ClientConfig::plaintext(&bed().destination),
        connector_through(None),
    )
    .await;
    node.create_mirror("fw", props).await.unwrap();
    node.start_topics("fw", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_for(&node, "fw", Duration::from_secs(60), "caught up", |p| {
        p.state == "MIRRORING" && p.lag == 0 && p.destination_offset == 100
    })
    .await;
    node.shutdown().await;
    drop(node);
    // While kmirror is down, someone else writes to the mirror topic.
    produce_to(&bed().destination, &topic, &lines(1, "foreign"), "none");
    produce_to(&bed().source, &topic, &lines(10, "later"), "none");

    let node = node_with(
        dir.path(),
        ClientConfig::plaintext(&bed().destination),
        connector_through(None),
    )
    .await;
    // Either refused, or (the defect) caught up past the foreign record: a
    // restarted partition reports lag 0 until its first fetch, so lag alone
    // does not say it copied anything.
    wait_for(&node, "fw", Duration::from_secs(60), "refused", |p| {
        p.state == "FAILED" || (p.lag == 0 && p.destination_offset > 101)
    })
    .await;
    let p = &node.describe(Some("fw")).await.unwrap()[0];
    assert_eq!(
        (p.state.as_str(), p.retry_attempt),
        ("FAILED", -1),
        "{p:#?}"
    );
    assert!(
        p.error.as_deref().unwrap_or("").contains("producer"),
        "the error names the foreign producer: {p:#?}"
    );
    // Nothing more was appended after the foreign record.
    let b = consume_sorted(&bed().destination, &topic, 102, 15_000);
    assert_eq!(b.len(), 101);
    node.shutdown().await;
}

/// Console-producer lines with 1 KB values `{tag}-{i}-xxx…`.
fn big_lines(n: usize, tag: &str) -> String {
    let pad = "x".repeat(1000);
    (0..n)
        .map(|i| format!("h:{i}\tk{i}\t{tag}-{i}-{pad}\n"))
        .collect()
}

/// The end offset of partition 0, by Kafka's own `kafka-get-offsets`.
fn end_offset(bootstrap: &str, topic: &str) -> i64 {
    let out = kmirror_tests::kafka_tool_ok(
        "kafka-get-offsets",
        &["--bootstrap-server", bootstrap, "--topic", topic],
    );
    out.lines()
        .find_map(|l| l.rsplit(':').next()?.trim().parse().ok())
        .unwrap_or(0)
}

fn kafka_topics(bootstrap: &str, args: &[&str]) {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    kmirror_tests::kafka_tool_ok("kafka-topics", &all);
}

#[actix::test]
async fn a_source_topic_recreated_while_its_partition_waits_is_never_copied_onto_the_old_one() {
    let topic = unique("recreated-while-paused");
    create_topic(&bed().source, &topic, 1, &[]);
    create_topic(&bed().destination, &topic, 1, &[]);
    // 20 MB: far more than the partition's pipeline and fetch buffer hold.
    kmirror_tests::mirror::produce_with(&bed().source, &topic, &big_lines(20_000, "old"), &[]);
    let destination = FaultProxy::start(&bed().destination).await;
    let mut dest_config = ClientConfig::plaintext(&bed().destination);
    destination.route(&mut dest_config);
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(dir.path(), dest_config, connector_through(None)).await;
    let props: std::collections::BTreeMap<String, String> = [
        ("bootstrap.servers".to_string(), bed().source.clone()),
        (
            "mirror.failed.retry.initial.backoff.ms".into(),
            "100".into(),
        ),
    ]
    .into();
    // Produces are held: the pump's pipeline fills, and then its fetches sit
    // out (back-pressure) with the source position inside the old data.
    destination.hold(&[PRODUCE]);
    node.create_mirror("rc", props).await.unwrap();
    node.start_topics("rc", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "the pipeline is full", || {
        destination.held() >= 5
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The source topic is deleted and re-created under the same name, and
    // refilled past the mirror's position.
    kafka_topics(&bed().source, &["--delete", "--topic", &topic]);
    let start = Instant::now();
    loop {
        let out = kmirror_tests::kafka_tool(
            "kafka-topics",
            &[
                "--bootstrap-server",
                &bed().source,
                "--create",
                "--topic",
                &topic,
                "--partitions",
                "1",
                "--replication-factor",
                "1",
            ],
        );
        if out.status.success() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "re-create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kmirror_tests::mirror::produce_with(&bed().source, &topic, &big_lines(25_000, "new"), &[]);
    let start = Instant::now();
    loop {
        let end = end_offset(&bed().source, &topic);
        if end >= 25_000 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "refill: {end}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    destination.release();
    wait_for(&node, "rc", Duration::from_secs(60), "refused", |p| {
        p.retry_attempt == -1
    })
    .await;
    let p = &node.describe(Some("rc")).await.unwrap()[0];
    assert_eq!(p.state, "FAILED", "{p:#?}");
    assert!(
        p.error.as_deref().unwrap_or("").contains("re-created"),
        "{p:#?}"
    );
    let copied = consume_sorted(&bed().destination, &topic, 45_000, 10_000);
    assert!(
        copied.iter().all(|l| l.contains("\told-")),
        "records of the re-created topic were copied onto the old one"
    );
    node.shutdown().await;
}

/// Writes records with these timestamps to partition 0 of `topic`, through
/// kmirror's own producer (Kafka's console producer cannot set timestamps).
async fn produce_timestamps(bootstrap: &str, topic: &str, timestamps: &[i64]) {
    use kmirror_actors::kafka::batch::{encode_batch, Codec, OutgoingBatch, Record, SourceOffsets};
    use kmirror_actors::kafka::produce::IdempotentProducer;
    use kmirror_actors::kafka::KafkaClient;
    let client = KafkaClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .unwrap();
    let producer = IdempotentProducer::new(client).await.unwrap();
    let partition = producer.partition(topic, 0).unwrap();
    let records: Vec<Record> = timestamps
        .iter()
        .enumerate()
        .map(|(i, ts)| Record {
            offset_delta: i as i32,
            timestamp: *ts,
            key: None,
            value: Some(bytes::Bytes::from(format!("ts-{i}"))),
            headers: vec![],
        })
        .collect();
    let batch = OutgoingBatch::new(
        encode_batch(&records, Codec::None).unwrap(),
        records.len() as i32,
        SourceOffsets::Range {
            first: 0,
            last: records.len() as i64 - 1,
        },
    );
    partition.send(batch).await.unwrap().await.unwrap();
    partition.close().await;
}

#[actix::test]
async fn records_the_source_accepted_two_hours_ahead_are_mirrored() {
    let topic = unique("future-timestamps");
    // The source accepts timestamps up to a day ahead; the destination
    // broker's default is an hour.
    create_topic(
        &bed().source,
        &topic,
        1,
        &["message.timestamp.after.max.ms=86400000"],
    );
    let now = kmirror_actors::coordinator::now_ms();
    produce_timestamps(&bed().source, &topic, &[now, now + 2 * 3_600_000, now]).await;
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        ClientConfig::plaintext(&bed().destination),
        connector_through(None),
    )
    .await;
    let props: std::collections::BTreeMap<String, String> =
        [("bootstrap.servers".to_string(), bed().source.clone())].into();
    node.create_mirror("ts", props).await.unwrap();
    node.start_topics("ts", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_for(&node, "ts", Duration::from_secs(30), "mirrored", |p| {
        p.destination_offset == 3 || p.retry_attempt != 0
    })
    .await;
    let p = &node.describe(Some("ts")).await.unwrap()[0];
    assert_eq!(
        (p.state.as_str(), p.destination_offset),
        ("MIRRORING", 3),
        "{p:#?}"
    );
    let a = consume_sorted(&bed().source, &topic, 3, 20_000);
    let b = consume_sorted(&bed().destination, &topic, 3, 20_000);
    assert_eq!(a, b, "same records, timestamps and offsets");
    node.shutdown().await;
}

#[actix::test]
async fn a_destination_topic_that_refuses_the_sources_timestamps_fails_naming_the_config() {
    let topic = unique("future-timestamps-refused");
    create_topic(
        &bed().source,
        &topic,
        1,
        &["message.timestamp.after.max.ms=86400000"],
    );
    // Made by an operator beforehand, with the broker's default of 1 h.
    create_topic(&bed().destination, &topic, 1, &[]);
    let now = kmirror_actors::coordinator::now_ms();
    produce_timestamps(&bed().source, &topic, &[now + 2 * 3_600_000]).await;
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        ClientConfig::plaintext(&bed().destination),
        connector_through(None),
    )
    .await;
    let props: std::collections::BTreeMap<String, String> = [
        ("bootstrap.servers".to_string(), bed().source.clone()),
        (
            "mirror.failed.retry.initial.backoff.ms".into(),
            "100".into(),
        ),
    ]
    .into();
    node.create_mirror("tr", props).await.unwrap();
    node.start_topics("tr", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_for(&node, "tr", Duration::from_secs(30), "refused", |p| {
        p.state == "FAILED" && p.retry_attempt == -1
    })
    .await;
    let p = &node.describe(Some("tr")).await.unwrap()[0];
    assert!(
        p.error
            .as_deref()
            .unwrap_or("")
            .contains("message.timestamp.after.max.ms"),
        "{p:#?}"
    );
    node.shutdown().await;
}
