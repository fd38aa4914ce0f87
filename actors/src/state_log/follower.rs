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
//! log start holds the image a load of the partition gives. Each session
//! carries the leader epoch of the last batch it read (KIP-320), so a
//! leader whose log parted from it (an unclean election) says so. A leader
//! move, a failed fetch, or a shard left without a leader (looked for again
//! after a backoff) regroups the sessions; the old ones are closed at their
//! brokers, and the epochs carried over. A position the log no longer
//! holds (truncated, or its start moved past it) re-reads the shard from
//! its log start into a fresh image, since a compacted log replayed from
//! its start is the state; the shard is published empty meanwhile. An
//! undecodable record stops that shard (`stopped` says where), never the
//! others, and nothing of its answer is folded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use kmirror_events::{MirrorStateImage, Offset};
use tokio::sync::watch;

use super::reader::{bounded, connect_to_topic, partition_bounds, records_of};
use super::StateLogOptions;
use crate::kafka::fetch::{
    FetchError, FetchOptions, FetchResults, FetchSession, FetchedPartition, IsolationLevel,
    TopicPartition,
};
use crate::kafka::{KafkaClient, KafkaError};

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
    /// Why the shard could not be read at the last try (no leader, a failed
    /// fetch): it is tried again.
    pub error: Option<String>,
    /// Why the shard is no longer followed: a record at `next` that
    /// nothing can decode. Never tried again.
    pub stopped: Option<String>,
}

impl FollowedShard {
    /// Whether every record below `offset` has been read.
    pub fn has_read(&self, offset: Offset) -> bool {
        self.next >= offset
    }

    /// Whether the shard was read to the high watermark of its last answer.
    pub fn caught_up(&self) -> bool {
        self.answered
            && self.error.is_none()
            && self.stopped.is_none()
            && self.next >= self.high_watermark
    }
}

