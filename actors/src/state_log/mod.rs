//! [`KafkaLog`]: the event log kept in ONE partition of the compacted state
//! topic, for the clustered daemon, where the log of a coordinator shard is
//! the state partition its coordinator owns (and is the only writer of).
//!
//! Records are stored exactly as the state topic already holds them
//! (`state_topic::encode`: the key, the envelope as value, null for a
//! tombstone), so `read_image`, `kmirror log` and Kafka's own console
//! consumer read the same bytes. A record's log offset is its Kafka offset
//! (the envelope carries the same, predicted before the produce and checked
//! against the broker's answer).
//!
//! Why the shape:
//! - The [`EventLog`] trait blocks (callers run it on a blocking pool), and
//!   tokio sockets belong to the runtime that made them, so the log owns a
//!   small runtime and builds its client and producer inside it; every
//!   blocking call is a `block_on` there, under a timeout.
//! - Only the index (key → newest offset, and whether it is a tombstone) is
//!   kept in memory: that is what `latest` and the StateValidationOffset
//!   check need. `read` fetches from the broker.
//! - The broker compacts: `compact` and snapshots are no-ops, and
//!   `load_image` replays the (compacted) partition from its log start.
//! - One append is one produce of one batch (a batch is atomic) with
//!   acks=all through the idempotent producer, so `flush` has nothing to do.
//!   After a failed or ambiguous produce the log refuses further appends:
//!   whether the batch landed is unknown, and the producer's sequence is
//!   spent; the owner reopens (reloads) the log.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kmirror_events::{MirrorStateImage, Offset, Record, RecordKey, StateValidation};
use kmirror_store::{
    check_state_validation, CompactStats, EventLog, LogEntry, LogIter, Result, StoreError,
};

use crate::kafka::admin::{Admin, ConfigResource, NewTopic};
use crate::kafka::batch::{encode_batch, Codec, OutgoingBatch, SourceOffsets};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::produce::{IdempotentProducer, PartitionProducer};
use crate::kafka::{KafkaClient, KafkaError, ResponseError};
use crate::state_topic::{encode, DEFAULT_PARTITIONS, DEFAULT_STATE_TOPIC};

mod follower;
mod reader;

pub use follower::{FollowedShard, FollowedState, StateFollower};

use reader::{
    bounded, bounded_connect, connect_to_topic, partition_bounds, PartitionReader, RawRecord,
};

/// Builds the producer the log writes through, inside the log's runtime
/// (whose client it is given). The default is a fresh idempotent producer;
/// the fencing work hands in one under a fenced producer id and epoch.
pub type ProducerFactory = Box<
    dyn FnOnce(
            KafkaClient,
        )
            -> Pin<Box<dyn Future<Output = Result<IdempotentProducer, KafkaError>> + Send>>
        + Send,
>;

/// Where the log lives, and the topic kmirror creates if it is missing.
#[derive(Clone, Debug)]
pub struct StateLogOptions {
    /// Kafka client properties (`bootstrap.servers`, TLS, SASL…).
    pub client: BTreeMap<String, String>,
    pub topic: String,
    /// Partitions of a topic kmirror creates (an existing topic's count wins).
    pub partitions: i32,
    /// Replication factor of a topic kmirror creates, capped at the number
    /// of brokers; `min.insync.replicas` is min(2, it), so an acknowledged
    /// record survives the loss of a broker.
    pub replication_factor: i16,
    /// More configs for a topic kmirror creates (tests shrink segments).
    pub topic_configs: BTreeMap<String, String>,
    /// Bytes per fetch while loading and reading (Kafka's coordinator
    /// loader reads 5 MiB at a time).
    pub fetch_bytes: i32,
}

