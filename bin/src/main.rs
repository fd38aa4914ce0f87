//! The `kmirror` binary: daemon, mirror CLI and event-log tools.

mod admin_auth;
mod api;
mod cli;
mod clustered;
mod daemon;
mod http;
mod log_cmd;
mod metrics;
mod settings;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kmirror",
    version,
    about = "Exact, offset-mapped Kafka cluster mirroring (KIP-1279 semantics, outside the broker)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: keeps every mirror running and serves the admin API.
    Daemon(daemon::DaemonArgs),
    /// Create, list, describe, start, stop, pause, resume, recover and delete
    /// mirrors (the verbs of kafka-cluster-mirrors.sh), through the daemon.
    Mirror(cli::MirrorArgs),
    /// Translate source offsets to destination offsets, through the daemon.
    Offsets(cli::OffsetsArgs),
    /// Inspect, verify, export and compact the event log.
    Log(log_cmd::LogArgs),
    /// A clustered daemon's members and who coordinates what.
    Cluster(cli::ClusterArgs),
    /// Compare a mirror's copy with its source, record by record (or a
    /// seeded sample), through the offset map. Exit 0 equal, 3 differs,
    /// 1 could not verify.
    Verify(cli::VerifyArgs),
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and --version go to stdout and exit 0, as clap would.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // A usage error is still an error with a name first, like the
            // daemon's refusals, so scripts can match on one shape.
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprint!("INVALID_REQUEST: {text}");
            return std::process::ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Daemon(args) => daemon::run(args),
        Command::Mirror(args) => cli::run_mirror(args),
        Command::Offsets(args) => cli::run_offsets(args),
        Command::Log(args) => log_cmd::run(args),
        Command::Cluster(args) => cli::run_cluster(args),
        Command::Verify(args) => cli::run_verify(args),
    }
}
