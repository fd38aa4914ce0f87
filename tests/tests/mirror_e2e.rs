//! The whole mirror, in process, against real Kafka: a `Node` (coordinator,
//! MirrorActor, PartitionActors, the sled log) copies topics written by
//! Kafka's Java producer, and Kafka's Java consumer reads both sides.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kmirror_actors::cluster::kafka::{KafkaDestination, KafkaSource};
use kmirror_actors::cluster::SourceCluster;
use kmirror_actors::kafka::fetch::FetchOptions;
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_actors::node::{Node, NodeSettings, SourceConnector};
use kmirror_store::SledLog;
use kmirror_tests::{bed, create_topic, kafka_tool_ok, kafka_tool_stdin, unique};

fn connector() -> SourceConnector {
    Arc::new(|props: BTreeMap<String, String>| {
        Box::pin(async move {
            let client = KafkaClient::from_properties(&props).await?;
            Ok(Arc::new(KafkaSource::new(client, FetchOptions::default()))
                as Arc<dyn SourceCluster>)
        })
    })
}

async fn node(dir: &std::path::Path) -> Node {
    let log = Arc::new(SledLog::open(dir).expect("open event log"));
    let dest = KafkaClient::connect(ClientConfig::plaintext(&bed().destination))
        .await
        .expect("connect destination");
    Node::start(
        log,
        Arc::new(KafkaDestination::new(dest)),
        connector(),
        NodeSettings {
            refresh_interval: Duration::from_millis(500),
        },
    )
    .await
    .expect("node start")
}

fn mirror_props() -> BTreeMap<String, String> {
    BTreeMap::from([("bootstrap.servers".to_string(), bed().source.clone())])
}

/// Console-producer input lines `headers \t key \t value` with `NULL` as the
/// null marker: null keys and values, null header values, duplicate header
/// keys in a given order.
fn lines(n: usize, tag: &str) -> String {
    let mut out = String::new();
    for i in 0..n {
        let key = if i % 11 == 0 {
            "NULL".to_string()
        } else {
            format!("key-{}", i % 97)
        };
        let value = if i % 13 == 0 {
            "NULL".to_string()
        } else {
            format!("{tag}-value-{i}-{}", "x".repeat(i % 40))
        };
        out.push_str(&format!("seq:{i},dup:a,dup:NULL,dup:c\t{key}\t{value}\n"));
    }
    out
}

fn produce(topic: &str, input: &str, codec: &str) {
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &[
            "--bootstrap-server",
            &bed().source,
            "--topic",
            topic,
            "--producer-property",
            &format!("compression.type={codec}"),
            "--producer-property",
            "linger.ms=50",
            "--property",
            "parse.key=true",
            "--property",
            "parse.headers=true",
            "--property",
            "null.marker=NULL",
        ],
        input.as_bytes(),
    );
    assert!(
        out.status.success(),
        "console producer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every record of `topic` as Kafka's console consumer prints it, sorted by
/// partition then offset. Waits at most `timeout_ms` for the `n`th.
fn consume_sorted(bootstrap: &str, topic: &str, n: usize, timeout_ms: u32) -> Vec<String> {
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            &n.to_string(),
            "--timeout-ms",
            &timeout_ms.to_string(),
            "--property",
            "print.key=true",
            "--property",
            "print.headers=true",
            "--property",
            "print.timestamp=true",
            "--property",
            "print.partition=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.value=true",
        ],
    );
    let mut rows: Vec<(i64, i64, String)> = out
        .lines()
        .map(|l| {
            let field = |name: &str| -> i64 {
                l.split('\t')
                    .find_map(|f| f.strip_prefix(name))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {name} in {l}"))
            };
            (field("Partition:"), field("Offset:"), l.to_string())
        })
        .collect();
    rows.sort();
    rows.into_iter().map(|r| r.2).collect()
}