impl StateLogOptions {
    /// The defaults for a cluster at `bootstrap`.
    pub fn new(bootstrap: &str) -> Self {
        StateLogOptions {
            client: BTreeMap::from([("bootstrap.servers".to_string(), bootstrap.to_string())]),
            topic: DEFAULT_STATE_TOPIC.to_string(),
            partitions: DEFAULT_PARTITIONS,
            replication_factor: 3,
            topic_configs: BTreeMap::new(),
            fetch_bytes: 5 * 1024 * 1024,
        }
    }
}

/// What opening a writable log read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// The partition's log start offset and high watermark at load.
    pub log_start: Offset,
    pub end: Offset,
    /// Records read (compaction leaves fewer than `end - log_start`).
    pub records: u64,
    /// Distinct keys (the index's size).
    pub keys: usize,
    pub elapsed: Duration,
}

/// The newest record of a key, as the index keeps it.
#[derive(Clone, Copy, Debug)]
struct Newest {
    offset: Offset,
    timestamp_ms: i64,
    tombstone: bool,
}

struct Writer {
    producer: PartitionProducer,
    index: HashMap<RecordKey, Newest>,
    /// Why appends are refused (set by a failed or ambiguous produce).
    broken: Option<String>,
}

enum Mode {
    /// One partition, written through `Writer`.
    Write(Box<Mutex<Writer>>),
    /// One partition, read only.
    ReadPartition,
    /// Every partition, read once at open: across partitions there is no one
    /// offset order, so records are put in time order (then partition and
    /// offset) and numbered from 0.
    ReadAll(Vec<LogEntry>),
}

/// The event log in one partition of the state topic (see the module doc).
pub struct KafkaLog {
    runtime: Option<tokio::runtime::Runtime>,
    client: KafkaClient,
    tp: TopicPartition,
    fetch_bytes: i32,
    /// One past the last offset: the high watermark after load or after our
    /// last append.
    end: AtomicU64,
    mode: Mode,
    report: LoadReport,
}

fn broker_error(tp: &TopicPartition, message: impl std::fmt::Display) -> StoreError {
    StoreError::Broker {
        partition: tp.to_string(),
        message: message.to_string(),
    }
}

fn new_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("kmirror-state-log")
        .enable_all()
        .build()
        .map_err(|e| StoreError::Broker {
            partition: "-".into(),
            message: format!("cannot start the state log's runtime: {e}"),
        })
}

impl KafkaLog {
    /// Opens partition `partition` of the state topic for writing, through a
    /// fresh idempotent producer; creates the topic if missing.
    pub fn open(options: &StateLogOptions, partition: i32) -> Result<Self> {
        Self::open_with(
            options,
            partition,
            Box::new(|client| Box::pin(IdempotentProducer::new(client))),
        )
    }

    /// [`KafkaLog::open`] through the producer `make_producer` builds.
    pub fn open_with(
        options: &StateLogOptions,
        partition: i32,
        make_producer: ProducerFactory,
    ) -> Result<Self> {
        let runtime = new_runtime()?;
        let tp = TopicPartition::new(&options.topic, partition);
        let started = Instant::now();
        let (client, producer, index, report) = runtime
            .block_on(async {
                let client = bounded_connect(&options.client).await?;
                let partitions = ensure_state_topic(&client, options).await?;
                if partition < 0 || partition >= partitions {
                    return Err(format!(
                        "the state topic {} has {partitions} partitions; there is no partition {partition}",
                        options.topic
                    ));
                }
                // The producer first: under a fence it raises the epoch on
                // the partition, so nothing the previous writer still sends
                // lands after the load below has read to the end.
                let producer = tokio::time::timeout(
                    client.config().delivery_timeout + client.config().request_timeout,
                    make_producer(client.clone()),
                )
                .await
                .map_err(|_| "no producer id within the delivery timeout".to_string())?
                .and_then(|p| p.partition(&tp.topic, tp.partition))
                .map_err(|e| format!("producer: {e}"))?;
                let (index, report) = load(&client, &tp, options.fetch_bytes)
                    .await
                    .map_err(|e| format!("loading: {e}"))?;
                Ok((client, producer, index, report))
            })
            .map_err(|e: String| broker_error(&tp, e))?;
        let report = LoadReport {
            elapsed: started.elapsed(),
            ..report
        };
        Ok(KafkaLog {
            runtime: Some(runtime),
            client,
            tp,
            fetch_bytes: options.fetch_bytes,
            end: AtomicU64::new(report.end),
            mode: Mode::Write(Box::new(Mutex::new(Writer {
                producer,
                index,
                broken: None,
            }))),
            report,
        })
    }

