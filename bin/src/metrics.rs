//! `/metrics` in the Prometheus text format.
//!
//! The partition-state gauges keep the KIP's broker gauge names
//! (`MirroringPartitionState`, …) so dashboards written for KIP-1279 brokers
//! map one to one; everything else follows Prometheus naming.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use kmirror_actors::kafka::budget::MemoryBudget;
use kmirror_actors::metadata_sync::SyncMetrics;
use kmirror_actors::node::NodeMetrics;

/// The KIP's partition states, each of which always gets a gauge (0 when no
/// partition is in it) so that alerts on e.g. `FailedPartitionState > 0`
/// never see a missing series.
const KIP_STATES: &[&str] = &[
    "LOG_ALIGNMENT",
    "EPOCH_FENCING",
    "ULE_RECOVERY",
    "MIRRORING",
    "PAUSING",
    "PAUSED",
    "STOPPING",
    "STOPPED",
    "FAILED",
];

/// `LOG_ALIGNMENT` → `LogAlignmentPartitionState`.
fn gauge_name(state: &str) -> String {
    let mut name: String = state
        .split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let lower = w.to_ascii_lowercase();
            let mut chars = lower.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    name.push_str("PartitionState");
    name
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP kmirror_{name} {help}");
        let _ = writeln!(self.out, "# TYPE kmirror_{name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let _ = write!(self.out, "kmirror_{name}");
        if !labels.is_empty() {
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.out, "{{{}}}", labels.join(","));
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// The background verify, per mirror, over its partitions' last results:
/// when the newest finished, records compared, differences found (0 when
/// the copy is equal). Mirrors never verified have no series.
fn verify_families(f: &mut Family<'_>, m: &NodeMetrics) {
    let mut by_mirror: BTreeMap<&str, (i64, u64, u64)> = BTreeMap::new();
    for p in &m.partitions {
        if let Some(v) = &p.verify {
            let e = by_mirror.entry(&p.mirror).or_default();
            e.0 = e.0.max(v.verified_at_ms);
            e.1 += v.compared;
            e.2 += v.differences;
        }
    }
    type VerifyValue = fn(&(i64, u64, u64)) -> String;
    let families: [(&str, &str, VerifyValue); 3] = [
        (
            "verify_last_timestamp_seconds",
            "When the last background verify of the mirror finished.",
            |v| (v.0 as f64 / 1000.0).to_string(),
        ),
        (
            "verify_records_compared",
            "Records compared by the last background verify of each partition.",
            |v| v.1.to_string(),
        ),
        (
            "verify_differences",
            "Differences found by the last background verify of each partition (0: equal).",
            |v| v.2.to_string(),
        ),
    ];
    for (name, help, value) in families {
        f.header(name, "gauge", help);
        for (mirror, v) in &by_mirror {
            f.sample(name, &[("mirror", mirror)], value(v));
        }
    }
}

/// Renders the node's figures, and the process's memory budget.
pub fn render(m: &NodeMetrics, memory: Option<&MemoryBudget>) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    if let Some(budget) = memory {
        f.header(
            "memory_budget_bytes",
            "gauge",
            "The budget for bytes in flight (max_memory_bytes).",
        );
        f.sample("memory_budget_bytes", &[], budget.limit());
        f.header(
            "memory_in_flight_bytes",
            "gauge",
            "Bytes charged to the budget: fetched and not yet acknowledged by the destination, across every partition.",
        );
        f.sample("memory_in_flight_bytes", &[], budget.used());
    }

    let mut states: BTreeSet<&str> = KIP_STATES.iter().copied().collect();
    states.extend(m.partitions_by_state.keys().map(String::as_str));
    for state in states {
        let name = gauge_name(state);
        f.header(
            &name,
            "gauge",
            &format!("Mirror partitions in state {state}."),
        );
        f.sample(
            &name,
            &[],
            m.partitions_by_state.get(state).copied().unwrap_or(0),
        );
    }

    f.header(
        "mirrors",
        "gauge",
        "Mirrors this node coordinates (a spread mirror's hosted partitions count in the partition figures).",
    );
    f.sample("mirrors", &[], m.mirrors);
    f.header(
        "event_log_end_offset",
        "gauge",
        "End offset of the event log (the StateValidationOffset).",
    );
    f.sample("event_log_end_offset", &[], m.state_validation_offset);

    let mut topics: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in &m.partitions {
        topics.entry(&p.mirror).or_default().insert(&p.topic);
    }
    f.header("MirrorTopicCount", "gauge", "Topics per mirror.");
    for (mirror, topics) in &topics {
        f.sample("MirrorTopicCount", &[("mirror", mirror)], topics.len());
    }

    let total_records: u64 = m.partitions.iter().map(|p| p.records_mirrored).sum();
    let total_bytes: u64 = m.partitions.iter().map(|p| p.bytes_mirrored).sum();
    f.header(
        "records_mirrored_total",
        "counter",
        "Records mirrored by this node.",
    );
    f.sample("records_mirrored_total", &[], total_records);
    f.header(
        "bytes_mirrored_total",
        "counter",
        "Bytes mirrored by this node.",
    );
    f.sample("bytes_mirrored_total", &[], total_bytes);
    let refences: u64 = m.partitions.iter().map(|p| p.refences).sum();
    f.header(
        "refences_total",
        "counter",
        "Markers written to keep destination fences alive past the producer expiry.",
    );
    f.sample("refences_total", &[], refences);
    let with_error = m.partitions.iter().filter(|p| p.error.is_some()).count();
    f.header(
        "partitions_with_error",
        "gauge",
        "Partitions holding an error message.",
    );
    f.sample("partitions_with_error", &[], with_error);

    type Value = fn(&kmirror_actors::node::PartitionDescription) -> String;
    let per_partition: [(&str, &str, &str, Value); 11] = [
        (
            "partition_lag_records",
            "gauge",
            "Records behind the source high watermark (-1 unknown).",
            |p| p.lag.to_string(),
        ),
        (
            "partition_lag_seconds",
            "gauge",
            "Seconds behind the source.",
            |p| p.lag_seconds.to_string(),
        ),
        (
            "partition_records_mirrored_total",
            "counter",
            "Records mirrored.",
            |p| p.records_mirrored.to_string(),
        ),
        (
            "partition_bytes_mirrored_total",
            "counter",
            "Bytes mirrored.",
            |p| p.bytes_mirrored.to_string(),
        ),
        (
            "partition_retry_attempt",
            "gauge",
            "FAILED retries so far (-1 not retryable).",
            |p| p.retry_attempt.to_string(),
        ),
        (
            "partition_error",
            "gauge",
            "1 when the partition holds an error message.",
            |p| u8::from(p.error.is_some()).to_string(),
        ),
        (
            "partition_at_risk_records",
            "gauge",
            "Records a failover now would lose (-1 not measured yet).",
            |p| p.at_risk_records.to_string(),
        ),
        (
            "partition_at_risk_bytes",
            "gauge",
            "Source bytes a failover now would lose (a lower bound when the read was capped; -1 not measured yet).",
            |p| p.at_risk_bytes.to_string(),
        ),
        (
            "partition_at_risk_seconds",
            "gauge",
            "Newest source timestamp minus newest mirrored timestamp (-1 unknown).",
            |p| p.at_risk_seconds.to_string(),
        ),
        (
            "partition_retention_margin_ms",
            "gauge",
            "Estimated ms until source retention deletes an unmirrored record (-1 unknown or none ahead).",
            |p| p.retention_margin_ms.to_string(),
        ),
        (
            "partition_retention_warning",
            "gauge",
            "1 when the retention margin is under mirror.retention.margin.ms, or records were already lost.",
            |p| u8::from(p.retention_warning).to_string(),
        ),
    ];
    for (name, kind, help, value) in per_partition {
        f.header(name, kind, help);
        for p in &m.partitions {
            let partition = p.partition.to_string();
            let labels = [
                ("mirror", p.mirror.as_str()),
                ("topic", p.topic.as_str()),
                ("partition", partition.as_str()),
            ];
            f.sample(name, &labels, value(p));
        }
    }

    verify_families(&mut f, m);

    // Metadata sync, per mirror. The error meters keep the KIP's names.
    type SyncValue = fn(&SyncMetrics) -> String;
    let per_mirror: [(&str, &str, &str, SyncValue); 13] = [
        (
            "ConsumerGroupOffsetSyncError",
            "counter",
            "Failed consumer-group offset sync passes.",
            |s| s.group_sync_errors.to_string(),
        ),
        (
            "TopicConfigSyncError",
            "counter",
            "Failed topic-config sync passes.",
            |s| s.config_sync_errors.to_string(),
        ),
        (
            "TopicMetadataRefreshError",
            "counter",
            "Failed partition-count sync passes.",
            |s| s.partition_sync_errors.to_string(),
        ),
        ("AclSyncError", "counter", "Failed ACL sync passes.", |s| {
            s.acl_sync_errors.to_string()
        }),
        (
            "sync_group_offsets_committed_total",
            "counter",
            "Group offsets committed on the destination.",
            |s| s.group_offsets_committed.to_string(),
        ),
        (
            "sync_topic_configs_changed_total",
            "counter",
            "Destination topic configs changed.",
            |s| s.topic_configs_changed.to_string(),
        ),
        (
            "sync_partitions_added_total",
            "counter",
            "Destination partitions added.",
            |s| s.partitions_added.to_string(),
        ),
        (
            "sync_acls_created_total",
            "counter",
            "Destination ACLs created.",
            |s| s.acls_created.to_string(),
        ),
        (
            "sync_acls_deleted_total",
            "counter",
            "Destination ACLs deleted.",
            |s| s.acls_deleted.to_string(),
        ),
        (
            "sync_active_groups_skipped_total",
            "counter",
            "Times a group active on the destination was skipped.",
            |s| s.active_groups_skipped.to_string(),
        ),
        (
            "sync_active_groups",
            "gauge",
            "Groups skipped as active in the last pass.",
            |s| s.active_groups_now.to_string(),
        ),
        (
            "sync_last_group_sync_timestamp_seconds",
            "gauge",
            "End of the last error-free group sync (0 never).",
            |s| seconds(s.last_group_sync_ms),
        ),
        (
            "sync_last_metadata_sync_timestamp_seconds",
            "gauge",
            "End of the last error-free config/partition/ACL sync (0 never).",
            |s| seconds(s.last_metadata_sync_ms),
        ),
    ];
    for (name, kind, help, value) in per_mirror {
        f.header(name, kind, help);
        for s in &m.sync {
            f.sample(name, &[("mirror", s.mirror.as_str())], value(s));
        }
    }
    out
}

fn seconds(ms: i64) -> String {
    (ms.max(0) as f64 / 1000.0).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_actors::node::PartitionDescription;

    fn partition(topic: &str, partition: i32, state: &str) -> PartitionDescription {
        PartitionDescription {
            mirror: "m\"1".into(),
            topic: topic.into(),
            partition,
            source_offset: 100,
            destination_offset: 90,
            lag: 10,
            lag_seconds: 1.5,
            state: state.into(),
            retry_attempt: 0,
            max_attempts: 20,
            next_retry_at_ms: None,
            error: (state == "FAILED").then(|| "boom".into()),
            offsets_identical: true,
            records_mirrored: 90,
            bytes_mirrored: 9000,
            last_mirror_epochs: None,
            failback: None,
            at_risk_records: 10,
            at_risk_bytes: 1000,
            at_risk_seconds: 1.5,
            retention_margin_records: 100,
            retention_margin_ms: 60_000,
            retention_warning: true,
            ..Default::default()
        }
    }

    #[test]
    fn gauge_names_follow_the_kip() {
        assert_eq!(gauge_name("LOG_ALIGNMENT"), "LogAlignmentPartitionState");
        assert_eq!(gauge_name("ULE_RECOVERY"), "UleRecoveryPartitionState");
        assert_eq!(gauge_name("MIRRORING"), "MirroringPartitionState");
    }

    /// A node with one mirror, a MIRRORING and a FAILED partition, and a
    /// metadata-sync meter: every family `render` can write has a sample.
    fn sample() -> NodeMetrics {
        NodeMetrics {
            partitions: vec![
                kmirror_actors::node::PartitionDescription {
                    verify: Some(kmirror_events::VerifyResult {
                        verified_at_ms: 2_500,
                        sample: 100,
                        seed: 7,
                        from: 0,
                        through: 90,
                        compared: 90,
                        equal: 89,
                        skipped: 0,
                        differences: 1,
                        first_difference: None,
                        error: None,
                    }),
                    ..partition("orders", 0, "MIRRORING")
                },
                partition("orders", 1, "FAILED"),
            ],
            partitions_by_state: [
                ("MIRRORING".to_string(), 1),
                ("FAILED".to_string(), 1),
                ("UNKNOWN".to_string(), 2),
            ]
            .into_iter()
            .collect(),
            mirrors: 1,
            state_validation_offset: 42,
            sync: vec![SyncMetrics {
                mirror: "m\"1".into(),
                group_sync_errors: 3,
                last_group_sync_ms: 1_500,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn renders_states_lag_and_totals() {
        let text = render(&sample(), Some(&MemoryBudget::new(1 << 20)));
        for line in [
            "kmirror_memory_budget_bytes 1048576",
            "kmirror_memory_in_flight_bytes 0",
            "kmirror_MirroringPartitionState 1",
            "kmirror_FailedPartitionState 1",
            "kmirror_PausedPartitionState 0",
            "kmirror_LogAlignmentPartitionState 0",
            "kmirror_UnknownPartitionState 2",
            "kmirror_mirrors 1",
            "kmirror_event_log_end_offset 42",
            "kmirror_MirrorTopicCount{mirror=\"m\\\"1\"} 1",
            "kmirror_records_mirrored_total 180",
            "kmirror_bytes_mirrored_total 18000",
            "kmirror_refences_total 0",
            "kmirror_partitions_with_error 1",
            "kmirror_partition_lag_records{mirror=\"m\\\"1\",topic=\"orders\",partition=\"1\"} 10",
            "kmirror_partition_lag_seconds{mirror=\"m\\\"1\",topic=\"orders\",partition=\"0\"} 1.5",
            "kmirror_partition_error{mirror=\"m\\\"1\",topic=\"orders\",partition=\"1\"} 1",
            "kmirror_partition_at_risk_records{mirror=\"m\\\"1\",topic=\"orders\",partition=\"0\"} 10",
            "kmirror_partition_at_risk_bytes{mirror=\"m\\\"1\",topic=\"orders\",partition=\"0\"} 1000",
            "kmirror_partition_at_risk_seconds{mirror=\"m\\\"1\",topic=\"orders\",partition=\"0\"} 1.5",
            "kmirror_partition_retention_margin_ms{mirror=\"m\\\"1\",topic=\"orders\",partition=\"0\"} 60000",
            "kmirror_partition_retention_warning{mirror=\"m\\\"1\",topic=\"orders\",partition=\"0\"} 1",
            "# TYPE kmirror_partition_bytes_mirrored_total counter",
            "kmirror_ConsumerGroupOffsetSyncError{mirror=\"m\\\"1\"} 3",
            "kmirror_AclSyncError{mirror=\"m\\\"1\"} 0",
            "kmirror_sync_last_group_sync_timestamp_seconds{mirror=\"m\\\"1\"} 1.5",
            "kmirror_verify_last_timestamp_seconds{mirror=\"m\\\"1\"} 2.5",
            "kmirror_verify_records_compared{mirror=\"m\\\"1\"} 90",
            "kmirror_verify_differences{mirror=\"m\\\"1\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
        // Every sample line is `name[{labels}] value`, and every family is typed once.
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
        assert_eq!(types, helps);
    }

    /// The Grafana dashboard and the alert rules are written against these
    /// names; a metric renamed or dropped here must not leave them blank.
    #[test]
    fn deploy_files_name_only_exported_metrics() {
        let text = render(&sample(), Some(&MemoryBudget::new(1 << 20)));
        let exported: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/");
        let mut checked = 0;
        for file in [
            "grafana/kmirror.json",
            "prometheus/alerts.yml",
            "prometheus/alerts_test.yml",
        ] {
            let body = std::fs::read_to_string(format!("{root}{file}")).unwrap();
            for (at, _) in body.match_indices("kmirror_") {
                let name: String = body[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name == "kmirror_" {
                    continue; // a pattern such as `kmirror_.+PartitionState`
                }
                assert!(
                    exported.contains(name.as_str()),
                    "{file} uses `{name}`, which /metrics does not export"
                );
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} metric names found");
    }
}
