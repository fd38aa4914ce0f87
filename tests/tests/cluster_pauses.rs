//! The clustered daemon under pauses at the worst moments (issue 15),
//! against real Kafka: nodes in shard mode over a per-test state topic,
//! each shard's `KafkaLog` opened under the shard's transactional id
//! (fence + load, as `bin/src/clustered.rs` does) and each node with its
//! own fenced `KafkaCluster` destination. The partition runs in one shard,
//! owned first by node A and then by node B — a whole mirror's shard, or
//! the shard a spread mirror's partition is placed in while a third node
//! coordinates the mirror from the other shard. Node A's destination
//! traffic goes through a `FaultProxy` that holds its Produce requests — a
//! pause of A's process as the broker sees it: the requests left A and
//! arrive late. B takes the shard meanwhile; the held requests are
//! released at the moment each test names, and the broker's answers to
//! them are decoded from the wire. Every test ends with the destination
//! holding exactly the source's records in order (Kafka's console
//! consumer on both sides), the fence markers as holes, and every source
//! offset translating to the destination offset of the same record.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, HeaderVersion};
use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::cluster::DestinationCluster;
use kmirror_actors::kafka::batch::{encode_batch, Codec, OutgoingBatch, Record, SourceOffsets};
use kmirror_actors::kafka::fence::{acquire, fence_partitions};
use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_actors::node::{Node, NodeSettings, PartitionDescription};
use kmirror_actors::shards::{Shards, ShardsSpec};
use kmirror_actors::spread::Followed;
use kmirror_actors::state_log::{ensure_state_topic, KafkaLog, StateFollower, StateLogOptions};
use kmirror_events::{
    coordinator_partition, partition_state_partition, MirrorPartitionKey, Record as StateRecord,
    SPREAD_KEY,
};
use kmirror_store::EventLog;
use kmirror_tests::mirror::{connector, consume_sorted, open_fenced_log, topic_id_of};
use kmirror_tests::proxy::{FaultProxy, HeldAnswer, PRODUCE};
use kmirror_tests::{bed, create_topic, unique};

/// Where the test's partition runs.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// A whole mirror in the one shard of its state topic.
    Whole,
    /// A spread mirror whose partition is placed in one shard of two, the
    /// mirror coordinated from the other.
    Spread,
}

/// One node: its shards and the node of the shard it runs the partition in.
struct Owner {
    shards: Shards,
    node: Node,
    destination: Arc<KafkaCluster>,
}

/// What every owner of the test's shard shares.
struct Shard {
    state_topic: String,
    data_prefix: String,
    topic: String,
    /// The mirror's name: a spread mirror's is chosen so that its partition
    /// is placed away from its coordinator.
    mirror: String,
    partitions: i32,
    /// The shard A and then B own: where the partition runs.
    host: i32,
    /// Every shard followed read-only (spread only).
    follower: Option<(StateFollower, Followed)>,
    /// The node coordinating the spread mirror from the other shard,
    /// through no proxy.
    coordinator: Option<Owner>,
}

impl Shard {
    /// Creates the one-partition source topic and, for a spread mirror,
    /// the two-partition state topic, its follower and the coordinator.
    async fn new(name: &str, layout: Layout) -> Self {
        let mut shard = Shard {
            state_topic: unique(&format!("{name}-state")),
            data_prefix: unique(&format!("kmirror-{name}-data")),
            topic: unique(name),
            mirror: "pauses".into(),
            partitions: 1,
            host: 0,
            follower: None,
            coordinator: None,
        };
        create_topic(&bed().source, &shard.topic, 1, &[]);
        if layout == Layout::Whole {
            return shard;
        }
        shard.partitions = 2;
        // Over two shards, a partition goes where its mirror does for every
        // mirror name or for none, by the parity of its topic id's hash:
        // topics are made until one is placed away.
        loop {
            let id = topic_id_of(&bed().source, &shard.topic);
            let key = MirrorPartitionKey::new(shard.mirror.as_str(), id, 0);
            shard.host = partition_state_partition(&key, 2);
            if shard.host != coordinator_partition(&shard.mirror, 2) {
                break;
            }
            shard.topic = unique(name);
            create_topic(&bed().source, &shard.topic, 1, &[]);
        }
        let client = KafkaClient::connect(ClientConfig::plaintext(&bed().destination))
            .await
            .unwrap();
        ensure_state_topic(&client, &shard.log_options())
            .await
            .unwrap();
        let follower = StateFollower::start(&shard.log_options()).await.unwrap();
        let followed = follower.followed(client, &shard.state_topic);
        shard.follower = Some((follower, followed));
        let home = coordinator_partition(&shard.mirror, 2);
        let config = ClientConfig::plaintext(&bed().destination);
        shard.coordinator = Some(shard.owner_of(home, "C", config).await);
        println!(
            "spread mirror {}: coordinated in shard {home}, its partition placed in shard {}",
            shard.mirror, shard.host
        );
        shard
    }

