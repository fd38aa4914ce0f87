//! ACL sync never widens access on the destination (issue 16), against
//! real Kafka with the StandardAuthorizer and Kafka's own `kafka-acls`.
//! The source allows User:alice to read a topic prefix and denies her one
//! topic under it; the mirror's `acls.include` selects only ALLOWs. The
//! destination must never hold the ALLOW without the DENY, and the sync
//! must leave the operator's own destination DENYs alone even when the
//! source drops the same binding. Its own binary: its own authorizer pair.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kmirror_tests::mirror::node_on;
use kmirror_tests::{acl_list, kafka_tool_ok, unique, OwnPair};

/// `kafka-acls --add|--remove` of one READ binding for User:alice.
fn alice_read(bootstrap: &str, verb: &str, permission: &str, pattern: &str, topic: &str) {
    let mut args = vec!["--bootstrap-server", bootstrap, verb];
    if verb == "--remove" {
        args.push("--force");
    }
    let principal = format!("--{permission}-principal");
    args.extend([
        principal.as_str(),
        "User:alice",
        "--operation",
        "Read",
        "--resource-pattern-type",
        pattern,
        "--topic",
        topic,
    ]);
    kafka_tool_ok("kafka-acls", &args);
}

/// Polls the destination's ACLs until `ok`; at every look, `allow` is
/// never there without `deny`.
async fn wait(
    destination: &str,
    what: &str,
    allow: &str,
    deny: &str,
    ok: impl Fn(&BTreeSet<String>) -> bool,
) -> BTreeSet<String> {
    let start = Instant::now();
    let mut looks = 0;
    loop {
        let have = acl_list(destination);
        looks += 1;
        assert!(
            !have.contains(allow) || have.contains(deny),
            "the destination grants {allow} without {deny}, which the source has: {have:#?}"
        );
        if ok(&have) {
            println!(
                "{what}: {looks} looks, {:.1} s",
                start.elapsed().as_secs_f64()
            );
            return have;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: destination ACLs are {have:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[actix::test]
async fn acl_sync_copies_the_deny_beside_the_allow_and_keeps_the_destinations_denies() {
    let pair = OwnPair::start("kmirror-acl-deny-bed", &["--authorizer"]);
    let p = unique("deny");
    let prefix = format!("{p}-");
    let (secret, audit, private) = (
        format!("{p}-secret"),
        format!("{p}-audit"),
        format!("{p}-private"),
    );
    alice_read(&pair.source, "--add", "allow", "prefixed", &prefix);
    alice_read(&pair.source, "--add", "deny", "literal", &secret);
    alice_read(&pair.source, "--add", "deny", "literal", &audit);
    // The operator's own DENYs on the destination: one the source has
    // too, one it never had.
    alice_read(&pair.destination, "--add", "deny", "literal", &audit);
    alice_read(&pair.destination, "--add", "deny", "literal", &private);

    let allow = format!("TOPIC:PREFIXED:{prefix} User:alice * READ ALLOW");
    let deny = |t: &str| format!("TOPIC:LITERAL:{t} User:alice * READ DENY");
    let operators: BTreeSet<String> = [deny(&audit), deny(&private)].into();
    assert_eq!(acl_list(&pair.destination), operators);

    let dir = tempfile::tempdir().unwrap();
    let node = node_on(dir.path(), &pair.destination).await;
    // Only ALLOWs are selected: copied alone, this one would let alice
    // read `secret` on the destination.
    let props = BTreeMap::from([
        ("bootstrap.servers".to_string(), pair.source.clone()),
        (
            "acls.include".to_string(),
            format!("TOPIC;{p}.*;READ;ALLOW"),
        ),
    ]);
    node.create_mirror("deny", props)
        .await
        .expect("create mirror");

    let synced: BTreeSet<String> =
        [allow.clone(), deny(&secret), deny(&audit), deny(&private)].into();
    let have = wait(
        &pair.destination,
        "the ALLOW and the DENY synced",
        &allow,
        &deny(&secret),
        |h| h.contains(&allow),
    )
    .await;
    assert_eq!(have, synced);
    // A few more passes change nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(acl_list(&pair.destination), synced);

    // The source drops its ALLOW and the DENY the operator also has on the
    // destination: kmirror's ALLOW goes, the operator's DENYs stay, and the
    // DENY the source still has stays.
    alice_read(&pair.source, "--remove", "allow", "prefixed", &prefix);
    alice_read(&pair.source, "--remove", "deny", "literal", &audit);
    let have = wait(
        &pair.destination,
        "the ALLOW removed",
        &allow,
        &deny(&secret),
        |h| !h.contains(&allow),
    )
    .await;
    let expected: BTreeSet<String> = [deny(&secret), deny(&audit), deny(&private)].into();
    assert_eq!(have, expected);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        acl_list(&pair.destination),
        expected,
        "no destination DENY removed"
    );

    let m = node.sync_metrics().await;
    println!(
        "acls_created {} acls_deleted {} acl_sync_errors {}",
        m[0].acls_created, m[0].acls_deleted, m[0].acl_sync_errors
    );
    assert_eq!(
        (m[0].acls_created, m[0].acls_deleted, m[0].acl_sync_errors),
        (2, 1, 0),
        "{m:?}"
    );
    node.shutdown().await;
}
