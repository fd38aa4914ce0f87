//! The protocol layer against real Kafka: connection, metadata, a 10,000
//! record fetch smoke test, and a fetch → forward round trip whose records
//! must come back identical from the destination.

mod protocol_common;

use kmirror_actors::kafka::admin::{Admin, OffsetSpec};
use kmirror_actors::kafka::batch::{classify, prepare};

use kmirror_actors::kafka::fetch::{
    FetchOptions, FetchResults, FetchSession, IsolationLevel, TopicPartition,
};
use kmirror_actors::kafka::produce::IdempotentProducer;

use std::sync::Arc;

use kafka_protocol::messages::{ListOffsetsRequest, MetadataRequest, OffsetForLeaderEpochRequest};
use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::cluster::{ClusterView, DestinationCluster, LogBounds};
use kmirror_actors::kafka::KafkaError;
use kmirror_tests::{bed, kafka_tool_ok, unique};
use protocol_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_and_reads_metadata() {
    let bed = bed();
    let c = client(&bed.source).await;
    let md = c.metadata();
    assert!(md.cluster_id.is_some());
    assert_eq!(md.brokers.len(), 1);
    let topic = unique("proto-md");
    create(&Admin::new(c.clone()), &topic, 3, &[]).await;
    let md = c.metadata();
    let t = md.topic(&topic).expect("topic in metadata after create");
    assert!(!t.topic_id.is_nil());
    assert_eq!(t.partitions.len(), 3);
    for p in &t.partitions {
        assert!(p.leader >= 0 && p.leader_epoch >= 0, "{p:?}");
    }
    let conn = c
        .connection(*md.brokers.keys().next().unwrap())
        .await
        .unwrap();
    // ApiVersions negotiated: Fetch and Produce at a modern version.
    assert!(
        conn.version::<kafka_protocol::messages::FetchRequest>()
            .unwrap()
            >= 12
    );
    assert!(
        conn.version::<kafka_protocol::messages::ProduceRequest>()
            .unwrap()
            >= 9
    );
}

/// Partitions that all find their leader moved (thousands aligning on a
/// topic whose logs the broker is still creating) each ask for the topic's
/// metadata: the asks made while a refresh waits share the next one. Each
/// was a request of its own, one after another, and a refresh of a topic
/// of 6 000 partitions costs that many partitions to decode: a start of
/// such a topic took two minutes to align.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_asked_together_share_one_request() {
    let c = client(&bed().source).await;
    let topic = unique("proto-md-flight");
    create(&Admin::new(c.clone()), &topic, 3, &[]).await;
    let topics = [topic.clone()];
    let before = c.requests_sent::<MetadataRequest>();
    // The asks are polled together, all of them before the first answer can
    // be read: spawned as tasks, one the scheduler started late (a busy CI
    // machine) was an ask made after the second refresh began, and rightly
    // waited for a third.
    let asks = (0..64).map(|_| c.refresh_metadata(Some(&topics)));
    for md in futures_util::future::join_all(asks).await {
        assert_eq!(md.unwrap().topic(&topic).unwrap().partitions.len(), 3);
    }
    let sent = c.requests_sent::<MetadataRequest>() - before;
    assert!(sent <= 2, "64 asks at once sent {sent} Metadata requests");
    // One asked after those answered refreshes on its own.
    c.refresh_metadata(Some(&topics)).await.unwrap();
    assert_eq!(c.requests_sent::<MetadataRequest>() - before, sent + 1);
}

/// Partitions aligning together ask for their log bounds one each; the
/// asks share batches (two ListOffsets per leader each), and every
/// partition gets its own bounds, as a lone ListOffsets reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_asked_together_share_batches() {
    let (c, topic, answers) = ask_together("proto-bounds", |cluster, tp| async move {
        cluster.bounds(&tp).await
    })
    .await;
    let sent = c.requests_sent::<ListOffsetsRequest>();
    assert!(
        sent <= 6,
        "80 asks at once sent {sent} ListOffsets requests"
    );
    assert_bounds_alone(&c, &topic, answers).await;
}

