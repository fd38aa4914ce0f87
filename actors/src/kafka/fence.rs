//! Broker-enforced fencing ("fence on acquire") for the clustered daemon.
//!
//! Membership alone is no fence: a paused process keeps writing until it
//! learns it is out. So each unit of work (a destination partition, a
//! state-topic partition) has a transactional id, and its owner writes
//! under that id's producer id and epoch. A new owner [`acquire`]s the id
//! (InitProducerId: the coordinator bumps the epoch and aborts any open
//! transaction of the old owner), then [`fence_partitions`] raises the
//! epoch the partition leaders hold by aborting an empty transaction over
//! the partitions it will write: one abort marker per partition, at the new
//! epoch. From then on a batch of the old owner fails with
//! INVALID_PRODUCER_EPOCH, which an [`IdempotentProducer`] built with
//! [`IdempotentProducer::under_fence`] reports as [`KafkaError::Fenced`].
//! The data itself stays idempotent and non-transactional, so consumers of
//! either isolation level read it at once and no transaction ever stays
//! open. Cost: one offset (the marker) per partition per unclean takeover.
//!
//! Why these request versions: a Kafka 4 broker runs transactions v2
//! (KIP-890) by default, and for v2 a client adds partitions only by
//! producing transactional batches, and EndTxn bumps the epoch once more at
//! its end. The broker takes the transaction version from the EndTxn
//! version (v5 and later are v2), so we send AddPartitionsToTxn at
//! [`ADD_PARTITIONS_VERSION`] (the last client version; v4 and later are
//! the brokers' own, batched, verify-only form) and EndTxn at most
//! [`END_TXN_MAX_VERSION`]: the abort markers then carry exactly the epoch
//! [`acquire`] returned. `tests/tests/fencing.rs` proves it on Kafka 4.1.
//!
//! A partition's producer state expires `producer.id.expiration.ms` after
//! the *timestamp* of the last batch or marker of that producer id; after
//! that the leader accepts any epoch again (an old CreateTime expires it at
//! the next check). And a transactional id without transactions for
//! `transactional.id.expiration.ms` expires: the next [`acquire`] gets a new
//! producer id, which fences nothing of the old one. An owner therefore
//! fences its partitions again well within both times.
//!
//! [`IdempotentProducer`]: super::produce::IdempotentProducer
//! [`IdempotentProducer::under_fence`]: super::produce::IdempotentProducer::under_fence

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest, FindCoordinatorRequest,
    InitProducerIdRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::client::KafkaClient;
use super::error::{KafkaError, ResponseError, Result};
use super::fetch::TopicPartition;

/// AddPartitionsToTxn version sent: the last one meant for clients.
pub const ADD_PARTITIONS_VERSION: i16 = 3;

/// Highest EndTxn version sent: v5 would make the transaction a v2 one,
/// whose end bumps the epoch past the one [`acquire`] returned.
pub const END_TXN_MAX_VERSION: i16 = 4;

/// A producer expiry below which idle partitions are fenced again so often
/// that an operator is told ([`KeepAlive::short_expiration_warning`]).
const SHORT_EXPIRATION: Duration = Duration::from_secs(3600);

/// FindCoordinator's key type for a transactional id.
const TRANSACTION_KEY_TYPE: i8 = 1;

/// Ownership of one unit of work: the producer id and epoch its
/// transactional id got at [`acquire`]. Data written under it is refused
/// once a later owner has acquired the id and fenced the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerFence {
    /// The unit's transactional id.
    pub transactional_id: Arc<str>,
    /// Stays the same across owners (until the coordinator rotates it when
    /// the epoch is exhausted, or the id expires).
    pub producer_id: i64,
    /// One higher per acquisition.
    pub producer_epoch: i16,
}

/// When an owner must fence a partition it holds again (see the module
/// doc): from the leader's `producer.id.expiration.ms` and
/// `producer.id.expiration.check.interval.ms`, read from the broker, not
/// assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAlive {
    /// The leader forgets the producer this long after the timestamp of
    /// its last batch or marker on the partition.
    pub expiration: Duration,
    /// How often the leader looks for producers to forget.
    pub check_interval: Duration,
    /// `transactional.id.expiration.ms`: the coordinator forgets the
    /// transactional id this long after its last transactional request
    /// (data produced under it does not count), and the next owner's
    /// acquire then gets a new producer id, which fences nothing of ours.
    pub transactional_expiration: Duration,
}

