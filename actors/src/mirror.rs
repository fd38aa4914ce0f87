//! MirrorActor: one per mirror. Keeps a PartitionActor running for every
//! partition of the mirror's topics and tells each what its topic should be
//! doing; every refresh interval it also rediscovers source topics that
//! match the mirror's patterns, stops topics that came to match exclude, and
//! checks that the source is still the cluster the mirror was created for.
//!
//! The desired state of a topic lives in the log (MirrorTopicStateChange);
//! this actor only reconciles the running partitions with it, so an
//! operation is: write the record (Node, through the coordinator), then
//! `Reconcile`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::{
    Command, MirrorConfig, MirrorPartitionKey, MirrorStateImage, PartitionState, RetryPolicy,
    StateValidation, TopicFilter, TopicId, TopicRef,
};

use crate::cluster::{DestinationCluster, SourceCluster, TopicInfo};
use crate::coordinator::{CoordinatorActor, Execute, ReadImage};
use crate::metadata_sync::{GetSyncMetrics, MetadataSyncActor, StopSync, SyncMetrics, SyncSpec};
use crate::partition::{
    Desire, GetStatus, PartitionActor, PartitionSpec, PartitionStatus, Recover, Shutdown,
};

/// Re-read the image and bring the partitions in line with it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reconcile;

/// The status of every partition of the mirror.
#[derive(Message)]
#[rtype(result = "Vec<PartitionStatus>")]
pub struct Describe;

/// Operator recovery of the FAILED partitions of these topics.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct RecoverTopics(pub Vec<TopicId>);

/// Stop every partition (in-flight work finished, state durable), then the
/// actor. Resolves when all are down.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopMirror;

pub struct MirrorSpec {
    pub name: String,
    pub source: Arc<dyn SourceCluster>,
    pub destination: Arc<dyn DestinationCluster>,
    pub coordinator: Addr<CoordinatorActor>,
    pub retry: RetryPolicy,
    pub refresh_interval: Duration,
}

pub struct MirrorActor {
    spec: MirrorSpec,
    partitions: HashMap<MirrorPartitionKey, Addr<PartitionActor>>,
    refreshing: bool,
    /// Group offsets, configs, partition counts, ACLs (started with us).
    sync: Option<Addr<MetadataSyncActor>>,
}

/// Makes sure the destination has `topic` with at least the source's
/// partition count, creating it with the source's explicit configs.
pub async fn ensure_destination_topic(
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    topic: &TopicInfo,
) -> Result<(), String> {
    let existing = destination
        .topics()
        .await
        .map_err(|e| format!("list destination topics: {e}"))?;
    if existing.iter().any(|t| t.name == topic.name) {
        return Ok(());
    }
    let configs = source
        .topic_configs(&topic.name)
        .await
        .map_err(|e| format!("describe source topic {} configs: {e}", topic.name))?;
    match destination
        .create_topic(&topic.name, topic.partitions, configs)
        .await
    {
        Ok(()) => Ok(()),
        // Discovery and an operator's start may race to create it: whoever
        // loses finds it there, which is all either wanted.
        Err(e) => match destination.topics().await {
            Ok(now) if now.iter().any(|t| t.name == topic.name) => Ok(()),
            _ => Err(format!("create destination topic {}: {e}", topic.name)),
        },
    }
}

impl MirrorActor {
    pub fn new(spec: MirrorSpec) -> Self {
        MirrorActor {
            spec,
            partitions: HashMap::new(),
            refreshing: false,
            sync: None,
        }
    }

    /// Starts missing PartitionActors and sends every one its topic's
    /// desired state.
    fn reconcile(&mut self, image: &MirrorStateImage, ctx: &mut Context<Self>) {
        let mut live = HashSet::new();
        let support_ule = image.mirror(&self.spec.name).is_some_and(|c| {
            c.source_properties
                .get("mirror.support.unclean.leader.election")
                .is_some_and(|v| v == "true")
        });
        for entry in image.topics_of(&self.spec.name) {
            let t = &entry.change;
            for p in 0..t.partition_count {
                let key = MirrorPartitionKey::new(self.spec.name.clone(), t.topic_id, p);
                live.insert(key.clone());
                let addr = self.partitions.entry(key.clone()).or_insert_with(|| {
                    PartitionActor::new(PartitionSpec {
                        key,
                        topic: t.topic_name.clone(),
                        source: self.spec.source.clone(),
                        destination: self.spec.destination.clone(),
                        coordinator: self.spec.coordinator.clone(),
                        retry: self.spec.retry,
                        desired: t.desired_state,
                        support_unclean_leader_election: support_ule,
                    })
                    .start()
                });
                addr.do_send(Desire(t.desired_state));
            }
        }
        // Partitions whose topic left the mirror (mirror deleted, topic
        // association cleared) stop.
        self.partitions.retain(|k, addr| {
            let keep = live.contains(k);
            if !keep {
                addr.do_send(Shutdown);
            }
            keep
        });
        let _ = ctx;
    }

