//! Failover: `stop` records desired STOPPED, then waits (bounded) until every
//! partition of the topics is STOPPED and answers with each one's
//! LastMirrorEpochs and failover report — what the source still held that
//! was not mirrored, or that the source could not be read. `--dry-run`
//! computes the same report now and changes nothing; `--fence-source`
//! stops the source's writers and drains to lag 0 first ([`super::fence`]).

use std::time::{Duration, Instant};

use kmirror_events::{
    Command, FailoverReport, MirrorPartitionKey, MirrorStateImage, PartitionState, StateValidation,
    TopicId,
};

use super::fence::{partition_keys, with_undo};
use super::{unavailable, FenceReport, Node, NodeError, PartitionFailover, StopReport};
use crate::mirror::{PreviewFailovers, Reconcile};

/// How often a waiting stop looks at the partitions' states.
const POLL: Duration = Duration::from_millis(100);

/// How a stop runs.
#[derive(Debug, Clone)]
pub struct StopOptions {
    /// The optimistic lock (None: the node stamps its own).
    pub state_validation_offset: Option<u64>,
    /// Compute the report now; record and change nothing.
    pub dry_run: bool,
    /// A planned switchover: fence the source's writers, drain every
    /// partition to lag 0, then stop.
    pub fence_source: bool,
    /// The bound of each wait: fencing and draining, then stopping. A stop
    /// still going at its end is an error naming the partitions.
    pub timeout: Duration,
    /// With a source that has no authorizer: how long its end offsets must
    /// stay unchanged before kmirror drains.
    pub quiet: Duration,
}

impl Default for StopOptions {
    fn default() -> Self {
        StopOptions {
            state_validation_offset: None,
            dry_run: false,
            fence_source: false,
            timeout: Duration::from_secs(60),
            quiet: Duration::from_secs(5),
        }
    }
}

/// A partition with no report of its own: stopped before reports were
/// recorded, or never started.
fn without_report(image: &MirrorStateImage, key: &MirrorPartitionKey) -> FailoverReport {
    let epochs = image.last_mirror_epochs(key);
    FailoverReport {
        source_offset: epochs.map_or(-1, |e| e.source_offset),
        source_leader_epoch: epochs.map_or(-1, |e| e.source_leader_epoch),
        destination_end_offset: epochs.map_or(-1, |e| e.destination_end_offset),
        destination_leader_epoch: epochs.map_or(-1, |e| e.destination_leader_epoch),
        unmirrored: None,
        source_error: Some(
            match epochs {
                Some(_) => "no failover report was recorded for this partition",
                None => "the partition never started mirroring",
            }
            .to_string(),
        ),
    }
}

impl Node {
    /// `--stop`: failover. Records desired STOPPED for `topics` (names or
    /// regexes), waits until each of their partitions is STOPPED, and
    /// answers with the report each recorded. See [`StopOptions`].
    pub async fn stop_topics(
        &self,
        mirror: &str,
        topics: &[String],
        options: StopOptions,
    ) -> Result<StopReport, NodeError> {
        if options.dry_run && options.fence_source {
            return Err(NodeError::new(
                "INVALID_REQUEST",
                "--dry-run reports what a stop would leave unmirrored; --fence-source leaves nothing (it drains to lag 0), so the two do not go together",
            ));
        }
        let admitted = self.admit().await?;
        let (actor, source) = self.running(mirror).await?;
        let image = self.image().await?;
        let offset = options
            .state_validation_offset
            .unwrap_or(image.end_offset());
        let found = Self::resolve(&image, mirror, topics)?;
        let ids: Vec<TopicId> = found.iter().map(|(id, _)| *id).collect();
        let names = || found.iter().map(|(_, n)| n.clone()).collect();
        if options.dry_run {
            return self.preview(&actor, &found, offset).await;
        }
        let fence = if options.fence_source {
            let fence = self
                .fence_and_drain(
                    mirror,
                    &self.board(mirror).await?,
                    &*source,
                    &image,
                    &found,
                    offset,
                    (options.timeout, options.quiet),
                )
                .await?;
            Some(fence)
        } else {
            None
        };
        let stopped = self
            .execute(
                Command::StopTopics {
                    mirror: mirror.to_string(),
                    topics: ids.clone(),
                },
                Some(StateValidation {
                    offset,
                    topics: ids,
                }),
            )
            .await;
        if let Err(e) = stopped {
            return Err(match &fence {
                Some(f) => self.unfence_after(mirror, &*source, f, e).await,
                None => e,
            });
        }
        let _ = actor.send(Reconcile).await;
        // Only waiting is left, which changes no cluster.
        drop(admitted);
        let partitions = self.wait_stopped(mirror, &found, options.timeout).await?;
        let note = fence.as_ref().and_then(|_| {
            let left: i64 = partitions
                .iter()
                .filter_map(|p| p.unmirrored.as_ref().map(|u| u.records))
                .sum();
            (left > 0).then(|| {
                format!("{left} records reached the source after its writers were fenced (by a super user, or in flight); they are not mirrored")
            })
        });
        Ok(StopReport {
            topics: names(),
            state_validation_offset: offset,
            note,
            dry_run: false,
            fence,
            partitions,
        })
    }

    /// `--stop --dry-run`: every partition's report as a stop would record
    /// it now, of those this node runs (a spread mirror's hosts preview
    /// theirs when asked: [`Node::preview_hosted`]). Nothing is recorded
    /// and nothing changes.
    async fn preview(
        &self,
        actor: &actix::Addr<crate::mirror::MirrorActor>,
        found: &[(TopicId, String)],
        offset: u64,
    ) -> Result<StopReport, NodeError> {
        Ok(StopReport {
            topics: found.iter().map(|(_, n)| n.clone()).collect(),
            state_validation_offset: offset,
            note: Some("dry run: nothing was recorded or changed".into()),
            dry_run: true,
            fence: None,
            partitions: Self::previews(actor, found).await?,
        })
    }

