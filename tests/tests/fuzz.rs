//! Fuzz targets on stable (see `kmirror_tests::fuzz`): the event codec,
//! the record-batch parser, classifier and merger, the properties parser
//! and the topic/group/ACL pattern parsers. No Kafka needed.
//!
//! Each target is one `check_*` function that must not panic on any input
//! (errors are fine) and, where it decodes something, must round-trip it.
//! Each is run over its corpus (`fuzz/corpus/<target>/`), over random
//! bytes, and over random edits of valid inputs.
//!
//! `cargo test -p kmirror-tests --test fuzz -- --ignored write_seed_corpus`
//! rewrites the generated seeds of the corpus (files named `seed-*`);
//! crashers are kept under names of their own.

#[path = "../../events/tests/common.rs"]
mod events_common;

use std::collections::BTreeMap;

use bytes::Bytes;
use kmirror_actors::kafka::batch::{
    classify, decode_records, merge, mergeable, prepare, stamp_producer, AbortedTransactions,
    BatchAction, BatchBuilder, BatchIter, Codec, OutgoingBatch, Record, RecordBatch, SourceOffsets,
};
use kmirror_actors::kafka::ClientConfig;
use kmirror_actors::props;
use kmirror_events::codec;
use kmirror_events::{
    is_internal_topic, join_lists, list_items, verify_interval, AclEntry, AclRules, GroupFilter,
    MirrorConfig, MirrorStateImage, PatternList, RetryPolicy, RiskSettings, SyncSettings,
    TopicFilter,
};
use kmirror_tests::fuzz::{self, apply, edits, replay};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const EVENT: &str = "event_codec";
const BATCH: &str = "record_batch";
const PROPERTIES: &str = "properties";
const PATTERNS: &str = "patterns";

/// Runs `strategy` through `check` for [`fuzz::cases`] cases.
fn run<S: Strategy>(strategy: S, check: impl Fn(S::Value)) {
    TestRunner::new(fuzz::config())
        .run(&strategy, |v| {
            check(v);
            Ok(())
        })
        .unwrap();
}

// ---- the event codec ----------------------------------------------------

/// Every decoder of persisted bytes; what decodes must encode back to the
/// same envelope.
fn check_event(bytes: &[u8]) {
    let _ = codec::check_record(bytes);
    if let Ok(view) = codec::view_record(bytes) {
        let _ = view.index_key();
    }
    if let Ok(key) = codec::decode_key(bytes) {
        assert_eq!(codec::decode_key(&codec::encode_key(&key)).unwrap(), key);
    }
    if let Ok(image) = codec::decode_snapshot(bytes) {
        let again = codec::encode_snapshot(&image);
        assert_eq!(codec::decode_snapshot(&again).unwrap(), image);
    }
    if let Ok(env) = codec::decode_record(bytes) {
        let again = codec::encode_record(
            &env.record,
            env.timestamp_ms,
            env.batch_base,
            env.batch_count,
        );
        assert_eq!(codec::decode_record(&again).unwrap(), env);
        let view = codec::view_record(&again).unwrap();
        assert_eq!(view.index_key(), codec::encode_key(&env.record.key()));
    }
}

/// The envelope's CRC recomputed, so an edit reaches the decoders behind it.
fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 5 {
        let n = bytes.len();
        let crc = crc32fast::hash(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    bytes
}

fn valid_snapshot() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(events_common::command(), 1..30).prop_map(|cmds| {
        let mut image = MirrorStateImage::new();
        for c in &cmds {
            let _ = kmirror_events::decide_and_apply(&mut image, c);
        }
        codec::encode_snapshot(&image)
    })
}

#[test]
fn event_codec_corpus() {
    assert!(replay(EVENT, check_event) >= 10);
}

#[test]
fn event_codec_random_bytes() {
    run(prop::collection::vec(any::<u8>(), 0..256), |b| {
        check_event(&b)
    });
}

#[test]
fn event_codec_edited_records() {
    let strategy = (
        events_common::any_record(),
        any::<i64>(),
        edits(),
        any::<bool>(),
    );
    run(strategy, |(record, ts, edits, fix_crc)| {
        let valid = codec::encode_record(&record, ts, 7, 1);
        check_event(&valid);
        let edited = apply(&valid, &edits);
        check_event(&if fix_crc { with_crc(edited) } else { edited });
        // A key alone, as a compacted topic's tombstone holds it.
        check_event(&apply(&codec::encode_key(&record.key()), &edits));
    });
}

