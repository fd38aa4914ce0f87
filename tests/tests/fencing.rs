//! "Fence on acquire", proven against real Kafka (the clustered daemon's
//! fencing; `actors::kafka::fence`): a unit's owner writes idempotent,
//! non-transactional batches under the producer id and epoch of the unit's
//! transactional id; a new owner acquires the id (epoch + 1) and aborts an
//! empty transaction over the partitions (one marker each, at the new
//! epoch); the old owner's later batches are refused. Each test prints the
//! offsets and epochs it saw. Reads go through Kafka's own console
//! consumer and `kafka-transactions describe-producers`.

mod protocol_common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProduceRequest, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::{Request, StrBytes};
use kmirror_actors::kafka::admin::{Admin, OffsetSpec};
use kmirror_actors::kafka::batch::{encode_batch, Codec, OutgoingBatch, Record, SourceOffsets};
use kmirror_actors::kafka::fence::{
    acquire, fence_partitions, find_transaction_coordinator, ProducerFence, ADD_PARTITIONS_VERSION,
    END_TXN_MAX_VERSION,
};
use kmirror_actors::kafka::fetch::{IsolationLevel, TopicPartition};
use kmirror_actors::kafka::produce::{IdempotentProducer, PartitionProducer, ProduceAck};
use kmirror_actors::kafka::KafkaError;
use kmirror_tests::{bed, describe_producers, kafka_tool_ok, unique, OwnCluster};
use protocol_common::*;

const TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// Records stamped with the current time, unless `ts` says otherwise.
fn batch(tag: &str, n: usize, ts: Option<i64>) -> OutgoingBatch {
    let now = ts.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    });
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

async fn send(pp: &PartitionProducer, tag: &str, n: usize) -> Result<ProduceAck, KafkaError> {
    pp.send(batch(tag, n, None)).await?.await
}

async fn end(admin: &Admin, topic: &str, p: i32) -> i64 {
    admin
        .list_offset(
            topic,
            p,
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .await
        .unwrap()
        .offset
}

async fn stable_end(admin: &Admin, topic: &str, p: i32) -> i64 {
    admin
        .list_offset(topic, p, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
        .await
        .unwrap()
        .offset
}

fn assert_fenced(r: Result<ProduceAck, KafkaError>, what: &str) {
    match r {
        Err(KafkaError::Fenced { resource, reason }) => {
            println!("{what}: Fenced {{ {resource}: {reason} }}")
        }
        other => panic!("{what}: expected KafkaError::Fenced, got {other:?}"),
    }
}

/// Kafka's console consumer: the keys of one partition, in offset order.
fn console_keys(bootstrap: &str, topic: &str, p: i32, isolation: &str, max: usize) -> Vec<String> {
    let (p, max) = (p.to_string(), max.to_string());
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--partition",
            &p,
            "--offset",
            "earliest",
            "--isolation-level",
            isolation,
            "--max-messages",
            &max,
            "--timeout-ms",
            "10000",
            "--property",
            "print.key=true",
            "--property",
            "print.value=false",
        ],
    );
    out.lines().map(str::to_owned).collect()
}

/// (a) Idempotent, non-transactional batches under a transactionally
/// obtained producer id are accepted, leave no open transaction (LSO =
/// end) and are read alike by read_committed and read_uncommitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_under_a_transactional_producer_id_is_plain_idempotent_data() {
    let bed = bed();
    let topic = unique("fence-a");
    let c = client(&bed.destination).await;
    let admin = Admin::new(c.clone());
    create(&admin, &topic, 1, &[]).await;
    let tid = unique("tid-a");

    let coordinator = find_transaction_coordinator(&c, &tid).await.unwrap();
    let fence = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    println!(
        "a: coordinator node {coordinator}, acquired {tid}: producer id {} epoch {}",
        fence.producer_id, fence.producer_epoch
    );
    let producer = IdempotentProducer::under_fence(c.clone(), &fence);
    assert_eq!(producer.id(), (fence.producer_id, fence.producer_epoch));
    let pp = producer.partition(&topic, 0).unwrap();
    let mut offsets = Vec::new();
    for i in 0..3 {
        let ack = send(&pp, &format!("a{i}"), 2).await.unwrap();
        offsets.push((ack.base_offset, ack.base_sequence));
    }
    let (e, lso) = (
        end(&admin, &topic, 0).await,
        stable_end(&admin, &topic, 0).await,
    );
    println!("a: (base offset, base sequence) {offsets:?}; end {e}, last stable offset {lso}");
    assert_eq!(offsets, vec![(0, 0), (2, 2), (4, 4)]);
    assert_eq!((e, lso), (6, 6), "no transaction left open");

    let want: Vec<String> = (0..3)
        .flat_map(|i| (0..2).map(move |j| format!("a{i}-{j}")))
        .collect();
    for isolation in ["read_committed", "read_uncommitted"] {
        let keys = console_keys(&bed.destination, &topic, 0, isolation, 6);
        println!("a: console consumer ({isolation}): {keys:?}");
        assert_eq!(keys, want, "{isolation}");
    }
    println!(
        "a: describe-producers:\n{}",
        describe_producers(&bed.destination, &topic, 0)
    );
}

