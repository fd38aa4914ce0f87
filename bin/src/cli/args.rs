//! The command line of `kmirror mirror …`, `kmirror offsets …` and
//! `kmirror cluster …`: clap
//! definitions only, named after the KIP's `kafka-cluster-mirrors.sh` flags.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where `kmirror daemon` listens by default.
const DEFAULT_ADMIN_URL: &str = "http://127.0.0.1:9650";

#[derive(Args)]
pub struct AdminArg {
    /// The daemon's admin API.
    #[arg(long, global = true, value_name = "URL", env = "KMIRROR_ADMIN_URL", default_value = DEFAULT_ADMIN_URL)]
    pub(super) admin: String,
    /// The CA (PEM) that signed the daemon's certificate, for an https://
    /// admin URL. The bearer token, when the daemon has `admin_token`, is
    /// read from KMIRROR_ADMIN_TOKEN only (a flag would show in `ps`).
    #[arg(long, global = true, value_name = "PEM", env = "KMIRROR_ADMIN_CA")]
    pub(super) admin_ca: Option<PathBuf>,
}

#[derive(Args)]
pub struct MirrorArgs {
    #[command(flatten)]
    pub(super) admin: AdminArg,
    #[command(subcommand)]
    pub(super) command: MirrorCommand,
}

#[derive(Args)]
pub(super) struct Output {
    /// Print the daemon's JSON answer instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Args)]
pub(super) struct Topics {
    /// Topic names or regexes, comma-separated.
    #[arg(long, value_delimiter = ',', required = true, value_name = "TOPICS")]
    pub(super) topics: Vec<String>,
}

#[derive(Args)]
pub(super) struct Lock {
    /// Refuse (INVALID_CLUSTER_MIRROR_STATES) if a topic changed state after
    /// this event-log offset (see `GET /state-offset`).
    #[arg(long, value_name = "N")]
    pub(super) state_validation_offset: Option<u64>,
}

#[derive(Args)]
pub(super) struct Operation {
    #[arg(long)]
    pub(super) mirror: String,
    #[command(flatten)]
    pub(super) topics: Topics,
    #[command(flatten)]
    pub(super) lock: Lock,
    #[command(flatten)]
    pub(super) output: Output,
}

#[derive(Subcommand)]
pub(super) enum MirrorCommand {
    /// Create a mirror from a source-connection properties file.
    Create {
        #[arg(long)]
        mirror: String,
        /// Kafka-style properties: bootstrap.servers, security.protocol,
        /// mirror.topics.include, …
        #[arg(long, value_name = "FILE")]
        mirror_config: PathBuf,
        /// Added to mirror.topics.include.
        #[arg(long, value_delimiter = ',', value_name = "TOPICS")]
        topics: Vec<String>,
        /// Added to mirror.topics.exclude.
        #[arg(long, value_delimiter = ',', value_name = "PATTERNS")]
        exclude: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
    /// List mirrors: MIRROR TOPICS SOURCE-CLUSTER-ID SOURCE-BOOTSTRAP-SERVER.
    List {
        #[command(flatten)]
        output: Output,
    },
    /// Describe the partitions of one mirror (or all).
    Describe {
        #[arg(long)]
        mirror: Option<String>,
        /// Only FAILED partitions, with their retry count and error.
        #[arg(long)]
        failed: bool,
        /// Refresh until Ctrl-C: redrawn in place on a terminal, appended
        /// plain lines otherwise; progress bars for partitions still copying.
        #[arg(long, conflicts_with = "json")]
        watch: bool,
        /// Seconds between refreshes of `--watch`.
        #[arg(long, value_name = "SECS", default_value = "2", requires = "watch", value_parser = positive_seconds)]
        interval: f64,
        #[command(flatten)]
        output: Output,
    },
    /// Start mirroring topics (and save the patterns for auto-discovery).
    Start {
        #[command(flatten)]
        op: Operation,
        /// Patterns never to mirror, comma-separated.
        #[arg(long, value_delimiter = ',', value_name = "PATTERNS")]
        exclude: Vec<String>,
        /// Take topics back that a mirror on the source copied from this
        /// destination: `delta` (keep what agrees, quarantine what only the
        /// destination has, copy the rest; the default when possible) or
        /// `from-scratch` (re-create the destination topics, copy all).
        #[arg(long, value_parser = ["delta", "from-scratch"])]
        failback: Option<String>,
        /// Print the plan per partition and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop mirroring topics — failover: the destination topics become
    /// writable. Waits until every partition is STOPPED, then prints each
    /// one's LastMirrorEpochs and what the source still held that was not
    /// mirrored (records, bytes, seconds behind), or that the source could
    /// not be read.
    Stop {
        #[command(flatten)]
        op: Operation,
        /// Print the report a stop would give now; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Planned switchover: deny WRITE on the source topics with an ACL
        /// kmirror records (and removes with `unfence`, a start of the
        /// topics or the mirror's delete) — or, when the source has no
        /// authorizer, wait until no new offsets appear — then drain every
        /// partition to lag 0, then stop.
        #[arg(long)]
        fence_source: bool,
        /// How long each wait may take (fence and drain; stop), in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_SECONDS))]
        timeout: u64,
        /// With --fence-source and a source without an authorizer: how long
        /// its end offsets must stay unchanged, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 5000)]
        quiet_ms: u64,
    },
    /// Remove kmirror's write fence (`stop --fence-source`) from source
    /// topics: exactly the ACLs it created.
    Unfence {
        #[arg(long)]
        mirror: String,
        #[command(flatten)]
        topics: Topics,
        #[command(flatten)]
        output: Output,
    },
    /// Pause mirroring topics.
    Pause(Operation),
    /// Resume paused topics.
    Resume(Operation),
    /// Send FAILED partitions back to their previous state, retries cleared.
    Recover {
        #[arg(long)]
        mirror: String,
        #[command(flatten)]
        topics: Topics,
        #[command(flatten)]
        output: Output,
    },
    /// Delete a mirror whose topics are all STOPPED.
    Delete {
        #[arg(long)]
        mirror: String,
        #[command(flatten)]
        lock: Lock,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub(super) admin: AdminArg,
    #[command(subcommand)]
    pub(super) command: ClusterCommand,
}

#[derive(Subcommand)]
pub(super) enum ClusterCommand {
    /// The members of a clustered daemon, its generation, and which node
    /// coordinates which state partition.
    Status {
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Args)]
pub struct OffsetsArgs {
    #[command(flatten)]
    pub(super) admin: AdminArg,
    #[command(subcommand)]
    pub(super) command: OffsetsCommand,
}

#[derive(Subcommand)]
pub(super) enum OffsetsCommand {
    /// The destination offset for a source offset, from the offset map.
    Translate {
        #[arg(long)]
        mirror: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        offset: i64,
        #[command(flatten)]
        output: Output,
    },
}

/// The longest wait a command takes (a day): larger numbers of seconds
/// overflowed the milliseconds and deadlines made of them.
const MAX_SECONDS: u64 = 86_400;

/// `--interval`: a positive number of seconds, at most [`MAX_SECONDS`].
fn positive_seconds(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= MAX_SECONDS as f64 => Ok(s),
        _ => Err(format!(
            "expected a positive number of seconds, at most {MAX_SECONDS}, got {v:?}"
        )),
    }
}

/// `kmirror verify`: compare the copy with the source, record by record.
#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub(super) admin: AdminArg,
    #[arg(long)]
    pub(super) mirror: String,
    /// Topic names of the mirror, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_name = "TOPICS")]
    pub(super) topics: Vec<String>,
    /// Compare source offsets below OFFSET only (default: all the map
    /// records as copied).
    #[arg(long, value_name = "OFFSET", conflicts_with = "sample")]
    pub(super) through: Option<i64>,
    /// Compare N records per partition, drawn with --seed, instead of all.
    #[arg(long, value_name = "N")]
    pub(super) sample: Option<u64>,
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub(super) seed: u64,
    /// Give up after this long (partitions not done report an error).
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    pub(super) timeout_ms: u64,
    #[command(flatten)]
    pub(super) output: Output,
}
