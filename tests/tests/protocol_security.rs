//! TLS, SASL (SCRAM-SHA-256/512, PLAIN) and ACL RPCs against a cluster
//! started with `scripts/kafka up --security` (SSL listener with keytool
//! keys, SASL_PLAINTEXT listener with SCRAM users, StandardAuthorizer).
//! Everything runs in one test so the secure cluster is started and stopped
//! exactly once. Set `KMIRROR_SECURE_BED_ENV` to reuse a running one.

mod protocol_common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use bytes::Bytes;
use kmirror_actors::kafka::admin::{AclBinding, AclFilter, Admin};
use kmirror_actors::kafka::batch::{
    decode_records, encode_batch, Codec, OutgoingBatch, Record, SourceOffsets,
};
use kmirror_actors::kafka::fetch::{FetchOptions, FetchSession, TopicPartition};
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_actors::kafka::{KafkaClient, KafkaError};
use kmirror_tests::{kafka_script, unique};
use protocol_common::create;

struct SecureBed {
    env: BTreeMap<String, String>,
    owned_dir: Option<PathBuf>,
}

impl Drop for SecureBed {
    fn drop(&mut self) {
        if let Some(dir) = &self.owned_dir {
            let _ = Command::new(kafka_script())
                .args(["down", "--dir"])
                .arg(dir)
                .stdin(Stdio::null())
                .status();
        }
    }
}

fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn secure_bed() -> SecureBed {
    if let Ok(f) = std::env::var("KMIRROR_SECURE_BED_ENV") {
        return SecureBed {
            env: parse_env(&std::fs::read_to_string(f).unwrap()),
            owned_dir: None,
        };
    }
    let dir = std::env::temp_dir().join(format!("kmirror-secure-bed-{}", std::process::id()));
    let out = Command::new(kafka_script())
        .args(["up", "--clusters", "1", "--security", "--dir"])
        .arg(&dir)
        .args(["--owner-pid", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/kafka up --security");
    assert!(
        out.status.success(),
        "scripts/kafka up --security: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    SecureBed {
        env: parse_env(&String::from_utf8_lossy(&out.stdout)),
        owned_dir: Some(dir),
    }
}

fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Produces one batch through our producer and reads it back through a fetch session.
async fn round_trip(c: &KafkaClient, label: &str) {
    let topic = unique(&format!("proto-sec-{label}"));
    create(&Admin::new(c.clone()), &topic, 1, &[]).await;
    let recs: Vec<Record> = (0..20)
        .map(|i| Record {
            offset_delta: i,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from(format!("{label}-{i}"))),
            value: None,
            headers: vec![(Bytes::from_static(b"h"), None)],
        })
        .collect();
    let p = IdempotentProducer::new(c.clone()).await.unwrap();
    let pp = p.partition(&topic, 0).unwrap();
    let ack = pp
        .send(OutgoingBatch::new(
            encode_batch(&recs, Codec::Gzip).unwrap(),
            20,
            SourceOffsets::Range { first: 0, last: 19 },
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ack.base_offset, 0);
    let (leader, epoch) = c.leader(&topic, 0).await.unwrap();
    let mut s = FetchSession::new(c.clone(), leader, FetchOptions::default());
    s.add(TopicPartition::new(&topic, 0), 0, epoch, uuid::Uuid::nil());
    let res = s.fetch().await.unwrap();
    let data = res[0].1.as_ref().unwrap();
    let b = data.batches().next().unwrap().unwrap();
    assert_eq!(decode_records(&b).unwrap().records, recs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sasl_and_acls() {
    let bed = secure_bed();
    let e = |k: &str| {
        bed.env
            .get(k)
            .unwrap_or_else(|| panic!("secure bed lacks {k}: {:?}", bed.env))
            .clone()
    };
    let (ssl, sasl, ca, user, pass) = (
        e("CLUSTER_1_SSL"),
        e("CLUSTER_1_SASL"),
        e("CLUSTER_1_CA"),
        e("SCRAM_USER"),
        e("SCRAM_PASSWORD"),
    );

    // TLS with server verification against the keytool CA (host name checked: SAN 127.0.0.1).
    let tls = KafkaClient::from_properties(&props(&[
        ("bootstrap.servers", &ssl),
        ("security.protocol", "SSL"),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", &ca),
    ]))
    .await
    .expect("TLS connect");
    assert_eq!(
        tls.metadata().brokers.values().next().unwrap().address(),
        ssl,
        "SSL listener advertised"
    );
    round_trip(&tls, "tls").await;

    // TLS against a trust store without our CA is refused.
    let other_ca =
        std::env::temp_dir().join(format!("kmirror-other-ca-{}.pem", std::process::id()));
    let pem = std::fs::read_to_string(&ca).unwrap();
    // A syntactically valid but different certificate: the system bundle if present, else a corrupted copy.
    let foreign = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt")
        .unwrap_or_else(|_| pem.replace('A', "B"));
    std::fs::write(&other_ca, foreign).unwrap();
    let refused = KafkaClient::from_properties(&props(&[
        ("bootstrap.servers", &ssl),
        ("security.protocol", "SSL"),
        ("ssl.truststore.location", other_ca.to_str().unwrap()),
    ]))
    .await
    .expect_err("untrusted server certificate must be refused");
    eprintln!("untrusted CA: {refused}");
    assert!(
        matches!(refused, KafkaError::Tls { .. } | KafkaError::Config { .. }),
        "{refused:?}"
    );

    // SASL/SCRAM both hash sizes via sasl.jaas.config, PLAIN via explicit username/password.
    for mech in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let jaas = format!(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{pass}";"#
        );
        let c = KafkaClient::from_properties(&props(&[
            ("bootstrap.servers", &sasl),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", mech),
            ("sasl.jaas.config", &jaas),
        ]))
        .await
        .unwrap_or_else(|e| panic!("{mech}: {e}"));
        round_trip(&c, &mech.to_lowercase()).await;
    }
    let plain = KafkaClient::from_properties(&props(&[
        ("bootstrap.servers", &sasl),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", &user),
        ("sasl.password", &pass),
    ]))
    .await
    .expect("PLAIN");
    assert!(!plain.metadata().brokers.is_empty());

    // A wrong password is a clear, non-retriable authentication error.
    let err = KafkaClient::from_properties(&props(&[
        ("bootstrap.servers", &sasl),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-256"),
        ("sasl.username", &user),
        ("sasl.password", "wrong-password"),
    ]))
    .await
    .expect_err("wrong password must fail");
    eprintln!("wrong password: {err}");
    assert!(matches!(err, KafkaError::Authentication { .. }), "{err:?}");
    assert!(err.to_string().contains("authentication failed"), "{err}");
    assert!(!err.is_retriable());

    // ACL RPCs against the StandardAuthorizer.
    let admin = Admin::new(tls.clone());
    let topic = unique("proto-acl");
    let acl = |op: i8| AclBinding {
        resource_type: 2,
        resource_name: topic.clone(),
        pattern_type: 3,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: op,
        permission_type: 3,
    };
    admin
        .create_acls(&[acl(3), acl(8)])
        .await
        .expect("CreateAcls");
    let filter = AclFilter {
        resource_type: 2,
        resource_name: Some(topic.clone()),
        pattern_type: 3,
        ..AclFilter::any()
    };
    let mut listed = Vec::new();
    for _ in 0..50 {
        listed = admin.describe_acls(&filter).await.expect("DescribeAcls");
        if listed.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(listed, vec![acl(3), acl(8)]);
    let deleted = admin
        .delete_acls(&[AclFilter {
            operation: 3,
            ..filter.clone()
        }])
        .await
        .expect("DeleteAcls");
    assert_eq!(deleted, vec![acl(3)]);
    for _ in 0..50 {
        listed = admin.describe_acls(&filter).await.unwrap();
        if listed.len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(listed, vec![acl(8)]);
    let _ = std::fs::remove_file(other_ca);
}
