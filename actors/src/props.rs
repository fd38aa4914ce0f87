//! Kafka-style `.properties` files, as `--mirror-config` takes them and
//! as `${file:PATH:KEY}` references read them (`providers.rs`).
//!
//! Operators already keep their source-cluster connection in this format for
//! Kafka's own tools; reading it as Java does (comments, `=`/`:`/space
//! separators, backslash continuations and escapes) lets them reuse it.

use std::collections::BTreeMap;

/// Parses properties text. Later keys win, as in Java.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let mut logical = line.trim_start().to_owned();
        if logical.is_empty() || logical.starts_with('#') || logical.starts_with('!') {
            continue;
        }
        while ends_with_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split(&logical);
        let key = unescape(key).map_err(|e| format!("line {}: {e}", index + 1))?;
        let value = unescape(value).map_err(|e| format!("line {}: {e}", index + 1))?;
        if key.is_empty() {
            return Err(format!("line {}: a value without a key", index + 1));
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// An odd number of trailing backslashes continues the line.
fn ends_with_continuation(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// Splits at the first unescaped `=`, `:` or whitespace; whitespace around
/// the separator is dropped, trailing whitespace of the value is kept (Java).
fn split(line: &str) -> (&str, &str) {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' => return (&line[..i], line[i + 1..].trim_start()),
            c if c.is_whitespace() => {
                let rest = line[i..].trim_start();
                let rest = rest
                    .strip_prefix(['=', ':'])
                    .map(str::trim_start)
                    .unwrap_or(rest);
                return (&line[..i], rest);
            }
            _ => {}
        }
    }
    (line, "")
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let unit = hex4(&mut chars)?;
                let code = if (0xD800..0xDC00).contains(&unit) {
                    // Java's `Properties.store` writes a character beyond
                    // U+FFFF as two escapes: a UTF-16 surrogate pair.
                    let low = match (chars.next(), chars.next()) {
                        (Some('\\'), Some('u')) => hex4(&mut chars)?,
                        _ => 0,
                    };
                    if !(0xDC00..0xE000).contains(&low) {
                        return Err(format!(
                            "`\\u{unit:04x}` is half a surrogate pair: a `\\u` escape of dc00 to dfff must follow"
                        ));
                    }
                    0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                } else {
                    unit
                };
                let c = char::from_u32(code)
                    .ok_or_else(|| format!("`\\u{code:04x}` is not a character"))?;
                out.push(c);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

/// The four hex digits of a `\u` escape (`from_str_radix` alone would
/// take a sign, `\u+fff`).
fn hex4(chars: &mut std::str::Chars<'_>) -> Result<u32, String> {
    let hex: String = chars.by_ref().take(4).collect();
    if hex.len() == 4 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(u32::from_str_radix(&hex, 16).expect("four hex digits"))
    } else {
        Err(format!("bad \\u escape `\\u{hex}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_properties_syntax() {
        let text = "\
# source cluster
! also a comment
bootstrap.servers=127.0.0.1:9092, 127.0.0.1:9093
security.protocol : SASL_SSL
sasl.mechanism SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username=\"u\" \\
    password=\"p\";
mirror.topics.include=orders-.*
empty.value=
path=C\\:\\\\data\\tx
unicode=caf\\u00e9
a\\=b=c
";
        let p = parse(text).unwrap();
        assert_eq!(p["bootstrap.servers"], "127.0.0.1:9092, 127.0.0.1:9093");
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(
            p["sasl.jaas.config"],
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";"
        );
        assert_eq!(p["mirror.topics.include"], "orders-.*");
        assert_eq!(p["empty.value"], "");
        assert_eq!(p["path"], "C:\\data\tx");
        assert_eq!(p["unicode"], "café");
        assert_eq!(p["a=b"], "c");
        assert_eq!(p.len(), 9);
    }

    #[test]
    fn characters_beyond_the_bmp_as_java_writes_them() {
        // What `Properties.store` writes for "😀" (U+1F600).
        let p = parse("smile=\\ud83d\\ude00\n").unwrap();
        assert_eq!(p["smile"], "😀");
        for bad in [
            "a=\\ud83d",
            "a=\\ud83dx",
            "a=\\ud83d\\u0041",
            "a=\\ude00",
            "a=\\u+fff",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with("line 1: "), "{bad}: {e}");
        }
    }

    #[test]
    fn later_keys_win_and_errors_name_the_line() {
        let p = parse("a=1\na=2\n").unwrap();
        assert_eq!(p["a"], "2");
        assert_eq!(
            parse("ok=1\n=oops\n").unwrap_err(),
            "line 2: a value without a key"
        );
        assert!(parse("x=\\u12\n")
            .unwrap_err()
            .starts_with("line 1: bad \\u escape"));
    }
}
