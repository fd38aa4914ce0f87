//! [`StateFollower`]: every shard of the state topic, folded read-only and
//! kept current, on every node.
//!
//! Why: a mirror's partitions are to be spread across nodes the way the
//! KIP spreads them across brokers — a partition's records in the shard its
//! key hashes to, written by that shard's owner, while the mirror's
//! topic-level records stay in its coordinator's shard. The two sides then
//! talk through the state topic, as the KIP's coordinator and partition
//! leaders do: the partition's host reads its desired state from the
//! coordinator's shard, and the coordinator reads the partitions' states
//! from theirs. This is that reading, for every shard at once; it writes
//! nothing, so it needs no fence and no membership.
//!
//! How: one fetch session per leader of the state topic's partitions, on a
//! client of its own (a parked fetch holds its connection), incremental so
//! that quiet shards cost nothing, each answer folded into its shard's
//! image with the same `replay` a load uses — so a shard followed from its
//! log start holds the image a load of the partition gives. A leader move
//! regroups the sessions; a position the log no longer holds (an unclean
//! election truncated it, or its start moved past it) re-reads the shard
//! from its log start into a fresh image, since a compacted log replayed
//! from its start is the state. An undecodable record stops that shard (its
//! `error` says where), never the others.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use kmirror_events::{MirrorStateImage, Offset};
use tokio::sync::watch;

use super::reader::{bounded, connect_to_topic, partition_bounds};
use super::StateLogOptions;
use crate::kafka::batch::decode_records;
use crate::kafka::fetch::{
    FetchError, FetchOptions, FetchResults, FetchSession, FetchedPartition, IsolationLevel,
    TopicPartition,
};
use crate::kafka::{KafkaClient, KafkaError};
use crate::state_topic::decode_stamped;

/// How long a fetch may wait at the broker for a record: the most a
/// follower lags a quiet shard's newest record by, beyond the round trip.
const MAX_WAIT: Duration = Duration::from_millis(250);

/// One shard as this node last read it.
#[derive(Clone, Debug, Default)]
pub struct FollowedShard {
    /// The records read, folded.
    pub image: MirrorStateImage,
    /// The next offset to read: every record below it is in `image`.
    pub next: Offset,
    /// The partition's high watermark at the last answer.
    pub high_watermark: Offset,
    /// Whether any answer for the shard came (a session's first answer
    /// carries every partition it asked for).
    pub answered: bool,
    /// Why the shard is not being followed (an undecodable record), or why
    /// it could not be reached at the last try (retried).
    pub error: Option<String>,
}

impl FollowedShard {
    /// Whether every record below `offset` has been read.
    pub fn has_read(&self, offset: Offset) -> bool {
        self.next >= offset
    }

    /// Whether the shard was read to the high watermark of its last answer.
    pub fn caught_up(&self) -> bool {
        self.answered && self.error.is_none() && self.next >= self.high_watermark
    }
}

/// Every shard, indexed by state-topic partition. A shard is behind an
/// `Arc` so publishing one shard's change copies nothing of the others (the
/// changed shard's image is copied once per answer while a reader holds the
/// previous state).
#[derive(Clone, Debug, Default)]
pub struct FollowedState {
    pub shards: Vec<Arc<FollowedShard>>,
    /// Answers folded so far (each publishes once): a reader that saw one
    /// count knows a later one came from a newer answer.
    pub answers: u64,
}

impl FollowedState {
    pub fn shard(&self, shard: i32) -> Option<&FollowedShard> {
        usize::try_from(shard)
            .ok()
            .and_then(|i| self.shards.get(i))
            .map(|s| &**s)
    }
}

/// The follower's task and what it publishes. Close it and await the close:
/// a dropped follower's task would go on fetching.
pub struct StateFollower {
    state: watch::Receiver<Arc<FollowedState>>,
    task: tokio::task::JoinHandle<()>,
}

