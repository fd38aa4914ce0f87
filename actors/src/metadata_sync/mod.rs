//! MetadataSyncActor: one per mirror, started and stopped by its
//! MirrorActor. It is what lets consumers and operators move to the
//! destination without surprises (KIP-1279 §7):
//!
//! - **group offsets**, every `mirror.groups.sync.interval.ms` (default 1 s):
//!   each source group matching the mirror's group filter has its committed
//!   offsets on the mirror's MIRRORING topics translated *exactly* through
//!   the offset map, clamped to the destination's `[log start, end]`, and
//!   committed (standalone) into the same group on the destination — unless
//!   that group is active there (JR20), in which case it is left alone;
//! - **topic configs**, **partition counts** and **ACLs**, every mirror
//!   refresh interval.
//!
//! Every change is first a record in the log (`GroupOffsetSync`,
//! `TopicConfigSync`, `AclSync`, `MirrorTopicStateChange` for partition
//! counts) and only then applied, so `kmirror log audit` shows each change
//! from what to what. A side effect that fails after its record leaves the
//! destination differing from the source, and the next tick records and
//! retries it.
//!
//! Decisions (active states, clamping, config diffs, ACL rules) are pure
//! functions in `kmirror_events::sync`; this actor only does the I/O, one
//! file per kind: `groups`, `topics` (configs and partition counts), `acls`.

mod acls;
mod groups;
mod topics;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::{abortable, AbortHandle, AbortRegistration, Abortable};
use kmirror_events::{
    Command, KeylessCopy, MirrorPartitionKey, MirrorStateImage, PartitionState, PatternError,
    SyncSettings, TopicId,
};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::cluster::{ClusterError, DestinationCluster, SourceCluster};
use crate::coordinator::{now_ms, CoordinatorActor, CoordinatorError, Execute, ReadImage};
use crate::spread::Hosting;

/// Runs one group pass and one metadata pass now and answers when both are
/// done (tests, and an operator's "sync now").
#[derive(Message)]
#[rtype(result = "SyncReport")]
pub struct SyncNow;

/// What a [`SyncNow`] did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Errors of this pass (also counted in the metrics).
    pub errors: Vec<SyncError>,
    /// Destination groups skipped because they are active there.
    pub skipped_groups: Vec<String>,
}

/// The sync's counters, for `/metrics`.
#[derive(Message)]
#[rtype(result = "SyncMetrics")]
pub struct GetSyncMetrics;

/// A partition being stopped asks for one last group-offset pass over it,
/// after its final checkpoint and before STOPPED, so consumers fail over
/// with exactly the offsets they had. Passes asked for together run as one.
/// Any periodic pass under way is abandoned: it read the source before the
/// stop and must not commit after it.
#[derive(Message)]
#[rtype(result = "FinalPass")]
pub struct FinalSync(pub MirrorPartitionKey);

/// The final pass a [`FinalSync`] joined. A partition that will not wait
/// for it any longer (the source is gone, the wait timed out) aborts it
/// before recording STOPPED: once `abort.abort()` returns, the pass is never
/// polled again, so it commits nothing on the destination after the
/// failover — where consumers now own the group offsets. A pass run
/// elsewhere (a hosted partition's, by its coordinator) cannot be stopped
/// from here: it ends by its own deadline, and `ended` says it has.
pub struct FinalPass {
    /// `true` when the pass ran to its end; `false` (or closed) when it was
    /// abandoned.
    pub done: oneshot::Receiver<bool>,
    pub abort: AbortHandle,
    /// For a pass run elsewhere: fires (or closes) once it is over, ended
    /// or abandoned there; what an abort then waits for before STOPPED.
    pub ended: Option<oneshot::Receiver<()>>,
}

/// Told to the MirrorActor after the sync recorded a larger partition
/// count, so it starts the new partitions' actors. The sync declares it and
/// the MirrorActor handles it: the parent knows the child, never the reverse.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PartitionsGrew;

/// Why a sync step failed; the next tick retries it.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("recording the change: {0}")]
    Log(#[from] CoordinatorError),
    #[error("mirror settings: {0}")]
    Settings(#[from] PatternError),
    #[error("reading where a partition is placed: {0}")]
    Placed(String),
    #[error("group {group}: {source}")]
    Group {
        group: String,
        #[source]
        source: Box<SyncError>,
    },
}

/// Stops the actor; in-flight passes are dropped (whatever they recorded
/// but did not apply is redone by the next owner's first tick).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopSync;

/// Counters and times of one mirror's metadata sync. Counters only grow;
/// `*_ms` are wall-clock milliseconds, 0 = never.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncMetrics {
    pub mirror: String,
    pub group_sync_errors: u64,
    pub config_sync_errors: u64,
    pub partition_sync_errors: u64,
    pub acl_sync_errors: u64,
    /// End of the last group pass that had no error.
    pub last_group_sync_ms: i64,
    /// End of the last config/partition/ACL pass that had no error.
    pub last_metadata_sync_ms: i64,
    /// Times a group was found active on the destination and skipped
    /// (counted once per stretch of activity, like the warning).
    pub active_groups_skipped: u64,
    /// Groups skipped in the last pass.
    pub active_groups_now: u64,
    pub group_offsets_committed: u64,
    pub topic_configs_changed: u64,
    pub partitions_added: u64,
    pub acls_created: u64,
    pub acls_deleted: u64,
}

