//! The clustered daemon under pauses at the worst moments (issue 15),
//! against real Kafka: two `Node`s in shard mode over one partition of a
//! per-test state topic, each with its own `KafkaLog` opened under the
//! shard's transactional id (fence + load, as `bin/src/clustered.rs`
//! does) and its own fenced `KafkaCluster` destination. Node A's
//! destination traffic goes through a `FaultProxy` that holds its Produce
//! requests — a pause of A's process as the broker sees it: the requests
//! left A and arrive late. B takes the shard meanwhile; the held requests
//! are released at the moment each test names, and the broker's answers to
//! them are decoded from the wire. Every test ends with the destination
//! holding exactly the source's records in order (Kafka's console
//! consumer on both sides), the fence markers as holes, and every source
//! offset translating to the destination offset of the same record.

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
use kmirror_actors::state_log::{KafkaLog, StateLogOptions};
use kmirror_events::Record as StateRecord;
use kmirror_store::EventLog;
use kmirror_tests::mirror::{connector, consume_sorted, open_fenced_log};
use kmirror_tests::proxy::{FaultProxy, HeldAnswer, PRODUCE};
use kmirror_tests::{bed, create_topic, unique};

const MIRROR: &str = "pauses";

/// One shard's owner: its node, its log and its destination.
struct Owner {
    node: Node,
    destination: Arc<KafkaCluster>,
}

/// What every owner of the test's shard shares.
struct Shard {
    state_topic: String,
    data_prefix: String,
    topic: String,
}

impl Shard {
    fn new(name: &str) -> Self {
        Shard {
            state_topic: unique(&format!("{name}-state")),
            data_prefix: unique(&format!("kmirror-{name}-data")),
            topic: unique(name),
        }
    }

    fn log_options(&self) -> StateLogOptions {
        StateLogOptions {
            topic: self.state_topic.clone(),
            partitions: 1,
            replication_factor: 1,
            ..StateLogOptions::new(&bed().destination)
        }
    }

    /// Opens the shard's log the way a clustered daemon does: acquire the
    /// shard's transactional id, an abort marker on the partition, then
    /// load — so the previous owner's log producer is fenced first.
    async fn open_log(&self) -> Arc<dyn EventLog> {
        let tid = format!("{}-state-0", self.data_prefix);
        Arc::new(open_fenced_log(self.log_options(), tid).await)
    }

    /// Starts an owner of the shard whose destination client `config` is.
    async fn owner(&self, member: &str, config: ClientConfig) -> Owner {
        let log = self.open_log().await;
        let client = KafkaClient::connect(config).await.unwrap();
        let destination =
            Arc::new(KafkaCluster::new(client, FetchOptions::default()).fenced(&self.data_prefix));
        let node = Node::start(
            log,
            destination.clone(),
            connector(),
            NodeSettings {
                refresh_interval: Duration::from_millis(500),
                state_topic: self.state_topic.clone(),
                state_topic_partitions: 1,
                shard: Some(0),
                member: member.to_string(),
                ..NodeSettings::default()
            },
        )
        .await
        .expect("node start");
        Owner { node, destination }
    }