    fn log_options(&self) -> StateLogOptions {
        StateLogOptions {
            topic: self.state_topic.clone(),
            partitions: self.partitions,
            replication_factor: 1,
            ..StateLogOptions::new(&bed().destination)
        }
    }

    /// Starts an owner of the shard whose destination client `config` is.
    async fn owner(&self, member: &str, config: ClientConfig) -> Owner {
        self.owner_of(self.host, member, config).await
    }

    /// A node owning `shard` alone. Each shard's log is opened the way a
    /// clustered daemon opens it: acquire the shard's transactional id, an
    /// abort marker on the partition, then load — so the previous owner's
    /// log producer is fenced first.
    async fn owner_of(&self, shard: i32, member: &str, config: ClientConfig) -> Owner {
        let client = KafkaClient::connect(config).await.unwrap();
        let destination =
            Arc::new(KafkaCluster::new(client, FetchOptions::default()).fenced(&self.data_prefix));
        let (options, prefix) = (self.log_options(), self.data_prefix.clone());
        let followed = self.follower.as_ref().map(|f| f.1.clone());
        let shards = Shards::new(ShardsSpec {
            destination: destination.clone(),
            connect_source: connector(),
            settings: NodeSettings {
                refresh_interval: Duration::from_millis(500),
                state_topic: self.state_topic.clone(),
                state_topic_partitions: self.partitions,
                member: member.to_string(),
                accept_spread: followed.is_some(),
                followed,
                ..NodeSettings::default()
            },
            open_log: Arc::new(move |shard| {
                let (options, tid) = (options.clone(), format!("{prefix}-state-{shard}"));
                Box::pin(async move {
                    Ok(Arc::new(open_fenced_log(options, shard, tid).await) as Arc<dyn EventLog>)
                })
            }),
        });
        let failed = shards.reconcile(&BTreeSet::from([shard])).await;
        assert!(
            failed.is_empty(),
            "{member} starts shard {shard}: {failed:?}"
        );
        let node = shards.nodes().await.pop().unwrap().1;
        Owner {
            shards,
            node,
            destination,
        }
    }

    /// The node that coordinates the mirror when `owner` runs its
    /// partition: `owner` itself for a whole mirror.
    fn coordinator<'a>(&'a self, owner: &'a Owner) -> &'a Node {
        self.coordinator.as_ref().map_or(&owner.node, |c| &c.node)
    }

    /// A mirror name whose topic-level records the partition's shard
    /// would write (one routed to `host`).
    fn routed_to_host(&self) -> String {
        (0..)
            .map(|i| format!("late-{i}"))
            .find(|m| coordinator_partition(m, self.partitions) == self.host)
            .unwrap()
    }

    /// The offset-map run records of the partition's shard, oldest first,
    /// as `(source_start, destination_start, length)` (a removal: −1, −1),
    /// read without writing.
    async fn runs(&self) -> Vec<(i64, i64, i64)> {
        let (options, shard) = (self.log_options(), self.host);
        tokio::task::spawn_blocking(move || {
            let log = KafkaLog::open_read_only(&options, Some(shard)).unwrap();
            log.read(0)
                .unwrap()
                .filter_map(|e| match e.unwrap().record {
                    StateRecord::OffsetMapRun(_, Some(r)) => {
                        Some((r.source_start, r.destination_start, r.length))
                    }
                    StateRecord::OffsetMapRun(k, None) => Some((k.source_start, -1, -1)),
                    _ => None,
                })
                .collect()
        })
        .await
        .unwrap()
    }

