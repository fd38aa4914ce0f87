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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::{
    partition_state_partition, FailoverReport, MirrorConfig, MirrorPartitionKey, MirrorStateImage,
    PartitionState, RetryPolicy, TopicId,
};

use crate::cluster::{DestinationCluster, SourceCluster};
use crate::coordinator::{CoordinatorActor, ReadImage};
use crate::failback::SourceHistory;
use crate::kafka::Jitter;
use crate::metadata_sync::{
    FinalPass, FinalSync, GetSyncMetrics, MetadataSyncActor, PartitionsGrew, StopSync, SyncMetrics,
    SyncSpec,
};
use crate::partition::risk::RiskReads;
use crate::partition::{
    Desire, Fail, PartitionActor, PartitionSpec, PartitionStatus, PreviewFailover, Recover,
    Shutdown, StatusBoard,
};
use crate::publisher::WaitPublished;
use crate::spread::{AskHostedCopies, Followed, Hosting};

/// Re-read the image and bring the partitions in line with it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reconcile;

/// The failover report of every partition of these topics as a stop would
/// record it now (`stop --dry-run`), sorted by topic and partition.
#[derive(Message)]
#[rtype(result = "Vec<(PartitionStatus, Result<FailoverReport, String>)>")]
pub struct PreviewFailovers(pub Vec<TopicId>);

/// Operator recovery of the FAILED partitions of these topics.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct RecoverTopics(pub Vec<TopicId>);

/// Stop every partition (in-flight work finished, state durable), then the
/// actor. Resolves when all are down.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopMirror;

pub use crate::refresh::MirrorError;

/// How often at most a host reconciles with the coordinator's shard as read.
const HOST_RECONCILE_EVERY: Duration = Duration::from_millis(100);

/// Which of a mirror's partitions a MirrorActor runs (see [`crate::spread`]).
#[derive(Clone, Default)]
pub enum Placement {
    /// Every one: a single node, or a mirror placed whole in its
    /// coordinator's shard.
    #[default]
    Whole,
    /// Those placed in `shard` of a spread mirror, the others read
    /// through `followed`. With `host` (the config this host was started
    /// for), another shard coordinates the mirror: its topics are read
    /// there as this node follows it, and discovery, the metadata sync and
    /// the on-demand verify are the coordinator's (the background check
    /// runs here too, over the partitions placed here).
    Spread {
        shard: i32,
        partitions: i32,
        followed: Option<Followed>,
        host: Option<Box<MirrorConfig>>,
        /// The coordinator's: how its sync asks the hosts how their
        /// partitions stand (`Hosting::hosted_copies`).
        hosted_copies: Option<AskHostedCopies>,
    },
}

impl Placement {
    /// Whether `key` runs here.
    fn runs(&self, key: &MirrorPartitionKey) -> bool {
        match self {
            Placement::Whole => true,
            Placement::Spread {
                shard, partitions, ..
            } => partition_state_partition(key, *partitions) == *shard,
        }
    }

    /// The followed coordinator and the config hosted, when this actor
    /// only hosts.
    fn host(&self) -> Option<(&Followed, &MirrorConfig)> {
        match self {
            Placement::Spread {
                followed: Some(followed),
                host: Some(config),
                ..
            } => Some((followed, config)),
            _ => None,
        }
    }

    /// Where the partitions placed in other shards are read, for a spread
    /// mirror.
    fn spread(&self) -> Option<Hosting> {
        match self {
            Placement::Spread {
                shard,
                followed: Some(followed),
                hosted_copies,
                ..
            } => Some(Hosting {
                shard: *shard,
                followed: followed.clone(),
                hosted_copies: hosted_copies.clone(),
            }),
            _ => None,
        }
    }
}

pub struct MirrorSpec {
    pub name: String,
    pub source: Arc<dyn SourceCluster>,
    pub destination: Arc<dyn DestinationCluster>,
    pub coordinator: Addr<CoordinatorActor>,
    pub retry: RetryPolicy,
    /// Handed to every partition ([`PartitionSpec::jitter`]).
    pub jitter: Jitter,
    pub refresh_interval: Duration,
    /// Where a partition being stopped waits for its LastMirrorEpochs to
    /// reach the state topic (None: nothing is published, as in tests).
    pub published: Option<Recipient<WaitPublished>>,
    /// The source's history, shared by the partitions (mirror-loop rule).
    pub history: Option<Arc<SourceHistory>>,
    /// Where the partitions publish their status; describe reads it
    /// without asking this actor or them.
    pub board: StatusBoard,
    pub placement: Placement,
    /// A host's: where its partitions being stopped ask the coordinator
    /// for their final group-offset pass ([`crate::hosted_sync`]); a
    /// coordinator's partitions ask its own MetadataSyncActor.
    pub hosted_final_sync: Option<Recipient<FinalSync>>,
}

