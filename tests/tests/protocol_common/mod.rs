//! Helpers shared by the `protocol_*` tests: clients on the bed, and a
//! minimal fetch → forward loop over the protocol layer.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use kmirror_actors::kafka::admin::{Admin, NewTopic};
use kmirror_actors::kafka::batch::{classify, prepare, BatchAction};
use kmirror_actors::kafka::fetch::{FetchOptions, FetchSession, TopicPartition};
use kmirror_actors::kafka::produce::{IdempotentProducer, ProduceAck};
use kmirror_actors::kafka::{ClientConfig, KafkaClient};

pub async fn client(bootstrap: &str) -> KafkaClient {
    KafkaClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .unwrap_or_else(|e| panic!("connect {bootstrap}: {e}"))
}

pub async fn create(admin: &Admin, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let r = admin
        .create_topics(
            &[NewTopic {
                name: topic.to_owned(),
                partitions,
                replication_factor: 1,
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }],
            false,
        )
        .await
        .expect("CreateTopics");
    r[0].1
        .as_ref()
        .unwrap_or_else(|e| panic!("create {topic}: {e}"));
    wait_fetchable(admin.client(), topic, partitions).await;
}

/// Right after creation a broker can answer NOT_LEADER_OR_FOLLOWER or
/// UNKNOWN_LEADER_EPOCH for a moment (its metadata cache is ahead of its
/// replica manager); wait until every partition serves a fetch, as a
/// mirror's retry loop would.
pub async fn wait_fetchable(c: &KafkaClient, topic: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for p in 0..partitions {
        loop {
            let (leader, epoch) = c.leader(topic, p).await.expect("leader");
            let opts = FetchOptions {
                max_wait: Duration::ZERO,
                incremental: false,
                ..Default::default()
            };
            let mut s = FetchSession::new(c.clone(), leader, opts);
            s.add(TopicPartition::new(topic, p), 0, epoch, uuid::Uuid::nil());
            let ok = match s.fetch().await {
                Ok(r) => r.len() == 1 && r[0].1.is_ok(),
                Err(_) => false,
            };
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}-{p} never became fetchable"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Statistics of one forwarding run.
#[derive(Debug, Default)]
pub struct ForwardStats {
    pub batches_in: usize,
    pub passed_through: usize,
    pub reencoded: usize,
    pub dropped: usize,
    pub records: i64,
    pub bytes: usize,
    pub acks: Vec<ProduceAck>,
}

/// Fetches `topic`-`partition` from `src` starting at 0 until `end_offset`
/// and forwards it to the same partition of `dst` through `producer`.
pub async fn forward_partition(
    src: &KafkaClient,
    producer: &IdempotentProducer,
    topic: &str,
    partition: i32,
    end_offset: i64,
    max_message_bytes: usize,
) -> ForwardStats {
    let (leader, epoch) = src.leader(topic, partition).await.expect("source leader");
    let mut session = FetchSession::new(src.clone(), leader, FetchOptions::default());
    let tp = TopicPartition::new(topic, partition);
    session.add(tp.clone(), 0, epoch, uuid::Uuid::nil());
    let pp = producer
        .partition(topic, partition)
        .expect("partition producer");
    let mut stats = ForwardStats::default();
    let mut tickets = std::collections::VecDeque::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut position = 0;
    while position < end_offset {
        assert!(
            Instant::now() < deadline,
            "forwarding {topic} timed out at {position}"
        );
        for (tp, r) in session.fetch().await.expect("fetch") {
            let data = match r {
                Ok(d) => d,
                // Transient right after topic creation; re-add, as a mirror would.
                Err(kmirror_actors::kafka::fetch::FetchError::LeaderChanged { offset, .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let (_, epoch) = src.leader(topic, partition).await.expect("leader");
                    session.add(tp, offset, epoch, uuid::Uuid::nil());
                    continue;
                }
                Err(e) => panic!("fetch {topic}-{partition}: {e}"),
            };
            let mut aborted = data.aborted();
            for b in data.batches() {
                let b = b.expect("valid batch");
                assert!(b.verify_crc(), "source batch CRC");
                stats.batches_in += 1;
                let ab = aborted.is_aborted(&b).expect("control batch");
                let action = classify(&b, ab, max_message_bytes, position);
                match action {
                    BatchAction::PassThrough => stats.passed_through += 1,
                    BatchAction::Reencode(_) => stats.reencoded += 1,
                    BatchAction::Drop(_) => stats.dropped += 1,
                }
                for out in prepare(&b, action, max_message_bytes, position).expect("prepare") {
                    stats.records += out.record_count as i64;
                    stats.bytes += out.len();
                    tickets.push_back(pp.send(out).await.expect("send"));
                    while tickets.len() > 8 {
                        stats
                            .acks
                            .push(tickets.pop_front().unwrap().await.expect("ack"));
                    }
                }
                position = b.next_offset();
            }
        }
    }
    while let Some(t) = tickets.pop_front() {
        stats.acks.push(t.await.expect("ack"));
    }
    stats
}

/// Every record of a partition from offset 0 to `end` (exclusive), decoded
/// with the layer's own codec (exact bytes, `None` for nulls), with its offset.
pub async fn read_all(
    client: &KafkaClient,
    topic: &str,
    partition: i32,
    end: i64,
) -> Vec<(i64, kmirror_actors::kafka::batch::Record)> {
    let (leader, epoch) = client.leader(topic, partition).await.unwrap();
    let mut s = FetchSession::new(client.clone(), leader, FetchOptions::default());
    s.add(
        TopicPartition::new(topic, partition),
        0,
        epoch,
        uuid::Uuid::nil(),
    );
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.position(&TopicPartition::new(topic, partition)).unwrap() < end {
        assert!(Instant::now() < deadline, "read_all {topic} timed out");
        for (tp, r) in s.fetch().await.unwrap() {
            let data = match r {
                Ok(d) => d,
                Err(kmirror_actors::kafka::fetch::FetchError::LeaderChanged { offset, .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    s.add(tp, offset, epoch, uuid::Uuid::nil());
                    continue;
                }
                Err(e) => panic!("fetch {topic}-{partition}: {e}"),
            };
            for b in data.batches() {
                let b = b.unwrap();
                assert!(b.verify_crc());
                if b.is_control() {
                    continue;
                }
                for r in kmirror_actors::kafka::batch::decode_records(&b)
                    .unwrap()
                    .records
                {
                    out.push((b.base_offset() + r.offset_delta as i64, r));
                }
            }
        }
    }
    out
}

/// One partition's producer states as its leader holds them
/// (DescribeProducers). Kafka's `kafka-transactions describe-producers`
/// says the same, but its JVM start can outlast a short
/// `producer.id.expiration.ms` on a loaded machine, so a check that races
/// the broker's expiry reads them here and prints the tool's view after.
pub async fn producer_states(
    c: &KafkaClient,
    topic: &str,
    partition: i32,
) -> Vec<kafka_protocol::messages::describe_producers_response::ProducerState> {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{DescribeProducersRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let (leader, _) = c.leader(topic, partition).await.expect("leader");
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
        .with_partition_indexes(vec![partition])]);
    let r = c.send_to(leader, &req).await.expect("DescribeProducers");
    let p = r
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == partition)
        .expect("the partition asked for");
    assert_eq!(
        p.error_code, 0,
        "DescribeProducers {topic}-{partition}: {p:?}"
    );
    p.active_producers
}
