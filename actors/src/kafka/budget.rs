//! One budget for the bytes a daemon holds in flight, shared by every
//! partition of every mirror (`max_memory_bytes`).
//!
//! Without it, what a daemon holds grows with the partitions it copies:
//! each buffers up to two fetched responses and has five produces in flight,
//! so a backlog on 100 partitions peaked above 160 MiB. With it, a source
//! broker's fetch task reserves room before it sends a Fetch and asks the
//! broker for no more (Fetch `max_bytes`); each partition's data is then
//! charged to that partition until the destination has acknowledged all it
//! became.
//!
//! A fetched byte is charged [`COPIES`] times, because that is how many
//! copies of it can be alive at once: the partition's data (copied out of
//! the shared response frame, so that a slow partition does not keep a whole
//! frame alive), let go once planned unless a batch passed through keeps its
//! records there until acknowledged (only its header is copied and
//! stamped); a merged or re-encoded batch, its own bytes until
//! acknowledged; and, while the connection's writer puts it on the socket,
//! the Produce request it goes into (built only then: the requests waiting
//! their turn hold references, not frames). The charge is the most ever
//! alive at once, not what usually is. A partition holding its even share of
//! the budget or more sits out the next fetches, so one busy partition
//! cannot starve the others; and a fetch asks for no more than its
//! partitions' room within their shares, so one source's fetches — long
//! polls that hold their reservation while the broker waits for data —
//! cannot starve another's. A response larger than its reservation (Kafka
//! returns a first batch larger than `max_bytes`, so that a partition always
//! moves) is charged in full: the budget can be exceeded by one batch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The bytes in flight across a daemon, against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    /// Partitions being fetched, to split the budget evenly.
    partitions: AtomicUsize,
    freed: Notify,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
            partitions: AtomicUsize::new(0),
            freed: Notify::new(),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held right now (fetched, queued or not yet acknowledged).
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An even share of the budget among the partitions being fetched.
    fn share(&self) -> usize {
        self.limit / self.partitions.load(Ordering::Relaxed).max(1)
    }

    /// A lower bound of the room `active` partitions have left in their
    /// shares together, in fetched bytes, without asking each: their shares
    /// less everything held (theirs and others'), less a byte each for
    /// [`PartitionUse::room`]'s rounding.
    pub fn room_at_least(&self, active: usize) -> usize {
        ((self.share().saturating_mul(active)).saturating_sub(self.used()) / COPIES)
            .saturating_sub(active)
    }

    /// A partition joining the fetches: its charges are counted against its
    /// share until it and every charge made to it are gone.
    pub fn partition(self: &Arc<Self>) -> Arc<PartitionUse> {
        self.partitions.fetch_add(1, Ordering::Relaxed);
        Arc::new(PartitionUse {
            budget: self.clone(),
            held: AtomicUsize::new(0),
        })
    }

    /// Room for a fetch: up to `want` bytes of response (charged
    /// [`COPIES`] times) once room for `min` is free — or once nothing at
    /// all is held, so that a budget smaller than that still lets one
    /// request through at a time instead of stalling forever. After
    /// [`PATIENCE`] it settles for any room at all: what partitions sitting
    /// out hold stays held (their readers stopped), and can keep room for
    /// `min` from ever being free. Returns the reservation and the
    /// response size to ask for.
    pub async fn reserve(self: &Arc<Self>, want: usize, min: usize) -> (Charge, usize) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a release in between wakes us.
            freed.as_mut().enable();
            let patient = tokio::time::Instant::now() < deadline;
            let floor = if patient { min } else { min.min(1) };
            let used = self.used.load(Ordering::Acquire);
            let free = self.limit.saturating_sub(used) / COPIES;
            if free >= floor || used == 0 {
                let take = want.min(free.max(floor));
                let charged = take * COPIES;
                if self
                    .used
                    .compare_exchange(used, used + charged, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return (Charge::new(self.clone(), None, charged), take);
                }
                continue;
            }
            if patient {
                let _ = tokio::time::timeout_at(deadline, freed).await;
            } else {
                freed.await;
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }
}

/// How long a reservation waits for room for its minimum before it takes
/// any room there is: longer than data in flight takes to be acknowledged
/// on a healthy destination, short against a fetch's long poll.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);

/// How many times a fetched byte is charged: the copies of it that can be
/// alive at once (see the module's doc).
pub const COPIES: usize = 3;

/// One fetched partition's account in the budget.
#[derive(Debug)]
pub struct PartitionUse {
    budget: Arc<MemoryBudget>,
    held: AtomicUsize,
}

impl PartitionUse {
    /// Its share or more is held: the partition sits out the next fetch.
    pub fn over_share(&self) -> bool {
        self.room() == 0
    }

    /// What is left of its share, in fetched bytes (a fetched byte is
    /// charged [`COPIES`] times).
    pub fn room(&self) -> usize {
        self.budget
            .share()
            .saturating_sub(self.held.load(Ordering::Relaxed))
            / COPIES
    }

