//! `kmirror log …`: offline tools over the event log — replay, audit,
//! verify, export, compact.
//!
//! Read-only commands (`replay`, `audit`, `verify`, `export`) open the log
//! read-only: they never repair, compact or otherwise write it, so they are
//! safe to point at evidence. Only `compact` writes.
//!
//! The log is a data directory (`--data-dir`, sled) or the state topic on a
//! cluster (`--bootstrap-server`): the clustered daemon's log, whose
//! partitions are the coordinator shards' logs (`--state-partition` picks
//! one), or the copy a one-node daemon publishes. The commands print the
//! same for the same records either way.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use kmirror_actors::state_log::StateLogOptions;
use kmirror_events::{MirrorStateImage, PartitionState};
use kmirror_store::{verify, verify_entries, EventLog, SledLog};

pub(crate) mod audit;
mod read;

use audit::{audit, entry_json, names_of, partition_label, AuditArgs};
use read::{load_with_progress, naming_dir, open_ro, open_sled_ro, CliResult, Progress, Source};

#[derive(Args)]
pub struct LogArgs {
    /// The daemon's data directory (holds the event log).
    #[arg(long, global = true, env = "KMIRROR_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Read the state topic on this cluster instead of a data directory.
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        conflicts_with = "data_dir"
    )]
    bootstrap_server: Option<String>,
    /// The state topic (with --bootstrap-server).
    #[arg(long, global = true, value_name = "NAME", default_value = kmirror_actors::state_topic::DEFAULT_STATE_TOPIC)]
    state_topic: String,
    /// Only this partition of the state topic (one coordinator shard's log,
    /// with its own offsets); default: every partition, in time order.
    #[arg(long, global = true, value_name = "N")]
    state_partition: Option<i32>,
    /// Kafka client properties for --bootstrap-server (`security.protocol`,
    /// `sasl.*`, `ssl.*`), Java `.properties` format.
    #[arg(long, global = true, value_name = "FILE")]
    command_config: Option<PathBuf>,
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
    /// Cut a damaged tail (the newest batches failing their checksum, or
    /// missing records) back to the last whole batch: the daemon refuses
    /// to start on one. The cut records are lost; restoring the data dir
    /// from a backup keeps them.
    Repair,
    /// Snapshot the state, then drop superseded records and old tombstones.
    Compact {
        /// Keep tombstones at least this long, so lagging readers see deletes.
        #[arg(long, default_value_t = 24 * 3600 * 1000, value_name = "MS")]
        tombstone_retention_ms: i64,
    },
}

pub fn run(args: LogArgs) -> ExitCode {
    let source = match source_of(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kmirror log: error: {e}");
            return ExitCode::from(2);
        }
    };
    match dispatch(&source, args.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kmirror log: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where the log is, from the flags; an error is a usage error (exit 2).
fn source_of(args: &LogArgs) -> CliResult<Source> {
    if let Some(bootstrap) = &args.bootstrap_server {
        if bootstrap.trim().is_empty() || !bootstrap.contains(':') {
            return Err(format!("--bootstrap-server {bootstrap:?}: expected HOST:PORT").into());
        }
        if matches!(args.state_partition, Some(p) if p < 0) {
            return Err("--state-partition must be 0 or more".into());
        }
        let mut options = StateLogOptions::new(bootstrap);
        if let Some(f) = &args.command_config {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("--command-config {}: {e}", f.display()))?;
            let props = kmirror_actors::props::parse(&text)
                .map_err(|e| format!("--command-config {}: {e}", f.display()))?;
            options.client.extend(props);
            options
                .client
                .insert("bootstrap.servers".into(), bootstrap.clone());
        }
        options.topic = args.state_topic.clone();
        return Ok(Source::Topic {
            options,
            partition: args.state_partition,
        });
    }
    if args.command_config.is_some() || args.state_partition.is_some() {
        return Err("--command-config and --state-partition need --bootstrap-server".into());
    }
    let Some(dir) = args.data_dir.clone() else {
        return Err(
            "--data-dir DIR (or KMIRROR_DATA_DIR) or --bootstrap-server HOST:PORT is required"
                .into(),
        );
    };
    if !dir.is_dir() {
        return Err(format!(
            "data directory {} does not exist or is not a directory",
            dir.display()
        )
        .into());
    }
    Ok(Source::Dir(dir))
}