impl KeepAlive {
    /// The age of the partition's last timestamp at which its owner writes
    /// a fresh marker. The margin is not for the check interval (a producer
    /// goes at the first check at or after its expiry, never before) but for
    /// what makes us late: the marker's own round (bounded by minutes), the
    /// skew between our clock and the broker's, and a batch timestamped a
    /// little older than we think. Half the expiration at the least.
    pub fn refence_age(&self) -> Duration {
        self.before(self.expiration)
    }

    /// What an operator should hear when the leader forgets producers
    /// within an hour: every partition that copies nothing for
    /// [`Self::refence_age`] is fenced again, and each fence costs one
    /// destination offset (its marker, recorded as a hole) — an idle topic
    /// grows by a marker per partition that often. None for longer
    /// expirations (Kafka's default is a day).
    pub fn short_expiration_warning(&self) -> Option<String> {
        (self.expiration < SHORT_EXPIRATION).then(|| {
            format!(
                "producer.id.expiration.ms is {} s on this destination broker: each partition that copies nothing for {} s is fenced again, one destination offset (a marker) each time; Kafka's default is 86400000 (a day)",
                self.expiration.as_secs(),
                self.refence_age().as_secs()
            )
        })
    }

    /// How long after its last transactional request (the sink's
    /// InitProducerId, or a marker) a transactional id is fenced again,
    /// with the same margin.
    pub fn transaction_age(&self) -> Duration {
        self.before(self.transactional_expiration)
    }

    fn before(&self, expiration: Duration) -> Duration {
        let margin = (self.check_interval.max(Duration::from_secs(300)) + expiration / 10)
            .min(expiration / 2);
        expiration - margin
    }

    /// The least time between two markers on one partition. Mirrored
    /// batches with old timestamps make the state expire at the next check
    /// however recently we fenced, so a partition fed only old data would
    /// otherwise get a marker after every batch; one per check interval
    /// bounds the cost (one offset each) and leaves a zombie at most one
    /// check interval in which its batch could land.
    pub fn min_gap(&self) -> Duration {
        self.check_interval.max(Duration::from_secs(1))
    }

    /// Wall-clock milliseconds at which a partition is due for a marker:
    /// its last batch or marker is stamped `last_stamp_ms`, its id's last
    /// transactional request was at `last_transaction_ms`, and it was last
    /// re-fenced at `last_refence_ms`.
    pub fn due_ms(
        &self,
        last_stamp_ms: i64,
        last_transaction_ms: i64,
        last_refence_ms: i64,
    ) -> i64 {
        let by_age = last_stamp_ms.saturating_add(self.refence_age().as_millis() as i64);
        let by_id = last_transaction_ms.saturating_add(self.transaction_age().as_millis() as i64);
        let by_gap = last_refence_ms.saturating_add(self.min_gap().as_millis() as i64);
        by_age.min(by_id).max(by_gap)
    }
}

/// What a partition's leader and its id's coordinator last saw of its
/// owner, in wall-clock milliseconds, for [`KeepAlive::due_ms`]: the
/// timestamp of the last batch or marker, the last transactional request,
/// the last re-fence. Handed from a pump that ends to the keep-alive of a
/// partition held without one (PAUSED, FAILED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceClock {
    pub stamp_ms: i64,
    pub transaction_ms: i64,
    pub refence_ms: i64,
}

impl FenceClock {
    const NEVER: i64 = i64::MIN / 2;

    /// A fence just acquired or renewed (its InitProducerId the id's last
    /// transactional request) whose leader's stamp is not known older.
    pub fn started(now_ms: i64) -> Self {
        FenceClock {
            stamp_ms: now_ms,
            transaction_ms: now_ms,
            refence_ms: Self::NEVER,
        }
    }

    /// Nothing known (the partition was taken over and no pump ran here):
    /// due at once.
    pub fn unknown() -> Self {
        FenceClock {
            stamp_ms: Self::NEVER,
            transaction_ms: Self::NEVER,
            refence_ms: Self::NEVER,
        }
    }

    /// A marker written at `now_ms`: it is both the stamp and a transaction.
    pub fn refenced(now_ms: i64) -> Self {
        FenceClock {
            stamp_ms: now_ms,
            transaction_ms: now_ms,
            refence_ms: now_ms,
        }
    }

