//! Running a whole kmirror `Node` in process against the bed, and reading
//! both sides with Kafka's own Java tools.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::cluster::SourceCluster;
use kmirror_actors::kafka::fence::{acquire, fence_partitions};
use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_actors::node::{Node, NodeSettings, SourceConnector};
use kmirror_actors::state_log::{KafkaLog, StateLogOptions};
use kmirror_events::TopicId;
use kmirror_store::SledLog;

use crate::proxy::FaultProxy;
use crate::{bed, kafka_tool_ok, kafka_tool_stdin};

/// `kafka-configs --alter` of an entity on the source: `op` is
/// `--add-config` or `--delete-config`.
pub fn alter_configs(entity_type: &str, name: &str, op: &str, config: &str) {
    kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &bed().source,
            "--alter",
            "--entity-type",
            entity_type,
            "--entity-name",
            name,
            op,
            config,
        ],
    );
}

/// `kafka-topics --describe` of `topic` at `bootstrap`: its header line
/// (id, partition count, replication factor, configs) and a line per
/// partition (leader, replicas, ISR).
pub fn describe_topic(bootstrap: &str, topic: &str) -> String {
    kafka_tool_ok(
        "kafka-topics",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic",
            topic,
        ],
    )
}

/// [`describe_topic`] read: its header line, and each partition's line as
/// (partition, leader — None while it has none —, ISR size), in order.
pub fn describe_partitions(
    bootstrap: &str,
    topic: &str,
) -> (String, Vec<(i32, Option<i32>, usize)>) {
    let out = describe_topic(bootstrap, topic);
    let field = |line: &str, name: &str| -> Option<String> {
        line.split('\t')
            .find_map(|f| f.trim().strip_prefix(name).map(|v| v.trim().to_owned()))
    };
    let header = out
        .lines()
        .find(|l| l.contains("PartitionCount"))
        .unwrap_or_default()
        .to_owned();
    let partitions = out
        .lines()
        .filter(|l| l.contains("Leader:"))
        .filter_map(|l| {
            let partition = field(l, "Partition:")?.parse().ok()?;
            let leader = field(l, "Leader:").and_then(|v| v.parse().ok());
            let isr = field(l, "Isr:").unwrap_or_default();
            Some((
                partition,
                leader,
                isr.split(',').filter(|s| !s.is_empty()).count(),
            ))
        })
        .collect();
    (header, partitions)
}

/// A topic's own configs (its overrides) at `bootstrap`, as
/// `kafka-configs --describe` lists them.
pub fn topic_overrides(bootstrap: &str, topic: &str) -> BTreeMap<String, String> {
    let out = kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ],
    );
    // `  name=value sensitive=false synonyms={…}` under a heading line.
    out.lines()
        .filter(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split(' ').next()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn connector() -> SourceConnector {
    connector_through(None)
}

/// A connector whose source connections go through `proxy`, if any.
pub fn connector_through(proxy: Option<Arc<FaultProxy>>) -> SourceConnector {
    Arc::new(move |props: BTreeMap<String, String>| {
        let proxy = proxy.clone();
        Box::pin(async move {
            let mut config = ClientConfig::from_properties(&props)?;
            if let Some(p) = &proxy {
                p.route(&mut config);
            }
            let client = KafkaClient::connect_lazy(config)?;
            Ok(Arc::new(KafkaCluster::new(client, FetchOptions::default()))
                as Arc<dyn SourceCluster>)
        })
    })
}

pub async fn node(dir: &std::path::Path) -> Node {
    node_on(dir, &bed().destination).await
}

/// A node whose destination is `destination` (a [`crate::PrivateBed`]'s).
pub async fn node_on(dir: &std::path::Path, destination: &str) -> Node {
    node_with(dir, ClientConfig::plaintext(destination), connector()).await
}

/// A node with its destination client configured by the test (a fault
/// proxy's route, short timeouts) and its own source connector.
pub async fn node_with(
    dir: &std::path::Path,
    destination: ClientConfig,
    connector: SourceConnector,
) -> Node {
    let log = Arc::new(open_log(dir).await);
    let dest = KafkaClient::connect(destination)
        .await
        .expect("connect destination");
    Node::start(
        log,
        Arc::new(KafkaCluster::new(dest, FetchOptions::default())),
        connector,
        NodeSettings {
            refresh_interval: Duration::from_millis(500),
            ..NodeSettings::default()
        },
    )
    .await
    .expect("node start")
}

/// Opens the event log in `dir`. A node just shut down in this process
/// frees it once its actors have stopped: waits up to 10 s for that.
pub async fn open_log(dir: &std::path::Path) -> SledLog {
    let start = Instant::now();
    loop {
        match SledLog::open(dir) {
            Ok(log) => return log,
            Err(kmirror_store::StoreError::Locked(_))
                if start.elapsed() < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("open event log: {e}"),
        }
    }
}

pub fn mirror_props() -> BTreeMap<String, String> {
    BTreeMap::from([("bootstrap.servers".to_string(), bed().source.clone())])
}

/// Console-producer input lines `headers \t key \t value` with `NULL` as the
/// null marker: null keys and values, null header values, duplicate header
/// keys in a given order.
pub fn lines(n: usize, tag: &str) -> String {
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

pub fn produce(topic: &str, input: &str, codec: &str) {
    produce_to(&bed().source, topic, input, codec)
}

/// [`produce`] into the cluster at `bootstrap`.
pub fn produce_to(bootstrap: &str, topic: &str, input: &str, codec: &str) {
    produce_with(
        bootstrap,
        topic,
        input,
        &[&format!("compression.type={codec}"), "linger.ms=50"],
    )
}

/// The console producer with these producer properties (`batch.size=…`).
pub fn produce_with(bootstrap: &str, topic: &str, input: &str, producer_props: &[&str]) {
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        "--property",
        "null.marker=NULL",
    ];
    for p in producer_props {
        // The console producer sets `compression.type` from its own
        // `--compression-codec` (default none) after the producer
        // properties, so a `compression.type` given as one is ignored.
        match p.strip_prefix("compression.type=") {
            Some(codec) => args.extend(["--compression-codec", codec]),
            None => args.extend(["--producer-property", p]),
        }
    }
    let out = kafka_tool_stdin("kafka-console-producer", &args, input.as_bytes());
    assert!(
        out.status.success(),
        "console producer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It exits 0 even when records could not be sent: say so.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Error when sending message"),
        "console producer lost records: {}",
        &stderr[..stderr.len().min(2000)]
    );
}

