//! Hand-written scenarios for the KIP rules property tests only sample.

mod common;

use common::*;
use kmirror_events::*;

fn setup() -> (MirrorStateImage, MirrorPartitionKey) {
    let mut img = MirrorStateImage::new();
    decide_and_apply(
        &mut img,
        &Command::CreateMirror {
            name: "m1".into(),
            config: config(),
        },
    )
    .unwrap();
    decide_and_apply(&mut img, &start_orders(vec![])).unwrap();
    (img, MirrorPartitionKey::new("m1", topic_id(1), 0))
}

fn go(
    img: &mut MirrorStateImage,
    key: &MirrorPartitionKey,
    to: PartitionState,
) -> Result<Vec<Record>, DecideError> {
    decide_and_apply(
        img,
        &Command::TransitionPartition {
            key: key.clone(),
            target: to,
            leader_epoch: -1,
            expected_state_epoch: -1,
        },
    )
}

#[test]
fn failed_keeps_older_previous_state_and_counts_attempts() {
    let (mut img, k) = setup();
    go(&mut img, &k, PartitionState::LogAlignment).unwrap();
    go(&mut img, &k, PartitionState::Mirroring).unwrap();
    let fail = |img: &mut MirrorStateImage, retryable| {
        decide_and_apply(
            img,
            &Command::FailPartition {
                key: k.clone(),
                leader_epoch: -1,
                error_message: "x".into(),
                retryable,
            },
        )
        .unwrap()
    };
    fail(&mut img, true);
    let v = img.partition_state(&k).unwrap().clone();
    assert_eq!(
        (v.state, v.previous_state, v.retry_attempt),
        (PartitionState::Failed, PartitionState::Mirroring, 1)
    );
    fail(&mut img, true);
    let v = img.partition_state(&k).unwrap().clone();
    assert_eq!(
        (v.previous_state, v.retry_attempt),
        (PartitionState::Mirroring, 2)
    );
    // Retry back to MIRRORING keeps the count; the next failure is attempt 3.
    go(&mut img, &k, PartitionState::Mirroring).unwrap();
    fail(&mut img, true);
    assert_eq!(img.partition_state(&k).unwrap().retry_attempt, 3);
    fail(&mut img, false);
    assert_eq!(img.partition_state(&k).unwrap().retry_attempt, -1);
    fail(&mut img, true);
    assert_eq!(
        img.partition_state(&k).unwrap().retry_attempt,
        -1,
        "non-retryable sticks"
    );
    decide_and_apply(
        &mut img,
        &Command::RecoverPartition {
            key: k.clone(),
            leader_epoch: -1,
        },
    )
    .unwrap();
    let v = img.partition_state(&k).unwrap();
    assert_eq!(
        (v.state, v.retry_attempt, v.error_message.clone()),
        (PartitionState::Mirroring, 0, None)
    );
}

#[test]
fn fencing_follows_kip_4_1() {
    let (mut img, k) = setup();
    decide_and_apply(
        &mut img,
        &Command::TransitionPartition {
            key: k.clone(),
            target: PartitionState::LogAlignment,
            leader_epoch: 5,
            expected_state_epoch: 0,
        },
    )
    .unwrap();
    let e = decide(
        &img,
        &Command::TransitionPartition {
            key: k.clone(),
            target: PartitionState::Mirroring,
            leader_epoch: 4,
            expected_state_epoch: -1,
        },
    )
    .unwrap_err();
    assert_eq!(e.kip_name(), "FENCED_LEADER_EPOCH");
    let e = decide(
        &img,
        &Command::TransitionPartition {
            key: k.clone(),
            target: PartitionState::Mirroring,
            leader_epoch: 5,
            expected_state_epoch: 0,
        },
    )
    .unwrap_err();
    assert_eq!(e.kip_name(), "FENCED_STATE_EPOCH");
    decide(
        &img,
        &Command::TransitionPartition {
            key: k.clone(),
            target: PartitionState::Mirroring,
            leader_epoch: -1,
            expected_state_epoch: -1,
        },
    )
    .unwrap();
    let e = go(&mut img, &k, PartitionState::Paused).unwrap_err();
    assert!(matches!(
        e,
        DecideError::InvalidTransition {
            from: PartitionState::LogAlignment,
            to: PartitionState::Paused,
            ..
        }
    ));
}

