//! The data path of a clustered node on a fenced destination, against
//! real Kafka: `KafkaCluster::fenced` writes each destination partition
//! under its own transactional id; a node taking the partition over
//! (`DestinationCluster::fence`) makes the brokers refuse the old owner's
//! sink, and the old owner cannot take it back by reopening its sink
//! (`fence::renew` is refused where `acquire` would have stolen it). The
//! test prints every batch of the destination partition: base offset,
//! producer id, epoch, marker or data.

mod protocol_common;

use std::time::Duration;

use bytes::Bytes;
use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::cluster::{DestinationCluster, PartitionSink};
use kmirror_actors::kafka::admin::Admin;
use kmirror_actors::kafka::batch::{encode_batch, Codec, OutgoingBatch, Record, SourceOffsets};
use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};
use kmirror_actors::kafka::KafkaError;
use kmirror_tests::{bed, kafka_tool_ok, unique};
use protocol_common::*;

fn batch(tag: &str, n: usize) -> OutgoingBatch {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let records: Vec<Record> = (0..n)
        .map(|j| Record {
            offset_delta: j as i32,
            timestamp: now,
            key: Some(Bytes::from(format!("{tag}-{j}"))),
            value: Some(Bytes::from(format!("{tag}-{j}"))),
            headers: vec![],
        })
        .collect();
    OutgoingBatch {
        bytes: encode_batch(&records, Codec::None).unwrap(),
        record_count: n as i32,
        source_offsets: SourceOffsets::Range {
            first: 0,
            last: n as i64 - 1,
        },
    }
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
