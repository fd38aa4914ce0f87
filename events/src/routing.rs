//! Coordinator routing, bit-for-bit as Kafka computes it.

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code
/// units with wrapping `int` arithmetic. Must match Java exactly, because a
/// Kafka-hosted `__mirror_state` and Java tools place a mirror by this hash.
pub fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// Kafka's `Utils.abs`: like `i32::abs` except that `i32::MIN` maps to 0
/// instead of overflowing.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The `__mirror_state` partition that coordinates `mirror_name`:
/// `Utils.abs(mirrorName.hashCode()) % partitions` (KIP JR38).
///
/// # Panics
/// If `partitions` is not positive: a zero-partition state topic is a
/// configuration error that must never reach routing.
pub fn coordinator_partition(mirror_name: &str, partitions: i32) -> i32 {
    assert!(
        partitions > 0,
        "mirror.state.topic.num.partitions must be > 0"
    );
    kafka_abs(java_string_hash_code(mirror_name)) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("hello"), 99162322);
        assert_eq!(kafka_abs(i32::MIN), 0);
        assert_eq!(coordinator_partition("", 50), 0);
    }
}