    /// One refresh: source identity, discovery, exclude enforcement.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing {
            return;
        }
        self.refreshing = true;
        let name = self.spec.name.clone();
        let source = self.spec.source.clone();
        let destination = self.spec.destination.clone();
        let coordinator = self.spec.coordinator.clone();
        let work = async move {
            let image = coordinator.send(ReadImage).await.ok()?;
            let config = image.mirror(&name)?.clone();
            if let Err(e) =
                check_source_identity(&name, &config, &*source, &coordinator, &image).await
            {
                tracing::error!(mirror = %name, error = %e, "source cluster check failed");
                return Some(());
            }
            if let Err(e) = discover(
                &name,
                &config,
                &*source,
                &*destination,
                &coordinator,
                &image,
            )
            .await
            {
                tracing::warn!(mirror = %name, error = %e, "topic discovery failed; retrying next refresh");
            }
            Some(())
        };
        ctx.spawn(work.into_actor(self).then(|_, act, _ctx| {
            act.refreshing = false;
            act.spec
                .coordinator
                .send(ReadImage)
                .into_actor(act)
                .map(|image, act, ctx| {
                    if let Ok(image) = image {
                        act.reconcile(&image, ctx);
                    }
                })
        }));
    }
}

/// A changed source cluster id fails every partition, not retryable: the
/// mirror would otherwise copy another cluster's data into these topics.
async fn check_source_identity(
    name: &str,
    config: &MirrorConfig,
    source: &dyn SourceCluster,
    coordinator: &Addr<CoordinatorActor>,
    image: &MirrorStateImage,
) -> Result<(), String> {
    let id = source
        .cluster_id()
        .await
        .map_err(|e| format!("describe source cluster: {e}"))?;
    if config.source_cluster_id.is_empty() || id == config.source_cluster_id {
        return Ok(());
    }
    let message = format!(
        "the source cluster id changed from {} to {id}: bootstrap {} now reaches a different cluster",
        config.source_cluster_id, config.source_bootstrap
    );
    for (key, v) in image.partition_states_of(name) {
        if v.state == PartitionState::Failed && v.retry_attempt == -1 {
            continue;
        }
        let _ = coordinator
            .send(Execute::new(Command::FailPartition {
                key: key.clone(),
                leader_epoch: -1,
                error_message: message.clone(),
                retryable: false,
            }))
            .await;
    }
    Err(message)
}

