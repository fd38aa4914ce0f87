//! Spreading a mirror's partitions: a partition's own records live in the
//! shard its key routes to, and its host decides its commands there with
//! the mirror's topic-level records read from the coordinator's shard.

mod common;

use common::*;
use kmirror_events::*;
use proptest::prelude::*;

/// Folds `records` into the one-log image and into the two a spread
/// mirror's records split into: the coordinator's (topic-level) and the
/// host's (each partition's own).
fn fold(
    records: &[Record],
    whole: &mut MirrorStateImage,
    coordinator: &mut MirrorStateImage,
    host: &mut MirrorStateImage,
) {
    for r in records {
        whole.apply(whole.end_offset(), r);
        let side = if r.key().placed_partition().is_some() {
            &mut *host
        } else {
            &mut *coordinator
        };
        side.apply(side.end_offset(), r);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A record's type says whether it is placed with its partition, as
    /// its key does.
    #[test]
    fn a_records_type_says_where_it_is_placed(r in any_record()) {
        prop_assert_eq!(r.record_type().placed(), r.key().placed_partition().is_some(), "{:?}", r);
    }

    /// A partition's own command writes only records placed with that
    /// partition, and its host, deciding it over its own records and the
    /// coordinator's topic records, decides exactly what one log holding
    /// both would.
    #[test]
    fn a_hosted_partition_decides_as_one_log_would(cmds in prop::collection::vec(command(), 1..120)) {
        let (mut whole, mut coordinator, mut host) = Default::default();
        for cmd in &cmds {
            let decided = decide(&whole, cmd);
            if let Some(key) = cmd.placed_partition() {
                let hosted = decide_hosted(&host, &coordinator, cmd);
                match (&decided, &hosted) {
                    (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{:?}", cmd),
                    (Err(a), Err(b)) => prop_assert_eq!(a.kip_name(), b.kip_name(), "{:?}", cmd),
                    _ => prop_assert!(false, "{cmd:?}: one log {decided:?}, hosted {hosted:?}"),
                }
                for r in decided.iter().flatten() {
                    let placed = r.key();
                    prop_assert_eq!(placed.placed_partition(), Some(key), "{:?}", cmd);
                }
            }
            match (cmd, decided) {
                // The coordinator tombstones only its own records; the host
                // forgets the partitions it holds once it reads the delete.
                (Command::DeleteMirror { name }, Ok(records)) => {
                    let (placed, own): (Vec<_>, Vec<_>) =
                        records.iter().cloned().partition(|r| r.key().placed_partition().is_some());
                    fold(&own, &mut whole, &mut coordinator, &mut host);
                    let forget = Command::ForgetMirror { name: name.clone() };
                    let forgotten = decide_hosted(&host, &coordinator, &forget).unwrap();
                    let keys = |rs: &[Record]| rs.iter().map(|r| format!("{:?}", r.key())).collect::<std::collections::BTreeSet<_>>();
                    prop_assert_eq!(keys(&forgotten), keys(&placed));
                    fold(&forgotten, &mut whole, &mut coordinator, &mut host);
                    prop_assert!(!host.mirrors_with_partitions().contains(name.as_str()));
                }
                (_, Ok(records)) => fold(&records, &mut whole, &mut coordinator, &mut host),
                (_, Err(_)) => {}
            }
        }
    }
}

/// The types `any_record` does not make, as tombstones.
#[test]
fn reports_and_releases_are_placed_as_their_keys_say() {
    let key = MirrorPartitionKey::new("m", TopicId([1; 16]), 0);
    for r in [
        Record::FailoverReport(key.clone(), None),
        Record::VerifyResult(key, None),
        Record::ShardRelease(ShardReleaseKey { shard: 0 }, None),
    ] {
        assert_eq!(
            r.record_type().placed(),
            r.key().placed_partition().is_some(),
            "{r:?}"
        );
    }
}

#[test]
fn a_host_forgets_only_a_mirror_its_coordinator_has_deleted() {
    let mut coordinator = MirrorStateImage::new();
    let create = Command::CreateMirror {
        name: "m1".into(),
        config: config(),
    };
    decide_and_apply(&mut coordinator, &create).unwrap();
    let forget = Command::ForgetMirror { name: "m1".into() };
    let host = MirrorStateImage::new();
    let err = decide_hosted(&host, &coordinator, &forget).unwrap_err();
    assert_eq!(err.kip_name(), "INVALID_CLUSTER_MIRROR_STATES", "{err}");
    // Nor where the mirror is coordinated: that shard deletes it instead.
    let err = decide_hosted(&coordinator, &host, &forget).unwrap_err();
    assert_eq!(err.kip_name(), "INVALID_CLUSTER_MIRROR_STATES", "{err}");
}

#[test]
fn a_spread_mirror_is_not_started_with_seeded_maps() {
    let mut image = MirrorStateImage::new();
    let config = MirrorConfig {
        source_properties: [(SPREAD_KEY.to_string(), "true".to_string())].into(),
        ..config()
    };
    decide_and_apply(
        &mut image,
        &Command::CreateMirror {
            name: "m1".into(),
            config,
        },
    )
    .unwrap();
    let seed = MapSeed {
        topic_id: topic_id(1),
        partition: 0,
        runs: vec![],
        holes: vec![],
    };
    let err = decide(&image, &start_orders(vec![seed])).unwrap_err();
    assert_eq!(err.kip_name(), "INVALID_REQUEST", "{err}");
    assert!(err.to_string().contains(SPREAD_KEY), "{err}");
    decide(&image, &start_orders(vec![])).unwrap();
}

#[test]
fn the_coordinators_operations_are_not_decided_where_a_partition_is_hosted() {
    let image = MirrorStateImage::new();
    let err = decide_hosted(
        &image,
        &image,
        &Command::StopTopics {
            mirror: "m1".into(),
            topics: vec![topic_id(1)],
        },
    )
    .unwrap_err();
    assert_eq!(err.kip_name(), "INVALID_REQUEST", "{err}");
}

#[test]
fn spreading_is_fixed_at_create_and_must_be_true_or_false() {
    let spread = |v: &str| MirrorConfig {
        source_properties: [(SPREAD_KEY.to_string(), v.to_string())].into(),
        ..config()
    };
    let mut image = MirrorStateImage::new();
    let create = |config| Command::CreateMirror {
        name: "m1".into(),
        config,
    };
    let err = decide(&image, &create(spread("yes"))).unwrap_err();
    assert_eq!(err.kip_name(), "INVALID_CONFIG", "{err}");
    assert!(err.to_string().contains(SPREAD_KEY), "{err}");

    decide_and_apply(&mut image, &create(spread("true"))).unwrap();
    assert!(spreads(image.mirror("m1").unwrap()).unwrap());
    let alter = |config| Command::AlterMirror {
        name: "m1".into(),
        config,
    };
    let err = decide(&image, &alter(config())).unwrap_err();
    assert!(err.to_string().contains(SPREAD_KEY), "{err}");
    decide(&image, &alter(spread("true"))).unwrap();
}

#[test]
fn a_spread_partition_is_placed_by_its_key_and_a_whole_mirror_by_its_name() {
    let keys: Vec<_> = (0..64)
        .map(|p| MirrorPartitionKey::new("m1", topic_id(1), p))
        .collect();
    let spread: std::collections::BTreeSet<i32> =
        keys.iter().map(|k| placement_shard(k, true, 8)).collect();
    assert!(spread.len() > 4, "64 partitions over 8 shards: {spread:?}");
    for k in &keys {
        assert_eq!(placement_shard(k, true, 8), partition_state_partition(k, 8));
        assert_eq!(placement_shard(k, false, 8), coordinator_partition("m1", 8));
    }
}

/// Shard `at`'s image holding mirror `name` (`spread` or not) and its
/// topics `(id, partitions, desired)`.
fn coordinated(
    images: &mut [MirrorStateImage],
    name: &str,
    spread: bool,
    topics: &[(u8, i32, PartitionState)],
) -> usize {
    let at = coordinator_partition(name, images.len() as i32) as usize;
    let image = &mut images[at];
    let mut config = config();
    if spread {
        config
            .source_properties
            .insert(SPREAD_KEY.into(), "true".into());
    }
    let mut records = vec![Record::MirrorConfig(
        MirrorConfigKey {
            mirror_name: name.into(),
        },
        Some(config),
    )];
    for &(n, partition_count, desired_state) in topics {
        records.push(Record::MirrorTopicStateChange(
            MirrorTopicStateKey {
                topic_id: topic_id(n),
            },
            Some(MirrorTopicStateChange {
                topic_id: topic_id(n),
                mirror_name: name.into(),
                desired_state,
                topic_name: format!("t{n}"),
                partition_count,
            }),
        ));
    }
    for r in &records {
        image.apply(image.end_offset(), r);
    }
    at
}

#[test]
fn given_a_plain_and_a_spread_mirror_then_each_partition_to_copy_weighs_on_the_shard_it_runs_in() {
    let mut images = vec![MirrorStateImage::default(); 7];
    let plain = coordinated(
        &mut images,
        "plain",
        false,
        &[
            (1, 3, PartitionState::Mirroring),
            (2, 5, PartitionState::Stopped),
        ],
    );
    coordinated(
        &mut images,
        "wide",
        true,
        &[
            (3, 11, PartitionState::Mirroring),
            (4, 4, PartitionState::Paused),
        ],
    );
    let mut expected = vec![0u64; 7];
    expected[plain] += 3;
    for p in 0..11 {
        let key = MirrorPartitionKey::new("wide", topic_id(3), p);
        expected[partition_state_partition(&key, 7) as usize] += 1;
    }
    assert_eq!(partition_loads(&images), expected);
    assert_eq!(expected.iter().sum::<u64>(), 14);
}
