//! The sled-backed event log for one node.
//!
//! One sled tree holds everything, distinguished by a one-byte prefix, so a
//! batch, its index updates and nothing else are written in one atomic sled
//! batch:
//!
//! - `L` + base offset (u64 BE) → one batch: for each record, `offset u64
//!   LE | len u32 LE | envelope` (see `kmirror_events::codec`). One sled
//!   value per batch makes a batch atomic by construction and lets replay
//!   pay sled's per-entry cost once per batch instead of once per record.
//! - `K` + index key (type byte + key bytes) → offset (u64 BE) of the newest
//!   record for that key
//! - `S` + end offset (u64 BE) → snapshot of the folded image
//! - `M` + name → metadata (`format_version`)

use crate::sled_blob::{check_blob, encode_batch_blob, parse_blob};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use kmirror_events::codec::{self, CodecError, FORMAT_VERSION};
use kmirror_events::{MirrorStateImage, Offset, Record, RecordKey, StateValidation};

use crate::{
    check_state_validation, CompactStats, EventLog, LogEntry, LogIter, Result, StoreError,
};

/// When appends reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync before `append` returns: nothing acknowledged is ever lost.
    EveryBatch,
    /// fsync in the background at this interval: a crash loses at most the
    /// last interval of acknowledged batches (never part of a batch).
    Interval(Duration),
    /// Leave it to the OS (tests, benchmarks).
    Never,
}

/// How to open a [`SledLog`].
#[derive(Clone, Debug)]
pub struct SledOptions {
    pub fsync: FsyncPolicy,
    /// Create the directory if missing. Off for CLI tools, so a mistyped
    /// `--data-dir` is an error rather than a new empty log.
    pub create: bool,
    /// Never write: no tail repair, no metadata; appends fail. For
    /// `kmirror log` read-only commands.
    pub read_only: bool,
    /// Cut a damaged tail back to the last whole batch (`kmirror log
    /// repair`). Off, a damaged tail refuses the open: sled applies each
    /// batch atomically, so a crash never leaves one torn, and a batch that
    /// fails its checksum is damage to acknowledged records — perhaps a
    /// failover — that only the operator may decide to drop.
    pub repair_tail: bool,
    pub cache_capacity_bytes: u64,
}

impl Default for SledOptions {
    fn default() -> Self {
        SledOptions {
            fsync: FsyncPolicy::EveryBatch,
            create: true,
            read_only: false,
            repair_tail: false,
            cache_capacity_bytes: 256 * 1024 * 1024,
        }
    }
}

/// What open found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// First offset of the damaged tail, if any.
    pub damaged_from: Option<Offset>,
    /// Records in the damaged tail (dropped unless read-only).
    pub damaged_records: u64,
    pub damaged_bytes: u64,
    /// Whether the damage was cut away (false when read-only).
    pub repaired: bool,
}

/// The sled implementation of [`EventLog`].
pub struct SledLog {
    db: sled::Db,
    path: PathBuf,
    fsync: FsyncPolicy,
    read_only: bool,
    repair_tail: bool,
    /// Serialises appends so offsets, the index and the optimistic-lock
    /// check stay consistent.
    write_lock: Mutex<()>,
    end: AtomicU64,
    report: OpenReport,
}

const L: u8 = b'L';
const K: u8 = b'K';
const S: u8 = b'S';
const META_FORMAT: &[u8] = b"Mformat_version";

fn lkey(o: Offset) -> [u8; 9] {
    let mut k = [L; 9];
    k[1..].copy_from_slice(&o.to_be_bytes());
    k
}

fn skey(o: Offset) -> [u8; 9] {
    let mut k = [S; 9];
    k[1..].copy_from_slice(&o.to_be_bytes());
    k
}

fn kkey(index_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(index_key.len() + 1);
    k.push(K);
    k.extend_from_slice(index_key);
    k
}

fn offset_of(key: &[u8]) -> Offset {
    u64::from_be_bytes(key[1..9].try_into().expect("9-byte offset key"))
}

