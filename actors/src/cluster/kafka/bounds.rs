//! Log bounds asked one partition at a time, sent many at a time.
//!
//! Every partition's alignment asks for its source and destination bounds
//! (two ListOffsets each, one partition per request): a first start of
//! 10 000 partitions sent tens of thousands of requests, one partition each.
//! [`BoundsFlight`] is a group commit: the asks made while a batch is in
//! flight go together in the next one, as `bounds_many` (two requests per
//! leader). The same flight carries a destination's settled bounds
//! (`KafkaCluster::settled_bounds`: the bounds and the leader's log end,
//! one OffsetForLeaderEpoch per leader more). There is a flight per leader
//! ([`LeaderFlights`]): a batch lasts as long as its slowest request, and a
//! broker that answers late or not at all (one kmirror cannot reach, until
//! the request times out) must hold back no other broker's partitions.

use std::collections::HashMap;
use std::future::Future;
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::cluster::LogBounds;
use crate::kafka::admin::{Admin, OffsetSpec};
use crate::kafka::fetch::{IsolationLevel, TopicPartition};
use crate::kafka::KafkaError;

type Answer<A> = Result<A, KafkaError>;
type Waiting<A> = Vec<(TopicPartition, oneshot::Sender<Answer<A>>)>;

/// A [`BoundsFlight`] per leader broker, made on first use.
pub(super) struct LeaderFlights<A = LogBounds> {
    flights: Mutex<HashMap<i32, Arc<BoundsFlight<A>>>>,
}

impl<A> Default for LeaderFlights<A> {
    fn default() -> Self {
        LeaderFlights {
            flights: Mutex::default(),
        }
    }
}

impl<A> LeaderFlights<A> {
    /// The flight of the partitions `leader` leads.
    pub(super) fn of(&self, leader: i32) -> Arc<BoundsFlight<A>> {
        Arc::clone(self.flights.lock().unwrap().entry(leader).or_default())
    }
}

/// The asks waiting for the next batch, and the turn of the batch in
/// flight. Shared (`Arc`) by a cluster's callers. `A` is what one
/// partition's answer holds.
pub(super) struct BoundsFlight<A = LogBounds> {
    waiting: Mutex<Waiting<A>>,
    turn: tokio::sync::Mutex<()>,
    #[cfg(test)]
    batches: AtomicU64,
}

impl<A> Default for BoundsFlight<A> {
    fn default() -> Self {
        BoundsFlight {
            waiting: Mutex::default(),
            turn: tokio::sync::Mutex::default(),
            #[cfg(test)]
            batches: AtomicU64::default(),
        }
    }
}

impl<A: Clone + Send + 'static> BoundsFlight<A> {
    /// `tp`'s bounds, from the next batch `send` carries. The ask that
    /// finds nobody waiting spawns that batch: once the batch before it has
    /// answered, it takes every ask waiting by then, each partition once
    /// (Kafka refuses a request naming a partition twice, and two callers
    /// may ask for one partition together). The batch runs as a task of its
    /// own, so a caller that gives up (a pump stopped) drops nobody else's
    /// answer.
    pub(super) async fn bounds<F, Fut>(self: &Arc<Self>, tp: &TopicPartition, send: F) -> Answer<A>
    where
        F: FnOnce(Vec<TopicPartition>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<Answer<A>>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut waiting = self.waiting.lock().unwrap();
            waiting.push((tp.clone(), tx));
            waiting.len() == 1
        };
        if first {
            let flight = Arc::clone(self);
            tokio::spawn(async move {
                // Dropped before it took the asks (its runtime shutting
                // down), the batch lets them go: they err, and the next ask
                // finds nobody waiting and sends anew.
                let unsent = LetGoUnsent(&flight.waiting);
                let _turn = flight.turn.lock().await;
                let batch = std::mem::take(&mut *flight.waiting.lock().unwrap());
                std::mem::forget(unsent);
                #[cfg(test)]
                flight.batches.fetch_add(1, Ordering::Relaxed);
                let mut tps: Vec<TopicPartition> = Vec::new();
                let mut place: HashMap<TopicPartition, usize> = HashMap::new();
                let waiters: Vec<_> = batch
                    .into_iter()
                    .map(|(tp, tx)| {
                        let i = *place.entry(tp.clone()).or_insert_with(|| {
                            tps.push(tp);
                            tps.len() - 1
                        });
                        (i, tx)
                    })
                    .collect();
                let answers = send(tps).await;
                for (i, tx) in waiters {
                    let answer = match answers.get(i) {
                        Some(Ok(a)) => Ok(a.clone()),
                        Some(Err(e)) => Err(e.duplicate()),
                        None => continue,
                    };
                    let _ = tx.send(answer);
                }
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(KafkaError::Unknown(format!(
                "log bounds of {tp}: the batch asking for them ended without an answer"
            )))
        })
    }

    /// Batches sent so far.
    #[cfg(test)]
    fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
}