    /// When [`KeepAlive`] says the partition is due for a marker.
    pub fn due_ms(&self, keep: &KeepAlive) -> i64 {
        keep.due_ms(self.stamp_ms, self.transaction_ms, self.refence_ms)
    }
}

/// The node id of the transaction coordinator of `transactional_id`,
/// retried while the coordinator loads or moves, within the client's
/// `delivery.timeout.ms`.
pub async fn find_transaction_coordinator(
    client: &KafkaClient,
    transactional_id: &str,
) -> Result<i32> {
    bounded(client, "FindCoordinator", async {
        let mut attempt = 0;
        loop {
            match find_once(client, transactional_id).await {
                Err(e) if retry_on_coordinator(&e) => {
                    tokio::time::sleep(client.retry_backoff(attempt)).await;
                    attempt += 1;
                }
                r => return r,
            }
        }
    })
    .await
}

async fn find_once(client: &KafkaClient, transactional_id: &str) -> Result<i32> {
    let conn = client.any_connection().await?;
    let v = conn.version::<FindCoordinatorRequest>()?;
    let key = StrBytes::from_string(transactional_id.to_owned());
    let req = FindCoordinatorRequest::default().with_key_type(TRANSACTION_KEY_TYPE);
    let req = if v >= 4 {
        req.with_coordinator_keys(vec![key])
    } else {
        req.with_key(key)
    };
    let resp = conn.send(&req).await?;
    let (code, message, node) = if v >= 4 {
        let c =
            resp.coordinators.into_iter().next().ok_or_else(|| {
                KafkaError::Protocol("FindCoordinator without coordinators".into())
            })?;
        (c.error_code, c.error_message, c.node_id.0)
    } else {
        (resp.error_code, resp.error_message, resp.node_id.0)
    };
    KafkaError::check(
        code,
        || format!("FindCoordinator (transaction) {transactional_id}"),
        message.as_deref(),
    )?;
    if !client.metadata().brokers.contains_key(&node) {
        client.refresh_metadata(Some(&[])).await?;
    }
    Ok(node)
}

/// The first producer epoch Kafka's transaction coordinator counts as
/// exhausted (`TransactionMetadata.isEpochExhausted`, Kafka 4.1:
/// `Short.MaxValue - 1`): the next InitProducerId on an id there answers a
/// new producer id at epoch 0 instead of a bump, and markers of the new id
/// fence nothing of the old one. So no data is ever written under it:
/// [`acquire`] and [`renew`] rotate past it before they return.
pub const EXHAUSTED_EPOCH: i16 = i16::MAX - 1;

