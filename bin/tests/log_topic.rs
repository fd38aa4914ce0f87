//! `kmirror log … --bootstrap-server`: the same records read from the state
//! topic (through `KafkaLog`) and from a sled data directory print the same
//! audit, export and replay; bad arguments exit non-zero with a clear error.

use std::process::{Command, Output, Stdio};

use kmirror_actors::state_log::{KafkaLog, StateLogOptions};
use kmirror_events::{
    MirrorConfig, MirrorConfigKey, MirrorPartitionKey, MirrorPartitionStateValue,
    MirrorTopicStateChange, MirrorTopicStateKey, OffsetMapRun, OffsetMapRunKey, PartitionState,
    Record, TopicId,
};
use kmirror_store::{EventLog, SledLog};
use kmirror_tests::{bed, unique};

const KMIRROR: &str = env!("CARGO_BIN_EXE_kmirror");

fn kmirror(args: &[&str]) -> Output {
    Command::new(KMIRROR)
        .args(args)
        .env_remove("KMIRROR_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run kmirror")
}

fn ok(args: &[&str]) -> String {
    let out = kmirror(args);
    assert!(
        out.status.success(),
        "kmirror {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn batches() -> Vec<Vec<Record>> {
    let id = TopicId([8; 16]);
    let state = |p: i32, state: PartitionState, epoch: i32, error: Option<&str>| {
        Record::MirrorPartitionState(
            MirrorPartitionKey::new("west", id, p),
            Some(MirrorPartitionStateValue {
                state,
                leader_epoch: 0,
                state_epoch: epoch,
                error_message: error.map(str::to_string),
                retry_attempt: if error.is_some() { 1 } else { 0 },
                previous_state: PartitionState::Mirroring,
            }),
        )
    };
    let change = |desired| {
        Record::MirrorTopicStateChange(
            MirrorTopicStateKey { topic_id: id },
            Some(MirrorTopicStateChange {
                topic_id: id,
                mirror_name: "west".into(),
                desired_state: desired,
                topic_name: "payments".into(),
                partition_count: 2,
            }),
        )
    };
    vec![
        vec![Record::MirrorConfig(
            MirrorConfigKey {
                mirror_name: "west".into(),
            },
            Some(MirrorConfig {
                source_bootstrap: "127.0.0.1:1".into(),
                ..Default::default()
            }),
        )],
        vec![change(PartitionState::Mirroring)],
        vec![
            state(0, PartitionState::Mirroring, 1, None),
            state(1, PartitionState::Mirroring, 1, None),
        ],
        vec![Record::OffsetMapRun(
            OffsetMapRunKey {
                partition: MirrorPartitionKey::new("west", id, 0),
                source_start: 0,
            },
            Some(OffsetMapRun {
                source_start: 0,
                destination_start: 0,
                length: 42,
            }),
        )],
        vec![state(1, PartitionState::Failed, 2, Some("broker said no"))],
        vec![change(PartitionState::Paused)],
        vec![Record::MirrorPartitionState(
            MirrorPartitionKey::new("west", id, 1),
            None,
        )],
    ]
}

#[test]
fn the_state_topic_tells_the_same_story_as_the_data_dir() {
    let topic = unique("cli-state");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let options = StateLogOptions {
        topic: topic.clone(),
        partitions: 1,
        ..StateLogOptions::new(&bed().destination)
    };
    {
        let sled = SledLog::open(&data).unwrap();
        let kafka = KafkaLog::open(&options, 0).unwrap();
        for (i, b) in batches().iter().enumerate() {
            let ts = 1_760_000_000_000 + 1000 * i as i64;
            assert_eq!(sled.append(ts, b).unwrap(), kafka.append(ts, b).unwrap());
        }
    }
    let data = data.to_str().unwrap();
    let kafka = [
        "--bootstrap-server",
        &bed().destination,
        "--state-topic",
        &topic,
    ];
    let with = |cmd: &[&str], source: &[&str]| {
        let mut args = vec!["log"];
        args.extend_from_slice(cmd);
        args.extend_from_slice(source);
        ok(&args)
    };
    for cmd in [
        &["audit"][..],
        &["audit", "--mirror", "west", "--partition", "1"],
        &["audit", "--json"],
        &["export"],
        &["replay", "--json"],
    ] {
        let from_dir = with(cmd, &["--data-dir", data]);
        let from_topic = with(cmd, &kafka);
        assert_eq!(from_topic, from_dir, "kmirror log {cmd:?}");
        let one = with(cmd, &[&kafka[..], &["--state-partition", "0"]].concat());
        assert_eq!(one, from_dir, "kmirror log {cmd:?} --state-partition 0");
        if cmd == ["audit"] {
            println!("kmirror log audit (both sources):\n{from_topic}");
        }
    }
    let verified = with(&["verify"], &kafka);
    println!("{verified}");
    assert!(verified.starts_with("OK: 8 records"), "{verified}");

    // Bad arguments: a clear error and a non-zero exit.
    let cases: [(&[&str], &str); 5] = [
        (
            &["log", "audit", "--bootstrap-server", "nowhere"],
            "HOST:PORT",
        ),
        (
            &["log", "audit", "--state-partition", "0"],
            "--bootstrap-server",
        ),
        (
            &[&["log", "audit"][..], &kafka, &["--state-partition", "5"]].concat(),
            "no partition 5",
        ),
        (
            &[&["log", "compact"][..], &kafka].concat(),
            "broker compacts",
        ),
        (
            &[
                "log",
                "replay",
                "--bootstrap-server",
                &bed().destination,
                "--state-topic",
                "no-such-state-topic",
            ],
            "no topic no-such-state-topic",
        ),
    ];
    for (args, says) in cases {
        let out = kmirror(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = kmirror(&[
        "log",
        "audit",
        "--data-dir",
        data,
        "--bootstrap-server",
        "127.0.0.1:1",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "conflicting sources are a usage error"
    );
}