    /// The offset-map run records of the shard's log, oldest first, as
    /// `(source_start, destination_start, length)` (a removal: −1, −1),
    /// read without writing.
    async fn runs(&self) -> Vec<(i64, i64, i64)> {
        let options = self.log_options();
        tokio::task::spawn_blocking(move || {
            let log = KafkaLog::open_read_only(&options, Some(0)).unwrap();
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

/// The mirror's one partition, once the node shows it (a node just
/// started shows it once its MirrorActor has started it).
async fn partition(node: &Node) -> PartitionDescription {
    let start = Instant::now();
    loop {
        if let Some(p) = node
            .describe(Some(MIRROR))
            .await
            .unwrap()
            .into_iter()
            .next()
        {
            return p;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no partition");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for(node: &Node, what: &str, done: impl Fn(&PartitionDescription) -> bool) {
    let start = Instant::now();
    loop {
        if let Ok(parts) = node.describe(Some(MIRROR)).await {
            if parts.len() == 1 && done(&parts[0]) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "{what}: not after 90 s: {parts:#?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    create_topic(&bed().source, &shard.topic, 1, &[]);
    let a = shard.owner("A", through(proxy)).await;
    let props = [
        ("bootstrap.servers", bed().source.as_str()),
        ("mirror.failed.retry.initial.backoff.ms", "100"),
        ("mirror.failed.retry.max.backoff.ms", "500"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    a.node.create_mirror(MIRROR, props).await.unwrap();
    let writer = SourceWriter::start(&shard.topic).await;
    a.node
        .start_topics(MIRROR, std::slice::from_ref(&shard.topic), &[], None)
        .await
        .unwrap();
    wait_for(&a.node, "A copies", |p| {
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
    wait_for(&b.node, "B caught up", |p| {
        p.state == "MIRRORING" && p.lag == 0 && p.source_offset > 0
    })
    .await;
    let tp = TopicPartition::new(&shard.topic, 0);
    let source = values(&bed().source, &shard.topic, written);
    let destination = values(&bed().destination, &shard.topic, written);
    let p = partition(&b.node).await;
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
    let duplicated = dv.len() - dv.iter().collect::<std::collections::BTreeSet<_>>().len();
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
        before
            .iter()
            .map(|b| b.1)
            .collect::<std::collections::BTreeSet<_>>(),
        after.len(),
        after
            .iter()
            .map(|b| b.1)
            .collect::<std::collections::BTreeSet<_>>()
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
            let t = b.node.translate(MIRROR, &shard.topic, 0, *s).await.unwrap();
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
    capture_logs();
    let shard = Shard::new("pause-ack");
    let proxy = FaultProxy::start(&bed().destination).await;
    let (a, writer) = a_copies(&shard, &proxy).await;

    // Between a produce and its acknowledgement: A's produces stop at the
    // proxy while the source keeps writing.
    proxy.hold(&[PRODUCE]);
    wait_until("A's produce is held", || proxy.held() > 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a_at = partition(&a.node).await;
    println!(
        "A paused between produce and ack: {} produce(s) held, A's view: destination end {}",
        proxy.held(),
        a_at.destination_offset
    );

    // B takes the shard (log fenced and loaded, partitions fenced) and copies.
    let b = shard
        .owner("B", ClientConfig::plaintext(&bed().destination))
        .await;
    let b_started = partition(&b.node).await.destination_offset;
    wait_for(&b.node, "B copies", |p| {
        p.state == "MIRRORING" && p.destination_offset > b_started + 20
    })
    .await;
    println!(
        "B took over and copies: destination end {}",
        partition(&b.node).await.destination_offset
    );

    // A's log is fenced too: a state write of A's is refused, not appended.
    let props = [("bootstrap.servers".to_string(), bed().source.clone())].into();
    let refused = a.node.create_mirror("late", props).await;
    println!("A's state write after the takeover: {refused:?}");
    assert!(refused.is_err(), "A's log still took a write");

    // A wakes up: its requests reach the broker after B's writes.
    release_a(&proxy, &shard.topic).await;
    settle_and_check(&shard, &b, writer).await;
    b.node.shutdown().await;
    a.node.shutdown().await;
}

#[actix::test]
async fn a_run_recorded_but_not_produced_before_a_takeover_never_lands() {
    capture_logs();
    let shard = Shard::new("pause-run");
    let proxy = FaultProxy::start(&bed().destination).await;
    let (a, writer) = a_copies(&shard, &proxy).await;
    let paused_at = writer.pause().await as i64;
    wait_for(&a.node, "A caught up", |p| {
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
    wait_for(&b.node, "B copies", |p| {
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
    b.node.shutdown().await;
    a.node.shutdown().await;
}

#[actix::test]
async fn a_produce_released_between_the_new_owners_alignment_and_its_first_write_is_refused() {
    capture_logs();
    let shard = Shard::new("pause-align");
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
    b.node.shutdown().await;
    a.node.shutdown().await;
}
