//! The idempotent producer: our own producer id and epoch (InitProducerId,
//! or an acquired [`ProducerFence`]),
//! our own sequence per partition, acks=all, up to 5 batches in flight per
//! partition with order kept, and retries that never duplicate.
//!
//! Why this shape: the broker deduplicates a retried batch only if it has the
//! same producer id, epoch and *exactly the same sequence range* as one of the
//! last 5 batches it appended for that partition (`ProducerStateEntry`,
//! `NUM_BATCHES_TO_RETAIN = 5`). So a batch's bytes are stamped with its
//! sequence once and re-sent unchanged on every retry; at most 5 are ever
//! unacknowledged; and when one fails, it and everything after it are re-sent
//! in order. A duplicate comes back as success with the offset of the first
//! copy, so the caller's offset map stays exact.
//!
//! The batches of many partitions bound for one broker share Produce
//! requests, over [`PRODUCE_LANES`] connections per broker.
//!
//! Each [`PartitionProducer`] is a small tokio task fed by a bounded channel:
//! [`PartitionProducer::send`] waits when the pipeline is full, which is the
//! back-pressure the fetch side needs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use tokio::sync::{mpsc, oneshot};

pub use self::dispatch::MAX_IN_FLIGHT;
use self::dispatch::{dispatch_loop, Counters, PartitionResult, Submission};

use super::batch::{OutgoingBatch, SourceOffsets};
use super::client::KafkaClient;
use super::error::{KafkaError, ResponseError, Result};
use super::fence::ProducerFence;
use super::fetch::TopicPartition;
use super::lease::{Lease, LeaseTicket};

/// What the destination said about one produced batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceAck {
    /// Destination offset of the batch's first record.
    pub base_offset: i64,
    /// Number of records.
    pub record_count: i32,
    /// Source offsets of the records (from the [`OutgoingBatch`]).
    pub source_offsets: SourceOffsets,
    /// Broker append time if the destination topic uses LogAppendTime, else -1.
    pub log_append_time: i64,
    /// Destination log start offset.
    pub log_start_offset: i64,
    /// Sequence we gave the batch.
    pub base_sequence: i32,
}

/// An idempotent producer on one destination cluster. Create one
/// [`PartitionProducer`] per destination partition from it.
#[derive(Debug, Clone)]
pub struct IdempotentProducer {
    client: KafkaClient,
    producer_id: i64,
    producer_epoch: i16,
    /// Set when running under a [`ProducerFence`]: an epoch error then
    /// means lost ownership ([`KafkaError::Fenced`]), not a broken producer.
    fence: Option<Arc<str>>,
    /// Set: nothing is sent without it (see [`Lease`]).
    lease: Option<LeaseTicket>,
    active: Arc<Mutex<HashSet<TopicPartition>>>,
    lanes: ProduceLanes,
}

/// A client's dispatchers by (broker, lane) and lane round robin, for all its producers
/// ([`IdempotentProducer::sharing`]; their own were a task and channel each, 5 KB idle).
#[derive(Debug, Clone, Default)]
pub struct ProduceLanes {
    dispatchers: Arc<Mutex<Dispatchers>>,
    placed: Arc<AtomicU64>,
    stats: Arc<Counters>,
}

/// The dispatcher of each (broker, lane).
type Dispatchers = HashMap<(i32, u8), mpsc::Sender<Submission>>;

/// Connections (each with its own dispatcher) a producer writes a
/// destination broker through, its partitions placed round robin and kept
/// there. A broker reads one request per connection at a time, so with one
/// connection every append of every partition waits in one line; two let
/// the broker append two requests at once while each partition's batches
/// still travel one connection, in order.
pub const PRODUCE_LANES: u8 = 2;

/// A snapshot of [`IdempotentProducer::stats`], what was put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStats {
    /// Produce requests sent (retries included).
    pub requests: u64,
    /// Batches sent (retries included).
    pub batches: u64,
    /// Batch bytes sent.
    pub bytes: u64,
}

/// A lane's queue (a request carries what is queued); slots are made 32 at a time.
const DISPATCH_QUEUE: usize = 4096;

/// The stable head of a keyless refusal's explanation, which
/// [`is_keyless_refusal`] matches rather than the prose.
const KEYLESS_TAG: &str = "[KEYLESS_INTO_COMPACTED:";

