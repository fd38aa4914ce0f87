//! MetadataSyncActor on the in-memory clusters: exact translation with gaps
//! and clamping, active groups left alone, retries after a failed commit,
//! config and partition-count sync, ACL ownership. (Kafka behaviour itself
//! is tested in `tests/tests/metadata_sync.rs`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::{
    marker_name, Command, MirrorConfig, MirrorPartitionKey, OffsetMapRun, Record, TopicId,
};
use kmirror_store::MemLog;

use super::*;
use crate::cluster::memory::{record as rec, Fixture, MemoryDestination, MemorySource};
use crate::cluster::AclBinding;
use crate::coordinator::{CoordinatorActor, Execute, ReadImage};
use crate::kafka::fetch::TopicPartition;

mod spread;

const TOPIC: &str = "orders";
const ID: TopicId = TopicId([9; 16]);

/// Counts the PartitionsGrew messages the sync sends its MirrorActor.
struct Reconciles(Arc<AtomicUsize>);
impl Actor for Reconciles {
    type Context = Context<Self>;
}
impl Handler<PartitionsGrew> for Reconciles {
    type Result = ();
    fn handle(&mut self, _msg: PartitionsGrew, _ctx: &mut Context<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Rig {
    log: Arc<MemLog>,
    coordinator: Addr<CoordinatorActor>,
    source: MemorySource,
    dest: MemoryDestination,
    sync: Addr<MetadataSyncActor>,
    reconciles: Arc<AtomicUsize>,
    /// What the status board would say of each topic's copy.
    keyless: Arc<Mutex<HashMap<TopicId, (KeylessCopy, usize)>>>,
}

async fn rig(props: &[(&str, &str)]) -> Rig {
    rig_with(props, |_| None).await
}

/// A rig whose sync is given `spread(its coordinator's log)`.
async fn rig_with(
    props: &[(&str, &str)],
    spread: impl FnOnce(Arc<MemLog>) -> Option<Hosting>,
) -> Rig {
    let config = MirrorConfig {
        source_bootstrap: "memory:9092".into(),
        topics_exclude: "__.*".into(),
        groups_include: ".*".into(),
        groups_exclude: "private-.*".into(),
        source_cluster_id: "src".into(),
        source_properties: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let Fixture {
        log,
        coordinator,
        source,
        dest,
    } = Fixture::new(config, TOPIC, ID, 2).await;
    let reconciles = Arc::new(AtomicUsize::new(0));
    let recipient = Reconciles(reconciles.clone()).start().recipient();
    let keyless = Arc::new(Mutex::new(HashMap::from([(
        ID,
        (KeylessCopy::CaughtUp, 2),
    )])));
    let sync = MetadataSyncActor::new(SyncSpec {
        mirror: "m".into(),
        source: Arc::new(source.clone()),
        destination: Arc::new(dest.clone()),
        coordinator: coordinator.clone(),
        partitions_grew: recipient,
        metadata_interval: Duration::from_secs(3600),
        start_delay: Duration::from_secs(3600),
        keyless: {
            let keyless = keyless.clone();
            Arc::new(move || keyless.lock().unwrap().clone())
        },
        spread: spread(log.clone()),
    })
    .start();
    Rig {
        log,
        coordinator,
        source,
        dest,
        sync,
        reconciles,
        keyless,
    }
}

fn run(s: i64, d: i64, l: i64) -> OffsetMapRun {
    OffsetMapRun {
        source_start: s,
        destination_start: d,
        length: l,
    }
}

impl Rig {
    /// Records `runs` as partition `p`'s map and puts as many records on the
    /// destination as they cover.
    async fn mirrored(&self, p: i32, runs: Vec<OffsetMapRun>) {
        let end = runs.iter().map(|r| r.destination_end()).max().unwrap_or(0);
        self.coordinator
            .send(Execute::new(Command::SetOffsetRuns {
                key: MirrorPartitionKey::new("m", ID, p),
                upsert: runs,
                remove: vec![],
                holes: Vec::new(),
            }))
            .await
            .unwrap()
            .unwrap();
        let tp = TopicPartition::new(TOPIC, p);
        for i in 0..end {
            self.dest
                .foreign_write(&tp, rec(None, Some(&format!("r{i}")), 0));
        }
    }

    async fn sync(&self) -> SyncReport {
        self.sync.send(SyncNow).await.unwrap()
    }

    async fn metrics(&self) -> SyncMetrics {
        self.sync.send(GetSyncMetrics).await.unwrap()
    }

    fn committed(&self, group: &str, p: i32) -> Option<(i64, Option<String>)> {
        self.dest
            .committed(group)
            .get(&(TOPIC.to_string(), p))
            .map(|c| (c.offset, c.metadata.clone()))
    }

    fn records(&self) -> Vec<Record> {
        self.log.entries().into_iter().map(|e| e.record).collect()
    }
}

#[actix::test]
async fn group_offsets_translate_exactly_through_gaps_and_clamp_to_the_end() {
    let r = rig(&[]).await;
    // Partition 0: source 0..10 → destination 0..10, source 10..20 compacted
    // away, source 20..30 → destination 10..20.
    r.mirrored(0, vec![run(0, 0, 10), run(20, 10, 10)]).await;
    // Partition 1: identical offsets 0..5.
    r.mirrored(1, vec![run(0, 0, 5)]).await;
    r.source.commit("g", TOPIC, 0, 15, "meta-0");
    r.source.commit("g", TOPIC, 1, 3, "meta-1");
    r.source.commit("h", TOPIC, 0, 25, "");
    // Beyond the recorded map (the map lags the copy): the end, no further.
    r.source.commit("h", TOPIC, 1, 9, "");
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(
        r.committed("g", 0),
        Some((10, Some("meta-0".into()))),
        "in the gap: the next mirrored record"
    );
    assert_eq!(r.committed("g", 1), Some((3, Some("meta-1".into()))));
    assert_eq!(r.committed("h", 0).map(|c| c.0), Some(15));
    assert_eq!(r.committed("h", 1).map(|c| c.0), Some(5));
    // Groups are synced side by side: their records interleave.
    let mut syncs: Vec<_> = r
        .records()
        .into_iter()
        .filter_map(|rec| match rec {
            Record::GroupOffsetSync(k, Some(v)) => Some((
                k.group,
                k.partition,
                v.source_offset,
                v.from_offset,
                v.to_offset,
            )),
            _ => None,
        })
        .collect();
    syncs.sort();
    assert_eq!(
        syncs,
        vec![
            ("g".into(), 0, 15, -1, 10),
            ("g".into(), 1, 3, -1, 3),
            ("h".into(), 0, 25, -1, 15),
            ("h".into(), 1, 9, -1, 5)
        ]
    );
    // Unchanged source offsets: no commit, no record.
    let commits = r.dest.commit_count();
    let entries = r.log.entries().len();
    r.sync().await;
    assert_eq!(r.dest.commit_count(), commits);
    assert_eq!(r.log.entries().len(), entries);
    // The source consumer moves on: from → to recorded.
    r.source.commit("g", TOPIC, 0, 22, "meta-0");
    r.sync().await;
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(12));
    let image = r.coordinator.send(ReadImage).await.unwrap();
    let (_, last) = image
        .group_offsets()
        .find(|(k, _)| k.group == "g" && k.partition == 0)
        .unwrap();
    assert_eq!((last.from_offset, last.to_offset), (10, 12));
    let m = r.metrics().await;
    assert_eq!(m.group_offsets_committed, 5);
    assert!(m.last_group_sync_ms > 0);
    assert_eq!(m.group_sync_errors, 0);
}

#[actix::test]
async fn active_destination_groups_are_left_alone_and_counted_once() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 10)]).await;
    r.source.commit("live", TOPIC, 0, 7, "");
    r.dest.set_group_state("live", "Stable");
    for _ in 0..3 {
        let report = r.sync().await;
        assert_eq!(report.skipped_groups, vec!["live".to_string()]);
    }
    assert_eq!(r.committed("live", 0), None);
    assert_eq!(r.dest.commit_count(), 0);
    let m = r.metrics().await;
    assert_eq!((m.active_groups_skipped, m.active_groups_now), (1, 1));
    // KIP-848 spelling too.
    r.dest.set_group_state("live", "ASSIGNING");
    r.sync().await;
    assert_eq!(r.dest.commit_count(), 0);
    // Members gone: synced.
    r.dest.set_group_state("live", "Empty");
    let report = r.sync().await;
    assert!(report.skipped_groups.is_empty());
    assert_eq!(r.committed("live", 0).map(|c| c.0), Some(7));
    assert_eq!(r.metrics().await.active_groups_now, 0);
}