/// Takes ownership of `transactional_id`: InitProducerId on its
/// coordinator, which bumps the epoch and aborts an open transaction of
/// the previous owner (answering CONCURRENT_TRANSACTIONS until that abort
/// is done, which is retried). `txn_timeout` bounds how long a transaction
/// of ours may stay open before the coordinator aborts it; only
/// [`fence_partitions`] opens one, for a moment.
///
/// `partitions` are the ones the unit writes: should the id stand at (or
/// reach) [`EXHAUSTED_EPOCH`], they are fenced at that epoch under the old
/// producer id — every earlier owner's epoch is below it — before the
/// coordinator rotates the id, so no owner of the old id is left able to
/// write once the new one is in use.
pub async fn acquire(
    client: &KafkaClient,
    transactional_id: &str,
    txn_timeout: Duration,
    partitions: &[TopicPartition],
) -> Result<ProducerFence> {
    // An owner that got the exhausted epoch and stopped before rotating
    // left the id there, and our InitProducerId would rotate it at once.
    if let Some(last) = exhausted(client, transactional_id).await? {
        match fence_partitions(client, &last, partitions).await {
            // Someone rotated it meanwhile, after the same fence.
            Ok(()) | Err(KafkaError::Fenced { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let fence = init_producer_id(client, transactional_id, txn_timeout, None).await?;
    if fence.producer_epoch < EXHAUSTED_EPOCH {
        return Ok(fence);
    }
    fence_partitions(client, &fence, partitions).await?;
    rotate(client, &fence, txn_timeout).await
}

/// A new epoch for an owner that still holds `fence`: InitProducerId naming
/// the current producer id and epoch (KIP-360), which the coordinator bumps
/// only if they are still its own, and answers PRODUCER_FENCED
/// ([`KafkaError::Fenced`]) if a newer owner acquired the id meanwhile.
/// What a writer reopened after a failure needs (its sequences restart at
/// 0, which only a new epoch allows) without [`acquire`]'s power to take
/// the unit from whoever owns it now.
///
/// A renewal onto [`EXHAUSTED_EPOCH`] rotates the producer id at once,
/// with no marker: the leaders hold our own epoch, which already fences
/// every earlier owner, and our previous writer is closed.
pub async fn renew(
    client: &KafkaClient,
    fence: &ProducerFence,
    txn_timeout: Duration,
) -> Result<ProducerFence> {
    let renewed = init_producer_id(client, &fence.transactional_id, txn_timeout, Some(fence))
        .await
        .map_err(|e| lost_ownership(e, fence))?;
    if renewed.producer_epoch < EXHAUSTED_EPOCH {
        return Ok(renewed);
    }
    rotate(client, &renewed, txn_timeout).await
}

/// The coordinator's answer to an InitProducerId naming an exhausted
/// epoch it still holds: a new producer id at epoch 0 (refused as
/// PRODUCER_FENCED if someone else moved the id on meanwhile).
async fn rotate(
    client: &KafkaClient,
    exhausted: &ProducerFence,
    txn_timeout: Duration,
) -> Result<ProducerFence> {
    let rotated = init_producer_id(
        client,
        &exhausted.transactional_id,
        txn_timeout,
        Some(exhausted),
    )
    .await
    .map_err(|e| lost_ownership(e, exhausted))?;
    tracing::info!(
        transactional_id = %exhausted.transactional_id,
        old_producer_id = exhausted.producer_id,
        producer_id = rotated.producer_id,
        epoch = rotated.producer_epoch,
        "producer epoch exhausted: the transactional id moved to a new producer id"
    );
    Ok(rotated)
}

/// The id's producer id and epoch if its coordinator holds it at
/// [`EXHAUSTED_EPOCH`] or above with no transaction under way (one under
/// way is aborted by the coordinator's own fence, at a higher epoch still).
async fn exhausted(client: &KafkaClient, tid: &str) -> Result<Option<ProducerFence>> {
    on_coordinator(client, tid, "DescribeTransactions", |node| async move {
        let s = match describe_on(client, node, tid).await {
            Err(e) if e.response_error() == Some(ResponseError::TransactionalIdNotFound) => {
                return Ok(None)
            }
            r => r?,
        };
        let idle = matches!(
            s.transaction_state.as_str(),
            "Empty" | "CompleteAbort" | "CompleteCommit"
        );
        Ok(
            (idle && s.producer_epoch >= EXHAUSTED_EPOCH).then(|| ProducerFence {
                transactional_id: tid.into(),
                producer_id: s.producer_id.0,
                producer_epoch: s.producer_epoch,
            }),
        )
    })
    .await
}

async fn init_producer_id(
    client: &KafkaClient,
    transactional_id: &str,
    txn_timeout: Duration,
    current: Option<&ProducerFence>,
) -> Result<ProducerFence> {
    let (pid, epoch) = current.map_or((-1, -1), |f| (f.producer_id, f.producer_epoch));
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id(transactional_id)))
        .with_transaction_timeout_ms(txn_timeout.as_millis().min(i32::MAX as u128) as i32)
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch);
    let resp = on_coordinator(client, transactional_id, "InitProducerId", |node| {
        let req = req.clone();
        async move {
            let r = client.send_to(node, &req).await?;
            KafkaError::check(
                r.error_code,
                || format!("InitProducerId {transactional_id}"),
                None,
            )?;
            Ok(r)
        }
    })
    .await?;
    Ok(ProducerFence {
        transactional_id: transactional_id.into(),
        producer_id: resp.producer_id.0,
        producer_epoch: resp.producer_epoch,
    })
}

/// Raises the epoch every leader of `partitions` holds for the fence's
/// producer id to the fence's epoch: AddPartitionsToTxn, EndTxn(abort),
/// then waits until the coordinator reports CompleteAbort (EndTxn answers
/// before the markers are written). Each partition's end moves by one
/// offset, the abort marker. A newer owner having acquired the id in the
/// meantime is [`KafkaError::Fenced`].
pub async fn fence_partitions(
    client: &KafkaClient,
    fence: &ProducerFence,
    partitions: &[TopicPartition],
) -> Result<()> {
    if partitions.is_empty() {
        return Ok(());
    }
    let tid = &*fence.transactional_id;
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for tp in partitions {
        match topics.iter_mut().find(|t| t.name.0.as_str() == &*tp.topic) {
            Some(t) => t.partitions.push(tp.partition),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(tp.topic.to_string())))
                    .with_partitions(vec![tp.partition]),
            ),
        }
    }
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(tid))
        .with_v3_and_below_producer_id(ProducerId(fence.producer_id))
        .with_v3_and_below_producer_epoch(fence.producer_epoch)
        .with_v3_and_below_topics(topics);
    on_coordinator(client, tid, "AddPartitionsToTxn", |node| {
        let add = add.clone();
        async move {
            let conn = client.connection(node).await?;
            if !conn.supports::<AddPartitionsToTxnRequest>(ADD_PARTITIONS_VERSION) {
                return Err(KafkaError::UnsupportedVersion {
                    api: "AddPartitionsToTxn",
                    broker: conn.broker().to_owned(),
                    broker_range: format!("{:?}", conn.broker_versions(24)),
                    our_range: ADD_PARTITIONS_VERSION.to_string(),
                });
            }
            let resp = conn
                .send_versioned(&add, ADD_PARTITIONS_VERSION, conn.request_timeout())
                .await?;
            for t in &resp.results_by_topic_v3_and_below {
                for p in &t.results_by_partition {
                    KafkaError::check(
                        p.partition_error_code,
                        || {
                            format!(
                                "AddPartitionsToTxn {tid} {}-{}",
                                t.name.0, p.partition_index
                            )
                        },
                        None,
                    )
                    .map_err(|e| lost_ownership(e, fence))?;
                }
            }
            Ok(())
        }
    })
    .await?;
    let end = EndTxnRequest::default()
        .with_transactional_id(txn_id(tid))
        .with_producer_id(ProducerId(fence.producer_id))
        .with_producer_epoch(fence.producer_epoch)
        .with_committed(false);
    on_coordinator(client, tid, "EndTxn", |node| {
        let end = end.clone();
        async move {
            let conn = client.connection(node).await?;
            let v = conn.version::<EndTxnRequest>()?.min(END_TXN_MAX_VERSION);
            let resp = conn.send_versioned(&end, v, conn.request_timeout()).await?;
            KafkaError::check(resp.error_code, || format!("EndTxn(abort) {tid}"), None)
                .map_err(|e| lost_ownership(e, fence))
        }
    })
    .await?;
    wait_complete_abort(client, fence).await
}

