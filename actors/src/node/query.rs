//! The reads: list, describe, translate, metrics and the current
//! StateValidationOffset. They read the image and the mirrors' status
//! boards (no actor is asked, so none busy on a cluster delays them) and
//! never write to the event log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kmirror_events::{
    coordinator_partition, MirrorPartitionKey, MirrorStateImage, PartitionState, Translation,
};
use kmirror_store::EventLog;

use super::{MirrorListing, Node, NodeError, NodeMetrics, OffsetTranslation, PartitionDescription};
use crate::metadata_sync::{GetSyncMetrics, SyncMetrics};
use crate::partition::risk::RiskView;
use crate::partition::StatusBoard;

impl Node {
    pub async fn list_mirrors(&self) -> Vec<MirrorListing> {
        let Ok(image) = self.image().await else {
            return Vec::new();
        };
        image
            .mirrors()
            .map(|(name, c)| {
                let mut topics: Vec<String> = image
                    .topics_of(name)
                    .map(|e| e.change.topic_name.clone())
                    .collect();
                topics.sort();
                MirrorListing {
                    mirror: name.clone(),
                    topics,
                    source_cluster_id: c.source_cluster_id.clone(),
                    source_bootstrap: c.source_bootstrap.clone(),
                }
            })
            .collect()
    }

    /// `--describe`: every partition of `mirror` (or of all mirrors) this
    /// node runs or records. A spread mirror's partitions placed in other
    /// shards are their hosts' to describe, so the API gathers every
    /// node's answer for it.
    pub async fn describe(
        &self,
        mirror: Option<&str>,
    ) -> Result<Vec<PartitionDescription>, NodeError> {
        if let Some(m) = mirror {
            // An unknown or unrunnable mirror is an error of its own.
            self.board(m).await?;
        }
        let (running, unrunnable): (Vec<(String, StatusBoard, u32)>, Vec<_>) = {
            let mirrors = self.inner.mirrors.lock().await;
            // A spread mirror's partitions hosted here are on this node's
            // boards too, so every partition is described once across
            // the cluster, by whoever runs it.
            let running = mirrors
                .running
                .iter()
                .chain(&mirrors.hosted)
                .filter(|(name, _)| mirror.is_none_or(|m| m == name.as_str()))
                .map(|(name, r)| {
                    (
                        name.clone(),
                        r.board.clone(),
                        r.retry.max_attempts.max(0) as u32,
                    )
                })
                .collect();
            let unrunnable = mirrors
                .unrunnable
                .iter()
                .chain(&mirrors.unhostable)
                .filter(|(name, _)| mirror.is_none_or(|m| m == name.as_str()))
                .map(|(name, e)| (name.clone(), e.clone()))
                .collect::<Vec<(String, NodeError)>>();
            (running, unrunnable)
        };
        let image = self.image().await?;
        // A mirror (or a spread mirror's host) this node cannot run shows
        // each partition's recorded state and why nothing runs it.
        let mut out: Vec<PartitionDescription> = unrunnable
            .iter()
            .flat_map(|(name, e)| self.not_run_here(&image, name, &e.to_string()))
            .collect();
        for (name, board, max_attempts) in running {
            for s in board.statuses() {
                let risk = if s.state == PartitionState::Stopped {
                    RiskView::stopped(image.failover_report(&s.key))
                } else {
                    s.risk
                };
                let known = s.progress.source_high_watermark > 0
                    || s.progress.destination_offset > 0
                    || s.state == PartitionState::Mirroring;
                out.push(
                    PartitionDescription {
                        mirror: name.clone(),
                        topic: s.topic,
                        partition: s.key.partition,
                        source_offset: if known { s.progress.source_offset } else { -1 },
                        destination_offset: if known {
                            s.progress.destination_offset
                        } else {
                            -1
                        },
                        lag: if known { s.progress.lag() } else { -1 },
                        lag_seconds: s.progress.lag_seconds(),
                        state: s.state.kip_name().to_string(),
                        retry_attempt: s.retry_attempt,
                        max_attempts,
                        next_retry_at_ms: s.next_retry_at_ms,
                        error: s.error,
                        offsets_identical: s.progress.offsets_identical,
                        records_mirrored: s.progress.records_mirrored,
                        bytes_mirrored: s.progress.bytes_mirrored,
                        refences: s.progress.refences,
                        last_mirror_epochs: image.last_mirror_epochs(&s.key).cloned(),
                        failback: image.failback_plan(&s.key).cloned(),
                        verify: image.verify_result(&s.key).cloned(),
                        ..Default::default()
                    }
                    .with_risk(&risk),
                );
            }
        }
        Ok(out)
    }

