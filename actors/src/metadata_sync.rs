//! MetadataSyncActor: one per mirror, started and stopped by its
//! MirrorActor. It is what lets consumers and operators move to the
//! destination without surprises (issue 7, KIP-1279 §7):
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
//! functions in `kmirror_events::sync`; this actor only does the I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::sync::AclEntry;
use kmirror_events::{
    group_offset_target, is_active_group_state, AclSyncKey, Command, GroupFilter, GroupOffsetSync,
    GroupOffsetSyncKey, MirrorPartitionKey, MirrorStateImage, PartitionState, SyncSettings,
    TopicConfigSync, TopicConfigSyncKey, TopicId,
};
use serde::Serialize;

use crate::cluster::{
    AclBinding, CommittedOffset, DestinationCluster, GroupListing, GroupOffsets, LogBounds,
    SourceCluster,
};
use crate::coordinator::{now_ms, CoordinatorActor, Execute, ReadImage};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::{KafkaError, ResponseError};
use crate::mirror::Reconcile;

/// Runs one group pass and one metadata pass now and answers when both are
/// done (tests, and an operator's "sync now").
#[derive(Message)]
#[rtype(result = "SyncReport")]
pub struct SyncNow;

/// What a [`SyncNow`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Errors of this pass, one line each (also counted in the metrics).
    pub errors: Vec<String>,
    /// Destination groups skipped because they are active there.
    pub skipped_groups: Vec<String>,
}

