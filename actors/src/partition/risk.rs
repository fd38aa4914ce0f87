//! RPO now and the retention race, per partition: what a failover at this
//! instant would lose, and how soon the source's retention deletes what is
//! not mirrored yet. A running copy's fetches keep its high watermark
//! fresh, but a PAUSED, FAILED, aligning or retrying partition fetches
//! nothing, so every partition samples the source on its own, every
//! `mirror.risk.refresh.interval.ms`: the same bounded read as the failover
//! report ([`failover::scan`]), with a smaller byte cap, under a timeout.
//! The partitions of a mirror tick together (on multiples of the interval)
//! and read the source's metadata, log bounds and retention configs through
//! one [`RiskReads`], batched: at 10 000 partitions, one sample each cost a
//! metadata request and two ListOffsets per partition per interval. A copy
//! that is fetching and caught up reads nothing between the minutely reads
//! ([`Risk::caught_up`]): its own fetches say all a sample would.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::Addr;
use kmirror_events::{
    retention_margin, FailoverReport, MirrorPartitionKey, PartitionState, RetentionInputs,
    RiskSettings, Unmirrored,
};

use super::context::Progress;
use super::failover::{self, Scan};
use super::position;
use crate::cluster::{DestinationCluster, LogBounds, SourceCluster, TopicInfo, RECENT_TOPICS_AGE};
use crate::coordinator::{now_ms, CoordinatorActor};
use crate::kafka::fetch::TopicPartition;

/// Batch bytes a periodic sample reads at most; beyond, bytes are "at least".
pub const SAMPLE_SCAN_BYTES: usize = 1 << 20;
/// The cap while the copy is fetching: it reads the same range anyway, and
/// the sample must cost little beside it (the margin extrapolates).
pub const FETCHING_SCAN_BYTES: usize = 64 << 10;
/// How long a sample may take, reads of both clusters included.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The produce rate is measured over at least this long, once possible.
const RATE_WINDOW: Duration = Duration::from_secs(10);
/// How long the source topic's retention configs are reused.
const CONFIG_TTL: Duration = Duration::from_secs(60);
/// How long a caught-up copy's figures are taken from its own fetches
/// ([`Risk::caught_up`]) before the source is read again.
const FULL_SAMPLE_AGE: Duration = Duration::from_secs(60);
/// How long the first read of a batch waits for the others to join it:
/// partitions that tick together arrive within a few milliseconds.
const BATCH_WINDOW: Duration = Duration::from_millis(50);
/// Kafka's default `retention.ms` (7 days), for a cluster that does not
/// say (the in-memory ones; Kafka itself answers the value in force).
const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;

/// The figures describe and metrics show, under the JSON field names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RiskView {
    /// Records a failover now would lose (−1 not measured yet).
    pub at_risk_records: i64,
    /// Their bytes in the source log (−1 not measured yet).
    pub at_risk_bytes: i64,
    /// `at_risk_bytes` is a lower bound: the read was capped.
    pub at_risk_bytes_at_least: bool,
    /// Newest source timestamp − newest mirrored one (−1 unknown).
    pub at_risk_seconds: f64,
    /// Mirrored position − source log start (negative: a gap already; 0
    /// also when not measured).
    pub retention_margin_records: i64,
    /// Estimated ms until retention deletes an unmirrored record (−1
    /// unknown, or no deletion ahead).
    pub retention_margin_ms: i64,
    pub retention_warning: bool,
}

impl RiskView {
    const UNKNOWN: RiskView = RiskView {
        at_risk_records: -1,
        at_risk_bytes: -1,
        at_risk_bytes_at_least: false,
        at_risk_seconds: -1.0,
        retention_margin_records: 0,
        retention_margin_ms: -1,
        retention_warning: false,
    };

    /// A STOPPED partition's figures: what its failover report recorded.
    pub fn stopped(report: Option<&FailoverReport>) -> RiskView {
        let Some(u) = report.and_then(|r| r.unmirrored.as_ref()) else {
            return RiskView::UNKNOWN;
        };
        RiskView {
            at_risk_records: u.records,
            at_risk_bytes: u.bytes,
            at_risk_bytes_at_least: u.bytes_at_least,
            at_risk_seconds: seconds(u.behind_ms),
            ..RiskView::UNKNOWN
        }
    }
}

