//! A planned switchover's source fence (`stop --fence-source`): stop the
//! source's writers, wait until the source's end offsets settle, drain
//! every partition to them (lag 0), and only then stop — zero records lost.
//!
//! With an authorizer on the source the fence is a DENY WRITE ACL per topic
//! (`AclEntry::write_fence`), recorded (`SourceFence`) before it is created
//! and removed — ACL first, then its record — by `unfence`, by a start of
//! the topic and by the mirror's delete. kmirror never deletes a binding it
//! did not create: one already present is used, not recorded. Without an
//! authorizer (SECURITY_DISABLED) kmirror cannot stop anyone and waits until
//! no new offsets appear for the quiet period instead. A refusal before the
//! fence changes nothing; a failure after it removes the fence again, and
//! so does the node's shutdown, which cuts the waits short.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kmirror_events::{
    AclEntry, Command, MirrorPartitionKey, MirrorStateImage, PartitionState, SourceFence,
    SourceFenceKey, TopicId, SPREAD_KEY,
};

use super::{kafka, FenceReport, Node, NodeError, UnfenceReport};
use crate::cluster::{acl_binding, acl_entry, AclBinding, SourceCluster};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::{KafkaError, ResponseError};
use crate::partition::StatusBoard;
use crate::spread::{AskHostedCopies, HostedPosition};

/// With an ACL fence: how long the source's end offsets must stay unchanged
/// after the fence is in force, so produces accepted just before it are
/// acknowledged (and counted) before the drain target is taken.
const ACL_SETTLE: Duration = Duration::from_secs(1);
/// How often the fence and the drain look again.
const POLL: Duration = Duration::from_millis(200);

fn security_disabled(e: &KafkaError) -> bool {
    e.response_error() == Some(ResponseError::SecurityDisabled)
}

/// A source refusal keeps the broker's name when it is about permissions.
fn source_error(what: &str, e: KafkaError) -> NodeError {
    match e.response_error() {
        Some(ResponseError::ClusterAuthorizationFailed) => NodeError::new(
            "CLUSTER_AUTHORIZATION_FAILED",
            format!("{what}: {e} (kmirror's source principal needs ALTER on the source cluster to manage ACLs)"),
        ),
        _ => kafka(what, e),
    }
}

/// The refusal `error`, telling what became of the fence it leaves.
pub(super) fn with_undo(error: NodeError, undo: Result<Vec<String>, NodeError>) -> NodeError {
    let told = match undo {
        Ok(removed) if removed.is_empty() => "nothing was fenced or stopped".to_string(),
        Ok(removed) => format!(
            "the source write fence was removed again ({}); nothing was stopped",
            removed.join(", ")
        ),
        Err(e) => format!(
            "the source write fence could NOT be removed ({e}); run kmirror mirror unfence for these topics once the source answers"
        ),
    };
    NodeError::new(&error.code, format!("{}; {told}", error.message))
}

/// The partitions of `topics` as the image knows them.
pub(super) fn partition_keys(
    image: &MirrorStateImage,
    mirror: &str,
    topics: &[(TopicId, String)],
) -> Vec<(MirrorPartitionKey, String)> {
    topics
        .iter()
        .flat_map(|(id, name)| {
            let count = image.topic(id).map_or(0, |t| t.change.partition_count);
            (0..count).map(move |p| (MirrorPartitionKey::new(mirror, *id, p), name.clone()))
        })
        .collect()
}

/// The StateValidationOffset lock, checked before a side effect the
/// coordinator's own check would come too late to prevent (a fence, an
/// unfence): refused if one of `topics` changed state at or after `offset`.
pub(super) fn check_lock(
    image: &MirrorStateImage,
    topics: &[TopicId],
    offset: u64,
) -> Result<(), NodeError> {
    match topics
        .iter()
        .find(|id| image.topic_last_change(id).is_some_and(|at| at >= offset))
    {
        None => Ok(()),
        Some(id) => Err(NodeError::new(
            "INVALID_CLUSTER_MIRROR_STATES",
            format!(
                "topic {} changed state at or after the state validation offset {offset}",
                image
                    .topic(id)
                    .map_or_else(|| id.to_string(), |t| t.change.topic_name.clone())
            ),
        )),
    }
}

