//! Group membership (`kafka::membership`) against the bed's real destination
//! cluster: several members in one process, each with a client of its own
//! (as separate nodes would have), sharing units of work.
//!
//! Short timeouts: the broker's minimum session timeout is 6 s
//! (`group.min.session.timeout.ms`); the bed sets
//! `group.initial.rebalance.delay.ms=0`, so a group forms at the first join.

mod protocol_common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kmirror_actors::kafka::membership::{
    MemberMetadata, MemberSettings, Membership, MembershipHandle, PROTOCOL_TYPE,
};
use kmirror_actors::kafka::ResponseError;
use kmirror_tests::{bed, kafka_tool_ok, unique};
use protocol_common::client;
use tokio::sync::watch;

const SESSION: Duration = Duration::from_millis(6_000);

fn settings() -> MemberSettings {
    MemberSettings {
        session_timeout: SESSION,
        heartbeat_interval: Duration::from_millis(500),
        rebalance_timeout: Duration::from_millis(15_000),
    }
}

fn units(n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("state-{i:02}")).collect()
}

/// A member with a client of its own, and every membership it published.
struct Node {
    name: String,
    handle: MembershipHandle,
    seen: Arc<Mutex<Vec<Membership>>>,
}

impl Node {
    async fn start(name: &str, group: &str, units: &watch::Sender<BTreeSet<String>>) -> Node {
        Node::start_weighted(name, group, units, None).await
    }

    async fn start_weighted(
        name: &str,
        group: &str,
        units: &watch::Sender<BTreeSet<String>>,
        weights: Option<&watch::Sender<BTreeMap<String, u64>>>,
    ) -> Node {
        let handle = MembershipHandle::start_weighted(
            client(&bed().destination).await,
            group,
            MemberMetadata {
                admin_url: format!("http://127.0.0.1:1/{name}"),
                capacity: 1,
            },
            settings(),
            units.subscribe(),
            weights.map(watch::Sender::subscribe),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut rx = handle.membership();
        let log = seen.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let m = rx.borrow_and_update().clone();
                log.lock().unwrap().push(m);
            }
        });
        Node {
            name: name.into(),
            handle,
            seen,
        }
    }

    fn now(&self) -> Membership {
        self.handle.membership().borrow().clone()
    }
}

