//! The KIP operations that write: create, start, stop, pause, resume,
//! recover and delete. Each validates against the current image, stamps the
//! StateValidationOffset it validated and applies through the coordinator
//! under that lock, then lets the MirrorActor act on what was recorded.

use std::collections::BTreeMap;

use kmirror_events::{
    coordinator_partition, decide, join_lists, spreads, Command, MapSeed, MirrorConfig,
    MirrorPartitionKey, MirrorStateImage, PatternList, StateValidation, TopicFilter, TopicId,
};

use super::fence::check_lock;
use super::{
    client_properties, kafka, retry_policy, unavailable, FailbackView, MirrorListing, Node,
    NodeError, OperationReport,
};
use crate::cluster::{ensure_destination_topics, SourceCluster, TopicInfo};
use crate::failback::{
    self, FailbackError, FailbackRequest, FailbackSettings, SourceHistory, TopicFailback,
};
use crate::mirror::{Reconcile, RecoverTopics, StopMirror};

/// Every `mirror.*` property kmirror reads (the two unprefixed mirror keys
/// may carry the prefix too). Any other is refused at create: a misspelt
/// key would be kept and ignored, and the mirror would run without the
/// setting the operator meant.
const MIRROR_PROPERTIES: &[&str] = &[
    "mirror.topics.include",
    "mirror.topics.exclude",
    "mirror.groups.include",
    "mirror.groups.exclude",
    kmirror_events::sync::GROUP_SYNC_INTERVAL_KEY,
    kmirror_events::VERIFY_INTERVAL_KEY,
    kmirror_events::risk::RISK_REFRESH_INTERVAL_KEY,
    kmirror_events::risk::RETENTION_MARGIN_KEY,
    kmirror_events::retry::INITIAL_BACKOFF_MS_KEY,
    kmirror_events::retry::MAX_BACKOFF_MS_KEY,
    kmirror_events::retry::MAX_ATTEMPTS_KEY,
    failback::DIVERGENT_TAIL_KEY,
    failback::QUARANTINE_SUFFIX_KEY,
    UNCLEAN_KEY,
    kmirror_events::SPREAD_KEY,
    "mirror.acls.include",
    "mirror.topic.properties.exclude",
];

const UNCLEAN_KEY: &str = "mirror.support.unclean.leader.election";

/// The mirror's own keys that `decide` does not check (it checks the
/// patterns, sync, risk and verify settings): unknown `mirror.*` keys, the
/// unclean-election switch and the failback settings, which are otherwise
/// read only when a failback or an unclean election comes.
fn check_mirror_properties(props: &BTreeMap<String, String>) -> Result<(), NodeError> {
    let invalid = |m: String| NodeError::new("INVALID_CONFIG", m);
    if let Some(key) = props
        .keys()
        .find(|k| k.starts_with("mirror.") && !MIRROR_PROPERTIES.contains(&k.as_str()))
    {
        return Err(invalid(format!(
            "{key}: unknown mirror property; expected one of {}",
            MIRROR_PROPERTIES.join(", ")
        )));
    }
    if let Some(v) = props
        .get(UNCLEAN_KEY)
        .filter(|v| *v != "true" && *v != "false")
    {
        return Err(invalid(format!(
            "{UNCLEAN_KEY}: `{v}` is neither true nor false"
        )));
    }
    let config = MirrorConfig {
        source_properties: props.clone(),
        ..MirrorConfig::default()
    };
    FailbackSettings::from_config(&config).map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

/// The operations that only move topics a mirror already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicChange {
    /// Records desired STOPPED and returns at once; the failover an
    /// operator runs is [`Node::stop_topics`], which waits and reports.
    Stop,
    Pause,
    Resume,
}

