//! `verify` on the in-memory clusters, where a destination record can be
//! changed in place (no real broker allows it): the planted difference is
//! found, named with both offsets and the field, and nothing else is.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kmirror_events::TopicId;
use kmirror_store::MemLog;

use super::*;
use crate::cluster::memory::{MemoryDestination, MemorySource};
use crate::kafka::batch::{Codec, Record};
use crate::kafka::fetch::TopicPartition;
use crate::verify::VerifyRequest;

/// Two partitions of 200 records each (gzip and plain batches, null keys
/// and values, duplicate header keys), mirrored by mirror "m" of a node
/// on the in-memory clusters, with `extra` mirror properties.
async fn mirrored(extra: &[(&str, &str)]) -> (Node, MemoryDestination) {
    let source = MemorySource::new("src");
    source.create_topic("t", TopicId([7; 16]), 2);
    for p in 0..2 {
        let tp = TopicPartition::new("t", p);
        for chunk in 0..4 {
            let records: Vec<Record> = (chunk * 50..chunk * 50 + 50).map(rec).collect();
            let codec = if chunk % 2 == 0 {
                Codec::Gzip
            } else {
                Codec::None
            };
            source.append(&tp, &records, codec);
        }
    }
    let destination = MemoryDestination::new("dst");
    let connect: SourceConnector = {
        let source = source.clone();
        Arc::new(move |_props| {
            let source = source.clone();
            Box::pin(async move { Ok(Arc::new(source) as Arc<dyn SourceCluster>) })
        })
    };
    let node = Node::start(
        Arc::new(MemLog::new()),
        Arc::new(destination.clone()),
        connect,
        NodeSettings::default(),
    )
    .await
    .unwrap();
    let mut props = BTreeMap::from([("bootstrap.servers".to_string(), "memory:9092".to_string())]);
    props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    node.create_mirror("m", props).await.unwrap();
    node.start_topics("m", &["t".into()], &[], None)
        .await
        .unwrap();
    (node, destination)
}

fn rec(i: i64) -> Record {
    Record {
        offset_delta: 0,
        timestamp: 1_700_000_000_000 + i,
        key: (i % 3 != 0).then(|| Bytes::from(format!("k{i}"))),
        value: (i % 4 != 0).then(|| Bytes::from(format!("v{i}"))),
        headers: vec![
            (
                Bytes::from_static(b"dup"),
                Some(Bytes::from(format!("{i}"))),
            ),
            (Bytes::from_static(b"dup"), None),
        ],
    }
}

#[actix::test]
async fn a_planted_difference_is_named_with_both_offsets_and_its_field() {
    // Given a mirror of two partitions, fully copied
    let (node, destination) = mirrored(&[]).await;
    let all = VerifyRequest::default();
    let mut report = node.verify("m", &all).await.unwrap();
    for _ in 0..500 {
        if report.compared == 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        report = node.verify("m", &all).await.unwrap();
    }
    assert!(report.equal, "{report:?}");
    assert_eq!((report.compared, report.differences), (400, 0));

    // When one destination record's value is changed in place
    let tp = TopicPartition::new("t", 1);
    destination.plant(
        &tp,
        123,
        Record {
            value: Some(Bytes::from_static(b"forged")),
            ..rec(123)
        },
    );

    // Then verify finds exactly it, in full and in a sample that draws it
    let report = node.verify("m", &all).await.unwrap();
    assert!(!report.equal);
    assert_eq!(report.differences, 1, "{report:?}");
    let (p, d) = report.first_difference().unwrap();
    assert_eq!((p.topic.as_str(), p.partition), ("t", 1));
    assert_eq!((d.source_offset, d.destination_offset), (123, 123));
    assert_eq!(d.field, "value");
    assert_eq!(d.detail, r#""v123" ≠ "forged""#);
    assert!(report.partitions[0].tally.first_difference.is_none());
    println!(
        "planted at 123: {} compared, {} differences, first {d:?}",
        report.compared, report.differences
    );
    let everything = VerifyRequest {
        sample: Some(1_000),
        ..VerifyRequest::default()
    };
    let sampled = node.verify("m", &everything).await.unwrap();
    assert_eq!((sampled.compared, sampled.differences), (400, 1));
    // A planted header difference (one duplicate dropped) is a headers one.
    destination.plant(
        &tp,
        7,
        Record {
            headers: rec(7).headers[..1].to_vec(),
            ..rec(7)
        },
    );
    let (_, d) = node
        .verify("m", &all)
        .await
        .unwrap()
        .first_difference()
        .map(|(p, d)| (p.clone(), d.clone()))
        .unwrap();
    assert_eq!((d.source_offset, d.field.as_str()), (7, "headers"));
}

#[actix::test]
async fn the_background_check_records_its_result_for_describe_and_metrics() {
    // Given a mirror verified every 50 ms
    let (node, _destination) = mirrored(&[("mirror.verify.interval.ms", "50")]).await;
    // When its partitions are copied and a check ran over the whole copy
    let mut described = Vec::new();
    for _ in 0..500 {
        described = node.describe(Some("m")).await.unwrap();
        if described
            .iter()
            .all(|p| p.verify.as_ref().is_some_and(|v| v.compared == 100))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Then describe shows each partition's last result: 100 sampled, equal
    for p in &described {
        let v = p.verify.as_ref().expect("a verify result");
        assert_eq!(
            (v.compared, v.differences, v.sample),
            (100, 0, 100),
            "{v:?}"
        );
        assert!(v.first_difference.is_none() && v.error.is_none());
    }
    let metrics = node.metrics().await;
    assert!(metrics.partitions.iter().all(|p| p.verify.is_some()));
    // A bad interval is refused, naming the key.
    let props = BTreeMap::from([
        ("bootstrap.servers".to_string(), "memory:9092".to_string()),
        ("mirror.verify.interval.ms".to_string(), "soon".to_string()),
    ]);
    let e = node.create_mirror("bad", props).await.unwrap_err();
    assert!(e.message.contains("mirror.verify.interval.ms"), "{e:?}");
}
