//! kill -9 of the daemon in each partition state — LOG_ALIGNMENT,
//! MIRRORING, PAUSING, STOPPING, FAILED with a retry pending — on a
//! seeded random schedule (the states' order and each kill's delay), then
//! a restart on the same data dir that must finish the state's transition
//! exactly: PAUSING ends PAUSED, STOPPING ends STOPPED, the others end
//! MIRRORING, with the destination a copy of the source (0 lost, 0
//! duplicated, same offsets) and the audit telling it.
//!
//! A transient state is held open by a frozen broker (SIGSTOP): the
//! source for LOG_ALIGNMENT and FAILED (alignment and fetches time out),
//! the destination for PAUSING and STOPPING (the sink's close waits for
//! produces nobody answers). The seed is printed; `KMIRROR_FAULTS_SEED=N`
//! replays it; `KMIRROR_FAULTS_LONG=1` runs three rounds of seeds N, N+1,
//! N+2.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::fault_checks::*;
use common::*;
use kmirror_tests::{create_topic, unique, BrokerOp, PrivateBed};

const PARTITIONS: usize = 2;

/// splitmix64: the whole schedule follows from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    LogAlignment,
    Mirroring,
    Pausing,
    Stopping,
    FailedRetryPending,
}

impl Target {
    fn state(self) -> &'static str {
        match self {
            Target::LogAlignment => "LOG_ALIGNMENT",
            Target::Mirroring => "MIRRORING",
            Target::Pausing => "PAUSING",
            Target::Stopping => "STOPPING",
            Target::FailedRetryPending => "FAILED",
        }
    }

    /// Where the transition under way ends once the daemon is back.
    fn end(self) -> &'static str {
        match self {
            Target::Pausing => "PAUSED",
            Target::Stopping => "STOPPED",
            _ => "MIRRORING",
        }
    }

    fn fault(self) -> String {
        match self {
            Target::FailedRetryPending => "kmirror kill -9 in FAILED with a retry pending".into(),
            t => format!("kmirror kill -9 in {}", t.state()),
        }
    }
}

/// Mirror properties: source calls time out in 4 s and a failed partition
/// waits 3 s or more before it retries, so LOG_ALIGNMENT (alignment
/// waiting on a frozen source) and FAILED (the retry pending) each last
/// seconds, long enough to be caught and killed in.
fn kill_properties(dir: &Path, source: &str) -> String {
    let file = dir.join("source.properties");
    std::fs::write(
        &file,
        format!(
            "bootstrap.servers={source}\nrequest.timeout.ms=4000\nsocket.connection.setup.timeout.ms=4000\nmirror.failed.retry.initial.backoff.ms=3000\nmirror.failed.retry.max.backoff.ms=4000\nmirror.failed.retry.max.attempts=1000\n"
        ),
    )
    .unwrap();
    file.to_str().unwrap().to_owned()
}

