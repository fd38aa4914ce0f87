//! Reading one partition of the state topic in bounded chunks, for the
//! load, `read` and the read-only views of [`super::KafkaLog`]; and the
//! bounded broker calls they share.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use kmirror_events::Offset;
use kmirror_store::{LogEntry, Result, StoreError};

use crate::kafka::admin::{Admin, OffsetSpec};
use crate::kafka::batch::decode_records;
use crate::kafka::fetch::{
    FetchError, FetchOptions, FetchSession, FetchedPartition, IsolationLevel, TopicPartition,
};
use crate::kafka::{KafkaClient, KafkaError};
use crate::state_topic::decode_stamped;

/// How many fetches in a row may return nothing below the high watermark
/// before a read gives up (KAFKA-9065: a loader that trusts "start < end
/// means records will come" loops forever).
const MAX_EMPTY_FETCHES: u32 = 20;
/// How many times a read re-routes after a leader change.
const MAX_REROUTES: u32 = 10;

/// `fut` under the client's request timeout (plus slack for the retries a
/// call makes inside): nothing waits forever on a broker.
pub(super) async fn bounded<T>(
    client: &KafkaClient,
    what: &str,
    fut: impl Future<Output = Result<T, KafkaError>>,
) -> Result<T, KafkaError> {
    let limit = client.config().request_timeout * 2 + Duration::from_secs(5);
    tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
        Err(KafkaError::Unknown(format!(
            "{what}: no answer within {limit:?}"
        )))
    })
}

/// One record as fetched.
pub(super) struct RawRecord {
    pub(super) offset: Offset,
    pub(super) timestamp: i64,
    pub(super) key: Option<Bytes>,
    pub(super) value: Option<Bytes>,
}

impl RawRecord {
    pub(super) fn entry(&self, tp: &TopicPartition) -> Result<LogEntry> {
        let (record, timestamp_ms) =
            decode_stamped(self.key.as_deref(), self.value.as_deref(), self.timestamp).map_err(
                |source| {
                    tracing::warn!(partition = %tp, offset = self.offset, error = %source, "undecodable state record");
                    StoreError::Corrupt {
                        offset: self.offset,
                        source,
                    }
                },
            )?;
        Ok(LogEntry {
            offset: self.offset,
            timestamp_ms,
            record,
        })
    }
}

pub(super) async fn bounded_connect(
    props: &BTreeMap<String, String>,
) -> Result<KafkaClient, String> {
    let config = crate::kafka::ClientConfig::from_properties(props).map_err(|e| e.to_string())?;
    let limit = config.request_timeout * 2 + Duration::from_secs(5);
    tokio::time::timeout(limit, KafkaClient::connect(config))
        .await
        .map_err(|_| format!("cannot reach the cluster within {limit:?}"))?
        .map_err(|e| e.to_string())
}

/// A client of its own to the cluster of an existing state topic, and the
/// topic's partition count; a missing topic is an error (nothing reading
/// creates one).
pub(super) async fn connect_to_topic(
    props: &BTreeMap<String, String>,
    topic: &str,
) -> Result<(KafkaClient, i32), String> {
    let client = bounded_connect(props).await?;
    let topics = [topic.to_string()];
    let md = bounded(&client, "Metadata", client.refresh_metadata(Some(&topics)))
        .await
        .map_err(|e| e.to_string())?;
    let Some(t) = md.topic(topic) else {
        return Err(format!("no topic {topic} on the cluster"));
    };
    let partitions = t.partitions.len() as i32;
    Ok((client, partitions))
}

/// The partition's log start offset and high watermark.
pub(super) async fn partition_bounds(
    client: &KafkaClient,
    tp: &TopicPartition,
) -> Result<(Offset, Offset), KafkaError> {
    let admin = Admin::new(client.clone());
    let mut out = [0; 2];
    for (i, spec) in [OffsetSpec::Earliest, OffsetSpec::Latest]
        .into_iter()
        .enumerate()
    {
        let listed = bounded(
            client,
            "ListOffsets",
            admin.list_offset(
                &tp.topic,
                tp.partition,
                spec,
                IsolationLevel::ReadUncommitted,
            ),
        )
        .await?;
        out[i] = listed.offset.max(0) as Offset;
    }
    Ok((out[0], out[1]))
}

/// The records of a fetched answer in `[at, end)`, and the offset after its
/// last complete batch (at least `at`). Control batches are skipped (a
/// fencing transaction's marker takes an offset there), and so are records
/// below `at` in a batch that starts before it (the batch holding the
/// position, or one the cleaner merged): nothing is read twice.
pub(super) fn records_of(
    fetched: &FetchedPartition,
    at: Offset,
    end: Offset,
) -> Result<(Vec<RawRecord>, Offset), KafkaError> {
    let mut out = Vec::new();
    let mut next = at;
    for batch in fetched.batches() {
        let batch = batch?;
        next = next.max(batch.next_offset() as Offset);
        if batch.is_control() || (batch.next_offset() as Offset) <= at {
            continue;
        }
        for r in decode_records(&batch)?.records {
            let offset = (batch.base_offset() + r.offset_delta as i64) as Offset;
            if offset < at || offset >= end {
                continue;
            }
            out.push(RawRecord {
                offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
            });
        }
    }
    Ok((out, next))
}

