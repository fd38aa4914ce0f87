//! Failover and failback against real Kafka, clusters A and B: A→B with a
//! consumer group mid-way, A's broker killed (the disaster), failover on B, the group
//! and producers moved to B; then A back, holding records B never got, and
//! a fresh daemon with an empty data dir failing back B→A — in `delta` and
//! in `from-scratch` — and once more A→B: every record where it belongs, the
//! group reading exactly what it had not read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kmirror_actors::failback::FailbackRequest;
use kmirror_actors::kafka::ClientConfig;
use kmirror_actors::node::{Node, NodeError, OperationReport, TopicChange};
use kmirror_events::FailbackMode;
use kmirror_tests::mirror::{
    connector_through, describe_group, group_read, node_with, produce_to, records,
};
use kmirror_tests::proxy::{FaultProxy, FETCH};
use kmirror_tests::{create_topic, unique, BrokerOp, PrivateBed};

fn props(bootstrap: &str) -> BTreeMap<String, String> {
    [
        ("bootstrap.servers", bootstrap),
        // A lost source is noticed in seconds, not minutes.
        ("request.timeout.ms", "2000"),
        ("mirror.groups.sync.interval.ms", "300"),
        ("mirror.failed.retry.initial.backoff.ms", "200"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

async fn wait(what: &str, timeout: Duration, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < timeout, "{what}: not after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn states(node: &Node, mirror: &str) -> Vec<String> {
    node.describe(Some(mirror))
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.state)
        .collect()
}

async fn caught_up(node: &Node, mirror: &str, destination_end: i64) -> bool {
    let parts = node.describe(Some(mirror)).await.unwrap();
    !parts.is_empty()
        && parts.iter().all(|p| {
            p.state == "MIRRORING" && p.lag == 0 && p.destination_offset == destination_end
        })
}

/// The values of a topic's records, in offset order.
fn values(bootstrap: &str, topic: &str, n: usize) -> Vec<String> {
    records(bootstrap, topic, n)
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

fn value_lines(n: usize, tag: &str) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

fn produce_values(bootstrap: &str, topic: &str, n: usize, tag: &str) {
    let input: String = value_lines(n, tag)
        .iter()
        .map(|v| format!("from:{tag}\tk\t{v}\n"))
        .collect();
    produce_to(bootstrap, topic, &input, "none");
}

/// A→B up to the disaster: 300 records mirrored, group `g` at 120 synced to
/// B, 50 more records on A that B never fetched, A frozen, failover on B,
/// `g` reading its 180 on B, 40 new records on B, `g` reading 20 of them.
struct AfterFailover {
    bed: PrivateBed,
    topic: String,
    group: String,
    forward: Node,
    source_proxy: Arc<FaultProxy>,
    _dir: tempfile::TempDir,
}

async fn fail_over() -> AfterFailover {
    let bed = PrivateBed::start();
    let topic = unique("dr");
    let group = unique("dr-group");
    create_topic(&bed.source, &topic, 1, &[]);
    produce_values(&bed.source, &topic, 300, "a");
    let source_proxy = Arc::new(FaultProxy::start(&bed.source).await);
    let dir = tempfile::tempdir().unwrap();
    let forward = node_with(
        dir.path(),
        ClientConfig::plaintext(&bed.destination),
        connector_through(Some(source_proxy.clone())),
    )
    .await;
    forward
        .create_mirror("ab", props(&bed.source))
        .await
        .unwrap();
    forward
        .start_topics("ab", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait("A→B caught up", Duration::from_secs(60), async || {
        caught_up(&forward, "ab", 300).await
    })
    .await;
    assert_eq!(
        group_read(&bed.source, &topic, &group, 120, 20_000).len(),
        120
    );
    let on_a = describe_group(&bed.source, &group, &topic);
    assert_eq!(on_a, BTreeMap::from([(0, 120)]));
    wait("g synced to B", Duration::from_secs(30), async || {
        describe_group(&bed.destination, &group, &topic) == on_a
    })
    .await;
    // The network to A fails first, then A itself: 50 records reach A that
    // B never fetches.
    source_proxy.hold(&[FETCH]);
    tokio::time::sleep(Duration::from_millis(700)).await;
    produce_values(&bed.source, &topic, 50, "a-only");
    // A's broker (its only node) is killed: the disaster.
    bed.source_broker(1, BrokerOp::Kill);

    // Failover on B.
    forward
        .change_topics("ab", TopicChange::Stop, std::slice::from_ref(&topic), None)
        .await
        .unwrap();
    wait("STOPPED", Duration::from_secs(90), async || {
        states(&forward, "ab").await == ["STOPPED"]
    })
    .await;
    // The group continues on B: exactly the 180 it had not read.
    let read = group_read(&bed.destination, &topic, &group, 181, 15_000);
    assert_eq!(
        read,
        value_lines(300, "a")[120..],
        "none twice, none missed"
    );
    // Producers write to B; the group reads 20 of their records.
    produce_values(&bed.destination, &topic, 40, "b");
    let read = group_read(&bed.destination, &topic, &group, 20, 15_000);
    assert_eq!(read, value_lines(20, "b"));
    assert_eq!(
        describe_group(&bed.destination, &group, &topic),
        BTreeMap::from([(0, 320)])
    );
    AfterFailover {
        bed,
        topic,
        group,
        forward,
        source_proxy,
        _dir: dir,
    }
}

/// A back; a fresh daemon with an empty data dir mirroring B→A.
async fn reverse(f: &AfterFailover) -> (Node, tempfile::TempDir) {
    // A comes back on its own data, holding the records B never got.
    f.bed.source_broker(1, BrokerOp::Start);
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        ClientConfig::plaintext(&f.bed.source),
        connector_through(None),
    )
    .await;
    // With the topic in its include pattern, as the README creates one:
    // discovery must leave it to the failback start.
    let mut props = props(&f.bed.destination);
    props.insert("mirror.topics.include".into(), f.topic.clone());
    node.create_mirror("ba", props).await.unwrap();
    // Refreshes (every 0.5 s) have run discovery by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        node.describe(Some("ba")).await.unwrap().is_empty(),
        "discovery started a topic mirrored from A as a new one"
    );
    (node, dir)
}

/// Stops the reverse mirror's `topic` (a failover back to A) and waits for
/// STOPPED.
async fn stop_back(back: &Node, topic: &str) {
    back.change_topics("ba", TopicChange::Stop, &[topic.to_string()], None)
        .await
        .unwrap();
    wait("ba STOPPED", Duration::from_secs(60), async || {
        states(back, "ba").await == ["STOPPED"]
    })
    .await;
}

/// Starts `topic` in `mirror` as a failback would.
async fn start_back(
    node: &Node,
    mirror: &str,
    topic: &str,
    request: FailbackRequest,
) -> Result<OperationReport, NodeError> {
    node.start_with(mirror, &[topic.to_string()], &[], None, request)
        .await
}

async fn fail_back(node: &Node, topic: &str, request: FailbackRequest) -> OperationReport {
    start_back(node, "ba", topic, request).await.unwrap()
}

#[actix::test]
async fn failover_then_delta_failback_by_a_fresh_daemon_then_once_more_a_to_b() {
    let f = fail_over().await;
    let (back, _dir) = reverse(&f).await;
    let dry = fail_back(
        &back,
        &f.topic,
        FailbackRequest {
            mode: None,
            dry_run: true,
        },
    )
    .await;
    let plan = &dry.failback[0].plan;
    assert_eq!(plan.mode, FailbackMode::Delta);
    assert_eq!(plan.forward_mirror, "ab");
    assert_eq!(
        (plan.destination_position, plan.source_position),
        (300, 300)
    );
    assert_eq!((plan.divergent_start, plan.divergent_end), (300, 350));
    assert_eq!((plan.copy_start, plan.copy_end), (300, 340));
    assert!(
        back.describe(Some("ba")).await.unwrap().is_empty(),
        "a dry run changes nothing"
    );

    let done = fail_back(&back, &f.topic, FailbackRequest::default()).await;
    assert_eq!(
        done.failback[0].plan, *plan,
        "the dry run planned what was done"
    );
    wait("B→A caught up", Duration::from_secs(60), async || {
        caught_up(&back, "ba", 390).await
    })
    .await;
    // A holds everything B has, after its own divergent records.
    let on_a = values(&f.bed.source, &f.topic, 390);
    let mut expected = value_lines(300, "a");
    expected.extend(value_lines(50, "a-only"));
    expected.extend(value_lines(40, "b"));
    assert_eq!(on_a, expected);
    // The divergent records are in the quarantine topic, closed by a manifest.
    let quarantine = format!("{}.kmirror-divergent", f.topic);
    let q = records(&f.bed.source, &quarantine, 51);
    assert_eq!(q.len(), 51);
    assert_eq!(
        q[..50].iter().map(|r| r.2.clone()).collect::<Vec<_>>(),
        value_lines(50, "a-only")
    );
    let manifest = &q[50].2;
    for needle in [
        "\"start_offset\":300",
        "\"end_offset\":350",
        "\"count\":50",
        "\"forward_mirror\":\"ab\"",
    ] {
        assert!(manifest.contains(needle), "{needle} in {manifest}");
    }
    // The group moved back to A reads exactly what it had not read on B.
    wait("g synced to A", Duration::from_secs(30), async || {
        describe_group(&f.bed.source, &f.group, &f.topic) == BTreeMap::from([(0, 370)])
    })
    .await;
    let read = group_read(&f.bed.source, &f.topic, &f.group, 21, 15_000);
    assert_eq!(read, value_lines(40, "b")[20..]);
    let d = &back.describe(Some("ba")).await.unwrap()[0];
    assert_eq!(d.failback.as_ref().unwrap().mode, FailbackMode::Delta);

    // The old mirror cannot start again while B→A runs: both directions
    // at once would loop.
    f.source_proxy.release();
    let refused = start_back(&f.forward, "ab", &f.topic, FailbackRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code, "INVALID_CLUSTER_MIRROR_STATES", "{refused:?}");
    assert!(
        refused.message.contains("Detected mirror loop"),
        "{refused:?}"
    );

    // And once more A→B: failover back to A, producers on A, the old mirror
    // started again takes B back by the reverse mirror's history.
    stop_back(&back, &f.topic).await;
    produce_values(&f.bed.source, &f.topic, 10, "a2");
    let again = start_back(&f.forward, "ab", &f.topic, FailbackRequest::default())
        .await
        .unwrap();
    let plan = &again.failback[0].plan;
    assert_eq!(plan.forward_mirror, "ba");
    assert_eq!(
        (plan.divergent_start, plan.divergent_end),
        (340, 340),
        "B has nothing of its own"
    );
    assert_eq!((plan.copy_start, plan.copy_end), (390, 400));
    wait(
        "A→B caught up again",
        Duration::from_secs(60),
        async || caught_up(&f.forward, "ab", 350).await,
    )
    .await;
    let on_b = values(&f.bed.destination, &f.topic, 350);
    let mut expected = value_lines(300, "a");
    expected.extend(value_lines(40, "b"));
    expected.extend(value_lines(10, "a2"));
    assert_eq!(on_b, expected);
    back.shutdown().await;
    f.forward.shutdown().await;
}

#[actix::test]
async fn failover_then_from_scratch_failback() {
    let f = fail_over().await;
    let (back, _dir) = reverse(&f).await;
    let request = FailbackRequest {
        mode: Some(FailbackMode::FromScratch),
        dry_run: true,
    };
    let dry = fail_back(&back, &f.topic, request).await;
    let plan = &dry.failback[0].plan;
    assert_eq!(plan.mode, FailbackMode::FromScratch);
    assert_eq!((plan.divergent_start, plan.divergent_end), (0, 350));
    assert_eq!((plan.copy_start, plan.copy_end), (0, 340));
    // Two operators start it at once: one start fails the topic back, the
    // other, after it, finds the topic mirrored already. Planned on one
    // image, both re-created the topic, the second possibly under the
    // first's running partitions, and one was refused as stale.
    let request = FailbackRequest {
        dry_run: false,
        ..request
    };
    let (one, two) = tokio::join!(
        start_back(&back, "ba", &f.topic, request),
        start_back(&back, "ba", &f.topic, request),
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    let (done, other) = if one.failback.is_empty() {
        (two, one)
    } else {
        (one, two)
    };
    assert!(
        other.failback.is_empty() && other.topics.is_empty(),
        "{other:?}"
    );
    assert_eq!(
        done.failback[0].plan, *plan,
        "the dry run planned what was done"
    );
    wait("B→A caught up", Duration::from_secs(60), async || {
        caught_up(&back, "ba", 340).await
    })
    .await;
    let mut expected = value_lines(300, "a");
    expected.extend(value_lines(40, "b"));
    assert_eq!(values(&f.bed.source, &f.topic, 341), expected);
    wait("g synced to A", Duration::from_secs(30), async || {
        describe_group(&f.bed.source, &f.group, &f.topic) == BTreeMap::from([(0, 320)])
    })
    .await;
    let read = group_read(&f.bed.source, &f.topic, &f.group, 21, 15_000);
    assert_eq!(read, value_lines(40, "b")[20..]);
    back.shutdown().await;
    f.forward.shutdown().await;
}

/// A→B, failover, B→A by delta (A keeps its topic), then A→B again from
/// scratch: B's topic is made anew, so the mirror's map of the first round
/// must not survive into it. It did (only delta plans seeded a map):
/// alignment found B "truncated" below that map and failed the partition
/// for good.
#[actix::test]
async fn a_from_scratch_start_after_a_delta_failback_begins_a_fresh_map() {
    let f = fail_over().await;
    let (back, _dir) = reverse(&f).await;
    fail_back(&back, &f.topic, FailbackRequest::default()).await;
    wait("B→A caught up", Duration::from_secs(60), async || {
        caught_up(&back, "ba", 390).await
    })
    .await;
    stop_back(&back, &f.topic).await;
    // A is back: the forward node reaches it again.
    f.source_proxy.release();
    let request = FailbackRequest {
        mode: Some(FailbackMode::FromScratch),
        dry_run: false,
    };
    let done = start_back(&f.forward, "ab", &f.topic, request)
        .await
        .unwrap();
    assert_eq!(done.failback[0].plan.mode, FailbackMode::FromScratch);
    wait(
        "A→B caught up again, from scratch",
        Duration::from_secs(60),
        async || caught_up(&f.forward, "ab", 390).await,
    )
    .await;
    assert_eq!(
        values(&f.bed.destination, &f.topic, 390),
        values(&f.bed.source, &f.topic, 390)
    );
    back.shutdown().await;
    f.forward.shutdown().await;
}