    /// Opens the state topic to read only (the CLI): one partition, or
    /// every partition (`None`). Never creates or writes anything; a missing
    /// topic is an error.
    pub fn open_read_only(options: &StateLogOptions, partition: Option<i32>) -> Result<Self> {
        let runtime = new_runtime()?;
        let topic_label = TopicPartition::new(&options.topic, partition.unwrap_or(-1));
        let started = Instant::now();
        let (client, partitions, bounds) = runtime
            .block_on(async {
                let (client, n) = connect_to_topic(&options.client, &options.topic).await?;
                let wanted: Vec<i32> = match partition {
                    Some(p) if p < 0 || p >= n => {
                        return Err(format!(
                            "the state topic {} has {n} partitions; there is no partition {p}",
                            options.topic
                        ))
                    }
                    Some(p) => vec![p],
                    None => (0..n).collect(),
                };
                let mut bounds = Vec::new();
                for p in wanted {
                    let tp = TopicPartition::new(&options.topic, p);
                    bounds.push((
                        tp.clone(),
                        partition_bounds(&client, &tp)
                            .await
                            .map_err(|e| e.to_string())?,
                    ));
                }
                Ok((client, n, bounds))
            })
            .map_err(|e| broker_error(&topic_label, e))?;
        let mut log = KafkaLog {
            runtime: Some(runtime),
            client,
            tp: topic_label,
            fetch_bytes: options.fetch_bytes,
            end: AtomicU64::new(0),
            mode: Mode::ReadPartition,
            report: LoadReport::default(),
        };
        if let [(tp, (start, end))] = bounds.as_slice() {
            // One partition (asked for, or the topic has only one): its own
            // offsets, streamed.
            log.tp = tp.clone();
            log.end.store(*end, Ordering::Relaxed);
            log.report.log_start = *start;
            log.report.end = *end;
            return Ok(log);
        }
        let _ = partitions;
        let mut all: Vec<(i64, i32, LogEntry)> = Vec::new();
        for (tp, (start, end)) in &bounds {
            let mut reader = PartitionReader::new(
                log.client.clone(),
                tp.clone(),
                *start,
                *end,
                log.fetch_bytes,
            );
            while let Some(chunk) = log
                .block_on(reader.next_chunk())
                .map_err(|e| broker_error(tp, e))?
            {
                for raw in chunk {
                    let e = raw.entry(tp)?;
                    all.push((e.timestamp_ms, tp.partition, e));
                }
            }
        }
        all.sort_by_key(|(t, p, e)| (*t, *p, e.offset));
        let entries: Vec<LogEntry> = all
            .into_iter()
            .enumerate()
            .map(|(i, (_, _, e))| LogEntry {
                offset: i as Offset,
                ..e
            })
            .collect();
        log.end.store(entries.len() as Offset, Ordering::Relaxed);
        log.report = LoadReport {
            records: entries.len() as u64,
            end: entries.len() as Offset,
            elapsed: started.elapsed(),
            ..LoadReport::default()
        };
        log.mode = Mode::ReadAll(entries);
        Ok(log)
    }

    /// What the open read.
    pub fn load_report(&self) -> LoadReport {
        self.report
    }

