//! The status board: where every PartitionActor of a mirror publishes what
//! describe, `--json`, the metrics and the status page show of it, so a
//! reader never asks an actor through its mailbox.
//!
//! An actor handles one message at a time, and some of its handlers wait on
//! the clusters (STOPPING's final group-offset pass and failover report, a
//! state write): a describe queued behind one waited as long — on a frozen
//! source, up to the final pass's timeout — and at 1 000 partitions a
//! describe cost a thousand mailbox hops on arbiters busy copying. Here the
//! actor publishes its own part (the recorded state, its pending retry,
//! whether a pump ran) whenever it changes, and the figures the pump and the
//! risk sampler already keep behind their own short locks are read in
//! place; a describe is one read lock and a clone per partition.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use kmirror_events::{
    KeylessCopy, MirrorPartitionKey, MirrorPartitionStateValue, PartitionState, TopicId,
};

use super::context::Progress;
use super::risk::{Risk, RiskView};
use crate::kafka::produce::is_keyless_refusal;
use crate::spread::HostedPosition;

/// A partition's state and live figures, as describe and metrics show them.
#[derive(Clone, Debug)]
pub struct PartitionStatus {
    pub key: MirrorPartitionKey,
    pub topic: String,
    pub state: PartitionState,
    pub retry_attempt: i16,
    pub error: Option<String>,
    pub progress: Progress,
    /// When the pending retry of a FAILED partition fires (epoch ms): the
    /// timer's own deadline, so a status page can count down to it.
    pub next_retry_at_ms: Option<i64>,
    /// RPO now and the retention margin (see [`super::risk`]).
    pub risk: RiskView,
}

/// What only the actor knows, as it last published it.
#[derive(Clone, Debug)]
pub struct ActorPart {
    /// The partition state as recorded (durable) and adopted by the actor.
    pub state: MirrorPartitionStateValue,
    /// See [`PartitionStatus::next_retry_at_ms`].
    pub next_retry_at_ms: Option<i64>,
    /// Whether a pump of this process has run for the partition, so its
    /// progress is the position (see [`ran`]).
    pub pumped: bool,
}

/// Whether the copy's position is the pump's progress (a pump of this
/// process placed it) rather than the map and destination.
pub fn ran(pumped: bool, state: PartitionState, p: &Progress) -> bool {
    pumped
        && (p.source_high_watermark > 0
            || p.destination_offset > 0
            || state == PartitionState::Mirroring)
}

struct Entry {
    topic: String,
    actor: Mutex<ActorPart>,
    progress: Arc<Mutex<Progress>>,
    risk: Risk,
}

impl Entry {
    fn status(&self, key: &MirrorPartitionKey) -> PartitionStatus {
        let own = self.actor.lock().unwrap().clone();
        let progress = self.progress.lock().unwrap().clone();
        let risk = self.risk.view(
            own.state.state,
            &progress,
            ran(own.pumped, own.state.state, &progress),
        );
        PartitionStatus {
            key: key.clone(),
            topic: self.topic.clone(),
            state: own.state.state,
            retry_attempt: own.state.retry_attempt,
            error: own.state.error_message,
            progress,
            next_retry_at_ms: own.next_retry_at_ms,
            risk,
        }
    }
}

/// One mirror's board, shared by its MirrorActor, its PartitionActors and
/// the node's reads. Cloning shares it.
#[derive(Clone, Default)]
pub struct StatusBoard {
    entries: Arc<RwLock<HashMap<MirrorPartitionKey, Arc<Entry>>>>,
}

impl StatusBoard {
    /// Where each partition's copy is: what a switchover drains by, read
    /// from this board or reported by a host (`Node::hosted_copies`).
    pub fn positions(&self) -> std::collections::BTreeMap<MirrorPartitionKey, HostedPosition> {
        self.statuses()
            .into_iter()
            .map(|s| {
                let position = HostedPosition {
                    state: s.state,
                    source_offset: s.progress.source_offset,
                    error: s.error,
                };
                (s.key, position)
            })
            .collect()
    }

    /// Every partition on the board, sorted by topic and partition.
    pub fn statuses(&self) -> Vec<PartitionStatus> {
        // The entries are copied out first: the read lock is not held while
        // each partition's own locks are taken.
        let entries: Vec<(MirrorPartitionKey, Arc<Entry>)> = self
            .entries
            .read()
            .unwrap()
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        let mut out: Vec<PartitionStatus> = entries.iter().map(|(k, e)| e.status(k)).collect();
        out.sort_by(|a, b| (&a.topic, a.key.partition).cmp(&(&b.topic, b.key.partition)));
        out
    }

    /// Where each topic's copy stands for the keyless hold the metadata
    /// sync keeps (`kmirror_events::KEYLESS_HOLD`), with how many of its
    /// partitions are on the board (fewer than the topic has is not caught
    /// up): each topic's partitions' [`Self::keyless_partitions`] together
    /// ([`KeylessCopy::and`]).
    pub fn keyless_copies(&self) -> HashMap<TopicId, (KeylessCopy, usize)> {
        let mut out = HashMap::new();
        for (key, copy) in self.keyless_partitions() {
            let (topic, n) = out
                .entry(key.topic_id)
                .or_insert((KeylessCopy::CaughtUp, 0));
            *n += 1;
            *topic = topic.and(copy);
        }
        out
    }