/// A compacted destination's refusal of a record without a key (the broker's
/// `message`), with what an operator needs to know: the source took it
/// before its topic became compacted (Kafka checks keys at produce, not when
/// the policy changes), and an exact copy can neither drop nor key it. The
/// metadata sync reads it on the failed partition and holds the destination
/// topic (`kmirror_events::KEYLESS_HOLD`); the retry copies on.
pub(crate) fn keyless_refusal(message: &str) -> String {
    format!(
        "{message} {KEYLESS_TAG} the source topic holds records without a key from before \
         it became compacted, which a compacted destination refuses; kmirror holds the \
         destination topic at cleanup.policy=delete until they are copied]"
    )
}

/// Whether a partition's error is a compacted destination's refusal of a
/// record without a key, as [`IdempotentProducer`] words it.
pub fn is_keyless_refusal(error: &str) -> bool {
    error.contains(KEYLESS_TAG)
}

impl IdempotentProducer {
    /// The dispatcher task of `lane` to broker `node`, started on first use.
    fn dispatcher(&self, node: i32, lane: u8) -> mpsc::Sender<Submission> {
        let mut map = self.lanes.dispatchers.lock().unwrap();
        if let Some(tx) = map.get(&(node, lane)) {
            if !tx.is_closed() {
                return tx.clone();
            }
        }
        let (tx, rx) = mpsc::channel(DISPATCH_QUEUE);
        tokio::spawn(dispatch_loop(
            self.client.clone(),
            node,
            lane,
            rx,
            self.lanes.stats.clone(),
        ));
        map.insert((node, lane), tx.clone());
        tx
    }

    /// Gets a producer id and epoch from the destination (InitProducerId
    /// without a transactional id), retrying retriable errors.
    pub async fn new(client: KafkaClient) -> Result<Self> {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(i32::MAX)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let mut attempt = 0;
        loop {
            let resp = client.send_any(&req).await;
            let err = match resp {
                Ok(r) if r.error_code == 0 => {
                    return Ok(Self::with_id(
                        client,
                        r.producer_id.0,
                        r.producer_epoch,
                        None,
                    ))
                }
                Ok(r) => {
                    KafkaError::from_code(r.error_code, "InitProducerId", None).expect("non-zero")
                }
                Err(e) => e,
            };
            if !err.is_retriable() || attempt >= 10 {
                return Err(err);
            }
            tokio::time::sleep(client.retry_backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// A producer writing under an acquired [`ProducerFence`] instead of
    /// a fresh producer id: its batches stay idempotent and
    /// non-transactional, sequences start at 0 on every partition (the
    /// epoch is new there), and once a newer owner fences a partition,
    /// its produce fails with [`KafkaError::Fenced`].
    pub fn under_fence(client: KafkaClient, fence: &ProducerFence) -> Self {
        Self::with_id(
            client,
            fence.producer_id,
            fence.producer_epoch,
            Some(fence.transactional_id.clone()),
        )
    }

    fn with_id(
        client: KafkaClient,
        producer_id: i64,
        producer_epoch: i16,
        fence: Option<Arc<str>>,
    ) -> Self {
        IdempotentProducer {
            client,
            producer_id,
            producer_epoch,
            fence,
            lease: None,
            active: Arc::new(Mutex::new(HashSet::new())),
            lanes: ProduceLanes::default(),
        }
    }

    /// The producer, sending only under `lease`: a request (a retry too)
    /// waits while the lease has run out, and fails with
    /// [`KafkaError::Fenced`] once the member was out of the group since
    /// now, or if the lease is not renewed within the delivery timeout.
    pub fn leased(mut self, lease: &Lease) -> Self {
        self.lease = Some(lease.ticket());
        self
    }

    /// Writes through `lanes` (of the same client), not dispatchers of its own.
    pub fn sharing(self, lanes: &ProduceLanes) -> Self {
        let lanes = lanes.clone();
        IdempotentProducer { lanes, ..self }
    }

    /// `(producer id, epoch)`.
    pub fn id(&self) -> (i64, i16) {
        (self.producer_id, self.producer_epoch)
    }

    /// What all sharing its lanes put on the wire (`batches / requests`: coalescing).
    pub fn stats(&self) -> ProducerStats {
        let stats = &self.lanes.stats;
        ProducerStats {
            requests: stats.requests.load(Ordering::Relaxed),
            batches: stats.batches.load(Ordering::Relaxed),
            bytes: stats.bytes.load(Ordering::Relaxed),
        }
    }

    /// The client this producer writes through.
    pub fn client(&self) -> &KafkaClient {
        &self.client
    }

    /// A pipeline to one destination partition. Only one may exist per
    /// partition per producer (two would interleave sequences).
    pub fn partition(&self, topic: &str, partition: i32) -> Result<PartitionProducer> {
        let tp = TopicPartition::new(topic, partition);
        if !self.active.lock().unwrap().insert(tp.clone()) {
            return Err(KafkaError::ProducerFenced {
                partition: tp.to_string(),
                reason: "a PartitionProducer for this partition already exists".into(),
            });
        }
        let (tx, rx) = mpsc::channel(1);
        let placed = self.lanes.placed.fetch_add(1, Ordering::Relaxed);
        let lane = (placed % u64::from(PRODUCE_LANES)) as u8;
        let driver = Driver {
            lane,
            client: self.client.clone(),
            tp: tp.clone(),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            next_sequence: 0,
            producer: self.clone(),
            node: None,
            rx,
            queue: VecDeque::new(),
            sent: 0,
            failed: None,
            fenced: false,
            attempts: 0,
        };
        let task = tokio::spawn(driver.run());
        Ok(PartitionProducer { tp, tx, task })
    }
}

struct Job {
    /// The stamped batch: its head, and the records it shares with the
    /// fetched data (see [`OutgoingBatch`]); joined only into a request.
    head: Bytes,
    tail: Bytes,
    record_count: i32,
    base_sequence: i32,
    source_offsets: SourceOffsets,
    ack: oneshot::Sender<Result<ProduceAck>>,
    first_sent: Option<Instant>,
}

/// The ordered, pipelined producer for one destination partition. Dropping
/// it lets the driver finish the queued batches; the partition is free for a
/// new one only after that (use [`PartitionProducer::close`] to wait), since
/// two pipelines on one partition would interleave sequences.
#[derive(Debug)]
pub struct PartitionProducer {
    tp: TopicPartition,
    tx: mpsc::Sender<Queued>,
    task: tokio::task::JoinHandle<()>,
}

/// A batch on its way to a partition's driver, boxed: a tokio channel
/// allocates its first block of 32 slots when it is made, whatever its
/// capacity, so the unboxed pair (72 bytes) cost every open partition
/// 2.3 KB while idle.
type Queued = Box<(OutgoingBatch, oneshot::Sender<Result<ProduceAck>>)>;

/// Resolves to the outcome of one [`PartitionProducer::send`].
#[derive(Debug)]
pub struct ProduceTicket(oneshot::Receiver<Result<ProduceAck>>);

impl Future for ProduceTicket {
    type Output = Result<ProduceAck>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(KafkaError::Closed)))
    }
}