#[actix::test]
async fn filters_and_topic_states_decide_what_is_synced() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 10)]).await;
    r.source.commit("private-x", TOPIC, 0, 4, "");
    r.source.commit("public", TOPIC, 0, 4, "");
    r.source.commit("public", "not-mirrored", 0, 4, "");
    r.sync().await;
    assert_eq!(r.committed("private-x", 0), None, "exclude wins");
    assert_eq!(r.committed("public", 0).map(|c| c.0), Some(4));
    assert!(!r
        .dest
        .committed("public")
        .contains_key(&("not-mirrored".to_string(), 0)));
    // Paused topics are not synced (KIP: active topics only).
    r.coordinator
        .send(Execute::new(Command::PauseTopics {
            mirror: "m".into(),
            topics: vec![ID],
        }))
        .await
        .unwrap()
        .unwrap();
    r.source.commit("public", TOPIC, 0, 6, "");
    r.sync().await;
    assert_eq!(r.committed("public", 0).map(|c| c.0), Some(4));
}

#[actix::test]
async fn a_failed_commit_is_counted_and_retried() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 10)]).await;
    r.source.commit("g", TOPIC, 0, 8, "");
    r.dest
        .fail_next_commit(crate::kafka::KafkaError::Unknown("coordinator down".into()));
    let report = r.sync().await;
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert!(report.errors[0].to_string().contains("coordinator down"));
    assert_eq!(r.committed("g", 0), None);
    let m = r.metrics().await;
    assert_eq!((m.group_sync_errors, m.last_group_sync_ms), (1, 0));
    let report = r.sync().await;
    assert!(report.errors.is_empty());
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(8));
    assert!(r.metrics().await.last_group_sync_ms > 0);
}