    /// Where each partition's copy stands for the keyless hold: refused
    /// when it failed on a record without a key, caught up when it is
    /// MIRRORING with nothing left to copy as of its last fetch or
    /// alignment in this process. A partition whose figures are not this
    /// process's yet is behind: a restart lets a hold go only after each
    /// partition has seen the source again.
    pub fn keyless_partitions(&self) -> Vec<(MirrorPartitionKey, KeylessCopy)> {
        let entries: Vec<(MirrorPartitionKey, Arc<Entry>)> = self
            .entries
            .read()
            .unwrap()
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        let mut out = Vec::with_capacity(entries.len());
        for (key, e) in entries {
            let (state, refused) = {
                let own = e.actor.lock().unwrap();
                let refused = own.state.state == PartitionState::Failed
                    && own
                        .state
                        .error_message
                        .as_deref()
                        .is_some_and(is_keyless_refusal);
                (own.state.state, refused)
            };
            let copy = if refused {
                KeylessCopy::Refused
            } else {
                let p = e.progress.lock().unwrap();
                if state == PartitionState::Mirroring
                    && p.source_log_start.is_some()
                    && p.lag() == 0
                {
                    KeylessCopy::CaughtUp
                } else {
                    KeylessCopy::Behind
                }
            };
            out.push((key, copy));
        }
        out
    }

    /// One partition, if it is on the board.
    pub fn status(&self, key: &MirrorPartitionKey) -> Option<PartitionStatus> {
        let entry = self.entries.read().unwrap().get(key).cloned();
        entry.map(|e| e.status(key))
    }

    /// Takes a partition off the board at once (its topic left the mirror;
    /// its actor is told to stop and leaves later).
    pub fn remove(&self, key: &MirrorPartitionKey) {
        self.entries.write().unwrap().remove(key);
    }

    /// Puts a partition on the board, replacing an earlier actor's entry.
    /// The slot is the actor's pen: dropped with the actor, it takes the
    /// entry off again, unless a newer actor has replaced it.
    pub fn join(
        &self,
        key: MirrorPartitionKey,
        topic: String,
        progress: Arc<Mutex<Progress>>,
        risk: Risk,
        first: ActorPart,
    ) -> Slot {
        let entry = Arc::new(Entry {
            topic,
            actor: Mutex::new(first),
            progress,
            risk,
        });
        self.entries
            .write()
            .unwrap()
            .insert(key.clone(), entry.clone());
        Slot {
            board: self.clone(),
            key,
            entry,
        }
    }

    /// How many partitions are on the board.
    pub fn len(&self) -> usize {
        self.entries.read().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A PartitionActor's place on its mirror's board.
pub struct Slot {
    board: StatusBoard,
    key: MirrorPartitionKey,
    entry: Arc<Entry>,
}

impl Slot {
    /// Publishes the actor's part; readers see it from now on.
    pub fn publish(&self, part: ActorPart) {
        *self.entry.actor.lock().unwrap() = part;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut entries = self.board.entries.write().unwrap();
        if entries
            .get(&self.key)
            .is_some_and(|e| Arc::ptr_eq(e, &self.entry))
        {
            entries.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::memory::MemorySource;
    use crate::partition::risk::RiskReads;
    use kmirror_events::RiskSettings;

    /// A board of one topic's partitions, each `(state, error, progress)`.
    fn board(parts: &[(PartitionState, Option<&str>, Progress)]) -> (StatusBoard, Vec<Slot>) {
        let board = StatusBoard::default();
        let reads = RiskReads::new(Arc::new(MemorySource::new("src")));
        let slots = parts
            .iter()
            .enumerate()
            .map(|(p, (state, error, progress))| {
                board.join(
                    MirrorPartitionKey {
                        mirror_name: "m".into(),
                        topic_id: TopicId([1; 16]),
                        partition: p as i32,
                    },
                    "t".into(),
                    Arc::new(Mutex::new(progress.clone())),
                    Risk::new(RiskSettings::default(), reads.clone()),
                    ActorPart {
                        state: MirrorPartitionStateValue {
                            state: *state,
                            leader_epoch: -1,
                            state_epoch: 1,
                            error_message: error.map(str::to_string),
                            retry_attempt: 1,
                            previous_state: PartitionState::Mirroring,
                        },
                        next_retry_at_ms: None,
                        pumped: true,
                    },
                )
            })
            .collect();
        (board, slots)
    }

    #[test]
    fn a_topic_is_caught_up_only_when_every_partition_saw_the_source_and_copied_it_all() {
        use PartitionState::*;
        let seen = |offset, hw| Progress {
            source_offset: offset,
            source_high_watermark: hw,
            source_log_start: Some(0),
            ..Default::default()
        };
        let copy = |parts: &[(PartitionState, Option<&str>, Progress)]| {
            let (b, _slots) = board(parts);
            let (copy, n) = b.keyless_copies()[&TopicId([1; 16])];
            assert_eq!(n, parts.len());
            copy
        };
        let refused = crate::kafka::produce::keyless_refusal(
            "Produce to t-0: INVALID_RECORD (Compacted topic cannot accept message without key)",
        );
        assert_eq!(
            copy(&[(Mirroring, None, seen(5, 5)), (Mirroring, None, seen(0, 0))]),
            KeylessCopy::CaughtUp
        );
        // Not seen by this process yet (a restart): behind.
        assert_eq!(
            copy(&[
                (Mirroring, None, seen(5, 5)),
                (Mirroring, None, Progress::default())
            ]),
            KeylessCopy::Behind
        );
        assert_eq!(copy(&[(Mirroring, None, seen(4, 5))]), KeylessCopy::Behind);
        assert_eq!(
            copy(&[(Failed, Some("timeout"), seen(5, 5))]),
            KeylessCopy::Behind
        );
        assert_eq!(
            copy(&[
                (Mirroring, None, seen(4, 5)),
                (Failed, Some(&refused), seen(1, 5))
            ]),
            KeylessCopy::Refused
        );
    }
}