    /// The partition this log is (`topic--1` for an all-partition view).
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.runtime
            .as_ref()
            .expect("runtime lives until drop")
            .block_on(fut)
    }

    fn writer(&self) -> Result<std::sync::MutexGuard<'_, Writer>> {
        match &self.mode {
            Mode::Write(w) => Ok(w.lock().unwrap_or_else(|p| p.into_inner())),
            _ => Err(StoreError::ReadOnly),
        }
    }

    /// The append itself, under the writer lock the caller holds.
    fn append_locked(&self, w: &mut Writer, timestamp_ms: i64, batch: &[Record]) -> Result<Offset> {
        let base = self.end.load(Ordering::Relaxed);
        if batch.is_empty() {
            return Ok(base);
        }
        if let Some(why) = &w.broken {
            return Err(StoreError::Unwritable {
                partition: self.tp.to_string(),
                message: format!(
                    "appends refused since an earlier one failed ({why}); reopen the log"
                ),
            });
        }
        let records: Vec<crate::kafka::batch::Record> = batch
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (key, value) = encode(r, base + i as u64, timestamp_ms);
                crate::kafka::batch::Record {
                    offset_delta: i as i32,
                    timestamp: timestamp_ms,
                    key: Some(key),
                    value,
                    headers: Vec::new(),
                }
            })
            .collect();
        let bytes = encode_batch(&records, Codec::Lz4).map_err(|e| broker_error(&self.tp, e))?;
        let n = batch.len() as i64;
        let outgoing = OutgoingBatch::new(
            bytes,
            n as i32,
            SourceOffsets::Range {
                first: base as i64,
                last: base as i64 + n - 1,
            },
        );
        let config = self.client.config();
        let limit = config.delivery_timeout + config.request_timeout;
        let producer = &w.producer;
        let ack = self.block_on(async {
            tokio::time::timeout(limit, async { producer.send(outgoing).await?.await })
                .await
                .unwrap_or_else(|_| {
                    Err(KafkaError::Unknown(format!(
                        "no acknowledgement within {limit:?}"
                    )))
                })
        });
        let failed = match ack {
            Ok(ack) if ack.base_offset == base as i64 => None,
            Ok(ack) => Some(format!(
                "the broker put the batch at offset {}, not at our end {base}: another writer appended to the partition",
                ack.base_offset
            )),
            Err(e) => Some(format!("produce failed: {e}")),
        };
        if let Some(why) = failed {
            w.broken = Some(why.clone());
            return Err(StoreError::Unwritable {
                partition: self.tp.to_string(),
                message: why,
            });
        }
        for (i, r) in batch.iter().enumerate() {
            w.index.insert(
                r.key(),
                Newest {
                    offset: base + i as u64,
                    timestamp_ms,
                    tombstone: r.is_tombstone(),
                },
            );
        }
        self.end.store(base + n as u64, Ordering::Relaxed);
        Ok(base)
    }
}

impl Drop for KafkaLog {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside another runtime
        // (an actor may hold the last reference): let it wind down alone.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl EventLog for KafkaLog {
    fn append(&self, timestamp_ms: i64, batch: &[Record]) -> Result<Offset> {
        let mut w = self.writer()?;
        self.append_locked(&mut w, timestamp_ms, batch)
    }

    /// Check and append hold the writer lock; the check reads the index,
    /// which holds the offset of every key's newest record.
    fn append_if_unchanged(
        &self,
        timestamp_ms: i64,
        validation: &StateValidation,
        batch: &[Record],
    ) -> Result<Offset> {
        let mut w = self.writer()?;
        check_state_validation(validation, |key| Ok(w.index.get(key).map(|n| n.offset)))?;
        self.append_locked(&mut w, timestamp_ms, batch)
    }