#[actix::test]
async fn configs_follow_the_source_except_excluded_ones() {
    let r = rig(&[("topic.properties.exclude", "segment\\.ms")]).await;
    r.source.set_topic_config(TOPIC, "retention.ms", "3600000");
    r.source.set_topic_config(TOPIC, "min.insync.replicas", "2");
    r.source.set_topic_config(TOPIC, "segment.ms", "1000");
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    let c = r.dest.topic_config(TOPIC);
    assert_eq!(c.get("retention.ms").map(String::as_str), Some("3600000"));
    assert!(
        !c.contains_key("min.insync.replicas"),
        "KIP default exclude"
    );
    assert!(!c.contains_key("segment.ms"), "the mirror's own exclude");
    let image = r.coordinator.send(ReadImage).await.unwrap();
    let changes: Vec<_> = image
        .topic_configs()
        .map(|(k, v)| (k.config_name.clone(), v.from.clone(), v.to.clone()))
        .collect();
    assert_eq!(
        changes,
        vec![("retention.ms".into(), None, Some("3600000".into()))]
    );
    // Equal values are not rewritten.
    let entries = r.log.entries().len();
    r.sync().await;
    assert_eq!(r.log.entries().len(), entries);
    assert_eq!(r.metrics().await.topic_configs_changed, 1);
}

