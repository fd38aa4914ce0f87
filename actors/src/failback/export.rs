//! A `delta` failback's quarantine export: the destination's divergent
//! records copied, with their offsets, to a topic the operator can read,
//! closed by a manifest. Safe to run again: what manifests already cover
//! is not exported again (a range that grew since, because the old source
//! took more writes between two attempts, gets a manifest for its new part
//! only), and an interrupted export is finished where it stopped.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::cluster::{ClusterError, DestinationCluster, Doing, PartitionSink};
use crate::kafka::batch::{
    decode_records, encode_batch, Codec, OutgoingBatch, RecordBatch, SourceOffsets,
};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;

/// The header carrying a quarantined record's offset in its topic, and the
/// key of the manifest record that closes an export.
const OFFSET_HEADER: &str = "kmirror.offset";
/// The header naming the export (its manifest id,
/// `{topic}/{topic id}/{partition}/{from}-{end}`) a quarantined record
/// belongs to: an interrupted export resumes after the records of an
/// export from the same offset only, whatever end that one had.
const EXPORT_HEADER: &str = "kmirror.export";
const MANIFEST_KEY: &str = "kmirror.manifest";

/// Copies the destination records `[divergent_start, divergent_end)` of
/// partition `p` into the same partition of `quarantine` (each with its
/// original offset in a header), then a manifest record describing them.
/// `stop` cuts it off (`Ok(false)`) before the quarantine topic is created
/// and between pages: what it wrote by then is finished by the next run.
#[allow(clippy::too_many_arguments)]
pub(super) async fn export(
    destination: &dyn DestinationCluster,
    mirror: &str,
    forward: &str,
    topic: &str,
    p: i32,
    quarantine: &str,
    plan: &kmirror_events::FailbackPlan,
    stop: &AtomicBool,
) -> Result<bool, ClusterError> {
    let stopped = || stop.load(Ordering::SeqCst);
    let (divergent_start, end) = (plan.divergent_start, plan.divergent_end);
    let existing = destination
        .topics()
        .await
        .doing(|| "list destination topics".into())?;
    let exported_topic = existing.iter().find(|t| t.name == topic);
    let partitions = exported_topic.map_or(p + 1, |t| t.partitions);
    // The topic id makes the export of a re-created topic (its offsets
    // begin again at 0) another export than its old incarnation's.
    let partition = match exported_topic {
        Some(t) => format!("{topic}/{}/{p}", t.topic_id),
        None => format!("{topic}/{p}"),
    };
    if !existing.iter().any(|t| t.name == quarantine) {
        if stopped() {
            return Ok(false);
        }
        if let Err(e) = destination
            .create_topic(quarantine, partitions, Vec::new())
            .await
        {
            let now = destination
                .topics()
                .await
                .doing(|| "list destination topics".into())?;
            if !now.iter().any(|t| t.name == quarantine) {
                return Err(ClusterError::new(
                    format!("create quarantine topic {quarantine}"),
                    e,
                ));
            }
        }
    }
    let qtp = TopicPartition::new(quarantine, p);
    let Exported { from, leftover } =
        exported(destination, &qtp, &partition, divergent_start).await?;
    if from >= end {
        return Ok(true);
    }
    // This export's own range, `[from, end)`, and its manifest.
    let manifest_id = format!("{partition}/{from}-{end}");
    let mut sink = destination
        .open_sink(qtp.clone())
        .await
        .doing(|| format!("open a producer for {qtp}"))?;
    let tp = TopicPartition::new(topic, p);
    let export_id = Bytes::from(manifest_id.clone());
    let mut count = 0usize;
    let mut producers = std::collections::BTreeSet::new();
    let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
    // An interrupted run's records are not written twice: what it left
    // after the last manifest is, as far as it agrees, the first records of
    // this export, and the rest follows them (the manifest still describes
    // the whole range).
    let mut resuming = true;
    let result: Result<bool, ClusterError> = async {
        let mut at = from;
        while at < end {
            if stopped() {
                return Ok(false);
            }
            let batches;
            (batches, at) = page(destination, &tp, at, end).await?;
            let mut records = Vec::new();
            for b in batches.iter().filter(|b| !b.is_control()) {
                let decoded =
                    decode_records(b).doing(|| format!("decode divergent records of {tp}"))?;
                for mut r in decoded.records {
                    let offset = b.base_offset() + r.offset_delta as i64;
                    if !(from..end).contains(&offset) {
                        continue;
                    }
                    producers.insert(b.producer_id());
                    min_ts = min_ts.min(r.timestamp);
                    max_ts = max_ts.max(r.timestamp);
                    resuming &= leftover.get(count) == Some(&offset);
                    count += 1;
                    if resuming {
                        continue;
                    }
                    r.headers.push((
                        Bytes::from_static(OFFSET_HEADER.as_bytes()),
                        Some(Bytes::from(offset.to_string())),
                    ));
                    r.headers.push((
                        Bytes::from_static(EXPORT_HEADER.as_bytes()),
                        Some(export_id.clone()),
                    ));
                    records.push(r);
                }
            }
            send(&mut *sink, &records)
                .await
                .doing(|| format!("export divergent records to {qtp}"))?;
        }
        let manifest = format!(
            "{{\"manifest\":\"{manifest_id}\",\"mirror\":\"{mirror}\",\"forward_mirror\":\"{forward}\",\"topic\":\"{topic}\",\"partition\":{p},\"start_offset\":{from},\"end_offset\":{end},\"count\":{count},\"producer_ids\":{producers:?},\"min_timestamp\":{},\"max_timestamp\":{}}}",
            if count > 0 { min_ts } else { -1 },
            if count > 0 { max_ts } else { -1 },
        );
        let manifest = manifest_record(
            Bytes::from_static(MANIFEST_KEY.as_bytes()),
            Bytes::from(manifest),
        );
        send(&mut *sink, &[manifest])
            .await
            .doing(|| format!("export divergent records to {qtp}"))?;
        Ok(true)
    }
    .await;
    sink.close().await;
    result
}