    fn read(&self, from: Offset) -> Result<LogIter<'_>> {
        if let Mode::ReadAll(entries) = &self.mode {
            let start = entries.partition_point(|e| e.offset < from);
            return Ok(Box::new(entries[start..].iter().cloned().map(Ok)));
        }
        let end = self.end.load(Ordering::Relaxed);
        let (log_start, _) = self
            .block_on(partition_bounds(&self.client, &self.tp))
            .map_err(|e| broker_error(&self.tp, e))?;
        let reader = PartitionReader::new(
            self.client.clone(),
            self.tp.clone(),
            from.max(log_start),
            end,
            self.fetch_bytes,
        );
        Ok(Box::new(Entries {
            log: self,
            reader,
            buffered: VecDeque::new(),
            done: false,
        }))
    }

    fn latest(&self, key: &RecordKey) -> Result<Option<LogEntry>> {
        let newest = match &self.mode {
            Mode::Write(_) => self.writer()?.index.get(key).copied(),
            Mode::ReadAll(entries) => {
                return Ok(entries
                    .iter()
                    .rev()
                    .find(|e| &e.record.key() == key)
                    .cloned())
            }
            Mode::ReadPartition => {
                return Ok(self
                    .read(0)?
                    .filter_map(|e| e.ok())
                    .filter(|e| &e.record.key() == key)
                    .last())
            }
        };
        let Some(newest) = newest else {
            return Ok(None);
        };
        if newest.tombstone {
            return Ok(Some(LogEntry {
                offset: newest.offset,
                timestamp_ms: newest.timestamp_ms,
                record: key.clone().tombstone(),
            }));
        }
        // A key's newest record is never compacted away, so it is there.
        let mut reader = PartitionReader::new(
            self.client.clone(),
            self.tp.clone(),
            newest.offset,
            newest.offset + 1,
            self.fetch_bytes,
        );
        while let Some(chunk) = self
            .block_on(reader.next_chunk())
            .map_err(|e| broker_error(&self.tp, e))?
        {
            if let Some(raw) = chunk.into_iter().find(|r| r.offset == newest.offset) {
                return raw.entry(&self.tp).map(Some);
            }
        }
        Err(broker_error(
            &self.tp,
            format!(
                "the newest record of {key:?} (offset {}) is gone",
                newest.offset
            ),
        ))
    }

    fn end_offset(&self) -> Offset {
        self.end.load(Ordering::Relaxed)
    }

    /// The broker compacts the topic (`cleanup.policy=compact`); there is
    /// nothing for kmirror to do.
    fn compact(&self, _now_ms: i64, _tombstone_retention_ms: i64) -> Result<CompactStats> {
        Ok(CompactStats::default())
    }

    /// No snapshots: the broker's compaction keeps the partition at about
    /// one record per key, so a load replays that, and a snapshot would be
    /// a second copy of the state to keep consistent.
    fn write_snapshot(&self, image: &MirrorStateImage) -> Result<()> {
        let end = self.end_offset();
        if image.end_offset() > end {
            return Err(StoreError::SnapshotAhead {
                snapshot: image.end_offset(),
                end,
            });
        }
        Ok(())
    }

    fn latest_snapshot(&self) -> Result<Option<MirrorStateImage>> {
        Ok(None)
    }

    /// Every append was acknowledged by all in-sync replicas before it
    /// returned.
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// Entries of one partition, fetched a chunk at a time.
struct Entries<'a> {
    log: &'a KafkaLog,
    reader: PartitionReader,
    buffered: VecDeque<RawRecord>,
    done: bool,
}

impl Iterator for Entries<'_> {
    type Item = Result<LogEntry>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(raw) = self.buffered.pop_front() {
                return Some(raw.entry(&self.log.tp));
            }
            if self.done {
                return None;
            }
            match self.log.block_on(self.reader.next_chunk()) {
                Ok(Some(chunk)) => self.buffered.extend(chunk),
                Ok(None) => self.done = true,
                Err(e) => {
                    self.done = true;
                    return Some(Err(broker_error(&self.log.tp, e)));
                }
            }
        }
    }
}