#[test]
fn event_codec_edited_snapshots() {
    run((valid_snapshot(), edits()), |(valid, edits)| {
        check_event(&valid);
        check_event(&with_crc(apply(&valid, &edits)));
    });
}

// ---- record batches -----------------------------------------------------

fn records_of(batch: &RecordBatch) -> Vec<(i64, Record)> {
    let decoded = decode_records(batch).expect("a merged batch's input decodes");
    decoded
        .records
        .into_iter()
        .map(|r| (decoded.base_offset + r.offset_delta as i64, r))
        .collect()
}

/// What the destination would receive: stamped like the producer stamps
/// it, parsed back and decoded. Records kmirror did not decode (a batch
/// passed through) need not decode: the destination broker validates them.
fn sent(out: &OutgoingBatch) -> Vec<Record> {
    let mut bytes = out.to_bytes().to_vec();
    stamp_producer(&mut bytes, 1, 0, 0);
    let batch = RecordBatch::new(bytes.into()).expect("an outgoing batch re-parses");
    assert!(batch.verify_crc());
    let Ok(decoded) = decode_records(&batch) else {
        return Vec::new();
    };
    let records = decoded.records;
    assert_eq!(records.len(), out.record_count as usize);
    let offsets = match &out.source_offsets {
        SourceOffsets::Range { first, last } => (last - first + 1) as usize,
        SourceOffsets::List(list) => list.len(),
    };
    assert_eq!(offsets, records.len(), "one source offset per record");
    records
}

fn source_offsets(out: &OutgoingBatch) -> Vec<i64> {
    match &out.source_offsets {
        SourceOffsets::Range { first, last } => (*first..=*last).collect(),
        SourceOffsets::List(list) => list.clone(),
    }
}

/// What a record keeps across a merge: all but its offset delta, which is
/// the new batch's.
fn kept(r: &Record) -> Record {
    Record {
        offset_delta: 0,
        ..r.clone()
    }
}

/// Merges each run of consecutive mergeable batches of one codec, as the
/// pump does; what merges must re-parse and hold the same records, each at
/// its source offset. `must` says the input is valid, so merging must work.
fn check_merge(batches: &[RecordBatch], must: bool) {
    let mut start = 0;
    while start < batches.len() {
        let codec = batches[start].codec().ok();
        let mut end = start + 1;
        while end < batches.len() && batches[end].codec().ok() == codec {
            end += 1;
        }
        let group = &batches[start..end];
        start = end;
        let merged = match merge(group, 1 << 20) {
            Ok(merged) => merged,
            Err(e) => {
                assert!(!must, "valid batches fail to merge: {e}");
                continue;
            }
        };
        if group.len() == 1 {
            continue; // passed through untouched
        }
        let expected: Vec<(i64, Record)> = group.iter().flat_map(records_of).collect();
        let mut got = Vec::new();
        for out in &merged {
            got.extend(source_offsets(out).into_iter().zip(sent(out)));
        }
        assert_eq!(got.len(), expected.len(), "the merge keeps every record");
        for ((o1, a), (o2, b)) in got.iter().zip(&expected) {
            assert_eq!(o1, o2, "each record keeps its source offset");
            assert_eq!(kept(a), kept(b), "record at {o1} changed in the merge");
        }
    }
}

/// The pump's path over a fetch response's records: iterate, classify
/// (aborted transactions included), prepare, merge. `must`: the input is
/// well formed, so every step must succeed.
fn check_records(bytes: &[u8], must: bool) {
    let mut iter = BatchIter::new(Bytes::copy_from_slice(bytes));
    let mut aborted = AbortedTransactions::new(vec![(7, 0), (9, 5)]);
    let mut to_merge = Vec::new();
    for item in iter.by_ref() {
        let batch = match item {
            Ok(batch) => batch,
            Err(e) => {
                assert!(!must, "a valid batch fails to parse: {e}");
                continue;
            }
        };
        let _ = (format!("{batch:?}"), batch.verify_crc(), batch.codec());
        let is_aborted = aborted.is_aborted(&batch).unwrap_or(false);
        let base = batch.base_offset();
        for from in [
            i64::MIN,
            0,
            base,
            base.saturating_add(1),
            batch.last_offset(),
        ] {
            for max in [64usize, 1 << 20] {
                let action = classify(&batch, is_aborted, max, from);
                if let Ok(out) = prepare(&batch, action, max, from) {
                    for o in &out {
                        sent(o);
                    }
                }
            }
        }
        let action = classify(&batch, is_aborted, 1 << 20, 0);
        if must && action != BatchAction::PassThrough {
            continue;
        }
        if mergeable(&batch, action, true) {
            to_merge.push(batch);
        }
    }
    assert!(
        !(must && iter.truncated()),
        "valid batches read as truncated"
    );
    check_merge(&to_merge, must);
}

