//! The data-at-risk and retention-race columns of `describe` (and of
//! `describe --watch`), and the byte and duration formats they use.

use kmirror_actors::node::PartitionDescription;

/// What a failover now would lose: `120 rec 14.2 KiB 3.1s` (`-` not
/// measured yet; `≥` when the byte read was capped).
pub(super) fn at_risk(p: &PartitionDescription) -> String {
    if p.at_risk_records < 0 {
        return "-".into();
    }
    let at_least = if p.at_risk_bytes_at_least { "≥" } else { "" };
    let secs = if p.at_risk_seconds < 0.0 {
        "?s".to_owned()
    } else {
        format!("{:.1}s", p.at_risk_seconds)
    };
    format!(
        "{} rec {at_least}{} {secs}",
        p.at_risk_records,
        bytes(p.at_risk_bytes.max(0) as f64)
    )
}

/// The retention margin: `WARN 40s`, `WARN gap` (records already lost),
/// `3h` or `-` (no deletion ahead, or not measured).
pub(super) fn retention(p: &PartitionDescription) -> String {
    let margin = if p.retention_margin_records < 0 {
        "gap".to_owned()
    } else if p.retention_margin_ms < 0 {
        "-".to_owned()
    } else {
        duration(p.retention_margin_ms as f64 / 1000.0)
    };
    if p.retention_warning {
        format!("WARN {margin}")
    } else {
        margin
    }
}

/// Per mirror: the RPO now (records and bytes summed, seconds the worst)
/// and how many partitions warn about retention.
pub(super) fn rpo_footer(partitions: &[PartitionDescription]) -> String {
    let mut mirrors: Vec<&str> = partitions.iter().map(|p| p.mirror.as_str()).collect();
    mirrors.dedup();
    let mut out = String::new();
    for m in mirrors {
        let of: Vec<_> = partitions.iter().filter(|p| p.mirror == m).collect();
        let measured: Vec<_> = of.iter().filter(|p| p.at_risk_records >= 0).collect();
        let records: i64 = measured.iter().map(|p| p.at_risk_records).sum();
        let b: i64 = measured.iter().map(|p| p.at_risk_bytes.max(0)).sum();
        let at_least = measured.iter().any(|p| p.at_risk_bytes_at_least);
        // Records at risk with no mirrored record to time them against.
        let untimed = measured
            .iter()
            .any(|p| p.at_risk_seconds < 0.0 && p.at_risk_records > 0);
        let secs = if untimed {
            "?".to_owned()
        } else {
            let worst = measured
                .iter()
                .map(|p| p.at_risk_seconds)
                .fold(0.0f64, f64::max);
            format!("{worst:.1}")
        };
        let unmeasured = of.len() - measured.len();
        let warnings = of.iter().filter(|p| p.retention_warning).count();
        out.push_str(&format!(
            "Mirror {m}: a failover now loses {records} records, {}{}, {secs} s behind",
            if at_least { "at least " } else { "" },
            bytes(b as f64)
        ));
        if unmeasured > 0 {
            out.push_str(&format!(" ({unmeasured} partition(s) not measured yet)"));
        }
        if warnings > 0 {
            out.push_str(&format!(
                "; RETENTION WARNING on {warnings} partition(s): the source is about to delete records not mirrored"
            ));
        }
        out.push_str(".\n");
    }
    out
}

/// `1.5 KiB`, `12 B`.
pub(super) fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `45s`, `12m30s`, `3h05m`, `2d04h`.
pub(super) fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration(3725.0), "1h02m");
        assert_eq!(duration(45.0), "45s");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(12.0), "12 B");
    }

    #[test]
    fn records_at_risk_that_cannot_be_timed_yet_are_not_zero_seconds_behind() {
        let untimed = PartitionDescription {
            mirror: "m".into(),
            at_risk_records: 62_409,
            at_risk_bytes: 2 << 20,
            at_risk_bytes_at_least: true,
            at_risk_seconds: -1.0,
            ..Default::default()
        };
        assert_eq!(at_risk(&untimed), "62409 rec ≥2.0 MiB ?s");
        assert_eq!(
            rpo_footer(&[untimed]),
            "Mirror m: a failover now loses 62409 records, at least 2.0 MiB, ? s behind.\n"
        );
    }
}
