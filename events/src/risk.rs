//! What a failover now would lose, and how close the source's retention is
//! to deleting records the mirror has not copied yet: the decisions, with
//! the clock passed in (`now_ms`), so the figures can be checked without
//! a broker or a wall clock. The measurements come from actors/.

use std::time::Duration;

use crate::pattern::PatternError;
use crate::record::MirrorConfig;

/// How often a partition re-reads the source for its at-risk figures
/// (`mirror.risk.refresh.interval.ms`, default 5 s).
pub const RISK_REFRESH_INTERVAL_KEY: &str = "mirror.risk.refresh.interval.ms";
/// Below this margin a partition warns that the source's retention is
/// about to delete what it has not mirrored (`mirror.retention.margin.ms`,
/// default 10 min).
pub const RETENTION_MARGIN_KEY: &str = "mirror.retention.margin.ms";

/// The mirror's risk settings, read from its config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RiskSettings {
    pub refresh_interval: Duration,
    pub retention_margin: Duration,
}

impl RiskSettings {
    /// Reads the settings; a bad value is an error naming its key, so it is
    /// refused at create/alter time.
    pub fn from_config(config: &MirrorConfig) -> Result<Self, PatternError> {
        let ms = |key: &str, default: u64| -> Result<Duration, PatternError> {
            match config.source_properties.get(key) {
                None => Ok(Duration::from_millis(default)),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                    _ => Err(PatternError {
                        field: key.into(),
                        pattern: v.clone(),
                        message: "expected a positive number of milliseconds".into(),
                    }),
                },
            }
        };
        Ok(RiskSettings {
            refresh_interval: ms(RISK_REFRESH_INTERVAL_KEY, 5_000)?,
            retention_margin: ms(RETENTION_MARGIN_KEY, 600_000)?,
        })
    }
}

impl Default for RiskSettings {
    fn default() -> Self {
        RiskSettings {
            refresh_interval: Duration::from_millis(5_000),
            retention_margin: Duration::from_millis(600_000),
        }
    }
}

/// What a source partition holds beyond the mirrored position, and the
/// source topic's retention, as last measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RetentionInputs {
    /// Next source offset to mirror.
    pub position: i64,
    pub log_start: i64,
    pub high_watermark: i64,
    /// Bytes of the source batches from `position` to the high watermark
    /// (a lower bound when the read was capped).
    pub unmirrored_bytes: i64,
    /// Newest timestamp of the first unmirrored batch (None: unknown or
    /// nothing unmirrored). Kafka deletes by a segment's newest timestamp,
    /// which is at least this, so the deletion estimated from it is never late.
    pub oldest_unmirrored_timestamp: Option<i64>,
    /// `retention.ms` / `retention.bytes` of the source topic (None: −1,
    /// unlimited, or unknown).
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    /// Bytes the source partition grows by per second (None: not measured
    /// yet).
    pub produce_bytes_per_second: Option<f64>,
}

/// How far the mirror stands from losing records to retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionMargin {
    /// Mirrored position − source log start: negative once retention has
    /// deleted records the mirror never copied.
    pub records: i64,
    /// Estimated time until the source deletes the next unmirrored record;
    /// −1 when nothing points to a deletion (nothing unmirrored, no limit,
    /// no rate yet).
    pub ms: i64,
}

impl RetentionMargin {
    /// Whether the operator should act now: a gap already, or a deletion
    /// sooner than `threshold`.
    pub fn warning(&self, threshold: Duration) -> bool {
        self.records < 0 || (self.ms >= 0 && (self.ms as u128) < threshold.as_millis())
    }
}