    /// `--stop --dry-run` of the partitions of `mirror` (spread, coordinated
    /// by another shard) this node hosts, `topics` named as in the
    /// coordinator's shard; nothing hosted here, nothing to preview.
    pub async fn preview_hosted(
        &self,
        mirror: &str,
        topics: &[String],
    ) -> Result<Vec<PartitionFailover>, NodeError> {
        let Some((actor, found)) = self.hosted_topics(mirror, topics).await? else {
            return Ok(Vec::new());
        };
        Self::previews(&actor, &found).await
    }

    /// A spread mirror's dry run: `report` (its coordinator's) with the
    /// hosts' previews (`theirs`), and each partition no node previewed
    /// (its host down or starting it) by its state as last read, saying
    /// so rather than leaving it out.
    pub async fn with_hosted_previews(
        &self,
        mirror: &str,
        mut report: StopReport,
        theirs: Vec<PartitionFailover>,
    ) -> Result<StopReport, NodeError> {
        let own = self.image().await?;
        report.partitions.extend(theirs);
        // The topics the coordinator's preview resolved, by their names
        // (not again as patterns: `.` matches any character).
        let found: Vec<(TopicId, String)> = report
            .topics
            .iter()
            .filter_map(|name| own.topic_by_name(mirror, name))
            .map(|t| (t.change.topic_id, t.change.topic_name.clone()))
            .collect();
        let placed = self.placed_as_read(own.clone());
        for (key, name) in partition_keys(&own, mirror, &found) {
            let previewed = report
                .partitions
                .iter()
                .any(|p| p.topic == name && p.partition == key.partition);
            if !previewed {
                let image = placed.of(&key);
                let unknown = FailoverReport {
                    source_error: Some(
                        "not previewed: no node runs this partition now (its host is down or starting it)".into(),
                    ),
                    ..without_report(image, &key)
                };
                let state = image.partition_state_or_unknown(&key);
                report.partitions.push(PartitionFailover::new(
                    &name,
                    key.partition,
                    state,
                    &unknown,
                ));
            }
        }
        report
            .partitions
            .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(report)
    }

    /// The failover report a stop would record now of each partition of
    /// `found` that `actor` runs.
    async fn previews(
        actor: &actix::Addr<crate::mirror::MirrorActor>,
        found: &[(TopicId, String)],
    ) -> Result<Vec<PartitionFailover>, NodeError> {
        let ids = found.iter().map(|(id, _)| *id).collect();
        let previews = actor
            .send(PreviewFailovers(ids))
            .await
            .map_err(unavailable)?;
        let mut partitions = Vec::with_capacity(previews.len());
        for (status, report) in previews {
            let report = report.unwrap_or_else(|e| FailoverReport {
                source_offset: -1,
                source_leader_epoch: -1,
                destination_end_offset: -1,
                destination_leader_epoch: -1,
                unmirrored: None,
                source_error: Some(format!("the mirrored position could not be read: {e}")),
            });
            partitions.push(PartitionFailover::new(
                &status.topic,
                status.key.partition,
                status.state,
                &report,
            ));
        }
        Ok(partitions)
    }

    /// Waits until every partition of `topics` is STOPPED (or never
    /// started), then reads their reports from the image.
    async fn wait_stopped(
        &self,
        mirror: &str,
        topics: &[(TopicId, String)],
        timeout: Duration,
    ) -> Result<Vec<PartitionFailover>, NodeError> {
        let deadline = Instant::now() + timeout;
        loop {
            let own = self.image().await?;
            let spread = own.spreads(mirror);
            let keys = partition_keys(&own, mirror, topics);
            let placed = self
                .placed_records(own.clone(), keys.iter().map(|(k, _)| k), spread)
                .await?;
            let waiting: Vec<String> = keys
                .iter()
                .filter_map(|(k, name)| {
                    let state = placed.of(k).partition_state_or_unknown(k);
                    (!matches!(state, PartitionState::Stopped | PartitionState::Unknown))
                        .then(|| format!("{name}-{} ({state})", k.partition))
                })
                .collect();
            if waiting.is_empty() {
                let mut out: Vec<PartitionFailover> = keys
                    .iter()
                    .map(|(k, name)| {
                        let image = placed.of(k);
                        let state = image.partition_state_or_unknown(k);
                        match image.failover_report(k) {
                            Some(r) => PartitionFailover::new(name, k.partition, state, r),
                            None => PartitionFailover::new(
                                name,
                                k.partition,
                                state,
                                &without_report(image, k),
                            ),
                        }
                    })
                    .collect();
                out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                return Ok(out);
            }
            if Instant::now() >= deadline {
                return Err(NodeError::new(
                    "REQUEST_TIMED_OUT",
                    format!(
                        "the stop is recorded and goes on, but after {} s these partitions are not STOPPED yet: {}; follow them with kmirror mirror describe",
                        timeout.as_secs(),
                        waiting.join(", ")
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Undoes the fence of a switchover whose stop was refused, and says so
    /// in the refusal.
    async fn unfence_after(
        &self,
        mirror: &str,
        source: &dyn crate::cluster::SourceCluster,
        fence: &FenceReport,
        refused: NodeError,
    ) -> NodeError {
        let undo = self.remove_fences(mirror, source, &fence.acls).await;
        with_undo(refused, undo)
    }
}