    /// Stops the coordinator and the follower, after A and B stopped.
    async fn close(self) {
        if let Some(c) = self.coordinator {
            c.shards.shutdown().await;
        }
        if let Some((follower, _)) = self.follower {
            follower.close().await;
        }
    }
}

/// A's destination client: through the proxy, and patient enough that
/// a held produce is still awaited (not retried) when it is released.
fn through(proxy: &FaultProxy) -> ClientConfig {
    let mut config = ClientConfig::plaintext(&bed().destination);
    proxy.route(&mut config);
    config.request_timeout = Duration::from_secs(120);
    config.delivery_timeout = Duration::from_secs(240);
    config
}

/// A source producer writing `v-{i}` records, 5 a batch, while `running`.
struct SourceWriter {
    running: Arc<AtomicBool>,
    /// Set by the task when it has seen `running` false between batches.
    parked: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl SourceWriter {
    async fn start(topic: &str) -> Self {
        let client = KafkaClient::connect(ClientConfig::plaintext(&bed().source))
            .await
            .unwrap();
        let producer = IdempotentProducer::new(client).await.unwrap();
        let partition = producer.partition(topic, 0).unwrap();
        let running = Arc::new(AtomicBool::new(true));
        let parked = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicUsize::new(0));
        let (r, pk, s, w) = (
            running.clone(),
            parked.clone(),
            stop.clone(),
            written.clone(),
        );
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                if !r.load(Ordering::SeqCst) {
                    pk.store(true, Ordering::SeqCst);
                } else {
                    let first = w.load(Ordering::SeqCst);
                    let now = kmirror_actors::coordinator::now_ms();
                    let records: Vec<Record> = (0..5)
                        .map(|j| Record {
                            offset_delta: j,
                            timestamp: now,
                            key: Some(Bytes::from(format!("k{}", first + j as usize))),
                            value: Some(Bytes::from(format!("v-{}", first + j as usize))),
                            headers: vec![],
                        })
                        .collect();
                    let batch = OutgoingBatch::new(
                        encode_batch(&records, Codec::None).unwrap(),
                        5,
                        SourceOffsets::Range { first: 0, last: 4 },
                    );
                    partition.send(batch).await.unwrap().await.unwrap();
                    w.fetch_add(5, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            partition.close().await;
        });
        SourceWriter {
            running,
            parked,
            stop,
            written,
            task,
        }
    }

    /// Stops writing, and answers how many records were written once the
    /// batch under way (if any) is acknowledged: the task says so itself
    /// (a quiet spell is no proof on a loaded machine, where an ack can
    /// come later than any wait chosen for it).
    async fn pause(&self) -> usize {
        self.parked.store(false, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
        while !self.parked.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.written.load(Ordering::SeqCst)
    }

    fn resume(&self) {
        self.running.store(true, Ordering::SeqCst);
    }

    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        self.written.load(Ordering::SeqCst)
    }
}

impl Shard {
    /// The mirror's one partition as `node` describes it, if it runs there.
    async fn described(&self, node: &Node) -> Option<PartitionDescription> {
        let described = node.describe(None).await.ok()?;
        described.into_iter().find(|p| p.mirror == self.mirror)
    }

