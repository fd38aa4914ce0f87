//! Property tests of the pure domain.

mod common;

use common::*;
use kmirror_events::codec::{self, CodecError};
use kmirror_events::*;
use proptest::prelude::*;

fn mps_states(records: &[Record]) -> Vec<(MirrorPartitionKey, Option<MirrorPartitionStateValue>)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::MirrorPartitionState(k, v) => Some((k.clone(), v.clone())),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever commands arrive, every partition state record decide emits
    /// is a transition the §3.1 table allows, and refused commands change
    /// nothing.
    #[test]
    fn random_commands_only_make_allowed_transitions(cmds in prop::collection::vec(command(), 1..120)) {
        let mut image = MirrorStateImage::new();
        let mut accepted = 0;
        for cmd in &cmds {
            let before = image.clone();
            match decide(&image, cmd) {
                Ok(records) => {
                    for (k, v) in mps_states(&records) {
                        if let Some(v) = v {
                            let from = image.partition_state_or_unknown(&k);
                            prop_assert!(is_valid_transition(from, v.state), "{from} -> {} via {cmd:?}", v.state);
                            if v.state == PartitionState::Failed {
                                prop_assert_ne!(v.previous_state, PartitionState::Failed);
                            }
                        }
                    }
                    for (o, r) in (image.end_offset()..).zip(records.iter()) { image.apply(o, r); }
                    accepted += 1;
                }
                Err(e) => {
                    prop_assert!(!e.kip_name().is_empty());
                    prop_assert_eq!(&image, &before);
                }
            }
            // No partition state outlives its mirror.
            for (k, _) in image.partition_states() {
                prop_assert!(image.mirror(&k.mirror_name).is_some(), "orphan {k:?}");
            }
        }
        let _ = accepted;
    }

    #[test]
    fn codec_round_trips(r in any_record(), ts in any::<i64>(), base in any::<u64>(), count in any::<u32>()) {
        let bytes = codec::encode_record(&r, ts, base, count);
        let env = codec::decode_record(&bytes).unwrap();
        prop_assert_eq!(&env.record, &r);
        prop_assert_eq!(env.timestamp_ms, ts);
        prop_assert_eq!(env.batch_base, base);
        prop_assert_eq!(env.batch_count, count);
        // The index key from the raw envelope equals the encoded key.
        let view = codec::view_record(&bytes).unwrap();
        prop_assert_eq!(view.index_key(), codec::encode_key(&r.key()));
        prop_assert_eq!(view.has_value, !r.is_tombstone());
        // A key alone (a compacted topic's tombstone) decodes back.
        prop_assert_eq!(codec::decode_key(&codec::encode_key(&r.key())).unwrap(), r.key());
    }

    #[test]
    fn any_flipped_byte_is_detected(r in any_record(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = codec::encode_record(&r, 1, 0, 1);
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(codec::decode_record(&bytes).is_err());
    }

    #[test]
    fn snapshot_round_trips(cmds in prop::collection::vec(command(), 1..60)) {
        let mut image = MirrorStateImage::new();
        for c in &cmds { let _ = decide_and_apply(&mut image, c); }
        let bytes = codec::encode_snapshot(&image);
        prop_assert_eq!(codec::decode_snapshot(&bytes).unwrap(), image);
    }

    #[test]
    fn translate_is_exact_for_every_mirrored_offset(lens in prop::collection::vec((0i64..4, 1i64..6), 1..10)) {
        let mut runs = Vec::new();
        let (mut s, mut d) = (0i64, 0i64);
        for (gap, len) in lens {
            s += gap;
            runs.push(OffsetMapRun { source_start: s, destination_start: d, length: len });
            s += len;
            d += len;
        }
        let mut expected_dest = 0;
        for src in 0..s + 2 {
            match translate(&runs, src) {
                Translation::Exact(x) => { prop_assert_eq!(x, expected_dest); expected_dest += 1; }
                Translation::InGap(x) => prop_assert_eq!(x, expected_dest),
                Translation::AtEnd(x) => { prop_assert_eq!(x, d); prop_assert!(src >= s); }
                Translation::Empty => prop_assert!(false),
            }
        }
    }
}

#[test]
fn newer_format_is_refused_clearly() {
    let r = Record::MirrorConfig(
        MirrorConfigKey {
            mirror_name: "m".into(),
        },
        None,
    );
    let mut bytes = codec::encode_record(&r, 0, 0, 1);
    bytes[0] = FORMAT_VERSION + 1;
    let n = bytes.len();
    let crc = crc32(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    let e = codec::decode_record(&bytes).unwrap_err();
    assert!(matches!(e, CodecError::NewerFormat { found, .. } if found == FORMAT_VERSION + 1));
    assert!(e.to_string().contains("newer kmirror"));
}

fn crc32(b: &[u8]) -> u32 {
    // Tests avoid a crc dependency: bitwise CRC-32 (IEEE).
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}
