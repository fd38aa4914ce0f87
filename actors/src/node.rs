//! The node: what the daemon's admin API and CLI talk to.
//!
//! A `Node` owns the CoordinatorActor and one MirrorActor per mirror, and
//! implements the KIP's operations (`kafka-cluster-mirrors.sh` verbs) with
//! the KIP's two phases: validate against the current image, stamp the
//! StateValidationOffset (the log end offset validated against), then apply
//! through the coordinator under the optimistic lock, which refuses with
//! INVALID_CLUSTER_MIRROR_STATES if a topic changed state in between.
//!
//! It is a cheap, cloneable handle: HTTP handlers hold clones.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::prelude::*;
use kmirror_events::{
    join_lists, Command, MirrorConfig, MirrorPartitionKey, MirrorStateImage, PartitionState,
    PatternList, RetryPolicy, StateValidation, TopicFilter, TopicId, TopicRef, Translation,
};
use kmirror_store::EventLog;
use serde::Serialize;

use crate::cluster::{BoxFuture, DestinationCluster, SourceCluster};
use crate::coordinator::{Applied, CoordinatorActor, CoordinatorError, Execute, ReadImage};
use crate::kafka::KafkaError;
use crate::metadata_sync::{GetSyncMetrics, SyncMetrics};
use crate::mirror::{
    ensure_destination_topic, Describe, MirrorActor, MirrorSpec, Reconcile, RecoverTopics,
    StopMirror,
};

/// Builds a source cluster from a mirror's Kafka-style properties
/// (`bootstrap.servers`, `security.protocol`, …). A function, so tests can
/// hand in in-memory clusters.
pub type SourceConnector = Arc<
    dyn Fn(
            BTreeMap<String, String>,
        ) -> BoxFuture<'static, Result<Arc<dyn SourceCluster>, KafkaError>>
        + Send
        + Sync,
>;

/// A refused or failed operation: the KIP error name first, then why.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct NodeError {
    /// KIP / Kafka error name (`UNKNOWN_CLUSTER_MIRROR`, `INVALID_CONFIG`, …).
    pub code: &'static str,
    pub message: String,
}

impl NodeError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        NodeError {
            code,
            message: message.into(),
        }
    }
}

/// One mirror, as `kmirror mirror list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorListing {
    pub mirror: String,
    pub topics: Vec<String>,
    pub source_cluster_id: String,
    pub source_bootstrap: String,
}

/// One mirror partition, as `kmirror mirror describe` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionDescription {
    pub mirror: String,
    pub topic: String,
    pub partition: i32,
    /// Next source offset to mirror (−1 unknown).
    pub source_offset: i64,
    /// Destination end offset as mirrored (−1 unknown).
    pub destination_offset: i64,
    /// Records behind the source high watermark (−1 unknown).
    pub lag: i64,
    pub lag_seconds: f64,
    /// KIP state name (MIRRORING, PAUSED, FAILED, …).
    pub state: String,
    /// Failures so far; −1 = not retryable.
    pub retry_attempt: i16,
    /// `mirror.failed.retry.max.attempts`, for "n/max".
    pub max_attempts: u32,
    pub error: Option<String>,
    /// The offset map is one run from equal offsets: consumers can use
    /// source offsets on the destination unchanged.
    pub offsets_identical: bool,
    pub records_mirrored: u64,
    pub bytes_mirrored: u64,
}

/// What an operation did, per topic.
#[derive(Debug, Clone, Serialize)]
pub struct OperationReport {
    /// Topics the operation applied to.
    pub topics: Vec<String>,
    /// The StateValidationOffset the operation validated against.
    pub state_validation_offset: u64,
    /// A human note (e.g. "patterns saved for auto-discovery").
    pub note: Option<String>,
}

/// The answer of `kmirror offsets translate`.
#[derive(Debug, Clone, Serialize)]
pub struct OffsetTranslation {
    pub mirror: String,
    pub topic: String,
    pub partition: i32,
    pub source_offset: i64,
    /// The destination offset a consumer positioned at `source_offset`
    /// should use (None: nothing mirrored yet).
    pub destination_offset: Option<i64>,
    /// `exact`, `gap` (the source offset was never mirrored; this is the next
    /// mirrored record), `end` (not mirrored yet) or `empty`.
    pub kind: &'static str,
}

/// Node-wide figures for `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeMetrics {
    pub partitions: Vec<PartitionDescription>,
    /// Partitions per KIP state name.
    pub partitions_by_state: BTreeMap<String, u64>,
    pub mirrors: u64,
    /// The event log end offset: the StateValidationOffset an operation
    /// would validate against now.
    pub state_validation_offset: u64,
    /// Metadata sync per mirror: errors per kind, last successful sync
    /// times, active destination groups skipped, changes made.
    pub sync: Vec<SyncMetrics>,
}

