//! What the CLI prints: the daemon's answers as the KIP's tables and
//! sentences, or as pretty JSON with `--json`.

use kmirror_actors::node::{
    FailbackView, MirrorListing, OffsetTranslation, OperationReport, PartitionDescription,
    StopReport, UnfenceReport,
};
use kmirror_actors::shards::ClusterStatus;
use kmirror_actors::verify::VerifyReport;
use serde_json::Value;

use super::risk::{at_risk, retention, rpo_footer};

pub(super) fn pretty(v: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(v).expect("JSON values serialise")
    )
}

/// Where a partition's offsets are: the first columns of describe and
/// translate.
const OFFSET_COLUMNS: [&str; 5] = [
    "MIRROR",
    "TOPIC",
    "PARTITION",
    "SOURCE-OFFSET",
    "DESTINATION-OFFSET",
];

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

pub(super) fn created(listing: &MirrorListing) -> String {
    format!(
        "Created mirror {} (source cluster {}).\n",
        listing.mirror, listing.source_cluster_id
    )
}

pub(super) fn deleted(mirror: &str) -> String {
    format!("Deleted mirror {mirror}.\n")
}

pub(super) fn list_table(mirrors: &[MirrorListing]) -> String {
    let rows = mirrors
        .iter()
        .map(|m| {
            vec![
                m.mirror.clone(),
                or_dash(&m.topics.join(",")),
                or_dash(&m.source_cluster_id),
                or_dash(&m.source_bootstrap),
            ]
        })
        .collect();
    table(
        &[
            "MIRROR",
            "TOPICS",
            "SOURCE-CLUSTER-ID",
            "SOURCE-BOOTSTRAP-SERVER",
        ],
        rows,
    )
}

pub(super) fn cluster_status(s: &ClusterStatus) -> String {
    let mut out = format!(
        "Cluster {}: generation {}, leader {}, {} member(s).\n",
        s.cluster_id,
        s.generation,
        or_dash(&s.leader),
        s.members.len()
    );
    let rows = s
        .members
        .iter()
        .map(|m| {
            let me = if s.is_me(m) { " (this node)" } else { "" };
            vec![
                format!("{}{me}", m.member_id),
                m.url.clone(),
                m.capacity.to_string(),
                m.shards.len().to_string(),
                or_dash(&ranges(&m.shards)),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "MEMBER",
            "ADMIN-URL",
            "CAPACITY",
            "SHARDS",
            "STATE-PARTITIONS",
        ],
        rows,
    ));
    out
}

/// `0-3,7,9-10`: sorted shard numbers as ranges.
fn ranges(shards: &[i32]) -> String {
    let mut sorted = shards.to_vec();
    sorted.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", sorted[i])
        });
        i += 1;
    }
    parts.join(",")
}

pub(super) fn describe_table(partitions: &[PartitionDescription], failed: bool) -> String {
    if failed {
        let rows = partitions
            .iter()
            .map(|p| {
                let retry = if p.retry_attempt < 0 {
                    "NonRetryable".to_owned()
                } else {
                    format!("{}/{}", p.retry_attempt, p.max_attempts)
                };
                vec![
                    p.mirror.clone(),
                    p.topic.clone(),
                    p.partition.to_string(),
                    retry,
                    or_dash(p.error.as_deref().unwrap_or("")),
                ]
            })
            .collect();
        return table(&["MIRROR", "TOPIC", "PARTITION", "RETRY", "ERROR"], rows);
    }
    // Where copies stopped and how failbacks took partitions back: shown
    // once any partition has either, so the plain table stays the KIP's.
    let history = partitions
        .iter()
        .any(|p| p.last_mirror_epochs.is_some() || p.failback.is_some());
    let rows = partitions
        .iter()
        .map(|p| {
            let mut row = vec![
                p.mirror.clone(),
                p.topic.clone(),
                p.partition.to_string(),
                p.source_offset.to_string(),
                p.destination_offset.to_string(),
                p.lag.to_string(),
                format!("{:.3}", p.lag_seconds),
                p.state.clone(),
                at_risk(p),
                retention(p),
            ];
            if history {
                row.push(p.last_mirror_epochs.as_ref().map_or("-".into(), |l| {
                    format!("{}/{}", l.source_offset, l.destination_end_offset)
                }));
                row.push(p.failback.as_ref().map_or("-".into(), |f| {
                    if f.divergent_end > f.divergent_start {
                        format!(
                            "{} divergent {}..{}",
                            f.mode.name(),
                            f.divergent_start,
                            f.divergent_end
                        )
                    } else {
                        f.mode.name().to_string()
                    }
                }));
            }
            row
        })
        .collect();
    let mut columns = [
        &OFFSET_COLUMNS[..],
        &["LAG", "LAG-SECONDS", "STATE", "AT-RISK", "RETENTION"],
    ]
    .concat();
    if history {
        columns.extend(["LAST-MIRRORED (SOURCE/DEST)", "FAILBACK"]);
    }
    let mut out = table(&columns, rows);
    out.push_str(&rpo_footer(partitions));
    out
}