/// A rig whose topic is compacted on both sides (the destination with
/// `cleanup.policy` and `configs` of its own), held after a refusal.
/// `TOPIC` compacted on the source, and on the destination with `configs`
/// too; the board says `copy` of it.
async fn compacted(r: &Rig, configs: &[(&str, &str)], copy: (KeylessCopy, usize)) {
    r.source
        .set_topic_config(TOPIC, "cleanup.policy", "compact");
    let own = [("cleanup.policy", "compact")].iter().chain(configs);
    r.dest
        .alter_topic_configs(
            TOPIC,
            own.map(|(k, v)| (k.to_string(), Some(v.to_string())))
                .collect(),
        )
        .await
        .unwrap();
    r.keyless.lock().unwrap().insert(ID, copy);
}

async fn held(configs: &[(&str, &str)]) -> Rig {
    held_with(configs, |_| None).await
}

async fn held_with(
    configs: &[(&str, &str)],
    spread: impl FnOnce(Arc<MemLog>) -> Option<Hosting>,
) -> Rig {
    let r = rig_with(&[], spread).await;
    compacted(&r, configs, (KeylessCopy::Refused, 2)).await;
    assert!(r.sync().await.errors.is_empty());
    let c = r.dest.topic_config(TOPIC);
    for (k, v) in kmirror_events::KEYLESS_HOLD {
        assert_eq!(c.get(k).map(String::as_str), Some(v), "{k}");
    }
    r
}

/// A topic altered to compact while it held keyless records: a refusal
/// holds the destination (and the partition's retry copies them), the
/// hold outlives a copy that is behind, and a caught-up copy gets the
/// source's policy back, with what the hold changed and the source does
/// not set put back as it was, each step recorded.
#[actix::test]
async fn a_keyless_refusal_holds_the_destination_until_the_copy_caught_up() {
    let r = held(&[("retention.ms", "604800000")]).await;
    let dest = |k: &str| r.dest.topic_config(TOPIC).get(k).cloned();
    let set = |copy| {
        r.keyless.lock().unwrap().insert(ID, (copy, 2));
    };
    // Behind (the retry copying), it stays held.
    set(KeylessCopy::Behind);
    let entries = r.log.entries().len();
    r.sync().await;
    assert_eq!(dest("cleanup.policy").as_deref(), Some("delete"));
    assert_eq!(r.log.entries().len(), entries, "nothing to change");
    set(KeylessCopy::CaughtUp);
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(dest("cleanup.policy").as_deref(), Some("compact"));
    assert_eq!(dest("retention.ms").as_deref(), Some("604800000"));
    assert_eq!(dest("retention.bytes"), None, "the hold's override removed");
    let image = r.coordinator.send(ReadImage).await.unwrap();
    let last: BTreeMap<_, _> = image
        .topic_configs()
        .map(|(k, v)| (k.config_name.clone(), (v.from.clone(), v.to.clone())))
        .collect();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        last,
        BTreeMap::from([
            ("cleanup.policy".to_string(), (s("delete"), s("compact"))),
            ("retention.ms".to_string(), (s("-1"), s("604800000"))),
            ("retention.bytes".to_string(), (s("-1"), None)),
            // The markers, cleared, each with the override it kept.
            (marker_name("cleanup.policy"), (s("compact"), None)),
            (marker_name("retention.ms"), (s("604800000"), None)),
            (marker_name("retention.bytes"), (None, None)),
        ])
    );
    // Caught up and let go, nothing more changes.
    let entries = r.log.entries().len();
    r.sync().await;
    assert_eq!(r.log.entries().len(), entries);
}