impl StateFollower {
    /// Starts following every partition of the state topic from its log
    /// start. The topic must exist (the follower creates nothing); a
    /// missing topic, or a cluster that cannot be reached, is an error.
    pub async fn start(options: &StateLogOptions) -> Result<Self, String> {
        let (client, shards) = connect_to_topic(&options.client, &options.topic).await?;
        let initial = FollowedState {
            shards: (0..shards).map(|_| Arc::default()).collect(),
            answers: 0,
        };
        let (tx, state) = watch::channel(Arc::new(initial.clone()));
        let follow = Follow {
            client,
            topic: options.topic.clone(),
            fetch_bytes: options.fetch_bytes,
            state: initial,
            tx,
        };
        Ok(StateFollower {
            state,
            task: tokio::spawn(follow.run()),
        })
    }

    /// The newest state read, and every later one.
    pub fn watch(&self) -> watch::Receiver<Arc<FollowedState>> {
        self.state.clone()
    }

    /// Waits until `ready` holds of what was read, at most `limit`.
    pub async fn wait_for(
        &self,
        limit: Duration,
        ready: impl FnMut(&Arc<FollowedState>) -> bool,
    ) -> Option<Arc<FollowedState>> {
        let mut rx = self.state.clone();
        let seen = tokio::time::timeout(limit, rx.wait_for(ready)).await;
        match seen {
            Ok(Ok(state)) => Some(Arc::clone(&state)),
            _ => None,
        }
    }

