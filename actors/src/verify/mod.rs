//! `kmirror verify`: proof that the copy equals the source. Both clusters
//! are read as a `read_committed` consumer is served, the source's records
//! are translated through the partition's exact offset map, and every
//! record (or a seeded sample) is compared field by field with the one at
//! its destination offset (`compare`, pure).
//!
//! It only reads: nothing here writes to either cluster or to the log. The
//! background check records its result afterwards (`VerifyResult`).
//! Reading is bounded: in bytes per read ([`CHUNK_BYTES`]), and in time by
//! the request's deadline, on top of every broker call's own timeout.

pub mod compare;

use std::collections::BTreeMap;
use std::time::Duration;

use actix::Addr;
use kmirror_events::{Command, MirrorPartitionKey, OffsetMap, VerifyResult};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

pub use compare::Tally;
pub use kmirror_events::VerifyDifference;

use crate::cluster::{DestinationCluster, SourceCluster};
use crate::coordinator::{now_ms, CoordinatorActor, Execute, ReadImage};
use crate::kafka::fetch::TopicPartition;
use crate::spread::Followed;

/// Batch bytes read from the source per step of a full comparison.
pub const CHUNK_BYTES: usize = 4 << 20;
/// How long a verify may take unless the request says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// What to verify. Every field may be left out of the JSON body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyRequest {
    /// Topic names of the mirror; empty: every topic.
    pub topics: Vec<String>,
    /// Compare source offsets below this one only (an end offset, like a
    /// high watermark). Always capped at what the map records as copied.
    pub through: Option<i64>,
    /// Compare `sample` records per partition, drawn with `seed`, instead
    /// of every record.
    pub sample: Option<u64>,
    pub seed: u64,
    pub timeout_ms: Option<u64>,
}

/// One partition's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionVerify {
    pub topic: String,
    pub partition: i32,
    /// The source range looked at: `[from, through)`.
    pub from: i64,
    pub through: i64,
    #[serde(flatten)]
    pub tally: Tally,
    /// Why the comparison could not finish (the counts say how far it got).
    pub error: Option<String>,
}

/// The answer of `POST /mirrors/{name}/verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub mirror: String,
    /// No difference and no partition that could not be read.
    pub equal: bool,
    pub sample: Option<u64>,
    pub seed: u64,
    pub compared: u64,
    pub differences: u64,
    pub skipped: u64,
    pub partitions: Vec<PartitionVerify>,
}

impl VerifyReport {
    pub fn new(mirror: &str, request: &VerifyRequest, partitions: Vec<PartitionVerify>) -> Self {
        let sum = |f: fn(&Tally) -> u64| partitions.iter().map(|p| f(&p.tally)).sum();
        VerifyReport {
            mirror: mirror.to_string(),
            equal: partitions
                .iter()
                .all(|p| p.tally.differences == 0 && p.error.is_none()),
            sample: request.sample,
            seed: request.seed,
            compared: sum(|t| t.compared),
            differences: sum(|t| t.differences),
            skipped: sum(|t| t.skipped),
            partitions,
        }
    }

    /// The first partition (in topic, partition order) with a difference.
    pub fn first_difference(&self) -> Option<(&PartitionVerify, &VerifyDifference)> {
        self.partitions
            .iter()
            .find_map(|p| Some((p, p.tally.first_difference.as_ref()?)))
    }
}