    /// The partitions of `mirror` placed here (all of them, unless it
    /// spreads) that nothing runs here, each by its recorded state and
    /// `why`: those with a state recorded here, and those of a topic still
    /// to be mirrored, which would have one had they started.
    fn not_run_here(
        &self,
        own: &MirrorStateImage,
        mirror: &str,
        why: &str,
    ) -> Vec<PartitionDescription> {
        // A host reads its mirror's topics where the coordinator keeps them;
        // until that shard is read to its end (the coordinator describes
        // them meanwhile: `undescribed`), names it has none to give.
        let coordinator = match own.mirror(mirror) {
            Some(_) => None,
            None => match self.coordinator_shard(mirror) {
                Some(read) if read.caught_up() => Some(read),
                _ => return Vec::new(),
            },
        };
        let topics = coordinator.as_ref().map_or(own, |c| &c.image);
        let spread = topics.spreads(mirror);
        let keys: BTreeSet<MirrorPartitionKey> = own
            .partition_states_of(mirror)
            .map(|(k, _)| k.clone())
            .chain(
                partitions_of(topics, mirror)
                    .filter(|(k, to_mirror)| *to_mirror && self.placed_here(k, spread))
                    .map(|(k, _)| k),
            )
            .collect();
        keys.iter()
            .map(|key| recorded(topics, own, key, why))
            .collect()
    }

