//! The data path of a clustered node on a fenced destination, against
//! real Kafka: `KafkaCluster::fenced` writes each destination partition
//! under its own transactional id; a node taking the partition over
//! (`DestinationCluster::fence`) makes the brokers refuse the old owner's
//! sink, and the old owner cannot take it back by reopening its sink
//! (`fence::renew` is refused where `acquire` would have stolen it). The
//! test prints every batch of the destination partition: base offset,
//! producer id, epoch, marker or data. And a sink keeps its fence alive
//! (`PartitionSink::refence`) past the leader's producer expiry, which
//! would otherwise let the old owner's batch in. And a node out of the
//! group since its assignment commits no group offsets.

mod protocol_common;

use std::time::Duration;

use bytes::Bytes;
use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::cluster::{DestinationCluster, GroupOffsets, PartitionSink};
use kmirror_actors::kafka::admin::Admin;
use kmirror_actors::kafka::admin::CommittedOffset;
use kmirror_actors::kafka::batch::{encode_batch, Codec, OutgoingBatch, Record, SourceOffsets};
use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};
use kmirror_actors::kafka::lease::Lease;
use kmirror_actors::kafka::KafkaError;
use kmirror_tests::{bed, describe_producers, kafka_tool_ok, unique, OwnCluster};
use protocol_common::*;

fn batch(tag: &str, n: usize) -> OutgoingBatch {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    stamped(tag, n, now)
}

/// Records stamped `now`: a mirrored batch keeps its source timestamp.
fn stamped(tag: &str, n: usize, now: i64) -> OutgoingBatch {
    let records: Vec<Record> = (0..n)
        .map(|j| Record {
            offset_delta: j as i32,
            timestamp: now,
            key: Some(Bytes::from(format!("{tag}-{j}"))),
            value: Some(Bytes::from(format!("{tag}-{j}"))),
            headers: vec![],
        })
        .collect();
    OutgoingBatch::new(
        encode_batch(&records, Codec::None).unwrap(),
        n as i32,
        SourceOffsets::Range {
            first: 0,
            last: n as i64 - 1,
        },
    )
}

async fn send(sink: &mut dyn PartitionSink, tag: &str, n: usize) -> Result<i64, KafkaError> {
    Ok(sink.send(batch(tag, n)).await?.await?.base_offset)
}