/// (b) B acquires the same transactional id (epoch + 1) and fences both
/// partitions, one of which never had data: each end moves by exactly one
/// (the marker); every later batch of A fails as Fenced and lands nowhere;
/// B's data is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owner_fences_the_old_one_on_every_partition() {
    let bed = bed();
    let topic = unique("fence-b");
    let c = client(&bed.destination).await;
    let admin = Admin::new(c.clone());
    create(&admin, &topic, 2, &[]).await;
    let tid = unique("tid-b");

    let a = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    let pa = IdempotentProducer::under_fence(c.clone(), &a);
    let a0 = pa.partition(&topic, 0).unwrap();
    for i in 0..2 {
        send(&a0, &format!("A{i}"), 2).await.unwrap();
    }
    let before = (end(&admin, &topic, 0).await, end(&admin, &topic, 1).await);

    let b = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    println!(
        "b: A = producer {} epoch {}; B = producer {} epoch {}",
        a.producer_id, a.producer_epoch, b.producer_id, b.producer_epoch
    );
    assert_eq!(
        b.producer_id, a.producer_id,
        "same transactional id, same producer id"
    );
    assert_eq!(
        b.producer_epoch,
        a.producer_epoch + 1,
        "acquire bumps the epoch"
    );
    let t0 = Instant::now();
    fence_partitions(
        &c,
        &b,
        &[
            TopicPartition::new(&topic, 0),
            TopicPartition::new(&topic, 1),
        ],
    )
    .await
    .unwrap();
    let fenced_in = t0.elapsed();
    let after = (end(&admin, &topic, 0).await, end(&admin, &topic, 1).await);
    println!(
        "b: ends (p0, p1) before the fence {before:?}, after {after:?} (fence took {fenced_in:?})"
    );
    assert_eq!(before, (4, 0));
    assert_eq!(
        after,
        (5, 1),
        "one marker per partition, the empty one included"
    );
    let described = describe_producers(&bed.destination, &topic, 1);
    println!("b: describe-producers on the never-written p1:\n{described}");
    assert!(
        described.contains(&format!("{}", b.producer_epoch)),
        "p1 holds B's epoch from the marker alone"
    );

    // A, a zombie: its next batches, on the partition it wrote and on the
    // one it never wrote, are refused.
    assert_fenced(send(&a0, "A-zombie-0", 2).await, "b: A's batch to p0");
    assert_fenced(send(&a0, "A-zombie-1", 2).await, "b: A's next batch to p0");
    let a1 = pa.partition(&topic, 1).unwrap();
    assert_fenced(
        send(&a1, "A-zombie-p1", 2).await,
        "b: A's first batch to p1",
    );
    let zombie_ends = (end(&admin, &topic, 0).await, end(&admin, &topic, 1).await);
    println!("b: ends after A's zombie batches {zombie_ends:?}");
    assert_eq!(zombie_ends, after, "nothing A sent after the fence landed");

    // B writes (sequences from 0 under its epoch).
    let pb = IdempotentProducer::under_fence(c.clone(), &b);
    let b0 = pb.partition(&topic, 0).unwrap();
    let b1 = pb.partition(&topic, 1).unwrap();
    let ack0 = send(&b0, "B0", 2).await.unwrap();
    let ack1 = send(&b1, "B1", 2).await.unwrap();
    println!(
        "b: B's batches: p0 offset {} seq {}, p1 offset {} seq {}",
        ack0.base_offset, ack0.base_sequence, ack1.base_offset, ack1.base_sequence
    );
    assert_eq!((ack0.base_offset, ack1.base_offset), (5, 1));
    assert_eq!((ack0.base_sequence, ack1.base_sequence), (0, 0));

    let keys0 = console_keys(&bed.destination, &topic, 0, "read_committed", 6);
    let keys1 = console_keys(&bed.destination, &topic, 1, "read_committed", 2);
    println!("b: p0 {keys0:?}\nb: p1 {keys1:?}");
    assert_eq!(keys0, ["A0-0", "A0-1", "A1-0", "A1-1", "B0-0", "B0-1"]);
    assert_eq!(keys1, ["B1-0", "B1-1"]);
}