pub(super) fn report_text(verb: &str, mirror: &str, r: &OperationReport) -> String {
    let done = match verb {
        "start" => "Started",
        "stop" => "Stopped",
        "pause" => "Paused",
        "resume" => "Resumed",
        _ => "Recovered",
    };
    let mut text = if r.dry_run {
        let what = if r.failback.is_empty() {
            " would copy them, with nothing to take back."
        } else {
            " would take them back as follows:"
        };
        // Only `start` answers a dry run with this report.
        format!(
            "Dry run: nothing was changed. Starting topics {} of mirror {mirror} now{what}\n",
            r.topics.join(", "),
        )
    } else if r.topics.is_empty() {
        format!(
            "{done} no topics of mirror {mirror} (state validation offset {}).\n",
            r.state_validation_offset
        )
    } else {
        format!(
            "{done} topics {} of mirror {mirror} (state validation offset {}).\n",
            r.topics.join(", "),
            r.state_validation_offset
        )
    };
    if let Some(note) = &r.note {
        text.push_str(note);
        text.push('\n');
    }
    if !r.failback.is_empty() {
        text.push_str(&failback_table(&r.failback));
    }
    text
}

/// A failback's plan per partition: the mode, where the histories last
/// agreed, what only the destination had (quarantined or deleted) and what
/// is copied.
pub(super) fn failback_table(plans: &[FailbackView]) -> String {
    let range = |a: i64, b: i64| {
        if b > a {
            format!("{a}..{b} ({})", b - a)
        } else {
            "-".to_string()
        }
    };
    table(
        &[
            "TOPIC",
            "PARTITION",
            "MODE",
            "AGREED-AT (DEST/SOURCE)",
            "DIVERGENT",
            "TO-COPY",
            "QUARANTINE",
        ],
        plans
            .iter()
            .map(|v| {
                let p = &v.plan;
                vec![
                    v.topic.clone(),
                    v.partition.to_string(),
                    p.mode.name().to_string(),
                    if p.destination_position < 0 {
                        "-".into()
                    } else {
                        format!("{}/{}", p.destination_position, p.source_position)
                    },
                    range(p.divergent_start, p.divergent_end),
                    range(p.copy_start, p.copy_end),
                    p.quarantine_topic.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect(),
    )
}

/// The answer of `stop`: what was done, then per partition its
/// LastMirrorEpochs and what was not mirrored.
pub(super) fn stop_text(mirror: &str, r: &StopReport) -> String {
    let topics = r.topics.join(", ");
    let mut text = if r.dry_run {
        format!("Dry run: nothing was changed. Stopping topics {topics} of mirror {mirror} now would leave:\n")
    } else {
        format!(
            "Stopped topics {topics} of mirror {mirror} (state validation offset {}).\n",
            r.state_validation_offset
        )
    };
    if let Some(f) = &r.fence {
        let quiet = f.quiet_ms as f64 / 1000.0;
        text.push_str(&match f.mode.as_str() {
            "acl" if f.acls.is_empty() => format!("The source's writers were already denied WRITE; its end offsets then stayed unchanged for {quiet:.1} s; drained to lag 0 before stopping.\n"),
            "acl" => format!(
                "Fenced the source's writers with ACL {}; its end offsets then stayed unchanged for {quiet:.1} s; drained to lag 0 before stopping (kmirror mirror unfence removes the fence).\n",
                f.acls.join(", ")
            ),
            _ => format!("The source has no authorizer: no new offsets appeared on it for {quiet:.1} s; drained to lag 0 before stopping.\n"),
        });
    }
    let rows = r
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.topic.clone(),
                p.partition.to_string(),
                p.state.clone(),
                p.source_offset.to_string(),
                p.source_leader_epoch.to_string(),
                p.destination_offset.to_string(),
                p.destination_leader_epoch.to_string(),
                p.report().unmirrored_text(),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "TOPIC",
            "PARTITION",
            "STATE",
            "SOURCE-OFFSET",
            "SOURCE-EPOCH",
            "DESTINATION-OFFSET",
            "DESTINATION-EPOCH",
            "NOT-MIRRORED",
        ],
        rows,
    ));
    if let Some(note) = r.note.as_ref().filter(|_| !r.dry_run) {
        text.push_str(note);
        text.push('\n');
    }
    text
}