/// A destination partition aligning asks for its settled bounds: its log
/// bounds, and whether the leader's log ends there (OffsetForLeaderEpoch of
/// the current epoch; a batch appended but not yet replicated is above the
/// high watermark). Asked together, both go in batches: a first start of
/// 6 000 partitions sent 6 000 OffsetForLeaderEpoch requests of one
/// partition each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_bounds_asked_together_share_batches() {
    let (c, topic, answers) = ask_together("proto-settled", |cluster, tp| async move {
        DestinationCluster::settled_bounds(&*cluster, &tp).await
    })
    .await;
    let sent = c.requests_sent::<OffsetForLeaderEpochRequest>();
    assert!(
        sent <= 3,
        "80 asks at once sent {sent} OffsetForLeaderEpoch requests"
    );
    assert_bounds_alone(&c, &topic, answers).await;
}

/// Asks `ask` twice for each of 40 partitions of a new topic, all at
/// once, on a client of their own (so its request counts are theirs
/// alone).
async fn ask_together<F, Fut>(
    name: &str,
    ask: F,
) -> (
    kmirror_actors::kafka::KafkaClient,
    String,
    Vec<(i32, LogBounds)>,
)
where
    F: Fn(Arc<KafkaCluster>, TopicPartition) -> Fut,
    Fut: std::future::Future<Output = Result<LogBounds, KafkaError>> + Send + 'static,
{
    let topic = unique(name);
    create(&Admin::new(client(&bed().source).await), &topic, 40, &[]).await;
    kmirror_tests::mirror::produce(&topic, &kmirror_tests::mirror::lines(300, "b"), "none");
    let c = client(&bed().source).await;
    let cluster = Arc::new(KafkaCluster::new(c.clone(), FetchOptions::default()));
    // Each partition twice: callers may ask for one together, and Kafka
    // refuses a request that names a partition twice. Polled together, as
    // in `refreshes_asked_together_share_one_request`, so no ask starts
    // late.
    let asks = (0..40).chain(0..40).map(|p| {
        let answer = ask(cluster.clone(), TopicPartition::new(&topic, p));
        async move { (p, answer.await) }
    });
    let answers = futures_util::future::join_all(asks)
        .await
        .into_iter()
        .map(|(p, bounds)| (p, bounds.unwrap_or_else(|e| panic!("partition {p}: {e}"))))
        .collect();
    (c, topic, answers)
}

