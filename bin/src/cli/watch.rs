//! `kmirror mirror describe --watch`: the partitions again every interval,
//! redrawn in place on a terminal and as appended plain lines otherwise
//! (a pipe, a log file). Partitions still copying get a progress bar, with
//! the rate and ETA taken from the previous sample. Rendering is a pure
//! function of two samples ([`frame`]); this file only loops and prints.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kmirror_actors::node::{NodeError, PartitionDescription};

use super::render::table;
use super::risk::{at_risk, duration, retention, rpo_footer};

/// One answer of the daemon and when it came, in seconds since any fixed
/// instant (only differences matter).
pub(super) struct Sample {
    pub partitions: Vec<PartitionDescription>,
    pub at: f64,
}

const BAR_WIDTH: usize = 20;

/// The lines of one refresh: the table, the per-mirror RPO, and a bar for
/// every partition still copying (MIRRORING or aligning with records left
/// to copy): records copied since the source's log start / records the
/// source holds, the copy rate and the ETA at the rate the backlog shrinks.
pub(super) fn frame(prev: Option<&Sample>, now: &Sample) -> Vec<String> {
    let before: HashMap<(&str, &str, i32), &PartitionDescription> = prev
        .map(|s| {
            s.partitions
                .iter()
                .map(|p| ((p.mirror.as_str(), p.topic.as_str(), p.partition), p))
                .collect()
        })
        .unwrap_or_default();
    let dt = prev.map_or(0.0, |s| now.at - s.at);
    let rows = now
        .partitions
        .iter()
        .map(|p| {
            let earlier = before
                .get(&(p.mirror.as_str(), p.topic.as_str(), p.partition))
                .copied();
            vec![
                p.mirror.clone(),
                p.topic.clone(),
                p.partition.to_string(),
                p.state.clone(),
                p.lag.to_string(),
                at_risk(p),
                retention(p),
                progress(p, earlier, dt),
            ]
        })
        .collect();
    let text = table(
        &[
            "MIRROR",
            "TOPIC",
            "PARTITION",
            "STATE",
            "LAG",
            "AT-RISK",
            "RETENTION",
            "PROGRESS",
        ],
        rows,
    ) + &rpo_footer(&now.partitions);
    text.lines().map(str::to_owned).collect()
}

/// `[#########...........] 45% 4500/10000 1200 rec/s ETA 4s`, or `-` for a
/// partition with nothing left to copy.
fn progress(p: &PartitionDescription, earlier: Option<&PartitionDescription>, dt: f64) -> String {
    let copying = matches!(p.state.as_str(), "MIRRORING" | "LOG_ALIGNMENT");
    if !copying || p.at_risk_records <= 0 {
        return "-".into();
    }
    let copied = p.retention_margin_records.max(0);
    let total = copied + p.at_risk_records;
    let done = copied as f64 / total as f64;
    let filled = ((done * BAR_WIDTH as f64) as usize).min(BAR_WIDTH);
    let mut s = format!(
        "[{}{}] {:>3}% {copied}/{total}",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH - filled),
        (done * 100.0) as u32
    );
    let Some(e) = earlier.filter(|_| dt > 0.0) else {
        return s + " ETA -";
    };
    let rate = (p.source_offset - e.source_offset) as f64 / dt;
    // The backlog shrinks by what is copied less what the source gained.
    let drain = (e.at_risk_records - p.at_risk_records) as f64 / dt;
    s += &format!(" {rate:.0} rec/s");
    if drain > 0.0 {
        s += &format!(" ETA {}", duration(p.at_risk_records as f64 / drain));
    } else {
        s += " ETA -";
    }
    s
}

/// Fetches and prints every `interval` until Ctrl-C (exit 0). An error of
/// the first fetch ends it (bad mirror name, no daemon); later ones are
/// shown and the watch goes on.
pub(super) fn run(
    mut fetch: impl FnMut() -> Result<Vec<PartitionDescription>, NodeError>,
    interval: Duration,
) -> Result<String, NodeError> {
    let stop = ctrl_c();
    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let mut prev: Option<Sample> = None;
    let mut first = true;
    while !stop.load(Ordering::SeqCst) {
        let lines = match fetch() {
            Ok(partitions) => {
                let now = Sample {
                    partitions,
                    at: start.elapsed().as_secs_f64(),
                };
                let lines = frame(prev.as_ref(), &now);
                prev = Some(now);
                lines
            }
            Err(e) if first => return Err(e),
            Err(e) => vec![e.to_string()],
        };
        first = false;
        let mut out = std::io::stdout().lock();
        let written = if tty {
            // Cursor home, clear the screen, then the frame.
            writeln!(out, "\x1b[H\x1b[2J{}", lines.join("\n"))
        } else {
            let secs = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            writeln!(out, "--- describe at {secs}\n{}", lines.join("\n"))
        };
        if written.and_then(|_| out.flush()).is_err() {
            // The reader went away (a closed pipe): nothing more to show.
            return Ok(String::new());
        }
        drop(out);
        let until = Instant::now() + interval;
        while Instant::now() < until && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(String::new())
}

/// A flag set by Ctrl-C (SIGINT), so the loop ends between refreshes and
/// the process exits 0 with its output complete.
fn ctrl_c() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        if rt.block_on(tokio::signal::ctrl_c()).is_ok() {
            set.store(true, Ordering::SeqCst);
        }
    });
    flag
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copying(source_offset: i64, high_watermark: i64) -> PartitionDescription {
        PartitionDescription {
            mirror: "m".into(),
            topic: "orders".into(),
            partition: 0,
            state: "MIRRORING".into(),
            source_offset,
            lag: high_watermark - source_offset,
            at_risk_records: high_watermark - source_offset,
            at_risk_bytes: 1024,
            at_risk_seconds: 1.0,
            retention_margin_records: source_offset,
            retention_margin_ms: -1,
            ..Default::default()
        }
    }

    #[test]
    fn two_samples_give_a_bar_a_rate_and_an_eta() {
        // given 2000 of 10000 records copied, then 4000 of 10500 two
        // seconds later (1000 rec/s copied, the backlog down 750/s)
        let before = Sample {
            partitions: vec![copying(2_000, 10_000)],
            at: 10.0,
        };
        let now = Sample {
            partitions: vec![copying(4_000, 10_500)],
            at: 12.0,
        };
        // when the frame is rendered
        let lines = frame(Some(&before), &now);
        // then the partition shows its bar, rate and ETA (6500 / 750 ≈ 9 s)
        assert!(lines[0].starts_with("MIRROR"), "{lines:?}");
        assert!(
            lines[1].ends_with("[#######.............]  38% 4000/10500 1000 rec/s ETA 9s"),
            "{lines:?}"
        );
        assert!(lines[2].starts_with("Mirror m: a failover now loses 6500 records"));
    }

    #[test]
    fn the_first_sample_has_no_eta_and_caught_up_partitions_no_bar() {
        let mut paused = copying(5, 10);
        paused.state = "PAUSED".into();
        let now = Sample {
            partitions: vec![copying(0, 10), copying(10, 10), paused],
            at: 0.0,
        };
        let lines = frame(None, &now);
        assert!(
            lines[1].ends_with("[....................]   0% 0/10 ETA -"),
            "{lines:?}"
        );
        assert!(lines[2].ends_with("  -"), "{lines:?}");
        assert!(lines[3].ends_with("  -"), "{lines:?}");
    }
}