/// (c) Without the marker, the epoch bump at the coordinator alone fences
/// nothing: A's stale batch still lands after B acquired. The first batch
/// B writes there (or its marker) is what shuts A out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_marker_a_stale_batch_lands() {
    let bed = bed();
    let topic = unique("fence-c");
    let c = client(&bed.destination).await;
    let admin = Admin::new(c.clone());
    create(&admin, &topic, 1, &[]).await;
    let tid = unique("tid-c");

    let a = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    let pa = IdempotentProducer::under_fence(c.clone(), &a);
    let a0 = pa.partition(&topic, 0).unwrap();
    send(&a0, "A0", 2).await.unwrap();
    let b = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    let stale = send(&a0, "A-stale", 2)
        .await
        .expect("no marker: A is not fenced yet");
    println!(
        "c: B acquired epoch {} (A has {}); A's stale batch landed at offset {}",
        b.producer_epoch, a.producer_epoch, stale.base_offset
    );
    assert_eq!(stale.base_offset, 2);

    let pb = IdempotentProducer::under_fence(c.clone(), &b);
    let b0 = pb.partition(&topic, 0).unwrap();
    let ack = send(&b0, "B0", 2).await.unwrap();
    println!(
        "c: B's first batch (no marker) at offset {}",
        ack.base_offset
    );
    assert_fenced(send(&a0, "A-after-B", 2).await, "c: A after B's data");
    assert_eq!(end(&admin, &topic, 0).await, 6);
}

/// (d) Kafka 4.1's default transaction.version 2 is finalized on the bed,
/// and fencing works with it because of the versions we pick. The same
/// abort sent as EndTxn v5 is a transactions-v2 end: the coordinator bumps
/// the epoch once more, so the marker would carry an epoch the owner never
/// got from `acquire`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_with_transactions_v2_finalized() {
    let bed = bed();
    let features = kafka_tool_ok(
        "kafka-features",
        &["--bootstrap-server", &bed.destination, "describe"],
    );
    let tv = features
        .lines()
        .find(|l| l.contains("Feature: transaction.version"))
        .unwrap_or_else(|| panic!("no transaction.version in:\n{features}"));
    println!("d: {tv}");
    assert!(tv.contains("FinalizedVersionLevel: 2"), "TV2 finalized");

    let c = client(&bed.destination).await;
    let conn = c.any_connection().await.unwrap();
    for (name, key, ours) in [
        (
            "FindCoordinator",
            FindCoordinatorRequest::KEY,
            conn.version::<FindCoordinatorRequest>().unwrap(),
        ),
        (
            "InitProducerId",
            InitProducerIdRequest::KEY,
            conn.version::<InitProducerIdRequest>().unwrap(),
        ),
        (
            "AddPartitionsToTxn",
            AddPartitionsToTxnRequest::KEY,
            ADD_PARTITIONS_VERSION,
        ),
        (
            "EndTxn",
            EndTxnRequest::KEY,
            conn.version::<EndTxnRequest>()
                .unwrap()
                .min(END_TXN_MAX_VERSION),
        ),
        (
            "Produce",
            ProduceRequest::KEY,
            conn.version::<ProduceRequest>().unwrap(),
        ),
    ] {
        println!(
            "d: {name}: broker {:?}, used v{ours}",
            conn.broker_versions(key).unwrap()
        );
    }

    // The library path: marker at the acquired epoch.
    let admin = Admin::new(c.clone());
    let topic = unique("fence-d");
    create(&admin, &topic, 1, &[]).await;
    let tid = unique("tid-d");
    let f = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    fence_partitions(&c, &f, &[TopicPartition::new(&topic, 0)])
        .await
        .unwrap();
    let again = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    println!(
        "d: EndTxn v{END_TXN_MAX_VERSION}: acquired epoch {}, next acquire gives {} (no extra bump)",
        f.producer_epoch, again.producer_epoch
    );
    assert_eq!(again.producer_epoch, f.producer_epoch + 1);

    // By hand, EndTxn v5 (transactions v2).
    let tid5 = unique("tid-d5");
    let f5 = acquire(&c, &tid5, TXN_TIMEOUT, &[]).await.unwrap();
    let node = find_transaction_coordinator(&c, &tid5).await.unwrap();
    let conn = c.connection(node).await.unwrap();
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(tid5.clone())))
        .with_v3_and_below_producer_id(ProducerId(f5.producer_id))
        .with_v3_and_below_producer_epoch(f5.producer_epoch)
        .with_v3_and_below_topics(vec![
            kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(vec![0]),
        ]);
    let r = conn
        .send_versioned(&add, 3, conn.request_timeout())
        .await
        .unwrap();
    let add_code = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    let end5 = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(tid5.clone())))
        .with_producer_id(ProducerId(f5.producer_id))
        .with_producer_epoch(f5.producer_epoch)
        .with_committed(false);
    let r5 = conn
        .send_versioned(&end5, 5, conn.request_timeout())
        .await
        .unwrap();
    println!(
        "d: EndTxn v5 after AddPartitionsToTxn v3 (code {add_code}): error {}, returned producer {} epoch {} (acquired epoch {})",
        r5.error_code, r5.producer_id.0, r5.producer_epoch, f5.producer_epoch
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "d: describe-producers after the v5 abort:\n{}",
        describe_producers(&bed.destination, &topic, 0)
    );
}

