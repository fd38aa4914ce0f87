//! The event log's disk full, against real Kafka: the daemon's data dir on
//! a small tmpfs, filled by a filler file mid-copy under Kafka's
//! verifiable producer. The daemon must say so clearly (naming the data
//! dir and the disk's error) and stop — nothing more can be recorded, so
//! nothing more may be copied — with a non-zero exit, leave the log sound
//! (`kmirror log verify`), and, restarted once the
//! filler is deleted, resume exactly where the log ends: 0 lost, 0
//! duplicated, the offsets translating exactly.
//!
//! Needs root for `mount -t tmpfs` (the test machines run as root); if the
//! mount fails the test fails with mount's own error, it never skips.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::fault_checks::*;
use common::*;
use kmirror_tests::{bed, create_topic, unique};

/// A tmpfs mounted for one test, unmounted when dropped (even when the
/// test fails).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount -t tmpfs -o size={size} tmpfs {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs {
            path: path.to_owned(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a daemon being killed): detach it now, freed
            // once the last file closes.
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// Writes `path` until the disk says it is full; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0xA5u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) => {
                assert_eq!(
                    e.raw_os_error(),
                    Some(28),
                    "filling {}: expected ENOSPC, got {e}",
                    path.display()
                );
                break;
            }
        }
    }
    let _ = f.sync_all();
    written
}

/// Waits up to `secs` for the daemon to exit by itself.
fn wait_exit(daemon: &mut Daemon, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon still runs {secs} s after its event log's disk filled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The daemon's last ERROR line (its JSON log on stderr).
fn last_error(log: &Path) -> String {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rfind(|l| l.contains("KAFKA_STORAGE_ERROR"))
        .unwrap_or("no KAFKA_STORAGE_ERROR line in the daemon's log")
        .to_owned()
}

#[test]
fn a_full_event_log_disk_stops_the_daemon_cleanly_and_a_restart_resumes_exactly() {
    let fault = "event log disk full";
    let held = if long() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(6)
    };
    let dir = tempfile::tempdir().unwrap();
    let mnt = Tmpfs::mount(&dir.path().join("mnt"), "64m");
    let data = mnt.path.join("data");
    let daemon = start_daemon(dir.path(), &data, &bed().destination);
    let topic = unique("disk");
    let mirror = unique("diskm");
    create_topic(&bed().source, &topic, 3, &[]);
    let mut producer = Producer::start(dir.path(), &bed().source, &topic, 300);
    daemon.mirror_topics(
        &mirror,
        &fault_properties(dir.path(), &bed().source),
        &topic,
    );
    wait_secs("the mirror running", 60, || {
        partitions(&daemon, &mirror).is_some_and(|p| {
            p.len() == 3
                && p.iter().all(|p| {
                    p["state"] == "MIRRORING" && p["destination_offset"].as_i64() > Some(0)
                })
        })
    });
    std::thread::sleep(Duration::from_secs(2));

    let filler = mnt.path.join("filler");
    let bytes = fill(&filler);
    let full_at = Instant::now();
    println!("{fault}: filled the tmpfs with {bytes} bytes");
    // Nothing more can be recorded, so nothing more may be copied: the
    // daemon says why and exits non-zero (sled keeps a write error for the
    // rest of the process, so only a restart reopens the log).
    let log = dir.path().join("daemon.log");
    let mut daemon = daemon;
    let status = wait_exit(&mut daemon, 60);
    let said = last_error(&log);
    println!(
        "{fault}: the daemon exited ({status}) {:.1} s after the disk filled: {said}",
        full_at.elapsed().as_secs_f64()
    );
    assert!(
        !status.success(),
        "a daemon that cannot record must not exit 0"
    );
    for word in [
        "KAFKA_STORAGE_ERROR",
        data.to_str().unwrap(),
        "No space left on device",
    ] {
        assert!(said.contains(word), "the error names `{word}`: {said}");
    }
    drop(daemon);
    std::thread::sleep(held);

    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    // Sound as the failed write left it (opening the log writes to the
    // disk, so this waits for room).
    println!("{fault}: kmirror log verify: {}", log_verify(&data).trim());
    let daemon = start_daemon(dir.path(), &data, &bed().destination);
    // From the end of the fault (room again), the restart included.
    let restarted = freed.elapsed();
    let recover = restarted + recovered_after(&daemon, &mirror, &bed().source, &topic, 120);
    wait_secs("no failure left stored", 30, || {
        partitions(&daemon, &mirror).is_some_and(|p| p.iter().all(|p| p["error"].is_null()))
    });
    println!(
        "{fault}: restarted and caught up {:.1} s after the filler was deleted",
        recover.as_secs_f64()
    );
    let acked = producer.stop();
    wait_secs("the destination equal to the source", 120, || {
        caught_up(&daemon, &mirror, &bed().source, &topic, 3)
    });
    let outcome = assert_exact_copy(&bed().source, &bed().destination, &topic, &acked);
    assert_translates_exactly(&daemon, &mirror, &bed().source, &topic);
    assert_eq!(daemon.terminate().code(), Some(0));
    println!("{fault}: kmirror log verify: {}", log_verify(&data).trim());
    let text = audit(&data, &mirror);
    let changes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("MirrorPartitionState") && l.contains(" -> "))
        .collect();
    println!("{fault}: audit\n  {}", changes.join("\n  "));
    for p in 0..3 {
        let label = format!("{topic}[{p}]");
        let last = changes
            .iter()
            .rfind(|l| l.contains(&label))
            .unwrap_or_else(|| panic!("{label} in the audit:\n{text}"));
        assert!(last.contains("-> MIRRORING"), "{label} ends {last}");
    }
    reliability(fault, 1, outcome, recover);
}
