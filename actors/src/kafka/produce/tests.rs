//! The retry state machine against an in-process fake broker that keeps
//! producer state like Kafka (next expected sequence, last 5 batches for
//! duplicate detection) and fails scripted requests.

use super::*;
use crate::kafka::batch::{encode_batch, Codec, Record, RecordBatch};
use crate::kafka::config::ClientConfig;
use crate::kafka::fake_wire::{read_request, write_response};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::produce_response::TopicProduceResponse;
use kafka_protocol::messages::{
    ApiVersionsResponse, InitProducerIdResponse, MetadataResponse, ProduceRequest, ProduceResponse,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use std::sync::atomic::AtomicUsize;
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Log {
    end: i64,
    next_seq: i32,
    recent: VecDeque<(i32, i64)>,
}

struct Fake {
    port: u16,
    /// Error code for the n-th Produce request (0-based); absent = normal.
    script: HashMap<usize, i16>,
    /// Produce requests whose batch is appended but answered with a
    /// retriable error (the answer is "lost").
    lost: HashSet<usize>,
    /// Produce requests answered only after 300 ms.
    slow: HashSet<usize>,
    produces: AtomicUsize,
    /// InitProducerId calls: each gets a producer id of its own, from 1000.
    inits: AtomicUsize,
    /// The partition's producer state, per producer id.
    logs: Mutex<HashMap<i64, Log>>,
}

impl Fake {
    /// The log end as producer `id`'s batches made it.
    fn end(&self, id: i64) -> i64 {
        self.logs.lock().unwrap().get(&id).map_or(0, |l| l.end)
    }
}

async fn serve(fake: Arc<Fake>, mut s: TcpStream) {
    while let Some((h, mut f)) = read_request(&mut s).await {
        let (corr, v) = (h.correlation_id, h.request_api_version);
        match h.request_api_key {
            18 => {
                let keys = [(18, 0, 3), (3, 0, 8), (22, 0, 1), (0, 3, 8)];
                let r = ApiVersionsResponse::default().with_api_keys(
                    keys.iter()
                        .map(|&(k, lo, hi)| {
                            ApiVersion::default()
                                .with_api_key(k)
                                .with_min_version(lo)
                                .with_max_version(hi)
                        })
                        .collect(),
                );
                write_response(&mut s, corr, &r, 0).await;
            }
            3 => {
                let r = MetadataResponse::default()
                    .with_cluster_id(Some(StrBytes::from_static_str("fake")))
                    .with_controller_id(1.into())
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(1.into())
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(fake.port as i32)])
                    .with_topics(vec![MetadataResponseTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                        .with_partitions(vec![MetadataResponsePartition::default()
                            .with_partition_index(0)
                            .with_leader_id(1.into())
                            .with_replica_nodes(vec![1.into()])
                            .with_isr_nodes(vec![1.into()])])]);
                write_response(&mut s, corr, &r, v).await;
            }
            22 => {
                let r = InitProducerIdResponse::default()
                    .with_producer_id(
                        (1000 + fake.inits.fetch_add(1, Ordering::SeqCst) as i64).into(),
                    )
                    .with_producer_epoch(0);
                write_response(&mut s, corr, &r, v).await;
            }
            0 => {
                let req = ProduceRequest::decode(&mut f, v).unwrap();
                let n = fake.produces.fetch_add(1, Ordering::SeqCst);
                let mut parts = Vec::new();
                for t in &req.topic_data {
                    for p in &t.partition_data {
                        let b = RecordBatch::new(p.records.clone().unwrap()).unwrap();
                        assert!(b.verify_crc());
                        assert!(b.producer_id() >= 1000);
                        let mut resp = PartitionProduceResponse::default().with_index(p.index);
                        let mut logs = fake.logs.lock().unwrap();
                        let log = logs.entry(b.producer_id()).or_default();
                        let seq = b.base_sequence();
                        if let Some(&code) = fake.script.get(&n) {
                            resp.error_code = code;
                            resp.base_offset = -1;
                        } else if seq == log.next_seq {
                            resp.base_offset = log.end;
                            let end = log.end;
                            log.recent.push_back((seq, end));
                            if log.recent.len() > 5 {
                                log.recent.pop_front();
                            }
                            log.end += b.record_count() as i64;
                            log.next_seq += b.record_count();
                            if fake.lost.contains(&n) {
                                resp.error_code =
                                    ResponseError::NotEnoughReplicasAfterAppend.code();
                                resp.base_offset = -1;
                            }
                        } else if let Some(&(_, off)) = log.recent.iter().find(|(s, _)| *s == seq) {
                            resp.base_offset = off; // duplicate: the first copy's offset
                        } else {
                            resp.error_code = ResponseError::OutOfOrderSequenceNumber.code();
                            resp.base_offset = -1;
                        }
                        parts.push(resp);
                    }
                }
                if fake.slow.contains(&n) {
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
                let r =
                    ProduceResponse::default()
                        .with_responses(vec![TopicProduceResponse::default()
                            .with_name(TopicName(StrBytes::from_static_str("t")))
                            .with_partition_responses(parts)]);
                write_response(&mut s, corr, &r, v).await;
            }
            k => panic!("fake broker: unexpected api {k}"),
        }
    }
}