/// Bytes of divergent batches read at a time: the range is as long as the
/// old source went on taking writes, which only the operator bounds. (One
/// batch at a time in tests, so that paging is what they run.)
#[cfg(not(test))]
const PAGE_BYTES: usize = 4 << 20;
#[cfg(test)]
const PAGE_BYTES: usize = 1;

/// The batches of one page of `[at, end)`, and where the next page begins.
async fn page(
    destination: &dyn DestinationCluster,
    tp: &TopicPartition,
    at: i64,
    end: i64,
) -> Result<(Vec<RecordBatch>, i64), ClusterError> {
    let batches = destination
        .read_page(tp, at, end, PAGE_BYTES)
        .await
        .doing(|| format!("read {tp} from {at}"))?;
    match batches.last().map(|b| b.next_offset()) {
        Some(next) if next > at => Ok((batches, next)),
        _ => Err(ClusterError::new(
            format!("read {tp}"),
            KafkaError::Unknown(format!("no batch at offset {at} below {end}")),
        )),
    }
}

/// Produces `records` into the sink in batches of up to 500 and waits for
/// every acknowledgement.
async fn send(
    sink: &mut dyn PartitionSink,
    records: &[crate::kafka::batch::Record],
) -> Result<(), KafkaError> {
    let mut acks = Vec::new();
    for chunk in records.chunks(500) {
        let chunk: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| crate::kafka::batch::Record {
                offset_delta: i as i32,
                ..r.clone()
            })
            .collect();
        let batch = OutgoingBatch::new(
            encode_batch(&chunk, Codec::Lz4)?,
            chunk.len() as i32,
            SourceOffsets::Range {
                first: 0,
                last: chunk.len() as i64 - 1,
            },
        );
        acks.push(sink.send(batch).await?);
    }
    for a in acks {
        a.await?;
    }
    Ok(())
}

/// The manifest record that closes an export (stamped now).
fn manifest_record(key: Bytes, value: Bytes) -> crate::kafka::batch::Record {
    crate::kafka::batch::Record {
        offset_delta: 0,
        timestamp: crate::coordinator::now_ms(),
        key: Some(key),
        value: Some(value),
        headers: Vec::new(),
    }
}

/// How much of one export a quarantine partition already holds.
struct Exported {
    /// Manifests cover the divergent range up to here: the export goes on
    /// from it.
    from: i64,
    /// The original offsets of the records after the last manifest: an
    /// interrupted export's from `from`, or nothing. -1 for any other.
    leftover: Vec<i64>,
}