pub(super) fn unfence_text(mirror: &str, r: &UnfenceReport) -> String {
    if r.removed_acls.is_empty() {
        format!(
            "Mirror {mirror} holds no write fence on topics {}.\n",
            r.topics.join(", ")
        )
    } else {
        format!(
            "Removed mirror {mirror}'s write fence from the source: ACL {}.\n",
            r.removed_acls.join(", ")
        )
    }
}

/// The first difference (both offsets, the field), then one line per
/// partition: records compared, equal, skipped, and its first difference
/// or OK.
pub(super) fn verify_text(r: &VerifyReport) -> String {
    let mut out = String::new();
    match r.first_difference() {
        Some((p, d)) => out.push_str(&format!(
            "FIRST DIFFERENCE {}-{}: source offset {} → destination offset {}, {}: {}\n",
            p.topic, p.partition, d.source_offset, d.destination_offset, d.field, d.detail
        )),
        None if r.equal => out.push_str(&format!(
            "Mirror {} is equal to its source: {} records compared.\n",
            r.mirror, r.compared
        )),
        None => out.push_str(&format!(
            "Mirror {}: no difference in {} records, but some partitions could not be verified.\n",
            r.mirror, r.compared
        )),
    }
    let rows = r
        .partitions
        .iter()
        .map(|p| {
            let verdict = match (&p.tally.first_difference, &p.error) {
                (Some(d), _) => format!(
                    "{} at source {} → destination {}",
                    d.field, d.source_offset, d.destination_offset
                ),
                (None, Some(e)) => format!("ERROR {e}"),
                (None, None) => "OK".to_owned(),
            };
            vec![
                p.topic.clone(),
                p.partition.to_string(),
                format!("{}..{}", p.from, p.through),
                p.tally.compared.to_string(),
                p.tally.equal.to_string(),
                p.tally.skipped.to_string(),
                verdict,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "TOPIC",
            "PARTITION",
            "SOURCE-RANGE",
            "COMPARED",
            "EQUAL",
            "SKIPPED",
            "RESULT",
        ],
        rows,
    ));
    out
}

pub(super) fn translation_table(t: &OffsetTranslation) -> String {
    table(
        &[&OFFSET_COLUMNS[..], &["KIND"]].concat(),
        vec![vec![
            t.mirror.clone(),
            t.topic.clone(),
            t.partition.to_string(),
            t.source_offset.to_string(),
            t.destination_offset
                .map_or_else(|| "-".to_owned(), |o| o.to_string()),
            t.kind.clone(),
        ]],
    )
}