/// Reads `[at, end)` of one partition in chunks of at most `fetch_bytes`
/// (at least one batch), read-uncommitted, skipping control batches (a
/// fencing transaction's marker takes an offset there).
///
/// Two hazards of reading a compacted partition are handled here. A fetch
/// may answer a batch that starts before the position (the batch holding
/// it, or one the cleaner merged): records below the position are skipped,
/// so nothing is read twice. And a fetch may answer nothing although the
/// position is below the end (KAFKA-9065): the bounds are read again (the
/// log start may have moved past the position), and after
/// [`MAX_EMPTY_FETCHES`] such answers the read fails instead of looping.
/// A record compaction removes mid-read is simply not seen: compaction
/// removes only a record that a newer one of its key (read later) replaces.
pub(super) struct PartitionReader {
    client: KafkaClient,
    tp: TopicPartition,
    session: Option<FetchSession>,
    at: Offset,
    end: Offset,
    fetch_bytes: i32,
    empty: u32,
    reroutes: u32,
}

impl PartitionReader {
    pub(super) fn new(
        client: KafkaClient,
        tp: TopicPartition,
        at: Offset,
        end: Offset,
        fetch_bytes: i32,
    ) -> Self {
        PartitionReader {
            client,
            tp,
            session: None,
            at,
            end,
            fetch_bytes,
            empty: 0,
            reroutes: 0,
        }
    }

    /// The next records, `None` at the end.
    pub(super) async fn next_chunk(&mut self) -> Result<Option<Vec<RawRecord>>, KafkaError> {
        loop {
            if self.at >= self.end {
                return Ok(None);
            }
            if self.session.is_none() {
                let (leader, epoch) = bounded(
                    &self.client,
                    "Metadata",
                    self.client.leader(&self.tp.topic, self.tp.partition),
                )
                .await?;
                let mut session = FetchSession::new(
                    self.client.clone(),
                    leader,
                    FetchOptions {
                        isolation: IsolationLevel::ReadUncommitted,
                        max_wait: Duration::from_millis(100),
                        min_bytes: 1,
                        max_bytes: self.fetch_bytes,
                        partition_max_bytes: self.fetch_bytes,
                        incremental: false,
                    },
                );
                session.add(self.tp.clone(), self.at as i64, epoch, uuid::Uuid::nil());
                self.session = Some(session);
            }
            let session = self.session.as_mut().expect("set above");
            let results = match bounded(&self.client, "Fetch", session.fetch()).await {
                Ok(r) => r,
                Err(e)
                    if (e.is_retriable() || e.needs_metadata_refresh())
                        && self.reroutes < MAX_REROUTES =>
                {
                    self.reroute().await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let answer = results
                .into_iter()
                .find(|(t, _)| *t == self.tp)
                .map(|(_, r)| r);
            let fetched = match answer {
                Some(Ok(f)) => f,
                None => {
                    self.nothing().await?;
                    continue;
                }
                Some(Err(FetchError::OffsetOutOfRange { .. })) => {
                    let (log_start, _) = partition_bounds(&self.client, &self.tp).await?;
                    if log_start > self.at {
                        self.at = log_start;
                        self.session = None;
                        continue;
                    }
                    return Err(KafkaError::Unknown(format!(
                        "{}: offset {} out of range (log start {log_start})",
                        self.tp, self.at
                    )));
                }
                Some(Err(FetchError::LeaderChanged { .. })) if self.reroutes < MAX_REROUTES => {
                    self.reroute().await;
                    continue;
                }
                Some(Err(FetchError::Other(e))) => return Err(e),
                Some(Err(e)) => {
                    return Err(KafkaError::Unknown(format!(
                        "{} at {}: {e}",
                        self.tp, self.at
                    )))
                }
            };
            let (out, next) = records_of(&fetched, self.at, self.end)?;
            if next <= self.at {
                self.nothing().await?;
                continue;
            }
            self.empty = 0;
            self.at = next;
            return Ok(Some(out));
        }
    }

    /// A fetch brought nothing below the end: look again at the bounds,
    /// and give up after [`MAX_EMPTY_FETCHES`] in a row.
    async fn nothing(&mut self) -> Result<(), KafkaError> {
        self.empty += 1;
        let (log_start, end) = partition_bounds(&self.client, &self.tp).await?;
        if log_start > self.at {
            self.at = log_start;
            self.session = None;
        }
        if end <= self.at {
            // Nothing is left to read (the end moved back? only an unclean
            // election does that): stop at what the broker holds.
            self.end = self.at;
        }
        if self.empty >= MAX_EMPTY_FETCHES {
            return Err(KafkaError::Unknown(format!(
                "{}: {} fetches at offset {} returned no records below the end {} (KAFKA-9065)",
                self.tp, self.empty, self.at, self.end
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(())
    }

    async fn reroute(&mut self) {
        self.reroutes += 1;
        self.session = None;
        let _ = bounded(
            &self.client,
            "Metadata",
            self.client
                .refresh_metadata(Some(&[self.tp.topic.to_string()])),
        )
        .await;
        tokio::time::sleep(self.client.retry_backoff(self.reroutes)).await;
    }
}
