//! A FAILED partition's retry: one timer at a time, set by the retry
//! policy's backoff, and gone once the partition leaves FAILED.

use std::time::Duration;

use actix::prelude::*;
use kmirror_events::RetryDecision;

use super::PartitionActor;

impl PartitionActor {
    /// A FAILED partition's pending retry ends when it leaves FAILED (told
    /// to stop or pause meanwhile): it shares `retry_timer` with STOPPING's
    /// re-entry, which `enter` waits for, and once fired it would find the
    /// partition FAILED no more and do nothing, leaving a stop waiting.
    pub(super) fn cancel_failed_retry(&mut self, ctx: &mut Context<Self>) {
        if self.retry_at_ms.take().is_some() {
            if let Some(h) = self.retry_timer.take() {
                ctx.cancel_future(h);
            }
        }
    }

    /// Schedules the retry of a FAILED partition, unless one is pending:
    /// the MirrorActor sends its desired state again whenever its topic
    /// changes, and restarting the timer each time could postpone a retry
    /// for as long as the changes go on.
    pub(super) fn schedule_retry(&mut self, ctx: &mut Context<Self>) {
        if self.retry_timer.is_some() {
            return;
        }
        let jitter = (self.spec.jitter)();
        match self.spec.retry.decide(&self.state, jitter) {
            RetryDecision::RetryAfter { delay_ms, target } => {
                tracing::info!(partition = %self.tp, attempt = self.state.retry_attempt, delay_ms, %target, "retrying failed partition");
                self.retry_at_ms = Some(crate::coordinator::now_ms() + delay_ms as i64);
                self.retry_timer = Some(ctx.run_later(
                    Duration::from_millis(delay_ms),
                    move |act, ctx| {
                        act.retry_timer = None;
                        act.retry_at_ms = None;
                        act.publish();
                        // Still FAILED, and still retryable (a later
                        // failure may have made it final meanwhile).
                        let still = act.spec.retry.decide(&act.state, jitter);
                        if matches!(still, RetryDecision::RetryAfter { .. }) {
                            act.transition(target, ctx);
                        }
                    },
                ));
                self.publish();
            }
            other => {
                if self.reported_final != Some(self.state.state_epoch) {
                    self.reported_final = Some(self.state.state_epoch);
                    tracing::warn!(partition = %self.tp, decision = ?other, error = ?self.state.error_message,
                        "failed partition requires manual intervention (kmirror mirror recover)");
                }
            }
        }
    }
}