fn be(v: &[u8]) -> Offset {
    u64::from_be_bytes(v.try_into().unwrap_or([0; 8]))
}

/// Opens a sled db, waiting up to 5 s for the previous handle's lock.
///
/// sled releases its file lock only when its background threads have
/// exited, a moment after the last handle was dropped. A reopen in the same
/// process (a supervisor's restart, a test editing a log it just wrote)
/// must wait that out rather than report the directory as in use. On a
/// loaded machine those threads can take a while to be scheduled: a bare
/// `sled::open` right after a drop failed once in CI.
pub fn open_waiting(config: &sled::Config) -> sled::Result<sled::Db> {
    let mut attempts = 0;
    loop {
        match config.open() {
            Err(e) if is_locked(&e.to_string()) && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            done => return done,
        }
    }
}

fn is_locked(message: &str) -> bool {
    message.contains("could not acquire lock") || message.contains("WouldBlock")
}

/// Whether sled's `db` file has at least one segment whose header checks:
/// sled 0.34 starts each segment (512 KiB, its default, which kmirror
/// keeps) with a CRC-32 of the 16 header bytes after it, stored inverted.
/// Checked before sled opens the file, because sled repairs what it cannot
/// read — a new segment over foreign bytes, an emptied file started afresh
/// — before kmirror could refuse. Not every segment: sled overwrites the
/// ones it frees, the first included.
fn sled_db_looks_sound(db: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    const SEGMENT: u64 = 512 * 1024;
    let Ok(mut file) = std::fs::File::open(db) else {
        return false;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut at = 0;
    while at + 20 <= len {
        let mut head = [0u8; 20];
        let read = file
            .seek(SeekFrom::Start(at))
            .and_then(|_| file.read_exact(&mut head));
        if read.is_err() {
            return false;
        }
        let stored = u32::from_le_bytes(head[..4].try_into().unwrap()) ^ 0xFFFF_FFFF;
        if stored == crc32fast::hash(&head[4..]) {
            return true;
        }
        at += SEGMENT;
    }
    false
}

impl SledLog {
    /// Opens (or creates) the log in `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, SledOptions::default())
    }

    /// Opens the log, checking the format version and the tail: a damaged
    /// tail (bad CRC, or a batch missing records) refuses the open, is only
    /// reported when read-only, and is cut back to the last whole batch
    /// with `repair_tail`.
    pub fn open_with(dir: impl AsRef<Path>, opts: SledOptions) -> Result<Self> {
        let path = dir.as_ref().to_path_buf();
        if !opts.create && !path.is_dir() {
            return Err(StoreError::MissingDataDir(path));
        }
        // sled's own files (it writes `conf` and `db` when it creates a
        // log): without them, anything in the directory is someone else's.
        let had_log = path.join("conf").is_file() || path.join("db").is_file();
        if had_log && !sled_db_looks_sound(&path.join("db")) {
            return Err(StoreError::NotALog {
                path,
                problem: "holds a sled `db` file with no readable segment: it is truncated or not sled's (restore it from a backup)",
            });
        }
        if path.is_dir() && !had_log {
            let not_a_log = |problem| StoreError::NotALog {
                path: path.clone(),
                problem,
            };
            let empty = std::fs::read_dir(&path)
                .map_err(|e| StoreError::Open {
                    path: path.clone(),
                    message: e.to_string(),
                })?
                .next()
                .is_none();
            if !empty {
                return Err(not_a_log(
                    "holds files but no kmirror event log (is it the right directory?)",
                ));
            }
            if opts.read_only {
                return Err(not_a_log("holds no event log yet"));
            }
        }
        let flush_every = match opts.fsync {
            FsyncPolicy::Interval(d) => Some(d.as_millis().max(1) as u64),
            _ => None,
        };
        let config = sled::Config::new()
            .path(&path)
            .cache_capacity(opts.cache_capacity_bytes)
            .flush_every_ms(flush_every);
        let db = open_waiting(&config).map_err(|e| {
            let msg = e.to_string();
            if is_locked(&msg) {
                StoreError::Locked(path.clone())
            } else {
                StoreError::Open {
                    path: path.clone(),
                    message: msg,
                }
            }
        })?;
        match db.get(META_FORMAT)? {
            Some(v) => {
                codec::check_format_version(v.first().copied().unwrap_or(0)).map_err(|_| {
                    StoreError::NewerFormat {
                        found: v[0],
                        supported: FORMAT_VERSION,
                    }
                })?
            }
            // sled opens a truncated or emptied `db` as an empty database,
            // so a log that lost its files would silently start over, and
            // every mirror with it. The marker is written when a log is
            // created, before anything else, so a log without it is damaged.
            None if had_log => {
                return Err(StoreError::NotALog {
                    path,
                    problem: "holds sled files but no kmirror format marker: they are truncated or damaged (restore them from a backup; a data dir never used since a crash during its first start can be deleted)",
                })
            }
            None if !opts.read_only => {
                db.insert(META_FORMAT, &[FORMAT_VERSION])?;
                db.flush()?;
            }
            None => {}
        }
        let mut log = SledLog {
            db,
            path,
            fsync: opts.fsync,
            read_only: opts.read_only,
            repair_tail: opts.repair_tail,
            write_lock: Mutex::new(()),
            end: AtomicU64::new(0),
            report: OpenReport::default(),
        };
        log.check_tail()?;
        Ok(log)
    }

    /// Opens an existing log without writing to it, for read-only tools.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(
            dir,
            SledOptions {
                create: false,
                read_only: true,
                fsync: FsyncPolicy::Never,
                ..SledOptions::default()
            },
        )
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What open found in the tail.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    fn check_tail(&mut self) -> Result<()> {
        let mut last_end: Option<Offset> = None;
        let mut cut: Option<Offset> = None;
        for item in self.db.range(lkey(0)..=lkey(u64::MAX)).rev() {
            let (k, v) = item?;
            let base = offset_of(&k);
            match check_blob(base, &v) {
                Err(CodecError::NewerFormat { found, supported }) => {
                    return Err(StoreError::NewerFormat { found, supported })
                }
                Err(_) => cut = Some(base),
                Ok((_, count, entries)) => {
                    let last = entries.last().map(|(o, _)| *o).unwrap_or(base);
                    if last_end.is_none() && cut.is_none() {
                        // The newest batch is never compacted, so it must
                        // hold every record it declares.
                        if entries.len() as u64 != count as u64 || last + 1 != base + count as u64 {
                            cut = Some(base);
                            continue;
                        }
                    }
                    last_end = Some(last + 1);
                    break;
                }
            }
        }
        let Some(cut) = cut else {
            self.end.store(last_end.unwrap_or(0), Ordering::SeqCst);
            return Ok(());
        };
        let mut records = 0u64;
        let mut bytes = 0u64;
        let mut keys = Vec::new();
        for item in self.db.range(lkey(cut)..=lkey(u64::MAX)) {
            let (k, v) = item?;
            records += parse_blob(&v).map(|e| e.len() as u64).unwrap_or(1);
            bytes += v.len() as u64;
            keys.push(k);
        }
        let new_end = last_end.unwrap_or(0);
        self.report = OpenReport {
            damaged_from: Some(cut),
            damaged_records: records,
            damaged_bytes: bytes,
            repaired: !self.read_only,
        };
        if self.read_only {
            tracing::warn!(
                path = %self.path.display(),
                from_offset = cut,
                records,
                bytes,
                "event log has a damaged tail; read-only, so it is left in place and ignored"
            );
            self.end.store(new_end, Ordering::SeqCst);
            return Ok(());
        }
        if !self.repair_tail {
            return Err(StoreError::DamagedTail {
                path: self.path.clone(),
                from_offset: cut,
                records,
            });
        }
        tracing::warn!(
            path = %self.path.display(),
            from_offset = cut,
            records,
            bytes,
            "event log had a damaged tail: dropped {records} records ({bytes} bytes) from offset {cut}"
        );
        let mut batch = sled::Batch::default();
        for k in keys {
            batch.remove(k);
        }
        for item in self.db.range(skey(new_end + 1)..=skey(u64::MAX)) {
            batch.remove(item?.0);
        }
        self.db.apply_batch(batch)?;
        self.rebuild_index()?;
        self.db.flush()?;
        self.end.store(new_end, Ordering::SeqCst);
        Ok(())
    }

    /// Rebuilds the `K` index from the records, after a tail cut removed
    /// records the index may point at.
    fn rebuild_index(&self) -> Result<()> {
        let mut batch = sled::Batch::default();
        for item in self.db.scan_prefix([K]) {
            batch.remove(item?.0);
        }
        self.db.apply_batch(batch)?;
        let mut batch = sled::Batch::default();
        let mut n: u64 = 0;
        for item in self.db.range(lkey(0)..=lkey(u64::MAX)) {
            let (k, v) = item?;
            let base = offset_of(&k);
            let (_, _, entries) = check_blob(base, &v).map_err(|source| StoreError::Corrupt {
                offset: base,
                source,
            })?;
            for (o, env) in entries {
                let view = codec::view_record(env)
                    .map_err(|source| StoreError::Corrupt { offset: o, source })?;
                batch.insert(kkey(&view.index_key()), &o.to_be_bytes());
                n += 1;
                if n.is_multiple_of(10_000) {
                    self.db.apply_batch(std::mem::take(&mut batch))?;
                }
            }
        }
        self.db.apply_batch(batch)?;
        Ok(())
    }

    fn append_locked(&self, timestamp_ms: i64, batch: &[Record]) -> Result<Offset> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let base = self.end.load(Ordering::SeqCst);
        if batch.is_empty() {
            return Ok(base);
        }
        let count = batch.len() as u32;
        let mut sb = sled::Batch::default();
        let mut blob = Vec::with_capacity(batch.len() * 96);
        for (i, r) in batch.iter().enumerate() {
            let o = base + i as u64;
            let bytes = codec::encode_record(r, timestamp_ms, base, count);
            blob.extend_from_slice(&o.to_le_bytes());
            blob.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            blob.extend_from_slice(&bytes);
            sb.insert(kkey(&codec::encode_key(&r.key())), &o.to_be_bytes());
        }
        sb.insert(&lkey(base), blob);
        self.db.apply_batch(sb)?;
        if self.fsync == FsyncPolicy::EveryBatch {
            self.db.flush()?;
        }
        self.end.store(base + batch.len() as u64, Ordering::SeqCst);
        Ok(base)
    }

    fn index_offset(&self, index_key: &[u8]) -> Result<Option<Offset>> {
        Ok(self.db.get(kkey(index_key))?.map(|v| be(&v)))
    }

    fn entry_at(&self, o: Offset) -> Result<Option<LogEntry>> {
        let Some(item) = self.db.range(lkey(0)..=lkey(o)).next_back() else {
            return Ok(None);
        };
        let (k, v) = item?;
        let base = offset_of(&k);
        let entries = parse_blob(&v).map_err(|message| StoreError::Corrupt {
            offset: base,
            source: CodecError::Decode {
                what: "batch",
                message,
            },
        })?;
        for (eo, env) in entries {
            if eo == o {
                let env = codec::decode_record(env)
                    .map_err(|source| StoreError::Corrupt { offset: o, source })?;
                return Ok(Some(LogEntry {
                    offset: o,
                    timestamp_ms: env.timestamp_ms,
                    record: env.record,
                }));
            }
        }
        Ok(None)
    }

    /// The first batch to read for `from`: the one containing it, if any.
    fn first_batch_key(&self, from: Offset) -> Result<Offset> {
        Ok(match self.db.range(lkey(0)..=lkey(from)).next_back() {
            Some(item) => offset_of(&item?.0),
            None => from,
        })
    }

    /// Raw envelopes from `from`, for verification and tools that must not
    /// stop at the first damaged record. A batch value that cannot be split
    /// yields one error item naming its base offset.
    pub fn raw(&self, from: Offset) -> impl Iterator<Item = Result<(Offset, Vec<u8>)>> + '_ {
        let start = self.first_batch_key(from).unwrap_or(from);
        self.db.range(lkey(start)..=lkey(u64::MAX)).flat_map(
            move |item| -> Vec<Result<(Offset, Vec<u8>)>> {
                match item {
                    Err(e) => vec![Err(e.into())],
                    Ok((k, v)) => {
                        let base = offset_of(&k);
                        match parse_blob(&v) {
                            Err(message) => vec![Err(StoreError::Corrupt {
                                offset: base,
                                source: CodecError::Decode {
                                    what: "batch",
                                    message,
                                },
                            })],
                            Ok(entries) => entries
                                .into_iter()
                                .filter(|(o, _)| *o >= from)
                                .map(|(o, e)| Ok((o, e.to_vec())))
                                .collect(),
                        }
                    }
                }
            },
        )
    }

    /// Stored snapshots as `(end_offset, bytes)`, oldest first.
    pub fn raw_snapshots(&self) -> impl Iterator<Item = Result<(Offset, sled::IVec)>> + '_ {
        self.db.scan_prefix([S]).map(|item| {
            item.map(|(k, v)| (offset_of(&k), v))
                .map_err(StoreError::from)
        })
    }

    /// Size on disk, for progress and reports.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

