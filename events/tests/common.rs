//! Strategies shared by the property tests.
#![allow(dead_code)]

use kmirror_events::*;
use proptest::prelude::*;

pub const MIRRORS: [&str; 2] = ["m1", "m2"];
pub const TOPICS: [(&str, u8); 3] = [("orders", 1), ("payments", 2), ("logs", 3)];
pub const PARTITIONS: i32 = 2;

pub fn topic_id(n: u8) -> TopicId {
    let mut b = [0u8; 16];
    b[15] = n;
    TopicId(b)
}

fn mirror() -> impl Strategy<Value = String> {
    prop::sample::select(&MIRRORS[..]).prop_map(str::to_string)
}

fn topic() -> impl Strategy<Value = (String, TopicId)> {
    prop::sample::select(&TOPICS[..]).prop_map(|(n, id)| (n.to_string(), topic_id(id)))
}

pub fn pkey() -> impl Strategy<Value = MirrorPartitionKey> {
    (mirror(), topic(), 0..PARTITIONS + 1)
        .prop_map(|(m, (_, id), p)| MirrorPartitionKey::new(m, id, p))
}

fn state() -> impl Strategy<Value = PartitionState> {
    prop::sample::select(&PartitionState::ALL[..])
}

fn epoch() -> impl Strategy<Value = i32> {
    prop_oneof![Just(-1), 0..6]
}

pub fn config() -> MirrorConfig {
    MirrorConfig {
        source_bootstrap: "src:9092".into(),
        topics_include: ".*".into(),
        source_cluster_id: "cluster-a".into(),
        ..Default::default()
    }
}

/// A random command over a small universe, so sequences hit every path.
pub fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        1 => mirror().prop_map(|name| Command::CreateMirror { name, config: config() }),
        1 => mirror().prop_map(|name| Command::DeleteMirror { name }),
        3 => (mirror(), topic()).prop_map(|(mirror, (name, topic_id))| Command::StartTopics {
            mirror,
            topics: vec![TopicRef { topic_id, name, partition_count: PARTITIONS, destination_topic_id: None }],
            include: vec![],
            exclude: vec![],
            seeds: vec![],
        }),
        2 => (mirror(), topic()).prop_map(|(mirror, (_, id))| Command::StopTopics { mirror, topics: vec![id] }),
        1 => (mirror(), topic()).prop_map(|(mirror, (_, id))| Command::PauseTopics { mirror, topics: vec![id] }),
        1 => (mirror(), topic()).prop_map(|(mirror, (_, id))| Command::ResumeTopics { mirror, topics: vec![id] }),
        10 => (pkey(), state(), epoch(), epoch()).prop_map(|(key, target, leader_epoch, expected_state_epoch)| {
            Command::TransitionPartition { key, target, leader_epoch, expected_state_epoch }
        }),
        3 => (pkey(), epoch(), any::<bool>()).prop_map(|(key, leader_epoch, retryable)| Command::FailPartition {
            key, leader_epoch, error_message: "boom".into(), retryable
        }),
        2 => (pkey(), epoch()).prop_map(|(key, leader_epoch)| Command::RecoverPartition { key, leader_epoch }),
        1 => (pkey(), epoch()).prop_map(|(key, leader_epoch)| Command::ClearFailure { key, leader_epoch }),
        2 => (pkey(), 0i32..5, 0i64..100).prop_map(|(key, e, o)| Command::RecordLastMirrorEpochs {
            key,
            value: LastMirrorEpochsValue {
                last_mirror_epoch: e, last_mirror_offset: o, source_offset: o, source_leader_epoch: e,
                destination_end_offset: o, destination_leader_epoch: e,
            }
        }),
        3 => (pkey(), 0i64..3, 0i64..3, 1i64..5).prop_map(|(key, sgap, dgap, len)| {
            // Offsets relative to nothing: decide refuses overlaps, which is
            // part of what we exercise.
            Command::SetOffsetRuns { key, upsert: vec![OffsetMapRun { source_start: sgap * 3, destination_start: dgap * 2, length: len }], remove: vec![], holes: vec![] }
        }),
        1 => (pkey(), 0i64..12, 1i64..4).prop_map(|(key, d, len)| Command::SetOffsetRuns {
            key, upsert: vec![], remove: vec![], holes: vec![OffsetMapHole { destination_start: d, length: len }]
        }),
        1 => (pkey(), 0i64..1000).prop_map(|(key, id)| Command::RecordProducer {
            key, producer: MirrorProducer { producer_id: id, producer_epoch: 0 }
        }),
        1 => (pkey(), 0i64..50).prop_map(|(key, s)| Command::RecordGap {
            key, gap: GapDetected { source_start: s, source_end: s + 3, reason: "retention".into() }
        }),
        1 => (mirror(), topic(), 0i64..10).prop_map(|(m, (_, id), o)| Command::RecordGroupOffsetSyncs {
            syncs: vec![(
                GroupOffsetSyncKey { mirror_name: m, group: "g".into(), topic_id: id, partition: 0 },
                GroupOffsetSync { source_offset: o, from_offset: -1, to_offset: o, leader_epoch: 0 },
            )],
        }),
        1 => (mirror(), any::<bool>()).prop_map(|(m, create)| {
            let key = AclSyncKey { mirror_name: m, binding: "TOPIC;LITERAL;orders;User:a;*;READ;ALLOW".into() };
            if create { Command::RecordAclCreated { key } } else { Command::RecordAclDeleted { key } }
        }),
        1 => (pkey(), 0i64..100, prop::option::of((0i64..100, 0i64..10_000, any::<bool>(), -1i64..5_000))).prop_map(|(key, o, u)| {
            Command::RecordFailoverReport {
                key,
                value: FailoverReport {
                    source_offset: o, source_leader_epoch: 0, destination_end_offset: o, destination_leader_epoch: 0,
                    source_error: u.is_none().then(|| "source unreachable".into()),
                    unmirrored: u.map(|(r, bytes, bytes_at_least, behind_ms)| Unmirrored {
                        source_high_watermark: o + r, records: r, bytes, bytes_at_least, behind_ms,
                    }),
                },
            }
        }),
        1 => (mirror(), topic(), any::<bool>()).prop_map(|(m, (name, id), fence)| {
            let key = SourceFenceKey { mirror_name: m, binding: format!("TOPIC;LITERAL;{name};User:*;*;WRITE;DENY") };
            if fence {
                Command::RecordSourceFence { key, fence: SourceFence { topic_id: id, topic_name: name } }
            } else {
                Command::RemoveSourceFence { key }
            }
        }),
        1 => (pkey(), 0u64..100, 0u64..3).prop_map(|(key, compared, differences)| Command::RecordVerifyResult {
            key,
            value: VerifyResult {
                verified_at_ms: 1, sample: 100, seed: 7, from: 0, through: 100,
                compared, equal: compared.saturating_sub(differences), skipped: 0, differences,
                first_difference: None, error: None,
            },
        }),
        1 => (0i32..4, ".{0,8}").prop_map(|(shard, member)| Command::ReleaseShard {
            shard,
            release: ShardRelease { member, reason: "node shutting down".into() },
        }),
    ]
}

