//! StatePublisher: copies every record the coordinator appends into the
//! state topic on the destination cluster (see `state_topic.rs` for why and
//! the layout), in one node as in many.
//!
//! It runs behind the log, never in front of it: a record is published once
//! it is durable in the event log, so publishing never delays a decision.
//! While the destination cannot take them, records wait in memory keyed like
//! the topic is compacted — a newer record of a key replaces a waiting older
//! one — so what waits is bounded by the number of keys, not by time. A
//! partition being stopped waits for its LastMirrorEpochs to be published
//! ([`WaitPublished`]): the failback reads it from there.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::BytesMut;
use kmirror_events::{Offset, Record, RecordKey};
use tokio::sync::oneshot;

use crate::cluster::{DestinationCluster, PartitionSink};
use crate::coordinator::{now_ms, Appended};
use crate::kafka::batch::{encode_batch, Codec, OutgoingBatch, SourceOffsets};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;
use crate::state_topic::{encode, partition_of};

/// Records per publishing round: one produce per state partition, each
/// well under the topic's default `max.message.bytes`.
const ROUND: usize = 2000;
const BATCH_BYTES: usize = 512 * 1024;
/// How soon a failed round is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Resolves `true` once every record up to `0` (a log offset) is in the
/// state topic (or replaced there by a newer record of its key), `false` if
/// the publisher stopped first.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct WaitPublished(pub Offset);

/// Where and how the publisher writes.
pub struct PublisherSpec {
    pub destination: Arc<dyn DestinationCluster>,
    pub topic: String,
    /// Partitions the topic is created with; an existing topic's count wins.
    pub partitions: i32,
}

pub struct StatePublisher {
    spec: PublisherSpec,
    partitions: Option<i32>,
    pending: BTreeMap<Offset, Record>,
    /// The newest offset handed over per key: an older record arriving later
    /// (the whole log re-published at start-up, beside live appends) must
    /// never overwrite a newer one in the compacted topic.
    latest: HashMap<RecordKey, Offset>,
    /// One past the highest offset handed to the publisher.
    end: Offset,
    /// Every offset below this is published (or replaced by a newer one).
    published: Offset,
    waiters: Vec<(Offset, oneshot::Sender<bool>)>,
    /// The producers, one per state partition; out while a round runs.
    sinks: Option<HashMap<i32, Box<dyn PartitionSink>>>,
    busy: bool,
}

impl StatePublisher {
    pub fn new(spec: PublisherSpec) -> Self {
        StatePublisher {
            spec,
            partitions: None,
            pending: BTreeMap::new(),
            latest: HashMap::new(),
            end: 0,
            published: 0,
            waiters: Vec::new(),
            sinks: Some(HashMap::new()),
            busy: false,
        }
    }

    /// Moves the published mark past everything no longer waiting and
    /// answers the waiters it passed.
    fn settle(&mut self) {
        self.published = self.pending.keys().next().copied().unwrap_or(self.end);
        let published = self.published;
        let (done, left): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(o, _)| *o < published);
        self.waiters = left;
        for (_, w) in done {
            let _ = w.send(true);
        }
    }

    fn queue(&mut self, offset: Offset, record: Record) {
        let key = record.key();
        if self.latest.get(&key).is_some_and(|&newer| newer >= offset) {
            return;
        }
        if let Some(older) = self.latest.insert(key, offset) {
            self.pending.remove(&older);
        }
        self.pending.insert(offset, record);
        self.end = self.end.max(offset + 1);
    }

    /// Starts a round if none runs and something waits.
    fn kick(&mut self, ctx: &mut Context<Self>) {
        if self.busy || self.pending.is_empty() {
            return;
        }
        self.busy = true;
        let spec_topic = self.spec.topic.clone();
        let destination = self.spec.destination.clone();
        let known = self.partitions;
        let wanted = self.spec.partitions;
        let round: Vec<(Offset, Record)> = self
            .pending
            .iter()
            .take(ROUND)
            .map(|(o, r)| (*o, r.clone()))
            .collect();
        let mut sinks = self.sinks.take().unwrap_or_default();
        let work = async move {
            let result = async {
                let partitions = match known {
                    Some(n) => n,
                    None => ensure_topic(&*destination, &spec_topic, wanted).await?,
                };
                let mut by_partition: BTreeMap<i32, Vec<&(Offset, Record)>> = BTreeMap::new();
                for entry in &round {
                    by_partition
                        .entry(partition_of(&entry.1.key(), partitions))
                        .or_default()
                        .push(entry);
                }
                let mut acks = Vec::new();
                for (p, entries) in by_partition {
                    let sink = match sinks.entry(p) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            let tp = TopicPartition::new(&spec_topic, p);
                            v.insert(destination.open_sink(tp).await?)
                        }
                    };
                    for batch in batches(&entries)? {
                        acks.push(sink.send(batch).await?);
                    }
                }
                for ack in acks {
                    ack.await?;
                }
                Ok::<_, KafkaError>(partitions)
            }
            .await;
            if result.is_err() {
                // A producer that failed may still be retrying: an older
                // value landing after a newer one would become its key's
                // value. Let every one finish before the next round.
                for (_, sink) in sinks.drain() {
                    sink.close().await;
                }
            }
            (sinks, result.map(|partitions| (partitions, round)))
        };
        ctx.spawn(work.into_actor(self).map(move |(sinks, res), act, ctx| {
            act.busy = false;
            act.sinks = Some(sinks);
            match res {
                Ok((partitions, round)) => {
                    act.partitions = Some(partitions);
                    for (offset, record) in round {
                        // Replaced meanwhile by a newer record of its key:
                        // that one is still waiting.
                        if act.pending.get(&offset) == Some(&record) {
                            act.pending.remove(&offset);
                        }
                    }
                    act.settle();
                    act.kick(ctx);
                }
                Err(e) => {
                    tracing::warn!(topic = %act.spec.topic, error = %e, "publishing to the state topic failed; retrying");
                    ctx.run_later(RETRY, |act, ctx| act.kick(ctx));
                }
            }
        }));
    }
}