async fn start(script: &[(usize, i16)]) -> (Arc<Fake>, KafkaClient) {
    start_with(script, &[]).await
}

async fn start_with(script: &[(usize, i16)], lost: &[usize]) -> (Arc<Fake>, KafkaClient) {
    start_slow(script, lost, &[]).await
}

async fn start_slow(
    script: &[(usize, i16)],
    lost: &[usize],
    slow: &[usize],
) -> (Arc<Fake>, KafkaClient) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let fake = Arc::new(Fake {
        port,
        script: script.iter().copied().collect(),
        lost: lost.iter().copied().collect(),
        slow: slow.iter().copied().collect(),
        produces: AtomicUsize::new(0),
        inits: AtomicUsize::new(0),
        logs: Mutex::new(HashMap::new()),
    });
    let f = fake.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(f.clone(), s));
        }
    });
    let cfg = ClientConfig {
        retry_backoff: std::time::Duration::from_millis(5),
        ..ClientConfig::plaintext(&format!("127.0.0.1:{port}"))
    };
    (fake, KafkaClient::connect(cfg).await.unwrap())
}

fn batch(i: i32) -> OutgoingBatch {
    let recs: Vec<Record> = (0..10)
        .map(|j| Record {
            offset_delta: j,
            timestamp: 1,
            key: Some(Bytes::from(format!("{i}-{j}"))),
            value: None,
            headers: vec![],
        })
        .collect();
    OutgoingBatch::new(
        encode_batch(&recs, Codec::None).unwrap(),
        10,
        SourceOffsets::Range {
            first: i as i64 * 10,
            last: i as i64 * 10 + 9,
        },
    )
}

async fn send_five(pp: &PartitionProducer, from: i32) -> Vec<Result<ProduceAck>> {
    let mut tickets = Vec::new();
    for i in from..from + 5 {
        tickets.push(pp.send(batch(i)).await.unwrap());
    }
    let mut out = Vec::new();
    for t in tickets {
        out.push(t.await);
    }
    out
}

#[tokio::test]
async fn retriable_error_resends_in_order_without_duplicates() {
    // Request 0 (the head) fails NOT_LEADER_OR_FOLLOWER; requests 1..4
    // then see a sequence gap (OUT_OF_ORDER) — all are re-sent in order.
    let (fake, client) = start(&[(0, ResponseError::NotLeaderOrFollower.code())]).await;
    let p = IdempotentProducer::new(client).await.unwrap();
    let pp = p.partition("t", 0).unwrap();
    let acks = send_five(&pp, 0).await;
    let offsets: Vec<i64> = acks.into_iter().map(|a| a.unwrap().base_offset).collect();
    assert_eq!(offsets, vec![0, 10, 20, 30, 40]);
    assert_eq!(fake.end(1000), 50, "each batch appended once");
    assert!(fake.produces.load(Ordering::SeqCst) > 5, "retried");
    // Two producers for one partition would interleave sequences.
    assert!(p.partition("t", 0).is_err());
    pp.close().await;
    assert!(p.partition("t", 0).is_ok(), "free again once closed");
}

#[tokio::test]
async fn lost_answer_is_deduplicated() {
    // Request 1's batch is appended but answered with a retriable error:
    // its retry (and the re-sends of the batches after it) are duplicates
    // the broker recognises, answered with the first copies' offsets.
    let (fake, client) = start_with(&[], &[1]).await;
    let p = IdempotentProducer::new(client).await.unwrap();
    let pp = p.partition("t", 0).unwrap();
    let acks = send_five(&pp, 0).await;
    let offsets: Vec<i64> = acks.into_iter().map(|a| a.unwrap().base_offset).collect();
    assert_eq!(offsets, vec![0, 10, 20, 30, 40]);
    assert_eq!(fake.end(1000), 50, "no batch appended twice");
    assert!(fake.produces.load(Ordering::SeqCst) > 5, "retried");
}