async fn node(bootstrap: &str, prefix: &str) -> KafkaCluster {
    KafkaCluster::new(client(bootstrap).await, FetchOptions::default()).fenced(prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_fences_the_old_owners_sink_and_reopening_it_is_refused() {
    let bed = bed();
    let topic = unique("cfence");
    let admin = Admin::new(client(&bed.destination).await);
    create(&admin, &topic, 1, &[]).await;
    let tp = TopicPartition::new(&topic, 0);
    let prefix = unique("kmirror-test");
    let (a, b) = (
        node(&bed.destination, &prefix).await,
        node(&bed.destination, &prefix).await,
    );

    // A owns the shard: fences (one marker), then writes.
    a.fence(vec![tp.clone()]).await.unwrap();
    let mut sink_a = a.open_sink(tp.clone()).await.unwrap();
    let a_id = sink_a.producer();
    let a0 = send(&mut *sink_a, "a0", 2).await.unwrap();
    let a1 = send(&mut *sink_a, "a1", 2).await.unwrap();
    println!("A writes as {a_id:?}: batches at {a0}, {a1}");
    assert_eq!((a0, a1), (1, 3), "A's own marker holds offset 0");

    // B takes over while A still runs.
    b.fence(vec![tp.clone()]).await.unwrap();
    assert_eq!(
        b.fence_producer_id(&tp),
        Some(a_id.0),
        "one producer id per partition"
    );
    let after_fence = b.settled_bounds(&tp).await.unwrap().end;
    println!("B fenced: end {after_fence}");
    assert_eq!(after_fence, 6, "B's marker takes exactly one offset");

    match send(&mut *sink_a, "a2", 2).await {
        Err(KafkaError::Fenced { resource, reason }) => {
            println!("A's next batch: Fenced {{ {resource}: {reason} }}")
        }
        other => panic!("A's batch after B's fence: expected Fenced, got {other:?}"),
    }
    sink_a.close().await;
    match a.open_sink(tp.clone()).await {
        Err(KafkaError::Fenced { resource, reason }) => {
            println!("A reopening its sink: Fenced {{ {resource}: {reason} }}")
        }
        Ok(s) => panic!(
            "A reopened its sink as {:?}: a zombie took the partition back",
            s.producer()
        ),
        Err(e) => panic!("A reopening its sink: expected Fenced, got {e}"),
    }

    let mut sink_b = b.open_sink(tp.clone()).await.unwrap();
    let b_id = sink_b.producer();
    let b0 = send(&mut *sink_b, "b0", 2).await.unwrap();
    println!("B writes as {b_id:?}: batch at {b0}");
    assert_eq!(b0, 6);
    assert!(b_id.1 > a_id.1, "B's epoch is above A's");
    sink_b.close().await;

    tokio::time::sleep(Duration::from_millis(200)).await;
    let end = b.settled_bounds(&tp).await.unwrap().end;
    let batches = b.read_batches(&tp, 0, end).await.unwrap();
    let seen: Vec<(i64, i64, i16, bool)> = batches
        .iter()
        .map(|x| {
            (
                x.base_offset(),
                x.producer_id(),
                x.producer_epoch(),
                x.is_control(),
            )
        })
        .collect();
    println!("destination batches (base, producer id, epoch, marker): {seen:?}");
    let b_marker = seen.iter().find(|s| s.3 && s.0 >= 5).expect("B's marker").2;
    assert!(
        seen.iter()
            .filter(|s| !s.3 && s.0 > 5)
            .all(|s| s.2 >= b_marker),
        "no batch of an epoch below B's fence lands after it"
    );
    assert_eq!(seen.iter().filter(|s| !s.3).count(), 3);

    let keys = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            &bed.destination,
            "--topic",
            &topic,
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--max-messages",
            "6",
            "--timeout-ms",
            "10000",
            "--property",
            "print.key=true",
            "--property",
            "print.value=false",
        ],
    );
    let keys: Vec<&str> = keys.lines().collect();
    println!("console consumer: {keys:?}");
    assert_eq!(keys, ["a0-0", "a0-1", "a1-0", "a1-1", "b0-0", "b0-1"]);
}

/// A new topic of two partitions at `bootstrap`, and a transactional id
/// prefix of its own.
async fn two_partitions(
    bootstrap: &str,
    name: &str,
) -> (String, TopicPartition, TopicPartition, String) {
    let topic = unique(name);
    create(&Admin::new(client(bootstrap).await), &topic, 2, &[]).await;
    let (p0, p1) = (
        TopicPartition::new(&topic, 0),
        TopicPartition::new(&topic, 1),
    );
    (topic, p0, p1, unique("kmirror-test"))
}

/// A single-broker cluster of this test's own whose leaders forget a
/// producer `expiration_ms` after its last timestamp, checked every
/// `check_ms`.
fn expiry_cluster(expiration_ms: u64, check_ms: u64) -> OwnCluster {
    OwnCluster::start(&[
        format!("producer.id.expiration.ms={expiration_ms}"),
        format!("producer.id.expiration.check.interval.ms={check_ms}"),
    ])
}

