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
