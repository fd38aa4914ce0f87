//! Whole-log verification, shared by `kmirror log verify` and the crash
//! test so both check exactly the same things.

use kmirror_events::codec;
use kmirror_events::{MirrorStateImage, Offset};

use crate::{LogEntry, Result, SledLog, StoreError};

/// What a verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub records: u64,
    pub bytes: u64,
    pub snapshots: u64,
    /// `(offset, problem)` for every damaged record, snapshot or batch.
    pub problems: Vec<(Offset, String)>,
    pub end_offset: Offset,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Walks every record and snapshot: CRC, format version, full decode, batch
/// framing (each record inside its declared batch; the last batch whole),
/// and the offset maps the records fold into (runs ascend and never
/// overlap on either cluster; holes overlap nothing). Reads only.
/// `progress` is called with each offset.
pub fn verify(log: &SledLog, mut progress: impl FnMut(Offset)) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let damage = log
        .open_report()
        .damaged_from
        .filter(|_| !log.open_report().repaired);
    if let Some(from) = damage {
        report.problems.push((
            from,
            format!(
                "torn or corrupt tail: {} records ({} bytes) from offset {from} (a writable open would cut them)",
                log.open_report().damaged_records,
                log.open_report().damaged_bytes
            ),
        ));
    }
    let mut last: Option<(Offset, Offset, u32)> = None;
    let mut image = MirrorStateImage::default();
    for item in log.raw(0) {
        let (o, bytes) = match item {
            Ok(x) => x,
            Err(crate::StoreError::Corrupt { offset, source }) => {
                report.problems.push((offset, source.to_string()));
                continue;
            }
            Err(e) => return Err(e),
        };
        progress(o);
        report.records += 1;
        report.bytes += bytes.len() as u64;
        match codec::decode_record(&bytes) {
            Err(e) => report.problems.push((o, e.to_string())),
            Ok(env) => {
                let end = env.batch_base.saturating_add(env.batch_count as u64);
                if o < env.batch_base || o >= end {
                    report
                        .problems
                        .push((o, format!("outside its batch [{}, {end})", env.batch_base)));
                }
                last = Some((o, env.batch_base, env.batch_count));
                image.replay(o, env.record);
            }
        }
    }
    if let Some((o, base, count)) = last {
        report.end_offset = o + 1;
        if o + 1 != base + count as u64 && damage.is_none() {
            report.problems.push((
                o,
                format!("last batch [{base}, {}) is incomplete", base + count as u64),
            ));
        }
    }
    check_maps(&image, &mut report);
    for item in log.raw_snapshots() {
        let (o, bytes) = item?;
        report.snapshots += 1;
        match codec::decode_snapshot(&bytes) {
            Ok(_) | Err(codec::CodecError::OldSnapshotLayout { .. }) => {}
            Err(e) => report.problems.push((o, format!("snapshot: {e}"))),
        }
    }
    Ok(report)
}

/// The offset maps' invariants on the folded image.
fn check_maps(image: &MirrorStateImage, report: &mut VerifyReport) {
    for (key, map) in image.offset_maps() {
        if let Err(e) = map.check() {
            report.problems.push((
                report.end_offset,
                format!(
                    "offset map of {} {} partition {}: {e}",
                    key.mirror_name, key.topic_id, key.partition
                ),
            ));
        }
    }
}

/// [`verify`] for a log that hands out decoded entries only (one kept in a
/// Kafka partition: each record is its own envelope there, so there is no
/// batch framing or snapshot to check): a record that does not decode is a
/// problem at its offset, and the offset maps are checked as for sled.
pub fn verify_entries<'a>(
    entries: impl Iterator<Item = Result<LogEntry>> + 'a,
    mut progress: impl FnMut(Offset),
) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let mut image = MirrorStateImage::default();
    for e in entries {
        match e {
            Ok(e) => {
                progress(e.offset);
                report.records += 1;
                report.end_offset = e.offset + 1;
                image.replay(e.offset, e.record);
            }
            Err(StoreError::Corrupt { offset, source }) => {
                report.records += 1;
                report.problems.push((offset, source.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    check_maps(&image, &mut report);
    Ok(report)
}