/// Empties a flight's queue when dropped.
struct LetGoUnsent<'a, A>(&'a Mutex<Waiting<A>>);

impl<A> Drop for LetGoUnsent<'_, A> {
    fn drop(&mut self) {
        if let Ok(mut waiting) = self.0.lock() {
            waiting.clear();
        }
    }
}

/// Both ends of a partition's log, asked alone (with [`Admin`]'s retries).
pub(super) async fn bounds(admin: &Admin, tp: &TopicPartition) -> Result<LogBounds, KafkaError> {
    let start = admin
        .list_offset(
            &tp.topic,
            tp.partition,
            OffsetSpec::Earliest,
            IsolationLevel::ReadUncommitted,
        )
        .await?;
    let end = admin
        .list_offset(
            &tp.topic,
            tp.partition,
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .await?;
    Ok(LogBounds {
        log_start: start.offset,
        end: end.offset,
        leader_epoch: end.leader_epoch,
    })
}

/// One partition's answer from `many`, in a batch with the other
/// partitions of its leader asked for meanwhile ([`LeaderFlights`]). A
/// partition the batch could not answer for a reason a retry may mend (a
/// moved leader, a dropped connection), or whose leader is unknown, is
/// asked `alone`, with [`Admin`]'s retries — outside the batch, which holds
/// back the next one until it ends.
async fn in_batch<A, M, MFut>(
    flights: &LeaderFlights<A>,
    admin: &Admin,
    tp: &TopicPartition,
    many: M,
    alone: impl Future<Output = Result<A, KafkaError>>,
) -> Result<A, KafkaError>
where
    A: Clone + Send + 'static,
    M: FnOnce(Admin, Vec<TopicPartition>) -> MFut + Send + 'static,
    MFut: Future<Output = Vec<Result<A, KafkaError>>> + Send + 'static,
{
    let Ok((leader, _)) = admin.client().leader(&tp.topic, tp.partition).await else {
        return alone.await;
    };
    let batch_admin = admin.clone();
    let batched = flights
        .of(leader)
        .bounds(tp, move |tps| many(batch_admin, tps))
        .await;
    match batched {
        Err(e) if e.awaits_leader() => alone.await,
        answer => answer,
    }
}

/// Both ends of a partition's log, asked in a batch ([`in_batch`]).
pub(super) async fn batched_bounds(
    flights: &LeaderFlights,
    admin: &Admin,
    tp: &TopicPartition,
) -> Result<LogBounds, KafkaError> {
    let many =
        |admin: Admin, tps: Vec<TopicPartition>| async move { bounds_many(&admin, &tps).await };
    in_batch(flights, admin, tp, many, bounds(admin, tp)).await
}

/// A destination partition's bounds and its leader's log end (the end of
/// the current leader epoch): settled once the high watermark is there.
#[derive(Clone)]
pub(super) struct Settling {
    pub(super) bounds: LogBounds,
    pub(super) log_end: i64,
}

/// [`Settling`] of one partition, asked alone (with [`Admin`]'s retries).
async fn settling(admin: &Admin, tp: &TopicPartition) -> Result<Settling, KafkaError> {
    let bounds = bounds(admin, tp).await?;
    let log_end = if bounds.leader_epoch < 0 {
        bounds.end
    } else {
        // For the current epoch the leader answers with its log end offset,
        // which is ahead of the high watermark while a batch is appended but
        // not yet replicated.
        admin
            .offset_for_leader_epoch(&tp.topic, tp.partition, bounds.leader_epoch)
            .await?
            .1
    };
    Ok(Settling { bounds, log_end })
}

/// [`Settling`] of many partitions: two ListOffsets and one
/// OffsetForLeaderEpoch per leader.
async fn settling_many(admin: &Admin, tps: &[TopicPartition]) -> Vec<Result<Settling, KafkaError>> {
    let bounds = bounds_many(admin, tps).await;
    let asked: Vec<(String, i32, i32)> = tps
        .iter()
        .zip(&bounds)
        .filter_map(|(tp, b)| {
            let b = b.as_ref().ok().filter(|b| b.leader_epoch >= 0)?;
            Some((tp.topic.to_string(), tp.partition, b.leader_epoch))
        })
        .collect();
    let mut ends = admin.offset_for_leader_epoch_many(&asked).await.into_iter();
    bounds
        .into_iter()
        .map(|bounds| {
            let bounds = bounds?;
            let log_end = match bounds.leader_epoch {
                e if e < 0 => bounds.end,
                _ => ends.next().expect("an answer for each partition asked")?.1,
            };
            Ok(Settling { bounds, log_end })
        })
        .collect()
}

/// Both ends of many partitions' logs: two requests per leader.
async fn bounds_many(admin: &Admin, tps: &[TopicPartition]) -> Vec<Result<LogBounds, KafkaError>> {
    let asked: Vec<(String, i32)> = tps
        .iter()
        .map(|tp| (tp.topic.to_string(), tp.partition))
        .collect();
    let (starts, ends) = tokio::join!(
        admin.list_offsets_many(
            &asked,
            OffsetSpec::Earliest,
            IsolationLevel::ReadUncommitted
        ),
        admin.list_offsets_many(&asked, OffsetSpec::Latest, IsolationLevel::ReadUncommitted),
    );
    starts
        .into_iter()
        .zip(ends)
        .map(|(start, end)| {
            let (start, end) = (start?, end?);
            Ok(LogBounds {
                log_start: start.offset,
                end: end.offset,
                leader_epoch: end.leader_epoch,
            })
        })
        .collect()
}

/// [`Settling`] of one partition, asked in a batch ([`in_batch`]).
pub(super) async fn batched_settling(
    flights: &LeaderFlights<Settling>,
    admin: &Admin,
    tp: &TopicPartition,
) -> Result<Settling, KafkaError> {
    let many =
        |admin: Admin, tps: Vec<TopicPartition>| async move { settling_many(&admin, &tps).await };
    in_batch(flights, admin, tp, many, settling(admin, tp)).await
}

/// [`bounds_many`], and each partition refused for a reason a retry may
/// mend asked again alone, all at once: the risk sample of thousands of
/// partitions asks them together.
pub(super) async fn bounds_many_retrying(
    admin: &Admin,
    tps: &[TopicPartition],
) -> Vec<Result<LogBounds, KafkaError>> {
    let mut answers = bounds_many(admin, tps).await;
    let retry: Vec<usize> = (0..answers.len())
        .filter(|&i| answers[i].as_ref().is_err_and(KafkaError::awaits_leader))
        .collect();
    let retried =
        futures_util::future::join_all(retry.iter().map(|&i| bounds(admin, &tps[i]))).await;
    for (i, answer) in retry.into_iter().zip(retried) {
        answers[i] = answer;
    }
    answers
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bounds_of(tp: &TopicPartition) -> LogBounds {
        LogBounds {
            log_start: 0,
            end: i64::from(tp.partition) * 10,
            leader_epoch: 1,
        }
    }

    /// 200 asks at once: each gets its own partition's answer, and they
    /// share a few batches (the first alone, the rest in the next).
    #[tokio::test]
    async fn asks_made_together_share_a_batch_and_get_their_own_answers() {
        let flight = Arc::new(BoundsFlight::default());
        let asks = (0..200).map(|p| {
            let flight = Arc::clone(&flight);
            tokio::spawn(async move {
                let tp = TopicPartition::new("t", p);
                let answer = flight
                    .bounds(&tp, |tps| async move {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        tps.iter().map(|tp| Ok(bounds_of(tp))).collect()
                    })
                    .await;
                (tp, answer)
            })
        });
        for ask in futures_util::future::join_all(asks).await {
            let (tp, answer) = ask.unwrap();
            assert_eq!(answer.unwrap(), bounds_of(&tp));
        }
        assert!(flight.batches() <= 3, "{} batches", flight.batches());
    }

    /// A batch that answers short (or fails before answering) leaves its
    /// asks with an error, not waiting forever; the next ask sends anew.
    #[tokio::test]
    async fn an_ask_left_unanswered_errs_and_the_next_sends_anew() {
        let flight = Arc::new(BoundsFlight::default());
        let tp = TopicPartition::new("t", 3);
        let lost = flight.bounds(&tp, |_| async { Vec::new() }).await;
        assert!(lost.is_err());
        let answered = flight
            .bounds(&tp, |tps| async move {
                tps.iter().map(|tp| Ok(bounds_of(tp))).collect()
            })
            .await;
        assert_eq!(answered.unwrap(), bounds_of(&tp));
        assert_eq!(flight.batches(), 2);
    }

    async fn answer_each(tps: Vec<TopicPartition>) -> Vec<Answer<LogBounds>> {
        tps.iter().map(|tp| Ok(bounds_of(tp))).collect()
    }

    /// Two callers asking for one partition together (a pump and a verify,
    /// or a pump restarted before its first ask was sent): the batch names
    /// it once — Kafka refuses a request naming a partition twice, and
    /// both asks failed — and both get its answer.
    #[tokio::test]
    async fn a_partition_asked_twice_is_sent_once_and_both_get_it() {
        let flight = Arc::new(BoundsFlight::default());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let held = flight.turn.lock().await;
        let asks: Vec<_> = [1, 1, 2]
            .into_iter()
            .map(|p| {
                let (flight, sent) = (Arc::clone(&flight), Arc::clone(&sent));
                tokio::spawn(async move {
                    let tp = TopicPartition::new("t", p);
                    let answer = flight
                        .bounds(&tp, move |tps| {
                            sent.lock().unwrap().push(tps.clone());
                            answer_each(tps)
                        })
                        .await;
                    (tp, answer)
                })
            })
            .collect();
        while flight.waiting.lock().unwrap().len() < 3 {
            tokio::task::yield_now().await;
        }
        drop(held);
        for ask in futures_util::future::join_all(asks).await {
            let (tp, answer) = ask.unwrap();
            assert_eq!(answer.unwrap(), bounds_of(&tp));
        }
        assert_eq!(
            *sent.lock().unwrap(),
            vec![vec![
                TopicPartition::new("t", 1),
                TopicPartition::new("t", 2)
            ]]
        );
    }

    /// A batch dropped before it took its asks (its runtime shut down)
    /// lets them go: the next ask finds nobody waiting and sends anew,
    /// where it waited forever behind the lost one.
    #[test]
    fn a_batch_dropped_before_sending_lets_the_next_ask_send() {
        let flight = Arc::new(BoundsFlight::default());
        let held = flight.turn.try_lock().unwrap();
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let first = runtime();
        let asking = Arc::clone(&flight);
        first.block_on(async move {
            tokio::spawn(async move {
                let _ = asking
                    .bounds(&TopicPartition::new("t", 1), answer_each)
                    .await;
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        drop(first);
        drop(held);
        let answered = runtime().block_on(async {
            tokio::time::timeout(
                Duration::from_secs(5),
                flight.bounds(&TopicPartition::new("t", 2), answer_each),
            )
            .await
        });
        let answered = answered.expect("the next ask was sent");
        assert_eq!(answered.unwrap(), bounds_of(&TopicPartition::new("t", 2)));
    }
}
