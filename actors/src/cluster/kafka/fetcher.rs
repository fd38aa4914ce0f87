//! One fetch session's task of a source broker: a multi-partition fetch
//! kept going for every open partition of the session that has room (in its
//! buffer, and under a budget in its share of it), each partition's data
//! handed out through a small bounded channel.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use tokio::sync::mpsc;

use crate::cluster::{BoxFuture, PartitionFetch};
use crate::kafka::budget::{MemoryBudget, PartitionUse};
use crate::kafka::fetch::{
    FetchError, FetchResults, FetchSession, FetchedPartition, TopicPartition,
};
use crate::kafka::{KafkaClient, KafkaError};

/// Buffered fetch responses per partition: one being processed, one ready.
pub(super) const PARTITION_BUFFER: usize = 2;

/// One fetch response for one partition, boxed: a tokio channel allocates
/// its first block of 32 slots when it is made, whatever its capacity, so
/// an unboxed `Result<FetchedPartition, FetchError>` (112 bytes) cost every
/// open partition 3.5 KB before its first fetch — 35 MB at 10 000 idle
/// partitions.
pub(super) type Delivery = Box<Result<FetchedPartition, FetchError>>;

/// A partition joining a broker's fetch stream.
pub(super) struct Register {
    pub(super) tp: TopicPartition,
    pub(super) topic_id: uuid::Uuid,
    pub(super) offset: i64,
    pub(super) leader_epoch: i32,
    /// The leader epoch of the record before `offset` (−1 unknown).
    pub(super) last_epoch: i32,
    pub(super) tx: mpsc::Sender<Delivery>,
}

/// A registered partition: where its data goes, what it was registered
/// with, and its account in the memory budget.
struct Part {
    tx: mpsc::Sender<Delivery>,
    leader_epoch: i32,
    topic_id: uuid::Uuid,
    /// Sitting out (its buffer or its share full): where it stands, as
    /// (offset, last fetched epoch).
    sitting_out: Option<(i64, i32)>,
    account: Option<Arc<PartitionUse>>,
}

/// One source broker's fetch figures, shared by its sessions' loops.
#[derive(Debug, Default)]
pub(super) struct BrokerFetches {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    requests: AtomicU64,
    largest_ask: AtomicUsize,
}

/// What a broker's fetch sessions have done: `max_in_flight` above 1 shows
/// the fetch pipelined (a session's request at the broker while another's
/// answer is handed out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchFigures {
    /// Fetch requests sent (retries included).
    pub requests: u64,
    /// Fetch requests at the broker now.
    pub in_flight: usize,
    /// The most fetch requests at the broker at once.
    pub max_in_flight: usize,
    /// The largest response size a request asked for (Fetch `max_bytes`).
    pub largest_ask: usize,
}

impl BrokerFetches {
    pub(super) fn figures(&self) -> FetchFigures {
        FetchFigures {
            requests: self.requests.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            largest_ask: self.largest_ask.load(Ordering::Relaxed),
        }
    }

    /// Counts a request asking for `max_bytes` in flight until the guard
    /// drops (also when the loop is cancelled mid-request).
    fn start(&self, max_bytes: usize) -> InFlight<'_> {
        self.largest_ask.fetch_max(max_bytes, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }
}

struct InFlight<'a>(&'a BrokerFetches);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The smallest response a fetch waits for room for: below it, round trips
/// cost more than the memory they save.
const MIN_FETCH_BYTES: usize = 256 * 1024;

/// Under a budget, a response is at most this fraction of it (and of
/// `fetch.response.max.bytes`, whichever is smaller). A response's frame is
/// alive beside the partitions' data copied out of it, and glibc keeps what
/// frames of many megabytes leave behind. On the 100-partition backlog
/// (default 64 MiB budget) responses of 10 MiB peaked at 65–69 MiB RSS, of
/// 4 MiB (this sixteenth) at 58–61, of 2 MiB at 53–55; the 8-partition copy
/// ran about 7 % slower at 4 MiB and 10 % at 2 MiB.
const RESPONSE_SHARE_OF_BUDGET: usize = 16;

