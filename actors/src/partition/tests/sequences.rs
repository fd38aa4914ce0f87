//! Random sequences of what a partition is told and what befalls it:
//! desired states, failures found outside it, produce and fetch faults,
//! acknowledgements held back, leader moves on either side, an unreachable
//! source, restarts of the actor, new records, each told once, at random
//! moments. Whatever the order, a partition told
//! MIRRORING at the end copies every record once, in order.
//!
//! Nothing tells a partition its desired state twice (the MirrorActor tells
//! a change once), so a state that the partition does not drive to its end
//! by itself shows up here as a partition that stops copying. Each case is
//! seeded, and a failure prints the seed and the steps.

use super::*;

/// One thing that happens to the partition.
#[derive(Clone, Copy, Debug)]
enum Step {
    Desire(PartitionState),
    /// A failure found outside the partition (`Fail`), retryable.
    Fail,
    FailProduce,
    FailFetch,
    HoldAcks,
    ReleaseAcks,
    MoveDestinationLeader,
    MoveSourceLeader,
    SourceUnreachable(bool),
    /// The actor shut down and started again on the same log (a restart
    /// of the daemon), told the last desired state.
    Restart,
    Append(usize),
    Wait(u64),
}

/// xorshift64*: a few lines, and the same sequence from a seed everywhere
/// (rand's StdRng promises no sequence across versions, and the tests name
/// the seeds that showed a defect). The mirror's sequence test uses it too.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn steps(seed: u64, n: usize) -> Vec<Step> {
    use PartitionState as S;
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| match rng.below(16) {
            0 => Step::Desire(S::Paused),
            1 => Step::Desire(S::Mirroring),
            2 => Step::Desire(S::Stopped),
            3 => Step::Fail,
            4 => Step::FailProduce,
            5 => Step::FailFetch,
            6 => Step::HoldAcks,
            7 => Step::ReleaseAcks,
            8 => Step::MoveDestinationLeader,
            9 => Step::MoveSourceLeader,
            10 => Step::SourceUnreachable(rng.below(2) == 0),
            11 => Step::Restart,
            12..=14 => Step::Append(1 + rng.below(3) as usize),
            _ => Step::Wait(rng.below(40)),
        })
        .collect()
}

/// Plays `seed`'s steps; `fenced`: on a clustered node's fenced
/// destination, where a restart is a takeover that fences first (one abort
/// marker).
async fn play(seed: u64, fenced: bool) {
    let rig = rig().await;
    if fenced {
        rig.dest.fenced(900);
    }
    rig.append(2, 0);
    let mut appended = 2;
    let retry = RetryPolicy {
        initial_backoff_ms: 5,
        max_backoff_ms: 50,
        max_attempts: i16::MAX,
        ..RetryPolicy::default()
    };
    let mut desired = PartitionState::Mirroring;
    let mut actor = rig.start(retry);
    let steps = steps(seed, 14);
    let mut epoch = 0;
    for step in &steps {
        match *step {
            Step::Desire(s) => {
                desired = s;
                actor.do_send(Desire(s));
            }
            Step::Fail => actor.do_send(Fail {
                message: "injected: the source became another cluster".into(),
                retryable: true,
            }),
            Step::FailProduce => rig
                .dest
                .fail_next_produce(&rig.tp, KafkaError::Unknown("injected".into())),
            Step::FailFetch => rig.source.fail_next_fetch(
                &rig.tp,
                FetchError::Other(KafkaError::Unknown("injected".into())),
            ),
            Step::HoldAcks => rig.dest.hold_acks(true),
            Step::ReleaseAcks => rig.dest.hold_acks(false),
            Step::MoveDestinationLeader => {
                epoch += 1;
                rig.dest.set_leader_epoch(&rig.tp, epoch);
            }
            Step::MoveSourceLeader => {
                rig.source.elect_leader(&rig.tp);
            }
            Step::SourceUnreachable(down) => rig.source.set_unreachable(down),
            Step::Restart => {
                // A shutdown finishes what is in flight (the real client's
                // request timeout ends a held produce; the fake's waits).
                rig.dest.hold_acks(false);
                actor.send(Shutdown).await.unwrap();
                if fenced {
                    rig.dest.fence(vec![rig.tp.clone()]).await.unwrap();
                }
                actor = rig.start_desiring(retry, desired);
            }
            Step::Append(n) => {
                rig.append(n, appended);
                appended += n;
            }
            Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
    rig.dest.hold_acks(false);
    rig.source.set_unreachable(false);
    actor.do_send(Desire(PartitionState::Mirroring));
    rig.append(2, appended);
    appended += 2;
    let expected: Vec<String> = (0..appended).map(|i| format!("v{i}")).collect();
    for _ in 0..500 {
        let s = state(&actor).await;
        if s.state == PartitionState::Mirroring && rig.values().len() >= appended {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = state(&actor).await;
    assert!(
        s.state == PartitionState::Mirroring && rig.values() == expected,
        "seed {seed}, steps {steps:?}: {:?} (retry {}, error {:?}), destination {:?}, states {:?}",
        s.state,
        s.retry_attempt,
        s.error,
        rig.values(),
        history(&rig.log, &rig.key)
            .iter()
            .map(|h| h.0)
            .collect::<Vec<_>>()
    );
    let image = rig.image().await;
    let map = image.offset_map(&rig.key);
    assert!(map.check().is_ok(), "seed {seed}: {:?}", map.check());
}

/// Without 7eca8ae's fix (a pump told to stop handed the next state's
/// work), seed 298 stops copying; 2 000 seeds passed with it, and 2 000
/// on the fenced destination.
#[actix::test]
async fn any_sequence_told_once_ends_copying_everything_once() {
    for seed in 1..=320 {
        play(seed, false).await;
    }
}

#[actix::test]
async fn any_sequence_on_a_fenced_destination_ends_copying_everything_once() {
    for seed in 1..=160 {
        play(seed, true).await;
    }
}