async fn wait_caught_up(node: &Node, mirror: &str, expected_records: u64, timeout: Duration) {
    let start = Instant::now();
    loop {
        let parts = node.describe(Some(mirror)).await.unwrap();
        let mirrored: u64 = parts
            .iter()
            .map(|p| p.destination_offset.max(0) as u64)
            .sum();
        if !parts.is_empty()
            && mirrored >= expected_records
            && parts.iter().all(|p| p.lag == 0 && p.state == "MIRRORING")
        {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "not caught up after {timeout:?}: {parts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[actix::test]
async fn eight_partitions_every_codec_identical_through_kafkas_own_consumer() {
    let topic = unique("e2e-orders");
    create_topic(&bed().source, &topic, 8, &[]);
    let per_codec = 2_000;
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    for codec in codecs {
        produce(&topic, &lines(per_codec, codec), codec);
    }
    let total = per_codec * codecs.len();
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("m1", mirror_props())
        .await
        .expect("create mirror");
    let report = node
        .start_topics("m1", std::slice::from_ref(&topic), &[], None)
        .await
        .expect("start");
    assert_eq!(report.topics, vec![topic.clone()]);
    wait_caught_up(&node, "m1", total as u64, Duration::from_secs(120)).await;

    let a = consume_sorted(&bed().source, &topic, total, 60_000);
    let b = consume_sorted(&bed().destination, &topic, total, 60_000);
    assert_eq!(a.len(), total);
    assert_eq!(
        a, b,
        "key, value, headers, timestamp, partition and offset all identical"
    );
    for p in node.describe(Some("m1")).await.unwrap() {
        assert!(p.offsets_identical, "{p:?}");
        let t = node
            .translate("m1", &topic, p.partition, p.source_offset - 1)
            .await
            .unwrap();
        assert_eq!(
            (t.kind, t.destination_offset),
            ("exact", Some(p.destination_offset - 1))
        );
    }
    node.shutdown().await;
}

#[actix::test]
async fn a_compacted_source_with_gaps_translates_every_offset() {
    let topic = unique("e2e-compact");
    create_topic(
        &bed().source,
        &topic,
        1,
        &[
            "cleanup.policy=compact",
            "segment.ms=300",
            "min.cleanable.dirty.ratio=0.0001",
            "min.compaction.lag.ms=0",
            "max.compaction.lag.ms=500",
        ],
    );
    let mut input = String::new();
    for i in 0..600 {
        input.push_str(&format!("seq:{i}\tkey-{}\tvalue-{i}\n", i % 23));
    }
    produce(&topic, &input, "gzip");
    tokio::time::sleep(Duration::from_millis(700)).await;
    produce(&topic, "roll:1\troll\tlast\n", "none");
    // Wait for the cleaner: fewer records than offsets.
    let start = Instant::now();
    let surviving = loop {
        let rows = consume_sorted(&bed().source, &topic, 601, 3_000);
        if rows.len() < 601 {
            break rows;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no compaction");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("mc", mirror_props()).await.unwrap();
    node.start_topics("mc", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "mc", surviving.len() as u64, Duration::from_secs(60)).await;
    let b = consume_sorted(&bed().destination, &topic, surviving.len(), 60_000);
    let strip = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|l| {
                l.split('\t')
                    .filter(|f| !f.starts_with("Offset:"))
                    .collect::<Vec<_>>()
                    .join("\t")
            })
            .collect()
    };
    assert_eq!(
        strip(&surviving),
        strip(&b),
        "the same records in the same order"
    );
    // Every surviving source offset translates to where its record landed
    // (once the acknowledged map is checkpointed, ≤ 100 ms after the copy
    // went idle).
    let offset_of = |l: &String| -> i64 {
        l.split('\t')
            .find_map(|f| f.strip_prefix("Offset:"))
            .unwrap()
            .parse()
            .unwrap()
    };
    let last = offset_of(surviving.last().unwrap());
    let start = Instant::now();
    while node.translate("mc", &topic, 0, last).await.unwrap().kind != "exact" {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "map not checkpointed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (src, dst) in surviving.iter().zip(&b) {
        let t = node
            .translate("mc", &topic, 0, offset_of(src))
            .await
            .unwrap();
        assert_eq!(
            (t.kind, t.destination_offset),
            ("exact", Some(offset_of(dst))),
            "{src}"
        );
    }
    let p = &node.describe(Some("mc")).await.unwrap()[0];
    assert!(!p.offsets_identical, "{p:?} {surviving:?}");
    node.shutdown().await;
}
