//! The coordinator hash must equal Java's `String.hashCode()` and Kafka's
//! routing for every string, and a partition key's that of Kafka's own
//! classes. The expected values come from the JDK at test time, never typed
//! by hand.

use std::process::Command;

use kmirror_events::routing::{
    coordinator_partition, java_string_hash_code, java_uuid_hash_code, partition_key_hash_code,
    partition_state_partition,
};
use kmirror_events::{MirrorPartitionKey, TopicId};

const NAMES: &[&str] = &[
    "",
    "a",
    "mirror",
    "my-mirror.prod_1",
    "orders-to-dr",
    "café",
    "Ünïcödé-Spiegel",
    "日本語ミラー",
    "😀",
    "mirror-🚀-emoji-👩‍👩‍👧",
    "polygenelubricants", // hashCode is Integer.MIN_VALUE
    "GydZG_",
    "DESIGNING WORKHOUSES",
    "a long mirror name that overflows the hash many times over and over again",
];

/// Runs the Java source `code` (class `class`, launched as a single source
/// file, on `classpath` if given) and returns its standard output's lines.
fn run_java(class: &str, code: &str, classpath: Option<&str>) -> Vec<String> {
    if Command::new("java").arg("-version").output().is_err() {
        panic!("java (JDK 11+) must be on PATH for this test");
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join(format!("{class}.java"));
    std::fs::write(&src, code).unwrap();
    let mut java = Command::new("java");
    if let Some(cp) = classpath {
        java.arg("-cp").arg(cp);
    }
    let out = java.arg(&src).output().expect("run java");
    assert!(
        out.status.success(),
        "java failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn matches_the_jdk() {
    // Names are passed as \u escapes of UTF-16 code units so no encoding
    // of source files or arguments can interfere.
    let mut array = String::new();
    for n in NAMES {
        array.push('"');
        for u in n.encode_utf16() {
            array.push_str(&format!("\\u{u:04x}"));
        }
        array.push_str("\",\n");
    }
    let lines = run_java(
        "Hash",
        &format!(
            r#"public class Hash {{
  static int abs(int n) {{ return (n == Integer.MIN_VALUE) ? 0 : Math.abs(n); }}
  public static void main(String[] a) {{
    String[] names = {{ {array} }};
    for (String n : names) {{
      int h = n.hashCode();
      System.out.println(h + " " + (abs(h) % 50) + " " + (abs(h) % 7));
    }}
  }}
}}"#
        ),
        None,
    );
    assert_eq!(lines.len(), NAMES.len());
    let mut saw_min = false;
    for (name, line) in NAMES.iter().zip(lines) {
        let f: Vec<i32> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        assert_eq!(java_string_hash_code(name), f[0], "hashCode of {name:?}");
        assert_eq!(
            coordinator_partition(name, 50),
            f[1],
            "partition/50 of {name:?}"
        );
        assert_eq!(
            coordinator_partition(name, 7),
            f[2],
            "partition/7 of {name:?}"
        );
        saw_min |= f[0] == i32::MIN;
    }
    assert!(
        saw_min,
        "the table must include a name hashing to Integer.MIN_VALUE"
    );
}

/// A mirror partition's own records route by their composite key as the
/// KIP's prototype does: the message generator's `hashCode()` of
/// `(MirrorName, TopicId, Partition)` — `31 * h + field` from 0, the form
/// every generated Kafka message class has. Checked against Kafka's own
/// classes (from the jars `scripts/kafka` fetches): `Uuid`, whose byte
/// order and `toString` must also be ours, and the generated `TopicRecord`
/// (Name, TopicId), the key's first two fields; the last step,
/// `31 * h + partition`, is written out.
#[test]
fn partition_keys_route_as_kafka_hashes_them() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/kafka"))
        .arg("classpath")
        .output()
        .expect("run scripts/kafka classpath");
    assert!(
        out.status.success(),
        "scripts/kafka classpath: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let classpath = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // Ids with a high bit set in either half, all-zero, all-one, and a few
    // byte patterns; names from the table above; partitions at the edges.
    let ids: Vec<TopicId> = [
        [0u8; 16],
        [0xff; 16],
        [7; 16],
        *b"\x80\x00\x00\x00\x00\x00\x00\x01\x7f\xff\xff\xff\xff\xff\xff\xfe",
        *b"0123456789abcdef",
        [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x0f, 0xed, 0xcb, 0xa9, 0x87, 0x65,
            0x43, 0x21,
        ],
    ]
    .map(TopicId)
    .to_vec();
    let partitions = [0, 1, 7, 99, 4095, i32::MAX];
    let mut keys = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        for (j, id) in ids.iter().enumerate() {
            keys.push(MirrorPartitionKey::new(
                *name,
                *id,
                partitions[(i + j) % partitions.len()],
            ));
        }
    }
    let mut rows = String::new();
    for k in &keys {
        let most = i64::from_be_bytes(k.topic_id.0[..8].try_into().unwrap());
        let least = i64::from_be_bytes(k.topic_id.0[8..].try_into().unwrap());
        let name: String = k
            .mirror_name
            .encode_utf16()
            .map(|u| format!("\\u{u:04x}"))
            .collect();
        rows.push_str(&format!(
            "    {{ \"{name}\", \"{most}\", \"{least}\", \"{}\" }},\n",
            k.partition
        ));
    }
    let lines = run_java(
        "Keys",
        &format!(
            r#"import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.TopicRecord;
public class Keys {{
  static int abs(int n) {{ return (n == Integer.MIN_VALUE) ? 0 : Math.abs(n); }}
  public static void main(String[] a) {{
    String[][] rows = {{
{rows}    }};
    for (String[] r : rows) {{
      Uuid id = new Uuid(Long.parseLong(r[1]), Long.parseLong(r[2]));
      int partition = Integer.parseInt(r[3]);
      // Kafka's generated TopicRecord is (Name string, TopicId uuid): its
      // hashCode is the first two steps, as the generator writes them.
      int h = new TopicRecord().setName(r[0]).setTopicId(id).hashCode();
      h = 31 * h + partition;
      System.out.println(id + " " + id.hashCode() + " " + h + " " + (abs(h) % 50) + " " + (abs(h) % 7));
    }}
  }}
}}"#
        ),
        Some(&classpath),
    );
    assert_eq!(lines.len(), keys.len());
    for (k, line) in keys.iter().zip(lines) {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(k.topic_id.to_string(), f[0], "Uuid.toString of {k:?}");
        let n: Vec<i32> = f[1..].iter().map(|x| x.parse().unwrap()).collect();
        assert_eq!(
            java_uuid_hash_code(&k.topic_id),
            n[0],
            "Uuid.hashCode of {k:?}"
        );
        assert_eq!(partition_key_hash_code(k), n[1], "key hashCode of {k:?}");
        assert_eq!(
            partition_state_partition(k, 50),
            n[2],
            "partition/50 of {k:?}"
        );
        assert_eq!(
            partition_state_partition(k, 7),
            n[3],
            "partition/7 of {k:?}"
        );
    }
}
