//! Group-offset sync of many groups against real Kafka (issue 17): a pass
//! reads the groups' offsets in batches (one OffsetFetch for many groups
//! per coordinator) and records them a few appends at a time, and 300
//! groups' offsets still arrive exactly on the destination, as Kafka's own
//! `kafka-consumer-groups` reads them there. The batched read answers each
//! group as the one-group read does, an unknown group included.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_actors::kafka::admin::{Admin, CommittedOffset, OffsetSpec};
use kmirror_actors::kafka::fetch::IsolationLevel;
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_tests::mirror::{mirror_props, node, produce, wait_caught_up};
use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique};

const GROUPS: usize = 300;
const PARTITIONS: i32 = 3;

async fn admin(bootstrap: &str) -> Admin {
    Admin::new(
        KafkaClient::connect(ClientConfig::plaintext(bootstrap))
            .await
            .expect("connect"),
    )
}

/// Every group of `prefix` and its offsets on `topic`, as
/// `kafka-consumer-groups --describe --all-groups` prints them.
fn all_groups(bootstrap: &str, prefix: &str, topic: &str) -> BTreeMap<String, BTreeMap<i32, i64>> {
    let out = kafka_tool_ok(
        "kafka-consumer-groups",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--all-groups",
        ],
    );
    let mut groups: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for l in out.lines() {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() >= 4 && cols[0].starts_with(prefix) && cols[1] == topic {
            if let (Ok(p), Ok(o)) = (cols[2].parse(), cols[3].parse()) {
                groups.entry(cols[0].to_string()).or_default().insert(p, o);
            }
        }
    }
    groups
}

#[actix::test]
async fn three_hundred_groups_arrive_exactly() {
    let topic = unique("sync-many");
    create_topic(&bed().source, &topic, PARTITIONS as u32, &[]);
    let input: String = (0..300)
        .map(|i| format!("seq:{i}\tk{i}\tv-{i}\n"))
        .collect();
    produce(&topic, &input, "lz4");
    let source = admin(&bed().source).await;
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let end = source
            .list_offset(
                &topic,
                p,
                OffsetSpec::Latest,
                IsolationLevel::ReadUncommitted,
            )
            .await
            .unwrap()
            .offset;
        assert!(end > 0, "partition {p} got records");
        ends.insert(p, end);
    }

    // Each group commits its own offset on every partition: the source is
    // contiguous, so the translated offsets are the same numbers.
    let prefix = unique("many-");
    let mut expected: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for g in 0..GROUPS {
        let group = format!("{prefix}{g}");
        let offsets: BTreeMap<i32, i64> = ends
            .iter()
            .map(|(&p, &end)| (p, 1 + (g as i64 * 7 + p as i64) % end))
            .collect();
        let commit = offsets
            .iter()
            .map(|(&p, &o)| {
                let c = CommittedOffset {
                    offset: o,
                    leader_epoch: -1,
                    metadata: Some(format!("g{g}")),
                };
                ((topic.clone(), p), c)
            })
            .collect();
        source.offset_commit(&group, &commit).await.unwrap();
        expected.insert(group, offsets);
    }

    // The batched read answers as the one-group read, in order, and an
    // unknown group has nothing.
    let mut asked: Vec<String> = expected.keys().take(40).cloned().collect();
    asked.push(unique("never-committed"));
    let batched = source.offset_fetch_groups(&asked).await.unwrap();
    assert_eq!(
        batched.iter().map(|(g, _)| g).collect::<Vec<_>>(),
        asked.iter().collect::<Vec<_>>()
    );
    for (g, answer) in &batched {
        assert_eq!(
            answer.as_ref().unwrap(),
            &source.offset_fetch(g, None).await.unwrap(),
            "group {g}"
        );
    }
    assert!(batched.last().unwrap().1.as_ref().unwrap().is_empty());

    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    let mut props = mirror_props();
    props.insert("mirror.groups.include".into(), format!("{prefix}.*"));
    node.create_mirror("many", props)
        .await
        .expect("create mirror");
    node.start_topics("many", std::slice::from_ref(&topic), &[], None)
        .await
        .expect("start");
    wait_caught_up(&node, "many", 300, Duration::from_secs(60)).await;

    let dest = admin(&bed().destination).await;
    let ids: Vec<String> = expected.keys().cloned().collect();
    let start = Instant::now();
    loop {
        let have: BTreeMap<String, BTreeMap<i32, i64>> = dest
            .offset_fetch_groups(&ids)
            .await
            .unwrap()
            .into_iter()
            .map(|(g, a)| {
                let offsets = a
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|((t, _), _)| *t == topic)
                    .map(|((_, p), o)| (p, o.offset))
                    .collect();
                (g, offsets)
            })
            .collect();
        if have == expected {
            break;
        }
        let done = have
            .iter()
            .filter(|(g, o)| expected.get(*g) == Some(o))
            .count();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{done} of {GROUPS} groups synced after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{GROUPS} groups x {PARTITIONS} partitions synced {:.1} s after the copy caught up",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        all_groups(&bed().destination, &prefix, &topic),
        expected,
        "kafka-consumer-groups on the destination shows every group's offsets"
    );
    let m = node.sync_metrics().await;
    // At least one commit each (more where a pass ran while the copy was
    // still catching up and clamped an offset to the destination's end).
    assert!(
        m[0].group_offsets_committed >= (GROUPS as u64) * PARTITIONS as u64,
        "{m:?}"
    );
    assert_eq!(m[0].group_sync_errors, 0, "{m:?}");
    node.shutdown().await;
}
