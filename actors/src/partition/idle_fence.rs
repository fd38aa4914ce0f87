//! The fence of a partition this node holds with no pump (PAUSED,
//! FAILED), kept alive on the pump's arithmetic
//! ([`crate::kafka::fence::KeepAlive`]): the partition is still a mirror
//! partition, to be copied on from its recorded map, so an old owner's
//! stale batch must stay refused after the leader's
//! `producer.id.expiration.ms`. Each marker takes one offset; the next
//! alignment (or a stop's `stopped_position`) records the trailing run of
//! them as one hole. STOPPED is not kept: see ARCHITECTURE.md, "Keeping
//! the fence alive".

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::context::Progress;
use crate::cluster::DestinationCluster;
use crate::coordinator::now_ms;
use crate::kafka::fence::FenceClock;
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;

/// The keep-alive task of one partition.
pub struct IdleFence {
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

impl IdleFence {
    pub fn start(
        destination: Arc<dyn DestinationCluster>,
        tp: TopicPartition,
        progress: Arc<Mutex<Progress>>,
    ) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let done = tokio::spawn(keep_fenced(destination, tp, progress, stop_rx));
        IdleFence { stop, done }
    }

    /// Stops it; the handle resolves once the marker under way, if any,
    /// is written.
    pub fn end(self) -> tokio::task::JoinHandle<()> {
        let _ = self.stop.send(true);
        self.done
    }
}

/// How soon a failed look-up of the held fence is tried again.
const RETRY: Duration = Duration::from_secs(30);

/// Writes a marker whenever the held fence is due, until `stop` (after the
/// marker under way, so a pump that starts next never meets our open
/// transaction) or until another node owns the partition. `clock` is where
/// the last pump left it; none (no pump ran here) is due at once.
async fn keep_fenced(
    destination: Arc<dyn DestinationCluster>,
    tp: TopicPartition,
    progress: Arc<Mutex<Progress>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut clock = progress
        .lock()
        .unwrap()
        .fence_clock
        .unwrap_or_else(FenceClock::unknown);
    let held = loop {
        match destination.held_fence(tp.clone()).await {
            Ok(Some(held)) => break held,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "cannot read the held fence's keep-alive; trying again");
                if stopped_within(&mut stop, RETRY).await {
                    return;
                }
            }
        }
    };
    let keep = held.keep_alive();
    loop {
        let wait = (clock.due_ms(&keep) - now_ms()).max(0) as u64;
        if stopped_within(&mut stop, Duration::from_millis(wait)).await {
            return;
        }
        match held.refence().await {
            Ok(()) => {
                clock = FenceClock::refenced(now_ms());
                let mut p = progress.lock().unwrap();
                p.refences += 1;
                p.fence_clock = Some(clock);
            }
            Err(KafkaError::Fenced { reason, .. }) => {
                tracing::info!(partition = %tp, reason, "another node owns the partition now; its fence is no longer kept here");
                return;
            }
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "re-fence of a partition without a pump failed; trying again");
                // Due again after the least gap, not at once.
                clock.refence_ms = now_ms();
            }
        }
    }
}

/// Whether `stop` was set within `wait`.
async fn stopped_within(stop: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::time::timeout(wait, stop.wait_for(|s| *s))
        .await
        .is_ok()
}
