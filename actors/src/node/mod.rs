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

mod failover;
mod fence;
mod hosted;
mod ops;
mod query;
mod verify;
mod views;

pub use failover::StopOptions;
pub use ops::TopicChange;
pub use views::{
    FailbackView, FenceReport, MirrorListing, NodeError, NodeMetrics, OffsetTranslation,
    OperationReport, PartitionDescription, PartitionFailover, StopReport, UnfenceReport,
    UnmirroredView,
};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use kmirror_events::{Command, MirrorConfig, MirrorStateImage, RetryPolicy, StateValidation};
use kmirror_store::EventLog;

use crate::cluster::{BoxFuture, DestinationCluster, SourceCluster};
use crate::coordinator::{
    Appended, Applied, CoordinatorActor, CoordinatorError, Execute, ReadImage,
};
use crate::failback::SourceHistory;
use crate::hosted_sync::{AskFinalSync, HostedFinalSync};
use crate::kafka::{Jitter, KafkaError};
use crate::mirror::{MirrorActor, MirrorSpec, StopMirror};
use crate::partition::StatusBoard;
use crate::publisher::{PublisherSpec, StatePublisher};
use crate::spread::{AskHostedCopies, Followed, Hosting};

/// Builds a source cluster from a mirror's Kafka-style properties
/// (`bootstrap.servers`, `security.protocol`, …). A function, so tests can
/// hand in in-memory clusters. It must not need the cluster to answer
/// (over Kafka: `KafkaClient::connect_lazy`): a node starts every mirror of
/// its log with it, and a source that is down — the disaster kmirror is
/// for — must not keep a restarted node from starting, describing and
/// failing over. Only a bad configuration is an error.
pub type SourceConnector = Arc<
    dyn Fn(
            BTreeMap<String, String>,
        ) -> BoxFuture<'static, Result<Arc<dyn SourceCluster>, KafkaError>>
        + Send
        + Sync,
>;