fn seconds(ms: i64) -> f64 {
    if ms < 0 {
        -1.0
    } else {
        ms as f64 / 1000.0
    }
}

/// `retention.ms` and `retention.bytes` of a source topic (None: unlimited).
type Retention = (Option<i64>, Option<i64>);

/// One read of the source, and what it was measured against.
#[derive(Clone, Debug)]
struct Sample {
    scan: Scan,
    /// `retention.ms` / `retention.bytes` of the source topic.
    retention: Retention,
    /// Bytes per second the source partition grows by, over the last
    /// [`RATE_WINDOW`].
    produce_bytes_per_second: Option<f64>,
}

#[derive(Default)]
struct Shared {
    sample: Option<Sample>,
    /// Where a copy that has not run in this process stands (read once
    /// from the map and the destination: it does not move without a pump).
    still: Option<Progress>,
    /// When the source was last read for `sample` (not taken from the
    /// copy's own fetches).
    read_at: Option<Instant>,
    /// The warning has been logged and not cleared since.
    warned: bool,
    /// (when, high watermark) of the samples of the last [`RATE_WINDOW`],
    /// oldest first: the produce rate is measured across them.
    rate_points: VecDeque<(Instant, i64)>,
}

/// A partition's sampler: `tick` reads, `view` answers. Cloned into the
/// sampling task; one sample at a time.
#[derive(Clone)]
pub struct Risk {
    shared: Arc<Mutex<Shared>>,
    busy: Arc<AtomicBool>,
    reads: RiskReads,
    pub settings: RiskSettings,
}

impl Risk {
    pub fn new(settings: RiskSettings, reads: RiskReads) -> Self {
        Risk {
            shared: Arc::default(),
            busy: Arc::default(),
            reads,
            settings,
        }
    }

    /// How long until the next multiple of the refresh interval (epoch
    /// time): every partition of a mirror ticks then, so their reads meet
    /// in one batch.
    pub fn until_next_tick(&self) -> Duration {
        let every = self.settings.refresh_interval.as_millis().max(1) as i64;
        Duration::from_millis((every - now_ms().rem_euclid(every)) as u64)
    }

    /// A pump is starting: its progress is the position from now on.
    pub fn forget_position(&self) {
        self.shared.lock().unwrap().still = None;
    }

    /// The figures now. A copy that is fetching (MIRRORING) has a fresh
    /// high watermark of its own; every other state counts from the sample.
    pub fn view(&self, state: PartitionState, progress: &Progress, ran: bool) -> RiskView {
        let shared = self.shared.lock().unwrap();
        let position = if ran {
            progress.source_offset
        } else {
            match &shared.still {
                Some(p) => p.source_offset,
                None => return RiskView::UNKNOWN,
            }
        };
        let Some(s) = &shared.sample else {
            return RiskView::UNKNOWN;
        };
        view_of(
            s,
            state,
            progress,
            position,
            now_ms(),
            self.settings.retention_margin,
        )
    }

    /// Takes one sample unless one is under way; logs the retention warning
    /// once when it starts. The position is `progress` when a pump ran here
    /// (`ran`), else read once from the map and the destination.
    #[allow(clippy::too_many_arguments)]
    pub async fn tick(
        self,
        key: MirrorPartitionKey,
        tp: TopicPartition,
        source: Arc<dyn SourceCluster>,
        destination: Arc<dyn DestinationCluster>,
        coordinator: Addr<CoordinatorActor>,
        state: PartitionState,
        progress: Progress,
        ran: bool,
    ) {
        if state == PartitionState::Stopped || self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let cap = if state == PartitionState::Mirroring {
            FETCHING_SCAN_BYTES
        } else {
            SAMPLE_SCAN_BYTES
        };
        let work = self.sample(
            &key,
            &tp,
            &*source,
            &*destination,
            &coordinator,
            &progress,
            ran,
            cap,
        );
        match tokio::time::timeout(SAMPLE_TIMEOUT, work).await {
            Ok(Ok(())) => {
                let view = self.view(state, &progress, ran);
                let mut shared = self.shared.lock().unwrap();
                if view.retention_warning && !shared.warned {
                    tracing::warn!(
                        partition = %tp,
                        retention_margin_records = view.retention_margin_records,
                        retention_margin_ms = view.retention_margin_ms,
                        at_risk_records = view.at_risk_records,
                        "the source's retention is about to delete records not mirrored yet"
                    );
                }
                // Cleared only well clear of the threshold, so an estimate
                // hovering around it does not log again and again.
                let threshold = self.settings.retention_margin.as_millis() as i64;
                if view.retention_warning {
                    shared.warned = true;
                } else if view.retention_margin_ms < 0 || view.retention_margin_ms >= 2 * threshold
                {
                    shared.warned = false;
                }
            }
            Ok(Err(e)) => tracing::debug!(partition = %tp, error = %e, "risk sample failed"),
            Err(_) => tracing::debug!(partition = %tp, "risk sample timed out"),
        }
        self.busy.store(false, Ordering::SeqCst);
    }