/// Waits until a partition is in `target`'s state, waits the seeded delay,
/// and kills the daemon if the state still holds (else waits for it
/// again). Returns the states the partitions were in at the kill.
fn kill_in(
    daemon: Daemon,
    dir: &Path,
    mirror: &str,
    target: Target,
    delay: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = None;
    loop {
        let parts = partitions(&daemon, mirror);
        let seen = parts.as_ref().is_some_and(|parts| {
            parts.iter().any(|p| {
                p["state"] == target.state()
                    && (target != Target::FailedRetryPending
                        || (p["next_retry_at_ms"].is_i64()
                            && p["retry_attempt"].as_i64() > Some(0)))
            })
        });
        if seen {
            std::thread::sleep(delay);
            let states: Vec<String> = partitions(&daemon, mirror)
                .unwrap_or_default()
                .iter()
                .map(|p| p["state"].as_str().unwrap_or("?").to_owned())
                .collect();
            if states.iter().any(|s| s == target.state()) {
                kill9(daemon);
                return states;
            }
        }
        if parts.is_some() {
            last = parts;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!(
                "never killed in {}: last describe {last:#?}\ndaemon log (newest first):\n{}",
                target.state(),
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One round for one state: a fresh mirror of a fresh topic under the
/// producer, held in the state, killed, restarted; then the checks.
/// Returns (outcome, time from the restart to the transition's end and
/// the copy caught up), or None when LOG_ALIGNMENT ended before the source
/// froze (the round is then run again on a fresh mirror).
fn round(bed: &PrivateBed, target: Target, delay: Duration) -> Option<(Outcome, Duration)> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let daemon = start_daemon(dir.path(), &data, &bed.destination);
    let topic = unique(&format!("k9{}", target.state().to_lowercase()));
    let mirror = unique("k9m");
    create_topic(&bed.source, &topic, PARTITIONS as u32, &[]);
    let mut producer = Producer::start(dir.path(), &bed.source, &topic, 200);
    let props = kill_properties(dir.path(), &bed.source);
    // Records on the source before anything starts (the producer's JVM
    // can take seconds on a busy machine), so every kill lands mid-copy.
    wait_secs("the producer's first acknowledgements", 60, || {
        producer.acked().len() >= 100
    });
    if target == Target::LogAlignment {
        // A fresh start aligns for a few hundred ms: freeze the source as
        // soon as LOG_ALIGNMENT shows, and alignment waits on it (then
        // fails, and its retry aligns again, while the source is frozen).
        daemon.cli_ok(&[
            "mirror",
            "create",
            "--mirror",
            &mirror,
            "--mirror-config",
            &props,
        ]);
        let (admin, m, t) = (daemon.admin(), mirror.clone(), topic.clone());
        let start = std::thread::spawn(move || {
            kmirror(&[
                "mirror", "start", "--mirror", &m, "--topics", &t, "--admin", &admin,
            ])
        });
        // Polled without a pause: the window is a few hundred ms.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !partitions(&daemon, &mirror)
            .is_some_and(|p| p.iter().any(|p| p["state"] == "LOG_ALIGNMENT"))
        {
            assert!(
                Instant::now() < deadline,
                "no LOG_ALIGNMENT within 30 s of the start"
            );
        }
        bed.source_broker(1, BrokerOp::Pause);
        let out = start.join().unwrap();
        assert!(out.status.success(), "mirror start: {}", stderr(&out));
        let now = partitions(&daemon, &mirror).unwrap_or_default();
        if !now.iter().any(|p| p["state"] == "LOG_ALIGNMENT") {
            // Alignment takes tens of ms: the freeze can come too late.
            println!(
                "{}: the source froze after alignment had finished; again",
                target.fault()
            );
            bed.source_broker(1, BrokerOp::Resume);
            producer.stop();
            return None;
        }
    } else {
        daemon.mirror_topics(&mirror, &props, &topic);
        wait_secs("the mirror running", 60, || {
            partitions(&daemon, &mirror).is_some_and(|p| {
                p.len() == PARTITIONS
                    && p.iter().all(|p| {
                        p["state"] == "MIRRORING" && p["destination_offset"].as_i64() > Some(0)
                    })
            })
        });
        std::thread::sleep(Duration::from_secs(1));
    }
    let admin = daemon.admin();
    let verb = |verb: &'static str| {
        let (admin, mirror, topic) = (admin.clone(), mirror.clone(), topic.clone());
        // Answers only once the state is reached (stop) or never (the
        // daemon is killed first): a thread of its own.
        std::thread::spawn(move || {
            kmirror(&[
                "mirror", verb, "--mirror", &mirror, "--topics", &topic, "--admin", &admin,
            ])
        })
    };
    let thaw = match target {
        Target::Mirroring => None,
        Target::LogAlignment => Some(1),
        Target::FailedRetryPending => {
            bed.source_broker(1, BrokerOp::Pause);
            Some(1)
        }
        Target::Pausing | Target::Stopping => {
            // Frozen with produces in flight: the sink's close waits.
            bed.destination_broker(1, BrokerOp::Pause);
            std::thread::sleep(Duration::from_millis(1000));
            verb(if target == Target::Pausing {
                "pause"
            } else {
                "stop"
            });
            if std::env::var("KMIRROR_FAULTS_TRACE").is_ok() {
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(5) {
                    let states: Vec<String> = partitions(&daemon, &mirror)
                        .unwrap_or_default()
                        .iter()
                        .map(|p| format!("{}@{}", p["state"], p["destination_offset"]))
                        .collect();
                    println!("{} ms: {states:?}", t0.elapsed().as_millis());
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Some(2)
        }
    };
    let states = if target == Target::LogAlignment {
        // Seen in LOG_ALIGNMENT just now, with the source frozen: only the
        // source request timeout (4 s, above any delay) ends it, while
        // another describe could itself wait on the frozen source that
        // long and see the partition FAILED instead.
        std::thread::sleep(delay);
        kill9(daemon);
        vec![target.state().to_owned()]
    } else {
        kill_in(daemon, dir.path(), &mirror, target, delay)
    };
    println!(
        "{}: killed {} ms into {} (partitions {states:?})",
        target.fault(),
        delay.as_millis(),
        target.state()
    );
    match thaw {
        Some(1) => bed.source_broker(1, BrokerOp::Resume),
        Some(_) => bed.destination_broker(1, BrokerOp::Resume),
        None => {}
    }
    let restarted = Instant::now();
    let daemon = start_daemon(dir.path(), &data, &bed.destination);
    wait_secs(target.end(), 120, || {
        partitions(&daemon, &mirror)
            .is_some_and(|p| p.len() == PARTITIONS && p.iter().all(|p| p["state"] == target.end()))
    });
    let recover = if target.end() == "MIRRORING" {
        let acked = producer.stop();
        wait_secs("the destination equal to the source", 120, || {
            caught_up(&daemon, &mirror, &bed.source, &topic, PARTITIONS)
        });
        let recover = restarted.elapsed();
        let outcome = assert_exact_copy(&bed.source, &bed.destination, &topic, &acked);
        assert_translates_exactly(&daemon, &mirror, &bed.source, &topic);
        (outcome, recover)
    } else {
        let recover = restarted.elapsed();
        let acked = producer.stop();
        // PAUSED and STOPPED hold a prefix of the source, at the same
        // offsets; nothing beyond where describe says the copy stands.
        let prefix = assert_prefix(&daemon, &mirror, &bed.source, &bed.destination, &topic);
        if target == Target::Pausing {
            // And a resume finishes the copy exactly.
            daemon.cli_ok(&["mirror", "resume", "--mirror", &mirror, "--topics", &topic]);
            wait_secs("the destination equal to the source", 120, || {
                caught_up(&daemon, &mirror, &bed.source, &topic, PARTITIONS)
            });
            let outcome = assert_exact_copy(&bed.source, &bed.destination, &topic, &acked);
            assert_translates_exactly(&daemon, &mirror, &bed.source, &topic);
            (outcome, recover)
        } else {
            (prefix, recover)
        }
    };
    assert_eq!(daemon.terminate().code(), Some(0));
    let text = audit(&data, &mirror);
    let changes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("MirrorPartitionState") && l.contains(" -> "))
        .collect();
    println!("{}: audit\n  {}", target.fault(), changes.join("\n  "));
    assert!(
        text.contains(&format!("-> {}", target.state())),
        "the audit shows {}:\n{text}",
        target.state()
    );
    for p in 0..PARTITIONS {
        let label = format!("{topic}[{p}]");
        let last = changes
            .iter()
            .rfind(|l| l.contains(&label))
            .unwrap_or_else(|| panic!("{label} in the audit:\n{text}"));
        let end = if target == Target::Pausing {
            "MIRRORING"
        } else {
            target.end()
        };
        assert!(last.contains(&format!("-> {end}")), "{label} ends {last}");
    }
    println!(
        "{}: kmirror log verify: {}",
        target.fault(),
        log_verify(&data).trim()
    );
    Some(recover)
}

/// Every partition of `topic` on the destination is a prefix of the
/// source's, at the same offsets, ending where describe says the copy
/// stands; returns the records compared.
fn assert_prefix(
    daemon: &Daemon,
    mirror: &str,
    source: &str,
    destination: &str,
    topic: &str,
) -> Outcome {
    let src_end: i64 = end_offsets(source, topic).values().sum();
    let dst_ends = end_offsets(destination, topic);
    for p in partitions(daemon, mirror).unwrap() {
        let part = p["partition"].as_i64().unwrap() as i32;
        // A STOPPED partition's end is the one its LastMirrorEpochs
        // recorded: nothing may land after it.
        let said = match p["state"].as_str() {
            Some("STOPPED") => p["last_mirror_epochs"]["destination_end_offset"].as_i64(),
            _ => p["destination_offset"].as_i64(),
        };
        if said == Some(-1) {
            // Not known without a pump (PAUSED since start-up): the prefix
            // below and the resume's exact copy check it instead.
            continue;
        }
        assert_eq!(
            dst_ends.get(&part).copied(),
            said,
            "{topic}[{part}]: the destination's end is where the mirror says the copy stands: {p}"
        );
    }
    let dst_total: i64 = dst_ends.values().sum();
    let (a, b) = (
        records(source, topic, src_end),
        records(destination, topic, dst_total),
    );
    let mut checked = 0;
    for (p, theirs) in &b {
        let ours = a.get(p).map(Vec::as_slice).unwrap_or_default();
        assert!(
            theirs.len() <= ours.len() && ours[..theirs.len()] == theirs[..],
            "{topic}[{p}]: the destination is not a prefix of the source"
        );
        checked += theirs.len();
    }
    assert_eq!(
        checked as i64, dst_total,
        "the console consumer read the destination"
    );
    Outcome {
        lost: 0,
        duplicated: 0,
        checked,
    }
}

#[test]
fn kill_minus_nine_in_each_state_finishes_the_transition_exactly() {
    let seed: u64 = std::env::var("KMIRROR_FAULTS_SEED")
        .ok()
        .map(|s| s.parse().expect("KMIRROR_FAULTS_SEED is a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
                % 1_000_000
        });
    let rounds = if long() { 3 } else { 1 };
    println!("seed {seed} (replay with KMIRROR_FAULTS_SEED={seed}), {rounds} round(s)");
    let bed = PrivateBed::start();
    let all = [
        Target::LogAlignment,
        Target::Mirroring,
        Target::Pausing,
        Target::Stopping,
        Target::FailedRetryPending,
    ];
    let mut totals: Vec<(Target, usize, Outcome, Duration)> = all
        .iter()
        .map(|t| {
            (
                *t,
                0,
                Outcome {
                    lost: 0,
                    duplicated: 0,
                    checked: 0,
                },
                Duration::ZERO,
            )
        })
        .collect();
    for r in 0..rounds {
        let mut rng = Rng(seed + r as u64);
        // KMIRROR_FAULTS_STATES=PAUSING,STOPPING narrows a replay.
        let only = std::env::var("KMIRROR_FAULTS_STATES").unwrap_or_default();
        let mut order: Vec<Target> = all
            .iter()
            .copied()
            .filter(|t| only.is_empty() || only.split(',').any(|s| s == t.state()))
            .collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        println!("round {r} (seed {}): {order:?}", seed + r as u64);
        for target in order {
            let delay = Duration::from_millis(rng.below(1500));
            let (outcome, recover) = (0..10)
                .find_map(|_| round(&bed, target, delay))
                .unwrap_or_else(|| panic!("{}: never caught in 10 tries", target.fault()));
            let t = totals.iter_mut().find(|t| t.0 == target).unwrap();
            t.1 += 1;
            t.2.lost += outcome.lost;
            t.2.duplicated += outcome.duplicated;
            t.2.checked += outcome.checked;
            t.3 = t.3.max(recover);
        }
    }
    for (target, injected, outcome, recover) in totals.into_iter().filter(|t| t.1 > 0) {
        reliability(&target.fault(), injected, outcome, recover);
    }
}