impl EventLog for SledLog {
    fn append(&self, timestamp_ms: i64, batch: &[Record]) -> Result<Offset> {
        let _g = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.append_locked(timestamp_ms, batch)
    }

    /// The StateValidationOffset check and the append hold one write lock.
    fn append_if_unchanged(
        &self,
        timestamp_ms: i64,
        validation: &StateValidation,
        batch: &[Record],
    ) -> Result<Offset> {
        let _g = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        check_state_validation(validation, |key| self.index_offset(&codec::encode_key(key)))?;
        self.append_locked(timestamp_ms, batch)
    }

    fn read(&self, from: Offset) -> Result<LogIter<'_>> {
        let end = self.end.load(Ordering::SeqCst);
        let start = self.first_batch_key(from)?;
        let it = self.db.range(lkey(start)..lkey(end.max(start))).flat_map(
            move |item| -> Vec<Result<LogEntry>> {
                let (k, v) = match item {
                    Ok(kv) => kv,
                    Err(e) => return vec![Err(e.into())],
                };
                let base = offset_of(&k);
                let entries = match parse_blob(&v) {
                    Ok(e) => e,
                    Err(message) => {
                        return vec![Err(StoreError::Corrupt {
                            offset: base,
                            source: CodecError::Decode {
                                what: "batch",
                                message,
                            },
                        })]
                    }
                };
                entries
                    .into_iter()
                    .filter(|(o, _)| *o >= from && *o < end)
                    .map(|(offset, env)| {
                        let env = codec::decode_record(env)
                            .map_err(|source| StoreError::Corrupt { offset, source })?;
                        Ok(LogEntry {
                            offset,
                            timestamp_ms: env.timestamp_ms,
                            record: env.record,
                        })
                    })
                    .collect()
            },
        );
        Ok(Box::new(it))
    }

    fn latest(&self, key: &RecordKey) -> Result<Option<LogEntry>> {
        match self.index_offset(&codec::encode_key(key))? {
            None => Ok(None),
            Some(o) => self.entry_at(o),
        }
    }

    fn end_offset(&self) -> Offset {
        self.end.load(Ordering::SeqCst)
    }

    fn compact(&self, now_ms: i64, tombstone_retention_ms: i64) -> Result<CompactStats> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        // Hold the write lock: compaction reads the index and must not race
        // an append that supersedes a key mid-scan.
        let _g = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut stats = CompactStats::default();
        let Some(last) = self.db.range(lkey(0)..=lkey(u64::MAX)).next_back() else {
            return Ok(stats);
        };
        let (lk, _) = last?;
        // The newest batch is never compacted: it keeps the end offset.
        let horizon = offset_of(&lk);
        let newest_snapshot = self
            .db
            .scan_prefix([S])
            .next_back()
            .transpose()?
            .map(|(k, _)| offset_of(&k));
        let mut batch = sled::Batch::default();
        let mut pending = 0;
        for item in self.db.range(lkey(0)..lkey(horizon)) {
            let (k, v) = item?;
            let base = offset_of(&k);
            let entries = parse_blob(&v).map_err(|message| StoreError::Corrupt {
                offset: base,
                source: CodecError::Decode {
                    what: "batch",
                    message,
                },
            })?;
            let mut keep: Vec<(Offset, Vec<u8>)> = Vec::with_capacity(entries.len());
            let total = entries.len();
            for (o, env) in entries {
                stats.examined += 1;
                let view = codec::view_record(env)
                    .map_err(|source| StoreError::Corrupt { offset: o, source })?;
                let ik = view.index_key();
                let newest = self.index_offset(&ik)?;
                if newest != Some(o) {
                    stats.removed_superseded += 1;
                } else if !view.has_value
                    && view.timestamp_ms.saturating_add(tombstone_retention_ms) <= now_ms
                    && newest_snapshot.is_none_or(|s| o < s)
                {
                    batch.remove(kkey(&ik));
                    stats.removed_tombstones += 1;
                } else {
                    keep.push((o, env.to_vec()));
                }
            }
            if keep.len() != total {
                if keep.is_empty() {
                    batch.remove(&k);
                } else {
                    batch.insert(&k, encode_batch_blob(&keep));
                }
                pending += 1;
            }
            if pending >= 1_000 {
                self.db.apply_batch(std::mem::take(&mut batch))?;
                pending = 0;
            }
        }
        // Older snapshots may predate dropped tombstones; keep only the
        // newest, which covers them.
        if let Some(newest) = newest_snapshot {
            for item in self.db.range(skey(0)..skey(newest)) {
                batch.remove(item?.0);
            }
        }
        self.db.apply_batch(batch)?;
        self.db.flush()?;
        Ok(stats)
    }

    fn write_snapshot(&self, image: &MirrorStateImage) -> Result<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let end = self.end_offset();
        if image.end_offset() > end {
            return Err(StoreError::SnapshotAhead {
                snapshot: image.end_offset(),
                end,
            });
        }
        self.db
            .insert(skey(image.end_offset()), codec::encode_snapshot(image))?;
        let snaps: Vec<_> = self
            .db
            .scan_prefix([S])
            .keys()
            .collect::<std::result::Result<_, _>>()?;
        if snaps.len() > 2 {
            for k in &snaps[..snaps.len() - 2] {
                self.db.remove(k)?;
            }
        }
        self.db.flush()?;
        Ok(())
    }

    fn latest_snapshot(&self) -> Result<Option<MirrorStateImage>> {
        let end = self.end_offset();
        for item in self.db.scan_prefix([S]).rev() {
            let (k, v) = item?;
            let o = offset_of(&k);
            if o > end {
                continue;
            }
            match codec::decode_snapshot(&v) {
                Ok(img) => return Ok(Some(img)),
                Err(CodecError::NewerFormat { found, supported }) => {
                    return Err(StoreError::NewerFormat { found, supported })
                }
                Err(e @ CodecError::OldSnapshotLayout { .. }) => {
                    tracing::info!(offset = o, "{e}");
                }
                Err(e) => {
                    tracing::warn!(offset = o, error = %e, "ignoring damaged snapshot; replaying from an older one");
                }
            }
        }
        Ok(None)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}