/// Verifies one partition against its map, by `deadline`.
pub async fn partition(
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    tp: &TopicPartition,
    map: &OffsetMap,
    request: &VerifyRequest,
    deadline: Instant,
) -> PartitionVerify {
    let mut out = PartitionVerify {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        from: 0,
        through: 0,
        tally: Tally::default(),
        error: None,
    };
    let run = async {
        let source_start = source
            .bounds(tp)
            .await
            .map_err(|e| format!("source offsets: {e}"))?
            .log_start;
        let destination_start = destination
            .bounds(tp)
            .await
            .map_err(|e| format!("destination offsets: {e}"))?
            .log_start;
        let (Some(first), Some(last)) = (map.runs().next(), map.last_run()) else {
            return Ok(());
        };
        out.from = first.source_start.max(source_start);
        out.through = last.source_end().min(request.through.unwrap_or(i64::MAX));
        let side = Sides {
            source,
            destination,
            tp,
            map,
            destination_start,
        };
        match request.sample {
            Some(n) => {
                let seed = compare::partition_seed(request.seed, &tp.topic, tp.partition);
                // One fetch serves every sampled offset it holds.
                let offsets = compare::sample_offsets(map, out.from, out.through, n, seed);
                let mut i = 0;
                while let Some(&at) = offsets.get(i) {
                    let (tally, next) = side.range(at, out.through, Some(&offsets[i..]), 1).await?;
                    out.tally.add(tally);
                    while offsets.get(i).is_some_and(|o| *o < next.max(at + 1)) {
                        i += 1;
                    }
                }
            }
            None => {
                let mut at = out.from;
                while at < out.through {
                    let (tally, next) = side.range(at, out.through, None, CHUNK_BYTES).await?;
                    out.tally.add(tally);
                    if next <= at {
                        return Err(format!(
                            "the source serves nothing committed at offset {at} (an open transaction?)"
                        ));
                    }
                    at = next;
                }
            }
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => out.error = Some(e),
        Err(_) => {
            out.error = Some("the verify's deadline passed before this partition was done".into())
        }
    }
    out
}

/// Records per partition the background check compares each time.
pub const BACKGROUND_SAMPLE: u64 = 100;
/// How often the background check rereads `mirror.verify.interval.ms`.
const BACKGROUND_POLL: Duration = Duration::from_secs(1);

/// The background check of one mirror, for as long as its MirrorActor
/// runs (it is spawned in the actor's context, so it stops with it): every
/// `mirror.verify.interval.ms` (read from the image each poll, so an alter
/// takes effect), a seeded sample of every partition with a map, each
/// partition's result recorded as a `VerifyResult` after its reads. The
/// seed is the check's wall-clock start, so `kmirror verify --sample 100
/// --seed S` repeats a check exactly.
///
/// Each shard checks the partitions whose maps it holds: a spread
/// mirror's host (`hosted`: the shards it follows) reads the mirror and
/// its topics where they are coordinated, once that shard was read to its
/// end, and checks and records only the partitions placed with it — no
/// node reads another's maps, and every partition is checked somewhere.
pub async fn background(
    mirror: String,
    source: std::sync::Arc<dyn SourceCluster>,
    destination: std::sync::Arc<dyn DestinationCluster>,
    coordinator: Addr<CoordinatorActor>,
    hosted: Option<Followed>,
) {
    let mut last: Option<Instant> = None;
    loop {
        tokio::time::sleep(BACKGROUND_POLL).await;
        let coordinated = match &hosted {
            Some(followed) => match followed.coordinator_of(&mirror) {
                Some(shard) if shard.caught_up() => Some(shard),
                _ => continue,
            },
            None => None,
        };
        // A host reads its own image only when a check is due: a read
        // every poll would cut its coordinator's lazy batching short.
        let own = match coordinated {
            Some(_) => None,
            None => match coordinator.send(ReadImage).await {
                Ok(image) => Some(image),
                Err(_) => return,
            },
        };
        let Some(topics) = coordinated.as_deref().map(|s| &s.image).or(own.as_deref()) else {
            return;
        };
        let Some(config) = topics.mirror(&mirror) else {
            // A host waits: a mirror deleted and made again under its name
            // may keep this host (its actor stops otherwise, and this with it).
            if hosted.is_some() {
                continue;
            }
            return;
        };
        let Ok(Some(every)) = kmirror_events::verify_interval(config) else {
            last = None;
            continue;
        };
        if last.is_some_and(|t| t.elapsed() < every) {
            continue;
        }
        last = Some(Instant::now());
        let request = VerifyRequest {
            sample: Some(BACKGROUND_SAMPLE),
            seed: now_ms() as u64,
            ..VerifyRequest::default()
        };
        // Checks never overlap: the next starts an interval after this one
        // started, or when it ends if it took longer.
        let deadline = Instant::now() + DEFAULT_TIMEOUT;
        let mut topics: Vec<_> = topics
            .topics_of(&mirror)
            .map(|e| e.change.clone())
            .collect();
        topics.sort_by(|a, b| a.topic_name.cmp(&b.topic_name));
        let image = match own {
            Some(image) => image,
            None => match coordinator.send(ReadImage).await {
                Ok(image) => image,
                Err(_) => return,
            },
        };
        for t in topics {
            for p in 0..t.partition_count {
                let key = MirrorPartitionKey::new(mirror.as_str(), t.topic_id, p);
                let map = image.offset_map(&key);
                if map.is_empty() {
                    continue;
                }
                let tp = TopicPartition::new(&t.topic_name, p);
                let v = partition(
                    source.as_ref(),
                    destination.as_ref(),
                    &tp,
                    map,
                    &request,
                    deadline,
                )
                .await;
                let value = VerifyResult {
                    verified_at_ms: now_ms(),
                    sample: BACKGROUND_SAMPLE,
                    seed: request.seed,
                    from: v.from,
                    through: v.through,
                    compared: v.tally.compared,
                    equal: v.tally.equal,
                    skipped: v.tally.skipped,
                    differences: v.tally.differences,
                    first_difference: v.tally.first_difference,
                    error: v.error,
                };
                if value.differences > 0 {
                    tracing::warn!(%mirror, topic = %t.topic_name, partition = p, first = ?value.first_difference, "background verify found a difference");
                }
                let recorded = coordinator
                    .send(Execute::new(Command::RecordVerifyResult { key, value }))
                    .await;
                if !matches!(recorded, Ok(Ok(_))) {
                    // The partition or the mirror went away meanwhile, or
                    // the coordinator stops: the next check starts afresh.
                    tracing::debug!(%mirror, topic = %t.topic_name, partition = p, "verify result not recorded");
                }
            }
        }
    }
}

/// Both sides of one partition.
struct Sides<'a> {
    source: &'a dyn SourceCluster,
    destination: &'a dyn DestinationCluster,
    tp: &'a TopicPartition,
    map: &'a OffsetMap,
    destination_start: i64,
}