/// The state topic exists, compacted; its partition count. Created as
/// [`StateLogOptions`] says if missing; an existing topic is used as it is,
/// but one that is not compacted (or also deletes by retention) is refused:
/// its records, the state, would expire. Every node of a cluster must route
/// mirrors to shards by this count (`coordinator_partition`).
pub async fn ensure_state_topic(
    client: &KafkaClient,
    options: &StateLogOptions,
) -> Result<i32, String> {
    let admin = Admin::new(client.clone());
    let topic = &options.topic;
    let md = bounded(
        client,
        "Metadata",
        client.refresh_metadata(Some(std::slice::from_ref(topic))),
    )
    .await
    .map_err(|e| e.to_string())?;
    if md.topic(topic).is_none() {
        let brokers = md.brokers.len().max(1) as i16;
        let rf = options.replication_factor.clamp(1, brokers);
        let mut configs = options.topic_configs.clone();
        configs.insert("cleanup.policy".into(), "compact".into());
        configs.insert("min.insync.replicas".into(), rf.min(2).to_string());
        let new = NewTopic {
            name: topic.clone(),
            partitions: options.partitions,
            replication_factor: rf,
            configs,
        };
        let created = bounded(client, "CreateTopics", admin.create_topics(&[new], false))
            .await
            .map_err(|e| format!("cannot create the state topic {topic}: {e}"))?;
        for (_, r) in created {
            match r {
                Ok(_) => {}
                // Another node created it meanwhile.
                Err(e) if e.response_error() == Some(ResponseError::TopicAlreadyExists) => {}
                Err(e) => return Err(format!("cannot create the state topic {topic}: {e}")),
            }
        }
    }
    let configs = bounded(
        client,
        "DescribeConfigs",
        admin.describe_configs(&ConfigResource::Topic(topic.clone())),
    )
    .await
    .map_err(|e| format!("cannot describe the state topic {topic}: {e}"))?;
    let policy = configs
        .iter()
        .find(|c| c.name == "cleanup.policy")
        .and_then(|c| c.value.clone())
        .unwrap_or_default();
    if policy.replace(' ', "") != "compact" {
        return Err(format!(
            "the state topic {topic} has cleanup.policy={policy:?}; kmirror keeps its state there only with cleanup.policy=compact (anything else lets the broker delete state)"
        ));
    }
    // A new topic's partitions may need a moment to get leaders.
    let deadline = Instant::now() + client.config().request_timeout;
    loop {
        let md = bounded(
            client,
            "Metadata",
            client.refresh_metadata(Some(std::slice::from_ref(topic))),
        )
        .await
        .map_err(|e| e.to_string())?;
        if let Some(t) = md.topic(topic) {
            if !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader >= 0) {
                return Ok(t.partitions.len() as i32);
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the state topic {topic} has partitions without a leader"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads the partition from its log start to its high watermark and builds
/// the index, decoding keys only.
async fn load(
    client: &KafkaClient,
    tp: &TopicPartition,
    fetch_bytes: i32,
) -> Result<(HashMap<RecordKey, Newest>, LoadReport), KafkaError> {
    let (log_start, end) = partition_bounds(client, tp).await?;
    let mut reader = PartitionReader::new(client.clone(), tp.clone(), log_start, end, fetch_bytes);
    let mut index = HashMap::new();
    let mut records = 0u64;
    while let Some(chunk) = reader.next_chunk().await? {
        for raw in chunk {
            records += 1;
            let key = kmirror_events::codec::decode_key(raw.key.as_deref().unwrap_or_default())
                .map_err(|e| {
                    KafkaError::Unknown(format!("record at offset {}: {e}", raw.offset))
                })?;
            index.insert(
                key,
                Newest {
                    offset: raw.offset,
                    timestamp_ms: raw.timestamp,
                    tombstone: raw.value.is_none(),
                },
            );
        }
    }
    let keys = index.len();
    Ok((
        index,
        LoadReport {
            log_start,
            end,
            records,
            keys,
            elapsed: Duration::ZERO,
        },
    ))
}