fn dispatch(source: &Source, command: LogCommand) -> CliResult<ExitCode> {
    match command {
        LogCommand::Replay { json } => replay(source, json),
        LogCommand::Audit(a) => audit(source, a),
        LogCommand::Verify {
            destination,
            destination_config,
        } => verify_cmd(source, destination, destination_config),
        LogCommand::Export => export(source),
        LogCommand::Repair => match source {
            Source::Dir(dir) => repair(dir),
            Source::Topic { .. } => Err(
                "a state topic is never repaired by cutting: `kmirror log repair` works on a --data-dir"
                    .into(),
            ),
        },
        LogCommand::Compact {
            tombstone_retention_ms,
        } => match source {
            Source::Dir(dir) => compact(dir, tombstone_retention_ms),
            Source::Topic { .. } => Err(
                "the broker compacts the state topic (cleanup.policy=compact); `kmirror log compact` works on a --data-dir"
                    .into(),
            ),
        },
    }
}

fn replay(source: &Source, json: bool) -> CliResult<ExitCode> {
    let log = open_ro(source)?;
    let image = load_with_progress(&*log)?;
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
        source.label(),
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

fn verify_cmd(
    source: &Source,
    destination: Option<String>,
    destination_config: Option<PathBuf>,
) -> CliResult<ExitCode> {
    // The sled walk also checks raw bytes, batch framing and snapshots; a
    // topic holds each record in its own envelope, decoded by `read`.
    let (log, mut report): (Box<dyn EventLog>, _) = match source {
        Source::Dir(dir) => {
            let sled = open_sled_ro(dir)?;
            let mut p = Progress::new("verify", sled.end_offset());
            let report = verify(&sled, |_| p.tick())?;
            p.finish();
            (Box::new(sled), report)
        }
        Source::Topic { .. } => {
            let log = open_ro(source)?;
            let mut p = Progress::new("verify", log.end_offset());
            let report = verify_entries(log.read(0)?, |_| p.tick())?;
            p.finish();
            (log, report)
        }
    };
    if let Some(bootstrap) = destination {
        let mut props = match destination_config {
            Some(f) => {
                let text = std::fs::read_to_string(&f)
                    .map_err(|e| format!("--destination-config {}: {e}", f.display()))?;
                kmirror_actors::props::parse(&text)
                    .map_err(|e| format!("--destination-config {}: {e}", f.display()))?
            }
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
            "FAILED: {} problems in {} records; the daemon refuses a damaged tail: restore the data dir from a backup, or `kmirror log repair` cuts the tail back to the last whole batch (its records are lost)",
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

fn export(source: &Source) -> CliResult<ExitCode> {
    let log = open_ro(source)?;
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

fn repair(dir: &std::path::Path) -> CliResult<ExitCode> {
    let log = SledLog::open_with(
        dir,
        kmirror_store::SledOptions {
            create: false,
            repair_tail: true,
            ..Default::default()
        },
    )
    .map_err(|e| naming_dir(dir, e))?;
    let report = log.open_report();
    match report.damaged_from {
        None => println!(
            "OK: no damaged tail; nothing changed (end offset {})",
            log.end_offset()
        ),
        Some(from) => println!(
            "REPAIRED: cut {} damaged records ({} bytes) from offset {from}; the log now ends at offset {}",
            report.damaged_records,
            report.damaged_bytes,
            log.end_offset()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn compact(dir: &std::path::Path, retention_ms: i64) -> CliResult<ExitCode> {
    let log = SledLog::open_with(
        dir,
        kmirror_store::SledOptions {
            create: false,
            ..Default::default()
        },
    )
    .map_err(|e| naming_dir(dir, e))?;
    let image = load_with_progress(&log)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let stats = log.snapshot_and_compact(&image, now, retention_ms)?;
    println!(
        "compacted: examined {} records, removed {} superseded and {} expired tombstones; snapshot at offset {}",
        stats.examined, stats.removed_superseded, stats.removed_tombstones, image.end_offset()
    );
    Ok(ExitCode::SUCCESS)
}