impl Node {
    /// `--create`: connects to the source, records its cluster id.
    /// `properties` are the mirror's Kafka-style properties
    /// (`bootstrap.servers`, `security.protocol`, `mirror.topics.include`,
    /// `mirror.topics.exclude`, `mirror.groups.include`, …).
    pub async fn create_mirror(
        &self,
        name: &str,
        properties: BTreeMap<String, String>,
    ) -> Result<MirrorListing, NodeError> {
        let bootstrap = properties
            .get("bootstrap.servers")
            .filter(|b| !b.trim().is_empty())
            .cloned()
            .ok_or_else(|| {
                NodeError::new(
                    "INVALID_CONFIG",
                    "bootstrap.servers is required in the mirror config",
                )
            })?;
        retry_policy(&properties)?;
        check_mirror_properties(&properties)?;
        self.check_spread(&properties)?;
        if let Some(shard) = self.inner.settings.shard {
            let routed = coordinator_partition(name, self.inner.settings.state_topic_partitions);
            if routed != shard {
                return Err(NodeError::new(
                    "NOT_COORDINATOR",
                    format!(
                        "cluster mirror {name:?} belongs to state partition {routed}, not {shard}"
                    ),
                ));
            }
        }
        if self.image().await?.mirror(name).is_some() {
            return Err(NodeError::new(
                "CLUSTER_MIRROR_ALREADY_EXISTS",
                format!("cluster mirror {name:?} already exists"),
            ));
        }
        self.check_no_leftovers(name).await?;
        let source = (self.inner.connect_source)(client_properties(&properties)?)
            .await
            .map_err(|e| kafka("connect to the source cluster", e))?;
        let cluster_id = source
            .cluster_id()
            .await
            .map_err(|e| kafka("describe the source cluster", e))?;
        let get = |k: &str, default: &str| {
            properties
                .get(k)
                .cloned()
                .unwrap_or_else(|| default.to_string())
        };
        let config = MirrorConfig {
            source_bootstrap: bootstrap,
            // Everything but the patterns (kept in their own fields):
            // client properties and the mirror's retry and sync settings.
            source_properties: properties
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "bootstrap.servers"
                            | "mirror.topics.include"
                            | "mirror.topics.exclude"
                            | "mirror.groups.include"
                            | "mirror.groups.exclude"
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            topics_include: get("mirror.topics.include", ""),
            topics_exclude: get("mirror.topics.exclude", "__.*"),
            groups_include: get("mirror.groups.include", ".*"),
            groups_exclude: get("mirror.groups.exclude", ""),
            source_cluster_id: cluster_id,
        };
        self.execute(
            Command::CreateMirror {
                name: name.to_string(),
                config: config.clone(),
            },
            None,
        )
        .await?;
        self.run_mirror(name, &config).await?;
        Ok(MirrorListing {
            mirror: name.to_string(),
            topics: Vec::new(),
            source_cluster_id: config.source_cluster_id,
            source_bootstrap: config.source_bootstrap,
        })
    }

    /// `--start`: `topics` are names or regexes; matching source topics
    /// start mirroring, and the patterns are saved for auto-discovery.
    /// `state_validation_offset`: a client-supplied lock offset (None: the
    /// node validates and stamps its own).
    pub async fn start_topics(
        &self,
        mirror: &str,
        topics: &[String],
        exclude: &[String],
        state_validation_offset: Option<u64>,
    ) -> Result<OperationReport, NodeError> {
        self.start_with(
            mirror,
            topics,
            exclude,
            state_validation_offset,
            FailbackRequest::default(),
        )
        .await
    }

