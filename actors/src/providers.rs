//! Kafka's config providers in a mirror's properties: `${file:PATH:KEY}`
//! (a key of a `.properties` file, as Kafka's `FileConfigProvider` reads
//! it) and `${env:NAME}` (an environment variable, as
//! `EnvVarConfigProvider`), resolved on the node that connects.
//!
//! A mirror's properties are stored in the event log and published to the
//! state topic, where literal secrets are stripped; every node of a
//! clustered daemon may have to connect to the source, from the state topic
//! alone. A reference is stored as written and resolved only when a
//! connection is made, from the files and environment of that node — so
//! secrets never leave the machines an operator put them on, and a mirror
//! whose coordinator moves still connects.

use std::collections::BTreeMap;

/// Why a reference could not be resolved: names the property and the
/// reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{property}: {reference}: {reason}")]
pub struct ProviderError {
    pub property: String,
    pub reference: String,
    pub reason: String,
}

/// Whether `value` holds a provider reference (and so no literal secret).
pub fn has_reference(value: &str) -> bool {
    value.contains("${file:") || value.contains("${env:")
}

/// `props` with every `${file:…}` and `${env:…}` reference replaced by what
/// it names. `env` reads a variable (a parameter, so tests need not touch
/// the process environment).
pub fn resolve(
    props: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ProviderError> {
    let mut files: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    props
        .iter()
        .map(|(name, value)| {
            resolve_value(value, &mut |reference| {
                lookup(reference, &env, &mut files).map_err(|reason| ProviderError {
                    property: name.clone(),
                    reference: format!("${{{reference}}}"),
                    reason,
                })
            })
            .map(|v| (name.clone(), v))
        })
        .collect()
}

/// `value` with each `${provider:…}` of a known provider replaced; other
/// `${…}` text is left as it is (Kafka leaves unknown providers alone).
fn resolve_value(
    value: &str,
    lookup: &mut dyn FnMut(&str) -> Result<String, ProviderError>,
) -> Result<String, ProviderError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let inner = &rest[start + 2..start + len];
        out.push_str(&rest[..start]);
        if inner.starts_with("file:") || inner.starts_with("env:") {
            out.push_str(&lookup(inner)?);
        } else {
            out.push_str(&rest[start..=start + len]);
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn lookup(
    reference: &str,
    env: &impl Fn(&str) -> Option<String>,
    files: &mut BTreeMap<String, BTreeMap<String, String>>,
) -> Result<String, String> {
    if let Some(name) = reference.strip_prefix("env:") {
        return env(name).ok_or_else(|| format!("no environment variable {name} on this node"));
    }
    let spec = reference.strip_prefix("file:").unwrap_or(reference);
    // The path may itself hold ':' (Kafka splits at the last one).
    let (path, key) = spec
        .rsplit_once(':')
        .ok_or_else(|| "expected ${file:PATH:KEY}".to_string())?;
    if !files.contains_key(path) {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {path} on this node: {e}"))?;
        let parsed = crate::props::parse(&text).map_err(|e| format!("{path}: {e}"))?;
        files.insert(path.to_string(), parsed);
    }
    files[path]
        .get(key)
        .cloned()
        .ok_or_else(|| format!("{path} has no key {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn references_resolve_from_files_and_the_environment_of_this_node() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secrets.properties");
        std::fs::write(&file, "# east\neast.password=s3cret\nuser = kmirror\n").unwrap();
        let f = file.display();
        let given = props(&[
            ("bootstrap.servers", "127.0.0.1:9092"),
            (
                "sasl.jaas.config",
                &format!("Scram required username=\"${{file:{f}:user}}\" password=\"${{file:{f}:east.password}}\";"),
            ),
            ("ssl.truststore.password", "${env:TRUST}"),
            ("client.id", "${unknown:x} stays"),
        ]);
        let env = |n: &str| (n == "TRUST").then(|| "changeit".to_string());
        let got = resolve(&given, env).unwrap();
        assert_eq!(
            got["sasl.jaas.config"],
            "Scram required username=\"kmirror\" password=\"s3cret\";"
        );
        assert_eq!(got["ssl.truststore.password"], "changeit");
        assert_eq!(got["client.id"], "${unknown:x} stays");
        assert_eq!(got["bootstrap.servers"], "127.0.0.1:9092");
        assert!(has_reference(&given["sasl.jaas.config"]));
        assert!(!has_reference(&given["client.id"]));
    }

    #[test]
    fn what_cannot_be_resolved_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.properties");
        std::fs::write(&file, "a=1\n").unwrap();
        let none = |_: &str| None;
        let e = resolve(&props(&[("p", "${env:NOPE}")]), none).unwrap_err();
        assert_eq!(
            (e.property.as_str(), e.reference.as_str()),
            ("p", "${env:NOPE}")
        );
        assert!(e.reason.contains("NOPE"), "{e}");
        let missing_key = format!("${{file:{}:b}}", file.display());
        let e = resolve(&props(&[("p", &missing_key)]), none).unwrap_err();
        assert!(e.reason.contains("no key b"), "{e}");
        let e = resolve(
            &props(&[("p", "${file:/nonexistent/x.properties:a}")]),
            none,
        )
        .unwrap_err();
        assert!(e.reason.contains("cannot read"), "{e}");
        let e = resolve(&props(&[("p", "${file:nokey}")]), none).unwrap_err();
        assert!(e.reason.contains("PATH:KEY"), "{e}");
    }
}