impl Sides<'_> {
    /// Compares the source records of `[from, to)` read in one step of at
    /// most `max_bytes` (at least one fetch), or only those at the sorted
    /// offsets `only`; answers where the next step starts.
    async fn range(
        &self,
        from: i64,
        to: i64,
        only: Option<&[i64]>,
        max_bytes: usize,
    ) -> Result<(Tally, i64), String> {
        let read = self
            .source
            .read_committed(self.tp, from, to, max_bytes)
            .await
            .map_err(|e| format!("read source at {from}: {e}"))?;
        let source = compare::forwarded_records(
            &read.batches,
            &read.aborted_transactions,
            from,
            read.next_offset,
        )
        .map_err(|e| format!("decode source at {from}: {e}"))?;
        let source: Vec<_> = match only {
            Some(only) => source
                .into_iter()
                .filter(|l| only.binary_search(&l.offset).is_ok())
                .collect(),
            None => source,
        };
        let landed = compare::destination_offsets(self.map, &source);
        let readable = landed
            .iter()
            .flatten()
            .filter(|d| **d >= self.destination_start);
        let (low, high) = (readable.clone().min(), readable.max());
        let mut destination = BTreeMap::new();
        if let (Some(&low), Some(&high)) = (low, high) {
            let read = self
                .destination
                .read_committed(self.tp, low, high + 1, usize::MAX)
                .await
                .map_err(|e| format!("read destination at {low}: {e}"))?;
            for l in
                compare::forwarded_records(&read.batches, &read.aborted_transactions, low, high + 1)
                    .map_err(|e| format!("decode destination at {low}: {e}"))?
            {
                destination.insert(l.offset, l);
            }
        }
        let tally = compare::compare(self.map, self.destination_start, &source, &destination);
        Ok((tally, read.next_offset))
    }
}