    /// A start that may take topics back (failback): a matching topic that
    /// the destination already holds, and that a mirror on the source
    /// copied from this destination cluster, is planned per partition
    /// (`delta` or `from-scratch`) from that mirror's history in the
    /// source's state topic. The plans are recorded, then carried out
    /// (quarantine export, or topic re-creation), then the topics start
    /// with their maps seeded in the same append. `dry_run` only plans.
    pub async fn start_with(
        &self,
        mirror: &str,
        topics: &[String],
        exclude: &[String],
        state_validation_offset: Option<u64>,
        failback: FailbackRequest,
    ) -> Result<OperationReport, NodeError> {
        let _admitted = self.admit().await?;
        let _serial = self.inner.starts.lock().await;
        self.go_on()?;
        let (actor, source, history) = self
            .of_running(mirror, |r| {
                (r.actor.clone(), r.source.clone(), r.history.clone())
            })
            .await?;
        let image = self.image().await?;
        let offset = state_validation_offset.unwrap_or(image.end_offset());
        let config = image
            .mirror(mirror)
            .cloned()
            .ok_or_else(|| NodeError::unknown_mirror(mirror))?;
        let wanted = TopicFilter::new(
            &join_lists("", topics),
            &join_lists(&config.topics_exclude, exclude),
        )
        .map_err(|e| NodeError::new("INVALID_CONFIG", e.to_string()))?;
        let source_topics = source
            .topics()
            .await
            .map_err(|e| kafka("list source topics", e))?;
        let matched: Vec<_> = source_topics
            .into_iter()
            .filter(|t| !t.internal && wanted.matches(&t.name))
            // Topics this mirror already runs are left as they are.
            .filter(|t| {
                !image
                    .topic_by_name(mirror, &t.name)
                    .is_some_and(|e| e.change.is_active())
            })
            .collect();
        let failbacks = self
            .plan_failbacks(&history, &*source, &config, &matched, failback)
            .await?;
        if !failbacks.is_empty() {
            // Refused before any plan is recorded or carried out: the
            // start itself would be (its map seeds land in one shard).
            Self::refuse_spread(&image, mirror, "a failback")?;
        }
        let views = failback_views(&failbacks);
        if failback.dry_run {
            return Ok(OperationReport {
                topics: matched.into_iter().map(|t| t.name).collect(),
                state_validation_offset: offset,
                note: None,
                failback: views,
                dry_run: true,
            });
        }
        // Decided first, then done: the plans are in the log before any
        // record is exported or any topic re-created, and are refused, as
        // the start would be, when another operation moved the topic after
        // the image they were planned on.
        for fb in &failbacks {
            self.go_on()?;
            for (p, plan) in &fb.partitions {
                self.execute(
                    Command::RecordFailbackPlan {
                        key: MirrorPartitionKey::new(mirror, fb.topic.topic_id, *p),
                        plan: plan.plan.clone(),
                    },
                    Some(StateValidation {
                        offset,
                        topics: vec![fb.topic.topic_id],
                    }),
                )
                .await?;
            }
            failback::carry_out(&*self.inner.destination, mirror, fb, &self.inner.stop)
                .await
                .map_err(failback_error)?;
        }
        self.go_on()?;
        let start = ensure_destination_topics(&*source, &*self.inner.destination, &matched)
            .await
            .map_err(|e| kafka(&e.doing, e.source))?;
        let ids: Vec<TopicId> = start.iter().map(|t| t.topic_id).collect();
        let counts: Vec<_> = start
            .iter()
            .map(|t| (t.topic_id, t.partition_count))
            .collect();
        let spread = spreads(&config).unwrap_or(false);
        self.check_idle(image.clone(), mirror, spread, &counts, "a start")
            .await?;
        let seeds = failbacks
            .iter()
            .flat_map(|fb| {
                // Every failed-back partition's map begins afresh: a delta
                // with the forward map turned around, a from-scratch empty
                // (its destination topic was made anew, and a map this
                // mirror kept of an earlier round would be found
                // "truncated" by alignment, the partition failed for good).
                fb.partitions.iter().map(|(partition, p)| MapSeed {
                    topic_id: fb.topic.topic_id,
                    partition: *partition,
                    runs: p.runs.clone(),
                    holes: p.holes.clone(),
                })
            })
            .collect();
        // The patterns are saved for auto-discovery in the same append as
        // the topics, under the same lock: a start refused as stale changes
        // nothing, and two starts never lose each other's patterns.
        self.execute(
            Command::StartTopics {
                mirror: mirror.to_string(),
                topics: start,
                include: topics.to_vec(),
                exclude: exclude.to_vec(),
                seeds,
            },
            Some(StateValidation {
                offset,
                topics: ids.clone(),
            }),
        )
        .await?;
        if matched.is_empty() {
            return Ok(OperationReport {
                topics: Vec::new(),
                state_validation_offset: offset,
                note: Some("no source topic matches yet; patterns saved for auto-discovery".into()),
                ..OperationReport::default()
            });
        }
        let _ = actor.send(Reconcile).await;
        // Mirroring again: a planned switchover's write fence on these
        // topics has served its purpose.
        let note = match self.unfence_topics(mirror, &*source, Some(&ids)).await {
            Ok(removed) if removed.is_empty() => None,
            Ok(removed) => Some(format!(
                "removed kmirror's write fence from the source: {}",
                removed.join(", ")
            )),
            Err(e) => Some(format!(
                "could not remove kmirror's write fence from the source ({e}); run kmirror mirror unfence"
            )),
        };
        Ok(OperationReport {
            topics: matched.into_iter().map(|t| t.name).collect(),
            state_validation_offset: offset,
            note,
            failback: views,
            dry_run: false,
        })
    }