#[test]
fn topic_commands_and_delete() {
    let (mut img, k) = setup();
    let t = topic_id(1);
    let cmd = |c: Command, img: &mut MirrorStateImage| decide_and_apply(img, &c);
    assert_eq!(
        cmd(
            Command::ResumeTopics {
                mirror: "m1".into(),
                topics: vec![t]
            },
            &mut img
        )
        .unwrap(),
        vec![]
    );
    cmd(
        Command::PauseTopics {
            mirror: "m1".into(),
            topics: vec![t],
        },
        &mut img,
    )
    .unwrap();
    assert_eq!(
        cmd(
            Command::PauseTopics {
                mirror: "m1".into(),
                topics: vec![t]
            },
            &mut img
        )
        .unwrap_err()
        .kip_name(),
        "MIRROR_TOPIC_ALREADY_PAUSED"
    );
    assert_eq!(
        cmd(Command::DeleteMirror { name: "m1".into() }, &mut img)
            .unwrap_err()
            .kip_name(),
        "CLUSTER_MIRROR_NOT_EMPTY"
    );
    assert_eq!(
        cmd(
            Command::StopTopics {
                mirror: "m2".into(),
                topics: vec![t]
            },
            &mut img
        )
        .unwrap_err()
        .kip_name(),
        "UNKNOWN_CLUSTER_MIRROR"
    );
    cmd(
        Command::CreateMirror {
            name: "m2".into(),
            config: config(),
        },
        &mut img,
    )
    .unwrap();
    assert_eq!(
        cmd(
            Command::StopTopics {
                mirror: "m2".into(),
                topics: vec![t]
            },
            &mut img
        )
        .unwrap_err()
        .kip_name(),
        "TOPIC_NOT_IN_CLUSTER_MIRROR"
    );
    let start_m2 = Command::StartTopics {
        mirror: "m2".into(),
        topics: vec![TopicRef {
            topic_id: t,
            name: "orders".into(),
            partition_count: 2,
            destination_topic_id: None,
        }],
        include: vec![],
        exclude: vec![],
        seeds: vec![],
    };
    assert_eq!(
        cmd(start_m2.clone(), &mut img).unwrap_err().kip_name(),
        "TOPIC_ALREADY_IN_CLUSTER_MIRROR"
    );
    cmd(
        Command::StopTopics {
            mirror: "m1".into(),
            topics: vec![t],
        },
        &mut img,
    )
    .unwrap();
    assert_eq!(
        cmd(
            Command::PauseTopics {
                mirror: "m1".into(),
                topics: vec![t]
            },
            &mut img
        )
        .unwrap_err()
        .kip_name(),
        "MIRROR_TOPIC_BEING_STOPPED"
    );
    go(&mut img, &k, PartitionState::LogAlignment).unwrap();
    let run = |s, d, l| OffsetMapRun {
        source_start: s,
        destination_start: d,
        length: l,
    };
    // Opened at length 0 before its produce, then its acknowledged length.
    for upsert in [vec![run(0, 0, 0)], vec![run(0, 0, 5)]] {
        cmd(
            Command::SetOffsetRuns {
                key: k.clone(),
                upsert,
                remove: vec![],
                holes: vec![],
            },
            &mut img,
        )
        .unwrap();
    }
    let r = cmd(
        Command::SetOffsetRuns {
            key: k.clone(),
            upsert: vec![run(0, 0, 10), run(12, 10, 1)],
            remove: vec![],
            holes: vec![],
        },
        &mut img,
    )
    .unwrap();
    assert_eq!(
        r.len(),
        2,
        "the first run extended in place, the second new"
    );
    assert_eq!(img.offset_runs(&k).len(), 2);
    assert_eq!(img.translate(&k, 11), Translation::InGap(10));
    let overlap = Command::SetOffsetRuns {
        key: k.clone(),
        upsert: vec![run(11, 9, 1)],
        remove: vec![],
        holes: vec![],
    };
    assert_eq!(
        cmd(overlap, &mut img).unwrap_err().kip_name(),
        "INVALID_REQUEST"
    );
    // Alignment removes a run that never landed.
    let aligned = Command::SetOffsetRuns {
        key: k.clone(),
        upsert: vec![],
        remove: vec![12],
        holes: vec![],
    };
    cmd(aligned, &mut img).unwrap();
    assert_eq!(img.translate(&k, 12), Translation::AtEnd(10));
    assert_eq!(
        cmd(Command::DeleteMirror { name: "m1".into() }, &mut img)
            .unwrap_err()
            .kip_name(),
        "INVALID_CLUSTER_MIRROR_STATES"
    );
    go(&mut img, &k, PartitionState::Stopping).unwrap();
    go(&mut img, &k, PartitionState::Stopped).unwrap();
    // A keyless hold not let go yet refuses the delete: its markers are
    // the only record of what to put back.
    let marker = |to: Option<&str>| Command::RecordTopicConfigSync {
        key: TopicConfigSyncKey {
            mirror_name: "m1".into(),
            topic_id: t,
            config_name: marker_name("cleanup.policy"),
        },
        value: TopicConfigSync {
            from: Some("compact".into()),
            to: to.map(str::to_string),
        },
    };
    cmd(marker(Some("delete")), &mut img).unwrap();
    let e = cmd(Command::DeleteMirror { name: "m1".into() }, &mut img).unwrap_err();
    assert_eq!(e.kip_name(), "INVALID_CLUSTER_MIRROR_STATES");
    assert!(e.to_string().contains("topic orders ("), "{e}");
    // Nor can another mirror take the topic over: its hold would keep the
    // first hold's values as the topic's own.
    let e = cmd(start_m2.clone(), &mut img).unwrap_err();
    assert_eq!(e.kip_name(), "INVALID_CLUSTER_MIRROR_STATES");
    assert!(e.to_string().contains("mirror m1's keyless hold"), "{e}");
    cmd(marker(None), &mut img).unwrap();
    let recs = cmd(Command::DeleteMirror { name: "m1".into() }, &mut img).unwrap();
    assert!(recs.iter().any(
        |r| matches!(r, Record::MirrorTopicStateChange(_, Some(c)) if c.mirror_name.is_empty())
    ));
    assert!(img.partition_state(&k).is_none());
    assert!(img.offset_runs(&k).is_empty());
    assert!(img.topic(&t).unwrap().change.mirror_name.is_empty());
    // Failback-style re-association with another mirror is now allowed.
    cmd(start_m2, &mut img).unwrap();
}