/// A failover during a keyless hold: the stopped topic's copy is over, so
/// the hold is let go from its markers (not the source, which may be gone),
/// once no partition copies any more; until then the mirror cannot be
/// deleted.
#[actix::test]
async fn a_topic_stopped_during_a_keyless_hold_is_let_go_from_the_records() {
    let r = held(&[]).await;
    let exec = |command| async {
        r.coordinator
            .send(Execute::new(command))
            .await
            .unwrap()
            .map(|_| ())
    };
    let key = MirrorPartitionKey::new("m", ID, 0);
    let go = |target| Command::TransitionPartition {
        key: key.clone(),
        target,
        leader_epoch: -1,
        expected_state_epoch: -1,
    };
    exec(go(PartitionState::LogAlignment)).await.unwrap();
    exec(go(PartitionState::Mirroring)).await.unwrap();
    exec(Command::StopTopics {
        mirror: "m".into(),
        topics: vec![ID],
    })
    .await
    .unwrap();
    // The source now says otherwise; a stopped topic no longer follows it.
    r.source
        .set_topic_config(TOPIC, "cleanup.policy", "compact,delete");
    // A partition still copying (its stop not done) keeps the hold.
    assert!(r.sync().await.errors.is_empty());
    let policy = || r.dest.topic_config(TOPIC).get("cleanup.policy").cloned();
    assert_eq!(policy().as_deref(), Some("delete"));
    exec(go(PartitionState::Stopping)).await.unwrap();
    exec(go(PartitionState::Stopped)).await.unwrap();
    let e = exec(Command::DeleteMirror { name: "m".into() })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("keyless hold"), "{e}");
    assert!(r.sync().await.errors.is_empty());
    let c = r.dest.topic_config(TOPIC);
    assert_eq!(c.get("cleanup.policy").map(String::as_str), Some("compact"));
    assert_eq!(c.get("retention.ms"), None);
    assert_eq!(c.get("retention.bytes"), None);
    let entries = r.log.entries().len();
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(r.log.entries().len(), entries, "let go once");
    exec(Command::DeleteMirror { name: "m".into() })
        .await
        .unwrap();
}

#[actix::test]
async fn a_grown_source_topic_grows_the_destination_and_reconciles() {
    let r = rig(&[]).await;
    r.source.add_partitions(TOPIC, 5);
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(r.dest.partition_count(TOPIC), 5);
    let image = r.coordinator.send(ReadImage).await.unwrap();
    assert_eq!(image.topic(&ID).unwrap().change.partition_count, 5);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(r.reconciles.load(Ordering::SeqCst), 1);
    // Nothing more to do.
    r.sync().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(r.reconciles.load(Ordering::SeqCst), 1);
    assert_eq!(r.metrics().await.partitions_added, 3);
}

fn acl(rt: i8, pt: i8, name: &str, principal: &str, op: i8) -> AclBinding {
    AclBinding {
        resource_type: rt,
        resource_name: name.into(),
        pattern_type: pt,
        principal: principal.into(),
        host: "*".into(),
        operation: op,
        permission_type: 3,
    }
}

#[actix::test]
async fn acls_are_created_and_only_our_own_are_removed() {
    let r = rig(&[("acls.include", "TOPIC;orders.*,GROUP")]).await;
    r.source.enable_acls();
    r.dest.enable_acls();
    let read_orders = acl(2, 3, "orders", "User:alice", 3);
    let prefixed = acl(2, 4, "orders-", "User:bob", 4);
    let group = acl(3, 3, "g1", "User:alice", 3);
    let other_topic = acl(2, 3, "payments", "User:alice", 3);
    let cluster = acl(4, 3, "kafka-cluster", "User:alice", 7);
    let shared = acl(2, 3, "orders", "User:carol", 3);
    for a in [
        &read_orders,
        &prefixed,
        &group,
        &other_topic,
        &cluster,
        &shared,
    ] {
        r.source.add_acl(a.clone());
    }
    // The operator's own: one unrelated, one identical to a source binding.
    let operators = acl(2, 3, "local-only", "User:ops", 2);
    r.dest.add_acl(operators.clone());
    r.dest.add_acl(shared.clone());
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    let mut expected = vec![
        read_orders.clone(),
        prefixed.clone(),
        group.clone(),
        operators.clone(),
        shared.clone(),
    ];
    expected.sort();
    assert_eq!(r.dest.acl_list(), expected);
    let image = r.coordinator.send(ReadImage).await.unwrap();
    assert_eq!(image.acls().count(), 3, "ownership of what we created only");
    // The source drops its bindings: ours go, the operator's stay (even
    // the one identical to a source binding).
    for a in [&read_orders, &prefixed, &group, &shared] {
        r.source.remove_acl(a);
    }
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    let mut expected = vec![operators, shared];
    expected.sort();
    assert_eq!(r.dest.acl_list(), expected);
    let image = r.coordinator.send(ReadImage).await.unwrap();
    assert_eq!(image.acls().count(), 0);
    let m = r.metrics().await;
    assert_eq!(
        (m.acls_created, m.acls_deleted, m.acl_sync_errors),
        (3, 3, 0)
    );
}