/// Each partition's answer is what a lone ListOffsets reads.
async fn assert_bounds_alone(
    c: &kmirror_actors::kafka::KafkaClient,
    topic: &str,
    answers: Vec<(i32, LogBounds)>,
) {
    let admin = Admin::new(c.clone());
    let mut ends = std::collections::BTreeMap::new();
    for (p, bounds) in answers {
        let alone = |spec| admin.list_offset(topic, p, spec, IsolationLevel::ReadUncommitted);
        let (start, end) = (
            alone(OffsetSpec::Earliest).await.unwrap(),
            alone(OffsetSpec::Latest).await.unwrap(),
        );
        assert_eq!(
            (bounds.log_start, bounds.end, bounds.leader_epoch),
            (start.offset, end.offset, end.leader_epoch),
            "partition {p}"
        );
        ends.insert(p, end.offset);
    }
    assert_eq!(ends.len(), 40);
    assert_eq!(ends.values().sum::<i64>(), 300, "every record counted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_smoke_ten_thousand_records() {
    let bed = bed();
    let topic = unique("proto-fetch");
    let c = client(&bed.source).await;
    create(&Admin::new(c.clone()), &topic, 1, &[]).await;
    kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            &topic,
            "--num-records",
            "10000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={}", bed.source),
            "compression.type=lz4",
            "batch.size=16384",
        ],
    );
    let (leader, epoch) = c.leader(&topic, 0).await.unwrap();
    let mut s = FetchSession::new(
        c.clone(),
        leader,
        FetchOptions {
            isolation: IsolationLevel::ReadCommitted,
            partition_max_bytes: 64 * 1024,
            ..Default::default()
        },
    );
    let tp = TopicPartition::new(&topic, 0);
    s.add(tp.clone(), 0, epoch, uuid::Uuid::nil());
    let (mut records, mut batches, mut fetches) = (0i64, 0, 0);
    let mut hw = -1;
    while s.position(&tp).unwrap() < 10_000 {
        fetches += 1;
        for (_, r) in s.fetch().await.unwrap() {
            let d = r.unwrap();
            hw = d.high_watermark;
            assert_eq!(d.last_stable_offset, d.high_watermark);
            assert_eq!(d.log_start_offset, 0);
            for b in d.batches() {
                let b = b.unwrap();
                assert!(b.verify_crc());
                assert_eq!(b.codec().unwrap(), kmirror_actors::kafka::batch::Codec::Lz4);
                batches += 1;
                records += b.record_count() as i64;
            }
        }
    }
    assert_eq!(records, 10_000);
    assert_eq!(hw, 10_000);
    assert!(
        fetches > 1,
        "partition_max_bytes 64 KiB must take several fetches"
    );
    eprintln!("fetched 10000 records in {batches} batches over {fetches} fetches");
    let admin = Admin::new(c.clone());
    let latest = admin
        .list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
        .await
        .unwrap();
    assert_eq!(latest.offset, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_batches_read_back_identical() {
    let bed = bed();
    let topic = unique("proto-fwd");
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    create(&Admin::new(src.clone()), &topic, 1, &[]).await;
    create(&Admin::new(dst.clone()), &topic, 1, &[]).await;
    kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            &topic,
            "--num-records",
            "3000",
            "--record-size",
            "200",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={}", bed.source),
            "compression.type=zstd",
            "batch.size=8192",
        ],
    );
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let stats = forward_partition(&src, &producer, &topic, 0, 3000, 1_048_588).await;
    assert_eq!(stats.records, 3000);
    assert_eq!(stats.reencoded, 0);
    assert_eq!(stats.passed_through, stats.batches_in);
    // Destination offsets are contiguous from 0 in ack order.
    let mut next = 0;
    for a in &stats.acks {
        assert_eq!(a.base_offset, next, "{a:?}");
        next += a.record_count as i64;
    }
    let a = read_all(&src, &topic, 0, 3000).await;
    let b = read_all(&dst, &topic, 0, 3000).await;
    assert_eq!(a.len(), b.len());
    for ((oa, ra), (ob, rb)) in a.iter().zip(&b) {
        assert_eq!(oa, ob, "offsets identical when the source starts at 0");
        assert_eq!(
            (&ra.key, &ra.value, &ra.headers, ra.timestamp),
            (&rb.key, &rb.value, &rb.headers, rb.timestamp)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_errors_are_typed() {
    use kmirror_actors::kafka::fetch::FetchError;
    use kmirror_actors::kafka::ResponseError;
    let bed = bed();
    let topic = unique("proto-fetch-err");
    let c = client(&bed.source).await;
    create(&Admin::new(c.clone()), &topic, 1, &[]).await;
    let (leader, epoch) = c.leader(&topic, 0).await.unwrap();
    let tp = TopicPartition::new(&topic, 0);

    // Beyond the log end: OFFSET_OUT_OF_RANGE, the partition stays where it was.
    // (Just after creation the broker may still answer UNKNOWN_LEADER_EPOCH
    // for a moment; that is reported as a leader change and retried, as the
    // mirror's loop does.)
    let mut s = FetchSession::new(c.clone(), leader, FetchOptions::default());
    let mut r = Vec::new();
    for _ in 0..50 {
        s.add(tp.clone(), 1_000_000, epoch, uuid::Uuid::nil());
        r = s.fetch().await.unwrap();
        if !matches!(r[0].1, Err(FetchError::LeaderChanged { .. })) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        matches!(
            r[0].1,
            Err(FetchError::OffsetOutOfRange {
                fetch_offset: 1_000_000
            })
        ),
        "{r:?}"
    );
    assert_eq!(s.position(&tp), Some(1_000_000));

    // A leader epoch from the future: the broker fences us (UNKNOWN_LEADER_EPOCH);
    // the partition leaves the session so it can be re-routed.
    let mut s = FetchSession::new(c.clone(), leader, FetchOptions::default());
    s.add(tp.clone(), 0, epoch + 5, uuid::Uuid::nil());
    let r = s.fetch().await.unwrap();
    match &r[0].1 {
        Err(FetchError::LeaderChanged { error, offset, .. }) => {
            assert_eq!(*error, ResponseError::UnknownLeaderEpoch);
            assert_eq!(*offset, 0);
        }
        other => panic!("expected a leader change, got {other:?}"),
    }
    assert!(s.is_empty());

    // A partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID as a leader change.
    let mut s = FetchSession::new(c.clone(), leader, FetchOptions::default());
    s.add(TopicPartition::new(&topic, 7), 0, -1, uuid::Uuid::nil());
    let r = s.fetch().await.unwrap();
    assert!(
        matches!(r[0].1, Err(FetchError::LeaderChanged { .. })),
        "{r:?}"
    );
}

/// A transactional source (Kafka's perf-test with a transactional id): data
/// batches pass through with the transactional bit cleared, COMMIT markers are
/// dropped, and the destination holds exactly the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_source_forwards_committed_data_without_markers() {
    let bed = bed();
    let topic = unique("proto-txn");
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    create(&Admin::new(src.clone()), &topic, 1, &[]).await;
    create(&Admin::new(dst.clone()), &topic, 1, &[]).await;
    let txn_id = unique("proto-txn-id");
    kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            &topic,
            "--num-records",
            "2000",
            "--record-size",
            "50",
            "--throughput",
            "-1",
            "--transactional-id",
            &txn_id,
            "--transaction-duration-ms",
            "50",
            "--producer-props",
            &format!("bootstrap.servers={}", bed.source),
            "compression.type=gzip",
        ],
    );
    let admin = Admin::new(src.clone());
    let end = admin
        .list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
        .await
        .unwrap()
        .offset;
    assert!(end > 2000, "commit markers take offsets: end {end}");
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let stats = forward_partition(&src, &producer, &topic, 0, end, 1_048_588).await;
    assert_eq!(stats.records, 2000);
    assert!(stats.dropped > 0, "markers dropped");
    let dend = Admin::new(dst.clone())
        .list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
        .await
        .unwrap();
    assert_eq!(dend.offset, 2000);
    let recs = read_all(&dst, &topic, 0, 2000).await;
    assert_eq!(recs.len(), 2000);
    // The destination batches are plain (non-transactional) idempotent batches.
    let (leader, epoch) = dst.leader(&topic, 0).await.unwrap();
    let mut s = FetchSession::new(dst.clone(), leader, FetchOptions::default());
    s.add(TopicPartition::new(&topic, 0), 0, epoch, uuid::Uuid::nil());
    for (_, r) in s.fetch().await.unwrap() {
        for b in r.unwrap().batches() {
            let b = b.unwrap();
            assert!(!b.is_transactional() && !b.is_control());
            assert_eq!(b.producer_id(), producer.id().0);
        }
    }
}