/// Every shard, indexed by state-topic partition. A shard is behind an
/// `Arc` so publishing one shard's change copies nothing of the others; the
/// channel keeps the last state published, so an answer that changes a
/// shard copies that shard's image once.
#[derive(Clone, Debug, Default)]
pub struct FollowedState {
    pub shards: Vec<Arc<FollowedShard>>,
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
/// a dropped follower's task ends too, but nothing waits for it.
pub struct StateFollower {
    state: watch::Receiver<Arc<FollowedState>>,
    stop: watch::Sender<bool>,
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
        };
        let (tx, state) = watch::channel(Arc::new(initial.clone()));
        let (stop, stopping) = watch::channel(false);
        let follow = Follow {
            client,
            topic: options.topic.clone(),
            fetch_bytes: options.fetch_bytes,
            epochs: vec![-1; shards as usize],
            state: initial,
            tx,
            stopping,
        };
        Ok(StateFollower {
            state,
            stop,
            task: tokio::spawn(follow.run()),
        })
    }

    /// The newest state read, and every later one.
    pub fn watch(&self) -> watch::Receiver<Arc<FollowedState>> {
        self.state.clone()
    }

    /// A handle on what is read, with a way to wait until a shard is read
    /// past what it held when asked ([`crate::spread::Followed::read_to_end`]):
    /// its end offsets are listed on a client of their own.
    pub fn followed(&self, client: KafkaClient, topic: &str) -> crate::spread::Followed {
        let topic: Arc<str> = topic.into();
        let end_of: crate::spread::EndOf = Arc::new(move |shard| {
            let (client, tp) = (client.clone(), TopicPartition::new(&topic, shard));
            Box::pin(async move {
                partition_bounds(&client, &tp)
                    .await
                    .map(|(_, end)| end)
                    .map_err(|e| e.to_string())
            })
        });
        let partitions = self.state.borrow().shards.len() as i32;
        crate::spread::Followed::new(self.state.clone(), partitions, end_of)
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

    /// Stops the task and waits until it has: the fetches at the brokers
    /// answered, the brokers' sessions closed (each bounded by the request
    /// timeout).
    pub async fn close(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Why a round of fetching ended.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Ended {
    /// A leader moved: regroup at once.
    Moved,
    /// A fetch or a shard failed, or a shard still has no leader: regroup
    /// after a growing backoff.
    Failed,
    /// The follower is closing.
    Stopping,
}

struct Follow {
    client: KafkaClient,
    topic: String,
    fetch_bytes: i32,
    /// Per shard, the leader epoch of the last batch read (−1 unknown),
    /// carried from a session to the next one.
    epochs: Vec<i32>,
    state: FollowedState,
    tx: watch::Sender<Arc<FollowedState>>,
    stopping: watch::Receiver<bool>,
}

impl Follow {
    async fn run(mut self) {
        let mut failures = 0u32;
        loop {
            let (sessions, complete) = self.sessions().await;
            let ended = if sessions.is_empty() {
                Ended::Failed
            } else {
                self.fetch_until_regroup(sessions, complete, failures).await
            };
            match ended {
                Ended::Stopping => return,
                Ended::Failed => failures += 1,
                Ended::Moved => failures = 0,
            }
            let _ = bounded(
                &self.client,
                "Metadata",
                self.client
                    .refresh_metadata(Some(std::slice::from_ref(&self.topic))),
            )
            .await;
            let mut stopping = self.stopping.clone();
            tokio::select! {
                _ = tokio::time::sleep(self.client.retry_backoff(failures)) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
        }
    }

    /// A session per leader, holding every shard still followed at its
    /// position and last epoch; and whether every such shard has one.
    async fn sessions(&mut self) -> (Vec<FetchSession>, bool) {
        let wanted: Vec<i32> = (0..self.state.shards.len() as i32)
            .filter(|&p| self.state.shards[p as usize].stopped.is_none())
            .collect();
        let asks: Vec<(&str, i32)> = wanted.iter().map(|&p| (self.topic.as_str(), p)).collect();
        let leaders = self.client.leaders(&asks).await;
        let mut sessions: BTreeMap<i32, FetchSession> = BTreeMap::new();
        let mut complete = true;
        for (&p, leader) in wanted.iter().zip(leaders) {
            match leader {
                Ok((node, epoch)) => {
                    let tp = TopicPartition::new(&self.topic, p);
                    let session = sessions.entry(node).or_insert_with(|| {
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
                    });
                    let next = self.state.shards[p as usize].next;
                    session.add(tp.clone(), next as i64, epoch, uuid::Uuid::nil());
                    session.set_last_fetched_epoch(&tp, self.epochs[p as usize]);
                }
                Err(e) => {
                    complete = false;
                    self.change(p, |s| s.error = Some(format!("no leader: {e}")));
                }
            }
        }
        self.publish();
        (sessions.into_values().collect(), complete)
    }

    /// Fetches on every session until a leader moves, a fetch fails, the
    /// follower closes, or (when `complete` is false: a shard has no
    /// session) a backoff passes. Then lets the fetches in flight end,
    /// keeps each session's epochs, and closes the sessions at their
    /// brokers.
    async fn fetch_until_regroup(
        &mut self,
        sessions: Vec<FetchSession>,
        complete: bool,
        failures: u32,
    ) -> Ended {
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
        let regroup = tokio::time::sleep(self.client.retry_backoff(failures + 1));
        tokio::pin!(regroup);
        let mut stopping = self.stopping.clone();
        let mut ended: Option<Ended> = None;
        let mut done = Vec::new();
        loop {
            let answer = tokio::select! {
                next = inflight.next() => match next {
                    Some(answer) => answer,
                    None => break,
                },
                _ = &mut regroup, if !complete && ended.is_none() => {
                    ended = Some(Ended::Failed);
                    continue;
                }
                _ = stopping.wait_for(|s| *s), if ended != Some(Ended::Stopping) => {
                    ended = Some(Ended::Stopping);
                    continue;
                }
            };
            let (mut session, answer) = answer;
            let this = match answer {
                Ok(results) => {
                    let mut worst = None;
                    for (tp, result) in results {
                        worst = worst.max(self.take(&mut session, &tp, result).await);
                    }
                    self.publish();
                    worst
                }
                Err(e) => {
                    tracing::debug!(broker = session.node_id(), error = %e, "state follower: fetch failed");
                    Some(Ended::Failed)
                }
            };
            ended = ended.max(this);
            if ended.is_none() {
                inflight.push(once(self.client.clone(), session));
            } else {
                done.push(session);
            }
        }
        for mut session in done {
            for tp in session.partitions() {
                if let Some(epoch) = session.last_fetched_epoch(tp) {
                    self.epochs[tp.partition as usize] = epoch;
                }
            }
            if let Err(e) = bounded(&self.client, "Fetch", session.close()).await {
                tracing::debug!(broker = session.node_id(), error = %e, "state follower: closing a fetch session");
            }
        }
        ended.unwrap_or(Ended::Moved)
    }

    /// One partition's answer; what it asks of the round, if anything.
    async fn take(
        &mut self,
        session: &mut FetchSession,
        tp: &TopicPartition,
        result: Result<FetchedPartition, FetchError>,
    ) -> Option<Ended> {
        let p = tp.partition;
        match result {
            Ok(fetched) => {
                if let Err(e) = self.fold(tp, &fetched) {
                    tracing::error!(partition = %tp, error = %e, "state follower: shard stopped");
                    session.remove(tp);
                    self.change(p, |s| s.stopped = Some(e));
                }
                None
            }
            Err(FetchError::LeaderChanged { .. }) => Some(Ended::Moved),
            Err(FetchError::OffsetOutOfRange { .. }) | Err(FetchError::Diverged { .. }) => {
                // The log no longer holds what was read up to here: read it
                // again from its start, into a fresh image.
                match partition_bounds(&self.client, tp).await {
                    Ok((log_start, end)) => {
                        tracing::warn!(partition = %tp, log_start, "state follower: log truncated or moved; reading the shard again");
                        self.change(p, |s| {
                            *s = FollowedShard {
                                next: log_start,
                                high_watermark: end,
                                answered: true,
                                ..FollowedShard::default()
                            }
                        });
                        self.epochs[p as usize] = -1;
                        session.seek(tp, log_start as i64);
                        session.set_last_fetched_epoch(tp, -1);
                        None
                    }
                    Err(e) => {
                        self.change(p, |s| s.error = Some(e.to_string()));
                        Some(Ended::Failed)
                    }
                }
            }
            Err(FetchError::Other(e)) => {
                self.change(p, |s| s.error = Some(e.to_string()));
                Some(Ended::Failed)
            }
        }
    }

    /// Folds one answer into its shard, as a load replays the partition:
    /// every record of it decoded first, so an undecodable one leaves the
    /// shard as it was.
    fn fold(&mut self, tp: &TopicPartition, fetched: &FetchedPartition) -> Result<(), String> {
        let shard = &self.state.shards[tp.partition as usize];
        let at = shard.next;
        let (raws, next) =
            records_of(fetched, at, Offset::MAX).map_err(|e| format!("at offset {at}: {e}"))?;
        let entries = raws
            .iter()
            .map(|raw| raw.entry(tp).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, String>>()?;
        let high_watermark = fetched.high_watermark.max(0) as Offset;
        if entries.is_empty()
            && next == at
            && shard.answered
            && shard.error.is_none()
            && shard.high_watermark == high_watermark
        {
            return Ok(());
        }
        self.change(tp.partition, |s| {
            for e in entries {
                s.image.replay(e.offset, e.record);
            }
            s.next = next;
            s.high_watermark = high_watermark;
            s.answered = true;
            s.error = None;
        });
        Ok(())
    }

    fn change(&mut self, p: i32, f: impl FnOnce(&mut FollowedShard)) {
        f(Arc::make_mut(&mut self.state.shards[p as usize]));
    }

    /// Publishes the state if a shard changed since the last time.
    fn publish(&mut self) {
        let changed = {
            let published = self.tx.borrow();
            published
                .shards
                .iter()
                .zip(&self.state.shards)
                .any(|(a, b)| !Arc::ptr_eq(a, b))
        };
        if changed {
            self.tx.send_replace(Arc::new(self.state.clone()));
        }
    }
}