#[test]
fn create_validates_name_and_patterns() {
    let mut img = MirrorStateImage::new();
    let e = decide(
        &img,
        &Command::CreateMirror {
            name: "bad name".into(),
            config: config(),
        },
    )
    .unwrap_err();
    assert_eq!(e.kip_name(), "INVALID_CLUSTER_MIRROR_NAME");
    let mut c = config();
    c.topics_exclude = "ok,[unclosed".into();
    let e = decide(
        &img,
        &Command::CreateMirror {
            name: "m".into(),
            config: c,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("[unclosed"), "{e}");
    decide_and_apply(
        &mut img,
        &Command::CreateMirror {
            name: "m".into(),
            config: config(),
        },
    )
    .unwrap();
    let e = decide(
        &img,
        &Command::CreateMirror {
            name: "m".into(),
            config: config(),
        },
    )
    .unwrap_err();
    assert_eq!(e.kip_name(), "CLUSTER_MIRROR_ALREADY_EXISTS");
    let e = decide(
        &img,
        &Command::StartTopics {
            mirror: "m".into(),
            topics: vec![TopicRef {
                topic_id: topic_id(9),
                name: "__consumer_offsets".into(),
                partition_count: 50,
                destination_topic_id: None,
            }],
            include: vec![],
            exclude: vec![],
            seeds: vec![],
        },
    )
    .unwrap_err();
    assert_eq!(e.kip_name(), "INVALID_REQUEST");
}

#[test]
fn fences_and_failover_reports_belong_to_their_mirror_and_go_with_it() {
    let (mut img, k) = setup();
    let fence_key = SourceFenceKey {
        mirror_name: "m1".into(),
        binding: AclEntry::write_fence("orders").canonical(),
    };
    let fence = |topic_id| Command::RecordSourceFence {
        key: fence_key.clone(),
        fence: SourceFence {
            topic_id,
            topic_name: "orders".into(),
        },
    };
    assert_eq!(
        decide(&img, &fence(topic_id(2))).unwrap_err().kip_name(),
        "TOPIC_NOT_IN_CLUSTER_MIRROR",
        "a fence names a topic of its mirror"
    );
    decide_and_apply(&mut img, &fence(topic_id(1))).unwrap();
    assert_eq!(img.source_fences_of("m1").count(), 1);
    let report = FailoverReport {
        source_offset: 10,
        source_leader_epoch: 0,
        destination_end_offset: 10,
        destination_leader_epoch: 0,
        unmirrored: None,
        source_error: Some("unreachable".into()),
    };
    decide_and_apply(
        &mut img,
        &Command::RecordFailoverReport {
            key: k.clone(),
            value: report.clone(),
        },
    )
    .unwrap();
    assert_eq!(img.failover_report(&k), Some(&report));
    assert_eq!(
        report.unmirrored_text(),
        "source unreachable, what was not mirrored is unknown: unreachable"
    );
    // Removing twice: the second is a no-op.
    let remove = Command::RemoveSourceFence {
        key: fence_key.clone(),
    };
    assert_eq!(decide_and_apply(&mut img, &remove).unwrap().len(), 1);
    assert_eq!(decide_and_apply(&mut img, &remove).unwrap(), vec![]);
    decide_and_apply(&mut img, &fence(topic_id(1))).unwrap();
    // A mirror's delete tombstones its fences and reports with the rest.
    decide_and_apply(
        &mut img,
        &Command::StopTopics {
            mirror: "m1".into(),
            topics: vec![topic_id(1)],
        },
    )
    .unwrap();
    let deleted = decide_and_apply(&mut img, &Command::DeleteMirror { name: "m1".into() }).unwrap();
    assert!(deleted.contains(&Record::SourceFence(fence_key, None)));
    assert!(deleted.contains(&Record::FailoverReport(k.clone(), None)));
    assert_eq!(img.source_fences().count(), 0);
    assert_eq!(img.failover_report(&k), None);
}

#[test]
fn unmirrored_text_says_at_least_when_capped_and_unknown_when_unknown() {
    let u = Unmirrored {
        source_high_watermark: 60,
        records: 50,
        bytes: 5200,
        bytes_at_least: true,
        behind_ms: 3200,
    };
    assert_eq!(u.text(), "50 records, at least 5200 bytes, 3.200 s behind");
    let u = Unmirrored {
        bytes_at_least: false,
        behind_ms: -1,
        ..u
    };
    assert_eq!(u.text(), "50 records, 5200 bytes, seconds behind unknown");
}

#[test]
fn a_start_that_seeds_a_map_forgets_the_source_epochs_of_the_old_one() {
    // A mirror stopped after copying offsets 0..350 in epoch 0; the mirror
    // the other way wrote 350..390 into its source in epoch 1, and this
    // mirror is started again with the map that failback seeds. Its old
    // epochs would say epoch 0 runs to 390 — a truncation at 350 that
    // never happened.
    let (mut img, k) = setup();
    decide_and_apply(
        &mut img,
        &Command::RecordSourceEpochs {
            key: k.clone(),
            epochs: SourceEpochs {
                entries: vec![EpochEntry {
                    epoch: 0,
                    start_offset: 0,
                }],
            },
        },
    )
    .unwrap();
    decide_and_apply(
        &mut img,
        &Command::StopTopics {
            mirror: "m1".into(),
            topics: vec![topic_id(1)],
        },
    )
    .unwrap();
    let seed = MapSeed {
        topic_id: topic_id(1),
        partition: 0,
        runs: vec![OffsetMapRun {
            source_start: 0,
            destination_start: 0,
            length: 390,
        }],
        holes: vec![],
    };
    decide_and_apply(&mut img, &start_orders(vec![seed])).unwrap();
    assert_eq!(img.source_epochs(&k), SourceEpochs::default());
}

#[test]
fn a_shard_log_ends_with_its_release_until_anything_follows() {
    // Given a shard's log with a running mirror.
    let (mut img, k) = setup();
    let release = ShardRelease {
        member: "node-a".into(),
        reason: "node shutting down".into(),
    };
    assert_eq!(img.ends_with_release(0), None, "never released");

    // When its owner releases it, then the log ends with that release, for
    // that shard only.
    let written = decide_and_apply(
        &mut img,
        &Command::ReleaseShard {
            shard: 0,
            release: release.clone(),
        },
    )
    .unwrap();
    assert_eq!(
        written,
        vec![Record::ShardRelease(
            ShardReleaseKey { shard: 0 },
            Some(release.clone())
        )]
    );
    assert_eq!(img.ends_with_release(0), Some(&release));
    assert_eq!(img.ends_with_release(1), None);

    // Kafka offsets skip the abort marker a next owner's log fence writes
    // in the state partition: markers are no records, so a release read
    // back at offset 40 of a log whose marker sits at 41 still ends it.
    let mut kafka = MirrorStateImage::new();
    for (o, r) in (0..).zip([
        Record::MirrorConfig(
            MirrorConfigKey {
                mirror_name: "m1".into(),
            },
            Some(config()),
        ),
        written[0].clone(),
    ]) {
        kafka.replay(o * 40, r);
    }
    assert_eq!(kafka.ends_with_release(0), Some(&release));

    // When anything is written after it (the next owner ran), then it no
    // longer does: a crash from here on must be fenced.
    go(&mut img, &k, PartitionState::LogAlignment).unwrap();
    assert_eq!(img.ends_with_release(0), None);

    // A release of a shard that is no partition is refused.
    let e = decide(&img, &Command::ReleaseShard { shard: -1, release }).unwrap_err();
    assert_eq!(e.kip_name(), "INVALID_REQUEST");
}
