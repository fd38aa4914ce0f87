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

use kmirror_events::{MirrorPartitionKey, MirrorPartitionStateValue, PartitionState};

use super::context::Progress;
use super::risk::{Risk, RiskView};

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
