//! Every admin RPC of the protocol layer against the real broker.

mod protocol_common;

use std::collections::BTreeMap;

use bytes::Bytes;
use kmirror_actors::kafka::admin::Admin;
use kmirror_actors::kafka::admin::{
    AlterConfigOp, CommittedOffset, ConfigResource, NewTopic, OffsetSpec,
};
use kmirror_actors::kafka::batch::{encode_batch, Codec, OutgoingBatch, Record, SourceOffsets};
use kmirror_actors::kafka::fetch::IsolationLevel;
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_actors::kafka::ResponseError;
use kmirror_tests::{bed, unique};
use protocol_common::*;

fn batch(first_ts: i64, n: i32) -> OutgoingBatch {
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            offset_delta: i,
            timestamp: first_ts + i as i64 * 1000,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
        })
        .collect();
    OutgoingBatch::new(
        encode_batch(&recs, Codec::None).unwrap(),
        n,
        SourceOffsets::Range {
            first: 0,
            last: n as i64 - 1,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_rpcs() {
    let bed = bed();
    let c = client(&bed.source).await;
    let admin = Admin::new(c.clone());

    // DescribeCluster
    let cluster = admin.describe_cluster().await.expect("DescribeCluster");
    assert_eq!(Some(cluster.cluster_id.clone()), c.metadata().cluster_id);
    assert_eq!(cluster.brokers.len(), 1);

    // CreateTopics with configs; a second create is TOPIC_ALREADY_EXISTS.
    let topic = unique("proto-admin");
    let nt = NewTopic {
        name: topic.clone(),
        partitions: 1,
        replication_factor: 1,
        configs: [
            ("cleanup.policy".to_string(), "compact,delete".to_string()),
            ("max.message.bytes".into(), "2000000".into()),
        ]
        .into_iter()
        .collect(),
    };
    let r = admin
        .create_topics(std::slice::from_ref(&nt), false)
        .await
        .unwrap();
    let id = *r[0].1.as_ref().expect("created");
    assert_eq!(c.metadata().topic(&topic).unwrap().topic_id, id);
    let again = admin.create_topics(&[nt], false).await.unwrap();
    assert_eq!(
        again[0].1.as_ref().unwrap_err().response_error(),
        Some(ResponseError::TopicAlreadyExists)
    );

    // CreatePartitions 1 → 3
    admin
        .create_partitions(&topic, 3)
        .await
        .expect("CreatePartitions");
    assert_eq!(c.metadata().topic(&topic).unwrap().partitions.len(), 3);

    // DescribeConfigs (topic and broker) and IncrementalAlterConfigs (set, delete)
    let res = ConfigResource::Topic(topic.clone());
    let cfg = admin.describe_configs(&res).await.expect("DescribeConfigs");
    let get = |cfg: &[kmirror_actors::kafka::admin::ConfigEntry], k: &str| {
        cfg.iter().find(|e| e.name == k).cloned()
    };
    let mmb = get(&cfg, "max.message.bytes").unwrap();
    assert_eq!(mmb.value.as_deref(), Some("2000000"));
    assert!(mmb.is_explicit());
    assert!(!get(&cfg, "retention.ms").unwrap().is_explicit());
    admin
        .incremental_alter_configs(
            &res,
            &[
                // Ten years: the records below are stamped 2023, and a
                // shorter retention lets the broker's cleaner delete them
                // before the ListOffsets checks (a flake seen under load).
                AlterConfigOp::Set("retention.ms".into(), "315360000000".into()),
                AlterConfigOp::Delete("max.message.bytes".into()),
            ],
        )
        .await
        .expect("IncrementalAlterConfigs");
    // The broker answers DescribeConfigs from its metadata image, which
    // replays the change a moment after the controller accepted it.
    let start = std::time::Instant::now();
    let cfg = loop {
        let cfg = admin.describe_configs(&res).await.unwrap();
        let applied = get(&cfg, "retention.ms").unwrap().value.as_deref() == Some("315360000000");
        if applied || start.elapsed() > std::time::Duration::from_secs(10) {
            break cfg;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        get(&cfg, "retention.ms").unwrap().value.as_deref(),
        Some("315360000000")
    );
    assert!(!get(&cfg, "max.message.bytes").unwrap().is_explicit());
    let broker_cfg = admin
        .describe_configs(&ConfigResource::Broker(cluster.brokers[0].node_id))
        .await
        .unwrap();
    assert!(get(&broker_cfg, "message.max.bytes").is_some());

    // Write 3 batches of 5 records (timestamps 1000 s apart per record) to partition 0.
    let p = IdempotentProducer::new(c.clone()).await.unwrap();
    let pp = p.partition(&topic, 0).unwrap();
    let t0 = 1_700_000_000_000;
    for i in 0..3 {
        pp.send(batch(t0 + i * 5000, 5))
            .await
            .unwrap()
            .await
            .unwrap();
    }

    // ListOffsets earliest / latest / by timestamp
    let ic = IsolationLevel::ReadCommitted;
    assert_eq!(
        admin
            .list_offset(&topic, 0, OffsetSpec::Earliest, ic)
            .await
            .unwrap()
            .offset,
        0
    );
    assert_eq!(
        admin
            .list_offset(&topic, 0, OffsetSpec::Latest, ic)
            .await
            .unwrap()
            .offset,
        15
    );
    let by_ts = admin
        .list_offset(&topic, 0, OffsetSpec::Timestamp(t0 + 7000), ic)
        .await
        .unwrap();
    assert_eq!((by_ts.offset, by_ts.timestamp), (7, t0 + 7000));
    assert_eq!(
        admin
            .list_offset(&topic, 0, OffsetSpec::Timestamp(t0 + 10_000_000), ic)
            .await
            .unwrap()
            .offset,
        -1
    );

    // OffsetForLeaderEpoch: the current epoch ends at the log end.
    let (_, epoch) = c.leader(&topic, 0).await.unwrap();
    let (e, end) = admin
        .offset_for_leader_epoch(&topic, 0, epoch)
        .await
        .expect("OffsetForLeaderEpoch");
    assert_eq!((e, end), (epoch, 15));

    // DeleteRecords moves the log start.
    assert_eq!(
        admin
            .delete_records(&topic, 0, 4)
            .await
            .expect("DeleteRecords"),
        4
    );
    assert_eq!(
        admin
            .list_offset(&topic, 0, OffsetSpec::Earliest, ic)
            .await
            .unwrap()
            .offset,
        4
    );

    // Groups: standalone OffsetCommit into an empty group, OffsetFetch,
    // FindCoordinator, ListGroups with a state filter, DescribeGroups.
    let group = unique("proto-group");
    let mut offsets = BTreeMap::new();
    offsets.insert(
        (topic.clone(), 0),
        CommittedOffset {
            offset: 11,
            leader_epoch: epoch,
            metadata: Some("kmirror".into()),
        },
    );
    offsets.insert(
        (topic.clone(), 2),
        CommittedOffset {
            offset: 0,
            leader_epoch: -1,
            metadata: None,
        },
    );
    admin
        .offset_commit(&group, &offsets)
        .await
        .expect("OffsetCommit");
    let fetched = admin
        .offset_fetch(&group, None)
        .await
        .expect("OffsetFetch all");
    assert_eq!(fetched.get(&(topic.clone(), 0)).unwrap().offset, 11);
    assert_eq!(
        fetched
            .get(&(topic.clone(), 0))
            .unwrap()
            .metadata
            .as_deref(),
        Some("kmirror")
    );
    assert_eq!(fetched.get(&(topic.clone(), 2)).unwrap().offset, 0);
    let some = admin
        .offset_fetch(&group, Some(&[(topic.clone(), vec![0])]))
        .await
        .expect("OffsetFetch some");
    assert_eq!(some.len(), 1);
    let coord = admin
        .find_coordinator(&group)
        .await
        .expect("FindCoordinator");
    assert_eq!(coord, cluster.brokers[0].node_id);
    let empty = admin
        .list_groups(&["Empty"])
        .await
        .expect("ListGroups Empty");
    assert!(empty.iter().any(|g| g.group_id == group), "{empty:?}");
    let stable = admin
        .list_groups(&["Stable"])
        .await
        .expect("ListGroups Stable");
    assert!(!stable.iter().any(|g| g.group_id == group));
    let all = admin.list_groups(&[]).await.unwrap();
    assert!(all
        .iter()
        .any(|g| g.group_id == group && g.state.eq_ignore_ascii_case("empty")));
    let d = admin
        .describe_groups(&[group.as_str()])
        .await
        .expect("DescribeGroups");
    assert_eq!(d[0].state, "Empty");
    assert!(d[0].members.is_empty());

    // ACL RPCs reach the broker; without an authorizer it says SECURITY_DISABLED
    // (protocol_security exercises them against the StandardAuthorizer).
    let e = admin
        .describe_acls(&kmirror_actors::kafka::admin::AclFilter::any())
        .await
        .unwrap_err();
    assert_eq!(
        e.response_error(),
        Some(ResponseError::SecurityDisabled),
        "{e}"
    );
}

/// `list_offsets_many` (what the batched risk sample asks, a request per
/// broker) answers exactly what `list_offset` answers partition by
/// partition, and a partition that does not exist fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_many_answers_as_list_offset_does() {
    let bed = bed();
    let c = client(&bed.source).await;
    let admin = Admin::new(c.clone());
    let (a, b) = (unique("proto-many-a"), unique("proto-many-b"));
    create(&admin, &a, 12, &[]).await;
    create(&admin, &b, 3, &[]).await;
    let p = IdempotentProducer::new(c.clone()).await.unwrap();
    let t0 = 1_700_000_000_000;
    for partition in 0..12 {
        let pp = p.partition(&a, partition).unwrap();
        for i in 0..(partition % 4) as i64 {
            pp.send(batch(t0 + i * 5000, 5))
                .await
                .unwrap()
                .await
                .unwrap();
        }
    }
    assert_eq!(admin.delete_records(&a, 3, 7).await.unwrap(), 7);
    let mut asked: Vec<(String, i32)> = (0..12).map(|p| (a.clone(), p)).collect();
    asked.extend((0..3).map(|p| (b.clone(), p)));
    asked.insert(5, (a.clone(), 99)); // no such partition
    for spec in [OffsetSpec::Earliest, OffsetSpec::Latest] {
        for ic in [
            IsolationLevel::ReadUncommitted,
            IsolationLevel::ReadCommitted,
        ] {
            let many = admin.list_offsets_many(&asked, spec, ic).await;
            assert_eq!(many.len(), asked.len());
            for ((topic, partition), got) in asked.iter().zip(many) {
                if *partition == 99 {
                    assert!(got.is_err(), "{topic}-99 answered {got:?}");
                    continue;
                }
                let one = admin
                    .list_offset(topic, *partition, spec, ic)
                    .await
                    .unwrap();
                assert_eq!(got.unwrap(), one, "{topic}-{partition} {spec:?} {ic:?}");
            }
        }
    }
    let latest = admin
        .list_offsets_many(
            &asked[..4],
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .await;
    let ends: Vec<i64> = latest.into_iter().map(|r| r.unwrap().offset).collect();
    assert_eq!(ends, vec![0, 5, 10, 15]);
    let earliest = admin
        .list_offsets_many(
            &asked[3..4],
            OffsetSpec::Earliest,
            IsolationLevel::ReadUncommitted,
        )
        .await;
    assert_eq!(earliest[0].as_ref().unwrap().offset, 7);
}