    /// The failback of each matched topic the destination already holds.
    async fn plan_failbacks(
        &self,
        history: &SourceHistory,
        source: &dyn SourceCluster,
        config: &MirrorConfig,
        matched: &[TopicInfo],
        request: FailbackRequest,
    ) -> Result<Vec<TopicFailback>, NodeError> {
        let destination = &*self.inner.destination;
        let dest_topics = destination
            .topics()
            .await
            .map_err(|e| kafka("list destination topics", e))?;
        let candidates: Vec<_> = matched
            .iter()
            .map(|t| (t, dest_topics.iter().find(|d| d.name == t.name)))
            .filter(|(_, d)| d.is_some() || request.mode.is_some())
            .collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let settings = FailbackSettings::from_config(config).map_err(failback_error)?;
        let destination_cluster = destination
            .cluster_id()
            .await
            .map_err(|e| kafka("describe the destination cluster", e))?;
        let history = history
            .fresh(source)
            .await
            .map_err(|e| kafka(&e.doing, e.source))?;
        let mut out = Vec::new();
        for (topic, dest) in candidates {
            if let Some(fb) = failback::plan_topic(
                source,
                destination,
                history.as_deref(),
                &destination_cluster,
                topic,
                dest,
                request,
                &settings,
            )
            .await
            .map_err(failback_error)?
            {
                out.push(fb);
            }
        }
        Ok(out)
    }

    /// Resolves names or regexes against the mirror's own topics.
    pub(super) fn resolve(
        image: &MirrorStateImage,
        mirror: &str,
        topics: &[String],
    ) -> Result<Vec<(TopicId, String)>, NodeError> {
        if image.mirror(mirror).is_none() {
            return Err(NodeError::unknown_mirror(mirror));
        }
        let list = PatternList::parse("--topics", &join_lists("", topics))
            .map_err(|e| NodeError::new("INVALID_CONFIG", e.to_string()))?;
        let found: Vec<_> = image
            .topics_of(mirror)
            .filter(|e| list.is_match(&e.change.topic_name))
            .map(|e| (e.change.topic_id, e.change.topic_name.clone()))
            .collect();
        if found.is_empty() {
            return Err(NodeError::new(
                "TOPIC_NOT_IN_CLUSTER_MIRROR",
                format!(
                    "no topic of cluster mirror {mirror:?} matches {}",
                    topics.join(",")
                ),
            ));
        }
        Ok(found)
    }

    /// `--stop`, `--pause` and `--resume`: `topics` are resolved against
    /// the mirror's own topics; validate, stamp, apply under the lock, then
    /// let the MirrorActor move the partitions.
    pub async fn change_topics(
        &self,
        mirror: &str,
        change: TopicChange,
        topics: &[String],
        state_validation_offset: Option<u64>,
    ) -> Result<OperationReport, NodeError> {
        let (actor, _) = self.running(mirror).await?;
        let image = self.image().await?;
        let offset = state_validation_offset.unwrap_or(image.end_offset());
        let found = Self::resolve(&image, mirror, topics)?;
        let ids: Vec<TopicId> = found.iter().map(|(id, _)| *id).collect();
        let lock = StateValidation {
            offset,
            topics: ids.clone(),
        };
        let (mirror, topics) = (mirror.to_string(), ids);
        let command = match change {
            TopicChange::Stop => Command::StopTopics { mirror, topics },
            TopicChange::Pause => Command::PauseTopics { mirror, topics },
            TopicChange::Resume => Command::ResumeTopics { mirror, topics },
        };
        self.execute(command, Some(lock)).await?;
        let _ = actor.send(Reconcile).await;
        Ok(OperationReport {
            topics: found.into_iter().map(|(_, n)| n).collect(),
            state_validation_offset: offset,
            note: None,
            ..OperationReport::default()
        })
    }