/// Six partitions forwarded at once through one producer: their batches share
/// Produce requests (one batch per partition per request), order and counts
/// stay exact per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_partitions_share_produce_requests() {
    let bed = bed();
    let topic = unique("proto-multi");
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    create(&Admin::new(src.clone()), &topic, 6, &[]).await;
    create(&Admin::new(dst.clone()), &topic, 6, &[]).await;
    kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            &topic,
            "--num-records",
            "30000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={}", bed.source),
            "batch.size=4096",
            "linger.ms=0",
        ],
    );
    let admin = Admin::new(src.clone());
    let mut ends = Vec::new();
    for p in 0..6 {
        ends.push(
            admin
                .list_offset(&topic, p, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
                .await
                .unwrap()
                .offset,
        );
    }
    assert_eq!(ends.iter().sum::<i64>(), 30_000);
    // Fetch everything first, then send all partitions at once so the
    // per-broker dispatcher has several partitions queued at a time.
    let mut per_partition = Vec::new();
    for p in 0..6 {
        let (leader, epoch) = src.leader(&topic, p).await.unwrap();
        let mut s = FetchSession::new(src.clone(), leader, FetchOptions::default());
        s.add(TopicPartition::new(&topic, p), 0, epoch, uuid::Uuid::nil());
        let mut out = Vec::new();
        while s.position(&TopicPartition::new(&topic, p)).unwrap() < ends[p as usize] {
            for (_, r) in s.fetch().await.unwrap() {
                for b in r.unwrap().batches() {
                    let b = b.unwrap();
                    let a = classify(&b, false, 1_048_588, 0);
                    out.extend(prepare(&b, a, 1_048_588, 0).unwrap());
                }
            }
        }
        per_partition.push(out);
    }
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let runs: Vec<_> = per_partition
        .into_iter()
        .enumerate()
        .map(|(p, batches)| {
            let (producer, topic) = (producer.clone(), topic.clone());
            tokio::spawn(async move {
                let pp = producer.partition(&topic, p as i32).unwrap();
                let mut tickets = Vec::new();
                for b in batches {
                    tickets.push(pp.send(b).await.unwrap());
                }
                let mut acks = Vec::new();
                for t in tickets {
                    acks.push(t.await.unwrap());
                }
                acks
            })
        })
        .collect();
    let mut total = 0;
    for (p, r) in runs.into_iter().enumerate() {
        let acks = r.await.unwrap();
        let mut next = 0;
        for a in &acks {
            assert_eq!(a.base_offset, next);
            next += a.record_count as i64;
        }
        assert_eq!(next, ends[p]);
        total += next;
    }
    assert_eq!(total, 30_000);
    let s = producer.stats();
    eprintln!("{s:?}");
    assert!(
        s.requests < s.batches,
        "batches of several partitions shared requests: {s:?}"
    );
    let dadmin = Admin::new(dst.clone());
    for p in 0..6 {
        let e = dadmin
            .list_offset(&topic, p, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
            .await
            .unwrap();
        assert_eq!(e.offset, ends[p as usize]);
    }
}

/// `metadata.max.age.ms` drives a background refresh: a topic created by
/// someone else shows up without any explicit refresh call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_refreshes_on_a_timer() {
    let bed = bed();
    let props = [
        ("bootstrap.servers", bed.source.as_str()),
        ("metadata.max.age.ms", "300"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let watcher = kmirror_actors::kafka::KafkaClient::from_properties(&props)
        .await
        .unwrap();
    let topic = unique("proto-timer");
    assert!(watcher.metadata().topic(&topic).is_none());
    create(&Admin::new(client(&bed.source).await), &topic, 2, &[]).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while watcher.metadata().topic(&topic).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "timer refresh never saw {topic}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        watcher.metadata().topic(&topic).unwrap().partitions.len(),
        2
    );
}

/// KIP-227 incremental fetch session: after the first full fetch, only
/// partitions with something new come back; removed partitions are forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetch_session() {
    let bed = bed();
    let topic = unique("proto-session");
    let c = client(&bed.source).await;
    create(&Admin::new(c.clone()), &topic, 3, &[]).await;
    let (leader, epoch) = c.leader(&topic, 0).await.unwrap();
    let opts = FetchOptions {
        max_wait: std::time::Duration::from_millis(100),
        ..Default::default()
    };
    let mut s = FetchSession::new(c.clone(), leader, opts);
    for p in 0..3 {
        s.add(TopicPartition::new(&topic, p), 0, epoch, uuid::Uuid::nil());
    }
    let first = s.fetch().await.unwrap();
    assert_eq!(first.len(), 3, "the first fetch is full");
    assert_ne!(s.session_id(), 0, "the broker created a session");
    let p = IdempotentProducer::new(c.clone()).await.unwrap();
    let pp = p.partition(&topic, 1).unwrap();
    pp.send(one_record_batch(0)).await.unwrap().await.unwrap();
    let mut got = Vec::new();
    for _ in 0..20 {
        got = s.fetch().await.unwrap();
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1, "only the partition with new data: {got:?}");
    assert_eq!(got[0].0.partition, 1);
    assert_eq!(got[0].1.as_ref().unwrap().batches().count(), 1);
    assert_eq!(s.position(&TopicPartition::new(&topic, 1)), Some(1));
    // Forget a partition; the session goes on.
    let id = s.session_id();
    s.remove(&TopicPartition::new(&topic, 2));
    let r = s.fetch().await.unwrap();
    assert!(r.iter().all(|(tp, _)| tp.partition != 2));
    assert_eq!(s.session_id(), id);
}

