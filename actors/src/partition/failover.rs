//! What a failover leaves behind on the source, per partition: the report
//! STOPPING records (`FailoverReport`) after LastMirrorEpochs and before
//! STOPPED, and what `stop --dry-run` computes without recording. Reading
//! the source is bounded in time and in bytes: a failover never waits on,
//! or fails because of, a source that is gone — the report then says the
//! source could not be read, and why.

use std::future::Future;
use std::time::Duration;

use kmirror_events::{FailoverReport, MirrorPartitionKey, Unmirrored};

use super::context::Progress;
use crate::cluster::{BatchHeader, DestinationCluster, LogBounds, SourceCluster, TopicInfo};
use crate::kafka::fetch::TopicPartition;

/// How long reading what was not mirrored may take, in all.
pub const SOURCE_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Batch bytes read at most to size the unmirrored range; a larger range
/// is reported as "at least" what was read.
pub const MAX_SCAN_BYTES: usize = 64 << 20;

/// The partition's failover report for a copy standing at `position`
/// (LastMirrorEpochs' figures): what the source holds beyond it, or why
/// that could not be read.
pub async fn report(
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    position: &Progress,
) -> FailoverReport {
    let read = tokio::time::timeout(
        SOURCE_READ_TIMEOUT,
        scan(key, tp, source, destination, position, MAX_SCAN_BYTES),
    )
    .await;
    let (unmirrored, source_error) = match read {
        Ok(Ok(s)) => (Some(s.unmirrored), None),
        Ok(Err(e)) => (None, Some(e)),
        Err(_) => (
            None,
            Some(format!(
                "the source did not answer within {} s",
                SOURCE_READ_TIMEOUT.as_secs()
            )),
        ),
    };
    FailoverReport {
        source_offset: position.source_offset,
        source_leader_epoch: position.source_leader_epoch,
        destination_end_offset: position.destination_offset,
        destination_leader_epoch: position.destination_leader_epoch,
        unmirrored,
        source_error,
    }
}

/// Runs a partition's final group-offset pass (`sync`, answering whether it
/// ran to its end) beside its report. Both need the source: a report that
/// could not read it ends the wait for the pass too, so a source that is
/// gone holds a failover up only for [`SOURCE_READ_TIMEOUT`]. Answers the
/// report and whether the pass ended; if not, the caller aborts it.
pub async fn beside_final_sync(
    report: impl Future<Output = FailoverReport>,
    sync: impl Future<Output = bool>,
) -> (FailoverReport, bool) {
    tokio::pin!(report, sync);
    let mut synced = None;
    loop {
        tokio::select! {
            ended = &mut sync, if synced.is_none() => synced = Some(ended),
            r = &mut report => {
                let synced = match synced {
                    Some(ended) => ended,
                    None if r.unmirrored.is_some() => sync.await,
                    None => false,
                };
                return (r, synced);
            }
        }
    }
}

/// The newest timestamp of `batches`: of data batches, or of markers when
/// there is nothing else (`None` without any timestamp).
fn newest_timestamp(batches: &[BatchHeader]) -> Option<i64> {
    let newest = |data: bool| {
        batches
            .iter()
            .filter(|b| !data || !b.is_control)
            .map(|b| b.max_timestamp)
            .filter(|t| *t >= 0)
            .max()
    };
    newest(true).or_else(|| newest(false))
}

/// What one read of the source found beyond a position: the failover
/// report's figures, and what the retention alarm needs besides.
#[derive(Clone, Debug)]
pub struct Scan {
    pub unmirrored: Unmirrored,
    pub log_start: i64,
    /// Newest timestamp of the first unmirrored data batch (None: nothing
    /// unmirrored, or below the log start).
    pub oldest_unmirrored_timestamp: Option<i64>,
    /// Records in the batches read (the whole range unless capped): with
    /// `unmirrored.bytes`, the source's bytes per record.
    pub scanned_records: i64,
}

/// Reads what the source holds beyond `position`: its bounds, then batch
/// headers up to `max_bytes` (beyond which bytes are "at least"). Unbounded
/// in time: callers put it under their own timeout.
pub async fn scan(
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    position: &Progress,
    max_bytes: usize,
) -> Result<Scan, String> {
    let topics = source
        .topics()
        .await
        .map_err(|e| format!("describe source topics: {e}"))?;
    check_topic(key, tp, &topics)?;
    let bounds = source
        .bounds(tp)
        .await
        .map_err(|e| format!("source offsets: {e}"))?;
    scan_from(tp, source, destination, position, max_bytes, bounds).await
}