/// Settings of a node.
#[derive(Clone)]
pub struct NodeSettings {
    /// How often each mirror rediscovers source topics and checks the
    /// source cluster id (`mirror.metadata.refresh.interval.ms` default).
    pub refresh_interval: std::time::Duration,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            refresh_interval: std::time::Duration::from_secs(5),
        }
    }
}

/// The running node (see the module docs).
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    log: Arc<dyn EventLog>,
    coordinator: Addr<CoordinatorActor>,
    destination: Arc<dyn DestinationCluster>,
    connect_source: SourceConnector,
    settings: NodeSettings,
    mirrors: tokio::sync::Mutex<BTreeMap<String, Running>>,
}

/// A running mirror: its actor and its source connection.
struct Running {
    actor: Addr<MirrorActor>,
    source: Arc<dyn SourceCluster>,
    retry: RetryPolicy,
}

/// Mirror-level keys that are not source connection properties.
const MIRROR_KEYS: &[&str] = &["topic.properties.exclude", "acls.include"];

fn refused(e: CoordinatorError) -> NodeError {
    NodeError::new(e.kip_name(), e.to_string())
}

fn unavailable(e: impl std::fmt::Display) -> NodeError {
    NodeError::new("COORDINATOR_NOT_AVAILABLE", e.to_string())
}

fn kafka(what: &str, e: KafkaError) -> NodeError {
    let code = match e {
        KafkaError::Config { .. } => "INVALID_CONFIG",
        KafkaError::Authentication { .. } => "SASL_AUTHENTICATION_FAILED",
        _ => "NETWORK_EXCEPTION",
    };
    NodeError::new(code, format!("{what}: {e}"))
}