/// The hole and its fix, side by side on two partitions. A owns p0 and
/// p1; B takes both over (one marker each) and writes a batch stamped
/// 2023-11-14 on each, as mirrored records may be. The leader forgets B's
/// producer at its next check: on p0, which B leaves alone, A's next batch
/// lands. On p1 B's sink fences again when its keep-alive says so (at
/// once, the stamp being that old): A's batch is refused, and B's sink
/// goes on writing under the same epoch — unless the leader's expiry check
/// came before B's marker, which a client cannot prevent: then B's next
/// batch asks for a new producer, not a lost fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_fence_outlives_the_leaders_producer_expiry() {
    const EXPIRATION_MS: u64 = 8000;
    const CHECK_MS: u64 = 500;
    const OLD: i64 = 1_700_000_000_000;
    let cluster = expiry_cluster(EXPIRATION_MS, CHECK_MS);
    let bs = cluster.bootstrap.clone();
    let (topic, p0, p1, prefix) = two_partitions(&bs, "refence").await;
    let (a, b) = (node(&bs, &prefix).await, node(&bs, &prefix).await);

    a.fence(vec![p0.clone(), p1.clone()]).await.unwrap();
    let mut a0 = a.open_sink(p0.clone()).await.unwrap();
    let mut a1 = a.open_sink(p1.clone()).await.unwrap();
    send(&mut *a0, "a0", 1).await.unwrap();
    send(&mut *a1, "a1", 1).await.unwrap();

    b.fence(vec![p0.clone(), p1.clone()]).await.unwrap();
    let mut b0 = b.open_sink(p0.clone()).await.unwrap();
    let mut b1 = b.open_sink(p1.clone()).await.unwrap();
    for sink in [&mut b0, &mut b1] {
        sink.send(stamped("b-old", 1, OLD))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let keep = b1
        .keep_alive()
        .expect("a fenced sink keeps its fence alive");
    println!(
        "A {:?}, B {:?}; B's keep-alive from the broker: {keep:?}, re-fence at age {:?}, at most every {:?}",
        a1.producer(),
        b1.producer(),
        keep.refence_age(),
        keep.min_gap()
    );
    assert_eq!(
        keep.expiration,
        Duration::from_millis(EXPIRATION_MS),
        "read from the broker, not Kafka's default"
    );
    assert_eq!(keep.check_interval, Duration::from_millis(CHECK_MS));
    assert_eq!(
        keep.transactional_expiration,
        Duration::from_secs(7 * 86_400),
        "Kafka's default, from the broker"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        keep.due_ms(OLD, now, i64::MIN / 2) <= now,
        "a batch that old is due for a marker at once"
    );
    let before = b.settled_bounds(&p1).await.unwrap().end;
    b1.refence().await.unwrap();
    let after = b.settled_bounds(&p1).await.unwrap().end;
    println!("B re-fenced p1: end {before} -> {after}");
    assert_eq!(after, before + 1, "a re-fence is one marker, one offset");

    // Past the next expiry checks.
    tokio::time::sleep(Duration::from_millis(4 * CHECK_MS)).await;
    // Read in-process: B's state on p1 expires 8 s after the marker, and
    // Kafka's tool (printed after the checks) can take that long to start.
    let on_p1 = producer_states(&client(&bs).await, &topic, 1).await;
    // The leader's expiry check may have come between B's old batch and
    // its marker: then the marker made B's entry anew, without the batch's
    // sequence (LastSequence -1 instead of 0).
    let expired_first = on_p1
        .iter()
        .any(|s| s.producer_id.0 == b1.producer().0 && s.last_sequence == -1);
    let r0 = send(&mut *a0, "a0-zombie", 1).await;
    println!("A's batch to p0 after B's producer expired there: {r0:?}");
    assert!(
        r0.is_ok(),
        "without a re-fence the leader forgot B and took A's stale epoch"
    );
    match send(&mut *a1, "a1-zombie", 1).await {
        Err(KafkaError::Fenced { resource, reason }) => {
            println!("A's batch to re-fenced p1: Fenced {{ {resource}: {reason} }}")
        }
        other => panic!("A's batch to re-fenced p1: expected Fenced, got {other:?}"),
    }
    let next = send(&mut *b1, "b1-after", 1).await;
    println!(
        "B's next batch on p1, same sink {:?}: {next:?}",
        b1.producer()
    );
    if expired_first {
        // B's sequences are gone from the leader, so B cannot go on under
        // this producer. The sink says so as a producer to replace (the
        // pump reconciles with the destination's end and opens a new one
        // under its lease), never as a lost fence: nobody fenced B.
        match next {
            Err(KafkaError::ProducerFenced { reason, .. })
                if reason.contains("OutOfOrderSequenceNumber") => {}
            other => panic!(
                "B's producer expired before its marker: expected ProducerFenced, got {other:?}"
            ),
        }
    } else {
        assert_eq!(next.unwrap(), after, "B goes on after its own marker");
    }
    println!(
        "p0 (not re-fenced):\n{}p1 (re-fenced):\n{}",
        describe_producers(&bs, &topic, 0),
        describe_producers(&bs, &topic, 1),
    );
    for s in [a0, a1, b0, b1] {
        s.close().await;
    }
}