/// What the actor needs.
pub struct SyncSpec {
    pub mirror: String,
    pub source: Arc<dyn SourceCluster>,
    pub destination: Arc<dyn DestinationCluster>,
    pub coordinator: Addr<CoordinatorActor>,
    /// Told after a partition count grew.
    pub partitions_grew: Recipient<PartitionsGrew>,
    /// Period of the config, partition-count and ACL passes (the mirror's
    /// refresh interval; the KIP's `mirror.metadata.refresh.interval.ms`).
    pub metadata_interval: Duration,
    /// Delay before the first passes, so the MirrorActor's first refresh
    /// (discovery, topic creation) goes first.
    pub start_delay: Duration,
    /// Where each topic's copy stands for the keyless hold (the mirror's
    /// status board says; see `topics`).
    pub keyless: KeylessCopies,
    /// For a spread mirror: where the offset maps of partitions placed in
    /// other shards are read (see [`crate::spread`]).
    pub spread: Option<Hosting>,
}

/// Reads where each topic's copy stands for the keyless hold.
pub type KeylessCopies = Arc<dyn Fn() -> HashMap<TopicId, (KeylessCopy, usize)> + Send + Sync>;

struct Shared {
    spec: SyncSpec,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    metrics: SyncMetrics,
    /// Groups warned about as active, until they stop being active.
    warned: BTreeSet<String>,
}

pub struct MetadataSyncActor {
    shared: Arc<Shared>,
    /// The periodic group pass under way, if any.
    groups_busy: Option<AbortHandle>,
    metadata_busy: bool,
    /// Final passes asked for and not started yet, with who waits on them,
    /// and the abort handle of the pass they will run as.
    finals: Vec<(MirrorPartitionKey, oneshot::Sender<bool>)>,
    next_final: Option<(AbortHandle, AbortRegistration)>,
    finals_busy: bool,
}

impl MetadataSyncActor {
    pub fn new(spec: SyncSpec) -> Self {
        let metrics = SyncMetrics {
            mirror: spec.mirror.clone(),
            ..Default::default()
        };
        MetadataSyncActor {
            shared: Arc::new(Shared {
                spec,
                state: Mutex::new(State {
                    metrics,
                    warned: BTreeSet::new(),
                }),
            }),
            groups_busy: None,
            metadata_busy: false,
            finals: Vec::new(),
            next_final: None,
            finals_busy: false,
        }
    }

    fn group_tick(&mut self, ctx: &mut Context<Self>) {
        if self.groups_busy.is_some() {
            return;
        }
        let shared = self.shared.clone();
        let (pass, abort) = abortable(async move { groups::group_pass(&shared, None).await });
        self.groups_busy = Some(abort);
        ctx.spawn(pass.into_actor(self).map(|pass, act, ctx| {
            act.groups_busy = None;
            let next = pass.map_or(Duration::from_secs(1), |(next, _)| next);
            ctx.run_later(next, |act, ctx| act.group_tick(ctx));
        }));
    }

    fn metadata_tick(&mut self, ctx: &mut Context<Self>) {
        if self.metadata_busy {
            return;
        }
        self.metadata_busy = true;
        let shared = self.shared.clone();
        ctx.spawn(
            async move { metadata_pass(&shared).await }
                .into_actor(self)
                .map(|_, act, _| act.metadata_busy = false),
        );
    }
}

impl MetadataSyncActor {
    /// Runs one final pass over every partition asked for so far.
    fn final_tick(&mut self, ctx: &mut Context<Self>) {
        if self.finals_busy || self.finals.is_empty() {
            return;
        }
        self.finals_busy = true;
        let (keys, waiters): (HashSet<_>, Vec<_>) = self.finals.drain(..).unzip();
        let (_, registration) = self.next_final.take().unwrap_or_else(AbortHandle::new_pair);
        let shared = self.shared.clone();
        let pass = Abortable::new(
            async move { groups::group_pass(&shared, Some(&keys)).await },
            registration,
        );
        ctx.spawn(pass.into_actor(self).map(move |pass, act, ctx| {
            // Synced only if it ran to its end without an error: no
            // periodic pass covers these partitions once they are STOPPED.
            let synced = matches!(&pass, Ok((_, report)) if report.errors.is_empty());
            for w in waiters {
                let _ = w.send(synced);
            }
            act.finals_busy = false;
            act.final_tick(ctx);
        }));
    }
}