fn opt_string() -> impl Strategy<Value = Option<String>> {
    prop::option::of(".{0,12}")
}

/// Any record, with arbitrary (including non-ASCII) strings.
pub fn any_record() -> impl Strategy<Value = Record> {
    let key = (".{0,10}", any::<[u8; 16]>(), any::<i32>())
        .prop_map(|(m, id, p)| MirrorPartitionKey::new(m, TopicId(id), p));
    prop_oneof![
        (
            key.clone(),
            prop::option::of((
                state(),
                any::<i32>(),
                any::<i32>(),
                opt_string(),
                any::<i16>(),
                state()
            ))
        )
            .prop_map(|(k, v)| {
                Record::MirrorPartitionState(
                    k,
                    v.map(
                        |(
                            state,
                            leader_epoch,
                            state_epoch,
                            error_message,
                            retry_attempt,
                            previous_state,
                        )| {
                            MirrorPartitionStateValue {
                                state,
                                leader_epoch,
                                state_epoch,
                                error_message,
                                retry_attempt,
                                previous_state,
                            }
                        },
                    ),
                )
            }),
        (
            key.clone(),
            prop::option::of(any::<(i32, i64, i64, i32, i64, i32)>())
        )
            .prop_map(|(k, v)| {
                Record::LastMirrorEpochs(
                    k,
                    v.map(|(a, b, c, d, e, f)| LastMirrorEpochsValue {
                        last_mirror_epoch: a,
                        last_mirror_offset: b,
                        source_offset: c,
                        source_leader_epoch: d,
                        destination_end_offset: e,
                        destination_leader_epoch: f,
                    }),
                )
            }),
        (
            any::<[u8; 16]>(),
            prop::option::of((".{0,10}", state(), ".{0,10}", any::<i32>()))
        )
            .prop_map(|(id, v)| {
                Record::MirrorTopicStateChange(
                    MirrorTopicStateKey {
                        topic_id: TopicId(id),
                    },
                    v.map(|(m, s, n, c)| MirrorTopicStateChange {
                        topic_id: TopicId(id),
                        mirror_name: m,
                        desired_state: s,
                        topic_name: n,
                        partition_count: c,
                    }),
                )
            }),
        (
            ".{0,10}",
            prop::option::of((
                ".{0,20}",
                prop::collection::btree_map(".{0,8}", ".{0,8}", 0..4),
                ".{0,8}",
                ".{0,8}",
                ".{0,12}"
            ))
        )
            .prop_map(|(m, v)| {
                Record::MirrorConfig(
                    MirrorConfigKey { mirror_name: m },
                    v.map(|(b, props, inc, exc, cid)| MirrorConfig {
                        source_bootstrap: b,
                        source_properties: props,
                        topics_include: inc,
                        topics_exclude: exc,
                        groups_include: ".*".into(),
                        groups_exclude: String::new(),
                        source_cluster_id: cid,
                    }),
                )
            }),
        (
            key.clone(),
            any::<i64>(),
            prop::option::of(any::<(i64, i64)>())
        )
            .prop_map(|(k, s, v)| {
                Record::OffsetMapRun(
                    OffsetMapRunKey {
                        partition: k,
                        source_start: s,
                    },
                    v.map(|(d, l)| OffsetMapRun {
                        source_start: s,
                        destination_start: d,
                        length: l,
                    }),
                )
            }),
        (key.clone(), any::<i64>(), prop::option::of(any::<i64>())).prop_map(|(k, d, v)| {
            Record::OffsetMapHole(
                OffsetMapHoleKey {
                    partition: k,
                    destination_start: d,
                },
                v.map(|length| OffsetMapHole {
                    destination_start: d,
                    length,
                }),
            )
        }),
        (any::<[u8; 16]>(), prop::option::of(any::<[u8; 16]>())).prop_map(|(id, v)| {
            Record::MirrorTopicDestination(
                MirrorTopicStateKey {
                    topic_id: TopicId(id),
                },
                v.map(|d| MirrorTopicDestination {
                    destination_topic_id: TopicId(d),
                }),
            )
        }),
        (
            key.clone(),
            prop::option::of((".{0,6}", any::<bool>(), any::<(i64, i64, i64, i64)>()))
        )
            .prop_map(|(k, v)| {
                Record::FailbackPlan(
                    k,
                    v.map(|(m, delta, (a, b, c, d))| FailbackPlan {
                        forward_mirror: m,
                        mode: if delta {
                            FailbackMode::Delta
                        } else {
                            FailbackMode::FromScratch
                        },
                        destination_position: a,
                        source_position: b,
                        divergent_start: a,
                        divergent_end: c,
                        copy_start: b,
                        copy_end: d,
                        quarantine_topic: delta.then(|| "t.kmirror-divergent".into()),
                        reason: (!delta).then(|| "no LastMirrorEpochs".into()),
                    }),
                )
            }),
        (key.clone(), prop::option::of(any::<(i64, i16)>())).prop_map(|(k, v)| {
            Record::MirrorProducer(
                k,
                v.map(|(producer_id, producer_epoch)| MirrorProducer {
                    producer_id,
                    producer_epoch,
                }),
            )
        }),
        (
            key.clone(),
            prop::option::of(prop::collection::vec(any::<(i32, i64)>(), 0..4))
        )
            .prop_map(|(k, v)| {
                Record::SourceEpochs(
                    k,
                    v.map(|entries| SourceEpochs {
                        entries: entries
                            .into_iter()
                            .map(|(epoch, start_offset)| EpochEntry {
                                epoch,
                                start_offset,
                            })
                            .collect(),
                    }),
                )
            }),
        (
            key.clone(),
            any::<i64>(),
            prop::option::of((any::<i64>(), ".{0,10}"))
        )
            .prop_map(|(k, s, v)| {
                Record::GapDetected(
                    OffsetMapRunKey {
                        partition: k,
                        source_start: s,
                    },
                    v.map(|(e, r)| GapDetected {
                        source_start: s,
                        source_end: e,
                        reason: r,
                    }),
                )
            }),
        (
            ".{0,6}",
            ".{0,6}",
            any::<[u8; 16]>(),
            any::<i32>(),
            prop::option::of(any::<(i64, i64, i64, i32)>())
        )
            .prop_map(|(m, g, id, p, v)| {
                Record::GroupOffsetSync(
                    GroupOffsetSyncKey {
                        mirror_name: m,
                        group: g,
                        topic_id: TopicId(id),
                        partition: p,
                    },
                    v.map(|(a, b, c, d)| GroupOffsetSync {
                        source_offset: a,
                        from_offset: b,
                        to_offset: c,
                        leader_epoch: d,
                    }),
                )
            }),
        (
            ".{0,6}",
            any::<[u8; 16]>(),
            ".{0,10}",
            prop::option::of((opt_string(), opt_string()))
        )
            .prop_map(|(m, id, n, v)| {
                Record::TopicConfigSync(
                    TopicConfigSyncKey {
                        mirror_name: m,
                        topic_id: TopicId(id),
                        config_name: n,
                    },
                    v.map(|(from, to)| TopicConfigSync { from, to }),
                )
            }),
        (".{0,6}", ".{0,20}", prop::option::of(any::<bool>())).prop_map(|(m, b, v)| {
            Record::AclSync(
                AclSyncKey {
                    mirror_name: m,
                    binding: b,
                },
                v.map(|o| AclSync {
                    owned_by_kmirror: o,
                }),
            )
        }),
        (
            ".{0,6}",
            ".{0,20}",
            prop::option::of((any::<[u8; 16]>(), ".{0,10}"))
        )
            .prop_map(|(m, b, v)| {
                Record::SourceFence(
                    SourceFenceKey {
                        mirror_name: m,
                        binding: b,
                    },
                    v.map(|(id, n)| SourceFence {
                        topic_id: TopicId(id),
                        topic_name: n,
                    }),
                )
            }),
        (
            key.clone(),
            prop::option::of((
                any::<(i64, i32, i64, i32)>(),
                prop::option::of(any::<(i64, i64, i64, bool, i64)>()),
                opt_string()
            ))
        )
            .prop_map(|(k, v)| {
                Record::FailoverReport(
                    k,
                    v.map(|((so, se, de, dle), u, err)| FailoverReport {
                        source_offset: so,
                        source_leader_epoch: se,
                        destination_end_offset: de,
                        destination_leader_epoch: dle,
                        unmirrored: u.map(|(hw, records, bytes, bytes_at_least, behind_ms)| {
                            Unmirrored {
                                source_high_watermark: hw,
                                records,
                                bytes,
                                bytes_at_least,
                                behind_ms,
                            }
                        }),
                        source_error: err,
                    }),
                )
            }),
        (any::<i32>(), prop::option::of((".{0,10}", ".{0,20}"))).prop_map(|(shard, v)| {
            Record::ShardRelease(
                ShardReleaseKey { shard },
                v.map(|(member, reason)| ShardRelease { member, reason }),
            )
        }),
        (
            key.clone(),
            prop::option::of((
                any::<(i64, u64, u64, i64, i64)>(),
                any::<(u64, u64, u64, u64)>(),
                prop::option::of((any::<(i64, i64)>(), ".{0,8}", ".{0,20}")),
                opt_string()
            ))
        )
            .prop_map(|(k, v)| {
                Record::VerifyResult(
                    k,
                    v.map(
                        |(
                            (at, sample, seed, from, through),
                            (compared, equal, skipped, differences),
                            d,
                            error,
                        )| VerifyResult {
                            verified_at_ms: at,
                            sample,
                            seed,
                            from,
                            through,
                            compared,
                            equal,
                            skipped,
                            differences,
                            first_difference: d.map(|((so, dof), field, detail)| {
                                VerifyDifference {
                                    source_offset: so,
                                    destination_offset: dof,
                                    field,
                                    detail,
                                }
                            }),
                            error,
                        },
                    ),
                )
            }),
    ]
}

/// Starts `orders` (2 partitions) in `m1`, with these offset maps seeded.
pub fn start_orders(seeds: Vec<MapSeed>) -> Command {
    Command::StartTopics {
        mirror: "m1".into(),
        topics: vec![TopicRef {
            topic_id: topic_id(1),
            name: "orders".into(),
            partition_count: 2,
            destination_topic_id: None,
        }],
        include: vec![],
        exclude: vec![],
        seeds,
    }
}