/// Every record of `topic` as Kafka's console consumer prints it, sorted by
/// partition then offset. Waits at most `timeout_ms` for the `n`th.
///
/// The console consumer's timeout also bounds its first poll (the group
/// join and first fetch), and it ends with success when it runs out: a
/// short one on a loaded machine returns too few records, silently. Give
/// 15 s or more wherever records are expected.
pub fn consume_sorted(bootstrap: &str, topic: &str, n: usize, timeout_ms: u32) -> Vec<String> {
    consume_sorted_with(bootstrap, topic, n, timeout_ms, &[])
}

/// [`consume_sorted`] with extra console-consumer arguments.
pub fn consume_sorted_with(
    bootstrap: &str,
    topic: &str,
    n: usize,
    timeout_ms: u32,
    extra: &[&str],
) -> Vec<String> {
    let timeout = timeout_ms.to_string();
    let max = n.to_string();
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        &max,
        "--timeout-ms",
        &timeout,
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
    ];
    args.extend_from_slice(extra);
    let out = kafka_tool_ok("kafka-console-consumer", &args);
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

pub async fn wait_caught_up(node: &Node, mirror: &str, expected_records: u64, timeout: Duration) {
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

/// The console-consumer lines without their `Offset:` field: what must be
/// identical on both sides when offsets legitimately differ.
pub fn without_offsets(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            l.split('\t')
                .filter(|f| !f.starts_with("Offset:"))
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect()
}

/// `(partition, offset, value)` of every record, read by the console consumer.
pub fn records(bootstrap: &str, topic: &str, n: usize) -> Vec<(i32, i64, String)> {
    consume_sorted(bootstrap, topic, n, 30_000)
        .iter()
        .map(|l| {
            let field = |name: &str| {
                l.split('\t')
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name} in {l}"))
                    .to_string()
            };
            (
                field("Partition:").parse().unwrap(),
                field("Offset:").parse().unwrap(),
                l.rsplit('\t').next().unwrap().to_string(),
            )
        })
        .collect()
}

/// A console consumer in `group` reads `max` records and commits on close
/// (auto-commit). `max.poll.records` keeps its position near what it read.
/// Returns the values it printed.
pub fn group_read(
    bootstrap: &str,
    topic: &str,
    group: &str,
    max: usize,
    timeout_ms: u32,
) -> Vec<String> {
    let max_s = max.to_string();
    let timeout = timeout_ms.to_string();
    let poll = format!("max.poll.records={}", max.clamp(1, 500));
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            &max_s,
            "--timeout-ms",
            &timeout,
            "--consumer-property",
            &poll,
        ],
    );
    out.lines().map(str::to_string).collect()
}

/// `kafka-consumer-groups --describe`: the group's committed offset per
/// partition of `topic` (partitions without one are left out).
pub fn describe_group(bootstrap: &str, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let out = kafka_tool_ok(
        "kafka-consumer-groups",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            group,
        ],
    );
    out.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() >= 4 && cols[0] == group && cols[1] == topic {
                Some((cols[2].parse().ok()?, cols[3].parse().ok()?))
            } else {
                None
            }
        })
        .collect()
}

/// State partition `shard`'s log opened the way a clustered daemon opens
/// it (`bin/src/clustered.rs`): acquire the shard's transactional id
/// `tid`, one abort marker on the partition, then load — so a previous
/// owner's log producer is fenced first.
pub async fn open_fenced_log(options: StateLogOptions, shard: i32, tid: String) -> KafkaLog {
    let topic = options.topic.clone();
    tokio::task::spawn_blocking(move || {
        KafkaLog::open_with(
            &options,
            shard,
            Box::new(move |client: KafkaClient| {
                Box::pin(async move {
                    let tp = [TopicPartition::new(&topic, shard)];
                    let fence = acquire(&client, &tid, Duration::from_secs(60), &tp).await?;
                    fence_partitions(&client, &fence, &tp).await?;
                    Ok(IdempotentProducer::under_fence(client, &fence))
                })
            }),
        )
    })
    .await
    .unwrap()
    .expect("open the shard's log")
}

/// `topic`'s id at `bootstrap`, as `kafka-topics --describe` prints it.
pub fn topic_id_of(bootstrap: &str, topic: &str) -> TopicId {
    let out = describe_topic(bootstrap, topic);
    out.split_whitespace()
        .skip_while(|w| *w != "TopicId:")
        .nth(1)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no topic id in: {out}"))
}