pub struct MirrorActor {
    spec: MirrorSpec,
    partitions: HashMap<MirrorPartitionKey, Addr<PartitionActor>>,
    /// What each topic's partitions were last told by [`Self::reconcile`]:
    /// its partition count and desired state. A topic found as it was is
    /// skipped: every refresh reconciles, and telling 10 000 partitions
    /// what they already knew every 5 s woke each actor for nothing (an
    /// idle daemon at 10 000 partitions used 4.6–4.9 CPU-s per minute with
    /// it, 2.8–3.9 without).
    told: HashMap<TopicId, (i32, PartitionState)>,
    refreshing: bool,
    /// Set by [`StopMirror`]: its partitions are being shut down, and a
    /// reconcile still running (a refresh, a grown topic) must not start
    /// them again, or they would outlive the stop.
    stopping: bool,
    /// Group offsets, configs, partition counts, ACLs (started with us).
    sync: Option<Addr<MetadataSyncActor>>,
    /// The partitions' risk samples read the source through it, batched.
    risk_reads: RiskReads,
}

impl MirrorActor {
    pub fn new(spec: MirrorSpec) -> Self {
        MirrorActor {
            risk_reads: RiskReads::new(spec.source.clone()),
            spec,
            partitions: HashMap::new(),
            told: HashMap::new(),
            refreshing: false,
            stopping: false,
            sync: None,
        }
    }

    /// Starts missing PartitionActors and sends each one its topic's
    /// desired state when the topic's count or desired state changed since
    /// it was last told; stops the partitions of topics that left.
    /// `topics` holds the mirror's topic-level records (its coordinator's
    /// image), `own` this shard's, where the partitions run here keep
    /// their records.
    fn reconcile(
        &mut self,
        (topics, own): (&MirrorStateImage, &MirrorStateImage),
        ctx: &mut Context<Self>,
    ) {
        if self.stopping {
            return;
        }
        let image = topics;
        let mut live: HashSet<TopicId> = HashSet::new();
        let support_ule = image.mirror(&self.spec.name).is_some_and(|c| {
            c.source_properties
                .get("mirror.support.unclean.leader.election")
                .is_some_and(|v| v == "true")
        });
        // Validated at create/alter; a partition keeps the settings it
        // started with.
        let risk = image
            .mirror(&self.spec.name)
            .and_then(|c| kmirror_events::RiskSettings::from_config(c).ok())
            .unwrap_or_default();
        for entry in image.topics_of(&self.spec.name) {
            let t = &entry.change;
            live.insert(t.topic_id);
            let told = (t.partition_count, t.desired_state);
            if self.told.get(&t.topic_id) == Some(&told) {
                continue;
            }
            for p in 0..t.partition_count {
                let key = MirrorPartitionKey::new(self.spec.name.clone(), t.topic_id, p);
                if !self.spec.placement.runs(&key) {
                    continue;
                }
                let addr = self.partitions.entry(key.clone()).or_insert_with(|| {
                    PartitionActor::new(PartitionSpec {
                        stored: own.partition_state(&key).cloned(),
                        key,
                        topic: t.topic_name.clone(),
                        source: self.spec.source.clone(),
                        destination: self.spec.destination.clone(),
                        coordinator: self.spec.coordinator.clone(),
                        retry: self.spec.retry,
                        jitter: self.spec.jitter.clone(),
                        desired: t.desired_state,
                        support_unclean_leader_election: support_ule,
                        final_sync: self
                            .sync
                            .clone()
                            .map(Addr::recipient)
                            .or_else(|| self.spec.hosted_final_sync.clone()),
                        published: self.spec.published.clone(),
                        history: self.spec.history.clone(),
                        risk,
                        risk_reads: self.risk_reads.clone(),
                        board: self.spec.board.clone(),
                        still_mirroring: self
                            .spec
                            .placement
                            .host()
                            .map(|(f, _)| f.still_mirroring()),
                    })
                    .start()
                });
                addr.do_send(Desire(t.desired_state));
            }
            self.told.insert(t.topic_id, told);
        }
        // Partitions whose topic left the mirror (mirror deleted, topic
        // association cleared) stop. Every live topic is in `told` now, so
        // a longer `told` holds a topic that left.
        if self.told.len() > live.len() {
            self.told.retain(|id, _| live.contains(id));
            self.partitions.retain(|k, addr| {
                let keep = live.contains(&k.topic_id);
                if !keep {
                    addr.do_send(Shutdown);
                    self.spec.board.remove(k);
                }
                keep
            });
        }
        let _ = ctx;
    }

