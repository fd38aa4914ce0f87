//! Log bounds asked one partition at a time, sent many at a time.
//!
//! Every partition's alignment asks for its source and destination bounds
//! (two ListOffsets each, one partition per request): a first start of
//! 10 000 partitions sent tens of thousands of requests, one partition each.
//! [`BoundsFlight`] is a group commit: the asks made while a batch is in
//! flight go together in the next one, as `bounds_many` (two requests per
//! leader).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::cluster::LogBounds;
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;

type Answer = Result<LogBounds, KafkaError>;

/// The asks waiting for the next batch, and the turn of the batch in
/// flight. Shared (`Arc`) by a cluster's callers.
#[derive(Default)]
pub(super) struct BoundsFlight {
    waiting: Mutex<Vec<(TopicPartition, oneshot::Sender<Answer>)>>,
    turn: tokio::sync::Mutex<()>,
    batches: AtomicU64,
}

impl BoundsFlight {
    /// `tp`'s bounds, from the next batch `send` carries. The ask that
    /// finds nobody waiting spawns that batch: once the batch before it has
    /// answered, it takes every ask waiting by then. The batch runs as a
    /// task of its own, so a caller that gives up (a pump stopped) drops
    /// nobody else's answer.
    pub(super) async fn bounds<F, Fut>(self: &Arc<Self>, tp: &TopicPartition, send: F) -> Answer
    where
        F: FnOnce(Vec<TopicPartition>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<Answer>> + Send + 'static,
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
                let _turn = flight.turn.lock().await;
                let batch = std::mem::take(&mut *flight.waiting.lock().unwrap());
                flight.batches.fetch_add(1, Ordering::Relaxed);
                let (tps, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
                for (tx, answer) in answers.into_iter().zip(send(tps).await) {
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
    pub(super) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
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
}