    #[allow(clippy::too_many_arguments)]
    async fn sample(
        &self,
        key: &MirrorPartitionKey,
        tp: &TopicPartition,
        source: &dyn SourceCluster,
        destination: &dyn DestinationCluster,
        coordinator: &Addr<CoordinatorActor>,
        progress: &Progress,
        ran: bool,
        max_bytes: usize,
    ) -> Result<(), String> {
        let position = if ran {
            progress.clone()
        } else {
            let still = self.shared.lock().unwrap().still.clone();
            match still {
                Some(p) => p,
                None => {
                    let p = Box::pin(position::stopped_position(
                        key,
                        tp,
                        source,
                        destination,
                        coordinator,
                    ))
                    .await?
                    .progress;
                    self.shared.lock().unwrap().still = Some(p.clone());
                    p
                }
            }
        };
        let now = self.reads.read(tp.clone()).await?;
        failover::check_topic(key, tp, &now.topics)?;
        // The partitions tick together: their scans, each reading up to
        // `max_bytes` of batches outside the memory budget, take turns.
        // Boxed, as the position read above: every partition waits for
        // the batched read and for its turn at once, and a sample's task
        // should not carry a scan's state while it does.
        let scan = {
            let _turn = self.reads.scans.acquire().await;
            let bounds = now.bounds?;
            Box::pin(failover::scan_from(
                tp,
                source,
                destination,
                &position,
                max_bytes,
                bounds,
            ))
            .await?
        };
        let retention = now.retention?;
        let mut shared = self.shared.lock().unwrap();
        shared.read_at = Some(Instant::now());
        shared.keep(scan, retention);
        Ok(())
    }

    /// A copy that is fetching and has caught up knows what a sample would
    /// read: its fetches bring the high watermark and the log start, and
    /// nothing is unmirrored to scan. Most of 10 000 idle partitions are
    /// such; each read of the source for all of them cost a metadata
    /// request and two ListOffsets for every partition per interval. Still
    /// read every [`FULL_SAMPLE_AGE`] (the retention configs, the topic's
    /// identity). True if it took the sample so; false: read the source.
    pub fn caught_up(&self, progress: &Progress) -> bool {
        let Some(log_start) = progress.source_log_start else {
            return false;
        };
        if progress.lag() > 0 || self.busy.load(Ordering::SeqCst) {
            return false;
        }
        let mut shared = self.shared.lock().unwrap();
        let read_lately = shared
            .read_at
            .is_some_and(|at| at.elapsed() < FULL_SAMPLE_AGE);
        let retention = match &shared.sample {
            Some(s) if read_lately => s.retention,
            _ => return false,
        };
        let hw = progress.source_high_watermark;
        let scan = Scan {
            unmirrored: Unmirrored {
                source_high_watermark: hw,
                records: 0,
                bytes: 0,
                bytes_at_least: false,
                behind_ms: 0,
            },
            log_start,
            oldest_unmirrored_timestamp: None,
            scanned_records: 0,
        };
        shared.keep(scan, retention);
        true
    }
}

