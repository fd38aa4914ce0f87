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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
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

/// Takes ownership of `transactional_id`: InitProducerId on its
/// coordinator, which bumps the epoch and aborts an open transaction of
/// the previous owner (answering CONCURRENT_TRANSACTIONS until that abort
/// is done, which is retried). `txn_timeout` bounds how long a transaction
/// of ours may stay open before the coordinator aborts it; only
/// [`fence_partitions`] opens one, for a moment.
pub async fn acquire(
    client: &KafkaClient,
    transactional_id: &str,
    txn_timeout: Duration,
) -> Result<ProducerFence> {
    init_producer_id(client, transactional_id, txn_timeout, None).await
}

/// A new epoch for an owner that still holds `fence`: InitProducerId naming
/// the current producer id and epoch (KIP-360), which the coordinator bumps
/// only if they are still its own, and answers PRODUCER_FENCED
/// ([`KafkaError::Fenced`]) if a newer owner acquired the id meanwhile.
/// What a writer reopened after a failure needs (its sequences restart at
/// 0, which only a new epoch allows) without [`acquire`]'s power to take
/// the unit from whoever owns it now.
pub async fn renew(
    client: &KafkaClient,
    fence: &ProducerFence,
    txn_timeout: Duration,
) -> Result<ProducerFence> {
    init_producer_id(client, &fence.transactional_id, txn_timeout, Some(fence))
        .await
        .map_err(|e| lost_ownership(e, fence))
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
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(tid)]);
    on_coordinator(client, tid, "DescribeTransactions", |node| {
        let req = req.clone();
        async move {
            let resp = client.send_to(node, &req).await?;
            let s = resp.transaction_states.into_iter().next().ok_or_else(|| {
                KafkaError::Protocol("DescribeTransactions without a state".into())
            })?;
            KafkaError::check(s.error_code, || format!("DescribeTransactions {tid}"), None)?;
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

/// A licence to write that runs out unless the group renews it: valid until
/// a session timeout after the *sending* of the last heartbeat or sync the
/// group coordinator accepted (it cannot have expelled the member before
/// then), on the monotonic clock; ended for good when the member learns it
/// is out of the group.
///
/// The broker's epoch fence has one gap a lease closes: a leader forgets a
/// producer `producer.id.expiration.ms` after the timestamp of its last
/// batch, and mirrored batches keep the source's timestamps, so a partition
/// of old records can forget its new owner's epoch within minutes and take
/// a stale one again. A process stopped (SIGSTOP, a long pause) past its
/// session finds, when it runs again, its lease run out before it sends
/// anything: the check runs after the pause, so it does not race it.
///
/// A producer holds a [`LeaseTicket`] taken when it was made. While the
/// lease has merely run out (a rebalance can hold the heartbeats for a
/// while), a send waits for the member to renew it or to learn it is out;
/// once the member was out, the ticket is void even if the member has
/// joined again since — what it was granted may belong to another node.
#[derive(Clone, Debug)]
pub struct Lease {
    inner: Arc<LeaseInner>,
}

#[derive(Debug)]
struct LeaseInner {
    origin: std::time::Instant,
    /// Milliseconds after `origin` until which writing is allowed.
    until_ms: AtomicU64,
    /// One more every time the member was out of the group.
    term: AtomicU64,
    changed: tokio::sync::Notify,
}

impl Default for Lease {
    fn default() -> Self {
        Lease {
            inner: Arc::new(LeaseInner {
                origin: std::time::Instant::now(),
                until_ms: AtomicU64::new(0),
                term: AtomicU64::new(0),
                changed: tokio::sync::Notify::new(),
            }),
        }
    }
}

impl Lease {
    /// Allows writing until `until` (never shortens the lease).
    pub fn extend_to(&self, until: std::time::Instant) {
        let ms = until
            .saturating_duration_since(self.inner.origin)
            .as_millis() as u64;
        self.inner.until_ms.fetch_max(ms, Ordering::SeqCst);
        self.inner.changed.notify_waiters();
    }

    /// The member is out of the group: every ticket taken so far is void.
    pub fn revoke(&self) {
        self.inner.term.fetch_add(1, Ordering::SeqCst);
        self.inner.until_ms.store(0, Ordering::SeqCst);
        self.inner.changed.notify_waiters();
    }

    /// Ok once the lease runs (waiting at most `limit` for a renewal), else
    /// [`KafkaError::Fenced`] naming `resource`: what a node checks before it
    /// takes anything from another, since a pause between the group's
    /// assignment and the fence may have let the group give it on.
    pub async fn before_taking(&self, resource: &str, limit: Duration) -> Result<()> {
        if self.ticket().may_send(limit).await {
            return Ok(());
        }
        Err(KafkaError::Fenced {
            resource: resource.to_string(),
            reason: "this node's group lease ran out before it took it over: the group may have given it to another node".into(),
        })
    }

    /// A ticket for a producer made now.
    pub fn ticket(&self) -> LeaseTicket {
        LeaseTicket {
            lease: self.clone(),
            term: self.inner.term.load(Ordering::SeqCst),
        }
    }

    fn running(&self) -> bool {
        let now = self.inner.origin.elapsed().as_millis() as u64;
        now < self.inner.until_ms.load(Ordering::SeqCst)
    }
}

/// A producer's hold on a [`Lease`].
#[derive(Clone, Debug)]
pub struct LeaseTicket {
    lease: Lease,
    term: u64,
}

impl LeaseTicket {
    /// Whether a request may leave now: at once if the lease runs; after
    /// waiting (at most `limit`) for the member to renew it if it ran out;
    /// never if the member was out since the ticket was taken.
    pub async fn may_send(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.lease.inner.changed.notified();
            if self.lease.inner.term.load(Ordering::SeqCst) != self.term {
                return false;
            }
            if self.lease.running() {
                return true;
            }
            // Renewals notify; the poll covers a renewal racing the wait.
            let poll = std::time::Duration::from_millis(100);
            if tokio::time::timeout_at(deadline.min(tokio::time::Instant::now() + poll), changed)
                .await
                .is_err()
                && tokio::time::Instant::now() >= deadline
            {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[tokio::test]
    async fn a_lease_waits_for_its_renewal_and_a_ticket_dies_with_its_term() {
        let lease = Lease::default();
        let ticket = lease.ticket();
        // Never granted: nothing leaves, within the limit.
        assert!(!ticket.may_send(Duration::from_millis(50)).await);
        lease.extend_to(Instant::now() + Duration::from_secs(10));
        assert!(ticket.may_send(Duration::ZERO).await);

        // Run out (a rebalance holding heartbeats): a send waits for the
        // renewal instead of failing.
        let lease = Lease::default();
        lease.extend_to(Instant::now() + Duration::from_millis(20));
        let ticket = lease.ticket();
        tokio::time::sleep(Duration::from_millis(40)).await;
        let renew = {
            let lease = lease.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                lease.extend_to(Instant::now() + Duration::from_secs(10));
            })
        };
        assert!(ticket.may_send(Duration::from_secs(5)).await);
        renew.await.unwrap();

        // Out of the group: the ticket is void, even once the member has
        // joined again and the lease runs; a new producer's ticket is good.
        lease.revoke();
        lease.extend_to(Instant::now() + Duration::from_secs(10));
        assert!(!ticket.may_send(Duration::from_secs(5)).await);
        assert!(lease.ticket().may_send(Duration::ZERO).await);
    }

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
    }
}