#[tokio::test]
async fn fatal_error_fails_head_and_everything_after() {
    // Request 2 (the third batch) is rejected as INVALID_RECORD.
    let (_fake, client) = start(&[(2, ResponseError::InvalidRecord.code())]).await;
    let p = IdempotentProducer::new(client).await.unwrap();
    let pp = p.partition("t", 0).unwrap();
    let acks = send_five(&pp, 0).await;
    assert_eq!(acks[0].as_ref().unwrap().base_offset, 0);
    assert_eq!(acks[1].as_ref().unwrap().base_offset, 10);
    assert_eq!(
        acks[2].as_ref().unwrap_err().response_error(),
        Some(ResponseError::InvalidRecord)
    );
    for a in &acks[3..] {
        assert!(matches!(a, Err(KafkaError::ProducerFenced { .. })), "{a:?}");
    }
    // The pipeline is dead: the caller must reconcile and start a new producer.
    let next = pp.send(batch(9)).await.unwrap().await;
    assert!(matches!(next, Err(KafkaError::ProducerFenced { .. })));
}

/// The lease runs out for good (the member was out of the group) while a
/// request is at the broker: the next batch is refused before it is sent,
/// and the one in flight is waited for before everything queued fails, so
/// that nothing can land once the failures are told (and a closed sink has
/// nothing left at the broker). Before, the queue failed at once: a sink
/// closed then ended with the request still in flight, and one left open
/// panicked when the late answer met the emptied queue.
#[tokio::test]
async fn a_lease_lost_with_a_request_in_flight_fails_the_queue_after_it() {
    let (fake, client) = start_slow(&[], &[], &[0]).await;
    let lease = Lease::default();
    lease.extend_to(std::time::Instant::now() + std::time::Duration::from_secs(30));
    let p = IdempotentProducer::new(client)
        .await
        .unwrap()
        .leased(&lease);
    let pp = p.partition("t", 0).unwrap();
    let sent = std::time::Instant::now();
    let first = pp.send(batch(0)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    lease.revoke();
    let second = pp.send(batch(1)).await.unwrap();
    let (first, second) = (first.await, second.await);
    assert!(
        sent.elapsed() >= std::time::Duration::from_millis(250),
        "failed only after the answer to the request in flight ({:?})",
        sent.elapsed()
    );
    assert!(matches!(first, Err(KafkaError::Fenced { .. })), "{first:?}");
    assert!(
        matches!(second, Err(KafkaError::Fenced { .. })),
        "{second:?}"
    );
    assert_eq!(
        fake.produces.load(Ordering::SeqCst),
        1,
        "the second never sent"
    );
    tokio::time::timeout(std::time::Duration::from_secs(5), pp.close())
        .await
        .expect("the driver ends");
}

/// A tokio channel allocates 32 slots when it is made, so what a partition's
/// driver channel holds is paid by every open partition, idle or not.
#[test]
fn a_partition_producer_channel_slot_is_one_pointer() {
    let unboxed = std::mem::size_of::<(OutgoingBatch, oneshot::Sender<Result<ProduceAck>>)>();
    let boxed = std::mem::size_of::<Queued>();
    println!(
        "produce queue slot: {boxed} B (32 slots {} B); unboxed {unboxed} B (32 slots {} B)",
        32 * boxed,
        32 * unboxed
    );
    assert_eq!(boxed, std::mem::size_of::<usize>());
}

/// A daemon opens a producer (a producer id of its own) per partition;
/// sharing the client's lanes, they write through one dispatcher per
/// broker lane — not a task and a channel each, every one on lane 0 — and
/// their partitions are spread over the lanes.
#[tokio::test]
async fn producers_sharing_lanes_share_one_dispatcher_per_broker_lane() {
    let (_fake, client) = start(&[]).await;
    let lanes = ProduceLanes::default();
    for _ in 0..4 {
        let p = IdempotentProducer::new(client.clone())
            .await
            .unwrap()
            .sharing(&lanes);
        let pp = p.partition("t", 0).unwrap();
        let ack = pp.send(batch(0)).await.unwrap().await;
        assert!(ack.is_ok(), "{ack:?}");
        pp.close().await;
    }
    let mut used: Vec<(i32, u8)> = lanes.dispatchers.lock().unwrap().keys().copied().collect();
    used.sort();
    assert_eq!(used, vec![(1, 0), (1, 1)]);
    let stats = IdempotentProducer::new(client)
        .await
        .unwrap()
        .sharing(&lanes)
        .stats();
    assert_eq!(stats.batches, 4, "the lanes count every producer's batches");
}