impl Shared {
    /// Keeps a sample, and measures the produce rate with it.
    fn keep(&mut self, scan: Scan, retention: Retention) {
        let at = Instant::now();
        // The rate over the last RATE_WINDOW, not between two samples: a
        // producer's bursts would make the alarm flicker.
        let hw = scan.unmirrored.source_high_watermark;
        if self.rate_points.back().is_some_and(|(_, h)| *h > hw) {
            self.rate_points.clear(); // the source was truncated: start over
        }
        while self.rate_points.len() > 1 && at.duration_since(self.rate_points[1].0) >= RATE_WINDOW
        {
            self.rate_points.pop_front();
        }
        let per_record = bytes_per_record(&scan)
            .or_else(|| self.sample.as_ref().and_then(|p| bytes_per_record(&p.scan)));
        let produce_bytes_per_second = match (self.rate_points.front(), per_record) {
            (Some(&(since, from)), Some(per)) if at > since => {
                Some((hw - from) as f64 * per / at.duration_since(since).as_secs_f64())
            }
            _ => None,
        };
        self.rate_points.push_back((at, hw));
        self.sample = Some(Sample {
            scan,
            retention,
            produce_bytes_per_second,
        });
    }
}

/// What one batched read found for one partition.
struct SourceNow {
    topics: Arc<Vec<TopicInfo>>,
    bounds: Result<LogBounds, String>,
    retention: Result<Retention, String>,
}

type Waiter = (
    TopicPartition,
    tokio::sync::oneshot::Sender<Result<SourceNow, String>>,
);

#[derive(Default)]
struct ReadsInner {
    waiting: Vec<Waiter>,
    /// Retention configs per source topic, read at most every [`CONFIG_TTL`].
    configs: HashMap<Arc<str>, (Instant, Retention)>,
}

/// The source reads of a mirror's risk samples, batched: reads arriving
/// within [`BATCH_WINDOW`] of the first share one metadata request, one
/// ListOffsets per broker and offset kind ([`crate::cluster::ClusterView::bounds_many`]),
/// and one DescribeConfigs per topic per [`CONFIG_TTL`]. One per mirror,
/// shared by its PartitionActors.
#[derive(Clone)]
pub struct RiskReads {
    source: Arc<dyn SourceCluster>,
    inner: Arc<Mutex<ReadsInner>>,
    /// Scans of unmirrored batches running at once.
    scans: Arc<tokio::sync::Semaphore>,
}

/// Risk scans of a mirror running at once.
const SCANS_AT_ONCE: usize = 4;

impl RiskReads {
    pub fn new(source: Arc<dyn SourceCluster>) -> Self {
        RiskReads {
            source,
            inner: Arc::default(),
            scans: Arc::new(tokio::sync::Semaphore::new(SCANS_AT_ONCE)),
        }
    }

    /// The source's topics, the partition's bounds and its topic's
    /// retention, from the batch this read joins.
    async fn read(&self, tp: TopicPartition) -> Result<SourceNow, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let first = {
            let mut inner = self.inner.lock().unwrap();
            inner.waiting.push((tp, tx));
            inner.waiting.len() == 1
        };
        if first {
            let reads = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(BATCH_WINDOW).await;
                // Dropped on timeout: every waiter then hears it.
                let _ = tokio::time::timeout(SAMPLE_TIMEOUT, reads.flush()).await;
            });
        }
        rx.await
            .map_err(|_| "the batched source read did not finish".to_string())?
    }

    async fn flush(&self) {
        let waiting = std::mem::take(&mut self.inner.lock().unwrap().waiting);
        let topics = match self.source.recent_topics(RECENT_TOPICS_AGE).await {
            Ok(t) => Arc::new(t),
            Err(e) => {
                let e = format!("describe source topics: {e}");
                for (_, tx) in waiting {
                    let _ = tx.send(Err(e.clone()));
                }
                return;
            }
        };
        let tps: Vec<TopicPartition> = waiting.iter().map(|(tp, _)| tp.clone()).collect();
        let stale: BTreeSet<Arc<str>> = {
            let inner = self.inner.lock().unwrap();
            tps.iter()
                .filter(|tp| {
                    inner
                        .configs
                        .get(&tp.topic)
                        .is_none_or(|(at, _)| at.elapsed() >= CONFIG_TTL)
                })
                .map(|tp| tp.topic.clone())
                .collect()
        };
        let configs = futures_util::future::join_all(stale.into_iter().map(|topic| async move {
            let read = self.source.topic_config_values(&topic).await;
            (topic, read)
        }));
        let (bounds, configs) = tokio::join!(self.source.bounds_many(&tps), configs);
        let mut inner = self.inner.lock().unwrap();
        let mut failed = HashMap::new();
        for (topic, read) in configs {
            match read {
                Ok(c) => {
                    inner
                        .configs
                        .insert(topic, (Instant::now(), retention_configs(&c)));
                }
                Err(e) => {
                    failed.insert(topic, format!("source topic configs: {e}"));
                }
            }
        }
        for ((tp, tx), bounds) in waiting.into_iter().zip(bounds) {
            let retention = match failed.get(&tp.topic) {
                Some(e) => Err(e.clone()),
                None => inner
                    .configs
                    .get(&tp.topic)
                    .map(|(_, r)| *r)
                    .ok_or_else(|| format!("source topic configs of {} not read", tp.topic)),
            };
            let _ = tx.send(Ok(SourceNow {
                topics: topics.clone(),
                bounds: bounds.map_err(|e| format!("source offsets: {e}")),
                retention,
            }));
        }
    }
}

