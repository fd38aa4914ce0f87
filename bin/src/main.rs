//! The `kmirror` binary: daemon, mirror CLI and event-log tools.

mod log_cmd;

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
    /// Inspect, verify, export and compact the event log.
    Log(log_cmd::LogArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Log(args) => log_cmd::run(args),
    }
}