impl Actor for MetadataSyncActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let spec = &self.shared.spec;
        let (delay, interval) = (spec.start_delay, spec.metadata_interval);
        ctx.run_later(delay, |act, ctx| act.group_tick(ctx));
        ctx.run_later(delay, move |act, ctx| {
            act.metadata_tick(ctx);
            ctx.run_interval(interval, |act, ctx| act.metadata_tick(ctx));
        });
    }
}

impl Handler<SyncNow> for MetadataSyncActor {
    type Result = ResponseFuture<SyncReport>;
    fn handle(&mut self, _msg: SyncNow, _ctx: &mut Context<Self>) -> Self::Result {
        let shared = self.shared.clone();
        Box::pin(async move {
            let (_, mut report) = groups::group_pass(&shared, None).await;
            report.errors.extend(metadata_pass(&shared).await);
            report
        })
    }
}

impl Handler<FinalSync> for MetadataSyncActor {
    type Result = MessageResult<FinalSync>;
    fn handle(&mut self, msg: FinalSync, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(periodic) = &self.groups_busy {
            periodic.abort();
        }
        let (tx, done) = oneshot::channel();
        self.finals.push((msg.0, tx));
        let abort = self
            .next_final
            .get_or_insert_with(AbortHandle::new_pair)
            .0
            .clone();
        self.final_tick(ctx);
        MessageResult(FinalPass {
            done,
            abort,
            ended: None,
        })
    }
}

impl Handler<GetSyncMetrics> for MetadataSyncActor {
    type Result = MessageResult<GetSyncMetrics>;
    fn handle(&mut self, _msg: GetSyncMetrics, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.shared
                .state
                .lock()
                .expect("sync state")
                .metrics
                .clone(),
        )
    }
}

impl Handler<StopSync> for MetadataSyncActor {
    type Result = ();
    fn handle(&mut self, _msg: StopSync, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

async fn record(shared: &Shared, command: Command) -> Result<(), CoordinatorError> {
    shared
        .spec
        .coordinator
        .send(Execute::new(command))
        .await??;
    Ok(())
}

async fn read_image(shared: &Shared) -> Result<Arc<MirrorStateImage>, CoordinatorError> {
    Ok(shared.spec.coordinator.send(ReadImage).await?)
}

/// The mirror's topics in `states`, by name: `(topic id, partition count)`.
fn mirrored_topics(
    image: &MirrorStateImage,
    mirror: &str,
    states: &[PartitionState],
) -> BTreeMap<String, (TopicId, i32)> {
    image
        .topics_of(mirror)
        .filter(|e| states.contains(&e.change.desired_state))
        .map(|e| {
            (
                e.change.topic_name.clone(),
                (e.change.topic_id, e.change.partition_count),
            )
        })
        .collect()
}

/// Configs, partition counts, ACLs. Returns this pass's errors.
async fn metadata_pass(shared: &Shared) -> Vec<SyncError> {
    let image = match read_image(shared).await {
        Ok(i) => i,
        Err(e) => return vec![e.into()],
    };
    let Some(config) = image.mirror(&shared.spec.mirror) else {
        return Vec::new();
    };
    let settings = match SyncSettings::from_config(config) {
        Ok(s) => s,
        Err(e) => return vec![e.into()],
    };
    let (mut configs, mut partitions, mut acls) = (0u64, 0u64, (0u64, 0u64));
    let config_errors = topics::sync_configs(shared, &image, &settings, &mut configs).await;
    let partition_errors = topics::sync_partitions(shared, &image, &mut partitions).await;
    let acl_errors: Vec<SyncError> = acls::sync_acls(shared, &image, &settings, &mut acls)
        .await
        .err()
        .into_iter()
        .collect();
    let mirror = &shared.spec.mirror;
    let mut st = shared.state.lock().expect("sync state");
    let m = &mut st.metrics;
    m.topic_configs_changed += configs;
    m.partitions_added += partitions;
    m.acls_created += acls.0;
    m.acls_deleted += acls.1;
    m.config_sync_errors += config_errors.len() as u64;
    m.partition_sync_errors += partition_errors.len() as u64;
    m.acl_sync_errors += acl_errors.len() as u64;
    let errors: Vec<SyncError> = config_errors
        .into_iter()
        .chain(partition_errors)
        .chain(acl_errors)
        .collect();
    if errors.is_empty() {
        m.last_metadata_sync_ms = now_ms();
    }
    for e in &errors {
        tracing::warn!(mirror = %mirror, error = %e, "metadata sync failed; retrying next refresh");
    }
    errors
}

#[cfg(test)]
mod tests;