impl PartitionProducer {
    /// Queues a batch; waits while the pipeline is full (back-pressure).
    /// Acks arrive in send order. After a fatal error every later batch fails
    /// too and this producer must be replaced.
    pub async fn send(&self, batch: OutgoingBatch) -> Result<ProduceTicket> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Box::new((batch, tx)))
            .await
            .map_err(|_| KafkaError::Closed)?;
        Ok(ProduceTicket(rx))
    }

    /// Stops accepting batches, waits until every queued batch is acked or
    /// failed, and frees the partition for a new [`PartitionProducer`].
    pub async fn close(self) {
        let PartitionProducer { tx, task, .. } = self;
        drop(tx);
        let _ = task.await;
    }

    /// The destination partition.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }
}

type InFlight = Pin<Box<dyn Future<Output = PartitionResult> + Send>>;

struct Driver {
    client: KafkaClient,
    tp: TopicPartition,
    producer_id: i64,
    producer_epoch: i16,
    next_sequence: i32,
    rx: mpsc::Receiver<Queued>,
    /// Unacknowledged jobs in sequence order; the first `sent` are in flight.
    queue: VecDeque<Job>,
    sent: usize,
    /// Shared dispatchers live here; drivers find their broker's one.
    producer: IdempotentProducer,
    /// Leader node and destination topic id, until a leader error.
    node: Option<(i32, uuid::Uuid)>,
    /// The connection to the leader this partition's batches travel.
    lane: u8,
    failed: Option<String>,
    /// The failure was lost ownership: every later batch fails as fenced too.
    fenced: bool,
    attempts: u32,
}

enum Outcome {
    Ok(PartitionProduceResponse),
    Retry(KafkaError),
    Fatal(KafkaError),
}

impl Driver {
    /// Rare steps (leader lookup, lease wait, refresh) are boxed: the task lives long.
    async fn run(mut self) {
        self.pump().await;
        self.producer.active.lock().unwrap().remove(&self.tp);
    }