/// The retention margin at `now_ms`: the sooner of the time-based deletion
/// (oldest unmirrored timestamp + `retention.ms`) and the size-based one
/// (the room left under `retention.bytes` once the unmirrored bytes are
/// counted, at the current produce rate).
pub fn retention_margin(i: &RetentionInputs, now_ms: i64) -> RetentionMargin {
    let records = i.position - i.log_start;
    if records < 0 {
        return RetentionMargin { records, ms: 0 };
    }
    if i.high_watermark <= i.position {
        return RetentionMargin { records, ms: -1 };
    }
    let by_time = match (i.retention_ms, i.oldest_unmirrored_timestamp) {
        (Some(r), Some(ts)) if r >= 0 && ts >= 0 => {
            Some(ts.saturating_add(r).saturating_sub(now_ms).max(0))
        }
        _ => None,
    };
    let by_size = match i.retention_bytes {
        Some(limit) if limit >= 0 => {
            let room = limit - i.unmirrored_bytes;
            if room <= 0 {
                Some(0)
            } else {
                match i.produce_bytes_per_second {
                    Some(rate) if rate > 0.0 => Some((room as f64 / rate * 1000.0) as i64),
                    _ => None,
                }
            }
        }
        _ => None,
    };
    let ms = match (by_time, by_size) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => -1,
    };
    RetentionMargin { records, ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behind(unmirrored_bytes: i64) -> RetentionInputs {
        RetentionInputs {
            position: 100,
            log_start: 40,
            high_watermark: 150,
            unmirrored_bytes,
            ..Default::default()
        }
    }

    #[test]
    fn time_based_retention_counts_from_the_oldest_unmirrored_record() {
        // given records not mirrored since t=1000 and retention.ms = 60 s
        let i = RetentionInputs {
            oldest_unmirrored_timestamp: Some(1_000),
            retention_ms: Some(60_000),
            ..behind(10)
        };
        // when it is t=31000
        let m = retention_margin(&i, 31_000);
        // then 30 s are left, 60 records ahead of the log start
        assert_eq!(
            m,
            RetentionMargin {
                records: 60,
                ms: 30_000
            }
        );
        assert!(m.warning(Duration::from_secs(600)));
        assert!(!m.warning(Duration::from_secs(10)));
        // and past the deadline the margin is 0, not negative
        assert_eq!(retention_margin(&i, 100_000).ms, 0);
    }

    #[test]
    fn size_based_retention_uses_the_produce_rate() {
        // given 1000 bytes unmirrored under retention.bytes = 5000, 400 B/s
        let i = RetentionInputs {
            retention_bytes: Some(5_000),
            produce_bytes_per_second: Some(400.0),
            ..behind(1_000)
        };
        // then the room (4000 B) lasts 10 s
        assert_eq!(retention_margin(&i, 0).ms, 10_000);
        // and without a measured rate nothing is predicted
        let no_rate = RetentionInputs {
            produce_bytes_per_second: None,
            ..i
        };
        assert_eq!(retention_margin(&no_rate, 0).ms, -1);
        // but unmirrored bytes beyond the limit are due now, rate or not
        let full = RetentionInputs {
            unmirrored_bytes: 6_000,
            ..no_rate
        };
        assert_eq!(retention_margin(&full, 0).ms, 0);
        assert!(retention_margin(&full, 0).warning(Duration::from_millis(1)));
    }

    #[test]
    fn the_sooner_limit_wins() {
        let i = RetentionInputs {
            oldest_unmirrored_timestamp: Some(0),
            retention_ms: Some(5_000),
            retention_bytes: Some(5_000),
            produce_bytes_per_second: Some(100.0),
            ..behind(1_000)
        };
        assert_eq!(retention_margin(&i, 0).ms, 5_000);
    }

    #[test]
    fn nothing_unmirrored_or_no_limit_means_no_deadline() {
        let caught_up = RetentionInputs {
            high_watermark: 100,
            retention_ms: Some(1),
            oldest_unmirrored_timestamp: Some(0),
            ..behind(0)
        };
        let m = retention_margin(&caught_up, 1_000_000);
        assert_eq!(
            m,
            RetentionMargin {
                records: 60,
                ms: -1
            }
        );
        assert!(!m.warning(Duration::from_secs(600)));
        assert_eq!(retention_margin(&behind(10), 0).ms, -1);
    }

    #[test]
    fn a_gap_already_is_a_warning() {
        // given the source log start moved past the mirrored position
        let i = RetentionInputs {
            log_start: 120,
            ..behind(10)
        };
        let m = retention_margin(&i, 0);
        assert_eq!(
            m,
            RetentionMargin {
                records: -20,
                ms: 0
            }
        );
        assert!(m.warning(Duration::from_millis(1)));
    }

    #[test]
    fn settings_default_and_refuse_bad_values_by_name() {
        let mut c = MirrorConfig::default();
        assert_eq!(
            RiskSettings::from_config(&c).unwrap(),
            RiskSettings::default()
        );
        c.source_properties
            .insert(RETENTION_MARGIN_KEY.into(), "60000".into());
        assert_eq!(
            RiskSettings::from_config(&c).unwrap().retention_margin,
            Duration::from_secs(60)
        );
        c.source_properties
            .insert(RETENTION_MARGIN_KEY.into(), "ten minutes".into());
        let e = RiskSettings::from_config(&c).unwrap_err();
        assert_eq!(e.field, RETENTION_MARGIN_KEY);
        assert!(e.to_string().contains("ten minutes"), "{e}");
    }
}