    /// The partitions of spread mirrors that no entry of `described`
    /// (every node's answer) describes: those whose host is starting them,
    /// is down, has not been replaced yet, or did not answer (`silent`,
    /// why). Each by its state as last read where it is placed, and saying
    /// so, rather than missing from the answer. Every mirror coordinated in
    /// a shard this node reads (its own, and the others it follows, read
    /// to their ends), so whichever node gathered the answer fills it in.
    pub async fn undescribed(
        &self,
        described: &[PartitionDescription],
        silent: &[String],
    ) -> Result<Vec<PartitionDescription>, NodeError> {
        let Some((shard, followed)) = self.follows() else {
            // Nothing spread runs here (`check_runs_spread`).
            return Ok(Vec::new());
        };
        let own = self.image().await?;
        let (now, partitions) = (followed.now(), followed.partitions());
        let seen: BTreeSet<(&str, &str, i32)> = described
            .iter()
            .map(|d| (d.mirror.as_str(), d.topic.as_str(), d.partition))
            .collect();
        let placed = self.placed_as_read(own.clone());
        let silent = match silent {
            [] => String::new(),
            _ => format!(" (nodes that did not answer: {})", silent.join("; ")),
        };
        let mut out = Vec::new();
        for s in 0..partitions {
            let topics = match now.shards.get(s as usize) {
                _ if s == shard => &*own,
                Some(read) if read.caught_up() => &read.image,
                _ => continue,
            };
            let spread = topics
                .mirrors()
                .filter(|(m, _)| coordinator_partition(m, partitions) == s && topics.spreads(m));
            for (mirror, _) in spread {
                let keys = partitions_of(topics, mirror)
                    .filter(|(k, to_mirror)| {
                        *to_mirror || placed.of(k).partition_state(k).is_some()
                    })
                    .map(|(k, _)| k);
                for key in keys {
                    let topic = topic_name(topics, &key);
                    if seen.contains(&(mirror.as_str(), topic.as_str(), key.partition)) {
                        continue;
                    }
                    let placed_in = kmirror_events::placement_shard(&key, true, partitions);
                    out.push(recorded(
                        topics,
                        placed.of(&key),
                        &key,
                        &format!(
                            "no node describes this partition now: the owner of state partition {placed_in}, where it is placed, is starting it, is down, has not been replaced yet or did not answer{silent}; its state as last read there (UNKNOWN while that partition is not read)"
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Whether `mirror` spreads its partitions across shards, so that a
    /// description of it gathers every node's (see [`Node::describe`]).
    pub async fn spreads(&self, mirror: &str) -> Result<bool, NodeError> {
        Ok(self.image().await?.spreads(mirror))
    }

    /// The event log and the image folded from it, for the reads the
    /// binary makes of the log itself (the audit timeline of `GET /audit`).
    /// Reading the log blocks: callers read it on a blocking pool.
    pub async fn log_and_image(
        &self,
    ) -> Result<(Arc<dyn EventLog>, Arc<MirrorStateImage>), NodeError> {
        Ok((self.inner.log.clone(), self.image().await?))
    }

    /// The current StateValidationOffset (the event log end offset), for
    /// clients that want to pass one to an operation.
    pub async fn state_validation_offset(&self) -> u64 {
        self.image().await.map(|i| i.end_offset()).unwrap_or(0)
    }

    pub async fn translate(
        &self,
        mirror: &str,
        topic: &str,
        partition: i32,
        source_offset: i64,
    ) -> Result<OffsetTranslation, NodeError> {
        let image = self.image().await?;
        if image.mirror(mirror).is_none() {
            return Err(NodeError::unknown_mirror(mirror));
        }
        let entry = image.topic_by_name(mirror, topic).ok_or_else(|| {
            NodeError::new(
                "TOPIC_NOT_IN_CLUSTER_MIRROR",
                format!("topic {topic} is not in cluster mirror {mirror:?}"),
            )
        })?;
        if partition < 0 || partition >= entry.change.partition_count {
            return Err(NodeError::new(
                "UNKNOWN_TOPIC_OR_PARTITION",
                format!(
                    "topic {topic} has {} partitions; partition {partition} does not exist",
                    entry.change.partition_count
                ),
            ));
        }
        let key = MirrorPartitionKey::new(mirror, entry.change.topic_id, partition);
        // A spread mirror's map is in the shard its partition is placed in.
        let placed = self
            .placed_records(image.clone(), std::iter::once(&key), image.spreads(mirror))
            .await?;
        let t = placed.of(&key).translate(&key, source_offset);
        let kind = match t {
            Translation::Exact(_) => "exact",
            Translation::InGap(_) => "gap",
            Translation::AtEnd(_) => "end",
            Translation::Empty => "empty",
        }
        .to_string();
        Ok(OffsetTranslation {
            mirror: mirror.to_string(),
            topic: topic.to_string(),
            partition,
            source_offset,
            destination_offset: t.destination_offset(),
            kind,
        })
    }

    pub async fn metrics(&self) -> NodeMetrics {
        let partitions = self.describe(None).await.unwrap_or_default();
        let mut partitions_by_state = BTreeMap::new();
        for p in &partitions {
            *partitions_by_state.entry(p.state.clone()).or_insert(0) += 1;
        }
        // Each await on its own line: a lock guard taken inside the struct
        // literal would live to its end and deadlock `sync_metrics`.
        let mirrors = self.inner.mirrors.lock().await.running.len() as u64;
        let state_validation_offset = self.state_validation_offset().await;
        let sync = self.sync_metrics().await;
        NodeMetrics {
            partitions,
            partitions_by_state,
            mirrors,
            state_validation_offset,
            sync,
        }
    }

    /// Each running mirror's metadata-sync counters.
    pub async fn sync_metrics(&self) -> Vec<SyncMetrics> {
        let mut out = Vec::new();
        for a in self.actors().await {
            if let Ok(m) = a.send(GetSyncMetrics).await {
                out.push(m);
            }
        }
        out
    }
}

/// Every partition of `mirror`'s topics in `topics` (the image that holds
/// its topic records), and whether its topic is still to be mirrored.
fn partitions_of<'a>(
    topics: &'a MirrorStateImage,
    mirror: &'a str,
) -> impl Iterator<Item = (MirrorPartitionKey, bool)> + 'a {
    topics.topics_of(mirror).flat_map(move |t| {
        let to_mirror = t.change.desired_state != PartitionState::Stopped;
        (0..t.change.partition_count).map(move |p| {
            (
                MirrorPartitionKey::new(mirror, t.change.topic_id, p),
                to_mirror,
            )
        })
    })
}

fn topic_name(topics: &MirrorStateImage, key: &MirrorPartitionKey) -> String {
    topics
        .topic(&key.topic_id)
        .map(|t| t.change.topic_name.clone())
        .unwrap_or_default()
}

/// `key` described by what is recorded of it (`topics` holds its topic,
/// `records` its own records), for a partition nothing runs where asked:
/// no position or lag, since none is measured, and `error` saying why.
fn recorded(
    topics: &MirrorStateImage,
    records: &MirrorStateImage,
    key: &MirrorPartitionKey,
    error: &str,
) -> PartitionDescription {
    PartitionDescription {
        mirror: key.mirror_name.clone(),
        topic: topic_name(topics, key),
        partition: key.partition,
        source_offset: -1,
        destination_offset: -1,
        lag: -1,
        state: records
            .partition_state_or_unknown(key)
            .kip_name()
            .to_string(),
        error: Some(error.to_string()),
        last_mirror_epochs: records.last_mirror_epochs(key).cloned(),
        failback: records.failback_plan(key).cloned(),
        verify: records.verify_result(key).cloned(),
        ..Default::default()
    }
}