/// Polls DescribeTransactions until the abort's markers are all written.
async fn wait_complete_abort(client: &KafkaClient, fence: &ProducerFence) -> Result<()> {
    let tid = &*fence.transactional_id;
    on_coordinator(client, tid, "DescribeTransactions", |node| {
        async move {
            let s = describe_on(client, node, tid).await?;
            if s.producer_id.0 != fence.producer_id || s.producer_epoch != fence.producer_epoch {
                return Err(KafkaError::Fenced {
                    resource: tid.to_owned(),
                    reason: format!(
                        "the coordinator holds producer {} epoch {}, ours is {} epoch {}",
                        s.producer_id.0, s.producer_epoch, fence.producer_id, fence.producer_epoch
                    ),
                });
            }
            match s.transaction_state.as_str() {
                "CompleteAbort" => Ok(()),
                // Markers still being written: the same retry as a busy coordinator.
                "PrepareAbort" => Err(KafkaError::Broker {
                    error: ResponseError::ConcurrentTransactions,
                    context: format!("abort of {tid} under way"),
                    message: None,
                }),
                other => Err(KafkaError::Protocol(format!(
                    "transaction {tid} is {other} after our abort"
                ))),
            }
        }
    })
    .await
}

/// What the coordinator `node` holds of `tid` (one DescribeTransactions).
async fn describe_on(client: &KafkaClient, node: i32, tid: &str) -> Result<TransactionState> {
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(tid)]);
    let resp = client.send_to(node, &req).await?;
    let s = resp
        .transaction_states
        .into_iter()
        .next()
        .ok_or_else(|| KafkaError::Protocol("DescribeTransactions without a state".into()))?;
    KafkaError::check(s.error_code, || format!("DescribeTransactions {tid}"), None)?;
    Ok(s)
}

