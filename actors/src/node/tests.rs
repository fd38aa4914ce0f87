//! The node's operations on the in-memory clusters: what the KIP's lock
//! promises for operations that race.

use std::sync::Arc;

use kmirror_events::TopicId;
use kmirror_store::MemLog;

use super::*;
use crate::cluster::memory::{MemoryDestination, MemorySource};
use crate::cluster::SourceCluster;

async fn node(source: &MemorySource) -> Node {
    let source = source.clone();
    let connect: SourceConnector = Arc::new(move |_props| {
        let source = source.clone();
        Box::pin(async move { Ok(Arc::new(source) as Arc<dyn SourceCluster>) })
    });
    Node::start(
        Arc::new(MemLog::new()),
        Arc::new(MemoryDestination::new("dst")),
        connect,
        NodeSettings::default(),
    )
    .await
    .unwrap()
}

fn props() -> BTreeMap<String, String> {
    BTreeMap::from([("bootstrap.servers".to_string(), "memory:9092".to_string())])
}

async fn include(node: &Node) -> String {
    node.image()
        .await
        .unwrap()
        .mirror("m")
        .unwrap()
        .topics_include
        .clone()
}

#[actix::test]
async fn a_start_refused_as_stale_saves_none_of_its_patterns() {
    let source = MemorySource::new("src");
    source.create_topic("a", TopicId([1; 16]), 1);
    source.create_topic("b", TopicId([2; 16]), 1);
    let node = node(&source).await;
    node.create_mirror("m", props()).await.unwrap();
    node.start_topics("m", &["b".into()], &[], None)
        .await
        .unwrap();
    let validated = node.state_validation_offset().await;
    // After that view: b is stopped (it changed state).
    node.change_topics("m", TopicChange::Stop, &["b".into()], None)
        .await
        .unwrap();
    for _ in 0..500 {
        let parts = node.describe(Some("m")).await.unwrap();
        if parts.iter().all(|p| p.state == "STOPPED") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = include(&node).await;
    let refused = node
        .start_topics("m", &["a".into(), "b".into()], &[], Some(validated))
        .await
        .unwrap_err();
    assert_eq!(refused.code, "INVALID_CLUSTER_MIRROR_STATES");
    assert_eq!(include(&node).await, before, "nothing of the refused start");
}

/// Two guarded operations decided on the same view: the second is told
/// its view is stale, not what the first one did (which it never saw).
#[actix::test]
async fn the_loser_of_two_guarded_operations_hears_the_lock_first() {
    let source = MemorySource::new("src");
    source.create_topic("a", TopicId([1; 16]), 1);
    let node = node(&source).await;
    node.create_mirror("m", props()).await.unwrap();
    node.start_topics("m", &["a".into()], &[], None)
        .await
        .unwrap();
    let validated = node.state_validation_offset().await;
    node.change_topics("m", TopicChange::Pause, &["a".into()], Some(validated))
        .await
        .unwrap();
    let refused = node
        .change_topics("m", TopicChange::Pause, &["a".into()], Some(validated))
        .await
        .unwrap_err();
    assert_eq!(refused.code, "INVALID_CLUSTER_MIRROR_STATES", "{refused:?}");
    let unguarded = node
        .change_topics("m", TopicChange::Pause, &["a".into()], None)
        .await
        .unwrap_err();
    assert_eq!(unguarded.code, "MIRROR_TOPIC_ALREADY_PAUSED");
}

#[actix::test]
async fn concurrent_starts_keep_each_others_patterns() {
    let source = MemorySource::new("src");
    let node = node(&source).await;
    node.create_mirror("m", props()).await.unwrap();
    let starts = (0..8).map(|i| {
        let node = node.clone();
        async move {
            node.start_topics("m", &[format!("orders-{i}-.*")], &[], None)
                .await
                .unwrap()
        }
    });
    futures_util::future::join_all(starts).await;
    let saved = include(&node).await;
    for i in 0..8 {
        assert!(saved.contains(&format!("orders-{i}-.*")), "{saved}");
    }
}

/// A mirror's `${file:…}` reference resolves on the node that connects
/// (`providers`): a node without the file — another node of a cluster, or
/// this one after the file moved — cannot run that mirror. The node still
/// starts and runs its other mirrors, names the missing file for that one,
/// and runs it once the file is back. Before, the whole node (a shard) did
/// not start, and the mirrors it had started before the bad one were left
/// running with nothing holding them.
#[actix::test]
async fn a_mirror_whose_reference_does_not_resolve_here_stops_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("source.properties");
    std::fs::write(&secret, "id=from-file\n").unwrap();
    let source = MemorySource::new("src");
    let log = Arc::new(MemLog::new());
    let destination = Arc::new(MemoryDestination::new("dst"));
    let connect: SourceConnector = Arc::new(move |_props| {
        let source = source.clone();
        Box::pin(async move { Ok(Arc::new(source) as Arc<dyn SourceCluster>) })
    });
    let start = || {
        Node::start(
            log.clone(),
            destination.clone(),
            connect.clone(),
            NodeSettings::default(),
        )
    };
    let first = start().await.unwrap();
    let mut with_file = props();
    with_file.insert(
        "client.id".to_string(),
        format!("${{file:{}:id}}", secret.display()),
    );
    first.create_mirror("a-plain", props()).await.unwrap();
    first.create_mirror("b-file", with_file).await.unwrap();
    first.create_mirror("c-plain", props()).await.unwrap();
    first.shutdown().await;

    std::fs::remove_file(&secret).unwrap();
    let node = start()
        .await
        .expect("a node starts without one mirror's file");
    for runs in ["a-plain", "c-plain"] {
        node.describe(Some(runs)).await.unwrap();
    }
    let e = node.describe(Some("b-file")).await.unwrap_err();
    assert_eq!(e.code, "INVALID_CONFIG", "{e:?}");
    assert!(
        e.message.contains("b-file") && e.message.contains("source.properties"),
        "{e:?}"
    );
    assert_eq!(node.list_mirrors().await.len(), 3);
    node.describe(None)
        .await
        .expect("describing every mirror is not refused for one");

    std::fs::write(&secret, "id=from-file\n").unwrap();
    node.describe(Some("b-file"))
        .await
        .expect("the mirror runs once its file is back");
    node.shutdown().await;
}