/// A single-broker cluster of this test's own where producer ids and
/// transactional ids both expire after `expiration_ms`, checked every
/// `check_ms`.
fn expiry_cluster(expiration_ms: u64, check_ms: u64) -> OwnCluster {
    OwnCluster::start(&[
        format!("producer.id.expiration.ms={expiration_ms}"),
        format!("producer.id.expiration.check.interval.ms={check_ms}"),
        format!("transactional.id.expiration.ms={expiration_ms}"),
        format!("transaction.remove.expired.transaction.cleanup.interval.ms={check_ms}"),
    ])
}

/// (e) Producer-state expiry. Partition leaders forget a producer id
/// `producer.id.expiration.ms` after the timestamp of its last batch or
/// marker there; a zombie's stale epoch is then accepted again. Fencing an
/// idle partition again before that keeps the zombie out. And the clock is
/// the batch's own timestamp: a batch with an old CreateTime (as mirrored
/// records carry) lets the state expire at the next check. Last, a
/// transactional id without transactional activity for
/// `transactional.id.expiration.ms` expires at the coordinator: the next
/// acquire gets a new producer id, whose markers fence nothing of the old
/// one, though its owner kept writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_expiry_lets_a_zombie_back_unless_refenced() {
    const EXPIRATION_MS: u64 = 8000;
    let cluster = expiry_cluster(EXPIRATION_MS, 500);
    let bs = cluster.bootstrap.clone();
    let c = client(&bs).await;
    let admin = Admin::new(c.clone());
    let topic = unique("fence-e");
    create(&admin, &topic, 4, &[]).await;
    let tid = unique("tid-e");
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new(&topic, p)).collect();

    // X owns p3 under a transactional id of its own and keeps writing it.
    let tid_x = unique("tid-x");
    let x1 = acquire(&c, &tid_x, TXN_TIMEOUT, &[]).await.unwrap();
    fence_partitions(&c, &x1, &[TopicPartition::new(&topic, 3)])
        .await
        .unwrap();
    let px1 = IdempotentProducer::under_fence(c.clone(), &x1);
    let x1p3 = px1.partition(&topic, 3).unwrap();

    let a: ProducerFence = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    let b = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    fence_partitions(&c, &b, &tps).await.unwrap();
    let fenced_at = Instant::now();
    // p2: B writes one batch stamped 2023-11-14, as a mirrored record may be.
    let pb = IdempotentProducer::under_fence(c.clone(), &b);
    let b2 = pb.partition(&topic, 2).unwrap();
    let old = b2
        .send(batch("B-old", 1, Some(1_700_000_000_000)))
        .await
        .unwrap()
        .await
        .unwrap();
    println!(
        "e: B epoch {} fenced p0..p2; its old-timestamp batch on p2 at offset {}",
        b.producer_epoch, old.base_offset
    );

    let pa = IdempotentProducer::under_fence(c.clone(), &a);
    // Right after the fence, A is out everywhere but (soon) p2.
    let a0 = pa.partition(&topic, 0).unwrap();
    assert_fenced(send(&a0, "A-early", 1).await, "e: A to p0 at once");
    a0.close().await;

    // No Kafka tool here (a JVM start each): B's transactional id expires
    // EXPIRATION_MS after its fence unless re-fenced, and a loaded machine
    // can spend that starting a JVM (CI saw InvalidProducerIdMapping at
    // the first re-fence below).
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let a2 = pa.partition(&topic, 2).unwrap();
    let r2 = send(&a2, "A-p2", 1).await;
    println!(
        "e: A (epoch {}) to p2, 2 s after B's old-timestamp batch: {r2:?}",
        a.producer_epoch
    );
    assert!(
        r2.is_ok(),
        "the old timestamp made p2's state expire at once"
    );

    // p1 stays fenced: B fences it again every EXPIRATION_MS / 2.
    let mut refences = 0;
    let deadline = fenced_at + Duration::from_millis(EXPIRATION_MS + 2500);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(EXPIRATION_MS / 2)).await;
        fence_partitions(&c, &b, &tps[1..2]).await.unwrap();
        refences += 1;
        send(&x1p3, "X1", 1).await.expect("X keeps writing p3");
    }
    println!(
        "e: {:?} after the fence ({refences} re-fences of p1); ends p0 {} p1 {}",
        fenced_at.elapsed(),
        end(&admin, &topic, 0).await,
        end(&admin, &topic, 1).await
    );
    // Kafka's tool (a JVM start each) runs only after the checks: the
    // checks race the broker's expiry of B's state, 8 s after its last
    // re-fence, and a loaded machine can spend that starting JVMs.
    let a0 = pa.partition(&topic, 0).unwrap();
    let r0 = send(&a0, "A-p0-late", 1).await;
    println!("e: A to idle p0 after expiry: {r0:?}");
    assert!(
        r0.is_ok(),
        "p0's producer state expired: the stale epoch is accepted"
    );
    let a1 = pa.partition(&topic, 1).unwrap();
    assert_fenced(send(&a1, "A-p1-late", 1).await, "e: A to re-fenced p1");
    assert_eq!(
        end(&admin, &topic, 1).await,
        1 + refences,
        "p1 holds only markers"
    );

    // X's transactional id saw no transaction since its fence.
    let x2 = acquire(&c, &tid_x, TXN_TIMEOUT, &[]).await.unwrap();
    fence_partitions(&c, &x2, &[TopicPartition::new(&topic, 3)])
        .await
        .unwrap();
    println!(
        "e: {tid_x}: first owner producer {} epoch {}, after {:?} without transactions the next acquire gives producer {} epoch {}",
        x1.producer_id, x1.producer_epoch, fenced_at.elapsed(), x2.producer_id, x2.producer_epoch
    );
    let rx = send(&x1p3, "X1-zombie", 1).await;
    println!("e: the first owner of {tid_x} writes p3 after the new owner's fence: {rx:?}");
    assert_ne!(
        x2.producer_id, x1.producer_id,
        "the expired id got a new producer id"
    );
    assert!(
        rx.is_ok(),
        "a marker of a new producer id fences nothing of the old one"
    );

    // B's id, kept busy by its re-fences, did not expire.
    let b2 = acquire(&c, &tid, TXN_TIMEOUT, &[]).await.unwrap();
    println!(
        "e: {tid} (re-fenced every {} ms): next acquire gives producer {} epoch {}",
        EXPIRATION_MS / 2,
        b2.producer_id,
        b2.producer_epoch
    );
    assert_eq!(
        (b2.producer_id, b2.producer_epoch),
        (b.producer_id, b.producer_epoch + 1)
    );
    for p in [0, 1, 3] {
        println!("e: p{p}:\n{}", describe_producers(&bs, &topic, p));
    }
}