    /// The PartitionActors of these topics.
    fn partitions_of(&self, topics: &[TopicId]) -> Vec<(MirrorPartitionKey, Addr<PartitionActor>)> {
        self.partitions
            .iter()
            .filter(|(k, _)| topics.contains(&k.topic_id))
            .map(|(k, a)| (k.clone(), a.clone()))
            .collect()
    }

    /// One refresh: source identity, discovery, exclude enforcement.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing || self.stopping {
            return;
        }
        self.refreshing = true;
        let name = self.spec.name.clone();
        let source = self.spec.source.clone();
        let destination = self.spec.destination.clone();
        let coordinator = self.spec.coordinator.clone();
        let history = self.spec.history.clone();
        let host = self.spec.placement.host().map(|(_, config)| config.clone());
        let work = async move {
            // A host checks the source of the mirror it was started for
            // (not a later one of that name); discovery is the coordinator's.
            let (config, image) = match host {
                Some(config) => (config, None),
                None => {
                    let image = coordinator.send(ReadImage).await.ok()?;
                    (image.mirror(&name)?.clone(), Some(image))
                }
            };
            if let Err(e) = crate::refresh::check_source_identity(&config, &*source).await {
                tracing::error!(mirror = %name, error = %e, "source cluster check failed");
                return matches!(e, MirrorError::SourceClusterChanged { .. }).then_some(e);
            }
            let image = image?;
            if let Err(e) = crate::refresh::discover(
                &name,
                &config,
                (&*source, history.as_deref()),
                &*destination,
                &coordinator,
                &image,
            )
            .await
            {
                tracing::warn!(mirror = %name, error = %e, "topic discovery failed; retrying next refresh");
            }
            None
        };
        ctx.spawn(work.into_actor(self).then(|changed, act, ctx| {
            act.refreshing = false;
            if let Some(e) = changed {
                for p in act.partitions.values() {
                    p.do_send(Fail {
                        message: e.to_string(),
                        retryable: false,
                    });
                }
            }
            act.handle(Reconcile, ctx)
        }));
    }

    /// The background check of the partitions run here, a host's too
    /// (their maps are in its shard). Spawned in this context: it ends
    /// when the mirror stops.
    fn verify_in_background(&self, ctx: &mut Context<Self>) {
        let hosted = self.spec.placement.host().map(|(f, _)| f.clone());
        ctx.spawn(actix::fut::wrap_future(crate::verify::background(
            self.spec.name.clone(),
            self.spec.source.clone(),
            self.spec.destination.clone(),
            self.spec.coordinator.clone(),
            hosted,
        )));
    }
}

impl Actor for MirrorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some((followed, _)) = self.spec.placement.host() {
            // A host: its partitions follow the coordinator's shard as
            // read, and the refresh only checks the source's identity.
            let mut changes = followed.watch();
            let first = self.handle(Reconcile, ctx);
            ctx.spawn(first);
            let me = ctx.address();
            // Spawned in this context: it ends when the actor stops. The
            // follower publishes each answer of each shard; a reconcile a
            // tenth of a second serves them all.
            ctx.spawn(actix::fut::wrap_future(async move {
                while changes.changed().await.is_ok() {
                    me.do_send(Reconcile);
                    tokio::time::sleep(HOST_RECONCILE_EVERY).await;
                }
            }));
            self.refresh(ctx);
            ctx.run_interval(self.spec.refresh_interval, |act, ctx| act.refresh(ctx));
            self.verify_in_background(ctx);
            return;
        }
        self.sync = Some(
            MetadataSyncActor::new(SyncSpec {
                mirror: self.spec.name.clone(),
                source: self.spec.source.clone(),
                destination: self.spec.destination.clone(),
                coordinator: self.spec.coordinator.clone(),
                partitions_grew: ctx.address().recipient(),
                metadata_interval: self.spec.refresh_interval,
                start_delay: std::time::Duration::from_secs(1),
                keyless: {
                    let board = self.spec.board.clone();
                    Arc::new(move || board.keyless_copies())
                },
                spread: self.spec.placement.spread(),
            })
            .start(),
        );
        // The partitions start from the log at once, not after the first
        // refresh: its source identity check waits on the source, and a
        // source that does not answer (the disaster itself) would keep them
        // — and a describe or a stop of them — waiting a request timeout or
        // more. Nothing is copied from a wrong cluster meanwhile: alignment
        // checks each source topic's id, and the check, when it answers,
        // fails them if the cluster changed.
        let first = self.handle(Reconcile, ctx);
        ctx.spawn(first);
        self.refresh(ctx);
        ctx.run_interval(self.spec.refresh_interval, |act, ctx| act.refresh(ctx));
        self.verify_in_background(ctx);
    }
}