/// What some 32 000 takeovers of `tid` would have done: bare
/// InitProducerId calls (no marker, no data) until the coordinator holds
/// the id at `target`. Returns the calls made.
async fn bump_to(bootstrap: &str, tid: &str, target: i16) -> usize {
    use kafka_protocol::messages::{InitProducerIdRequest, ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;
    use kmirror_actors::kafka::fence::find_transaction_coordinator;
    let c = client(bootstrap).await;
    let node = find_transaction_coordinator(&c, tid).await.unwrap();
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(tid.to_owned()))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut calls = 0;
    loop {
        let r = c.send_to(node, &req).await.unwrap();
        calls += 1;
        assert_eq!(
            r.error_code, 0,
            "InitProducerId {tid}: error {}",
            r.error_code
        );
        if r.producer_epoch == target {
            return calls;
        }
        assert!(r.producer_epoch < target, "went past {target}: {r:?}");
    }
}

/// Epoch exhaustion, both ways a producer id rotates under a zombie, on
/// two partitions. Kafka 4.1's coordinator counts an epoch of
/// `Short.MaxValue - 1` (32 766) as exhausted and answers the next
/// InitProducerId with a new producer id at epoch 0, whose markers fence
/// nothing of the old one.
///
/// p0, an owner's renewal reaching 32 766: B takes p0 at 32 765 and its
/// sink renews to 32 766. Were B to write there, C's takeover would rotate
/// the id and B's next batch would land; B's sink rotates first instead,
/// so C's takeover fences it as usual.
///
/// p1, an owner that took 32 766 and stopped before rotating: A (epoch 1)
/// still writes; the coordinator stands at 32 766. B's takeover marks p1
/// at 32 766 under the old id before it rotates, so A is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_epoch_never_leaves_a_zombie_unfenced() {
    const EXHAUSTED: i16 = i16::MAX - 1;
    let bed = bed();
    let bs = bed.destination.clone();
    let (topic, p0, p1, prefix) = two_partitions(&bs, "exhaust").await;
    let (a, b, c) = (
        node(&bs, &prefix).await,
        node(&bs, &prefix).await,
        node(&bs, &prefix).await,
    );
    a.fence(vec![p0.clone(), p1.clone()]).await.unwrap();
    let mut a1 = a.open_sink(p1.clone()).await.unwrap();
    send(&mut *a1, "a1", 1).await.unwrap();
    let old_id = a1.producer().0;

    let started = std::time::Instant::now();
    let (t0, t1) = (
        KafkaCluster::transactional_id(&prefix, &p0),
        KafkaCluster::transactional_id(&prefix, &p1),
    );
    let (n0, n1) = tokio::join!(
        bump_to(&bs, &t0, EXHAUSTED - 2),
        bump_to(&bs, &t1, EXHAUSTED)
    );
    println!(
        "{n0} + {n1} InitProducerId calls (two ids at once) took {:?}",
        started.elapsed()
    );

    // p0: B's sink renews onto the exhausted epoch.
    b.fence(vec![p0.clone()]).await.unwrap();
    let mut b0 = b.open_sink(p0.clone()).await.unwrap();
    let b_id = b0.producer();
    send(&mut *b0, "b0", 1).await.unwrap();
    c.fence(vec![p0.clone()]).await.unwrap();
    let c_id = c.fence_producer_id(&p0).unwrap();
    let r0 = send(&mut *b0, "b0-zombie", 1).await;
    println!("p0: B wrote as {b_id:?}, C took p0 as producer {c_id}; B's next batch: {r0:?}");

    // p1: the coordinator stands at the exhausted epoch.
    b.fence(vec![p1.clone()]).await.unwrap();
    let b1_id = b.fence_producer_id(&p1).unwrap();
    let r1 = send(&mut *a1, "a1-zombie", 1).await;
    println!(
        "p1: A wrote as producer {old_id}, B took p1 as producer {b1_id}; A's next batch: {r1:?}"
    );
    println!(
        "p0:\n{}p1:\n{}",
        describe_producers(&bs, &topic, 0),
        describe_producers(&bs, &topic, 1)
    );
    assert!(
        b_id.1 < EXHAUSTED,
        "p0: B's data went out under the exhausted epoch {b_id:?}"
    );
    assert!(
        matches!(r0, Err(KafkaError::Fenced { .. })),
        "p0: B's batch after C's takeover landed"
    );
    assert_ne!(b1_id, old_id, "p1: the coordinator rotated the producer id");
    assert!(
        matches!(r1, Err(KafkaError::Fenced { .. })),
        "p1: A's batch after B's takeover landed"
    );
    for s in [a1, b0] {
        s.close().await;
    }
}

