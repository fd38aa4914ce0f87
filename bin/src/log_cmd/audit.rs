//! `kmirror log audit`: the log as a human timeline (or JSON lines),
//! filtered by mirror, topic, partition and offset or time bounds.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use kmirror_events::{
    MirrorPartitionKey, MirrorStateImage, Offset, PartitionState, Record, TopicId,
};
use kmirror_store::{EventLog, LogEntry};

use super::read::{open_ro, CliResult, Progress, Source};

#[derive(Args)]
pub(super) struct AuditArgs {
    /// Only records of this mirror.
    #[arg(long)]
    mirror: Option<String>,
    /// Only records of this topic (name or Kafka topic id).
    #[arg(long)]
    topic: Option<String>,
    /// Only records of this partition.
    #[arg(long)]
    partition: Option<i32>,
    /// From this log offset or RFC 3339 time (inclusive).
    #[arg(long)]
    since: Option<String>,
    /// Up to this log offset or RFC 3339 time (inclusive).
    #[arg(long)]
    until: Option<String>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn names_of(image: &MirrorStateImage) -> HashMap<TopicId, String> {
    image
        .topics()
        .map(|(id, t)| (*id, t.change.topic_name.clone()))
        .collect()
}

pub(super) fn partition_label(names: &HashMap<TopicId, String>, k: &MirrorPartitionKey) -> String {
    match names.get(&k.topic_id) {
        Some(n) => format!("{}/{}[{}]", k.mirror_name, n, k.partition),
        None => format!("{}/{}[{}]", k.mirror_name, k.topic_id, k.partition),
    }
}

/// A `--since`/`--until` bound: a log offset or a wall-clock time.
#[derive(Clone, Copy)]
pub(crate) enum Bound {
    Offset(Offset),
    TimeMs(i64),
}

fn parse_bound(flag: &str, s: &str) -> CliResult<Bound> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map(Bound::Offset)
            .map_err(|e| format!("{flag} {s:?}: {e} (log offsets are below 2^64)").into());
    }
    parse_rfc3339_ms(s).map(Bound::TimeMs).ok_or_else(|| {
        format!("{flag} {s:?}: expected a log offset or an RFC 3339 time like 2026-05-01T12:00:00Z")
            .into()
    })
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` (also a bare date).
fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let num = |a: usize, b: usize| -> Option<i64> { s.get(a..b)?.parse().ok() };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    if s.get(4..5)? != "-"
        || s.get(7..8)? != "-"
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
    {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    if s.len() == 10 {
        return Some(days * 86_400_000);
    }
    if !matches!(s.get(10..11)?, "T" | "t" | " ") {
        return None;
    }
    let (h, mi, se) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let mut rest = s.get(19..)?;
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() {
            return None;
        }
        let padded = format!("{digits:0<3}");
        ms = padded[..3].parse().ok()?;
        rest = &frac[digits.len()..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.get(0..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (oh * 60 + om)
        }
    };
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + se * 1000 + ms)
}

fn format_ms(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

fn in_bounds(e: &LogEntry, since: Option<Bound>, until: Option<Bound>) -> bool {
    let ok_since = match since {
        None => true,
        Some(Bound::Offset(o)) => e.offset >= o,
        Some(Bound::TimeMs(t)) => e.timestamp_ms >= t,
    };
    let ok_until = match until {
        None => true,
        Some(Bound::Offset(o)) => e.offset <= o,
        Some(Bound::TimeMs(t)) => e.timestamp_ms <= t,
    };
    ok_since && ok_until
}

fn describe(
    record: &Record,
    names: &HashMap<TopicId, String>,
    prev: Option<PartitionState>,
) -> String {
    let topic = |id: &TopicId| names.get(id).cloned().unwrap_or_else(|| id.to_string());
    match record {
        Record::MirrorPartitionState(k, Some(v)) => {
            let mut s = format!(
                "{} {} -> {} (state epoch {}, leader epoch {})",
                partition_label(names, k),
                prev.unwrap_or(PartitionState::Unknown),
                v.state,
                v.state_epoch,
                v.leader_epoch
            );
            if v.state == PartitionState::Failed {
                let retry = if v.retry_attempt == -1 { "non-retryable".into() } else { format!("attempt {}", v.retry_attempt) };
                s += &format!(", {retry}, previous {}", v.previous_state);
            }
            if let Some(err) = &v.error_message {
                s += &format!(", error: {err}");
            }
            s
        }
        Record::MirrorPartitionState(k, None) => format!("{} partition state removed", partition_label(names, k)),
        Record::LastMirrorEpochs(k, Some(v)) => format!(
            "{} last mirror epoch {} offset {}; source offset {} (epoch {}), destination end {} (epoch {})",
            partition_label(names, k),
            v.last_mirror_epoch,
            v.last_mirror_offset,
            v.source_offset,
            v.source_leader_epoch,
            v.destination_end_offset,
            v.destination_leader_epoch
        ),
        Record::LastMirrorEpochs(k, None) => format!("{} last mirror epochs removed", partition_label(names, k)),
        Record::MirrorTopicStateChange(k, Some(c)) if c.mirror_name.is_empty() => {
            format!("topic {} ({}) mirror association cleared", c.topic_name, k.topic_id)
        }
        Record::MirrorTopicStateChange(k, Some(c)) => format!(
            "topic {} ({}) desired {} in mirror {} ({} partitions)",
            c.topic_name, k.topic_id, c.desired_state, c.mirror_name, c.partition_count
        ),
        Record::MirrorTopicStateChange(k, None) => format!("topic {} record removed", k.topic_id),
        Record::MirrorConfig(k, Some(c)) => format!(
            "mirror {} config: source {} (cluster id {}), topics include {:?} exclude {:?}, groups include {:?} exclude {:?}, {} source properties",
            k.mirror_name, c.source_bootstrap, c.source_cluster_id, c.topics_include, c.topics_exclude,
            c.groups_include, c.groups_exclude, c.source_properties.len()
        ),
        Record::MirrorConfig(k, None) => format!("mirror {} deleted", k.mirror_name),
        Record::OffsetMapRun(k, Some(r)) => format!(
            "{} offset map: source [{}, {}) -> destination [{}, {})",
            partition_label(names, &k.partition),
            r.source_start,
            r.source_end(),
            r.destination_start,
            r.destination_end()
        ),
        Record::OffsetMapRun(k, None) => format!("{} offset map run at {} removed", partition_label(names, &k.partition), k.source_start),
        Record::GapDetected(k, Some(g)) => format!(
            "{} GAP: source [{}, {}) never mirrored: {}",
            partition_label(names, &k.partition),
            g.source_start,
            g.source_end,
            g.reason
        ),
        Record::GapDetected(k, None) => format!("{} gap record removed", partition_label(names, &k.partition)),
        Record::GroupOffsetSync(k, Some(v)) => format!(
            "{}: group {} {}[{}] committed {} -> {} (source offset {})",
            k.mirror_name, k.group, topic(&k.topic_id), k.partition, v.from_offset, v.to_offset, v.source_offset
        ),
        Record::GroupOffsetSync(k, None) => format!("{}: group {} {}[{}] sync record removed", k.mirror_name, k.group, topic(&k.topic_id), k.partition),
        Record::TopicConfigSync(k, Some(v)) => format!(
            "{}: topic {} config {} {:?} -> {:?}",
            k.mirror_name, topic(&k.topic_id), k.config_name, v.from, v.to
        ),
        Record::TopicConfigSync(k, None) => format!("{}: topic {} config {} sync record removed", k.mirror_name, topic(&k.topic_id), k.config_name),
        Record::AclSync(k, Some(_)) => format!("{}: ACL created {}", k.mirror_name, k.binding),
        Record::AclSync(k, None) => format!("{}: ACL deleted {}", k.mirror_name, k.binding),
        Record::OffsetMapHole(k, Some(h)) => format!(
            "{} offset map: destination [{}, {}) belongs to no source offset (divergent records kept)",
            partition_label(names, &k.partition),
            h.destination_start,
            h.destination_end()
        ),
        Record::OffsetMapHole(k, None) => format!("{} offset map hole at {} removed", partition_label(names, &k.partition), k.destination_start),
        Record::MirrorProducer(k, Some(p)) => format!(
            "{} writes with producer id {} (epoch {})",
            partition_label(names, k),
            p.producer_id,
            p.producer_epoch
        ),
        Record::MirrorProducer(k, None) => format!("{} producer record removed", partition_label(names, k)),
        Record::SourceEpochs(k, Some(e)) => format!(
            "{} source leader epochs of the mirrored records: {}",
            partition_label(names, k),
            e.entries
                .iter()
                .map(|e| format!("{} from offset {}", e.epoch, e.start_offset))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Record::SourceEpochs(k, None) => format!("{} source leader epochs unknown", partition_label(names, k)),
        Record::MirrorTopicDestination(k, Some(d)) => format!(
            "topic {} is copied into destination topic id {}",
            topic(&k.topic_id),
            d.destination_topic_id
        ),
        Record::MirrorTopicDestination(k, None) => format!("topic {} destination record removed", topic(&k.topic_id)),
        Record::FailbackPlan(k, Some(p)) => {
            let mut s = format!(
                "{} FAILBACK {} from mirror {}: source records [{}, {}) to copy",
                partition_label(names, k),
                p.mode.name(),
                p.forward_mirror,
                p.copy_start,
                p.copy_end
            );
            if p.divergent_end > p.divergent_start {
                s += &format!(
                    ", destination records [{}, {}) {}",
                    p.divergent_start,
                    p.divergent_end,
                    match &p.quarantine_topic {
                        Some(q) => format!("quarantined in {q}"),
                        None => "deleted with the topic".into(),
                    }
                );
            }
            if let Some(r) = &p.reason {
                s += &format!(" ({r})");
            }
            s
        }
        Record::FailbackPlan(k, None) => format!("{} failback plan removed", partition_label(names, k)),
        Record::FailoverReport(k, Some(r)) => format!(
            "{} failover: stopped at source offset {} (leader epoch {}), destination end {} (leader epoch {}); {}",
            partition_label(names, k),
            r.source_offset,
            r.source_leader_epoch,
            r.destination_end_offset,
            r.destination_leader_epoch,
            r.unmirrored_text()
        ),
        Record::FailoverReport(k, None) => format!("{} failover report removed", partition_label(names, k)),
        Record::SourceFence(k, Some(f)) => format!(
            "{}: source write fence on topic {} ({}): ACL {}",
            k.mirror_name, f.topic_name, f.topic_id, k.binding
        ),
        Record::SourceFence(k, None) => format!("{}: source write fence removed: ACL {}", k.mirror_name, k.binding),
        Record::ShardRelease(k, Some(r)) => format!(
            "shard {} released by {} ({}): its next owner starts without fence markers",
            k.shard, r.member, r.reason
        ),
        Record::ShardRelease(k, None) => format!("shard {} release removed", k.shard),
        Record::VerifyResult(k, Some(v)) => {
            let verdict = match (&v.first_difference, &v.error) {
                (Some(d), _) => format!(
                    "{} differ, first at source offset {} → destination offset {} ({}: {})",
                    v.differences, d.source_offset, d.destination_offset, d.field, d.detail
                ),
                (None, Some(e)) => format!("could not finish: {e}"),
                (None, None) => "equal".to_string(),
            };
            format!(
                "{} verified a sample (seed {}) of source offsets {}..{}: {} compared, {verdict}",
                partition_label(names, k),
                v.seed,
                v.from,
                v.through,
                v.compared
            )
        }
        Record::VerifyResult(k, None) => format!("{} verify result removed", partition_label(names, k)),
    }
}

pub(super) fn entry_json(e: &LogEntry) -> serde_json::Value {
    serde_json::json!({
        "offset": e.offset,
        "timestamp_ms": e.timestamp_ms,
        "time": format_ms(e.timestamp_ms),
        "type": e.record.record_type().name(),
        "tombstone": e.record.is_tombstone(),
        "record": e.record,
    })
}

/// Which records an audit shows: the filters of `kmirror log audit`, and
/// of the admin API's `GET /audit`, which tells the same lines.
#[derive(Default)]
pub(crate) struct AuditFilter {
    pub mirror: Option<String>,
    /// Resolved by [`topic_ids`]: a name may have had several ids.
    pub topic_ids: Option<Vec<TopicId>>,
    pub partition: Option<i32>,
    pub since: Option<Bound>,
    pub until: Option<Bound>,
    /// Record type names (`FailoverReport`, …); empty: every type.
    pub types: Vec<String>,
}

impl AuditFilter {
    fn shows(&self, e: &LogEntry) -> bool {
        let from = match self.since {
            Some(Bound::Offset(o)) => o,
            _ => 0,
        };
        e.offset >= from
            && in_bounds(e, self.since, self.until)
            && self
                .mirror
                .as_ref()
                .is_none_or(|m| e.record.mirror_name() == Some(m.as_str()))
            && self
                .topic_ids
                .as_ref()
                .is_none_or(|ids| e.record.topic_id().is_some_and(|id| ids.contains(&id)))
            && self
                .partition
                .is_none_or(|p| e.record.partition() == Some(p))
            && (self.types.is_empty()
                || self
                    .types
                    .iter()
                    .any(|t| t == e.record.record_type().name()))
    }
}

/// The topic ids a `topic` filter means: every id the log knew by that
/// name, or the id itself. Empty when the log knows neither.
pub(crate) fn topic_ids(names: &HashMap<TopicId, String>, topic: &str) -> Vec<TopicId> {
    let mut ids: Vec<TopicId> = names
        .iter()
        .filter(|(_, n)| *n == topic)
        .map(|(id, _)| *id)
        .collect();
    if let Ok(id) = topic.parse::<TopicId>() {
        ids.push(id);
    }
    ids
}

/// One shown record, told as a sentence.
pub(crate) struct AuditLine {
    pub offset: Offset,
    pub timestamp_ms: i64,
    pub record_type: &'static str,
    pub text: String,
}

impl AuditLine {
    /// As the admin API answers it (the `offset`, `timestamp_ms`, `time`
    /// and `type` of `--json`, and the sentence as `text`).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "time": format_ms(self.timestamp_ms),
            "type": self.record_type,
            "text": self.text,
        })
    }
}

impl std::fmt::Display for AuditLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}  #{:<8} {:<22} {}",
            format_ms(self.timestamp_ms),
            self.offset,
            self.record_type,
            self.text
        )
    }
}

/// Walks the whole log (a partition's previous state needs every record
/// before it) and hands each record `filter` shows to `each`, with its
/// sentence when `tell` (JSON output needs none); `progress` draws the bar
/// of a long walk on a terminal (never in the daemon). Blocking: call it on
/// a blocking pool in the daemon.
pub(crate) fn walk(
    log: &dyn EventLog,
    names: &HashMap<TopicId, String>,
    filter: &AuditFilter,
    tell: bool,
    progress: bool,
    mut each: impl FnMut(&LogEntry, Option<AuditLine>) -> CliResult<()>,
) -> CliResult<()> {
    let mut states: HashMap<MirrorPartitionKey, PartitionState> = HashMap::new();
    let mut p = progress.then(|| Progress::new("audit", log.end_offset()));
    for e in log.read(0)? {
        let e = e?;
        if let Some(p) = &mut p {
            p.tick();
        }
        let prev = match &e.record {
            Record::MirrorPartitionState(k, v) => {
                let prev = states.get(k).copied();
                match v {
                    Some(v) => states.insert(k.clone(), v.state),
                    None => states.remove(k),
                };
                prev
            }
            _ => None,
        };
        if !filter.shows(&e) {
            continue;
        }
        let line = tell.then(|| AuditLine {
            offset: e.offset,
            timestamp_ms: e.timestamp_ms,
            record_type: e.record.record_type().name(),
            text: describe(&e.record, names, prev),
        });
        each(&e, line)?;
    }
    if let Some(p) = p {
        p.finish();
    }
    Ok(())
}

pub(super) fn audit(source: &Source, a: AuditArgs) -> CliResult<ExitCode> {
    let since = a
        .since
        .as_deref()
        .map(|s| parse_bound("--since", s))
        .transpose()?;
    let until = a
        .until
        .as_deref()
        .map(|s| parse_bound("--until", s))
        .transpose()?;
    let log = open_ro(source)?;
    // Names come from the folded image so records written before a topic's
    // latest state change still show its name.
    let image = log.load_image()?;
    let names = names_of(&image);
    let topic_filter = match &a.topic {
        None => None,
        Some(t) => {
            let ids = topic_ids(&names, t);
            if ids.is_empty() {
                return Err(
                    format!("--topic {t:?}: no such topic name or topic id in the log").into(),
                );
            }
            Some(ids)
        }
    };
    let filter = AuditFilter {
        mirror: a.mirror,
        topic_ids: topic_filter,
        partition: a.partition,
        since,
        until,
        types: Vec::new(),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut shown = 0u64;
    walk(log.as_ref(), &names, &filter, !a.json, true, |e, line| {
        shown += 1;
        match line {
            Some(line) => writeln!(out, "{line}")?,
            None => writeln!(out, "{}", entry_json(e))?,
        }
        Ok(())
    })?;
    out.flush()?;
    if shown == 0 && !a.json {
        eprintln!("kmirror log audit: no records matched");
    }
    Ok(ExitCode::SUCCESS)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01"), Some(0));
        let t = parse_rfc3339_ms("2026-05-01T12:34:56.789Z").unwrap();
        assert_eq!(format_ms(t), "2026-05-01T12:34:56.789Z");
        assert_eq!(parse_rfc3339_ms("2026-05-01T14:34:56.789+02:00"), Some(t));
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        // A number too large names its flag (it said only "number too
        // large to fit in target type").
        let e = parse_bound("--since", "99999999999999999999")
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("--since \"99999999999999999999\""),
            "{e}"
        );
    }

    #[test]
    fn failover_and_failback_read_as_sentences() {
        use kmirror_events::{FailbackMode, FailbackPlan, FailoverReport};
        let id = TopicId([7; 16]);
        let names = HashMap::from([(id, "orders".to_string())]);
        let key = MirrorPartitionKey::new("east", id, 3);
        let report = FailoverReport {
            source_offset: 120,
            source_leader_epoch: 2,
            destination_end_offset: 120,
            destination_leader_epoch: 0,
            unmirrored: None,
            source_error: Some("the source did not answer within 10 s".into()),
        };
        assert_eq!(
            describe(&Record::FailoverReport(key.clone(), Some(report)), &names, None),
            "east/orders[3] failover: stopped at source offset 120 (leader epoch 2), destination end 120 (leader epoch 0); source unreachable, what was not mirrored is unknown: the source did not answer within 10 s"
        );
        let plan = FailbackPlan {
            forward_mirror: "west".into(),
            mode: FailbackMode::Delta,
            destination_position: 120,
            source_position: 120,
            divergent_start: 120,
            divergent_end: 125,
            copy_start: 120,
            copy_end: 160,
            quarantine_topic: Some("orders.kmirror-divergent".into()),
            reason: None,
        };
        assert_eq!(
            describe(&Record::FailbackPlan(key, Some(plan)), &names, None),
            "east/orders[3] FAILBACK delta from mirror west: source records [120, 160) to copy, destination records [120, 125) quarantined in orders.kmirror-divergent"
        );
    }

    #[test]
    fn a_verify_result_reads_as_a_sentence() {
        use kmirror_events::{VerifyDifference, VerifyResult};
        let id = TopicId([7; 16]);
        let names = HashMap::from([(id, "orders".to_string())]);
        let key = MirrorPartitionKey::new("east", id, 3);
        let mut result = VerifyResult {
            verified_at_ms: 1,
            sample: 100,
            seed: 42,
            from: 0,
            through: 500,
            compared: 100,
            equal: 99,
            skipped: 0,
            differences: 1,
            first_difference: Some(VerifyDifference {
                source_offset: 7,
                destination_offset: 7,
                field: "value".into(),
                detail: r#""a" ≠ "b""#.into(),
            }),
            error: None,
        };
        assert_eq!(
            describe(
                &Record::VerifyResult(key.clone(), Some(result.clone())),
                &names,
                None
            ),
            r#"east/orders[3] verified a sample (seed 42) of source offsets 0..500: 100 compared, 1 differ, first at source offset 7 → destination offset 7 (value: "a" ≠ "b")"#
        );
        result.first_difference = None;
        assert_eq!(
            describe(&Record::VerifyResult(key, Some(result)), &names, None),
            "east/orders[3] verified a sample (seed 42) of source offsets 0..500: 100 compared, equal"
        );
    }
}