/// An incremental request names only what changed since the broker's
/// session last heard of it (KIP-227), and the session looks at those
/// partitions alone; a change it failed to note would leave a partition
/// unfetched or fetched from the wrong place. Rounds of records on random
/// partitions, seeks back, removals and re-adds over two topics (one pinned
/// by id, one resolved by name) are followed against a model of every
/// position: each answer starts where the model says, nothing stalls, and
/// it all happens in one broker session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_session_follows_every_change() {
    let bed = bed();
    let pinned = unique("proto-session-pinned");
    let named = unique("proto-session-named");
    let c = client(&bed.source).await;
    create(&Admin::new(c.clone()), &pinned, 24, &[]).await;
    create(&Admin::new(c.clone()), &named, 8, &[]).await;
    c.refresh_metadata(Some(&[pinned.clone(), named.clone()]))
        .await
        .unwrap();
    let pinned_id = c.metadata().topic(&pinned).unwrap().topic_id;
    let (leader, epoch) = c.leader(&pinned, 0).await.unwrap();
    let opts = FetchOptions {
        max_wait: std::time::Duration::from_millis(50),
        ..Default::default()
    };
    let mut s = FetchSession::new(c.clone(), leader, opts);
    let tps: Vec<(TopicPartition, uuid::Uuid)> = (0..24)
        .map(|p| (TopicPartition::new(&pinned, p), pinned_id))
        .chain((0..8).map(|p| (TopicPartition::new(&named, p), uuid::Uuid::nil())))
        .collect();
    for (tp, id) in &tps {
        s.add(tp.clone(), 0, epoch, *id);
    }
    let producer = IdempotentProducer::new(c.clone()).await.unwrap();
    let mut producers = std::collections::HashMap::new();
    // The model: where each partition's next answer must start, how many
    // records it holds, and which partitions sit outside the session.
    let mut pos = vec![0i64; tps.len()];
    let mut end = vec![0i64; tps.len()];
    let mut out_of_session = std::collections::BTreeSet::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let check = |got: FetchResults, pos: &mut [i64]| {
        for (tp, r) in got {
            let i = tps
                .iter()
                .position(|(t, _)| *t == tp)
                .expect("a partition of ours");
            let f = r.unwrap_or_else(|e| panic!("{tp}: {e:?}"));
            assert_eq!(
                f.fetch_offset, pos[i],
                "{tp} answered from the model's position"
            );
            let mut at = pos[i];
            for b in f.batches() {
                let b = b.unwrap();
                assert_eq!(b.base_offset(), at, "{tp}: batches follow on");
                at = b.next_offset();
            }
            pos[i] = f.next_offset;
        }
    };
    check(s.fetch().await.unwrap(), &mut pos);
    let session = s.session_id();
    assert_ne!(session, 0, "the broker created a session");
    for _round in 0..40 {
        for _ in 0..3 {
            let i = next(tps.len());
            let (tp, _) = &tps[i];
            let pp = match producers.entry(i) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(producer.partition(&tp.topic, tp.partition).unwrap())
                }
            };
            pp.send(one_record_batch(end[i]))
                .await
                .unwrap()
                .await
                .unwrap();
            end[i] += 1;
        }
        let i = next(tps.len());
        let tp = &tps[i].0;
        match next(4) {
            0 if !out_of_session.contains(&i) => {
                assert_eq!(s.remove(tp), Some(pos[i]));
                out_of_session.insert(i);
            }
            1 if out_of_session.remove(&i) => {
                s.add(tp.clone(), pos[i], epoch, tps[i].1);
            }
            2 if !out_of_session.contains(&i) && pos[i] > 0 => {
                pos[i] = next(pos[i] as usize) as i64;
                assert!(s.seek(tp, pos[i]));
            }
            _ => {}
        }
        check(s.fetch().await.unwrap(), &mut pos);
    }
    for i in std::mem::take(&mut out_of_session) {
        s.add(tps[i].0.clone(), pos[i], epoch, tps[i].1);
    }
    for _ in 0..40 {
        if pos == end {
            break;
        }
        check(s.fetch().await.unwrap(), &mut pos);
    }
    assert_eq!(pos, end, "every partition fetched to its end");
    assert_eq!(s.session_id(), session, "one broker session throughout");
}