impl Handler<Reconcile> for MirrorActor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _msg: Reconcile, _ctx: &mut Context<Self>) -> Self::Result {
        let host = self
            .spec
            .placement
            .host()
            .map(|(f, config)| (f.clone(), config.clone()));
        Box::pin(self.spec.coordinator.send(ReadImage).into_actor(self).map(
            move |own, act, ctx| {
                let Ok(own) = own else { return };
                match host {
                    None => act.reconcile((&own, &own), ctx),
                    // Only a shard read to its end says what the
                    // mirror is: one being read again from its start
                    // is published empty meanwhile, and would stop
                    // every partition. And only the mirror this host
                    // was started for: one deleted and created again
                    // differently (its config precedes its topics in
                    // the shard) is the next host's to run.
                    Some((followed, config)) => match followed.coordinator_of(&act.spec.name) {
                        Some(shard)
                            if shard.caught_up()
                                && shard.image.mirror(&act.spec.name) == Some(&config) =>
                        {
                            act.reconcile((&shard.image, &own), ctx)
                        }
                        _ => {}
                    },
                }
            },
        ))
    }
}

impl Handler<PartitionsGrew> for MirrorActor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _msg: PartitionsGrew, ctx: &mut Context<Self>) -> Self::Result {
        self.handle(Reconcile, ctx)
    }
}

impl Handler<PreviewFailovers> for MirrorActor {
    type Result = ResponseFuture<Vec<(PartitionStatus, Result<FailoverReport, String>)>>;
    fn handle(&mut self, msg: PreviewFailovers, _ctx: &mut Context<Self>) -> Self::Result {
        let addrs = self.partitions_of(&msg.0);
        Box::pin(async move {
            let previews = addrs.iter().map(|(_, a)| a.send(PreviewFailover));
            let mut out: Vec<_> = futures_util::future::join_all(previews)
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect();
            out.sort_by(|(a, _), (b, _)| {
                (&a.topic, a.key.partition).cmp(&(&b.topic, b.key.partition))
            });
            out
        })
    }
}

impl Handler<RecoverTopics> for MirrorActor {
    type Result = ResponseFuture<Vec<String>>;
    fn handle(&mut self, msg: RecoverTopics, _ctx: &mut Context<Self>) -> Self::Result {
        let addrs = self.partitions_of(&msg.0);
        let board = self.spec.board.clone();
        Box::pin(async move {
            let mut recovered = Vec::new();
            for (key, a) in addrs {
                let Some(status) = board.status(&key) else {
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
        self.stopping = true;
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

/// The final pass of a partition another shard hosts, asked of its
/// coordinator (`Node::final_sync_hosted`): passed to the sync. A host runs
/// none, and its pass ends at once, not synced.
impl Handler<FinalSync> for MirrorActor {
    type Result = ResponseFuture<FinalPass>;
    fn handle(&mut self, msg: FinalSync, _ctx: &mut Context<Self>) -> Self::Result {
        let sync = self.sync.clone();
        Box::pin(async move {
            let not_synced = || FinalPass {
                done: tokio::sync::oneshot::channel().1,
                abort: futures_util::future::AbortHandle::new_pair().0,
                ended: None,
            };
            match sync {
                Some(s) => s.send(msg).await.unwrap_or_else(|_| not_synced()),
                None => not_synced(),
            }
        })
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

#[cfg(test)]
mod tests;