/// Settings of a node.
#[derive(Clone)]
pub struct NodeSettings {
    /// How often each mirror rediscovers source topics and checks the
    /// source cluster id (`mirror.metadata.refresh.interval.ms` default).
    pub refresh_interval: std::time::Duration,
    /// The state topic on the destination, where every record is also
    /// published (and where a failback looks on its source).
    pub state_topic: String,
    /// Partitions the state topic is created with.
    pub state_topic_partitions: i32,
    /// In a clustered daemon: the state-topic partition whose coordinator
    /// this node is. Its log *is* that partition, so nothing is published
    /// beside it, and only mirrors routed to it may be created here.
    pub shard: Option<i32>,
    /// Who this node is to the others (a clustered node's advertised admin
    /// URL): named in the `ShardRelease` it leaves when a shard goes.
    pub member: String,
    /// In a clustered daemon: every shard as this node follows it, which a
    /// shard reads for the spread mirrors it hosts or coordinates (see
    /// [`crate::spread`]).
    pub followed: Option<Followed>,
    /// Whether a mirror may be created with `mirror.partitions.spread`:
    /// the daemon's experimental `cluster.spread_partitions`, off by
    /// default while some operations are refused for such a mirror and
    /// some gaps are open (ARCHITECTURE, "Departures", step 3).
    pub accept_spread: bool,
    /// How a partition this node hosts asks its mirror's coordinator for
    /// its final group-offset pass (the daemon reaches the coordinator;
    /// None: hosted partitions stop without one, and consumers moving to
    /// the destination find the offsets of the last periodic sync).
    pub ask_final_sync: Option<AskFinalSync>,
    /// How the coordinator of a spread mirror asks every node how the
    /// partitions it hosts stand, before it lets a keyless hold go while
    /// the topic is mirrored (None: it keeps the hold until a stop).
    pub ask_hosted_copies: Option<AskHostedCopies>,
    /// Where a FAILED partition's retry jitter comes from
    /// ([`crate::partition::PartitionSpec::jitter`]).
    pub jitter: Jitter,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            refresh_interval: std::time::Duration::from_secs(5),
            state_topic: crate::state_topic::DEFAULT_STATE_TOPIC.to_string(),
            state_topic_partitions: crate::state_topic::DEFAULT_PARTITIONS,
            shard: None,
            member: "kmirror".to_string(),
            followed: None,
            accept_spread: false,
            ask_final_sync: None,
            ask_hosted_copies: None,
            jitter: Arc::new(rand::random),
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
    /// None when the log is the state topic itself (a clustered shard).
    publisher: Option<Addr<StatePublisher>>,
    destination: Arc<dyn DestinationCluster>,
    connect_source: SourceConnector,
    settings: NodeSettings,
    /// `stopping` is set under it by `shutdown`: no MirrorActor starts
    /// after the node began to stop, so none writes after the release.
    mirrors: tokio::sync::Mutex<Mirrors>,
    /// The coordinator's [`CoordinatorActor::log_failure`].
    log_failure: tokio::sync::watch::Receiver<Option<String>>,
    /// One start at a time on this node: a failback's side effects (a
    /// topic deleted and re-created, an export) follow its recorded plan
    /// but come before the start that ends it, and the StateValidationOffset
    /// lock guards appends, not those effects. Two starts planned on one
    /// image (of one mirror, or of two mirrors naming one topic) would
    /// otherwise both re-create the topic, the second after the first's
    /// partitions began to copy into it. Starts are rare; a long export
    /// delays the others on this node.
    starts: tokio::sync::Mutex<()>,
    /// Held (read) by each admin operation that changes the clusters (a
    /// failback's delete and re-create, a quarantine export, source fences
    /// made or lifted), for its whole length; `shutdown` holds it (write)
    /// until after the release. These run on the caller's task, outside
    /// any actor, and the log fenced by the release refuses only appends:
    /// a DeleteTopics landing after it could delete the topic the shard's
    /// next owner re-created and copies into.
    ops: tokio::sync::RwLock<()>,
    /// Set by `shutdown` before it waits for `ops`: an operation refuses
    /// to begin, and one under way stops at its next safe point (see
    /// `Node::go_on`), so the release stays well inside the rebalance
    /// timeout.
    stop: AtomicBool,
    /// The task that keeps `Mirrors::hosted` as the follower reads the
    /// other shards; ended and awaited by `shutdown` before it stops them.
    hosting: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct Mirrors {
    running: BTreeMap<String, Running>,
    /// The spread mirrors other shards coordinate that this shard hosts
    /// partitions of (see `hosted.rs`).
    hosted: BTreeMap<String, Running>,
    /// Mirrors of the log this node cannot run, and why: their properties
    /// name a `${file:…}` or `${env:…}` that does not resolve here, or a
    /// client setting this node refuses. One such mirror stops no other
    /// (as a failed connector does not stop a Connect worker); an
    /// operation naming it tries it again, so a file put back is enough.
    unrunnable: BTreeMap<String, NodeError>,
    /// The spread mirrors this shard should host but cannot, and why: as
    /// `unrunnable`, described, and tried again by `follow_hosted`.
    unhostable: BTreeMap<String, NodeError>,
    stopping: bool,
}

/// A running mirror: its actor, its partitions' status board and its
/// source connection.
struct Running {
    actor: Addr<MirrorActor>,
    /// What the actor was started with: a host whose mirror was deleted
    /// and created again differently, in one read of the follower, is
    /// started again rather than kept on the old source.
    config: MirrorConfig,
    board: StatusBoard,
    source: Arc<dyn SourceCluster>,
    retry: RetryPolicy,
    /// The source's state topic as this mirror reads it: every read of it
    /// on this source connection goes through here, one at a time (two
    /// fetches of one partition on one connection take each other's place).
    history: Arc<SourceHistory>,
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
/// `acls.include`), which the client would refuse as unknown, with the
/// `${file:…}` and `${env:…}` references resolved on this node.
fn client_properties(
    props: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, NodeError> {
    let client = props
        .iter()
        .filter(|(k, _)| !k.starts_with("mirror.") && !MIRROR_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    crate::providers::resolve(&client, |name| std::env::var(name).ok())
        .map_err(|e| NodeError::new("INVALID_CONFIG", e.to_string()))
}

fn retry_policy(props: &BTreeMap<String, String>) -> Result<RetryPolicy, NodeError> {
    RetryPolicy::from_config(|k| props.get(k).cloned())
        .map_err(|e| NodeError::new("INVALID_CONFIG", e.to_string()))
}

/// Hands the whole (compacted) log to the publisher in the background, so
/// the state topic holds everything after a restart, an upgrade, or a
/// state topic deleted by hand. Records already there are written again;
/// compaction keeps one.
fn republish(log: Arc<dyn EventLog>, publisher: Addr<StatePublisher>) {
    tokio::task::spawn_blocking(move || {
        let entries = match log.read(0) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "reading the event log to publish it failed");
                return;
            }
        };
        let mut chunk = Vec::with_capacity(4096);
        for e in entries {
            match e {
                Ok(e) => chunk.push((e.offset, e.record)),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the event log to publish it failed");
                    return;
                }
            }
            if chunk.len() == 4096 {
                publisher.do_send(Appended {
                    records: Arc::new(std::mem::take(&mut chunk)),
                });
            }
        }
        if !chunk.is_empty() {
            publisher.do_send(Appended {
                records: Arc::new(chunk),
            });
        }
    });
}