/// A batch of one record whose value is `n`.
fn one_record_batch(n: i64) -> kmirror_actors::kafka::batch::OutgoingBatch {
    let rec = kmirror_actors::kafka::batch::Record {
        offset_delta: 0,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(bytes::Bytes::from(n.to_string())),
        headers: vec![],
    };
    kmirror_actors::kafka::batch::OutgoingBatch::new(
        kmirror_actors::kafka::batch::encode_batch(
            &[rec],
            kmirror_actors::kafka::batch::Codec::None,
        )
        .unwrap(),
        1,
        kmirror_actors::kafka::batch::SourceOffsets::Range { first: n, last: n },
    )
}

/// Creates `topic` with 4 partitions on the source and loads `records`
/// records of 500 B with Kafka's own producer; returns each partition's end.
async fn load_four_partitions(
    bed: &kmirror_tests::Bed,
    admin: &Admin,
    topic: &str,
    records: i64,
) -> Vec<i64> {
    create(admin, topic, 4, &[]).await;
    kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "500",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={}", bed.source),
            "batch.size=16384",
        ],
    );
    let mut ends = Vec::new();
    for p in 0..4 {
        let end = admin
            .list_offset(topic, p, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
            .await
            .unwrap()
            .offset;
        ends.push(end);
    }
    assert_eq!(ends.iter().sum::<i64>(), records);
    ends
}