    /// Charges `bytes` fetched for this partition, [`COPIES`] times and
    /// whatever is free (they are already here: the fetch's reservation
    /// made room for them).
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        let charged = bytes * COPIES;
        self.held.fetch_add(charged, Ordering::Relaxed);
        self.budget.used.fetch_add(charged, Ordering::AcqRel);
        Charge::new(self.budget.clone(), Some(self.clone()), charged)
    }
}

impl Drop for PartitionUse {
    fn drop(&mut self) {
        self.budget.partitions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Bytes held against the budget until the last clone is dropped. The
/// default holds nothing (data read outside any budget).
#[derive(Clone, Debug, Default)]
pub struct Charge(Option<Arc<Held>>);

#[derive(Debug)]
struct Held {
    budget: Arc<MemoryBudget>,
    owner: Option<Arc<PartitionUse>>,
    bytes: usize,
}

impl Charge {
    fn new(budget: Arc<MemoryBudget>, owner: Option<Arc<PartitionUse>>, bytes: usize) -> Self {
        Charge(Some(Arc::new(Held {
            budget,
            owner,
            bytes,
        })))
    }

    /// Bytes of the budget held.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |h| h.bytes)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(owner) = &self.owner {
            owner.held.fetch_sub(self.bytes, Ordering::Relaxed);
        }
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_reservation_waits_for_room_and_a_charge_gives_it_back() {
        let budget = MemoryBudget::new(300);
        let (a, ask) = budget.reserve(80, 30).await;
        assert_eq!((ask, a.bytes(), budget.used()), (80, 240, 240));
        // Room for 20 bytes fetched, 30 needed: waits until `a` is gone.
        let b = budget.clone();
        let waiting = tokio::spawn(async move { b.reserve(200, 30).await.1 });
        // One turn (this runtime has one thread): it looked, and waits.
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        assert_eq!(
            waiting.await.unwrap(),
            100,
            "asks for what is free, up to `want`"
        );
        assert_eq!(budget.used(), 0);
    }

    /// Data a partition holds while it sits out (its reader stopped) is
    /// not coming back soon. A fetch whose minimum the rest of the budget
    /// can never hold must not wait for it forever: after a short wait it
    /// takes what there is. (On real Kafka: a stopped reader holding 384 KiB
    /// of a 1 MiB budget left 218 KiB free, and a fetch waiting for its
    /// partitions' 233 KiB of room stalled them for good.)
    #[tokio::test]
    async fn a_minimum_that_can_never_be_free_is_waited_for_only_briefly() {
        let budget = MemoryBudget::new(300);
        let stuck = budget.partition();
        let _held = stuck.charge(50);
        let (r, ask) = tokio::time::timeout(Duration::from_secs(5), budget.reserve(80, 60))
            .await
            .expect("the reservation settles for what is free");
        assert_eq!((ask, r.bytes()), (50, 150));
    }

    #[tokio::test]
    async fn a_budget_smaller_than_the_minimum_still_lets_one_through() {
        let budget = MemoryBudget::new(10);
        let (a, ask) = budget.reserve(50, 40).await;
        assert_eq!((ask, a.bytes()), (40, 120));
    }

    #[test]
    fn charges_count_against_the_partition_share_until_the_last_clone_drops() {
        let budget = MemoryBudget::new(300);
        let (p, q) = (budget.partition(), budget.partition());
        let charge = p.charge(50);
        let clone = charge.clone();
        assert_eq!(budget.used(), 150);
        assert!(p.over_share(), "150 of an even share of 150");
        assert!(!q.over_share());
        drop(charge);
        assert_eq!(budget.used(), 150, "a clone still holds it");
        drop(clone);
        assert_eq!(budget.used(), 0);
        assert!(!p.over_share());
        drop(q);
        assert_eq!(budget.share(), 300, "q left: p's share is the whole");
    }

    /// A fetch loop asks the budget instead of every partition when the
    /// budget's bound already says there is room enough: the bound must
    /// never promise more than the partitions have.
    #[test]
    fn the_room_bound_never_exceeds_the_partitions_room() {
        let budget = MemoryBudget::new(10_000);
        let parts: Vec<_> = (0..7).map(|_| budget.partition()).collect();
        let mut charges = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            for active in 1..=parts.len() {
                let sum: usize = parts[..active].iter().map(|p| p.room()).sum();
                assert!(
                    budget.room_at_least(active) <= sum,
                    "{active} partitions after {i} charges: bound {} over {sum}",
                    budget.room_at_least(active)
                );
            }
            charges.push(p.charge(37 * (i + 1)));
        }
        let other = budget.partition();
        charges.push(other.charge(2_000));
        assert!(budget.room_at_least(parts.len()) <= parts.iter().map(|p| p.room()).sum());
        drop(charges);
        assert_eq!(budget.room_at_least(1), 10_000 / 8 / COPIES - 1);
    }
}