    /// `--recover`: FAILED partitions of these topics go back to their
    /// PreviousState with the retry count cleared. Those this node runs: a
    /// spread mirror's hosts recover theirs when asked (the API asks every
    /// node, [`Node::recover_hosted`]).
    pub async fn recover_topics(
        &self,
        mirror: &str,
        topics: &[String],
    ) -> Result<OperationReport, NodeError> {
        let (actor, _) = self.running(mirror).await?;
        let image = self.image().await?;
        let found = Self::resolve(&image, mirror, topics)?;
        let recovered = actor
            .send(RecoverTopics(found.iter().map(|(id, _)| *id).collect()))
            .await
            .map_err(unavailable)?;
        Ok(OperationReport {
            note: recovered
                .is_empty()
                .then(|| "no FAILED partition to recover".to_string()),
            topics: recovered,
            state_validation_offset: image.end_offset(),
            ..OperationReport::default()
        })
    }

    /// `--delete`: only when every topic of the mirror is STOPPED.
    pub async fn delete_mirror(
        &self,
        mirror: &str,
        state_validation_offset: Option<u64>,
    ) -> Result<(), NodeError> {
        let _admitted = self.admit().await?;
        let (actor, source) = self.running(mirror).await?;
        let image = self.image().await?;
        let offset = state_validation_offset.unwrap_or(image.end_offset());
        let ids: Vec<TopicId> = image.topics_of(mirror).map(|e| e.change.topic_id).collect();
        let command = Command::DeleteMirror {
            name: mirror.to_string(),
        };
        // A delete that would be refused touches nothing; one that goes
        // ahead first removes kmirror's write fences from the source, or
        // they would outlive the only record of them.
        decide(&image, &command).map_err(|e| NodeError::new(e.kip_name(), e.to_string()))?;
        check_lock(&image, &ids, offset)?;
        let spread = image.spreads(mirror);
        let topics: Vec<_> = image
            .topics_of(mirror)
            .map(|e| (e.change.topic_id, e.change.partition_count))
            .collect();
        self.check_idle(image.clone(), mirror, spread, &topics, "a delete")
            .await?;
        self.unfence_topics(mirror, &*source, None)
            .await
            .map_err(|e| {
                NodeError::new(
                    &e.code,
                    format!(
                        "{}; the mirror is not deleted: its write fence on the source would be left with no record of it",
                        e.message
                    ),
                )
            })?;
        self.execute(
            command,
            Some(StateValidation {
                offset,
                topics: ids,
            }),
        )
        .await?;
        let _ = actor.send(StopMirror).await;
        self.inner.mirrors.lock().await.running.remove(mirror);
        Ok(())
    }
}

/// A failback refusal as the admin API reports it.
fn failback_error(e: FailbackError) -> NodeError {
    match e {
        FailbackError::Cluster(e) => kafka(&e.doing, e.source),
        // What the clusters hold rules the failback out, not the request.
        FailbackError::MirrorLoop { .. } | FailbackError::Refused { .. } => {
            NodeError::new("INVALID_CLUSTER_MIRROR_STATES", e.to_string())
        }
        FailbackError::Settings(_) => NodeError::new("INVALID_CONFIG", e.to_string()),
        FailbackError::Stopping { .. } => NodeError::new("NOT_COORDINATOR", e.to_string()),
    }
}

/// The plans as the start's answer shows them.
fn failback_views(failbacks: &[TopicFailback]) -> Vec<FailbackView> {
    failbacks
        .iter()
        .flat_map(|fb| {
            fb.partitions.iter().map(|(p, plan)| FailbackView {
                topic: fb.topic.name.clone(),
                partition: *p,
                plan: plan.plan.clone(),
            })
        })
        .collect()
}
