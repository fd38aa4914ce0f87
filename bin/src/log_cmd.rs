//! `kmirror log …`: offline tools over the event log — replay, audit,
//! verify, export, compact.
//!
//! Read-only commands (`replay`, `audit`, `verify`, `export`) open the log
//! read-only: they never repair, compact or otherwise write it, so they are
//! safe to point at evidence. Only `compact` writes.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use kmirror_events::{
    MirrorPartitionKey, MirrorStateImage, Offset, PartitionState, Record, TopicId,
};
use kmirror_store::{verify, EventLog, LogEntry, SledLog};

#[derive(Args)]
pub struct LogArgs {
    /// The daemon's data directory (holds the event log).
    #[arg(long, global = true, env = "KMIRROR_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Subcommand)]
enum LogCommand {
    /// Rebuild the state from the log and print a summary.
    Replay {
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A human timeline of what happened, filtered.
    Audit(AuditArgs),
    /// Check every record's CRC, format and batch framing, and the offset
    /// maps' invariants; exit 1 on damage.
    Verify {
        /// Also check each offset map against this destination cluster: no
        /// recorded length or hole may run past the partition's end.
        #[arg(long, value_name = "BOOTSTRAP")]
        destination: Option<String>,
        /// Kafka client properties for the destination (`security.protocol`,
        /// `sasl.*`, `ssl.*`), as in the daemon's `[destination]`.
        #[arg(long, value_name = "FILE", requires = "destination")]
        destination_config: Option<PathBuf>,
    },
    /// Write every record as JSON lines to stdout.
    Export,
    /// Snapshot the state, then drop superseded records and old tombstones.
    Compact {
        /// Keep tombstones at least this long, so lagging readers see deletes.
        #[arg(long, default_value_t = 24 * 3600 * 1000, value_name = "MS")]
        tombstone_retention_ms: i64,
    },
}

#[derive(Args)]
struct AuditArgs {
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

pub fn run(args: LogArgs) -> ExitCode {
    let Some(dir) = args.data_dir.clone() else {
        eprintln!("kmirror log: error: --data-dir DIR is required (or set KMIRROR_DATA_DIR)");
        return ExitCode::from(2);
    };
    match dispatch(&dir, args.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kmirror log: error: {e}");
            ExitCode::FAILURE
        }
    }
}

type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

fn dispatch(dir: &Path, command: LogCommand) -> CliResult<ExitCode> {
    if !dir.is_dir() {
        return Err(format!(
            "data directory {} does not exist or is not a directory",
            dir.display()
        )
        .into());
    }
    match command {
        LogCommand::Replay { json } => replay(dir, json),
        LogCommand::Audit(a) => audit(dir, a),
        LogCommand::Verify {
            destination,
            destination_config,
        } => verify_cmd(dir, destination, destination_config),
        LogCommand::Export => export(dir),
        LogCommand::Compact {
            tombstone_retention_ms,
        } => compact(dir, tombstone_retention_ms),
    }
}

fn open_ro(dir: &Path) -> CliResult<SledLog> {
    let log = SledLog::open_read_only(dir)?;
    if let Some(from) = log.open_report().damaged_from {
        eprintln!(
            "kmirror log: warning: damaged tail from offset {from} ({} records) is ignored; run `kmirror log verify` for details",
            log.open_report().damaged_records
        );
    }
    Ok(log)
}

/// A progress bar on stderr, drawn only when stdout is a terminal (so piped
/// output and CI logs stay clean).
struct Progress {
    enabled: bool,
    total: u64,
    done: u64,
    started: Instant,
    label: &'static str,
}

impl Progress {
    fn new(label: &'static str, total: u64) -> Self {
        Progress {
            enabled: std::io::stdout().is_terminal()
                && std::io::stderr().is_terminal()
                && total > 50_000,
            total,
            done: 0,
            started: Instant::now(),
            label,
        }
    }