/// A paused partition has no pump, and so no pump's keep-alive: its owner
/// keeps its fence alive all the same. On a destination whose leaders
/// forget a producer 8 s after its last timestamp, node B copies a topic
/// (its sink acquired the partition's id after A had opened a sink on it:
/// A is the zombie), pauses it, and waits past the expiry: A's batch is
/// refused, where without the keep-alive the leader had forgotten B and
/// took A's stale epoch. Resumed, B records the markers as a hole and
/// copies on: the destination holds the source's records, in order.
#[actix::test]
async fn a_paused_partitions_fence_outlives_the_leaders_producer_expiry() {
    use std::sync::Arc;

    use kmirror_actors::kafka::fence::acquire;
    use kmirror_actors::kafka::produce::IdempotentProducer;
    use kmirror_actors::node::{Node, NodeSettings, PartitionDescription, TopicChange};
    use kmirror_actors::state_log::StateLogOptions;
    use kmirror_tests::create_topic;
    use kmirror_tests::mirror::{connector, open_fenced_log, produce_to};

    const MIRROR: &str = "idle-fence";
    const EXPIRATION_MS: u64 = 8000;
    const CHECK_MS: u64 = 500;
    let cluster = expiry_cluster(EXPIRATION_MS, CHECK_MS);
    let bs = cluster.bootstrap.clone();
    let source = bed().source.clone();
    let topic = unique("idlefence");
    create_topic(&source, &topic, 1, &[]);
    let values = |from: usize, to: usize| -> String {
        (from..to)
            .map(|i| format!("n:{i}\tk{i}\tv-{i}\n"))
            .collect()
    };
    produce_to(&source, &topic, &values(0, 20), "none");
    let tp = TopicPartition::new(&topic, 0);
    let prefix = unique("kmirror-idle-data");
    let state_topic = unique("idle-state");

    // A, a node that held the partition before: it acquired the
    // partition's id (epoch 0) and has written nothing yet.
    let a_client = client(&bs).await;
    let a_tid = KafkaCluster::transactional_id(&prefix, &tp);
    let a_fence = acquire(&a_client, &a_tid, Duration::from_secs(60), &[])
        .await
        .unwrap();

    // B owns the shard and copies.
    let options = StateLogOptions {
        topic: state_topic.clone(),
        partitions: 1,
        replication_factor: 1,
        ..StateLogOptions::new(&bs)
    };
    let log = open_fenced_log(options, 0, format!("{prefix}-state-0")).await;
    let b_destination = Arc::new(node(&bs, &prefix).await);
    let b = Node::start(
        Arc::new(log),
        b_destination.clone(),
        connector(),
        NodeSettings {
            refresh_interval: Duration::from_millis(500),
            state_topic: unique("unused"),
            state_topic_partitions: 1,
            shard: Some(0),
            member: "B".into(),
            ..NodeSettings::default()
        },
    )
    .await
    .expect("node start");
    let props = [("bootstrap.servers", source.as_str())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    b.create_mirror(MIRROR, props).await.unwrap();
    b.start_topics(MIRROR, std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    let described = |b: &Node| {
        let b = b.clone();
        async move { b.describe(Some(MIRROR)).await.unwrap().into_iter().next() }
    };
    let wait = |what: &'static str, done: fn(&PartitionDescription) -> bool| {
        let b = b.clone();
        async move {
            let start = std::time::Instant::now();
            loop {
                if let Some(p) = described(&b).await {
                    if done(&p) {
                        return p;
                    }
                    assert!(start.elapsed() < Duration::from_secs(60), "{what}: {p:#?}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    wait("B copies", |p| {
        p.state == "MIRRORING" && p.source_offset >= 20
    })
    .await;
    println!(
        "B copies as producer {:?}; A holds {a_fence:?}",
        b_destination.fence_producer_id(&tp)
    );
    b.change_topics(
        MIRROR,
        TopicChange::Pause,
        std::slice::from_ref(&topic),
        None,
    )
    .await
    .unwrap();
    let paused = wait("B pauses", |p| p.state == "PAUSED").await;
    let paused_at = b_destination.settled_bounds(&tp).await.unwrap().end;
    println!(
        "paused at destination end {paused_at}, refences {}",
        paused.refences
    );

    // Past the expiry of B's last batch, and a few checks.
    tokio::time::sleep(Duration::from_millis(EXPIRATION_MS + 4 * CHECK_MS)).await;
    let idle = described(&b).await.unwrap();
    println!(
        "after {} ms paused: destination end {}, refences {}\n{}",
        EXPIRATION_MS + 4 * CHECK_MS,
        b_destination.settled_bounds(&tp).await.unwrap().end,
        idle.refences,
        describe_producers(&bs, &topic, 0)
    );
    let a_producer = IdempotentProducer::under_fence(a_client, &a_fence);
    let a_partition = a_producer.partition(&topic, 0).unwrap();
    let zombie = match a_partition.send(batch("a-zombie", 1)).await {
        Ok(ack) => ack.await.map(|a| a.base_offset),
        Err(e) => Err(e),
    };
    println!("A's batch to the paused partition: {zombie:?}");
    a_partition.close().await;
    assert!(
        matches!(zombie, Err(KafkaError::Fenced { .. })),
        "A's stale epoch landed on the paused partition: {zombie:?}"
    );
    assert!(idle.refences > paused.refences, "re-fenced while paused");

    // Resumed: the markers become a hole and the copy goes on.
    produce_to(&source, &topic, &values(20, 30), "none");
    b.change_topics(
        MIRROR,
        TopicChange::Resume,
        std::slice::from_ref(&topic),
        None,
    )
    .await
    .unwrap();
    wait("B copies on", |p| {
        p.state == "MIRRORING" && p.source_offset >= 30
    })
    .await;
    let copied = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            &bs,
            "--topic",
            &topic,
            "--from-beginning",
            "--max-messages",
            "30",
            "--timeout-ms",
            "15000",
        ],
    );
    let want: Vec<String> = (0..30).map(|i| format!("v-{i}")).collect();
    assert_eq!(copied.lines().collect::<Vec<_>>(), want);
    b.shutdown().await;
}

/// The destination's writes that are not produces — group offsets here,
/// and topic configs and ACLs the same way — go out only under the group
/// lease: a node out of the group since the assignment it acts on (paused
/// past its session, expelled, back in) commits nothing it translated
/// before, over the offsets the consumers commit on a partition failed
/// over meanwhile. Checked with Kafka's own `kafka-consumer-groups`.
#[tokio::test]
async fn a_node_out_of_the_group_since_its_assignment_commits_no_group_offsets() {
    let b = bed();
    let topic = unique("lease-commit");
    kmirror_tests::create_topic(&b.destination, &topic, 1, &[]);
    let lease = Lease::default();
    lease.extend_to(std::time::Instant::now() + Duration::from_secs(60));
    lease.grant(lease.term());
    let dest = node(&b.destination, &unique("lease-commit"))
        .await
        .leased(lease.clone());
    let offsets = GroupOffsets::from([(
        (topic.clone(), 0),
        CommittedOffset {
            offset: 0,
            leader_epoch: -1,
            metadata: None,
        },
    )]);
    let (granted, lost) = (unique("g-granted"), unique("g-lost"));
    dest.commit_offsets(&granted, offsets.clone())
        .await
        .unwrap();
    // Out of the group and back in: the lease runs again, but the
    // assignment the node acts on is of the earlier term.
    lease.revoke();
    lease.extend_to(std::time::Instant::now() + Duration::from_secs(60));
    let refused = dest.commit_offsets(&lost, offsets).await;
    assert!(
        matches!(refused, Err(KafkaError::Fenced { .. })),
        "{refused:?}"
    );
    let groups = |g: &str| {
        kmirror_tests::kafka_tool(
            "kafka-consumer-groups",
            &[
                "--bootstrap-server",
                &b.destination,
                "--describe",
                "--group",
                g,
            ],
        )
    };
    let seen = String::from_utf8_lossy(&groups(&granted).stdout).into_owned();
    assert!(seen.contains(&topic), "the granted commit landed: {seen}");
    let out = groups(&lost);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains(&topic), "nothing committed after: {text}");
}