/// How often a fetch loop looks at every partition it serves. Between
/// sweeps it looks only at the partitions the last answer fed and those
/// sitting out, so a request costs what moved, not the session's size
/// (5 000 partitions a session at 10 000 idle ones, where walking them all
/// three times per request was a tenth of the idle daemon's CPU). What only
/// a sweep sees: a partition whose reader went away without being fed
/// (it is fetched, at no cost, until then), and shares shrunk by
/// partitions joining elsewhere (a partition over its new share may take
/// one more response before it sits out). New registrations sweep at once.
const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// One broker's fetch loop: a request for every registered partition with
/// buffer room (and, under a budget, no more than its share held), results
/// handed out, positions advanced. Ends when no partition is left and
/// nobody can register any more.
pub(super) async fn broker_fetcher(
    mut session: FetchSession,
    client: KafkaClient,
    mut rx: mpsc::UnboundedReceiver<Register>,
    budget: Option<Arc<MemoryBudget>>,
    figures: Arc<BrokerFetches>,
) {
    let mut blips = TransportBlips::new(client.config().request_timeout);
    let max_bytes = response_limit(session_max_bytes(&session), budget.as_deref());
    let mut parts = Parts::default();
    let budget = budget.as_ref();
    let mut swept = std::time::Instant::now();
    // A registration came in since the last sweep.
    let mut registered = false;
    // When the last response came back (the profile's loop gap).
    let mut answered = std::time::Instant::now();
    loop {
        // Take in new registrations; wait for one if nothing is open.
        if parts.all.is_empty() {
            match rx.recv().await {
                Some(r) => parts.add(&mut session, r, budget),
                None => return,
            }
            registered = true;
        }
        while let Ok(r) = rx.try_recv() {
            parts.add(&mut session, r, budget);
            registered = true;
        }
        // Drop closed partitions; sit out full ones, bring back drained ones.
        if std::mem::take(&mut registered) || swept.elapsed() >= SWEEP_EVERY {
            swept = std::time::Instant::now();
            parts.sweep(&mut session);
        } else {
            parts.look_at_moved(&mut session);
        }
        if session.is_empty() {
            // Everyone is full: wait briefly for room or a registration.
            if let Ok(Some(r)) = tokio::time::timeout(Duration::from_millis(2), rx.recv()).await {
                parts.add(&mut session, r, budget);
                registered = true;
            }
            continue;
        }
        // Room in the budget first; the broker is asked for no more, and
        // for no more than these partitions' shares have room for.
        let reserving = std::time::Instant::now();
        let reservation = match budget {
            Some(b) => {
                let want = parts.room(b, max_bytes).min(max_bytes).max(1);
                let (r, ask) = b.reserve(want, MIN_FETCH_BYTES.min(want)).await;
                session.set_max_bytes(ask);
                Some(r)
            }
            None => None,
        };
        let asked = std::time::Instant::now();
        let fetched = {
            let _counted = figures.start(session_max_bytes(&session));
            session.fetch().await
        };
        if tracing::enabled!(target: "kmirror::profile", tracing::Level::DEBUG) {
            let (parts_back, bytes) = match &fetched {
                Ok(r) => (
                    r.len(),
                    r.iter()
                        .filter_map(|(_, f)| f.as_ref().ok())
                        .map(|f| f.records.len())
                        .sum::<usize>(),
                ),
                Err(_) => (0, 0),
            };
            tracing::debug!(
                target: "kmirror::profile",
                node = session.node_id(),
                fetch_us = asked.elapsed().as_micros() as u64,
                reserve_us = asked.duration_since(reserving).as_micros() as u64,
                max_bytes = session.options().max_bytes,
                in_session = parts.all.len() - parts.sitting.len(),
                gap_us = asked.duration_since(answered).as_micros() as u64,
                parts_back,
                bytes,
                sitting_out = parts.sitting.len(),
                "fetch"
            );
        }
        answered = std::time::Instant::now();
        match fetched {
            Err(e) if blips.retry_quietly(&e) => {
                // Positions did not move: the same partitions are fetched
                // again, on a new connection, in a new fetch session.
                tracing::info!(node = session.node_id(), error = %e, attempt = blips.attempts, "fetch: connection lost, fetching again");
                tokio::time::sleep(client.retry_backoff(blips.attempts - 1)).await;
            }
            Ok(mut results) => {
                blips.clear();
                if reservation.is_some() {
                    charge(&mut results, &parts.all);
                }
                // Charged: the reservation's room is now the leases'.
                drop(reservation);
                for (tp, result) in results {
                    parts.deliver(&mut session, tp, result);
                }
            }
            Err(e) => {
                // The whole request failed (connection, timeout): every
                // partition gets the error and re-registers after deciding.
                blips.clear();
                parts.sitting.clear();
                parts.moved.clear();
                for (tp, part) in parts.all.drain(..) {
                    session.remove(&tp);
                    let _ = part
                        .tx
                        .try_send(Box::new(Err(FetchError::Other(e.duplicate()))));
                }
            }
        }
    }
}