/// Partition `p` of `topic` opened for reading from offset 0.
async fn open_from_start(
    cluster: &kmirror_actors::cluster::kafka::KafkaCluster,
    topic: &str,
    topic_id: uuid::Uuid,
    p: i32,
) -> Box<dyn kmirror_actors::cluster::PartitionFetch> {
    use kmirror_actors::cluster::SourceCluster;
    cluster
        .open(
            TopicPartition::new(topic, p),
            kmirror_events::TopicId(*topic_id.as_bytes()),
            0,
            -1,
        )
        .await
        .unwrap()
}

/// Reads partition `p` from offset 0 to `end`, checking order; returns
/// the records read.
async fn read_in_order(
    mut fetch: Box<dyn kmirror_actors::cluster::PartitionFetch>,
    p: i32,
    end: i64,
) -> i64 {
    let (mut next, mut records) = (0i64, 0i64);
    while next < end {
        let got = fetch.next().await.unwrap();
        assert_eq!(got.fetch_offset, next, "partition {p} in order, no gap");
        for b in got.batches() {
            records += b.unwrap().record_count() as i64;
        }
        next = got.next_offset;
    }
    records
}

/// Reads each of `topic`'s four partitions from offset 0 to its end in
/// `ends`, each in a task of its own, so that the partitions share the
/// broker's fetch sessions as a mirror's do.
async fn spawn_copies(
    cluster: &kmirror_actors::cluster::kafka::KafkaCluster,
    topic: &str,
    topic_id: uuid::Uuid,
    ends: &[i64],
) -> Vec<tokio::task::JoinHandle<i64>> {
    let mut copies = Vec::new();
    for (p, &end) in (0..).zip(ends) {
        let fetch = open_from_start(cluster, topic, topic_id, p).await;
        copies.push(tokio::spawn(read_in_order(fetch, p, end)));
    }
    copies
}

/// Awaits the copies of [`spawn_copies`]: every partition arrived whole.
async fn assert_copied_whole(copies: Vec<tokio::task::JoinHandle<i64>>, ends: &[i64]) {
    for (p, copy) in copies.into_iter().enumerate() {
        assert_eq!(copy.await.unwrap(), ends[p], "partition {p} copied whole");
    }
}

/// The fetch is pipelined: a broker's partitions are split over
/// `FETCH_SESSIONS_PER_BROKER` sessions, each on a connection of its own,
/// so while one session's answer is handed out another's request is at the
/// broker. Copying a backlog out of four partitions of one broker shows two
/// fetches at the broker at once, and every partition still arrives whole
/// and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broker_has_two_fetches_in_flight_while_copying() {
    use kmirror_actors::cluster::kafka::{KafkaCluster, FETCH_SESSIONS_PER_BROKER};

    let bed = bed();
    let topic = unique("proto-pipe");
    let c = client(&bed.source).await;
    let admin = Admin::new(c.clone());
    let ends = load_four_partitions(bed, &admin, &topic, 40_000).await;
    let topic_id = c.metadata().topic(&topic).unwrap().topic_id;
    let (leader, _) = c.leader(&topic, 0).await.unwrap();
    let cluster = KafkaCluster::new(
        c.clone(),
        FetchOptions {
            partition_max_bytes: 64 * 1024,
            ..Default::default()
        },
    );
    let copies = spawn_copies(&cluster, &topic, topic_id, &ends).await;
    let mut busiest = 0;
    while !copies.iter().all(|t| t.is_finished()) {
        busiest = busiest.max(cluster.fetch_figures(leader).in_flight);
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_copied_whole(copies, &ends).await;
    let figures = cluster.fetch_figures(leader);
    eprintln!(
        "broker {leader}, {FETCH_SESSIONS_PER_BROKER} sessions: {figures:?}; most in flight seen while copying: {busiest}"
    );
    assert!(
        figures.max_in_flight >= 2,
        "two fetches at the broker at once: {figures:?}"
    );
    assert!(
        busiest >= 2,
        "two fetches in flight seen while the backlog was copied: {busiest}"
    );
    assert!(
        figures.requests > 4,
        "a backlog takes several fetches: {figures:?}"
    );
}