    async fn pump(&mut self) {
        let mut inflight: FuturesOrdered<InFlight> = FuturesOrdered::new();
        let mut closed = false;
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            if closed && self.queue.is_empty() {
                return;
            }
            // Fill the pipeline.
            if retry_at.is_none() {
                while self.sent < self.queue.len() && inflight.len() < MAX_IN_FLIGHT {
                    match self.request_future(self.sent).await {
                        Ok(f) => {
                            inflight.push_back(f);
                            self.sent += 1;
                        }
                        Err(e) => {
                            if e.is_retriable() || e.awaits_leader() {
                                retry_at = Some(self.schedule_retry(&e).await);
                            } else {
                                // What is at the broker may still land:
                                // its answers come first (and are let go,
                                // as after a fatal answer), so nothing can
                                // land once the failures are told.
                                while inflight.next().await.is_some() {}
                                self.fail_all(e);
                            }
                            break;
                        }
                    }
                }
            }
            let can_accept = !closed && self.queue.len() < MAX_IN_FLIGHT;
            tokio::select! {
                msg = self.rx.recv(), if can_accept => match msg {
                    None => closed = true,
                    Some(queued) => {
                        let (batch, ack) = *queued;
                        self.enqueue(batch, ack)
                    }
                },
                Some(res) = inflight.next(), if !inflight.is_empty() => {
                    self.sent -= 1;
                    match self.judge(res) {
                        Outcome::Ok(r) => self.ack_front(r),
                        Outcome::Retry(e) => {
                            // Everything after the failed batch is re-sent in
                            // order; late results of those are discarded (a
                            // success among them comes back again as a duplicate).
                            while inflight.next().await.is_some() {}
                            self.sent = 0;
                            if self.front_expired() {
                                self.fail_all(KafkaError::Timeout {
                                    api: "Produce",
                                    broker: format!("{} (delivery.timeout.ms; last error: {e})", self.tp),
                                    timeout: self.client.config().delivery_timeout,
                                });
                            } else {
                                retry_at = Some(self.schedule_retry(&e).await);
                            }
                        }
                        Outcome::Fatal(e) => {
                            while inflight.next().await.is_some() {}
                            self.sent = 0;
                            self.fail_all(e);
                        }
                    }
                },
                _ = async { tokio::time::sleep_until(retry_at.unwrap()).await }, if retry_at.is_some() => {
                    retry_at = None;
                }
            }
        }
    }

    fn enqueue(&mut self, mut batch: OutgoingBatch, ack: oneshot::Sender<Result<ProduceAck>>) {
        if let Some(reason) = &self.failed {
            let _ = ack.send(Err(self.after_failure(reason.clone())));
            return;
        }
        let seq = self.next_sequence;
        batch.stamp(self.producer_id, self.producer_epoch, seq);
        let OutgoingBatch {
            bytes,
            tail,
            record_count,
            source_offsets,
        } = batch;
        // Sequences wrap at i32::MAX like the broker's.
        self.next_sequence = ((seq as i64 + record_count as i64) % (i32::MAX as i64 + 1)) as i32;
        self.queue.push_back(Job {
            head: bytes.freeze(),
            tail,
            record_count,
            base_sequence: seq,
            source_offsets,
            ack,
            first_sent: None,
        });
    }

    async fn schedule_retry(&mut self, e: &KafkaError) -> tokio::time::Instant {
        tracing::debug!(partition = %self.tp, error = %e, attempt = self.attempts, "produce retry");
        if e.awaits_leader() {
            self.node = None;
            let topics = [self.tp.topic.to_string()];
            let _ = Box::pin(self.client.refresh_metadata(Some(&topics))).await;
        }
        let d = self.client.retry_backoff(self.attempts);
        self.attempts = self.attempts.saturating_add(1);
        tokio::time::Instant::now() + d
    }

    fn front_expired(&self) -> bool {
        self.queue
            .front()
            .and_then(|j| j.first_sent)
            .is_some_and(|t| t.elapsed() > self.client.config().delivery_timeout)
    }

    async fn request_future(&mut self, index: usize) -> Result<InFlight> {
        if self.node.is_none() {
            let (leader, _epoch) =
                Box::pin(self.client.leader(&self.tp.topic, self.tp.partition)).await?;
            let topic_id = self
                .client
                .metadata()
                .topic(&self.tp.topic)
                .map(|t| t.topic_id)
                .unwrap_or_default();
            self.node = Some((leader, topic_id));
        }
        let (node, topic_id) = self.node.expect("set above");
        if let Some(lease) = &self.producer.lease {
            if !Box::pin(lease.may_send(self.client.config().delivery_timeout)).await {
                return Err(KafkaError::Fenced {
                    resource: self.tp.to_string(),
                    reason: "this node's group lease ran out (no heartbeat accepted for a session timeout): another node may own the partition now".into(),
                });
            }
        }
        let job = &mut self.queue[index];
        job.first_sent.get_or_insert_with(Instant::now);
        let (reply, rx) = oneshot::channel();
        let submission = Submission {
            topic: self.tp.topic.clone(),
            topic_id,
            partition: self.tp.partition,
            head: job.head.clone(),
            tail: job.tail.clone(),
            reply,
        };
        // Queued to the broker's dispatcher now, in sequence order; it puts
        // requests on the socket in the order it receives them.
        self.producer
            .dispatcher(node, self.lane)
            .send(submission)
            .await
            .map_err(|_| KafkaError::Closed)?;
        let broker = format!("node {node}");
        Ok(Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(KafkaError::Disconnected {
                    broker,
                    reason: "produce dispatcher stopped".into(),
                })
            })
        }))
    }

    fn judge(&self, res: PartitionResult) -> Outcome {
        let r = match res {
            Ok(r) => r,
            Err(e) if e.is_retriable() => return Outcome::Retry(e),
            Err(e) => return Outcome::Fatal(e),
        };
        let Some(err) = ResponseError::try_from_code(r.error_code) else {
            return Outcome::Ok(r);
        };
        let message = r
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .or_else(|| {
                r.record_errors
                    .first()
                    .and_then(|e| e.batch_index_error_message.as_ref().map(|m| m.to_string()))
            })
            .map(|m| match err {
                ResponseError::InvalidRecord if m.contains("without key") => keyless_refusal(&m),
                _ => m,
            });
        let e = KafkaError::Broker {
            error: err,
            context: format!("Produce to {}", self.tp),
            message,
        };
        match err {
            // Older brokers report a retried duplicate this way; it was written.
            ResponseError::DuplicateSequenceNumber => Outcome::Ok(r),
            ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced
                if self.producer.fence.is_some() =>
            {
                Outcome::Fatal(KafkaError::Fenced {
                    resource: self.tp.to_string(),
                    reason: e.to_string(),
                })
            }
            ResponseError::OutOfOrderSequenceNumber
            | ResponseError::InvalidProducerEpoch
            | ResponseError::UnknownProducerId
            | ResponseError::ProducerFenced
            | ResponseError::InvalidProducerIdMapping => {
                Outcome::Fatal(KafkaError::ProducerFenced {
                    partition: self.tp.to_string(),
                    reason: e.to_string(),
                })
            }
            // CORRUPT_MESSAGE is "retriable" for Kafka clients but for us it is
            // a bug in what we built: do not loop on it.
            ResponseError::CorruptMessage => Outcome::Fatal(e),
            _ if err.is_retriable() => Outcome::Retry(e),
            _ => Outcome::Fatal(e),
        }
    }

    fn ack_front(&mut self, r: PartitionProduceResponse) {
        self.attempts = 0;
        let job = self
            .queue
            .pop_front()
            .expect("a response implies a queued job");
        let _ = job.ack.send(Ok(ProduceAck {
            base_offset: r.base_offset,
            record_count: job.record_count,
            source_offsets: job.source_offsets,
            log_append_time: r.log_append_time_ms,
            log_start_offset: r.log_start_offset,
            base_sequence: job.base_sequence,
        }));
    }

    fn fail_all(&mut self, e: KafkaError) {
        let reason = e.to_string();
        self.fenced = matches!(e, KafkaError::Fenced { .. });
        let mut first = Some(e);
        for job in std::mem::take(&mut self.queue) {
            let err = first.take().unwrap_or_else(|| {
                self.after_failure(format!("an earlier batch failed: {reason}"))
            });
            let _ = job.ack.send(Err(err));
        }
        self.sent = 0;
        self.failed = Some(reason);
    }

    /// The error of a batch behind a fatal failure.
    fn after_failure(&self, reason: String) -> KafkaError {
        if self.fenced {
            KafkaError::Fenced {
                resource: self.tp.to_string(),
                reason,
            }
        } else {
            KafkaError::ProducerFenced {
                partition: self.tp.to_string(),
                reason,
            }
        }
    }
}

mod dispatch;
#[cfg(test)]
mod tests;