    /// Stops the task and waits until it has stopped: no fetch of it is
    /// left at a broker's door afterwards.
    pub async fn close(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

struct Follow {
    client: KafkaClient,
    topic: String,
    fetch_bytes: i32,
    state: FollowedState,
    tx: watch::Sender<Arc<FollowedState>>,
}

impl Follow {
    async fn run(mut self) {
        let mut attempt = 0u32;
        loop {
            let sessions = self.sessions().await;
            if sessions.is_empty() {
                attempt += 1;
            } else {
                attempt = 0;
                self.fetch_until_moved(sessions).await;
            }
            let _ = bounded(
                &self.client,
                "Metadata",
                self.client
                    .refresh_metadata(Some(std::slice::from_ref(&self.topic))),
            )
            .await;
            tokio::time::sleep(self.client.retry_backoff(attempt)).await;
        }
    }

    /// A session per leader, holding every shard that is still followed
    /// (one stopped by a bad record is not) at its position.
    async fn sessions(&mut self) -> Vec<FetchSession> {
        let wanted: Vec<i32> = (0..self.state.shards.len() as i32)
            .filter(|&p| !self.stopped(p))
            .collect();
        let asks: Vec<(&str, i32)> = wanted.iter().map(|&p| (self.topic.as_str(), p)).collect();
        let leaders = self.client.leaders(&asks).await;
        let mut sessions: BTreeMap<i32, FetchSession> = BTreeMap::new();
        for (&p, leader) in wanted.iter().zip(leaders) {
            match leader {
                Ok((node, epoch)) => {
                    let next = self.state.shards[p as usize].next;
                    sessions
                        .entry(node)
                        .or_insert_with(|| {
                            FetchSession::new(
                                self.client.clone(),
                                node,
                                FetchOptions {
                                    isolation: IsolationLevel::ReadUncommitted,
                                    max_wait: MAX_WAIT,
                                    min_bytes: 1,
                                    max_bytes: self.fetch_bytes,
                                    partition_max_bytes: self.fetch_bytes,
                                    incremental: true,
                                },
                            )
                        })
                        .add(
                            TopicPartition::new(&self.topic, p),
                            next as i64,
                            epoch,
                            uuid::Uuid::nil(),
                        );
                }
                Err(e) => self.set_error(p, format!("no leader: {e}")),
            }
        }
        sessions.into_values().collect()
    }

    /// Fetches on every session until one loses a leader or its broker:
    /// then lets the others' fetches in flight end, and returns.
    async fn fetch_until_moved(&mut self, sessions: Vec<FetchSession>) {
        async fn once(
            client: KafkaClient,
            mut s: FetchSession,
        ) -> (FetchSession, Result<FetchResults, KafkaError>) {
            let r = bounded(&client, "Fetch", s.fetch()).await;
            (s, r)
        }
        let mut inflight: FuturesUnordered<_> = sessions
            .into_iter()
            .map(|s| once(self.client.clone(), s))
            .collect();
        let mut moved = false;
        while let Some((mut session, answer)) = inflight.next().await {
            match answer {
                Ok(results) => {
                    for (tp, result) in results {
                        moved |= self.take(&mut session, &tp, result).await;
                    }
                    self.publish();
                }
                Err(e) => {
                    tracing::debug!(broker = session.node_id(), error = %e, "state follower: fetch failed");
                    moved = true;
                }
            }
            if !moved {
                inflight.push(once(self.client.clone(), session));
            }
        }
    }

    /// One partition's answer; true if the session lost it to a leader move.
    async fn take(
        &mut self,
        session: &mut FetchSession,
        tp: &TopicPartition,
        result: Result<FetchedPartition, FetchError>,
    ) -> bool {
        let p = tp.partition;
        match result {
            Ok(fetched) => {
                if let Err(e) = self.fold(tp, &fetched) {
                    tracing::error!(partition = %tp, error = %e, "state follower: shard stopped");
                    session.remove(tp);
                    self.set_error(p, format!("{STOPPED}{e}"));
                }
                false
            }
            Err(FetchError::LeaderChanged { .. }) => true,
            Err(FetchError::OffsetOutOfRange { .. }) | Err(FetchError::Diverged { .. }) => {
                // The log no longer holds what was read up to here: read it
                // again from its start, into a fresh image.
                match partition_bounds(&self.client, tp).await {
                    Ok((log_start, _)) => {
                        tracing::warn!(partition = %tp, log_start, "state follower: log truncated or moved; reading the shard again");
                        let shard = Arc::make_mut(&mut self.state.shards[p as usize]);
                        *shard = FollowedShard {
                            next: log_start,
                            ..FollowedShard::default()
                        };
                        session.seek(tp, log_start as i64);
                        false
                    }
                    Err(e) => {
                        self.set_error(p, e.to_string());
                        true
                    }
                }
            }
            Err(FetchError::Other(e)) => {
                self.set_error(p, e.to_string());
                true
            }
        }
    }

    /// Folds one answer into its shard, as a load replays the partition:
    /// control batches (fence markers) skipped, records below the position
    /// (a batch the cleaner merged) not read twice.
    fn fold(&mut self, tp: &TopicPartition, fetched: &FetchedPartition) -> Result<(), String> {
        let shard = Arc::make_mut(&mut self.state.shards[tp.partition as usize]);
        shard.high_watermark = fetched.high_watermark.max(0) as Offset;
        shard.answered = true;
        shard.error = None;
        for batch in fetched.batches() {
            let batch = batch.map_err(|e| format!("at offset {}: {e}", shard.next))?;
            let batch_end = batch.next_offset() as Offset;
            if !batch.is_control() && batch_end > shard.next {
                let records = decode_records(&batch)
                    .map_err(|e| format!("batch at {}: {e}", batch.base_offset()))?;
                for r in records.records {
                    let offset = (batch.base_offset() + r.offset_delta as i64) as Offset;
                    if offset < shard.next {
                        continue;
                    }
                    let (record, _) =
                        decode_stamped(r.key.as_deref(), r.value.as_deref(), r.timestamp)
                            .map_err(|e| format!("undecodable record at offset {offset}: {e}"))?;
                    shard.image.replay(offset, record);
                }
            }
            shard.next = shard.next.max(batch_end);
        }
        Ok(())
    }

    fn stopped(&self, p: i32) -> bool {
        self.state.shards[p as usize]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with(STOPPED))
    }

    fn set_error(&mut self, p: i32, error: String) {
        let shard = Arc::make_mut(&mut self.state.shards[p as usize]);
        shard.error = Some(error);
        self.publish();
    }

    fn publish(&mut self) {
        self.state.answers += 1;
        self.tx.send_replace(Arc::new(self.state.clone()));
    }
}

const STOPPED: &str = "stopped: ";