/// The Kafka client properties among a mirror's properties: everything but
/// the mirror's own keys (`mirror.*`, `topic.properties.exclude`,
/// `acls.include`), which the client would refuse as unknown.
fn client_properties(props: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    props
        .iter()
        .filter(|(k, _)| !k.starts_with("mirror.") && !MIRROR_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn retry_policy(props: &BTreeMap<String, String>) -> Result<RetryPolicy, NodeError> {
    RetryPolicy::from_config(|k| props.get(k).cloned())
        .map_err(|e| NodeError::new("INVALID_CONFIG", e.to_string()))
}

impl Node {
    /// Loads the image from `log`, starts the CoordinatorActor and a
    /// MirrorActor for every mirror in it (which resume their partitions
    /// from the log alone). Must run inside an actix System.
    pub async fn start(
        log: Arc<dyn EventLog>,
        destination: Arc<dyn DestinationCluster>,
        connect_source: SourceConnector,
        settings: NodeSettings,
    ) -> Result<Node, NodeError> {
        let loading = log.clone();
        let coordinator = tokio::task::spawn_blocking(move || CoordinatorActor::load(loading))
            .await
            .map_err(unavailable)?
            .map_err(|e| {
                NodeError::new("KAFKA_STORAGE_ERROR", format!("loading the event log: {e}"))
            })?
            .start();
        let node = Node {
            inner: Arc::new(Inner {
                log,
                coordinator,
                destination,
                connect_source,
                settings,
                mirrors: tokio::sync::Mutex::new(BTreeMap::new()),
            }),
        };
        let image = node.image().await?;
        for (name, config) in image.mirrors() {
            node.run_mirror(name, config).await?;
        }
        Ok(node)
    }

    async fn image(&self) -> Result<Arc<MirrorStateImage>, NodeError> {
        self.inner
            .coordinator
            .send(ReadImage)
            .await
            .map_err(unavailable)
    }

    async fn execute(
        &self,
        command: Command,
        state_validation: Option<StateValidation>,
    ) -> Result<Applied, NodeError> {
        self.inner
            .coordinator
            .send(Execute {
                command,
                state_validation,
            })
            .await
            .map_err(unavailable)?
            .map_err(refused)
    }

    /// Starts the MirrorActor of a mirror recorded in the log.
    async fn run_mirror(&self, name: &str, config: &MirrorConfig) -> Result<(), NodeError> {
        let mut props = config.source_properties.clone();
        props.insert("bootstrap.servers".into(), config.source_bootstrap.clone());
        let retry = retry_policy(&props)?;
        let source = (self.inner.connect_source)(client_properties(&props))
            .await
            .map_err(|e| kafka("connect to the source cluster", e))?;
        let actor = MirrorActor::new(MirrorSpec {
            name: name.to_string(),
            source: source.clone(),
            destination: self.inner.destination.clone(),
            coordinator: self.inner.coordinator.clone(),
            retry,
            refresh_interval: self.inner.settings.refresh_interval,
        })
        .start();
        self.inner.mirrors.lock().await.insert(
            name.to_string(),
            Running {
                actor,
                source,
                retry,
            },
        );
        Ok(())
    }

    async fn running(
        &self,
        mirror: &str,
    ) -> Result<(Addr<MirrorActor>, Arc<dyn SourceCluster>), NodeError> {
        self.inner
            .mirrors
            .lock()
            .await
            .get(mirror)
            .map(|r| (r.actor.clone(), r.source.clone()))
            .ok_or_else(|| {
                NodeError::new(
                    "UNKNOWN_CLUSTER_MIRROR",
                    format!("cluster mirror {mirror:?} does not exist"),
                )
            })
    }

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
        if self.image().await?.mirror(name).is_some() {
            return Err(NodeError::new(
                "CLUSTER_MIRROR_ALREADY_EXISTS",
                format!("cluster mirror {name:?} already exists"),
            ));
        }
        let source = (self.inner.connect_source)(client_properties(&properties))
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
        let (actor, source) = self.running(mirror).await?;
        let image = self.image().await?;
        let offset = state_validation_offset.unwrap_or(image.end_offset());
        let config = image.mirror(mirror).cloned().ok_or_else(|| {
            NodeError::new(
                "UNKNOWN_CLUSTER_MIRROR",
                format!("cluster mirror {mirror:?} does not exist"),
            )
        })?;
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
            .iter()
            .filter(|t| !t.internal && wanted.matches(&t.name))
            .filter(|t| {
                // Topics this mirror already runs are left as they are.
                !image.topic_by_name(mirror, &t.name).is_some_and(|e| {
                    matches!(
                        e.change.desired_state,
                        PartitionState::Mirroring | PartitionState::Paused
                    )
                })
            })
            .cloned()
            .collect();
        // Save the patterns first: auto-discovery picks up later topics.
        let include = join_lists(&config.topics_include, topics);
        let exclude_all = join_lists(&config.topics_exclude, exclude);
        if include != config.topics_include || exclude_all != config.topics_exclude {
            self.execute(
                Command::AlterMirror {
                    name: mirror.to_string(),
                    config: MirrorConfig {
                        topics_include: include,
                        topics_exclude: exclude_all,
                        ..config.clone()
                    },
                },
                None,
            )
            .await?;
        }
        if matched.is_empty() {
            return Ok(OperationReport {
                topics: Vec::new(),
                state_validation_offset: offset,
                note: Some("no source topic matches yet; patterns saved for auto-discovery".into()),
            });
        }
        for t in &matched {
            ensure_destination_topic(&*source, &*self.inner.destination, t)
                .await
                .map_err(|e| NodeError::new("NETWORK_EXCEPTION", e))?;
        }
        let ids: Vec<TopicId> = matched.iter().map(|t| t.topic_id).collect();
        self.execute(
            Command::StartTopics {
                mirror: mirror.to_string(),
                topics: matched
                    .iter()
                    .map(|t| TopicRef {
                        topic_id: t.topic_id,
                        name: t.name.clone(),
                        partition_count: t.partitions,
                    })
                    .collect(),
            },
            Some(StateValidation {
                offset,
                topics: ids,
            }),
        )
        .await?;
        let _ = actor.send(Reconcile).await;
        Ok(OperationReport {
            topics: matched.into_iter().map(|t| t.name).collect(),
            state_validation_offset: offset,
            note: None,
        })
    }

    /// Resolves names or regexes against the mirror's own topics.
    fn resolve(
        image: &MirrorStateImage,
        mirror: &str,
        topics: &[String],
    ) -> Result<Vec<(TopicId, String)>, NodeError> {
        if image.mirror(mirror).is_none() {
            return Err(NodeError::new(
                "UNKNOWN_CLUSTER_MIRROR",
                format!("cluster mirror {mirror:?} does not exist"),
            ));
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

    /// Stop, pause and resume: validate, stamp, apply under the lock, then
    /// let the MirrorActor move the partitions.
    async fn change_topics(
        &self,
        mirror: &str,
        topics: &[String],
        state_validation_offset: Option<u64>,
        command: impl FnOnce(Vec<TopicId>) -> Command,
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
        self.execute(command(ids), Some(lock)).await?;
        let _ = actor.send(Reconcile).await;
        Ok(OperationReport {
            topics: found.into_iter().map(|(_, n)| n).collect(),
            state_validation_offset: offset,
            note: None,
        })
    }

    /// `--stop` (failover): topics resolved against the mirror's topics.
    pub async fn stop_topics(
        &self,
        mirror: &str,
        topics: &[String],
        state_validation_offset: Option<u64>,
    ) -> Result<OperationReport, NodeError> {
        let m = mirror.to_string();
        self.change_topics(mirror, topics, state_validation_offset, |topics| {
            Command::StopTopics { mirror: m, topics }
        })
        .await
    }

    pub async fn pause_topics(
        &self,
        mirror: &str,
        topics: &[String],
        state_validation_offset: Option<u64>,
    ) -> Result<OperationReport, NodeError> {
        let m = mirror.to_string();
        self.change_topics(mirror, topics, state_validation_offset, |topics| {
            Command::PauseTopics { mirror: m, topics }
        })
        .await
    }

    pub async fn resume_topics(
        &self,
        mirror: &str,
        topics: &[String],
        state_validation_offset: Option<u64>,
    ) -> Result<OperationReport, NodeError> {
        let m = mirror.to_string();
        self.change_topics(mirror, topics, state_validation_offset, |topics| {
            Command::ResumeTopics { mirror: m, topics }
        })
        .await
    }

    /// `--recover`: FAILED partitions of these topics go back to their
    /// PreviousState with the retry count cleared.
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
        })
    }

    /// `--delete`: only when every topic of the mirror is STOPPED.
    pub async fn delete_mirror(
        &self,
        mirror: &str,
        state_validation_offset: Option<u64>,
    ) -> Result<(), NodeError> {
        let (actor, _) = self.running(mirror).await?;
        let image = self.image().await?;
        let offset = state_validation_offset.unwrap_or(image.end_offset());
        let ids: Vec<TopicId> = image.topics_of(mirror).map(|e| e.change.topic_id).collect();
        self.execute(
            Command::DeleteMirror {
                name: mirror.to_string(),
            },
            Some(StateValidation {
                offset,
                topics: ids,
            }),
        )
        .await?;
        let _ = actor.send(StopMirror).await;
        self.inner.mirrors.lock().await.remove(mirror);
        Ok(())
    }

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

    /// `--describe`: every partition of `mirror` (or of all mirrors).
    pub async fn describe(
        &self,
        mirror: Option<&str>,
    ) -> Result<Vec<PartitionDescription>, NodeError> {
        let running: Vec<(String, Addr<MirrorActor>, u32)> = {
            let mirrors = self.inner.mirrors.lock().await;
            if let Some(m) = mirror {
                if !mirrors.contains_key(m) {
                    return Err(NodeError::new(
                        "UNKNOWN_CLUSTER_MIRROR",
                        format!("cluster mirror {m:?} does not exist"),
                    ));
                }
            }
            mirrors
                .iter()
                .filter(|(name, _)| mirror.is_none_or(|m| m == name.as_str()))
                .map(|(name, r)| {
                    (
                        name.clone(),
                        r.actor.clone(),
                        r.retry.max_attempts.max(0) as u32,
                    )
                })
                .collect()
        };
        let mut out = Vec::new();
        for (name, actor, max_attempts) in running {
            for s in actor.send(Describe).await.map_err(unavailable)? {
                let known = s.progress.source_high_watermark > 0
                    || s.progress.destination_offset > 0
                    || s.state == PartitionState::Mirroring;
                out.push(PartitionDescription {
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
                    error: s.error,
                    offsets_identical: s.progress.offsets_identical,
                    records_mirrored: s.progress.records_mirrored,
                    bytes_mirrored: s.progress.bytes_mirrored,
                });
            }
        }
        Ok(out)
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
            return Err(NodeError::new(
                "UNKNOWN_CLUSTER_MIRROR",
                format!("cluster mirror {mirror:?} does not exist"),
            ));
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
                format!("{topic} has {} partitions", entry.change.partition_count),
            ));
        }
        let key = MirrorPartitionKey::new(mirror, entry.change.topic_id, partition);
        let t = image.translate(&key, source_offset);
        let kind = match t {
            Translation::Exact(_) => "exact",
            Translation::InGap(_) => "gap",
            Translation::AtEnd(_) => "end",
            Translation::Empty => "empty",
        };
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
        let mirrors = self.inner.mirrors.lock().await.len() as u64;
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
        let actors: Vec<_> = self
            .inner
            .mirrors
            .lock()
            .await
            .values()
            .map(|r| r.actor.clone())
            .collect();
        let mut out = Vec::new();
        for a in actors {
            if let Ok(m) = a.send(GetSyncMetrics).await {
                out.push(m);
            }
        }
        out
    }

    /// Graceful stop: every partition stops fetching, finishes what is in
    /// flight, makes its map durable; the log is flushed.
    pub async fn shutdown(&self) {
        let actors: Vec<_> = self
            .inner
            .mirrors
            .lock()
            .await
            .values()
            .map(|r| r.actor.clone())
            .collect();
        futures_util::future::join_all(actors.iter().map(|a| a.send(StopMirror))).await;
        let log = self.inner.log.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || log.flush()).await {
            tracing::error!(error = %e, "flushing the event log failed");
        }
    }
}