/// Reads the quarantine partition, page by page: how far from `start` the
/// manifests of `partition` (the manifest id up to the range) cover, and
/// what follows the last manifest. Quarantine topics are written only by
/// failbacks, so reading one whole is rare and bounded by what they wrote.
async fn exported(
    destination: &dyn DestinationCluster,
    tp: &TopicPartition,
    partition: &str,
    start: i64,
) -> Result<Exported, ClusterError> {
    let b = destination
        .bounds(tp)
        .await
        .doing(|| format!("offsets of {tp}"))?;
    let mut ranges = Vec::new();
    let mut since: Vec<(Option<Bytes>, Option<i64>)> = Vec::new();
    let mut at = b.log_start;
    while at < b.end {
        let batches;
        (batches, at) = page(destination, tp, at, b.end).await?;
        for batch in batches.iter().filter(|b| !b.is_control()) {
            let decoded = decode_records(batch).doing(|| format!("decode {tp}"))?;
            for r in decoded.records {
                if r.key.as_deref() == Some(MANIFEST_KEY.as_bytes()) {
                    let id = r.value.as_deref().and_then(manifest_id);
                    ranges.extend(id.and_then(|id| range_of(&id, partition)));
                    since.clear();
                    continue;
                }
                let export = header(&r, EXPORT_HEADER).map(Bytes::copy_from_slice);
                since.push((export, original_offset(&r)));
            }
        }
    }
    ranges.sort_unstable();
    let mut from = start;
    for (s, e) in ranges {
        if s <= from && e > from {
            from = e;
        }
    }
    // Another export's record, or one without a readable offset, is no
    // prefix of this one: -1 matches no divergent offset.
    let ours = format!("{partition}/{from}-");
    let leftover = since
        .into_iter()
        .map(|(export, offset)| {
            let is_ours = export.is_some_and(|e| e.starts_with(ours.as_bytes()));
            offset.filter(|_| is_ours).unwrap_or(-1)
        })
        .collect();
    Ok(Exported { from, leftover })
}

/// The `manifest` field of a manifest record's JSON value.
fn manifest_id(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let rest = text.split_once("\"manifest\":\"")?.1;
    Some(rest.split_once('"')?.0.to_string())
}

/// The range `[from, end)` manifest `id` covers, if it is one of
/// `partition`'s (`{partition}/{from}-{end}`).
fn range_of(id: &str, partition: &str) -> Option<(i64, i64)> {
    let (from, end) = id
        .strip_prefix(partition)?
        .strip_prefix('/')?
        .split_once('-')?;
    Some((from.parse().ok()?, end.parse().ok()?))
}

/// The value of a record's header `key`, if it has one.
fn header<'a>(r: &'a crate::kafka::batch::Record, key: &str) -> Option<&'a [u8]> {
    r.headers
        .iter()
        .find(|(k, _)| k.as_ref() == key.as_bytes())?
        .1
        .as_deref()
}