#[actix::test]
async fn kmirrors_own_write_fence_on_the_source_is_never_copied() {
    let r = rig(&[("acls.include", "TOPIC")]).await;
    r.source.enable_acls();
    r.dest.enable_acls();
    let fence = kmirror_events::AclEntry::write_fence(TOPIC);
    r.coordinator
        .send(Execute::new(Command::RecordSourceFence {
            key: kmirror_events::SourceFenceKey {
                mirror_name: "m".into(),
                binding: fence.canonical(),
            },
            fence: kmirror_events::SourceFence {
                topic_id: ID,
                topic_name: TOPIC.into(),
            },
        }))
        .await
        .unwrap()
        .unwrap();
    let fence = crate::cluster::acl_binding(&fence).unwrap();
    let read_orders = acl(2, 3, TOPIC, "User:alice", 3);
    r.source.add_acl(fence);
    r.source.add_acl(read_orders.clone());
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(
        r.dest.acl_list(),
        vec![read_orders],
        "the DENY WRITE fence would stop writers on the cluster taking over"
    );
}

#[actix::test]
async fn no_authorizer_on_the_source_is_not_an_error() {
    let r = rig(&[]).await;
    let report = r.sync().await;
    assert!(report.errors.is_empty(), "{report:?}");
    let m = r.metrics().await;
    assert_eq!(m.acl_sync_errors, 0);
    assert!(m.last_metadata_sync_ms > 0);
}

#[actix::test]
async fn a_bad_acl_rule_is_refused_at_create() {
    let log = Arc::new(MemLog::new());
    let coordinator = CoordinatorActor::load(log).unwrap().start();
    let e = coordinator
        .send(Execute::new(Command::CreateMirror {
            name: "m".into(),
            config: MirrorConfig {
                source_bootstrap: "memory:9092".into(),
                source_properties: [("acls.include".to_string(), "CLUSTER;x".to_string())].into(),
                ..Default::default()
            },
        }))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kip_name(), "INVALID_CONFIG");
    assert!(e.to_string().contains("acls.include"), "{e}");
}

#[actix::test]
async fn a_group_inside_a_run_not_yet_checkpointed_is_synced_to_the_recorded_end_only() {
    let r = rig(&[]).await;
    // A transactional source: run A (source 0..10) landed at destination
    // 0..10 but its checkpoint has recorded 4 records so far; the commit
    // marker at 10 opened run B at destination 10 before its produce.
    r.mirrored(0, vec![run(0, 0, 10), run(11, 10, 0)]).await;
    r.coordinator
        .send(Execute::new(Command::SetOffsetRuns {
            key: MirrorPartitionKey::new("m", ID, 0),
            upsert: vec![run(0, 0, 4)],
            remove: vec![],
            holes: Vec::new(),
        }))
        .await
        .unwrap()
        .unwrap();
    r.source.commit("g", TOPIC, 0, 7, "");
    r.sync().await;
    // Source 7 is not known to be mirrored yet: the consumer may re-read
    // from 4, never skip to 10.
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(4));
}

#[actix::test]
async fn a_group_of_a_recreated_source_topic_is_not_translated_through_the_old_map() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 10)]).await;
    r.source.recreate_topic(TOPIC, TopicId([42; 16]), 2);
    r.source.commit("g", TOPIC, 0, 5, "");
    r.sync().await;
    assert_eq!(r.committed("g", 0), None);
}