    /// The mirror's one partition, once `node` shows it (a node just
    /// started shows it once its MirrorActor has started it).
    async fn partition(&self, node: &Node) -> PartitionDescription {
        let start = Instant::now();
        loop {
            if let Some(p) = self.described(node).await {
                return p;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no partition");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_for(
        &self,
        node: &Node,
        what: &str,
        done: impl Fn(&PartitionDescription) -> bool,
    ) {
        let start = Instant::now();
        loop {
            let p = self.described(node).await;
            if p.as_ref().is_some_and(&done) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "{what}: not after 90 s: {p:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A starts the shard and copies `topic` under a continuous producer.
async fn a_copies(shard: &Shard, proxy: &FaultProxy) -> (Owner, SourceWriter) {
    let a = shard.owner("A", through(proxy)).await;
    let mut props: std::collections::BTreeMap<String, String> = [
        ("bootstrap.servers", bed().source.as_str()),
        ("mirror.failed.retry.initial.backoff.ms", "100"),
        ("mirror.failed.retry.max.backoff.ms", "500"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if shard.coordinator.is_some() {
        props.insert(SPREAD_KEY.to_string(), "true".to_string());
    }
    let coordinator = shard.coordinator(&a);
    coordinator
        .create_mirror(&shard.mirror, props)
        .await
        .unwrap();
    let writer = SourceWriter::start(&shard.topic).await;
    coordinator
        .start_topics(&shard.mirror, std::slice::from_ref(&shard.topic), &[], None)
        .await
        .unwrap();
    shard
        .wait_for(&a.node, "A copies", |p| {
            p.state == "MIRRORING" && p.destination_offset >= 50
        })
        .await;
    (a, writer)
}

/// The Produce answers the broker gave to A's held requests, per
/// partition: `(error name, base offset)`.
fn decode(answers: &[HeldAnswer]) -> Vec<(String, i64)> {
    answers
        .iter()
        .filter(|a| a.api_key == PRODUCE)
        .flat_map(|a| {
            let mut buf = Bytes::from(a.frame[4..].to_vec());
            ResponseHeader::decode(&mut buf, ProduceResponse::header_version(a.api_version))
                .unwrap();
            let r = ProduceResponse::decode(&mut buf, a.api_version).unwrap();
            r.responses
                .into_iter()
                .flat_map(|t| t.partition_responses)
                .map(|p| {
                    let name = kafka_protocol::ResponseError::try_from_code(p.error_code)
                        .map(|e| format!("{e:?}"))
                        .unwrap_or_else(|| "NONE".into());
                    (name, p.base_offset)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Releases the produces `proxy` holds and returns the broker's answers
/// to them, once every held request was answered.
async fn release(who: &str, proxy: &FaultProxy) -> Vec<(String, i64)> {
    let held = proxy.held() + proxy.held_answers().len();
    proxy.release();
    wait_until("the broker answers every held produce", || {
        proxy.held_answers().len() >= held
    })
    .await;
    let answers = decode(&proxy.held_answers());
    println!("{who}'s held Produce requests, released: the broker answered {answers:?}");
    assert!(!answers.is_empty());
    answers
}

/// Releases A's held produces: every one is refused, and A's pump stops as
/// having lost the partition (its PartitionActor says so and writes nothing).
async fn release_a(proxy: &FaultProxy, topic: &str) {
    let answers = release("A", proxy).await;
    assert!(
        answers.iter().all(|(e, _)| e == "InvalidProducerEpoch"),
        "every late produce of A is refused: {answers:?}"
    );
    let said = format!("{topic}-0");
    wait_until("A's pump stops as lost ownership", || {
        logged()
            .iter()
            .any(|l| l.contains(&said) && l.contains("another node owns"))
    })
    .await;
    for l in logged().iter().filter(|l| l.contains(&said)) {
        println!("A logged: {l}");
    }
}

/// Warnings of this test binary, captured (each line names its partition).
fn logged() -> Vec<String> {
    let buf = LOGS.get().expect("capture_logs first").lock().unwrap();
    String::from_utf8_lossy(&buf)
        .lines()
        .map(String::from)
        .collect()
}

static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_ansi(false)
            .with_writer(move || Captured(writer.clone()))
            .init();
        buf
    });
}

/// `(offset, value)` of every record of partition 0, by Kafka's console
/// consumer; waits for `n` and reads a little past them to see extras.
fn values(bootstrap: &str, topic: &str, n: usize) -> Vec<(i64, String)> {
    consume_sorted(bootstrap, topic, n + 1, 15_000)
        .iter()
        .map(|l| {
            let field = |name: &str| {
                l.split('\t')
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name} in {l}"))
                    .to_string()
            };
            (
                field("Offset:").parse().unwrap(),
                l.rsplit('\t').next().unwrap().to_string(),
            )
        })
        .collect()
}

/// Stops the source, waits for B to copy everything, and checks: 0 lost,
/// 0 duplicated, order kept, markers as holes, translation exact, and no
/// batch of an epoch below B's fence after B's marker.
async fn settle_and_check(shard: &Shard, b: &Owner, writer: SourceWriter) {
    let written = writer.stop().await;
    shard
        .wait_for(&b.node, "B caught up", |p| {
            p.state == "MIRRORING" && p.lag == 0 && p.source_offset > 0
        })
        .await;
    let tp = TopicPartition::new(&shard.topic, 0);
    let source = values(&bed().source, &shard.topic, written);
    let destination = values(&bed().destination, &shard.topic, written);
    let p = shard.partition(&b.node).await;
    println!(
        "source: {} records (end {}), destination: {} records (end {}), offsets_identical {}",
        source.len(),
        p.source_offset,
        destination.len(),
        p.destination_offset,
        p.offsets_identical
    );
    assert_eq!(source.len(), written, "the source holds what was written");
    let sv: Vec<&String> = source.iter().map(|r| &r.1).collect();
    let dv: Vec<&String> = destination.iter().map(|r| &r.1).collect();
    let lost = sv.iter().filter(|v| !dv.contains(v)).count();
    let duplicated = dv.len() - dv.iter().collect::<BTreeSet<_>>().len();
    println!("lost {lost}, duplicated {duplicated}");
    assert_eq!(dv, sv, "0 lost, 0 duplicated, order kept");

    let end = b.destination.settled_bounds(&tp).await.unwrap().end;
    let batches = b.destination.read_batches(&tp, 0, end).await.unwrap();
    let seen: Vec<(i64, i64, i16, bool)> = batches
        .iter()
        .map(|x| {
            (
                x.base_offset(),
                x.producer_id(),
                x.producer_epoch(),
                x.is_control(),
            )
        })
        .collect();
    let markers: Vec<_> = seen.iter().filter(|s| s.3).collect();
    println!("destination markers (base, producer id, epoch): {markers:?}");
    let fence_epoch = markers.last().expect("B's fence marker").2;
    let fence_at = markers.last().unwrap().0;
    let data_epochs: Vec<(i64, i16)> = seen.iter().filter(|s| !s.3).map(|s| (s.0, s.2)).collect();
    let (before, after): (Vec<_>, Vec<_>) = data_epochs
        .into_iter()
        .partition(|b: &(i64, i16)| b.0 < fence_at);
    println!(
        "data batches: {} before B's marker at {fence_at} (epochs {:?}), {} after (epochs {:?})",
        before.len(),
        before.iter().map(|b| b.1).collect::<BTreeSet<_>>(),
        after.len(),
        after.iter().map(|b| b.1).collect::<BTreeSet<_>>()
    );
    assert!(
        after.iter().all(|(_, e)| *e > fence_epoch),
        "no batch of an epoch up to B's fence lands after its marker"
    );

    // Every source offset translates to the offset of the same record.
    let start = Instant::now();
    loop {
        let mut wrong = Vec::new();
        for ((s, v), (d, w)) in source.iter().zip(&destination) {
            assert_eq!(v, w);
            let t = shard
                .coordinator(b)
                .translate(&shard.mirror, &shard.topic, 0, *s)
                .await
                .unwrap();
            if (t.kind.as_str(), t.destination_offset) != ("exact", Some(*d)) {
                wrong.push((*s, *d, t.kind, t.destination_offset));
            }
        }
        if wrong.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "translations not exact: {:?}",
            &wrong[..wrong.len().min(10)]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let markers_at: Vec<i64> = markers.iter().map(|m| m.0).collect();
    assert!(
        destination.iter().all(|(d, _)| !markers_at.contains(d)),
        "no record sits on a marker's offset"
    );
    println!(
        "all {} source offsets translate exactly; the {} marker offsets {markers_at:?} are holes",
        source.len(),
        markers.len()
    );
    // Kafka's own view of who writes the partition now: B's producer id,
    // at the epoch of B's data (A's epoch is gone).
    let producers = kmirror_tests::kafka_tool_ok(
        "kafka-transactions",
        &[
            "--bootstrap-server",
            &bed().destination,
            "describe-producers",
            "--topic",
            &shard.topic,
            "--partition",
            "0",
        ],
    );
    println!("kafka-transactions describe-producers:\n{producers}");
    let rows: Vec<Vec<&str>> = producers
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .filter(|r: &Vec<&str>| !r.is_empty())
        .collect();
    let b_epoch = after.iter().map(|b| b.1).max().unwrap();
    assert_eq!(rows.len(), 1, "one producer id per partition");
    assert_eq!(
        rows[0][1],
        b_epoch.to_string(),
        "the partition's epoch is B's"
    );
    let runs = shard.runs().await;
    println!(
        "offset-map runs recorded (source start, destination start, length): {:?}",
        runs.iter().rev().take(6).collect::<Vec<_>>()
    );
}

#[actix::test]
async fn a_produce_held_past_a_takeover_is_refused_and_nothing_is_lost_or_doubled() {
    held_past_a_takeover(Layout::Whole).await;
}

#[actix::test]
async fn a_hosts_produce_held_past_a_takeover_is_refused_and_nothing_is_lost_or_doubled() {
    held_past_a_takeover(Layout::Spread).await;
}

async fn held_past_a_takeover(layout: Layout) {
    capture_logs();
    let shard = Shard::new("pause-ack", layout).await;
    let proxy = FaultProxy::start(&bed().destination).await;
    let (a, writer) = a_copies(&shard, &proxy).await;

    // Between a produce and its acknowledgement: A's produces stop at the
    // proxy while the source keeps writing.
    proxy.hold(&[PRODUCE]);
    wait_until("A's produce is held", || proxy.held() > 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a_at = shard.partition(&a.node).await;
    println!(
        "A paused between produce and ack: {} produce(s) held, A's view: destination end {}",
        proxy.held(),
        a_at.destination_offset
    );

    // B takes the shard (log fenced and loaded, partitions fenced) and copies.
    let b = shard
        .owner("B", ClientConfig::plaintext(&bed().destination))
        .await;
    let b_started = shard.partition(&b.node).await.destination_offset;
    shard
        .wait_for(&b.node, "B copies", |p| {
            p.state == "MIRRORING" && p.destination_offset > b_started + 20
        })
        .await;
    println!(
        "B took over and copies: destination end {}",
        shard.partition(&b.node).await.destination_offset
    );

    // A's log is fenced too: a state write of A's is refused, not appended.
    let props = [("bootstrap.servers".to_string(), bed().source.clone())].into();
    let refused = a.node.create_mirror(&shard.routed_to_host(), props).await;
    println!("A's state write after the takeover: {refused:?}");
    let refused = refused.expect_err("A's log still took a write");
    assert!(
        refused.message.contains("InvalidProducerEpoch"),
        "refused as fenced: {refused:?}"
    );

    // A wakes up: its requests reach the broker after B's writes.
    release_a(&proxy, &shard.topic).await;
    settle_and_check(&shard, &b, writer).await;
    b.shards.shutdown().await;
    a.shards.shutdown().await;
    shard.close().await;
}

#[actix::test]
async fn a_run_recorded_but_not_produced_before_a_takeover_never_lands() {
    recorded_not_produced(Layout::Whole).await;
}

#[actix::test]
async fn a_run_a_host_recorded_but_did_not_produce_before_a_takeover_never_lands() {
    recorded_not_produced(Layout::Spread).await;
}

async fn recorded_not_produced(layout: Layout) {
    capture_logs();
    let shard = Shard::new("pause-run", layout).await;
    let proxy = FaultProxy::start(&bed().destination).await;
    let (a, writer) = a_copies(&shard, &proxy).await;
    let paused_at = writer.pause().await as i64;
    shard
        .wait_for(&a.node, "A caught up", |p| {
            p.lag == 0 && p.source_offset == paused_at
        })
        .await;

    // Between recording a run and producing it: an aborted transaction on
    // the source (its marker is an offset kmirror does not copy) makes A
    // open a new run; the run is recorded (length 0) before the produce
    // that opens it, and that produce is held.
    proxy.hold(&[PRODUCE]);
    let src = KafkaClient::connect(ClientConfig::plaintext(&bed().source))
        .await
        .unwrap();
    let txn = acquire(&src, &unique("source-txn"), Duration::from_secs(60), &[])
        .await
        .unwrap();
    fence_partitions(&src, &txn, &[TopicPartition::new(&shard.topic, 0)])
        .await
        .unwrap();
    writer.resume();
    wait_until("A's produce of the new run is held", || proxy.held() > 0).await;
    let runs = shard.runs().await;
    let opened = *runs.last().unwrap();
    println!(
        "source marker at {paused_at}; A recorded the run {opened:?} (source start, destination start, length) and its produce is held ({} request(s))",
        proxy.held()
    );
    assert_eq!(
        opened.0,
        paused_at + 1,
        "the run opens after the source marker"
    );
    assert_eq!(opened.2, 0, "recorded before anything of it was produced");

    // B takes the shard: its marker sits where A's run would have started,
    // so alignment moves the never-landed run past it.
    let b = shard
        .owner("B", ClientConfig::plaintext(&bed().destination))
        .await;
    shard
        .wait_for(&b.node, "B copies", |p| {
            p.state == "MIRRORING" && p.destination_offset > opened.1 + 20
        })
        .await;
    let after: Vec<_> = shard
        .runs()
        .await
        .into_iter()
        .filter(|r| r.0 == opened.0)
        .collect();
    println!("records of the run at source {}: {after:?}", opened.0);
    assert!(
        after.iter().any(|r| r.1 == opened.1 + 1),
        "B re-recorded the run one past its marker at {}",
        opened.1
    );

    release_a(&proxy, &shard.topic).await;
    settle_and_check(&shard, &b, writer).await;
    b.shards.shutdown().await;
    a.shards.shutdown().await;
    shard.close().await;
}

#[actix::test]
async fn a_produce_released_between_the_new_owners_alignment_and_its_first_write_is_refused() {
    released_after_alignment(Layout::Whole).await;
}

#[actix::test]
async fn a_hosts_produce_released_between_the_new_hosts_alignment_and_its_first_write_is_refused() {
    released_after_alignment(Layout::Spread).await;
}

async fn released_after_alignment(layout: Layout) {
    capture_logs();
    let shard = Shard::new("pause-align", layout).await;
    let proxy = FaultProxy::start(&bed().destination).await;
    let (a, writer) = a_copies(&shard, &proxy).await;
    proxy.hold(&[PRODUCE]);
    wait_until("A's produce is held", || proxy.held() > 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // B's own first write is held too: B fences, aligns and records, and
    // its first produce waits while A's late one arrives.
    let proxy_b = FaultProxy::start(&bed().destination).await;
    proxy_b.hold(&[PRODUCE]);
    let b = shard.owner("B", through(&proxy_b)).await;
    wait_until("B's first produce is sent", || proxy_b.held() > 0).await;
    let runs = shard.runs().await;
    let aligned = *runs.iter().rev().find(|r| r.2 >= 0).unwrap();
    println!(
        "B aligned and recorded {aligned:?} (source start, destination start, length); its first produce is held"
    );

    release_a(&proxy, &shard.topic).await;
    let b_answers = release("B", &proxy_b).await;
    let first = b_answers[0].clone();
    assert_eq!(
        first,
        ("NONE".to_string(), aligned.1),
        "B's first write lands where its alignment put it"
    );
    settle_and_check(&shard, &b, writer).await;
    b.shards.shutdown().await;
    a.shards.shutdown().await;
    shard.close().await;
}