    fn tick(&mut self) {
        self.done += 1;
        if self.enabled && self.done.is_multiple_of(65_536) {
            self.draw();
        }
    }

    fn draw(&self) {
        let frac = (self.done as f64 / self.total.max(1) as f64).min(1.0);
        let width = 30;
        let filled = (frac * width as f64) as usize;
        let rate = self.done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        eprint!(
            "\r{} [{}{}] {:>3.0}% {}/{} ({:.0} rec/s)",
            self.label,
            "=".repeat(filled),
            " ".repeat(width - filled),
            frac * 100.0,
            self.done,
            self.total,
            rate
        );
        let _ = std::io::stderr().flush();
    }

    fn finish(&self) {
        if self.enabled {
            self.draw();
            eprintln!();
        }
    }
}

fn load_with_progress(log: &SledLog) -> CliResult<MirrorStateImage> {
    let mut image = log.latest_snapshot()?.unwrap_or_default();
    let mut p = Progress::new(
        "replay",
        log.end_offset().saturating_sub(image.end_offset()),
    );
    for e in log.read(image.end_offset())? {
        let e = e?;
        image.replay(e.offset, e.record);
        p.tick();
    }
    p.finish();
    Ok(image)
}

fn replay(dir: &Path, json: bool) -> CliResult<ExitCode> {
    let log = open_ro(dir)?;
    let image = load_with_progress(&log)?;
    let summary = image.summary();
    let mut out = std::io::stdout().lock();
    if json {
        let mirrors: Vec<_> = image
            .mirrors()
            .map(|(name, c)| {
                serde_json::json!({
                    "name": name,
                    "source_bootstrap": c.source_bootstrap,
                    "source_cluster_id": c.source_cluster_id,
                    "topics_include": c.topics_include,
                    "topics_exclude": c.topics_exclude,
                    "topics": image.topics_of(name).map(|t| serde_json::json!({
                        "name": t.change.topic_name,
                        "topic_id": t.change.topic_id.to_string(),
                        "partitions": t.change.partition_count,
                        "desired_state": t.change.desired_state.kip_name(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let failed: Vec<_> = image
            .partition_states()
            .filter(|(_, v)| v.state == PartitionState::Failed)
            .map(|(k, v)| {
                serde_json::json!({
                    "mirror": k.mirror_name, "topic_id": k.topic_id.to_string(), "partition": k.partition,
                    "error": v.error_message, "retry_attempt": v.retry_attempt,
                    "previous_state": v.previous_state.kip_name(),
                })
            })
            .collect();
        let v = serde_json::json!({ "summary": summary, "mirrors": mirrors, "failed_partitions": failed });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "event log {}: end offset {}",
        dir.display(),
        summary.end_offset
    )?;
    writeln!(out, "mirrors: {}", summary.mirrors)?;
    for (name, c) in image.mirrors() {
        let topics: Vec<_> = image.topics_of(name).collect();
        writeln!(
            out,
            "  {name}: source {} (cluster id {}), {} topics, include {:?}, exclude {:?}",
            c.source_bootstrap,
            if c.source_cluster_id.is_empty() {
                "?"
            } else {
                &c.source_cluster_id
            },
            topics.len(),
            c.topics_include,
            c.topics_exclude
        )?;
        for t in topics {
            writeln!(
                out,
                "    {} ({}) partitions={} desired={}",
                t.change.topic_name,
                t.change.topic_id,
                t.change.partition_count,
                t.change.desired_state
            )?;
        }
    }
    writeln!(out, "partitions: {}", summary.partitions)?;
    for (state, n) in &summary.partitions_by_state {
        writeln!(out, "  {state}: {n}")?;
    }
    for (k, v) in image
        .partition_states()
        .filter(|(_, v)| v.state == PartitionState::Failed)
    {
        writeln!(
            out,
            "  FAILED {}: retry {} previous {} error {:?}",
            partition_label(&names_of(&image), k),
            if v.retry_attempt == -1 {
                "non-retryable".to_string()
            } else {
                v.retry_attempt.to_string()
            },
            v.previous_state,
            v.error_message.as_deref().unwrap_or("")
        )?;
    }
    writeln!(
        out,
        "offset-map runs: {}, gaps: {}, group offsets: {}, topic configs: {}, owned ACLs: {}",
        summary.offset_runs,
        summary.gaps,
        summary.group_offsets,
        summary.topic_configs,
        summary.acls
    )?;
    Ok(ExitCode::SUCCESS)
}

fn names_of(image: &MirrorStateImage) -> HashMap<TopicId, String> {
    image
        .topics()
        .map(|(id, t)| (*id, t.change.topic_name.clone()))
        .collect()
}

fn partition_label(names: &HashMap<TopicId, String>, k: &MirrorPartitionKey) -> String {
    match names.get(&k.topic_id) {
        Some(n) => format!("{}/{}[{}]", k.mirror_name, n, k.partition),
        None => format!("{}/{}[{}]", k.mirror_name, k.topic_id, k.partition),
    }
}

/// A `--since`/`--until` bound: a log offset or a wall-clock time.
#[derive(Clone, Copy)]
enum Bound {
    Offset(Offset),
    TimeMs(i64),
}

fn parse_bound(flag: &str, s: &str) -> CliResult<Bound> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(Bound::Offset(s.parse()?));
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
    }
}

fn entry_json(e: &LogEntry) -> serde_json::Value {
    serde_json::json!({
        "offset": e.offset,
        "timestamp_ms": e.timestamp_ms,
        "time": format_ms(e.timestamp_ms),
        "type": e.record.record_type().name(),
        "tombstone": e.record.is_tombstone(),
        "record": e.record,
    })
}

fn audit(dir: &Path, a: AuditArgs) -> CliResult<ExitCode> {
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
    let log = open_ro(dir)?;
    // Names come from the folded image so records written before a topic's
    // latest state change still show its name.
    let image = log.load_image()?;
    let names = names_of(&image);
    let topic_filter: Option<Vec<TopicId>> = a.topic.as_ref().map(|t| {
        let mut ids: Vec<TopicId> = names
            .iter()
            .filter(|(_, n)| *n == t)
            .map(|(id, _)| *id)
            .collect();
        if let Ok(id) = t.parse::<TopicId>() {
            ids.push(id);
        }
        ids
    });
    if let Some(ids) = &topic_filter {
        if ids.is_empty() {
            return Err(format!(
                "--topic {:?}: no such topic name or topic id in the log",
                a.topic.unwrap_or_default()
            )
            .into());
        }
    }
    let from = match since {
        Some(Bound::Offset(o)) => o,
        _ => 0,
    };
    let mut states: HashMap<MirrorPartitionKey, PartitionState> = HashMap::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut shown = 0u64;
    let mut p = Progress::new("audit", log.end_offset());
    for e in log.read(0)? {
        let e = e?;
        p.tick();
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
        if e.offset < from || !in_bounds(&e, since, until) {
            continue;
        }
        if let Some(m) = &a.mirror {
            if e.record.mirror_name() != Some(m.as_str()) {
                continue;
            }
        }
        if let Some(ids) = &topic_filter {
            if !e.record.topic_id().is_some_and(|id| ids.contains(&id)) {
                continue;
            }
        }
        if let Some(part) = a.partition {
            if e.record.partition() != Some(part) {
                continue;
            }
        }
        shown += 1;
        if a.json {
            writeln!(out, "{}", entry_json(&e))?;
        } else {
            writeln!(
                out,
                "{}  #{:<8} {:<22} {}",
                format_ms(e.timestamp_ms),
                e.offset,
                e.record.record_type().name(),
                describe(&e.record, &names, prev)
            )?;
        }
    }
    out.flush()?;
    p.finish();
    if shown == 0 && !a.json {
        eprintln!("kmirror log audit: no records matched");
    }
    Ok(ExitCode::SUCCESS)
}

fn verify_cmd(
    dir: &Path,
    destination: Option<String>,
    destination_config: Option<PathBuf>,
) -> CliResult<ExitCode> {
    let log = open_ro(dir)?;
    let mut p = Progress::new("verify", log.end_offset());
    let mut report = verify(&log, |_| p.tick())?;
    p.finish();
    if let Some(bootstrap) = destination {
        let mut props = match destination_config {
            Some(f) => crate::props::parse(&std::fs::read_to_string(&f)?)
                .map_err(|e| format!("{}: {e}", f.display()))?,
            None => Default::default(),
        };
        props.insert("bootstrap.servers".into(), bootstrap);
        let image = log.replay_all()?;
        let problems = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(maps_against_destination(&image, props))?;
        report
            .problems
            .extend(problems.into_iter().map(|p| (report.end_offset, p)));
    }
    if report.is_ok() {
        println!(
            "OK: {} records ({} bytes), {} snapshots, end offset {}",
            report.records, report.bytes, report.snapshots, report.end_offset
        );
        Ok(ExitCode::SUCCESS)
    } else {
        for (offset, problem) in &report.problems {
            println!("DAMAGED at offset {offset}: {problem}");
        }
        println!(
            "FAILED: {} problems in {} records; a writable open (the daemon) cuts a damaged tail back to the last whole batch",
            report.problems.len(),
            report.records
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Every partition's recorded lengths and holes end at or below the
/// destination partition's end: kmirror records only what the destination
/// acknowledged, so anything else means the destination lost records (or the
/// log belongs to another destination).
async fn maps_against_destination(
    image: &MirrorStateImage,
    props: std::collections::BTreeMap<String, String>,
) -> CliResult<Vec<String>> {
    use kmirror_actors::cluster::kafka::KafkaCluster;
    use kmirror_actors::cluster::ClusterView;
    use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};
    use kmirror_actors::kafka::KafkaClient;
    let destination = KafkaCluster::new(
        KafkaClient::from_properties(&props).await?,
        FetchOptions::default(),
    );
    let mut problems = Vec::new();
    for (key, map) in image.offset_maps() {
        let recorded = map.recorded_destination_end();
        let Some(topic) = image.topic(&key.topic_id) else {
            continue;
        };
        let name = &topic.change.topic_name;
        let tp = TopicPartition::new(name, key.partition);
        match destination.bounds(&tp).await {
            Ok(b) if b.end >= recorded => {}
            Ok(b) => problems.push(format!(
                "offset map of {name}-{} (mirror {}) records destination offsets up to {recorded}, but the destination partition ends at {}",
                key.partition, key.mirror_name, b.end
            )),
            Err(e) => problems.push(format!(
                "offset map of {name}-{} (mirror {}): cannot read the destination partition: {e}",
                key.partition, key.mirror_name
            )),
        }
    }
    Ok(problems)
}

fn export(dir: &Path) -> CliResult<ExitCode> {
    let log = open_ro(dir)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut p = Progress::new("export", log.end_offset());
    for e in log.read(0)? {
        let e = e?;
        p.tick();
        serde_json::to_writer(&mut out, &entry_json(&e))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    p.finish();
    Ok(ExitCode::SUCCESS)
}

fn compact(dir: &Path, retention_ms: i64) -> CliResult<ExitCode> {
    let log = SledLog::open_with(
        dir,
        kmirror_store::SledOptions {
            create: false,
            ..Default::default()
        },
    )?;
    let image = load_with_progress(&log)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let stats = log.snapshot_and_compact(&image, now, retention_ms)?;
    println!(
        "compacted: examined {} records, removed {} superseded and {} expired tombstones; snapshot at offset {}",
        stats.examined, stats.removed_superseded, stats.removed_tombstones, image.end_offset()
    );
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
    }
}