/// The destination partitions of the mirror topics `image` coordinates
/// that run on `shard` (all of them on one node, and of a mirror placed
/// whole; of a spread mirror, those placed in the shard), STOPPED ones too
/// if `stopped`. A clustered node fences the ones not STOPPED before any
/// mirror runs, since the node that owned the shard before may still be
/// writing them (paused, not dead). A partition a MirrorActor starts later
/// (a new topic, a grown one) is not fenced: no node wrote it before this
/// one (starting it is a state write, which only the shard's current owner
/// makes), so it has no previous owner to shut out; its first sink
/// acquires its id.
fn destination_partitions(
    image: &MirrorStateImage,
    shard: Option<(i32, i32)>,
    stopped: bool,
) -> Vec<crate::kafka::fetch::TopicPartition> {
    let mut out = Vec::new();
    for (mirror, config) in image.mirrors() {
        let spread = kmirror_events::spreads(config).unwrap_or(false);
        for entry in image.topics_of(mirror) {
            let t = &entry.change;
            for p in 0..t.partition_count {
                let key = kmirror_events::MirrorPartitionKey::new(mirror.clone(), t.topic_id, p);
                let here = shard.is_none_or(|(shard, partitions)| {
                    kmirror_events::placement_shard(&key, spread, partitions) == shard
                });
                if here
                    && (stopped
                        || image.partition_state_or_unknown(&key)
                            != kmirror_events::PartitionState::Stopped)
                {
                    out.push(crate::kafka::fetch::TopicPartition::new(&t.topic_name, p));
                }
            }
        }
    }
    out
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
        let publisher = settings.shard.is_none().then(|| {
            StatePublisher::new(PublisherSpec {
                destination: destination.clone(),
                topic: settings.state_topic.clone(),
                partitions: settings.state_topic_partitions,
            })
            .start()
        });
        let loading = log.clone();
        let mut loaded = tokio::task::spawn_blocking(move || CoordinatorActor::load(loading))
            .await
            .map_err(unavailable)?
            .map_err(|e| {
                NodeError::new("KAFKA_STORAGE_ERROR", format!("loading the event log: {e}"))
            })?;
        if let Some(publisher) = &publisher {
            loaded = loaded.publish_to(publisher.clone().recipient());
            republish(log.clone(), publisher.clone());
        }
        if let (Some(shard), Some(followed)) = (settings.shard, &settings.followed) {
            loaded = loaded.hosting(Hosting {
                shard,
                followed: followed.clone(),
                hosted_copies: None,
            });
        }
        let log_failure = loaded.log_failure();
        let coordinator = loaded.start();
        let node = Node {
            inner: Arc::new(Inner {
                log,
                coordinator,
                publisher,
                destination,
                connect_source,
                settings,
                mirrors: tokio::sync::Mutex::default(),
                log_failure,
                starts: Default::default(),
                ops: Default::default(),
                stop: AtomicBool::new(false),
                hosting: Default::default(),
            }),
        };
        let image = node.image().await?;
        if let Some(shard) = node.inner.settings.shard {
            let hosted = node.hosted_writable(&image).await?;
            node.fence_unless_released(shard, &image, hosted).await?;
        }
        for (name, config) in image.mirrors() {
            if let Err(e) = node.run_mirror(name, config).await {
                tracing::error!(mirror = %name, error = %e, "mirror not started");
            }
        }
        node.follow_hosted();
        Ok(node)
    }

    /// Shuts the shard's previous owner out of its destination partitions,
    /// unless it left them cleanly.
    ///
    /// A log whose newest record is this shard's `ShardRelease` was let go
    /// after every pump of it had closed its sink and awaited it: no batch
    /// of the old owner is queued or in flight, and the release being the
    /// last record means nothing ran after it. Fence markers would then
    /// only cost a destination offset per partition (and offsets identical
    /// to the source's). What still shuts the old epoch out is each
    /// partition's first sink: it acquires the partition's transactional id
    /// (InitProducerId, epoch + 1), and its first batch raises the epoch the
    /// partition leader keeps, exactly as a marker would; the old owner
    /// holds no renewable epoch (a renewal names its old epoch and gets
    /// PRODUCER_FENCED). One gap remains, as on one node: a produce request
    /// the broker held past its client's timeout could still land before
    /// that first batch; the first produce's offset check then fails the
    /// partition as a foreign write rather than duplicating silently.
    /// Any other ending — a crash, a pause, a session lost while writing —
    /// leaves no release last, and the partitions are fenced as before.
    async fn fence_unless_released(
        &self,
        shard: i32,
        image: &MirrorStateImage,
        hosted: Vec<crate::kafka::fetch::TopicPartition>,
    ) -> Result<(), NodeError> {
        let mut partitions = destination_partitions(image, self.placed_in(), false);
        partitions.extend(hosted);
        let count = partitions.len();
        if let Some(release) = image.ends_with_release(shard) {
            tracing::info!(
                shard,
                partitions = count,
                released_by = %release.member,
                reason = %release.reason,
                "clean handover of shard {shard}: no fence markers"
            );
            return self
                .inner
                .destination
                .acquire(partitions)
                .await
                .map_err(|e| kafka("take the shard's destination partitions", e));
        }
        self.inner
            .destination
            .fence(partitions)
            .await
            .map_err(|e| kafka("fence the shard's destination partitions", e))?;
        tracing::info!(
            shard,
            partitions = count,
            "unclean handover of shard {shard} (its log does not end with a release): destination partitions fenced, one marker each"
        );
        Ok(())
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
                lazy: false,
            })
            .await
            .map_err(unavailable)?
            .map_err(refused)
    }

    /// Starts `name`'s MirrorActor, unless it runs already. A mirror whose
    /// properties cannot make a source client here is kept among the
    /// unrunnable with the reason, which names it.
    async fn run_mirror(&self, name: &str, config: &MirrorConfig) -> Result<(), NodeError> {
        self.run_as(name, config, false).await
    }

    /// [`Node::run_mirror`], or with `hosted` the host MirrorActor of a
    /// spread mirror another shard coordinates.
    async fn run_as(
        &self,
        name: &str,
        config: &MirrorConfig,
        hosted: bool,
    ) -> Result<(), NodeError> {
        let mut props = config.source_properties.clone();
        props.insert("bootstrap.servers".into(), config.source_bootstrap.clone());
        let connected = match (
            self.check_runs_spread(config),
            retry_policy(&props),
            client_properties(&props),
        ) {
            (Ok(()), Ok(retry), Ok(client)) => (self.inner.connect_source)(client)
                .await
                .map(|source| (retry, source))
                .map_err(|e| kafka("connect to the source cluster", e)),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e),
        };
        let mut mirrors = self.inner.mirrors.lock().await;
        if mirrors.stopping {
            return Err(NodeError::new(
                "NOT_COORDINATOR",
                format!("mirror {name} not started: the node is stopping"),
            ));
        }
        let mirrors = &mut *mirrors;
        if (if hosted {
            &mirrors.hosted
        } else {
            &mirrors.running
        })
        .contains_key(name)
        {
            return Ok(());
        }
        let (retry, source) = connected.map_err(|e| {
            let e = NodeError::new(
                &e.code,
                format!(
                    "cluster mirror {name:?} cannot run on this node: {}",
                    e.message
                ),
            );
            let failed = if hosted {
                &mut mirrors.unhostable
            } else {
                &mut mirrors.unrunnable
            };
            failed.insert(name.to_string(), e.clone());
            e
        })?;
        if hosted {
            mirrors.unhostable.remove(name);
        } else {
            mirrors.unrunnable.remove(name);
        }
        let board = StatusBoard::default();
        let history = Arc::new(SourceHistory::new(&self.inner.settings.state_topic));
        let actor = MirrorActor::new(MirrorSpec {
            name: name.to_string(),
            source: source.clone(),
            destination: self.inner.destination.clone(),
            coordinator: self.inner.coordinator.clone(),
            retry,
            jitter: self.inner.settings.jitter.clone(),
            refresh_interval: self.inner.settings.refresh_interval,
            published: self.inner.publisher.as_ref().map(|p| p.clone().recipient()),
            history: Some(history.clone()),
            board: board.clone(),
            placement: self.placement(config, hosted),
            hosted_final_sync: self
                .inner
                .settings
                .ask_final_sync
                .clone()
                .filter(|_| hosted)
                .map(|ask| HostedFinalSync::new(ask).start().recipient()),
        })
        .start();
        (if hosted {
            &mut mirrors.hosted
        } else {
            &mut mirrors.running
        })
        .insert(
            name.to_string(),
            Running {
                actor,
                config: config.clone(),
                board,
                source,
                retry,
                history,
            },
        );
        Ok(())
    }

    /// What `pick` takes from a running mirror's entry.
    async fn of_running<T>(
        &self,
        mirror: &str,
        pick: impl FnOnce(&Running) -> T,
    ) -> Result<T, NodeError> {
        {
            let mirrors = self.inner.mirrors.lock().await;
            if let Some(running) = mirrors.running.get(mirror) {
                return Ok(pick(running));
            }
            if !mirrors.unrunnable.contains_key(mirror) {
                return Err(NodeError::unknown_mirror(mirror));
            }
        }
        // Tried again: what it lacked may be here now.
        let image = self.image().await?;
        let config = image
            .mirror(mirror)
            .ok_or_else(|| NodeError::unknown_mirror(mirror))?;
        self.run_mirror(mirror, config).await?;
        self.inner
            .mirrors
            .lock()
            .await
            .running
            .get(mirror)
            .map(pick)
            .ok_or_else(|| NodeError::unknown_mirror(mirror))
    }

    async fn running(
        &self,
        mirror: &str,
    ) -> Result<(Addr<MirrorActor>, Arc<dyn SourceCluster>), NodeError> {
        self.of_running(mirror, |r| (r.actor.clone(), r.source.clone()))
            .await
    }

    /// The status board of a running mirror's partitions.
    async fn board(&self, mirror: &str) -> Result<StatusBoard, NodeError> {
        self.of_running(mirror, |r| r.board.clone()).await
    }

    /// Every running MirrorActor, copied out so no call to one holds the
    /// lock.
    async fn actors(&self) -> Vec<Addr<MirrorActor>> {
        let mirrors = self.inner.mirrors.lock().await;
        mirrors.running.values().map(|r| r.actor.clone()).collect()
    }

    /// Resolves with the store's error once the event log can take no more
    /// records (a full or failing disk); pending until then. Nothing can be
    /// copied without recording it first, so the daemon exits on it and a
    /// restart reopens the log and resumes where it ends.
    pub async fn log_failed(&self) -> String {
        let mut rx = self.inner.log_failure.clone();
        let seen = rx.wait_for(Option::is_some).await.map(|f| f.clone());
        match seen {
            Ok(failure) => failure.unwrap_or_default(),
            // The coordinator is gone with its sender: nothing to report.
            Err(_) => std::future::pending().await,
        }
    }

    /// [`Node::log_failed`]'s failure if it already happened.
    pub fn log_broken(&self) -> Option<String> {
        self.inner.log_failure.borrow().clone()
    }

    /// Admits an admin operation that changes the clusters: it holds the
    /// guard until done, and is refused once the node is stopping (see
    /// `Inner::ops`).
    async fn admit(&self) -> Result<tokio::sync::RwLockReadGuard<'_, ()>, NodeError> {
        self.go_on()?;
        let admitted = self.inner.ops.read().await;
        self.go_on()?;
        Ok(admitted)
    }

    /// Refuses as a node that no longer coordinates once `shutdown` began:
    /// checked where an admitted operation can stop and be asked again.
    fn go_on(&self) -> Result<(), NodeError> {
        if self.inner.stop.load(Ordering::SeqCst) {
            return Err(NodeError::new(
                "NOT_COORDINATOR",
                "the node is stopping: ask again once it, or its shard's next owner, runs",
            ));
        }
        Ok(())
    }

    /// Graceful stop: every partition stops fetching, finishes what is in
    /// flight, makes its map durable; the log is flushed. A shard then
    /// appends its `ShardRelease` last (see [`Node::release`]). Admin
    /// operations under way are cut off (or finish) first: they change the
    /// clusters outside any actor, and none may after the release.
    pub async fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        let _ops = self.inner.ops.write().await;
        self.stop_following_hosted().await;
        let actors = {
            let mut mirrors = self.inner.mirrors.lock().await;
            mirrors.stopping = true;
            mirrors
                .running
                .values()
                .chain(mirrors.hosted.values())
                .map(|r| r.actor.clone())
                .collect::<Vec<_>>()
        };
        // StopMirror answers once its sync actor is stopped and every
        // PartitionActor's pump has ended, and a pump ends only after its
        // final checkpoint is durable and its sink closed and awaited.
        futures_util::future::join_all(actors.iter().map(|a| a.send(StopMirror))).await;
        if let Some(shard) = self.inner.settings.shard {
            self.release(shard).await;
            // Whoever takes the shard next passes our epochs: should it come
            // back here, its partitions are acquired afresh, never renewed.
            if let Ok(image) = self.image().await {
                let mut partitions = destination_partitions(&image, self.placed_in(), true);
                partitions.extend(self.hosted_partitions(&image, true));
                self.inner.destination.forget(partitions);
            }
        }
        let log = self.inner.log.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || log.flush()).await {
            tracing::error!(error = %e, "flushing the event log failed");
        }
    }
}

impl Node {
    /// Appends the shard's `ShardRelease`, the last record of this owner:
    /// the coordinator refuses every write after it (a straggler's), so
    /// the next owner finds it newest and skips its fence markers. A
    /// release that fails (the log was fenced: someone took the shard
    /// already) is only logged; the next owner then fences as after a crash.
    async fn release(&self, shard: i32) {
        let release = kmirror_events::ShardRelease {
            member: self.inner.settings.member.clone(),
            reason: "stopped by its owner (revoked, or the node is shutting down)".to_string(),
        };
        match self
            .execute(Command::ReleaseShard { shard, release }, None)
            .await
        {
            Ok(applied) => {
                tracing::info!(shard, offset = applied.offset, "shard release recorded")
            }
            Err(e) => {
                tracing::warn!(shard, error = %e, "shard release not recorded: its next owner fences")
            }
        }
    }
}

#[cfg(test)]
mod failover_tests;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod spread_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod verify_tests;