/// The sync's counters, for `/metrics`.
#[derive(Message)]
#[rtype(result = "SyncMetrics")]
pub struct GetSyncMetrics;

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
    /// Told to start PartitionActors after a partition count grew.
    pub reconcile: Recipient<Reconcile>,
    /// Period of the config, partition-count and ACL passes (the mirror's
    /// refresh interval; the KIP's `mirror.metadata.refresh.interval.ms`).
    pub metadata_interval: Duration,
    /// Delay before the first passes, so the MirrorActor's first refresh
    /// (discovery, topic creation) goes first.
    pub start_delay: Duration,
}

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
    groups_busy: bool,
    metadata_busy: bool,
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
            groups_busy: false,
            metadata_busy: false,
        }
    }

    fn group_tick(&mut self, ctx: &mut Context<Self>) {
        if self.groups_busy {
            return;
        }
        self.groups_busy = true;
        let shared = self.shared.clone();
        ctx.spawn(
            async move { group_pass(&shared).await }
                .into_actor(self)
                .map(|(next, _), act, ctx| {
                    act.groups_busy = false;
                    ctx.run_later(next, |act, ctx| act.group_tick(ctx));
                }),
        );
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
            let (_, mut report) = group_pass(&shared).await;
            report.errors.extend(metadata_pass(&shared).await);
            report
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

async fn record(shared: &Shared, command: Command) -> Result<(), String> {
    shared
        .spec
        .coordinator
        .send(Execute::new(command))
        .await
        .map_err(|e| format!("coordinator: {e}"))?
        .map(|_| ())
        .map_err(|e| format!("recording the change: {e}"))
}

async fn read_image(shared: &Shared) -> Result<Arc<MirrorStateImage>, String> {
    shared
        .spec
        .coordinator
        .send(ReadImage)
        .await
        .map_err(|e| format!("coordinator: {e}"))
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

/// Whether a commit was refused because the group has live members (a
/// consumer joined between our listing and our commit).
fn refused_as_active(e: &KafkaError) -> bool {
    matches!(
        e.response_error(),
        Some(
            ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::RebalanceInProgress
                | ResponseError::FencedMemberEpoch
                | ResponseError::StaleMemberEpoch
                | ResponseError::GroupIdNotFound
        )
    )
}

/// Groups whose offsets are plain consumer offsets: consumer groups and
/// standalone-commit groups (share groups keep theirs elsewhere, Connect
/// groups have none).
fn has_consumer_offsets(g: &GroupListing) -> bool {
    (g.protocol_type.is_empty() || g.protocol_type == "consumer")
        && !g.group_type.eq_ignore_ascii_case("share")
}

/// One group-offset pass. Returns when to run the next one and what
/// happened.
async fn group_pass(shared: &Shared) -> (Duration, SyncReport) {
    let mut report = SyncReport::default();
    let mut next = Duration::from_secs(1);
    let mut skipped = BTreeSet::new();
    let mut committed = 0u64;
    if let Err(e) = sync_groups(shared, &mut next, &mut report, &mut skipped, &mut committed).await
    {
        report.errors.push(e);
    }
    let mirror = &shared.spec.mirror;
    let mut st = shared.state.lock().expect("sync state");
    for g in skipped.difference(&st.warned.clone()) {
        tracing::warn!(mirror = %mirror, group = %g, "consumer group is active on the destination; its offsets are not synced while it has members");
        st.metrics.active_groups_skipped += 1;
    }
    st.warned = skipped.clone();
    st.metrics.active_groups_now = skipped.len() as u64;
    st.metrics.group_offsets_committed += committed;
    if report.errors.is_empty() {
        st.metrics.last_group_sync_ms = now_ms();
    } else {
        st.metrics.group_sync_errors += report.errors.len() as u64;
        for e in &report.errors {
            tracing::warn!(mirror = %mirror, error = %e, "group offset sync failed; retrying next tick");
        }
    }
    report.skipped_groups = skipped.into_iter().collect();
    (next, report)
}

async fn sync_groups(
    shared: &Shared,
    next: &mut Duration,
    report: &mut SyncReport,
    skipped: &mut BTreeSet<String>,
    committed: &mut u64,
) -> Result<(), String> {
    let spec = &shared.spec;
    let image = read_image(shared).await?;
    let Some(config) = image.mirror(&spec.mirror) else {
        return Ok(());
    };
    let settings = SyncSettings::from_config(config).map_err(|e| e.to_string())?;
    *next = settings.group_interval;
    let filter = GroupFilter::new(&config.groups_include, &config.groups_exclude)
        .map_err(|e| e.to_string())?;
    // Only topics actively mirrored: a paused topic's copy is not moving,
    // and a stopped one has failed over — its destination groups belong to
    // the consumers that moved there.
    let topics = mirrored_topics(&image, &spec.mirror, &[PartitionState::Mirroring]);
    if topics.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = topics.keys().cloned().collect();
    let source_groups = spec
        .source
        .list_groups()
        .await
        .map_err(|e| format!("list source groups: {e}"))?;
    let wanted: Vec<&GroupListing> = source_groups
        .iter()
        .filter(|g| has_consumer_offsets(g) && filter.matches(&g.group_id))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let dest_states: HashMap<String, String> = spec
        .destination
        .list_groups()
        .await
        .map_err(|e| format!("list destination groups: {e}"))?
        .into_iter()
        .map(|g| (g.group_id, g.state))
        .collect();
    let mut bounds = HashMap::new();
    for g in wanted {
        if dest_states
            .get(&g.group_id)
            .is_some_and(|s| is_active_group_state(s))
        {
            skipped.insert(g.group_id.clone());
            continue;
        }
        match sync_group(shared, &image, &topics, &names, &g.group_id, &mut bounds).await {
            Ok(n) => *committed += n,
            Err(GroupError::Active) => {
                skipped.insert(g.group_id.clone());
            }
            Err(GroupError::Failed(e)) => report.errors.push(format!("group {}: {e}", g.group_id)),
        }
    }
    Ok(())
}

enum GroupError {
    Active,
    Failed(String),
}

impl From<String> for GroupError {
    fn from(e: String) -> Self {
        GroupError::Failed(e)
    }
}

/// Syncs one group; returns how many partition offsets it committed.
async fn sync_group(
    shared: &Shared,
    image: &MirrorStateImage,
    topics: &BTreeMap<String, (TopicId, i32)>,
    names: &[String],
    group: &str,
    bounds: &mut HashMap<TopicPartition, LogBounds>,
) -> Result<u64, GroupError> {
    let spec = &shared.spec;
    let source = spec
        .source
        .committed_offsets(group, names)
        .await
        .map_err(|e| format!("fetch source offsets: {e}"))?;
    if source.is_empty() {
        return Ok(0);
    }
    let current = spec
        .destination
        .committed_offsets(group, names)
        .await
        .map_err(|e| format!("fetch destination offsets: {e}"))?;
    let mut commit = GroupOffsets::new();
    for ((topic, partition), offset) in source {
        let Some(&(topic_id, count)) = topics.get(&topic) else {
            continue;
        };
        if partition >= count {
            continue;
        }
        let key = MirrorPartitionKey::new(spec.mirror.clone(), topic_id, partition);
        let translation = image.translate(&key, offset.offset);
        let tp = TopicPartition::new(&topic, partition);
        let b = match bounds.get(&tp) {
            Some(b) => *b,
            None => {
                let b = spec
                    .destination
                    .bounds(&tp)
                    .await
                    .map_err(|e| format!("destination bounds of {tp}: {e}"))?;
                bounds.insert(tp.clone(), b);
                b
            }
        };
        let Some(target) = group_offset_target(translation, b.log_start, b.end) else {
            continue;
        };
        let from = current
            .get(&(topic.clone(), partition))
            .map(|c| c.offset)
            .unwrap_or(-1);
        if from == target {
            continue;
        }
        record(
            shared,
            Command::RecordGroupOffsetSync {
                key: GroupOffsetSyncKey {
                    mirror_name: spec.mirror.clone(),
                    group: group.to_string(),
                    topic_id,
                    partition,
                },
                value: GroupOffsetSync {
                    source_offset: offset.offset,
                    from_offset: from,
                    to_offset: target,
                    // Destination leader epochs are not the source's: an
                    // unknown epoch makes the consumer skip a validation
                    // that would compare unrelated histories.
                    leader_epoch: -1,
                },
            },
        )
        .await?;
        commit.insert(
            (topic, partition),
            CommittedOffset {
                offset: target,
                leader_epoch: -1,
                metadata: offset.metadata,
            },
        );
    }
    let n = commit.len() as u64;
    if n == 0 {
        return Ok(0);
    }
    match spec.destination.commit_offsets(group, commit).await {
        Ok(()) => Ok(n),
        Err(e) if refused_as_active(&e) => Err(GroupError::Active),
        Err(e) => Err(GroupError::Failed(format!("commit offsets: {e}"))),
    }
}

/// Configs, partition counts, ACLs. Returns this pass's errors.
async fn metadata_pass(shared: &Shared) -> Vec<String> {
    let mut errors = Vec::new();
    let image = match read_image(shared).await {
        Ok(i) => i,
        Err(e) => return vec![e],
    };
    let Some(config) = image.mirror(&shared.spec.mirror) else {
        return errors;
    };
    let settings = match SyncSettings::from_config(config) {
        Ok(s) => s,
        Err(e) => return vec![e.to_string()],
    };
    let (mut configs, mut partitions, mut acls) = (0u64, 0u64, (0u64, 0u64));
    let config_errors = sync_configs(shared, &image, &settings, &mut configs).await;
    let partition_errors = sync_partitions(shared, &image, &mut partitions).await;
    let acl_errors = sync_acls(shared, &image, &settings, &mut acls).await;
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
    errors.extend(config_errors);
    errors.extend(partition_errors);
    errors.extend(acl_errors);
    if errors.is_empty() {
        m.last_metadata_sync_ms = now_ms();
    }
    for e in &errors {
        tracing::warn!(mirror = %mirror, error = %e, "metadata sync failed; retrying next refresh");
    }
    errors
}

async fn sync_configs(
    shared: &Shared,
    image: &MirrorStateImage,
    settings: &SyncSettings,
    changed: &mut u64,
) -> Vec<String> {
    let spec = &shared.spec;
    let mut errors = Vec::new();
    for (name, (topic_id, _)) in mirrored_topics(image, &spec.mirror, &[PartitionState::Mirroring])
    {
        let result: Result<(), String> = async {
            let source = spec
                .source
                .topic_configs(&name)
                .await
                .map_err(|e| format!("describe source configs of {name}: {e}"))?;
            let dest = spec
                .destination
                .topic_config_values(&name)
                .await
                .map_err(|e| format!("describe destination configs of {name}: {e}"))?;
            let changes = settings.config_changes(&source, &dest);
            if changes.is_empty() {
                return Ok(());
            }
            for (key, from, to) in &changes {
                record(
                    shared,
                    Command::RecordTopicConfigSync {
                        key: TopicConfigSyncKey {
                            mirror_name: spec.mirror.clone(),
                            topic_id,
                            config_name: key.clone(),
                        },
                        value: TopicConfigSync {
                            from: from.clone(),
                            to: Some(to.clone()),
                        },
                    },
                )
                .await?;
            }
            let n = changes.len() as u64;
            spec.destination
                .alter_topic_configs(&name, changes.into_iter().map(|(k, _, v)| (k, v)).collect())
                .await
                .map_err(|e| format!("alter destination configs of {name}: {e}"))?;
            *changed += n;
            tracing::info!(mirror = %spec.mirror, topic = %name, configs = n, "synced topic configs");
            Ok(())
        }
        .await;
        if let Err(e) = result {
            errors.push(e);
        }
    }
    errors
}

/// Source partition counts that grew: destination partitions first (so the
/// PartitionActors the record starts have somewhere to write), then the
/// record, then the MirrorActor reconciles.
async fn sync_partitions(
    shared: &Shared,
    image: &MirrorStateImage,
    added: &mut u64,
) -> Vec<String> {
    let spec = &shared.spec;
    let topics = mirrored_topics(
        image,
        &spec.mirror,
        &[PartitionState::Mirroring, PartitionState::Paused],
    );
    if topics.is_empty() {
        return Vec::new();
    }
    let result: Result<bool, String> = async {
        let source: HashMap<TopicId, i32> = spec
            .source
            .topics()
            .await
            .map_err(|e| format!("list source topics: {e}"))?
            .into_iter()
            .map(|t| (t.topic_id, t.partitions))
            .collect();
        let mut grew = false;
        let mut dest: Option<HashMap<String, i32>> = None;
        for (name, (topic_id, count)) in topics {
            // Identity is the topic id: a re-created source topic of the
            // same name is not this one.
            let Some(&wanted) = source.get(&topic_id).filter(|&&n| n > count) else {
                continue;
            };
            if dest.is_none() {
                dest = Some(
                    spec.destination
                        .topics()
                        .await
                        .map_err(|e| format!("list destination topics: {e}"))?
                        .into_iter()
                        .map(|t| (t.name, t.partitions))
                        .collect(),
                );
            }
            let have = dest.as_ref().and_then(|d| d.get(&name)).copied().unwrap_or(0);
            if have < wanted {
                spec.destination
                    .create_partitions(&name, wanted)
                    .await
                    .map_err(|e| format!("grow destination {name} to {wanted} partitions: {e}"))?;
            }
            record(
                shared,
                Command::UpdatePartitionCount {
                    mirror: spec.mirror.clone(),
                    topic_id,
                    partition_count: wanted,
                },
            )
            .await?;
            tracing::info!(mirror = %spec.mirror, topic = %name, from = count, to = wanted, "source partitions grew");
            *added += (wanted - count) as u64;
            grew = true;
        }
        Ok(grew)
    }
    .await;
    match result {
        Ok(true) => {
            spec.reconcile.do_send(Reconcile);
            Vec::new()
        }
        Ok(false) => Vec::new(),
        Err(e) => vec![e],
    }
}

fn entry_of(a: &AclBinding) -> Option<AclEntry> {
    AclEntry::from_codes(
        a.resource_type,
        a.pattern_type,
        &a.resource_name,
        &a.principal,
        &a.host,
        a.operation,
        a.permission_type,
    )
}

fn binding_of(e: &AclEntry) -> Option<AclBinding> {
    let (resource_type, pattern_type, operation, permission_type) = e.codes()?;
    Some(AclBinding {
        resource_type,
        resource_name: e.resource_name.clone(),
        pattern_type,
        principal: e.principal.clone(),
        host: e.host.clone(),
        operation,
        permission_type,
    })
}

fn security_disabled(e: &KafkaError) -> bool {
    e.response_error() == Some(ResponseError::SecurityDisabled)
}

/// ACLs: the source's topic and group bindings that `acls.include` selects
/// are created on the destination; a destination binding is deleted only
/// when kmirror created it (its `AclSync` record) and the source no longer
/// has it. An operator's own bindings are never touched.
async fn sync_acls(
    shared: &Shared,
    image: &MirrorStateImage,
    settings: &SyncSettings,
    counts: &mut (u64, u64),
) -> Vec<String> {
    let spec = &shared.spec;
    let owned: BTreeSet<String> = image
        .acls()
        .filter(|(k, v)| k.mirror_name == spec.mirror && v.owned_by_kmirror)
        .map(|(k, _)| k.binding.clone())
        .collect();
    let result: Result<(), String> = async {
        let source = match spec.source.describe_acls().await {
            Ok(a) => a,
            // No authorizer on the source: nothing to copy, and nothing we
            // created can be said to be gone from it.
            Err(e) if security_disabled(&e) => return Ok(()),
            Err(e) => return Err(format!("describe source ACLs: {e}")),
        };
        let wanted: BTreeMap<String, AclEntry> = source
            .iter()
            .filter_map(entry_of)
            .filter(|e| settings.acls.matches(e))
            .map(|e| (e.canonical(), e))
            .collect();
        if wanted.is_empty() && owned.is_empty() {
            return Ok(());
        }
        let present: BTreeSet<String> = spec
            .destination
            .describe_acls()
            .await
            .map_err(|e| format!("describe destination ACLs: {e}"))?
            .iter()
            .filter_map(entry_of)
            .map(|e| e.canonical())
            .collect();
        let create: Vec<(&String, &AclEntry)> =
            wanted.iter().filter(|(k, _)| !present.contains(*k)).collect();
        for (k, _) in &create {
            record(
                shared,
                Command::RecordAclCreated {
                    key: AclSyncKey {
                        mirror_name: spec.mirror.clone(),
                        binding: (*k).clone(),
                    },
                },
            )
            .await?;
        }
        if !create.is_empty() {
            let bindings: Vec<AclBinding> = create.iter().filter_map(|(_, e)| binding_of(e)).collect();
            spec.destination
                .create_acls(bindings)
                .await
                .map_err(|e| format!("create destination ACLs: {e}"))?;
            counts.0 += create.len() as u64;
            tracing::info!(mirror = %spec.mirror, acls = create.len(), "created ACLs on the destination");
        }
        let gone: Vec<&String> = owned.iter().filter(|k| !wanted.contains_key(*k)).collect();
        for k in gone {
            let key = AclSyncKey {
                mirror_name: spec.mirror.clone(),
                binding: k.clone(),
            };
            record(shared, Command::RecordAclDeleted { key: key.clone() }).await?;
            if !present.contains(k) {
                continue;
            }
            let Some(binding) = AclEntry::parse_canonical(k).as_ref().and_then(binding_of) else {
                continue;
            };
            if let Err(e) = spec.destination.delete_acls(vec![binding]).await {
                // Still there: keep owning it so the next pass retries.
                let _ = record(shared, Command::RecordAclCreated { key }).await;
                return Err(format!("delete destination ACL {k}: {e}"));
            }
            counts.1 += 1;
            tracing::info!(mirror = %spec.mirror, acl = %k, "deleted an ACL kmirror had created");
        }
        Ok(())
    }
    .await;
    result.err().into_iter().collect()
}

#[cfg(test)]
#[path = "metadata_sync_tests.rs"]
mod tests;