/// The source topic is still the one the mirror copied: neither deleted
/// nor re-created under the same name.
pub fn check_topic(
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    topics: &[TopicInfo],
) -> Result<(), String> {
    match topics.iter().find(|t| *t.name == *tp.topic) {
        None => Err(format!("source topic {} no longer exists", tp.topic)),
        Some(t) if t.topic_id != key.topic_id => Err(format!(
            "source topic {} was re-created (topic id {}; the mirror copied {}): its records are another topic's",
            tp.topic, t.topic_id, key.topic_id
        )),
        Some(_) => Ok(()),
    }
}

/// [`scan`] once the topic is checked and its bounds are read (the risk
/// sample reads both for many partitions at once).
pub async fn scan_from(
    tp: &TopicPartition,
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    position: &Progress,
    max_bytes: usize,
    bounds: LogBounds,
) -> Result<Scan, String> {
    let records = (bounds.end - position.source_offset).max(0);
    if records == 0 {
        return Ok(Scan {
            unmirrored: Unmirrored {
                source_high_watermark: bounds.end,
                records: 0,
                bytes: 0,
                bytes_at_least: false,
                behind_ms: 0,
            },
            log_start: bounds.log_start,
            oldest_unmirrored_timestamp: None,
            scanned_records: 0,
        });
    }
    let read = |from: i64, max_bytes: usize| async move {
        source
            .batch_headers(tp, from, bounds.end, max_bytes)
            .await
            .map_err(|e| format!("read source batch headers: {e}"))
    };
    // Records below the log start are gone (retention): counted, no bytes.
    let from = position.source_offset.max(bounds.log_start);
    let scanned = read(from, max_bytes).await?;
    let scanned_records = scanned
        .batches
        .last()
        .map_or(0, |b| (b.next_offset.min(bounds.end) - from).max(0));
    let bytes = scanned.batches.iter().map(|b| b.size as i64).sum();
    let oldest_unmirrored_timestamp = scanned
        .batches
        .iter()
        .find(|b| !b.is_control && b.max_timestamp >= 0)
        .map(|b| b.max_timestamp);
    let mut newest = newest_timestamp(&scanned.batches);
    if scanned.capped {
        // The newest records sit just below the high watermark.
        newest = newest.max(newest_timestamp(&read(bounds.end - 1, 1).await?.batches));
    }
    let mirrored = if position.newest_mirrored_timestamp > 0 {
        Some(position.newest_mirrored_timestamp)
    } else {
        // No copy ran in this process: the destination's last batch holds
        // the newest mirrored record.
        let end = position.destination_offset;
        if end > 0 {
            destination
                .batch_headers(tp, end - 1, end, 1)
                .await
                .ok()
                .and_then(|h| newest_timestamp(&h.batches))
        } else {
            None
        }
    };
    let behind_ms = match (newest, mirrored) {
        (Some(n), Some(m)) => (n - m).max(0),
        _ => -1,
    };
    Ok(Scan {
        unmirrored: Unmirrored {
            source_high_watermark: bounds.end,
            records,
            bytes,
            bytes_at_least: scanned.capped,
            behind_ms,
        },
        log_start: bounds.log_start,
        oldest_unmirrored_timestamp,
        scanned_records,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    fn report(reachable: bool) -> FailoverReport {
        FailoverReport {
            source_offset: 5,
            source_leader_epoch: 0,
            destination_end_offset: 5,
            destination_leader_epoch: 0,
            unmirrored: reachable.then_some(Unmirrored {
                source_high_watermark: 5,
                records: 0,
                bytes: 0,
                bytes_at_least: false,
                behind_ms: 0,
            }),
            source_error: (!reachable).then(|| "unreachable".into()),
        }
    }

    #[tokio::test]
    async fn the_final_sync_is_awaited_unless_the_source_cannot_be_read() {
        let synced = AtomicBool::new(false);
        let slow_sync = || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            synced.store(true, Ordering::SeqCst);
            true
        };
        let (r, ended) = beside_final_sync(async { report(true) }, slow_sync()).await;
        assert!(r.unmirrored.is_some() && ended && synced.load(Ordering::SeqCst));

        let (r, ended) = beside_final_sync(async { report(false) }, std::future::pending()).await;
        assert!(
            r.unmirrored.is_none() && !ended,
            "a source that is gone holds nothing up, and the pass is left to abort"
        );
    }
}