/// The state topic exists (created compacted if not); its partition count.
async fn ensure_topic(
    destination: &dyn DestinationCluster,
    topic: &str,
    partitions: i32,
) -> Result<i32, KafkaError> {
    if let Some(t) = destination
        .topics()
        .await?
        .into_iter()
        .find(|t| t.name == topic)
    {
        return Ok(t.partitions);
    }
    let configs = vec![("cleanup.policy".to_string(), "compact".to_string())];
    if let Err(e) = destination.create_topic(topic, partitions, configs).await {
        // Another daemon may have created it meanwhile.
        if !destination.topics().await?.iter().any(|t| t.name == topic) {
            return Err(e);
        }
    }
    Ok(destination
        .topics()
        .await?
        .into_iter()
        .find(|t| t.name == topic)
        .map_or(partitions, |t| t.partitions))
}

/// The Kafka batches that carry `entries` (one state partition's share of a
/// round, in log order).
fn batches(entries: &[&(Offset, Record)]) -> Result<Vec<OutgoingBatch>, KafkaError> {
    let now = now_ms();
    let mut out = Vec::new();
    let mut records: Vec<crate::kafka::batch::Record> = Vec::new();
    let mut bytes = 0;
    let mut flush = |records: &mut Vec<crate::kafka::batch::Record>| -> Result<(), KafkaError> {
        if records.is_empty() {
            return Ok(());
        }
        let bytes: BytesMut = encode_batch(records, Codec::Lz4)?;
        out.push(OutgoingBatch::new(
            bytes,
            records.len() as i32,
            SourceOffsets::Range {
                first: 0,
                last: records.len() as i64 - 1,
            },
        ));
        records.clear();
        Ok(())
    };
    for (offset, record) in entries {
        let (key, value) = encode(record, *offset, now);
        bytes += key.len() + value.as_ref().map_or(0, |v| v.len());
        records.push(crate::kafka::batch::Record {
            offset_delta: records.len() as i32,
            timestamp: now,
            key: Some(key),
            value,
            headers: Vec::new(),
        });
        if bytes >= BATCH_BYTES {
            flush(&mut records)?;
            bytes = 0;
        }
    }
    flush(&mut records)?;
    Ok(out)
}

impl Actor for StatePublisher {
    type Context = Context<Self>;
}

impl Handler<Appended> for StatePublisher {
    type Result = ();
    fn handle(&mut self, msg: Appended, ctx: &mut Context<Self>) {
        for (offset, record) in msg.records.iter() {
            self.queue(*offset, record.clone());
        }
        self.kick(ctx);
    }
}

impl Handler<WaitPublished> for StatePublisher {
    type Result = ResponseFuture<bool>;
    fn handle(&mut self, msg: WaitPublished, _ctx: &mut Context<Self>) -> Self::Result {
        if msg.0 < self.published {
            return Box::pin(async { true });
        }
        let (tx, rx) = oneshot::channel();
        self.waiters.push((msg.0, tx));
        Box::pin(async move { rx.await.unwrap_or(false) })
    }
}
