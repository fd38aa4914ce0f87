//! What every `kmirror log` command shares: the log opened read-only and
//! a progress bar.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use kmirror_actors::state_log::{KafkaLog, StateLogOptions};
use kmirror_events::MirrorStateImage;
use kmirror_store::{EventLog, SledLog};

pub(super) type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Where the event log is: a daemon's data directory (sled), or the state
/// topic on a cluster (the clustered daemon's log, or a one-node daemon's
/// published copy).
pub(super) enum Source {
    Dir(PathBuf),
    Topic {
        options: StateLogOptions,
        /// One partition (a coordinator shard's log), or all of them.
        partition: Option<i32>,
    },
}

impl Source {
    /// How the output names the log.
    pub(super) fn label(&self) -> String {
        match self {
            Source::Dir(d) => d.display().to_string(),
            Source::Topic { options, partition } => {
                let bootstrap = options
                    .client
                    .get("bootstrap.servers")
                    .map_or("", String::as_str);
                match partition {
                    Some(p) => format!("{bootstrap} topic {} partition {p}", options.topic),
                    None => format!("{bootstrap} topic {}", options.topic),
                }
            }
        }
    }
}

/// An error opening the log at `dir`, naming `dir` if it does not already.
pub(super) fn naming_dir(dir: &Path, e: kmirror_store::StoreError) -> String {
    let message = e.to_string();
    if message.contains(&dir.display().to_string()) {
        message
    } else {
        format!("data directory {}: {message}", dir.display())
    }
}

pub(super) fn open_sled_ro(dir: &Path) -> CliResult<SledLog> {
    let log = SledLog::open_read_only(dir).map_err(|e| naming_dir(dir, e))?;
    if let Some(from) = log.open_report().damaged_from {
        eprintln!(
            "kmirror log: warning: data directory {}: damaged tail from offset {from} ({} records) is ignored (`kmirror log verify` details it, `kmirror log repair` cuts it)",
            dir.display(),
            log.open_report().damaged_records
        );
    }
    Ok(log)
}

/// The log opened read-only: nothing is repaired, created or written.
pub(super) fn open_ro(source: &Source) -> CliResult<Box<dyn EventLog>> {
    Ok(match source {
        Source::Dir(dir) => Box::new(open_sled_ro(dir)?),
        Source::Topic { options, partition } => {
            Box::new(KafkaLog::open_read_only(options, *partition)?)
        }
    })
}

/// A progress bar on stderr, drawn only when stdout is a terminal (so piped
/// output and CI logs stay clean).
pub(super) struct Progress {
    enabled: bool,
    total: u64,
    done: u64,
    started: Instant,
    label: &'static str,
}

impl Progress {
    pub(super) fn new(label: &'static str, total: u64) -> Self {
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

    pub(super) fn tick(&mut self) {
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

    pub(super) fn finish(&self) {
        if self.enabled {
            self.draw();
            eprintln!();
        }
    }
}

pub(super) fn load_with_progress(log: &dyn EventLog) -> CliResult<MirrorStateImage> {
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