/// The one table printer: left-aligned columns, two spaces apart, last
/// column unpadded (so error messages can be long).
pub(super) fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(headers.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_actors::node::{FenceReport, PartitionFailover, UnmirroredView};

    fn partition(state: &str, retry: i16, error: Option<&str>) -> PartitionDescription {
        PartitionDescription {
            verify: None,
            mirror: "m".into(),
            topic: "orders".into(),
            partition: 3,
            source_offset: 120,
            destination_offset: 100,
            lag: 20,
            lag_seconds: 0.25,
            state: state.into(),
            retry_attempt: retry,
            max_attempts: 20,
            next_retry_at_ms: None,
            error: error.map(Into::into),
            offsets_identical: false,
            records_mirrored: 0,
            bytes_mirrored: 0,
            last_mirror_epochs: None,
            failback: None,
            at_risk_records: 20,
            at_risk_bytes: 2048,
            at_risk_seconds: 0.25,
            retention_margin_records: 100,
            retention_margin_ms: -1,
            ..Default::default()
        }
    }

    #[test]
    fn describe_prints_the_kip_columns() {
        let text = describe_table(&[partition("MIRRORING", 0, None)], false);
        assert_eq!(
            text,
            "MIRROR  TOPIC   PARTITION  SOURCE-OFFSET  DESTINATION-OFFSET  LAG  LAG-SECONDS  STATE      AT-RISK              RETENTION\n\
             m       orders  3          120            100                 20   0.250        MIRRORING  20 rec 2.0 KiB 0.2s  -\n\
             Mirror m: a failover now loses 20 records, 2.0 KiB, 0.2 s behind.\n"
        );
    }

    #[test]
    fn describe_sums_the_rpo_per_mirror_and_marks_the_retention_race() {
        let mut warned = partition("PAUSED", 0, None);
        warned.partition = 4;
        warned.at_risk_bytes_at_least = true;
        warned.at_risk_seconds = 7.5;
        warned.retention_margin_ms = 40_000;
        warned.retention_warning = true;
        let mut gap = warned.clone();
        gap.retention_margin_records = -3;
        let mut unmeasured = partition("PAUSED", 0, None);
        unmeasured.at_risk_records = -1;
        let text = describe_table(
            &[partition("MIRRORING", 0, None), warned, gap, unmeasured],
            false,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[2].ends_with("20 rec ≥2.0 KiB 7.5s  WARN 40s"),
            "{text}"
        );
        assert!(lines[3].ends_with("WARN gap"), "{text}");
        assert!(lines[4].contains("  -  "), "{text}");
        assert_eq!(
            lines[5],
            "Mirror m: a failover now loses 60 records, at least 6.0 KiB, 7.5 s behind (1 partition(s) not measured yet); \
             RETENTION WARNING on 2 partition(s): the source is about to delete records not mirrored."
        );
    }

    #[test]
    fn describe_failed_shows_retry_as_n_of_max_or_non_retryable() {
        let text = describe_table(
            &[
                partition("FAILED", 2, Some("leader not available")),
                partition("FAILED", -1, Some("The source topic is deleted.")),
            ],
            true,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "MIRROR  TOPIC   PARTITION  RETRY         ERROR");
        assert_eq!(
            lines[1],
            "m       orders  3          2/20          leader not available"
        );
        assert_eq!(
            lines[2],
            "m       orders  3          NonRetryable  The source topic is deleted."
        );
    }

    #[test]
    fn list_prints_the_kip_columns() {
        let text = list_table(&[
            MirrorListing {
                mirror: "east".into(),
                topics: vec!["a".into(), "b".into()],
                source_cluster_id: "abc".into(),
                source_bootstrap: "127.0.0.1:9092".into(),
            },
            MirrorListing {
                mirror: "west".into(),
                topics: vec![],
                source_cluster_id: String::new(),
                source_bootstrap: "127.0.0.1:9093".into(),
            },
        ]);
        assert_eq!(
            text,
            "MIRROR  TOPICS  SOURCE-CLUSTER-ID  SOURCE-BOOTSTRAP-SERVER\n\
             east    a,b     abc                127.0.0.1:9092\n\
             west    -       -                  127.0.0.1:9093\n"
        );
    }

    #[test]
    fn translate_prints_one_row_with_a_dash_for_nothing_mirrored() {
        let t = OffsetTranslation {
            mirror: "m".into(),
            topic: "orders".into(),
            partition: 0,
            source_offset: 5,
            destination_offset: None,
            kind: "empty".into(),
        };
        assert_eq!(
            translation_table(&t),
            "MIRROR  TOPIC   PARTITION  SOURCE-OFFSET  DESTINATION-OFFSET  KIND\n\
             m       orders  0          5              -                   empty\n"
        );
    }

    fn failover(partition: i32, unmirrored: Option<UnmirroredView>) -> PartitionFailover {
        PartitionFailover {
            topic: "orders".into(),
            partition,
            state: "STOPPED".into(),
            source_offset: 150,
            source_leader_epoch: 3,
            destination_offset: 150,
            destination_leader_epoch: 0,
            source_reachable: unmirrored.is_some(),
            source_error: unmirrored
                .is_none()
                .then(|| "the source did not answer within 10 s".into()),
            unmirrored,
        }
    }

    #[test]
    fn a_stop_prints_each_partitions_position_and_what_was_not_mirrored() {
        let r = StopReport {
            topics: vec!["orders".into()],
            state_validation_offset: 42,
            note: None,
            dry_run: false,
            fence: None,
            partitions: vec![
                failover(
                    0,
                    Some(UnmirroredView {
                        source_high_watermark: 200,
                        records: 50,
                        bytes: 5200,
                        bytes_at_least: false,
                        seconds_behind: 3.2,
                    }),
                ),
                failover(1, None),
            ],
        };
        let text = stop_text("m", &r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Stopped topics orders of mirror m (state validation offset 42)."
        );
        assert_eq!(lines[1], "TOPIC   PARTITION  STATE    SOURCE-OFFSET  SOURCE-EPOCH  DESTINATION-OFFSET  DESTINATION-EPOCH  NOT-MIRRORED");
        assert_eq!(lines[2], "orders  0          STOPPED  150            3             150                 0                  not mirrored: 50 records, 5200 bytes, 3.200 s behind (source high watermark 200)");
        assert_eq!(lines[3], "orders  1          STOPPED  150            3             150                 0                  source unreachable, what was not mirrored is unknown: the source did not answer within 10 s");
        let fenced = StopReport {
            fence: Some(FenceReport {
                mode: "acl".into(),
                acls: vec!["TOPIC;LITERAL;orders;User:*;*;WRITE;DENY".into()],
                quiet_ms: 1000,
            }),
            partitions: vec![],
            ..r.clone()
        };
        assert!(stop_text("m", &fenced).lines().nth(1).unwrap().starts_with(
            "Fenced the source's writers with ACL TOPIC;LITERAL;orders;User:*;*;WRITE;DENY; its end offsets then stayed unchanged for 1.0 s"
        ));
        let dry = StopReport {
            dry_run: true,
            note: Some("dry run: nothing was recorded or changed".into()),
            ..r
        };
        let text = stop_text("m", &dry);
        assert!(text.starts_with("Dry run: nothing was changed."), "{text}");
        assert!(!text.contains("dry run: nothing was recorded"), "{text}");
    }

    #[test]
    fn reports() {
        let r = OperationReport {
            topics: vec!["a".into(), "b".into()],
            state_validation_offset: 7,
            note: None,
            ..OperationReport::default()
        };
        assert_eq!(
            report_text("pause", "m", &r),
            "Paused topics a, b of mirror m (state validation offset 7).\n"
        );
        let r = OperationReport {
            topics: vec![],
            state_validation_offset: 7,
            note: Some("Patterns saved for auto-discovery.".into()),
            ..OperationReport::default()
        };
        assert_eq!(
            report_text("start", "m", &r),
            "Started no topics of mirror m (state validation offset 7).\nPatterns saved for auto-discovery.\n"
        );
        let r = OperationReport {
            topics: vec!["a".into()],
            state_validation_offset: 7,
            dry_run: true,
            ..OperationReport::default()
        };
        assert_eq!(
            report_text("start", "m", &r),
            "Dry run: nothing was changed. Starting topics a of mirror m now would copy them, with nothing to take back.\n"
        );
    }

    #[test]
    fn cluster_status_names_every_member_and_its_shards() {
        use kmirror_actors::shards::MemberStatus;
        let status = ClusterStatus {
            cluster_id: "dr".into(),
            generation: 7,
            member_id: "b".into(),
            leader: "a".into(),
            members: vec![
                MemberStatus {
                    member_id: "a".into(),
                    url: "http://127.0.0.1:1".into(),
                    capacity: 1,
                    shards: vec![3, 0, 1, 2, 7],
                },
                MemberStatus {
                    member_id: "b".into(),
                    url: "http://127.0.0.1:2".into(),
                    capacity: 2,
                    shards: vec![],
                },
            ],
        };
        let text = cluster_status(&status);
        assert!(
            text.starts_with("Cluster dr: generation 7, leader a, 2 member(s).\n"),
            "{text}"
        );
        assert!(text.contains("0-3,7"), "{text}");
        assert!(text.contains("b (this node)"), "{text}");
    }
}