/// A fetch loop's partitions, and which of them may have changed since it
/// last looked.
#[derive(Default)]
struct Parts {
    all: IndexMap<TopicPartition, Part>,
    /// Those sitting out (`Part::sitting_out` set).
    sitting: HashSet<TopicPartition>,
    /// Fed by an answer since the loop last looked: their buffers may be
    /// full, their shares used up.
    moved: Vec<TopicPartition>,
}

impl Parts {
    fn add(&mut self, session: &mut FetchSession, r: Register, budget: Option<&Arc<MemoryBudget>>) {
        session.add(r.tp.clone(), r.offset, r.leader_epoch, r.topic_id);
        session.set_last_fetched_epoch(&r.tp, r.last_epoch);
        let part = Part {
            tx: r.tx,
            leader_epoch: r.leader_epoch,
            topic_id: r.topic_id,
            sitting_out: None,
            account: budget.map(|b| b.partition()),
        };
        self.sitting.remove(&r.tp);
        self.all.insert(r.tp, part);
    }

    fn remove(&mut self, session: &mut FetchSession, tp: &TopicPartition) {
        session.remove(tp);
        self.sitting.remove(tp);
        self.all.swap_remove(tp);
    }

    /// Looks at every partition.
    fn sweep(&mut self, session: &mut FetchSession) {
        self.moved.clear();
        let closed: Vec<TopicPartition> = self
            .all
            .iter()
            .filter(|(_, p)| p.tx.is_closed())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in &closed {
            self.remove(session, tp);
        }
        for (tp, part) in self.all.iter_mut() {
            part.sit_out_or_return(session, &mut self.sitting, tp);
        }
    }

    /// Looks at the partitions fed since the last look and those sitting
    /// out.
    fn look_at_moved(&mut self, session: &mut FetchSession) {
        let mut moved = std::mem::take(&mut self.moved);
        moved.extend(self.sitting.iter().cloned());
        for tp in &moved {
            let Some(part) = self.all.get_mut(tp) else {
                continue;
            };
            if part.tx.is_closed() {
                self.remove(session, tp);
            } else {
                part.sit_out_or_return(session, &mut self.sitting, tp);
            }
        }
        moved.clear();
        self.moved = moved;
    }

    /// Room left in the shares of the partitions being fetched, in fetched
    /// bytes, counted up to `enough`: the budget's own figures bound it
    /// from below without asking each partition, and usually suffice.
    fn room(&self, budget: &MemoryBudget, enough: usize) -> usize {
        let active = self.all.len() - self.sitting.len();
        let at_least = budget.room_at_least(active);
        if at_least >= enough {
            return at_least;
        }
        let mut room = 0;
        for account in self
            .all
            .values()
            .filter(|p| p.sitting_out.is_none())
            .filter_map(|p| p.account.as_ref())
        {
            room += account.room();
            if room >= enough {
                break;
            }
        }
        room
    }

    /// Hands a partition its answer.
    fn deliver(
        &mut self,
        session: &mut FetchSession,
        tp: TopicPartition,
        result: Result<FetchedPartition, FetchError>,
    ) {
        let failed = result.is_err();
        let Some(part) = self.all.get(&tp) else {
            return;
        };
        // Every partition fed is looked at before the next request and
        // only this task sends, so this cannot be full.
        let gone = match part.tx.try_send(Box::new(result)) {
            Ok(()) => false,
            Err(mpsc::error::TrySendError::Closed(_)) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                debug_assert!(false, "{tp}: fed while full");
                false
            }
        };
        if failed || gone {
            // The partition's owner decides where to resume.
            self.remove(session, &tp);
        } else {
            self.moved.push(tp);
        }
    }
}

impl Part {
    /// Sits a full partition out, or brings a drained one back.
    fn sit_out_or_return(
        &mut self,
        session: &mut FetchSession,
        sitting: &mut HashSet<TopicPartition>,
        tp: &TopicPartition,
    ) {
        let full = self.tx.capacity() == 0 || self.account.as_ref().is_some_and(|a| a.over_share());
        match (full, self.sitting_out) {
            (true, None) => {
                let last_epoch = session.last_fetched_epoch(tp).unwrap_or(-1);
                self.sitting_out = session.remove(tp).map(|offset| (offset, last_epoch));
                if self.sitting_out.is_some() {
                    sitting.insert(tp.clone());
                }
            }
            (false, Some((offset, last_epoch))) => {
                self.sitting_out = None;
                sitting.remove(tp);
                session.add(tp.clone(), offset, self.leader_epoch, self.topic_id);
                session.set_last_fetched_epoch(tp, last_epoch);
            }
            _ => {}
        }
    }
}

