//! A node's licence to write while its group membership lasts: the local
//! check that backs the brokers' epoch fence ([`super::fence`]) where a
//! leader has forgotten an epoch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::error::{KafkaError, Result};

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
    /// The term of the assignment its holder acts on ([`Lease::grant`]);
    /// `u64::MAX` until one is granted.
    granted: AtomicU64,
    changed: tokio::sync::Notify,
}

impl Default for Lease {
    fn default() -> Self {
        Lease {
            inner: Arc::new(LeaseInner {
                origin: std::time::Instant::now(),
                until_ms: AtomicU64::new(0),
                term: AtomicU64::new(0),
                granted: AtomicU64::new(u64::MAX),
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

    /// The current term: it moves on each time the member is out.
    pub fn term(&self) -> u64 {
        self.inner.term.load(Ordering::SeqCst)
    }

    /// The holder acts on the assignment published in `term` (its
    /// `Membership::lease_term`): what [`Lease::before_taking`] checks
    /// against, so that nothing is taken on the strength of an assignment
    /// the member lost since, even if it has joined again.
    pub fn grant(&self, term: u64) {
        self.inner.granted.store(term, Ordering::SeqCst);
    }

    /// Ok once the lease runs (waiting at most `limit` for a renewal) and
    /// the member has not been out since the assignment granted
    /// ([`Lease::grant`]; the current term if none was), else
    /// [`KafkaError::Fenced`] naming `resource`: what a node checks before it
    /// takes anything from another, since a pause between the group's
    /// assignment and the fence may have let the group give it on — and a
    /// member expelled and back again may no longer own what it was about
    /// to take.
    pub async fn before_taking(&self, resource: &str, limit: Duration) -> Result<()> {
        let granted = match self.inner.granted.load(Ordering::SeqCst) {
            u64::MAX => self.term(),
            term => term,
        };
        let ticket = LeaseTicket {
            lease: self.clone(),
            term: granted,
        };
        if ticket.may_send(limit).await {
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

    /// A node takes a shard on the strength of the assignment it read: out
    /// of the group since (and back, the lease running again), it takes
    /// nothing until it acts on an assignment of the new term.
    #[tokio::test]
    async fn nothing_is_taken_on_an_assignment_of_an_earlier_term() {
        let lease = Lease::default();
        lease.extend_to(Instant::now() + Duration::from_secs(10));
        lease.grant(lease.term());
        assert!(lease.before_taking("s", Duration::ZERO).await.is_ok());
        lease.revoke();
        lease.extend_to(Instant::now() + Duration::from_secs(10));
        let refused = lease.before_taking("s", Duration::from_millis(50)).await;
        assert!(
            matches!(refused, Err(KafkaError::Fenced { .. })),
            "{refused:?}"
        );
        lease.grant(lease.term());
        assert!(lease.before_taking("s", Duration::ZERO).await.is_ok());
    }
}
