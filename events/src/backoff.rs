//! Exponential backoff with jitter: the one formula behind every wait
//! between retries, a FAILED partition's and a Kafka request's alike, so
//! that the two cannot drift apart.
//!
//! Pure: the caller passes the random sample in, which keeps this crate
//! free of a randomness source and makes every delay reproducible in tests.

use std::time::Duration;

/// Kafka's `ExponentialBackoff` shape: `initial × multiplier^attempt`,
/// capped at `max`, spread by ±`jitter`, and never longer than `max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialBackoff {
    pub initial: Duration,
    pub max: Duration,
    pub multiplier: f64,
    /// ±fraction applied to each delay, so that what failed together does
    /// not retry together.
    pub jitter: f64,
}

impl ExponentialBackoff {
    /// Doubling with ±20% jitter: the Kafka clients' `retry.backoff.*` and
    /// `reconnect.backoff.*` defaults.
    pub fn doubling(initial: Duration, max: Duration) -> Self {
        ExponentialBackoff {
            initial,
            max,
            multiplier: 2.0,
            jitter: 0.2,
        }
    }

    /// The delay before retry `attempt`, counted from 0 (which waits
    /// `initial`, jittered). `jitter_sample` is a uniform random number in
    /// `[0, 1)`.
    pub fn delay(&self, attempt: u32, jitter_sample: f64) -> Duration {
        let max = self.max.as_nanos() as f64;
        let exp = attempt.min(64) as i32;
        let term = (self.initial.as_nanos() as f64 * self.multiplier.powi(exp)).min(max);
        let s = jitter_sample.clamp(0.0, 1.0);
        let v = term * (1.0 - self.jitter + 2.0 * self.jitter * s);
        if v.is_finite() && v < max {
            Duration::from_nanos(v as u64)
        } else {
            self.max
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_caps_and_keeps_jitter_below_the_cap() {
        let b = ExponentialBackoff::doubling(Duration::from_millis(100), Duration::from_secs(1));
        let ms = |attempt, s| b.delay(attempt, s).as_millis();
        assert_eq!((ms(0, 0.5), ms(1, 0.5), ms(3, 0.5)), (100, 200, 800));
        assert_eq!((ms(0, 0.0), ms(0, 1.0)), (80, 120));
        assert_eq!(ms(4, 0.5), 1000, "capped");
        assert_eq!(ms(4, 0.0), 800, "jittered below the cap too");
        assert_eq!(ms(u32::MAX, 1.0), 1000, "never above the cap");
        let zero = ExponentialBackoff::doubling(Duration::ZERO, Duration::from_secs(1));
        assert_eq!(zero.delay(u32::MAX, 0.5), Duration::ZERO);
    }
}