#[actix::test]
async fn an_abandoned_final_pass_commits_nothing_when_the_source_answers_late() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 100)]).await;
    r.source.commit("g", TOPIC, 0, 40, "");
    let key = MirrorPartitionKey::new("m", ID, 0);
    // The source stalls with the final pass waiting on it; the partition
    // stops waiting, the consumers move on at the destination, and only
    // then does the source answer.
    r.source.hold_group_reads(true);
    let pass = r.sync.send(FinalSync(key.clone())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    pass.abort.abort();
    r.source.hold_group_reads(false);
    assert_ne!(pass.done.await, Ok(true), "abandoned, not ended");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        r.committed("g", 0),
        None,
        "nothing committed after the stop"
    );
    assert_eq!(r.metrics().await.group_offsets_committed, 0);

    // A pass that is waited for commits as before.
    let pass = r.sync.send(FinalSync(key)).await.unwrap();
    assert_eq!(pass.done.await, Ok(true));
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(40));
}

/// A final pass that ran but failed (its commit refused, the source's
/// groups unreadable) is not a synced stop: the partition warns that its
/// group offsets were not carried over, and no periodic pass will do it
/// after STOPPED. Before, any pass not aborted answered "synced".
#[actix::test]
async fn a_final_pass_that_failed_is_not_reported_synced() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 100)]).await;
    r.source.commit("g", TOPIC, 0, 40, "");
    r.dest
        .fail_next_commit(crate::kafka::KafkaError::Unknown("coordinator down".into()));
    let key = MirrorPartitionKey::new("m", ID, 0);
    let pass = r.sync.send(FinalSync(key.clone())).await.unwrap();
    assert_ne!(pass.done.await, Ok(true), "a failed final pass");
    assert_eq!(r.committed("g", 0), None);

    let pass = r.sync.send(FinalSync(key)).await.unwrap();
    assert_eq!(pass.done.await, Ok(true));
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(40));
}

/// A destination partition whose bounds cannot be read (its replicas
/// down, its topic deleted) holds back only the offsets on it: every other
/// partition's are synced, and the pass reports the one it could not.
/// Before, the whole pass failed, for every group and topic, each second.
#[actix::test]
async fn one_unreadable_destination_partition_holds_back_only_its_own_offsets() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 10)]).await;
    r.mirrored(1, vec![run(0, 0, 10)]).await;
    r.source.commit("g", TOPIC, 0, 8, "");
    r.source.commit("g", TOPIC, 1, 6, "");
    r.dest.set_unreadable(&TopicPartition::new(TOPIC, 1), true);
    let report = r.sync().await;
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert!(report.errors[0].to_string().contains("no replica answers"));
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(8));
    assert_eq!(r.committed("g", 1), None);
    r.dest.set_unreadable(&TopicPartition::new(TOPIC, 1), false);
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(r.committed("g", 1).map(|c| c.0), Some(6));
}

/// The source's commit is the truth, as the KIP's clamp has it: an empty
/// destination group that read further on its own (a test consumer, a
/// consumer started too early) is moved back to where the source's
/// consumers are, so a failover re-reads what they had not processed
/// rather than skipping it. MirrorMaker 2 never moves an offset back.
#[actix::test]
async fn the_source_commit_wins_over_an_empty_destination_group_further_on() {
    let r = rig(&[]).await;
    r.mirrored(0, vec![run(0, 0, 10)]).await;
    let ahead = crate::cluster::GroupOffsets::from([(
        (TOPIC.to_string(), 0),
        crate::kafka::admin::CommittedOffset {
            offset: 9,
            leader_epoch: -1,
            metadata: None,
        },
    )]);
    r.dest.commit_offsets("g", ahead).await.unwrap();
    r.source.commit("g", TOPIC, 0, 4, "");
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(r.committed("g", 0).map(|c| c.0), Some(4));
}
