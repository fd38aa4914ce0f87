//! The coordinator hash must equal Java's `String.hashCode()` and Kafka's
//! routing for every string. The expected values come from the JDK at test
//! time, never typed by hand.

use std::process::Command;

use kmirror_events::routing::{coordinator_partition, java_string_hash_code};

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

#[test]
fn matches_the_jdk() {
    if Command::new("java").arg("-version").output().is_err() {
        panic!("java (JDK 11+) must be on PATH for this test");
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("Hash.java");
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
    std::fs::write(
        &src,
        format!(
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
    )
    .unwrap();
    let out = Command::new("java").arg(&src).output().expect("run java");
    assert!(
        out.status.success(),
        "java failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
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