/// Whether an error of a coordinator RPC is worth another try, after
/// finding the coordinator again.
fn retry_on_coordinator(e: &KafkaError) -> bool {
    matches!(
        e.response_error(),
        Some(
            ResponseError::CoordinatorLoadInProgress
                | ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::ConcurrentTransactions
        )
    ) || matches!(
        e,
        KafkaError::Io { .. } | KafkaError::Timeout { .. } | KafkaError::Disconnected { .. }
    )
}

/// Runs `f` on the coordinator of `transactional_id`, finding it again and
/// backing off while [`retry_on_coordinator`] says so, within the client's
/// `delivery.timeout.ms` overall.
async fn on_coordinator<T, F, Fut>(
    client: &KafkaClient,
    transactional_id: &str,
    api: &'static str,
    f: F,
) -> Result<T>
where
    F: Fn(i32) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    bounded(client, api, async {
        let mut attempt = 0;
        loop {
            let r = match find_once(client, transactional_id).await {
                Ok(node) => f(node).await,
                Err(e) => Err(e),
            };
            match r {
                Err(e) if retry_on_coordinator(&e) => {
                    tracing::debug!(transactional_id, api, error = %e, attempt, "transaction coordinator retry");
                    tokio::time::sleep(client.retry_backoff(attempt)).await;
                    attempt += 1;
                }
                r => return r,
            }
        }
    })
    .await
}

/// `fut` under the client's `delivery.timeout.ms`: the most a produce
/// may take, and fencing stands in the way of producing.
async fn bounded<T>(
    client: &KafkaClient,
    api: &'static str,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let timeout = client.config().delivery_timeout;
    let started = Instant::now();
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| {
            Err(KafkaError::Timeout {
                api,
                broker: "transaction coordinator (delivery.timeout.ms)".into(),
                timeout: started.elapsed(),
            })
        })
}

/// PRODUCER_FENCED / INVALID_PRODUCER_EPOCH from the coordinator: a newer
/// owner acquired the id between our acquire and this call.
fn lost_ownership(e: KafkaError, fence: &ProducerFence) -> KafkaError {
    match e.response_error() {
        Some(ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch) => {
            KafkaError::Fenced {
                resource: fence.transactional_id.to_string(),
                reason: e.to_string(),
            }
        }
        _ => e,
    }
}

fn txn_id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_owned()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn keep_alive_fences_well_before_expiry_and_at_most_once_a_check() {
        const DAY: u64 = 86_400;
        // Kafka's defaults: a day, checked every 10 minutes; 7 days.
        let k = KeepAlive {
            expiration: Duration::from_secs(DAY),
            check_interval: Duration::from_secs(600),
            transactional_expiration: Duration::from_secs(7 * DAY),
        };
        assert_eq!(
            k.refence_age(),
            Duration::from_millis(86_400_000 - 600_000 - 8_640_000)
        );
        let age = k.refence_age().as_millis() as i64;
        let never = i64::MIN / 2;
        assert_eq!(k.due_ms(0, 0, never), age);
        // An old timestamp is due at once, but not twice within a check.
        assert_eq!(k.due_ms(0, 10_000_000_000, 10_000_000_000), 10_000_600_000);
        // Fresh data keeps the producer alive, not the transactional id.
        let id_age = k.transaction_age().as_millis() as i64;
        assert_eq!(k.due_ms(id_age, 0, never), id_age);
        assert!(id_age > 6 * DAY as i64 * 1000);
        // A short expiration: half of it at the least.
        let short = KeepAlive {
            expiration: Duration::from_secs(8),
            check_interval: Duration::from_millis(500),
            transactional_expiration: Duration::from_secs(8),
        };
        assert_eq!(short.refence_age(), Duration::from_secs(4));
        assert_eq!(short.min_gap(), Duration::from_secs(1));
        // Only a short one is worth a warning, naming the setting.
        assert_eq!(k.short_expiration_warning(), None);
        let warning = short.short_expiration_warning().unwrap();
        assert!(
            warning.contains("producer.id.expiration.ms is 8 s") && warning.contains("4 s"),
            "{warning}"
        );
    }
}
