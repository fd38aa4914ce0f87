//! The dispatcher of one broker lane, shared by every producer of a
//! cluster ([`super::ProduceLanes`]).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{mpsc, oneshot};

use crate::kafka::batch::whole;
use crate::kafka::client::KafkaClient;
use crate::kafka::error::{KafkaError, Result};

/// The broker's deduplication window; also our in-flight limit per partition.
pub const MAX_IN_FLIGHT: usize = 5;

/// Largest Produce request the dispatcher builds by coalescing partitions
/// (the broker's `socket.request.max.bytes` defaults to 100 MiB).
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

pub(super) type PartitionResult = Result<PartitionProduceResponse>;

/// What the lanes put on the wire ([`super::ProducerStats`]).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) bytes: AtomicU64,
}

/// One partition's batch on its way into a (possibly shared) Produce request.
#[derive(Debug)]
pub(super) struct Submission {
    pub(super) topic: Arc<str>,
    pub(super) topic_id: uuid::Uuid,
    pub(super) partition: i32,
    /// The stamped batch as its producer holds it ([`super::Job`]): joined
    /// only when the request is encoded.
    pub(super) head: Bytes,
    pub(super) tail: Bytes,
    pub(super) reply: oneshot::Sender<PartitionResult>,
}

impl Submission {
    fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }
}

/// One partition's batch in a request to be built: topic, topic id,
/// partition, and the batch's head and tail.
type Part = (Arc<str>, uuid::Uuid, i32, Bytes, Bytes);

/// The Produce request for `parts`, built when the connection's writer gets
/// to it ([`crate::kafka::BrokerConnection::submit_later`]).
fn produce_request(parts: Vec<Part>, timeout_ms: i32) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (topic, topic_id, partition, head, tail) in parts {
        let data = PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(whole(&head, &tail)));
        match topics.iter_mut().find(|t| t.name.0.as_str() == &*topic) {
            Some(t) => t.partition_data.push(data),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_topic_id(topic_id)
                    .with_partition_data(vec![data]),
            ),
        }
    }
    ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(topics)
}

/// Per-broker-lane loop that coalesces the batches of many partitions into one
/// Produce request ("many partitions per request", as the broker allows only
/// one batch per partition per request) without waiting for more: it takes
/// what is queued right now up to the size limit (a partition's later batches
/// wait for the next request), and puts requests on the socket in arrival order,
/// which keeps every partition's sequences in order.
pub(super) async fn dispatch_loop(
    client: KafkaClient,
    node: i32,
    lane: u8,
    mut rx: mpsc::Receiver<Submission>,
    stats: Arc<Counters>,
) {
    // A partition's later batches (a driver submits its five in a row) wait
    // for the next request, in order, holding back no other partition's.
    let mut carry: VecDeque<Submission> = VecDeque::new();
    // At most MAX_IN_FLIGHT requests outstanding on the connection (the
    // broker handles one request per connection at a time anyway); while
    // they are, new submissions queue up and go out together in the next
    // request. Idle, a batch goes out at once: no linger.
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let first = match carry.pop_front() {
            Some(s) => s,
            None => match rx.recv().await {
                Some(s) => s,
                None => return,
            },
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let mut size = first.len();
        // The partitions in this request: thousands of submissions can be
        // queued, so a look-up, not a scan of the request.
        let mut included: HashSet<(Arc<str>, i32)> = HashSet::new();
        included.insert((first.topic.clone(), first.partition));
        let mut subs = vec![first];
        let mut later = VecDeque::new();
        while size < MAX_REQUEST_BYTES {
            let Some(s) = carry.pop_front().or_else(|| rx.try_recv().ok()) else {
                break;
            };
            if !included.insert((s.topic.clone(), s.partition)) {
                later.push_back(s);
                continue;
            }
            size += s.len();
            subs.push(s);
        }
        later.append(&mut carry);
        carry = later;
        let conn = match client.lane_connection(node, lane).await {
            Ok(c) => c,
            Err(e) => {
                fail_submissions(subs, &e);
                continue;
            }
        };
        let mut version = match conn.version::<ProduceRequest>() {
            Ok(v) => v,
            Err(e) => {
                fail_submissions(subs, &e);
                continue;
            }
        };
        if subs.iter().any(|s| s.topic_id.is_nil()) {
            version = version.min(12);
        }
        let timeout = conn.request_timeout();
        // The batches move into the request, built and encoded when the
        // writer gets to it; `subs` keep only where the answers go.
        let parts: Vec<Part> = subs
            .iter_mut()
            .map(|s| {
                (
                    s.topic.clone(),
                    s.topic_id,
                    s.partition,
                    std::mem::take(&mut s.head),
                    std::mem::take(&mut s.tail),
                )
            })
            .collect();
        let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let build = move || produce_request(parts, timeout_ms);
        match conn.submit_later(build, version, timeout).await {
            Ok(pending) => {
                stats.requests.fetch_add(1, Ordering::Relaxed);
                stats
                    .batches
                    .fetch_add(subs.len() as u64, Ordering::Relaxed);
                stats.bytes.fetch_add(size as u64, Ordering::Relaxed);
                tokio::spawn(async move {
                    let _permit = permit;
                    match pending.wait().await {
                        Ok(resp) => {
                            let by_id = version >= 13;
                            let mut results: Vec<(
                                Option<String>,
                                uuid::Uuid,
                                PartitionProduceResponse,
                            )> = Vec::new();
                            for t in resp.responses {
                                let name = (!by_id).then(|| t.name.0.to_string());
                                for p in t.partition_responses {
                                    results.push((name.clone(), t.topic_id, p));
                                }
                            }
                            for s in subs {
                                let pos = results.iter().position(|(name, id, p)| {
                                    p.index == s.partition
                                        && match name {
                                            Some(n) => n.as_str() == &*s.topic,
                                            None => *id == s.topic_id,
                                        }
                                });
                                let r = match pos {
                                    Some(i) => Ok(results.swap_remove(i).2),
                                    None => Err(KafkaError::Protocol(format!(
                                        "produce response without {}-{}",
                                        s.topic, s.partition
                                    ))),
                                };
                                let _ = s.reply.send(r);
                            }
                        }
                        Err(e) => fail_submissions(subs, &e),
                    }
                });
            }
            Err(e) => fail_submissions(subs, &e),
        }
    }
}

fn fail_submissions(subs: Vec<Submission>, e: &KafkaError) {
    for s in subs {
        let _ = s.reply.send(Err(e.duplicate()));
    }
}
