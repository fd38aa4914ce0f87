//! The FAILED-partition retry policy (KIP §3.3) as a pure function.

use std::time::Duration;

use crate::backoff::ExponentialBackoff;
use crate::record::MirrorPartitionStateValue;
use crate::state::{retry_target, PartitionState};

pub const INITIAL_BACKOFF_MS_KEY: &str = "mirror.failed.retry.initial.backoff.ms";
pub const MAX_BACKOFF_MS_KEY: &str = "mirror.failed.retry.max.backoff.ms";
pub const MAX_ATTEMPTS_KEY: &str = "mirror.failed.retry.max.attempts";

/// Exponential backoff with jitter ([`ExponentialBackoff`]) and an attempt
/// budget, in the KIP's `mirror.failed.retry.*` terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub multiplier: f64,
    /// ±fraction applied to each delay, so partitions that failed together
    /// do not retry together.
    pub jitter: f64,
    /// 0 disables automatic retry.
    pub max_attempts: i16,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff_ms: 100,
            max_backoff_ms: 300_000,
            multiplier: 2.0,
            jitter: 0.2,
            max_attempts: 20,
        }
    }
}

/// A bad `mirror.failed.retry.*` value, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for {key}: {reason}")]
pub struct RetryConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// What to do with a FAILED partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait `delay_ms`, then transition to `target`.
    RetryAfter {
        delay_ms: u64,
        target: PartitionState,
    },
    /// RetryAttempt is −1: the failure cannot be fixed by retrying.
    NotRetryable,
    /// The attempt budget is spent: an operator must `recover`.
    Exhausted { attempts: i16 },
    /// The partition is not FAILED.
    NotFailed,
}

impl RetryPolicy {
    /// Reads the KIP's `mirror.failed.retry.*` keys through `lookup`, keeping
    /// defaults for absent keys. A closure rather than a map type so any
    /// config source can feed it.
    pub fn from_config(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, RetryConfigError> {
        let mut p = RetryPolicy::default();
        let bad = |key: &str, value: &str, reason: &str| RetryConfigError {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        if let Some(v) = lookup(INITIAL_BACKOFF_MS_KEY) {
            p.initial_backoff_ms = v.trim().parse().map_err(|_| {
                bad(
                    INITIAL_BACKOFF_MS_KEY,
                    &v,
                    "expected a non-negative integer",
                )
            })?;
        }
        if let Some(v) = lookup(MAX_BACKOFF_MS_KEY) {
            p.max_backoff_ms = v
                .trim()
                .parse()
                .map_err(|_| bad(MAX_BACKOFF_MS_KEY, &v, "expected a non-negative integer"))?;
        }
        if let Some(v) = lookup(MAX_ATTEMPTS_KEY) {
            p.max_attempts = v
                .trim()
                .parse::<i16>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| bad(MAX_ATTEMPTS_KEY, &v, "expected an integer in 0..=32767"))?;
        }
        if p.max_backoff_ms < p.initial_backoff_ms {
            return Err(bad(
                MAX_BACKOFF_MS_KEY,
                &p.max_backoff_ms.to_string(),
                "must be >= mirror.failed.retry.initial.backoff.ms",
            ));
        }
        Ok(p)
    }

    /// The delay before retry number `attempt` (1-based).
    ///
    /// `jitter_sample` is a uniform random number in `[0, 1)` supplied by the
    /// caller. Attempt 1 waits `initial_backoff_ms` (the prototype's
    /// `backoff(attempt)` would wait 2× initial first; we follow the
    /// documented meaning of "initial").
    pub fn backoff_ms(&self, attempt: u32, jitter_sample: f64) -> u64 {
        let backoff = ExponentialBackoff {
            initial: Duration::from_millis(self.initial_backoff_ms),
            max: Duration::from_millis(self.max_backoff_ms),
            multiplier: self.multiplier,
            jitter: self.jitter,
        };
        let delay = backoff.delay(attempt.saturating_sub(1), jitter_sample);
        delay.as_millis() as u64
    }

    /// Decides the retry for a partition's stored state (KIP §3.3:
    /// `attempt = retryAttempt != 0 ? retryAttempt : 1`; −1 never retries;
    /// `attempt >= max.attempts` needs manual intervention).
    pub fn decide(&self, value: &MirrorPartitionStateValue, jitter_sample: f64) -> RetryDecision {
        if value.state != PartitionState::Failed {
            return RetryDecision::NotFailed;
        }
        if value.retry_attempt == -1 {
            return RetryDecision::NotRetryable;
        }
        let attempt = if value.retry_attempt != 0 {
            value.retry_attempt
        } else {
            1
        };
        if attempt >= self.max_attempts {
            return RetryDecision::Exhausted { attempts: attempt };
        }
        RetryDecision::RetryAfter {
            delay_ms: self.backoff_ms(attempt as u32, jitter_sample),
            target: retry_target(value.previous_state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_jitter_bounds() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff_ms(1, 0.5), 100);
        assert_eq!(p.backoff_ms(2, 0.5), 200);
        assert_eq!(p.backoff_ms(1, 0.0), 80);
        assert!(p.backoff_ms(1, 0.999_999) <= 120);
        assert_eq!(p.backoff_ms(30, 0.5), 300_000);
        assert_eq!(p.backoff_ms(u32::MAX, 0.99), 300_000);
    }

    #[test]
    fn config_keys() {
        let p = RetryPolicy::from_config(|k| match k {
            MAX_ATTEMPTS_KEY => Some("3".into()),
            INITIAL_BACKOFF_MS_KEY => Some("1000".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(p.max_attempts, 3);
        assert_eq!(p.initial_backoff_ms, 1000);
        let e =
            RetryPolicy::from_config(|k| (k == MAX_ATTEMPTS_KEY).then(|| "-2".into())).unwrap_err();
        assert_eq!(e.key, MAX_ATTEMPTS_KEY);
    }

    #[test]
    fn decisions() {
        let p = RetryPolicy::default();
        let mut v = MirrorPartitionStateValue {
            state: PartitionState::Failed,
            leader_epoch: 0,
            state_epoch: 1,
            error_message: Some("x".into()),
            retry_attempt: 1,
            previous_state: PartitionState::Mirroring,
        };
        assert!(matches!(
            p.decide(&v, 0.5),
            RetryDecision::RetryAfter {
                delay_ms: 100,
                target: PartitionState::Mirroring
            }
        ));
        v.retry_attempt = -1;
        assert_eq!(p.decide(&v, 0.5), RetryDecision::NotRetryable);
        v.retry_attempt = 20;
        assert_eq!(p.decide(&v, 0.5), RetryDecision::Exhausted { attempts: 20 });
    }
}