const CODECS: [Codec; 5] = [
    Codec::None,
    Codec::Gzip,
    Codec::Snappy,
    Codec::Lz4,
    Codec::Zstd,
];

fn any_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn any_record() -> impl Strategy<Value = Record> {
    (
        -1000i64..1000,
        prop::option::of(any_bytes(16)),
        prop::option::of(any_bytes(48)),
        prop::collection::vec((any_bytes(6), prop::option::of(any_bytes(6))), 0..3),
    )
        .prop_map(|(timestamp, key, value, headers)| Record {
            offset_delta: 0,
            timestamp: 1_700_000_000_000 + timestamp,
            key,
            value,
            headers,
        })
}

/// A fetch response's records: consecutive batches built with
/// [`BatchBuilder`], some compacted (gaps between records), in every codec,
/// with and without the transactional, LogAppendTime and delete-horizon
/// flags.
fn valid_records() -> impl Strategy<Value = Vec<u8>> {
    let batch = (
        prop::collection::vec(any_record(), 1..6),
        prop::sample::select(&CODECS[..]),
        prop::collection::vec(0i32..3, 6),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(0i64..1_000),
    );
    (prop::collection::vec(batch, 1..5), 0i64..1_000).prop_map(|(batches, first)| {
        let mut out = Vec::new();
        let mut base = first;
        for (records, codec, gaps, transactional, delete_horizon, log_append) in batches {
            let mut delta = 0;
            let records: Vec<Record> = records
                .into_iter()
                .zip(gaps)
                .map(|(r, gap)| {
                    delta += gap;
                    let r = Record {
                        offset_delta: delta,
                        ..r
                    };
                    delta += 1;
                    r
                })
                .collect();
            let last_offset_delta = delta - 1;
            let batch = BatchBuilder {
                codec,
                base_offset: base,
                partition_leader_epoch: 3,
                transactional,
                delete_horizon,
                log_append_time: log_append.map(|t| 1_700_000_000_000 + t),
                producer: if transactional {
                    (3, 0, 0)
                } else {
                    (-1, -1, -1)
                },
                ..BatchBuilder::new(records)
            }
            .build()
            .expect("BatchBuilder builds");
            base += last_offset_delta as i64 + 1;
            out.extend_from_slice(batch.as_bytes());
        }
        out
    })
}

#[test]
fn record_batch_corpus() {
    assert!(replay(BATCH, |b| check_records(b, false)) >= 10);
}

#[test]
fn record_batch_random_bytes() {
    run(prop::collection::vec(any::<u8>(), 0..512), |b| {
        check_records(&b, false)
    });
}

#[test]
fn record_batch_valid_batches_merge_exactly() {
    run(valid_records(), |bytes| check_records(&bytes, true));
}

#[test]
fn record_batch_edited_batches() {
    run((valid_records(), edits()), |(bytes, edits)| {
        check_records(&apply(&bytes, &edits), false)
    });
}

// ---- properties and patterns --------------------------------------------

/// The properties parser, then everything that reads a mirror's properties.
fn check_properties(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let Ok(props) = props::parse(&text) else {
        return;
    };
    let _ = ClientConfig::from_properties(&props);
    let get = |k: &str| props.get(k).cloned().unwrap_or_default();
    let config = MirrorConfig {
        source_bootstrap: get("bootstrap.servers"),
        topics_include: get("mirror.topics.include"),
        topics_exclude: get("mirror.topics.exclude"),
        groups_include: get("mirror.groups.include"),
        groups_exclude: get("mirror.groups.exclude"),
        source_properties: props.clone(),
        ..MirrorConfig::default()
    };
    let _ = SyncSettings::from_config(&config);
    let _ = RiskSettings::from_config(&config);
    let _ = verify_interval(&config);
    let _ = RetryPolicy::from_config(|k| props.get(k).cloned());
    let _ = TopicFilter::new(&config.topics_include, &config.topics_exclude);
    let _ = GroupFilter::new(&config.groups_include, &config.groups_exclude);
    // What parses, written back in the simplest escaped form, parses equal.
    let written: String = props
        .iter()
        .map(|(k, v)| format!("{}={}\n", escape(k, true), escape(v, false)))
        .collect();
    let again: BTreeMap<String, String> = props::parse(&written).unwrap_or_else(|e| {
        panic!("written back, {props:?} does not parse: {e}\n{written}");
    });
    assert_eq!(again, props, "written back:\n{written}");
}