fn bytes_per_record(s: &Scan) -> Option<f64> {
    (s.scanned_records > 0 && s.unmirrored.bytes > 0)
        .then(|| s.unmirrored.bytes as f64 / s.scanned_records as f64)
}

/// `retention.ms` and `retention.bytes` in force (`None`: unlimited); a
/// topic that is only compacted (`cleanup.policy` without `delete`) keeps
/// every key's last record whatever its age or size, so neither limits it.
fn retention_configs(configs: &BTreeMap<String, Option<String>>) -> Retention {
    let value = |k: &str| configs.get(k).and_then(Option::as_ref);
    if value("cleanup.policy").is_some_and(|p| !p.split(',').any(|p| p.trim() == "delete")) {
        return (None, None);
    }
    let get = |k: &str| value(k).and_then(|v| v.parse::<i64>().ok());
    let limited = |v: i64| (v >= 0).then_some(v);
    (
        limited(get("retention.ms").unwrap_or(DEFAULT_RETENTION_MS)),
        get("retention.bytes").and_then(limited),
    )
}

/// The view of a sample for a copy standing at `position` now.
fn view_of(
    s: &Sample,
    state: PartitionState,
    progress: &Progress,
    position: i64,
    now_ms: i64,
    threshold: Duration,
) -> RiskView {
    let u = &s.scan.unmirrored;
    // A fetching copy's high watermark is newer than the sample's.
    let fetching = state == PartitionState::Mirroring && progress.source_high_watermark > 0;
    let high_watermark = if fetching {
        progress.source_high_watermark.max(u.source_high_watermark)
    } else {
        u.source_high_watermark
    };
    let at_risk_records = (high_watermark - position).max(0);
    let at_risk_seconds = if at_risk_records == 0 {
        0.0
    } else if fetching && progress.lag_seconds() >= 0.0 {
        progress.lag_seconds()
    } else {
        seconds(u.behind_ms)
    };
    // The sample's bytes cover the range from its position; a copy that
    // moved on since has copied some of them.
    let at_risk_bytes = if at_risk_records == 0 {
        0
    } else if u.records > at_risk_records && u.records > 0 {
        (u.bytes as f64 * at_risk_records as f64 / u.records as f64) as i64
    } else {
        u.bytes
    };
    // A capped read counted only part of the range: retention sees all of
    // it, so the margin extrapolates at the bytes per record read.
    let unmirrored_bytes = match bytes_per_record(&s.scan) {
        Some(per) if u.bytes_at_least => (per * at_risk_records as f64) as i64,
        _ => at_risk_bytes,
    };
    let margin = retention_margin(
        &RetentionInputs {
            position,
            log_start: s.scan.log_start,
            high_watermark,
            unmirrored_bytes,
            oldest_unmirrored_timestamp: s.scan.oldest_unmirrored_timestamp,
            retention_ms: s.retention.0,
            retention_bytes: s.retention.1,
            produce_bytes_per_second: s.produce_bytes_per_second,
        },
        now_ms,
    );
    RiskView {
        at_risk_records,
        at_risk_bytes,
        // The flag is the sample's; nothing at risk now is exactly 0 bytes.
        at_risk_bytes_at_least: u.bytes_at_least && at_risk_records > 0,
        at_risk_seconds,
        retention_margin_records: margin.records,
        retention_margin_ms: margin.ms,
        retention_warning: margin.warning(threshold),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(hw: i64, bytes: i64, behind_ms: i64) -> Sample {
        Sample {
            scan: Scan {
                unmirrored: Unmirrored {
                    source_high_watermark: hw,
                    records: hw - 10,
                    bytes,
                    bytes_at_least: false,
                    behind_ms,
                },
                log_start: 0,
                oldest_unmirrored_timestamp: Some(1_000),
                scanned_records: hw - 10,
            },
            retention: (Some(60_000), None),
            produce_bytes_per_second: None,
        }
    }

    #[test]
    fn a_paused_copy_counts_from_the_sample() {
        let s = sample(110, 5_000, 4_000);
        let v = view_of(
            &s,
            PartitionState::Paused,
            &Progress::default(),
            10,
            31_000,
            Duration::from_secs(600),
        );
        assert_eq!(v.at_risk_records, 100);
        assert_eq!(v.at_risk_bytes, 5_000);
        assert_eq!(v.at_risk_seconds, 4.0);
        assert_eq!(
            (v.retention_margin_records, v.retention_margin_ms),
            (10, 30_000)
        );
        assert!(v.retention_warning);
    }

    #[test]
    fn a_fetching_copy_uses_its_own_high_watermark() {
        let s = sample(110, 5_000, 4_000);
        let progress = Progress {
            source_offset: 60,
            source_high_watermark: 120,
            newest_source_timestamp: 9_000,
            newest_mirrored_timestamp: 7_000,
            ..Progress::default()
        };
        let v = view_of(
            &s,
            PartitionState::Mirroring,
            &progress,
            60,
            0,
            Duration::from_secs(1),
        );
        assert_eq!(v.at_risk_records, 60);
        assert_eq!(v.at_risk_seconds, 2.0);
        // the sample's 100 records were 5000 bytes; 60 of them are left
        assert_eq!(v.at_risk_bytes, 3_000);
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.to_string())))
            .collect()
    }

    fn copy_at(high_watermark: i64, position: i64, log_start: Option<i64>) -> Progress {
        Progress {
            source_offset: position,
            source_high_watermark: high_watermark,
            source_log_start: log_start,
            ..Progress::default()
        }
    }

    #[test]
    fn a_caught_up_copy_takes_its_figures_from_its_fetches_between_reads() {
        let source = crate::cluster::memory::MemorySource::new("s");
        let risk = Risk::new(RiskSettings::default(), RiskReads::new(Arc::new(source)));
        let at = copy_at(50, 50, Some(5));
        // No read of the source yet: one is owed.
        assert!(!risk.caught_up(&at));

        {
            let mut shared = risk.shared.lock().unwrap();
            shared.read_at = Some(Instant::now());
            shared.sample = Some(sample(40, 5_000, 4_000));
        }
        assert!(risk.caught_up(&at));
        let v = risk.view(PartitionState::Mirroring, &at, true);
        assert_eq!(
            (v.at_risk_records, v.at_risk_bytes, v.at_risk_seconds),
            (0, 0, 0.0)
        );
        // The log start is the fetch's, the retention the last read's.
        assert_eq!(
            (v.retention_margin_records, v.retention_margin_ms),
            (45, -1)
        );
        let kept = risk.shared.lock().unwrap().sample.clone().unwrap();
        assert_eq!(kept.retention, (Some(60_000), None));

        // Behind, or no fetch has told the log start: the source is read.
        assert!(!risk.caught_up(&copy_at(60, 50, Some(5))));
        assert!(!risk.caught_up(&copy_at(50, 50, None)));
        // Read too long ago: read again.
        risk.shared.lock().unwrap().read_at = Instant::now().checked_sub(FULL_SAMPLE_AGE);
        assert!(!risk.caught_up(&at));
    }

    #[test]
    fn a_stopped_partition_shows_its_report_and_retention_defaults_to_a_week() {
        assert_eq!(RiskView::stopped(None).at_risk_records, -1);
        assert_eq!(
            retention_configs(&configs(&[("retention.bytes", "2048")])),
            (Some(DEFAULT_RETENTION_MS), Some(2048))
        );
        assert_eq!(
            retention_configs(&configs(&[("retention.ms", "-1")])),
            (None, None)
        );
        let policy = |p: &str| {
            retention_configs(&configs(&[("cleanup.policy", p), ("retention.ms", "1000")]))
        };
        assert_eq!(policy("compact"), (None, None));
        assert_eq!(policy("compact,delete"), (Some(1000), None));
        assert_eq!(policy("delete"), (Some(1000), None));
    }
}