/// Under a small budget a partition whose reader stops sits out (its
/// buffer and its share full) without holding the others back, and gets
/// every record, in order, once it reads again; a reader that goes away is
/// forgotten, so a broker's fetch loop with nobody left to read for stops
/// asking — the loop looks at every partition only now and then, and this
/// is what it must still see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_reader_sits_out_and_a_gone_one_is_forgotten() {
    use kmirror_actors::cluster::kafka::KafkaCluster;
    use kmirror_actors::kafka::budget::MemoryBudget;
    use std::time::Duration;

    // Each fetch (with what sits out) and its wait for the budget, shown
    // if the test fails: a stall here is one in production.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kmirror_actors=info,kmirror::profile=debug".into()),
        )
        .with_test_writer()
        .try_init();
    let bed = bed();
    let topic = unique("proto-sitout");
    let c = client(&bed.source).await;
    let admin = Admin::new(c.clone());
    let ends = load_four_partitions(bed, &admin, &topic, 20_000).await;
    let topic_id = c.metadata().topic(&topic).unwrap().topic_id;
    let (leader, _) = c.leader(&topic, 0).await.unwrap();
    let budget = MemoryBudget::new(1024 * 1024);
    let cluster = KafkaCluster::new(
        c.clone(),
        FetchOptions {
            partition_max_bytes: 64 * 1024,
            ..Default::default()
        },
    )
    .with_budget(budget.clone());
    let open = |p: i32| open_from_start(&cluster, &topic, topic_id, p);
    let stopped = open(3).await;
    let mut readers = Vec::new();
    for p in 0..3 {
        let fetch = open(p).await;
        let end = ends[p as usize];
        readers.push(tokio::spawn(read_in_order(fetch, p, end)));
    }
    // The others finish while partition 3's reader reads nothing.
    for (p, reader) in readers.into_iter().enumerate() {
        let copied = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .unwrap_or_else(|_| panic!("partition {p} held back by a stopped reader"))
            .unwrap();
        assert_eq!(copied, ends[p], "partition {p} copied whole");
    }
    assert!(
        budget.used() <= budget.limit() + 3 * 64 * 1024 * 4,
        "a stopped reader holds no more than its buffer: {} of {}",
        budget.used(),
        budget.limit()
    );
    assert_eq!(
        read_in_order(stopped, 3, ends[3]).await,
        ends[3],
        "the stopped reader gets every record when it reads again"
    );
    // Every reader is gone now; partitions at their end are not fed, so
    // only the loop's look at every partition can forget them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = cluster.fetch_figures(leader).requests;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = cluster.fetch_figures(leader).requests;
    assert_eq!(
        before, after,
        "nobody is left to read for, yet the broker is still asked"
    );
}

/// Under a budget a fetch asks the broker for no more than a sixteenth of
/// it: a response's frame is alive beside the data copied out of it, so
/// frames of many megabytes raise the peak far above the data in flight.
/// With 16 MiB and four partitions, their room alone would let a request
/// ask for 5.3 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_under_a_budget_asks_for_a_sixteenth_of_it_at_most() {
    use kmirror_actors::cluster::kafka::KafkaCluster;
    use kmirror_actors::kafka::budget::MemoryBudget;

    let bed = bed();
    let topic = unique("proto-ask");
    let c = client(&bed.source).await;
    let admin = Admin::new(c.clone());
    let ends = load_four_partitions(bed, &admin, &topic, 20_000).await;
    let topic_id = c.metadata().topic(&topic).unwrap().topic_id;
    let (leader, _) = c.leader(&topic, 0).await.unwrap();
    let budget = MemoryBudget::new(16 * 1024 * 1024);
    let cluster = KafkaCluster::new(c.clone(), FetchOptions::default()).with_budget(budget);
    let copies = spawn_copies(&cluster, &topic, topic_id, &ends).await;
    assert_copied_whole(copies, &ends).await;
    let figures = cluster.fetch_figures(leader);
    assert!(
        figures.largest_ask > 0 && figures.largest_ask <= 1024 * 1024,
        "no request asks for more than 1 MiB of a 16 MiB budget: {figures:?}"
    );
}
