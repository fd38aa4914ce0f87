//! ACL sync against real Kafka clusters that run the StandardAuthorizer
//! (`scripts/kafka up --authorizer`), with Kafka's own `kafka-acls` as the
//! client: the source's topic and group bindings selected by `acls.include`
//! appear on the destination, a source binding removed goes away there, and
//! the operator's own destination bindings are never touched. Its own test
//! binary, so the pair with an authorizer is started once and alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kmirror_tests::mirror::node_on;
use kmirror_tests::{acl_list, kafka_tool_ok, unique, OwnPair};

fn pair() -> OwnPair {
    OwnPair::start("kmirror-acl-bed", &["--authorizer"])
}

fn acls(bootstrap: &str, args: &[&str]) {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    kafka_tool_ok("kafka-acls", &all);
}

async fn wait_for(
    bootstrap: &str,
    what: &str,
    ok: impl Fn(&BTreeSet<String>) -> bool,
) -> BTreeSet<String> {
    let start = Instant::now();
    loop {
        let have = acl_list(bootstrap);
        if ok(&have) {
            return have;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: destination ACLs are {have:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[actix::test]
async fn acls_follow_the_source_and_the_operators_own_stay() {
    let pair = pair();
    let t = unique("acl-orders");
    let g = unique("grp");
    // On the source: a literal and a prefixed topic ACL, a deny, a group
    // ACL, and one on a topic acls.include does not select.
    acls(
        &pair.source,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            &t,
        ],
    );
    acls(
        &pair.source,
        &[
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Write",
            "--resource-pattern-type",
            "prefixed",
            "--topic",
            "acl-pre-",
        ],
    );
    acls(
        &pair.source,
        &[
            "--add",
            "--deny-principal",
            "User:mallory",
            "--operation",
            "Read",
            "--topic",
            &t,
        ],
    );
    acls(
        &pair.source,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--group",
            &g,
        ],
    );
    acls(
        &pair.source,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "payments",
        ],
    );
    // The operator's own, on the destination.
    acls(
        &pair.destination,
        &[
            "--add",
            "--allow-principal",
            "User:ops",
            "--operation",
            "Describe",
            "--topic",
            "acl-local",
        ],
    );
    let operators = acl_list(&pair.destination);
    assert_eq!(operators.len(), 1, "{operators:?}");

    let dir = tempfile::tempdir().unwrap();
    let node = node_on(dir.path(), &pair.destination).await;
    let props = BTreeMap::from([
        ("bootstrap.servers".to_string(), pair.source.clone()),
        (
            "acls.include".to_string(),
            "TOPIC;acl-.*,GROUP;*;READ".to_string(),
        ),
    ]);
    node.create_mirror("acl", props)
        .await
        .expect("create mirror");

    let literal = format!("TOPIC:LITERAL:{t} User:alice * READ ALLOW");
    let prefixed = "TOPIC:PREFIXED:acl-pre- User:bob * WRITE ALLOW".to_string();
    let deny = format!("TOPIC:LITERAL:{t} User:mallory * READ DENY");
    let group = format!("GROUP:LITERAL:{g} User:alice * READ ALLOW");
    let synced = [&literal, &prefixed, &deny, &group];
    let have = wait_for(&pair.destination, "source ACLs copied", |have| {
        synced.iter().all(|a| have.contains(*a))
    })
    .await;
    let mut expected: BTreeSet<String> = synced.iter().map(|s| s.to_string()).collect();
    expected.extend(operators.iter().cloned());
    assert_eq!(have, expected, "payments is not selected by acls.include");

    // The source drops two bindings: only those go, the operator's stays.
    acls(
        &pair.source,
        &[
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            &t,
        ],
    );
    acls(
        &pair.source,
        &[
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--group",
            &g,
        ],
    );
    let have = wait_for(&pair.destination, "removed source ACLs removed", |have| {
        !have.contains(&literal) && !have.contains(&group)
    })
    .await;
    let mut expected: BTreeSet<String> = [prefixed, deny].into_iter().collect();
    expected.extend(operators);
    assert_eq!(have, expected);
    let m = node.sync_metrics().await;
    assert_eq!(
        (m[0].acls_created, m[0].acls_deleted, m[0].acl_sync_errors),
        (4, 2, 0),
        "{m:?}"
    );
    node.shutdown().await;
}