/// A broker's fetch loop rides out a lost connection the way Kafka's
/// consumer does — it fetches again from the same positions — instead of
/// failing every partition it serves: a reset, or a request timed out on a
/// half-open connection, would otherwise fail them all (FAILED, re-aligned,
/// two state records each) at every blip. A fault that outlasts a few
/// quick tries, or a request timeout, still reaches the partitions.
struct TransportBlips {
    window: Duration,
    /// Quiet retries in the current streak of transport errors.
    attempts: u32,
    since: Option<tokio::time::Instant>,
}

impl TransportBlips {
    /// Quiet retries per streak.
    const MAX: u32 = 3;

    fn new(request_timeout: Duration) -> Self {
        TransportBlips {
            window: request_timeout,
            attempts: 0,
            since: None,
        }
    }

    /// Whether `e` is a transport error to retry without telling the
    /// partitions (counts the attempt).
    fn retry_quietly(&mut self, e: &KafkaError) -> bool {
        let transport = matches!(
            e,
            KafkaError::Disconnected { .. } | KafkaError::Io { .. } | KafkaError::Timeout { .. }
        );
        let since = *self.since.get_or_insert_with(tokio::time::Instant::now);
        if !transport || self.attempts >= Self::MAX || since.elapsed() >= self.window {
            return false;
        }
        self.attempts += 1;
        true
    }

    fn clear(&mut self) {
        self.attempts = 0;
        self.since = None;
    }
}

/// The largest response a fetch loop asks for: `fetch.response.max.bytes`,
/// and under a budget no more than [`RESPONSE_SHARE_OF_BUDGET`] of it.
fn response_limit(fetch_max: usize, budget: Option<&MemoryBudget>) -> usize {
    match budget {
        Some(b) => fetch_max.min((b.limit() / RESPONSE_SHARE_OF_BUDGET).max(MIN_FETCH_BYTES)),
        None => fetch_max,
    }
}

/// The response size the session's next request asks for.
fn session_max_bytes(session: &FetchSession) -> usize {
    usize::try_from(session.options().max_bytes).unwrap_or(usize::MAX)
}

/// Charges each partition's data to its account. Data of a response shared
/// by several partitions is copied out of the frame first: a slice would
/// keep the whole frame alive until the slowest of them is acknowledged,
/// far beyond what its charge says.
fn charge(results: &mut FetchResults, parts: &IndexMap<TopicPartition, Part>) {
    let shared = results
        .iter()
        .filter(|(_, r)| r.as_ref().is_ok_and(|f| !f.records.is_empty()))
        .count()
        > 1;
    for (tp, result) in results.iter_mut() {
        let (Ok(fetched), Some(account)) = (
            result.as_mut(),
            parts.get(tp).and_then(|p| p.account.as_ref()),
        ) else {
            continue;
        };
        if fetched.records.is_empty() {
            continue;
        }
        if shared {
            fetched.records = bytes::Bytes::copy_from_slice(&fetched.records);
        }
        fetched.charge = account.charge(fetched.records.len());
    }
}

pub(super) struct KafkaPartitionFetch {
    pub(super) rx: mpsc::Receiver<Delivery>,
}

impl PartitionFetch for KafkaPartitionFetch {
    fn next(&mut self) -> BoxFuture<'_, Result<FetchedPartition, FetchError>> {
        Box::pin(async move {
            match self.rx.recv().await {
                Some(r) => *r,
                None => Err(FetchError::Other(KafkaError::Closed)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tokio channel allocates 32 slots when it is made, so what a
    /// partition's delivery channel holds is paid by every open partition.
    #[test]
    fn a_delivery_slot_is_one_pointer() {
        let unboxed = std::mem::size_of::<Result<FetchedPartition, FetchError>>();
        let boxed = std::mem::size_of::<Delivery>();
        println!(
            "fetch delivery slot: {boxed} B (32 slots {} B); unboxed {unboxed} B (32 slots {} B)",
            32 * boxed,
            32 * unboxed
        );
        assert_eq!(boxed, std::mem::size_of::<usize>());
    }

    #[test]
    fn a_response_is_a_sixteenth_of_the_budget_at_most() {
        let ten = 10 * 1_048_576;
        let default_budget = MemoryBudget::new(64 * 1_048_576);
        assert_eq!(response_limit(ten, Some(&default_budget)), 4 * 1_048_576);
        assert_eq!(response_limit(ten, None), ten, "no budget, no cap");
        let large = MemoryBudget::new(1 << 30);
        assert_eq!(
            response_limit(ten, Some(&large)),
            ten,
            "fetch.response.max.bytes still bounds it"
        );
        let tiny = MemoryBudget::new(1_048_576);
        assert_eq!(
            response_limit(ten, Some(&tiny)),
            MIN_FETCH_BYTES,
            "never below the smallest worth a round trip"
        );
    }
}