/// Source topics matching include and not exclude that the mirror does not
/// know yet start mirroring; mirrored topics that now match exclude stop.
async fn discover(
    name: &str,
    config: &MirrorConfig,
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    coordinator: &Addr<CoordinatorActor>,
    image: &MirrorStateImage,
) -> Result<(), String> {
    let filter = TopicFilter::new(&config.topics_include, &config.topics_exclude)
        .map_err(|e| e.to_string())?;
    let known: BTreeMap<&str, _> = image
        .topics()
        .map(|(_, e)| (e.change.topic_name.as_str(), &e.change))
        .filter(|(_, c)| !c.mirror_name.is_empty())
        .collect();
    let topics = source
        .topics()
        .await
        .map_err(|e| format!("list source topics: {e}"))?;
    let mut start = Vec::new();
    for t in topics
        .iter()
        .filter(|t| !t.internal && filter.matches(&t.name))
    {
        if known.contains_key(t.name.as_str()) {
            continue;
        }
        ensure_destination_topic(source, destination, t).await?;
        start.push(TopicRef {
            topic_id: t.topic_id,
            name: t.name.clone(),
            partition_count: t.partitions,
        });
    }
    if !start.is_empty() {
        let ids: Vec<TopicId> = start.iter().map(|t| t.topic_id).collect();
        tracing::info!(mirror = %name, topics = ?start.iter().map(|t| &t.name).collect::<Vec<_>>(), "discovered topics");
        coordinator
            .send(Execute {
                command: Command::StartTopics {
                    mirror: name.to_string(),
                    topics: start,
                },
                state_validation: Some(StateValidation {
                    offset: image.end_offset(),
                    topics: ids,
                }),
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    let excluded: Vec<TopicId> = image
        .topics_of(name)
        .filter(|e| {
            matches!(
                e.change.desired_state,
                PartitionState::Mirroring | PartitionState::Paused
            )
        })
        .filter(|e| filter.is_excluded(&e.change.topic_name))
        .map(|e| e.change.topic_id)
        .collect();
    if !excluded.is_empty() {
        tracing::info!(mirror = %name, topics = excluded.len(), "stopping topics that now match exclude");
        coordinator
            .send(Execute {
                command: Command::StopTopics {
                    mirror: name.to_string(),
                    topics: excluded.clone(),
                },
                state_validation: Some(StateValidation {
                    offset: image.end_offset(),
                    topics: excluded,
                }),
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl Actor for MirrorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.sync = Some(
            MetadataSyncActor::new(SyncSpec {
                mirror: self.spec.name.clone(),
                source: self.spec.source.clone(),
                destination: self.spec.destination.clone(),
                coordinator: self.spec.coordinator.clone(),
                reconcile: ctx.address().recipient(),
                metadata_interval: self.spec.refresh_interval,
                start_delay: std::time::Duration::from_secs(1),
            })
            .start(),
        );
        self.refresh(ctx);
        ctx.run_interval(self.spec.refresh_interval, |act, ctx| act.refresh(ctx));
    }
}

impl Handler<Reconcile> for MirrorActor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _msg: Reconcile, _ctx: &mut Context<Self>) -> Self::Result {
        Box::pin(
            self.spec
                .coordinator
                .send(ReadImage)
                .into_actor(self)
                .map(|image, act, ctx| {
                    if let Ok(image) = image {
                        act.reconcile(&image, ctx);
                    }
                }),
        )
    }
}

impl Handler<Describe> for MirrorActor {
    type Result = ResponseFuture<Vec<PartitionStatus>>;
    fn handle(&mut self, _msg: Describe, _ctx: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<_> = self.partitions.values().cloned().collect();
        Box::pin(async move {
            let mut out = Vec::with_capacity(addrs.len());
            for a in addrs {
                if let Ok(s) = a.send(GetStatus).await {
                    out.push(s);
                }
            }
            out.sort_by(|a, b| (&a.topic, a.key.partition).cmp(&(&b.topic, b.key.partition)));
            out
        })
    }
}

impl Handler<RecoverTopics> for MirrorActor {
    type Result = ResponseFuture<Vec<String>>;
    fn handle(&mut self, msg: RecoverTopics, _ctx: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<_> = self
            .partitions
            .iter()
            .filter(|(k, _)| msg.0.contains(&k.topic_id))
            .map(|(_, a)| a.clone())
            .collect();
        Box::pin(async move {
            let mut recovered = Vec::new();
            for a in addrs {
                let Ok(status) = a.send(GetStatus).await else {
                    continue;
                };
                if status.state == PartitionState::Failed
                    && matches!(a.send(Recover).await, Ok(Ok(())))
                {
                    recovered.push(format!("{}-{}", status.topic, status.key.partition));
                }
            }
            recovered
        })
    }
}

impl Handler<StopMirror> for MirrorActor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _msg: StopMirror, _ctx: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<_> = self.partitions.drain().map(|(_, a)| a).collect();
        let sync = self.sync.take();
        Box::pin(
            async move {
                if let Some(sync) = sync {
                    let _ = sync.send(StopSync).await;
                }
                let stops = addrs.iter().map(|a| a.send(Shutdown));
                futures_util::future::join_all(stops).await;
            }
            .into_actor(self)
            .map(|_, _act, ctx| ctx.stop()),
        )
    }
}

impl Handler<GetSyncMetrics> for MirrorActor {
    type Result = ResponseFuture<SyncMetrics>;
    fn handle(&mut self, _msg: GetSyncMetrics, _ctx: &mut Context<Self>) -> Self::Result {
        let sync = self.sync.clone();
        let mirror = self.spec.name.clone();
        Box::pin(async move {
            match sync {
                Some(s) => s.send(GetSyncMetrics).await.unwrap_or_default(),
                None => SyncMetrics {
                    mirror,
                    ..Default::default()
                },
            }
        })
    }
}