/// Waits until every node is in one generation of `nodes.len()` members
/// and together they hold all of `expected` units, each once.
async fn settle(nodes: &[&Node], expected: usize) -> Vec<Membership> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let views: Vec<Membership> = nodes.iter().map(|n| n.now()).collect();
        let generation = views[0].generation_id;
        let held: usize = views.iter().map(|m| m.assignment.len()).sum();
        let distinct: BTreeSet<&String> = views.iter().flat_map(|m| &m.assignment).collect();
        if generation >= 0
            && views
                .iter()
                .all(|m| m.generation_id == generation && m.members.len() == nodes.len())
            && held == expected
            && distinct.len() == expected
        {
            return views;
        }
        assert!(
            Instant::now() < deadline,
            "no settled generation in 60 s: {:#?}",
            views
                .iter()
                .map(|m| (m.generation_id, m.members.len(), m.assignment.len()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn counts(views: &[Membership]) -> Vec<usize> {
    let mut c: Vec<usize> = views.iter().map(|m| m.assignment.len()).collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    c
}

fn owners(nodes: &[&Node], views: &[Membership]) -> BTreeMap<String, String> {
    nodes
        .iter()
        .zip(views)
        .flat_map(|(n, m)| m.assignment.iter().map(|u| (u.clone(), n.name.clone())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_fifty_units_17_17_16_and_kafkas_tool_sees_the_group() {
    let group = unique("member-spread");
    let (units_tx, _) = watch::channel(units(50));
    let (a, b, c) = tokio::join!(
        Node::start("a", &group, &units_tx),
        Node::start("b", &group, &units_tx),
        Node::start("c", &group, &units_tx),
    );
    let t0 = Instant::now();
    let views = settle(&[&a, &b, &c], 50).await;
    println!(
        "settled in {:?}: generation {}, units {:?}",
        t0.elapsed(),
        views[0].generation_id,
        counts(&views)
    );
    assert_eq!(counts(&views), vec![17, 17, 16]);
    let leaders: BTreeSet<&String> = views.iter().map(|m| &m.leader).collect();
    assert_eq!(leaders.len(), 1, "one leader");
    let urls: BTreeSet<&str> = views[0]
        .members
        .iter()
        .map(|m| m.admin_url.as_str())
        .collect();
    assert_eq!(
        urls,
        [
            "http://127.0.0.1:1/a",
            "http://127.0.0.1:1/b",
            "http://127.0.0.1:1/c"
        ]
        .into()
    );

    // Kafka's own tools: `kafka-groups` lists a classic group of protocol
    // `kmirror`; `kafka-consumer-groups` refuses to describe it, naming the
    // protocol type it found.
    let dest = bed().destination.clone();
    let listed = tokio::task::spawn_blocking(move || {
        kafka_tool_ok("kafka-groups", &["--bootstrap-server", &dest, "--list"])
    })
    .await
    .unwrap();
    let row = listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(group.as_str()))
        .unwrap_or_else(|| panic!("{group} not listed:\n{listed}"));
    println!("kafka-groups --list: {row}");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1..], ["Classic", PROTOCOL_TYPE], "{row}");
    let dest = bed().destination.clone();
    let g = group.clone();
    let refused = tokio::task::spawn_blocking(move || {
        kmirror_tests::kafka_tool(
            "kafka-consumer-groups",
            &[
                "--bootstrap-server",
                &dest,
                "--describe",
                "--group",
                &g,
                "--members",
            ],
        )
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&refused.stdout).to_string()
        + &String::from_utf8_lossy(&refused.stderr);
    println!(
        "kafka-consumer-groups --describe --members: {}",
        text.lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
    );
    assert!(
        text.contains(&format!("is not a consumer group ({PROTOCOL_TYPE})")),
        "{text}"
    );

    for n in [a, b, c] {
        n.handle.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_leaves_has_its_units_on_the_others_in_the_next_generation() {
    let group = unique("member-leave");
    let (units_tx, _) = watch::channel(units(50));
    let (a, b, c) = tokio::join!(
        Node::start("a", &group, &units_tx),
        Node::start("b", &group, &units_tx),
        Node::start("c", &group, &units_tx),
    );
    let before = settle(&[&a, &b, &c], 50).await;
    let t0 = Instant::now();
    c.handle.close().await;
    let after = settle(&[&a, &b], 50).await;
    println!(
        "after LeaveGroup: generation {} → {} in {:?}, units {:?}",
        before[0].generation_id,
        after[0].generation_id,
        t0.elapsed(),
        counts(&after)
    );
    assert_eq!(after[0].generation_id, before[0].generation_id + 1);
    assert_eq!(counts(&after), vec![25, 25]);
    assert!(
        t0.elapsed() < SESSION,
        "LeaveGroup, not the session timeout"
    );
    for (was, now) in before.iter().zip(&after) {
        assert!(was.assignment.is_subset(&now.assignment), "sticky");
    }
    a.handle.close().await;
    b.handle.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_member_loses_its_units_after_the_session_timeout_and_gets_work_back() {
    let group = unique("member-pause");
    let (units_tx, _) = watch::channel(units(50));
    let (a, b, c) = tokio::join!(
        Node::start("a", &group, &units_tx),
        Node::start("b", &group, &units_tx),
        Node::start("c", &group, &units_tx),
    );
    let before = settle(&[&a, &b, &c], 50).await;
    let c_units = before[2].assignment.clone();
    let t0 = Instant::now();
    c.handle.pause(true);
    let after = settle(&[&a, &b], 50).await;
    let took = t0.elapsed();
    println!(
        "paused member dropped after {took:?} (session timeout {SESSION:?}); generation {} → {}, units {:?}",
        before[0].generation_id,
        after[0].generation_id,
        counts(&after)
    );
    assert!(took >= SESSION - Duration::from_millis(1_000), "{took:?}");
    assert_eq!(counts(&after), vec![25, 25]);
    // A frozen process still believes it owns its units: not a fence.
    assert_eq!(c.now().assignment, c_units);

    let seen_before = c.seen.lock().unwrap().len();
    let t1 = Instant::now();
    c.handle.pause(false);
    let back = settle(&[&a, &b, &c], 50).await;
    let seen: Vec<Membership> = c.seen.lock().unwrap()[seen_before..].to_vec();
    println!(
        "resumed member: back with {:?} in {:?}, generation {}; its views: {:?}",
        counts(&back),
        t1.elapsed(),
        back[0].generation_id,
        seen.iter()
            .map(|m| (m.generation_id, m.assignment.len(), m.last_expulsion))
            .collect::<Vec<_>>()
    );
    let first = &seen[0];
    assert!(first.assignment.is_empty(), "it releases everything first");
    assert!(
        matches!(
            first.last_expulsion,
            Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration)
        ),
        "{first:?}"
    );
    assert_eq!(counts(&back), vec![17, 17, 16]);
    assert!(!back[2].assignment.is_empty());
    for n in [a, b, c] {
        n.handle.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_member_takes_only_what_must_move_and_new_units_move_nothing() {
    let group = unique("member-moves");
    let (units_tx, _) = watch::channel(units(50));
    let (a, b) = tokio::join!(
        Node::start("a", &group, &units_tx),
        Node::start("b", &group, &units_tx),
    );
    let two = settle(&[&a, &b], 50).await;
    let before = owners(&[&a, &b], &two);
    let c = Node::start("c", &group, &units_tx).await;
    let three = settle(&[&a, &b, &c], 50).await;
    let after = owners(&[&a, &b, &c], &three);
    let moved = before.iter().filter(|(u, o)| after[*u] != **o).count();
    println!(
        "a third member: generation {} → {}, units {:?}, {moved} of 50 moved",
        two[0].generation_id,
        three[0].generation_id,
        counts(&three)
    );
    assert_eq!(counts(&three), vec![17, 17, 16]);
    assert_eq!(moved, 16, "25+25 → 17+17+16 moves 8 from each");
    // Revoked before reassigned: c's first units came after a round in
    // which a and b gave them up.
    let c_first = c
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|m| !m.assignment.is_empty())
        .map(|m| m.generation_id)
        .unwrap();
    let revoking = a
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|m| m.assignment.len() == 17)
        .map(|m| m.generation_id)
        .unwrap();
    println!("a gave up its 8 in generation {revoking}; c got work in generation {c_first}");
    assert!(revoking < c_first);

    // More units: the leader rebalances on its own, and only places them.
    units_tx.send_replace(units(60));
    let grown = settle(&[&a, &b, &c], 60).await;
    let regrown = owners(&[&a, &b, &c], &grown);
    let moved = after.iter().filter(|(u, o)| regrown[*u] != **o).count();
    println!(
        "60 units: generation {}, units {:?}, {moved} moved",
        grown[0].generation_id,
        counts(&grown)
    );
    assert_eq!(counts(&grown), vec![20, 20, 20]);
    assert_eq!(moved, 0);
    for n in [a, b, c] {
        n.handle.close().await;
    }
}

/// Each member's total weight, heaviest first.
fn loads(views: &[Membership], weights: &BTreeMap<String, u64>) -> Vec<u64> {
    let mut l: Vec<u64> = views
        .iter()
        .map(|m| m.assignment.iter().map(|u| weights[u]).sum())
        .collect();
    l.sort_unstable_by(|a, b| b.cmp(a));
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_partitions_land_unevenly_in_a_settled_groups_units_the_leader_rebalances_them_by_weight(
) {
    let group = unique("member-weights");
    let (units_tx, _) = watch::channel(units(50));
    let alike: BTreeMap<String, u64> = units(50).into_iter().map(|u| (u, 1)).collect();
    let (weights_tx, _) = watch::channel(alike);
    let (a, b, c) = tokio::join!(
        Node::start_weighted("a", &group, &units_tx, Some(&weights_tx)),
        Node::start_weighted("b", &group, &units_tx, Some(&weights_tx)),
        Node::start_weighted("c", &group, &units_tx, Some(&weights_tx)),
    );
    let nodes = [&a, &b, &c];
    let even = settle(&nodes, 50).await;
    assert_eq!(counts(&even), vec![17, 17, 16]);
    // 24 partitions (weight 16 each) in the ten units one member holds
    // the most of: what a spread mirror's consecutive shards can do.
    let heavy = &even
        .iter()
        .max_by_key(|m| m.assignment.len())
        .unwrap()
        .assignment;
    let mut weights: BTreeMap<String, u64> = units(50).into_iter().map(|u| (u, 1)).collect();
    for (u, n) in heavy.iter().zip([6, 1, 0, 4, 2, 0, 5, 3, 2, 1]) {
        *weights.get_mut(u).unwrap() += 16 * n;
    }
    let before = loads(&even, &weights);
    let t0 = Instant::now();
    weights_tx.send_replace(weights.clone());
    let deadline = Instant::now() + Duration::from_secs(90);
    let balanced = loop {
        let views = settle(&nodes, 50).await;
        let now = loads(&views, &weights);
        if now[0] - now[2] < before[0] - before[2] && views[0].generation_id > even[0].generation_id
        {
            break views;
        }
        assert!(Instant::now() < deadline, "still {now:?} after 90 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let after = loads(&balanced, &weights);
    println!(
        "weights {before:?} → {after:?} in {:?}, generation {} → {}",
        t0.elapsed(),
        even[0].generation_id,
        balanced[0].generation_id
    );
    // 434 in all: each within a heaviest unit (97) of 144.7.
    assert!(after[0] - after[2] <= 97, "{after:?}");
    // Settled: weights unchanged, the leader does not move anything again.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let later = settle(&nodes, 50).await;
    assert_eq!(
        later[0].generation_id, balanced[0].generation_id,
        "no further rebalance"
    );
    for n in [a, b, c] {
        n.handle.close().await;
    }
}
