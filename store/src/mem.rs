//! An in-memory [`EventLog`] for actor unit tests: same semantics as
//! [`crate::SledLog`], no disk.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use kmirror_events::{MirrorStateImage, Offset, Record, RecordKey, StateValidation};

use crate::{
    check_state_validation, CompactStats, EventLog, LogEntry, LogIter, Result, StoreError,
};

#[derive(Clone)]
struct Stored {
    timestamp_ms: i64,
    batch_base: Offset,
    record: Record,
}

#[derive(Default)]
struct Inner {
    records: BTreeMap<Offset, Stored>,
    index: HashMap<RecordKey, Offset>,
    snapshots: BTreeMap<Offset, MirrorStateImage>,
    end: Offset,
    fail_next_appends: usize,
    disk_full: bool,
}

/// The in-memory log. Cloning shares nothing; wrap it in an `Arc`.
#[derive(Default)]
pub struct MemLog {
    inner: Mutex<Inner>,
}

impl MemLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` appends fail, so actor tests can exercise the
    /// "record not durable, so no side effect" path.
    pub fn fail_next_appends(&self, n: usize) {
        self.lock().fail_next_appends = n;
    }

    /// Makes every later append fail as sled's do once its disk is full
    /// (it keeps the error for the life of the process).
    pub fn fill_disk(&self) {
        self.lock().disk_full = true;
    }

    /// Every stored entry, for assertions.
    pub fn entries(&self) -> Vec<LogEntry> {
        self.lock()
            .records
            .iter()
            .map(|(o, s)| LogEntry {
                offset: *o,
                timestamp_ms: s.timestamp_ms,
                record: s.record.clone(),
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn append_inner(inner: &mut Inner, timestamp_ms: i64, batch: &[Record]) -> Result<Offset> {
        if inner.disk_full {
            return Err(StoreError::Sled(sled::Error::Io(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "No space left on device",
            ))));
        }
        if inner.fail_next_appends > 0 {
            inner.fail_next_appends -= 1;
            return Err(StoreError::Open {
                path: "memory".into(),
                message: "injected append failure".into(),
            });
        }
        let base = inner.end;
        for (i, r) in batch.iter().enumerate() {
            let o = base + i as u64;
            inner.records.insert(
                o,
                Stored {
                    timestamp_ms,
                    batch_base: base,
                    record: r.clone(),
                },
            );
            inner.index.insert(r.key(), o);
        }
        inner.end = base + batch.len() as u64;
        Ok(base)
    }
}

impl EventLog for MemLog {
    fn append(&self, timestamp_ms: i64, batch: &[Record]) -> Result<Offset> {
        Self::append_inner(&mut self.lock(), timestamp_ms, batch)
    }

    /// The StateValidationOffset check and the append hold one lock.
    fn append_if_unchanged(
        &self,
        timestamp_ms: i64,
        validation: &StateValidation,
        batch: &[Record],
    ) -> Result<Offset> {
        let mut inner = self.lock();
        check_state_validation(validation, |key| Ok(inner.index.get(key).copied()))?;
        Self::append_inner(&mut inner, timestamp_ms, batch)
    }

    fn read(&self, from: Offset) -> Result<LogIter<'_>> {
        let entries: Vec<_> = self
            .lock()
            .records
            .range(from..)
            .map(|(o, s)| {
                Ok(LogEntry {
                    offset: *o,
                    timestamp_ms: s.timestamp_ms,
                    record: s.record.clone(),
                })
            })
            .collect();
        Ok(Box::new(entries.into_iter()))
    }

    fn latest(&self, key: &RecordKey) -> Result<Option<LogEntry>> {
        let inner = self.lock();
        Ok(inner.index.get(key).and_then(|o| {
            inner.records.get(o).map(|s| LogEntry {
                offset: *o,
                timestamp_ms: s.timestamp_ms,
                record: s.record.clone(),
            })
        }))
    }

    fn end_offset(&self) -> Offset {
        self.lock().end
    }

    fn compact(&self, now_ms: i64, tombstone_retention_ms: i64) -> Result<CompactStats> {
        let mut inner = self.lock();
        let mut stats = CompactStats::default();
        let Some(horizon) = inner.records.values().next_back().map(|s| s.batch_base) else {
            return Ok(stats);
        };
        let newest_snapshot = inner.snapshots.keys().next_back().copied();
        let mut remove = Vec::new();
        for (o, s) in inner.records.range(..horizon) {
            stats.examined += 1;
            let key = s.record.key();
            if inner.index.get(&key) != Some(o) {
                remove.push((*o, None));
                stats.removed_superseded += 1;
            } else if s.record.is_tombstone()
                && s.timestamp_ms.saturating_add(tombstone_retention_ms) <= now_ms
                && newest_snapshot.is_none_or(|snap| *o < snap)
            {
                remove.push((*o, Some(key)));
                stats.removed_tombstones += 1;
            }
        }
        for (o, key) in remove {
            inner.records.remove(&o);
            if let Some(k) = key {
                inner.index.remove(&k);
            }
        }
        if let Some(newest) = newest_snapshot {
            inner.snapshots.retain(|o, _| *o >= newest);
        }
        Ok(stats)
    }

    fn write_snapshot(&self, image: &MirrorStateImage) -> Result<()> {
        let mut inner = self.lock();
        if image.end_offset() > inner.end {
            return Err(StoreError::SnapshotAhead {
                snapshot: image.end_offset(),
                end: inner.end,
            });
        }
        inner.snapshots.insert(image.end_offset(), image.clone());
        while inner.snapshots.len() > 2 {
            let first = *inner.snapshots.keys().next().expect("non-empty");
            inner.snapshots.remove(&first);
        }
        Ok(())
    }

    fn latest_snapshot(&self) -> Result<Option<MirrorStateImage>> {
        Ok(self.lock().snapshots.values().next_back().cloned())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