/// The offset a quarantined record had in its topic (`kmirror.offset`).
fn original_offset(r: &crate::kafka::batch::Record) -> Option<i64> {
    std::str::from_utf8(header(r, OFFSET_HEADER)?)
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use kmirror_events::FailbackMode;

    use super::*;
    use crate::cluster::memory::MemoryDestination;

    /// A quarantined copy of `orders`-0's record at `offset`, as export
    /// `id` writes it.
    fn quarantined(id: &str, offset: i64) -> crate::kafka::batch::Record {
        let mut r = crate::cluster::memory::record(Some("k"), Some(&format!("v{offset}")), 7);
        r.headers.push((
            Bytes::from_static(OFFSET_HEADER.as_bytes()),
            Some(Bytes::from(offset.to_string())),
        ));
        r.headers.push((
            Bytes::from_static(EXPORT_HEADER.as_bytes()),
            Some(Bytes::from(id.to_string())),
        ));
        r
    }

    #[actix::test]
    async fn an_export_interrupted_midway_is_finished_without_writing_a_record_twice() {
        let destination = MemoryDestination::new("A");
        let (tp, qtp) = (
            TopicPartition::new("orders", 0),
            TopicPartition::new("orders.q", 0),
        );
        for topic in ["orders", "orders.q"] {
            destination
                .create_topic(topic, 1, Vec::new())
                .await
                .unwrap();
        }
        for o in 0..1200 {
            destination.foreign_write(
                &tp,
                crate::cluster::memory::record(Some("k"), Some(&format!("v{o}")), 7),
            );
        }
        let plan = kmirror_events::FailbackPlan {
            forward_mirror: "ab".into(),
            mode: FailbackMode::Delta,
            destination_position: 200,
            source_position: 180,
            divergent_start: 200,
            divergent_end: 1200,
            copy_start: 180,
            copy_end: 180,
            quarantine_topic: Some("orders.q".into()),
            reason: None,
        };
        // An earlier failback's export of the same range of the topic's
        // old incarnation (before it was re-created), whole, named as
        // exports were before the name held the topic id; then the first
        // 500 records of this export, written before the daemon died.
        let dest: &dyn DestinationCluster = &destination;
        let topics = dest.topics().await.unwrap();
        let topic_id = topics.iter().find(|t| t.name == "orders").unwrap().topic_id;
        let id = format!("orders/{topic_id}/0/200-1200");
        destination.foreign_write(&qtp, quarantined("orders/0/3-4", 3));
        destination.foreign_write(
            &qtp,
            manifest_record(
                Bytes::from_static(MANIFEST_KEY.as_bytes()),
                Bytes::from_static(b"{\"manifest\":\"orders/0/200-1200\"}"),
            ),
        );
        for o in 200..700 {
            destination.foreign_write(&qtp, quarantined(&id, o));
        }
        let go = AtomicBool::new(false);
        let run = |plan| export(&destination, "ba", "ab", "orders", 0, "orders.q", plan, &go);
        run(&plan).await.unwrap();
        let offsets = |d: &MemoryDestination| -> Vec<Option<i64>> {
            d.records(&qtp)
                .iter()
                .map(|r| original_offset(&r.record))
                .collect()
        };
        let written = offsets(&destination);
        let expected: Vec<Option<i64>> = [Some(3), None]
            .into_iter()
            .chain((200..1200).map(Some))
            .chain([None])
            .collect();
        assert_eq!(written, expected, "each divergent record exported once");
        let last = destination.records(&qtp).pop().unwrap().record;
        let manifest = String::from_utf8(last.value.unwrap().to_vec()).unwrap();
        assert!(
            manifest.contains("/0/200-1200\"")
                && !manifest.contains("AAAAAAAAAAAAAAAAAAAAAA")
                && manifest.contains("\"count\":1000"),
            "{manifest}"
        );
        // Run again (a crash after the manifest): nothing more.
        run(&plan).await.unwrap();
        assert_eq!(offsets(&destination), expected);

        // The old source took more writes before the next attempt: the
        // range grew to 1500. Only its new part is exported, under a
        // manifest of its own; cut off after 100 records and asked again
        // with a range grown further (1600), it resumes after them.
        for o in 1200..1600 {
            destination.foreign_write(
                &tp,
                crate::cluster::memory::record(Some("k"), Some(&format!("v{o}")), 7),
            );
        }
        for o in 1200..1300 {
            destination.foreign_write(
                &qtp,
                quarantined(&format!("orders/{topic_id}/0/1200-1500"), o),
            );
        }
        let grown = kmirror_events::FailbackPlan {
            divergent_end: 1600,
            ..plan.clone()
        };
        run(&grown).await.unwrap();
        let expected: Vec<Option<i64>> = expected
            .into_iter()
            .chain((1200..1600).map(Some))
            .chain([None])
            .collect();
        assert_eq!(offsets(&destination), expected, "nothing exported twice");
        let last = destination.records(&qtp).pop().unwrap().record;
        let manifest = String::from_utf8(last.value.unwrap().to_vec()).unwrap();
        assert!(
            manifest.contains(&format!("\"orders/{topic_id}/0/1200-1600\""))
                && manifest.contains("\"start_offset\":1200")
                && manifest.contains("\"count\":400"),
            "{manifest}"
        );
        run(&grown).await.unwrap();
        assert_eq!(offsets(&destination), expected);
    }

    #[test]
    fn a_manifest_covers_only_its_own_partition_s_range() {
        let id = |v: &str| manifest_id(v.as_bytes());
        assert_eq!(
            id("{\"manifest\":\"t/AAA/1/5-9\",\"mirror\":\"m\"}").as_deref(),
            Some("t/AAA/1/5-9")
        );
        assert_eq!(id("not json"), None);
        assert_eq!(range_of("t/AAA/1/5-9", "t/AAA/1"), Some((5, 9)));
        assert_eq!(range_of("t/AAA/11/5-9", "t/AAA/1"), None);
        assert_eq!(range_of("t/1/5-9", "t/AAA/1"), None);
        assert_eq!(range_of("t/AAA/1/x-9", "t/AAA/1"), None);
    }
}