fn topic_partitions(keys: &[(MirrorPartitionKey, String)]) -> Vec<TopicPartition> {
    keys.iter()
        .map(|(k, name)| TopicPartition::new(name, k.partition))
        .collect()
}

impl Node {
    /// Refuses unless every partition can drain, fences the source's
    /// writers, waits until the source's end offsets settle and drains to
    /// them, each wait bounded by `timeout`; `quiet` is how long a source
    /// without an authorizer must show no new offsets. On failure after
    /// fencing, the fence is removed again: also when the node stops, whose
    /// release must come after that removal's records (the waits are cut
    /// short for it, or the release would wait up to `timeout`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn fence_and_drain(
        &self,
        mirror: &str,
        board: &StatusBoard,
        source: &dyn SourceCluster,
        image: &Arc<MirrorStateImage>,
        found: &[(TopicId, String)],
        offset: u64,
        (timeout, quiet): (Duration, Duration),
    ) -> Result<FenceReport, NodeError> {
        // Refusals first: nothing changes.
        let ids: Vec<TopicId> = found.iter().map(|(id, _)| *id).collect();
        check_lock(image, &ids, offset)?;
        let keys = partition_keys(image, mirror, found);
        // A spread mirror's partitions are judged by the states recorded
        // where they are placed, and drained as their hosts report them.
        let spread = image.spreads(mirror);
        let hosts = match (spread, &self.inner.settings.ask_hosted_copies) {
            (false, _) => None,
            (true, Some(ask)) => Some((ask, mirror)),
            (true, None) => {
                return Err(NodeError::new(
                    "INVALID_CONFIG",
                    format!(
                        "a switchover (--fence-source) of {mirror:?} ({SPREAD_KEY}=true) drains partitions other nodes host, and this node cannot ask them"
                    ),
                ))
            }
        };
        let placed = self
            .placed_records(image.clone(), keys.iter().map(|(k, _)| k), spread)
            .await?;
        let not_mirroring: Vec<String> = keys
            .iter()
            .filter_map(|(k, name)| {
                let desired = image.topic(&k.topic_id).map(|t| t.change.desired_state);
                let state = placed.of(k).partition_state_or_unknown(k);
                (state != PartitionState::Mirroring || desired != Some(PartitionState::Mirroring))
                    .then(|| format!("{name}-{} ({state})", k.partition))
            })
            .collect();
        if !not_mirroring.is_empty() {
            return Err(NodeError::new(
                "INVALID_CLUSTER_MIRROR_STATES",
                format!(
                    "--fence-source drains every partition to lag 0, which needs them MIRRORING; these are not: {} (resume or recover them, or stop without --fence-source)",
                    not_mirroring.join(", ")
                ),
            ));
        }
        let deadline = Instant::now() + timeout;
        if hosts.is_some() {
            // Every host must say where its copies are before the source's
            // writers are stopped: the drain reads nothing else.
            let unplaced = |why: String| {
                NodeError::new(
                    "COORDINATOR_NOT_AVAILABLE",
                    format!("--fence-source drains every partition where it runs: {why}; nothing was fenced or stopped"),
                )
            };
            let Positions { positions, silent } = read_positions(board, hosts, deadline).await;
            if let Some(e) = silent {
                return Err(unplaced(format!("not every node answered ({e})")));
            }
            let missing: Vec<String> = keys
                .iter()
                .filter(|(k, _)| !positions.contains_key(k))
                .map(|(k, name)| format!("{name}-{}", k.partition))
                .collect();
            if !missing.is_empty() {
                return Err(unplaced(format!(
                    "no node runs {} now (its host down or starting it, or a kmirror from before hosts reported positions)",
                    missing.join(", ")
                )));
            }
        }
        let (mode, created, settle) = match source.describe_acls().await {
            Ok(present) => {
                let created = self.fence(mirror, source, found, &present, deadline).await?;
                ("acl", created, ACL_SETTLE)
            }
            Err(e) if security_disabled(&e) => ("quiet", Vec::new(), quiet),
            Err(e) => {
                return Err(source_error(
                    "read the source's ACLs to fence its writers (a planned switchover needs the source; stop without --fence-source to fail over from a source that is gone)",
                    e,
                ))
            }
        };
        let tps = topic_partitions(&keys);
        let go_on = || self.go_on();
        let drained = async {
            let (targets, quiet) =
                wait_quiet(source, &tps, settle, (deadline, &go_on), mode).await?;
            let targets = keys.iter().map(|(k, _)| k.clone()).zip(targets).collect();
            drain(board, &targets, (deadline, &go_on), &keys, hosts).await?;
            Ok::<_, NodeError>(quiet)
        }
        .await;
        match drained {
            Ok(quiet) => Ok(FenceReport {
                mode: mode.to_string(),
                acls: created,
                quiet_ms: quiet.as_millis() as u64,
            }),
            Err(e) => {
                let undo = self.remove_fences(mirror, source, &created).await;
                Err(with_undo(e, undo))
            }
        }
    }

    /// Records and creates the DENY WRITE binding of each topic not already
    /// denied, then waits until the source's broker lists them all (it then
    /// refuses every produce). Returns the bindings kmirror created.
    async fn fence(
        &self,
        mirror: &str,
        source: &dyn SourceCluster,
        found: &[(TopicId, String)],
        present: &[AclBinding],
        deadline: Instant,
    ) -> Result<Vec<String>, NodeError> {
        let present: BTreeSet<String> = present
            .iter()
            .filter_map(acl_entry)
            .map(|e| e.canonical())
            .collect();
        let fences: Vec<(AclEntry, TopicId, &String)> = found
            .iter()
            .map(|(id, name)| (AclEntry::write_fence(name), *id, name))
            .collect();
        let mut created = Vec::new();
        for (entry, topic_id, name) in &fences {
            let binding = entry.canonical();
            if present.contains(&binding) {
                continue;
            }
            let recorded = self
                .execute(
                    Command::RecordSourceFence {
                        key: SourceFenceKey {
                            mirror_name: mirror.to_string(),
                            binding: binding.clone(),
                        },
                        fence: SourceFence {
                            topic_id: *topic_id,
                            topic_name: (*name).clone(),
                        },
                    },
                    None,
                )
                .await;
            if let Err(e) = recorded {
                let undo = self.forget_fences(mirror, &created).await;
                return Err(with_undo(e, undo.map(|()| Vec::new())));
            }
            created.push(binding);
        }
        let bindings: Vec<AclBinding> = fences
            .iter()
            .filter(|(e, _, _)| created.contains(&e.canonical()))
            .filter_map(|(e, _, _)| acl_binding(e))
            .collect();
        if let Err(e) = self.go_on() {
            let undo = self.forget_fences(mirror, &created).await;
            return Err(with_undo(e, undo.map(|()| Vec::new())));
        }
        if !bindings.is_empty() {
            if let Err(e) = source.create_acls(bindings).await {
                let _ = self.forget_fences(mirror, &created).await;
                return Err(source_error(
                    "create the write fence (DENY WRITE ACLs) on the source; nothing was fenced or stopped",
                    e,
                ));
            }
        }
        let wanted: BTreeSet<String> = fences.iter().map(|(e, _, _)| e.canonical()).collect();
        loop {
            let listed = source.describe_acls().await.map(|acls| {
                acls.iter()
                    .filter_map(acl_entry)
                    .map(|e| e.canonical())
                    .collect::<BTreeSet<_>>()
            });
            if listed.as_ref().is_ok_and(|l| wanted.is_subset(l)) {
                return Ok(created);
            }
            if let Err(e) = self.go_on() {
                let undo = self.remove_fences(mirror, source, &created).await;
                return Err(with_undo(e, undo));
            }
            if Instant::now() >= deadline {
                let why = match listed {
                    Ok(_) => "the source does not list the fence ACLs yet".to_string(),
                    Err(e) => format!("the source's ACLs cannot be read: {e}"),
                };
                let undo = self.remove_fences(mirror, source, &created).await;
                return Err(with_undo(
                    NodeError::new(
                        "REQUEST_TIMED_OUT",
                        format!("the write fence is not in force on the source: {why}"),
                    ),
                    undo,
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Tombstones fence records whose ACLs were never created.
    async fn forget_fences(&self, mirror: &str, bindings: &[String]) -> Result<(), NodeError> {
        for binding in bindings {
            self.execute(
                Command::RemoveSourceFence {
                    key: SourceFenceKey {
                        mirror_name: mirror.to_string(),
                        binding: binding.clone(),
                    },
                },
                None,
            )
            .await?;
        }
        Ok(())
    }

    /// Deletes these recorded fences from the source, then their records.
    /// Returns the bindings removed.
    pub(super) async fn remove_fences(
        &self,
        mirror: &str,
        source: &dyn SourceCluster,
        bindings: &[String],
    ) -> Result<Vec<String>, NodeError> {
        if bindings.is_empty() {
            return Ok(Vec::new());
        }
        let acls: Vec<AclBinding> = bindings
            .iter()
            .filter_map(|b| AclEntry::parse_canonical(b))
            .filter_map(|e| acl_binding(&e))
            .collect();
        match source.delete_acls(acls).await {
            Ok(()) => {}
            // No authorizer any more: no ACL is left to delete.
            Err(e) if security_disabled(&e) => {}
            Err(e) => return Err(source_error("delete the write fence from the source", e)),
        }
        self.forget_fences(mirror, bindings).await?;
        Ok(bindings.to_vec())
    }

    /// Removes the recorded fences of `mirror` on these topics (all its
    /// topics with `None`). Returns the bindings removed.
    pub(super) async fn unfence_topics(
        &self,
        mirror: &str,
        source: &dyn SourceCluster,
        topics: Option<&[TopicId]>,
    ) -> Result<Vec<String>, NodeError> {
        let image = self.image().await?;
        let bindings: Vec<String> = image
            .source_fences_of(mirror)
            .filter(|(_, f)| topics.is_none_or(|t| t.contains(&f.topic_id)))
            .map(|(k, _)| k.binding.clone())
            .collect();
        self.remove_fences(mirror, source, &bindings).await
    }

    /// `--unfence`: removes kmirror's write fences from these source topics
    /// (names or regexes), exactly the bindings it recorded.
    pub async fn unfence(
        &self,
        mirror: &str,
        topics: &[String],
    ) -> Result<UnfenceReport, NodeError> {
        let _admitted = self.admit().await?;
        let (_, source) = self.running(mirror).await?;
        let image = self.image().await?;
        let found = Self::resolve(&image, mirror, topics)?;
        let ids: Vec<TopicId> = found.iter().map(|(id, _)| *id).collect();
        let removed = self.unfence_topics(mirror, &*source, Some(&ids)).await?;
        Ok(UnfenceReport {
            topics: found.into_iter().map(|(_, n)| n).collect(),
            note: removed
                .is_empty()
                .then(|| "kmirror holds no write fence on these topics".to_string()),
            removed_acls: removed,
        })
    }
}

/// Until when a wait goes on, and whether it may (`Node::go_on`).
type Bound<'a> = (Instant, &'a (dyn Fn() -> Result<(), NodeError> + Sync));

/// Waits until the end offsets of `tps` stay unchanged for `settle`, and
/// returns them (the drain's targets) with how long they were still.
async fn wait_quiet(
    source: &dyn SourceCluster,
    tps: &[TopicPartition],
    settle: Duration,
    (deadline, go_on): Bound<'_>,
    mode: &str,
) -> Result<(Vec<i64>, Duration), NodeError> {
    let mut last: Option<(Vec<i64>, Instant)> = None;
    loop {
        let mut ends = Vec::with_capacity(tps.len());
        for tp in tps {
            let b = source
                .bounds(tp)
                .await
                .map_err(|e| kafka(&format!("read the source's end offset of {tp}"), e))?;
            ends.push(b.end);
        }
        match &last {
            Some((before, since)) if *before == ends => {
                if since.elapsed() >= settle {
                    return Ok((ends, since.elapsed()));
                }
            }
            _ => last = Some((ends, Instant::now())),
        }
        go_on()?;
        if Instant::now() >= deadline {
            let why = if mode == "quiet" {
                "the source has no authorizer, so kmirror cannot fence its writers and waits until no new offsets appear; stop the producers, then try again"
            } else {
                "records kept arriving after the write fence (a super user's producer is not fenced by ACLs)"
            };
            return Err(NodeError::new(
                "REQUEST_TIMED_OUT",
                format!(
                    "the source's end offsets did not stay unchanged for {} ms before the timeout: {why}",
                    settle.as_millis()
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Every partition's position where it runs, as last asked.
struct Positions {
    positions: BTreeMap<MirrorPartitionKey, HostedPosition>,
    /// Why the hosts' answers are missing, when they are.
    silent: Option<String>,
}

/// The coordinator's board, and for a spread mirror (`hosts`) every
/// host's as it answers before `deadline`: a partition reported twice
/// counts at the lower offset, and FAILED if either is (so a stale FAILED
/// of a shard's previous owner, mid-handover, fails a switchover: safe,
/// if needless). A host that reports no position (a kmirror from before)
/// leaves its partitions out.
async fn read_positions(
    board: &StatusBoard,
    hosts: Option<(&AskHostedCopies, &str)>,
    deadline: Instant,
) -> Positions {
    let mut positions = board.positions();
    let Some((ask, mirror)) = hosts else {
        return Positions {
            positions,
            silent: None,
        };
    };
    let wait = deadline.saturating_duration_since(Instant::now());
    let copies = match tokio::time::timeout(wait, ask(mirror.to_string())).await {
        Ok(Ok(copies)) => copies,
        Ok(Err(e)) => {
            return Positions {
                positions,
                silent: Some(e),
            }
        }
        Err(_) => {
            let silent = Some("the timeout passed while the nodes were asked".to_string());
            return Positions { positions, silent };
        }
    };
    for c in copies {
        let Some(p) = c.position else { continue };
        let key = MirrorPartitionKey::new(mirror, c.topic_id, c.partition);
        let worse = positions.get(&key).is_none_or(|q| {
            p.state == PartitionState::Failed
                || (q.state != PartitionState::Failed && p.source_offset < q.source_offset)
        });
        if worse {
            positions.insert(key, p);
        }
    }
    Positions {
        positions,
        silent: None,
    }
}

/// Waits until every partition's next source offset reaches its target,
/// each read where it runs ([`read_positions`]).
async fn drain(
    board: &StatusBoard,
    targets: &BTreeMap<MirrorPartitionKey, i64>,
    (deadline, go_on): Bound<'_>,
    keys: &[(MirrorPartitionKey, String)],
    hosts: Option<(&AskHostedCopies, &str)>,
) -> Result<(), NodeError> {
    let name = |k: &MirrorPartitionKey| {
        keys.iter()
            .find(|(key, _)| key == k)
            .map_or_else(|| k.topic_id.to_string(), |(_, n)| n.clone())
    };
    loop {
        go_on()?;
        let Positions { positions, silent } = read_positions(board, hosts, deadline).await;
        let mut behind = Vec::new();
        for (key, target) in targets {
            let Some(p) = positions.get(key) else {
                behind.push(format!("{}-{} (not running)", name(key), key.partition));
                continue;
            };
            if p.state == PartitionState::Failed {
                return Err(NodeError::new(
                    "INVALID_CLUSTER_MIRROR_STATES",
                    format!(
                        "partition {}-{} FAILED while draining: {}",
                        name(key),
                        key.partition,
                        p.error.as_deref().unwrap_or("no error recorded")
                    ),
                ));
            }
            if p.source_offset < *target {
                behind.push(format!(
                    "{}-{} at {} of {target}",
                    name(key),
                    key.partition,
                    p.source_offset
                ));
            }
        }
        if behind.is_empty() {
            return Ok(());
        }
        go_on()?;
        if Instant::now() >= deadline {
            let silent = silent
                .map(|e| format!(" (not every node answered: {e})"))
                .unwrap_or_default();
            return Err(NodeError::new(
                "REQUEST_TIMED_OUT",
                format!(
                    "not drained to lag 0 before the timeout: {}{silent}",
                    behind.join(", ")
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