/// Java's `Properties.store` escaping, enough for a round trip.
fn escape(s: &str, key: bool) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{c}' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' ' if key || i == 0 => out.push_str("\\ "),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Include, exclude, then names, one per line.
fn check_patterns(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split('\n');
    let include = lines.next().unwrap_or("");
    let exclude = lines.next().unwrap_or("");
    let names: Vec<&str> = lines
        .chain([include, exclude, "", "__consumer_offsets"])
        .collect();
    if let Ok(f) = TopicFilter::new(include, exclude) {
        for n in &names {
            let _ = (f.matches(n), f.is_excluded(n), is_internal_topic(n));
        }
    }
    if let Ok(f) = GroupFilter::new(include, exclude) {
        for n in &names {
            let _ = f.matches(n);
        }
    }
    if let Ok(p) = PatternList::parse("mirror.topics.include", include) {
        let _ = (p.is_empty(), p.as_str());
        for n in &names {
            let _ = p.is_match(n);
        }
    }
    let _ = AclRules::parse(include);
    let _ = AclEntry::parse_canonical(include);
    let both = [include, exclude];
    let items = list_items(&both);
    let joined = join_lists(include, &[exclude]);
    let again = [joined.as_str()];
    assert_eq!(list_items(&again), items, "joined {joined:?}");
}

fn pattern_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just(".*".to_string()),
        Just(",".to_string()),
        Just(" ".to_string()),
        "[a-z]{1,4}",
        "[\\[\\](){}|?+*^$\\\\.,:;0-9a-zA-Z_-]{1,3}",
        Just("{1000}".to_string()),
        Just("TOPIC;".to_string()),
        Just("User:*".to_string()),
    ];
    prop::collection::vec(token, 0..8).prop_map(|t| t.concat())
}

#[test]
fn properties_corpus() {
    assert!(replay(PROPERTIES, check_properties) >= 10);
}

#[test]
fn properties_random_text() {
    run(any::<String>(), |s| check_properties(s.as_bytes()));
    let line = "[a-z.]{0,12}[ =:]{0,2}[a-zA-Z0-9.*\\\\ :=#!\\n\\r\\t\\u{e9}\\u{1F600}]{0,20}\\n?";
    let text = prop::collection::vec(line, 0..6).prop_map(|l| l.concat());
    run(text, |s| check_properties(s.as_bytes()));
}

#[test]
fn properties_edited() {
    let corpus: Vec<Vec<u8>> = fuzz::corpus(PROPERTIES).into_iter().map(|c| c.1).collect();
    run((prop::sample::select(corpus), edits()), |(valid, edits)| {
        check_properties(&apply(&valid, &edits))
    });
}

#[test]
fn patterns_corpus() {
    assert!(replay(PATTERNS, check_patterns) >= 10);
}

#[test]
fn patterns_random_text() {
    run(any::<Vec<u8>>(), |b| check_patterns(&b));
    let text = (pattern_text(), pattern_text(), "[a-z._-]{0,10}")
        .prop_map(|(i, e, n)| format!("{i}\n{e}\n{n}"));
    run(text, |s| check_patterns(s.as_bytes()));
}

// ---- the seed corpus ----------------------------------------------------

/// Rewrites the generated seeds (`seed-*`): valid encodings to mutate from.
#[test]
#[ignore = "writes into fuzz/corpus; run by hand after a format change"]
fn write_seed_corpus() {
    let mut runner = TestRunner::deterministic();
    for i in 0..12 {
        let record = events_common::any_record()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let bytes = codec::encode_record(&record, 1_700_000_000_000 + i, i as u64, 1);
        fuzz::save(EVENT, &format!("seed-record-{i:02}"), &bytes);
        fuzz::save(
            EVENT,
            &format!("seed-key-{i:02}"),
            &codec::encode_key(&record.key()),
        );
    }
    for i in 0..4 {
        let bytes = valid_snapshot().new_tree(&mut runner).unwrap().current();
        fuzz::save(EVENT, &format!("seed-snapshot-{i:02}"), &bytes);
    }
    for i in 0..16 {
        let bytes = valid_records().new_tree(&mut runner).unwrap().current();
        fuzz::save(BATCH, &format!("seed-records-{i:02}"), &bytes);
    }
}
