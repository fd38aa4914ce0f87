//! EventLog behaviour on both implementations.

#[path = "../../events/tests/common.rs"]
mod common;

use kmirror_events::codec::{self, FORMAT_VERSION};
use kmirror_events::*;
use kmirror_store::*;
use proptest::prelude::*;

fn sled_log(dir: &std::path::Path) -> SledLog {
    SledLog::open_with(
        dir,
        SledOptions {
            fsync: FsyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Applies commands through decide, appending each accepted batch, with a
/// snapshot now and then.
fn drive(log: &dyn EventLog, cmds: &[(Command, bool)]) -> MirrorStateImage {
    let mut image = log.load_image().unwrap();
    for (i, (cmd, snap)) in cmds.iter().enumerate() {
        if let Ok(records) = decide(&image, cmd) {
            let base = log.append(i as i64, &records).unwrap();
            for (j, r) in records.into_iter().enumerate() {
                image.replay(base + j as u64, r);
            }
        }
        if *snap {
            log.write_snapshot(&image).unwrap();
        }
    }
    image
}

fn check_compaction(
    log: &dyn EventLog,
    cmds: &[(Command, bool)],
    retention: i64,
) -> Result<(), TestCaseError> {
    let image = drive(log, cmds);
    prop_assert_eq!(&log.replay_all().unwrap(), &image);
    prop_assert_eq!(&log.load_image().unwrap(), &image);
    let end = log.end_offset();
    log.compact(cmds.len() as i64, retention).unwrap();
    prop_assert_eq!(log.end_offset(), end);
    prop_assert_eq!(
        &log.load_image().unwrap(),
        &image,
        "load_image after compaction"
    );
    prop_assert_eq!(
        &log.replay_all().unwrap(),
        &image,
        "full replay after compaction"
    );
    // Compacting again changes nothing further in state.
    log.compact(i64::MAX / 2, 0).unwrap();
    prop_assert_eq!(&log.load_image().unwrap(), &image);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn compacted_log_replays_to_the_same_state_mem(
        cmds in prop::collection::vec((common::command(), prop::bool::weighted(0.05)), 1..150),
        retention in prop_oneof![Just(0i64), 0i64..200],
    ) {
        check_compaction(&MemLog::new(), &cmds, retention)?;
    }

    #[test]
    fn compacted_log_replays_to_the_same_state_sled(
        cmds in prop::collection::vec((common::command(), prop::bool::weighted(0.05)), 1..150),
        retention in prop_oneof![Just(0i64), 0i64..200],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log = sled_log(dir.path());
        check_compaction(&log, &cmds, retention)?;
        drop(log);
        // And after a reopen.
        let log = sled_log(dir.path());
        prop_assert_eq!(log.load_image().unwrap(), log.replay_all().unwrap());
        let report = verify(&log, |_| ()).unwrap();
        prop_assert!(report.is_ok(), "{:?}", report.problems);
    }
}

fn topic_change(id: TopicId, desired: PartitionState) -> Record {
    Record::MirrorTopicStateChange(
        MirrorTopicStateKey { topic_id: id },
        Some(MirrorTopicStateChange {
            topic_id: id,
            mirror_name: "m".into(),
            desired_state: desired,
            topic_name: "t".into(),
            partition_count: 1,
        }),
    )
}

fn optimistic_lock(log: &dyn EventLog) {
    let a = common::topic_id(1);
    let b = common::topic_id(2);
    log.append(0, &[topic_change(a, PartitionState::Mirroring)])
        .unwrap();
    let lock = |offset, topics: &[TopicId]| StateValidation {
        offset,
        topics: topics.to_vec(),
    };
    let offset = log.end_offset();
    // Another writer changes b after our validation: a stays usable.
    log.append(0, &[topic_change(b, PartitionState::Mirroring)])
        .unwrap();
    log.append_if_unchanged(
        0,
        &lock(offset, &[a]),
        &[topic_change(a, PartitionState::Paused)],
    )
    .unwrap();
    let e = log
        .append_if_unchanged(
            0,
            &lock(offset, &[a, b]),
            &[topic_change(b, PartitionState::Stopped)],
        )
        .unwrap_err();
    assert_eq!(e.kip_name(), Some("INVALID_CLUSTER_MIRROR_STATES"), "{e}");
    let key = RecordKey::MirrorTopicStateChange(MirrorTopicStateKey { topic_id: b });
    let latest = log.latest(&key).unwrap().unwrap();
    assert!(
        matches!(latest.record, Record::MirrorTopicStateChange(_, Some(ref c)) if c.desired_state == PartitionState::Mirroring)
    );
    log.append_if_unchanged(
        0,
        &lock(log.end_offset(), &[a, b]),
        &[topic_change(b, PartitionState::Stopped)],
    )
    .unwrap();
}

#[test]
fn optimistic_lock_mem() {
    optimistic_lock(&MemLog::new());
}

#[test]
fn optimistic_lock_sled() {
    let dir = tempfile::tempdir().unwrap();
    optimistic_lock(&sled_log(dir.path()));
}

fn run(i: i64) -> Record {
    Record::OffsetMapRun(
        OffsetMapRunKey {
            partition: MirrorPartitionKey::new("m", common::topic_id(1), 0),
            source_start: i,
        },
        Some(OffsetMapRun {
            source_start: i,
            destination_start: i,
            length: 1,
        }),
    )
}

fn raw_sled(dir: &std::path::Path) -> sled::Db {
    kmirror_store::open_sled_waiting(&sled::Config::new().path(dir)).unwrap()
}

fn lkey(o: u64) -> Vec<u8> {
    let mut k = vec![b'L'];
    k.extend_from_slice(&o.to_be_bytes());
    k
}

/// A writable open that would have cut: refused, naming the damage and
/// the repair, with nothing changed.
fn refused_as_damaged(dir: &std::path::Path, from: u64, records: u64) {
    let e = SledLog::open(dir)
        .err()
        .expect("a damaged tail refuses the open");
    assert!(
        matches!(e, StoreError::DamagedTail { from_offset, records: r, .. } if from_offset == from && r == records),
        "{e}"
    );
    assert!(e.to_string().contains("kmirror log repair"), "{e}");
}

/// A writable open that repairs (`kmirror log repair`).
fn repairing(dir: &std::path::Path) -> SledLog {
    SledLog::open_with(
        dir,
        kmirror_store::SledOptions {
            create: false,
            repair_tail: true,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn a_damaged_tail_refuses_the_open_and_is_cut_only_by_a_repair() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = sled_log(dir.path());
        log.append(1, &[run(0), run(1)]).unwrap();
        log.append(2, &[run(2), run(3), run(4)]).unwrap();
        log.flush().unwrap();
    }
    {
        // Damage: the last batch loses its final record (a torn batch).
        let db = raw_sled(dir.path());
        let torn: Vec<(u64, Vec<u8>)> = (2..4)
            .map(|o| (o, codec::encode_record(&run(o as i64), 2, 2, 3)))
            .collect();
        db.insert(lkey(2), kmirror_store::sled_log_blob(&torn))
            .unwrap();
        db.flush().unwrap();
    }
    {
        // Read-only open reports but does not repair.
        let log = SledLog::open_read_only(dir.path()).unwrap();
        assert_eq!(log.open_report().damaged_from, Some(2));
        assert!(!log.open_report().repaired);
        let report = verify(&log, |_| {}).unwrap();
        assert!(!report.is_ok());
        assert_eq!(report.problems[0].0, 2);
        assert_eq!(log.end_offset(), 2);
    }
    refused_as_damaged(dir.path(), 2, 2);
    {
        let log = repairing(dir.path());
        assert_eq!(log.open_report().damaged_from, Some(2));
        assert_eq!(log.open_report().damaged_records, 2);
        assert!(log.open_report().repaired);
        assert_eq!(log.end_offset(), 2);
        assert!(verify(&log, |_| {}).unwrap().is_ok());
        let offsets: Vec<u64> = log.read(0).unwrap().map(|e| e.unwrap().offset).collect();
        assert_eq!(offsets, vec![0, 1]);
        // The index no longer points at cut records.
        assert!(log.latest(&run(3).key()).unwrap().is_none());
        assert_eq!(log.append(3, &[run(9)]).unwrap(), 2);
        log.flush().unwrap();
    }
    {
        // A value whose bytes are garbage (bad CRC) after the last batch.
        let db = raw_sled(dir.path());
        let mut bad = codec::encode_record(&run(3), 3, 3, 1);
        let n = bad.len();
        bad[n / 2] ^= 0xff;
        db.insert(lkey(3), kmirror_store::sled_log_blob(&[(3, bad)]))
            .unwrap();
        db.flush().unwrap();
    }
    refused_as_damaged(dir.path(), 3, 1);
    let log = repairing(dir.path());
    assert_eq!(log.open_report().damaged_from, Some(3));
    assert_eq!(log.open_report().damaged_records, 1);
    assert_eq!(log.end_offset(), 3);
    assert!(verify(&log, |_| {}).unwrap().is_ok());
}

#[test]
fn newer_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(sled_log(dir.path()));
    {
        let db = raw_sled(dir.path());
        db.insert(b"Mformat_version", &[FORMAT_VERSION + 1])
            .unwrap();
        db.flush().unwrap();
    }
    let e = SledLog::open(dir.path()).err().unwrap();
    assert!(matches!(e, StoreError::NewerFormat { .. }), "{e}");
    assert!(e.to_string().contains("newer kmirror"), "{e}");

    // A record claiming a newer version (with a valid CRC) is refused too,
    // not cut away as damage.
    let dir = tempfile::tempdir().unwrap();
    drop(sled_log(dir.path()));
    {
        let db = raw_sled(dir.path());
        let mut bytes = codec::encode_record(&run(0), 0, 0, 1);
        bytes[0] = FORMAT_VERSION + 1;
        let n = bytes.len();
        let crc = crc32fast::hash(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
        db.insert(lkey(0), kmirror_store::sled_log_blob(&[(0, bytes)]))
            .unwrap();
        db.flush().unwrap();
    }
    assert!(matches!(
        SledLog::open(dir.path()),
        Err(StoreError::NewerFormat { .. })
    ));
}

#[test]
fn missing_dir_and_lock_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = SledLog::open_read_only(&missing).err().unwrap();
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(!missing.exists());
}

#[test]
fn latest_and_tombstone_retention() {
    let log = MemLog::new();
    let k = MirrorConfigKey {
        mirror_name: "m".into(),
    };
    log.append(
        0,
        &[Record::MirrorConfig(k.clone(), Some(common::config()))],
    )
    .unwrap();
    log.append(10, &[Record::MirrorConfig(k.clone(), None)])
        .unwrap();
    log.append(20, &[run(0)]).unwrap();
    let key = RecordKey::MirrorConfig(k);
    assert!(log.latest(&key).unwrap().unwrap().record.is_tombstone());
    // Retention not yet passed: tombstone kept.
    let s = log.compact(15, 100).unwrap();
    assert_eq!((s.removed_superseded, s.removed_tombstones), (1, 0));
    let s = log.compact(200, 100).unwrap();
    assert_eq!(s.removed_tombstones, 1);
    assert!(log.latest(&key).unwrap().is_none());
}
