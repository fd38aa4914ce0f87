//! The steps of a MirrorActor's refresh: the source cluster's identity,
//! and topic discovery — source topics that come to match the mirror's
//! patterns start, mirrored ones that come to match its exclude stop.

use std::collections::HashSet;

use actix::{Addr, MailboxError};
use kmirror_events::{
    Command, MirrorConfig, MirrorStateImage, PatternError, StateValidation, TopicFilter, TopicId,
};

use crate::cluster::{
    ensure_destination_topics, ClusterError, DestinationCluster, Doing, SourceCluster, TopicInfo,
    RECENT_TOPICS_AGE,
};
use crate::coordinator::{CoordinatorActor, CoordinatorError, Execute};
use crate::failback::SourceHistory;

/// Why a refresh step failed; the next refresh tries again, except for a
/// changed source cluster, which fails every partition for good.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Log(#[from] CoordinatorError),
    #[error("mirror patterns: {0}")]
    Settings(#[from] PatternError),
    #[error("the source cluster id changed from {recorded} to {found}: bootstrap {bootstrap} now reaches a different cluster")]
    SourceClusterChanged {
        recorded: String,
        found: String,
        bootstrap: String,
    },
}

impl From<MailboxError> for MirrorError {
    fn from(e: MailboxError) -> Self {
        MirrorError::Log(e.into())
    }
}

/// A changed source cluster id fails every partition, not retryable: the
/// mirror would otherwise copy another cluster's data into these topics.
/// The error says so; the MirrorActor tells its partitions.
pub(crate) async fn check_source_identity(
    config: &MirrorConfig,
    source: &dyn SourceCluster,
) -> Result<(), MirrorError> {
    let id = source
        .cluster_id()
        .await
        .doing(|| "describe source cluster".into())?;
    if config.source_cluster_id.is_empty() || id == config.source_cluster_id {
        return Ok(());
    }
    Err(MirrorError::SourceClusterChanged {
        recorded: config.source_cluster_id.clone(),
        found: id,
        bootstrap: config.source_bootstrap.clone(),
    })
}

/// `new` less the topics a mirror on the source copied from this
/// destination (see [`discover`]). A history that cannot be read leaves
/// `new` as it is: the partitions' mirror-loop check is the second line.
async fn without_failbacks(
    name: &str,
    new: Vec<TopicInfo>,
    source: &dyn SourceCluster,
    history: Option<&SourceHistory>,
    destination: &dyn DestinationCluster,
) -> Vec<TopicInfo> {
    let Some(history) = history.filter(|_| !new.is_empty()) else {
        return new;
    };
    let image = match history.get(source).await {
        Ok(Some(image)) => image,
        Ok(None) => return new,
        Err(e) => {
            tracing::warn!(mirror = %name, error = %e, "cannot read the source's state topic; discovered topics are started without a failback check");
            return new;
        }
    };
    let Ok(here) = destination.cluster_id().await else {
        return new;
    };
    new.into_iter()
        .filter(|t| match crate::failback::forward_mirror(&image, &here, &t.name, None) {
            Some((forward, _)) => {
                tracing::warn!(mirror = %name, topic = %t.name, forward_mirror = %forward, "discovered topic was mirrored from this cluster by mirror {forward} on the source: not started by discovery; `kmirror mirror start --mirror {name} --topics {}` plans its failback", t.name);
                false
            }
            None => true,
        })
        .collect()
}

/// Source topics matching include and not exclude that no mirror knows yet
/// start mirroring; mirrored topics that now match exclude stop.
///
/// A topic a mirror on the source copied from this destination is left to
/// the operator's `mirror start`, which plans its failback (delta or from
/// scratch, with what only the destination holds quarantined): started
/// here as a new topic, its alignment would find the destination's records
/// not kmirror's and fail it for good — and the failback start would then
/// find it already started.
pub(crate) async fn discover(
    name: &str,
    config: &MirrorConfig,
    (source, history): (&dyn SourceCluster, Option<&SourceHistory>),
    destination: &dyn DestinationCluster,
    coordinator: &Addr<CoordinatorActor>,
    image: &MirrorStateImage,
) -> Result<(), MirrorError> {
    let filter = TopicFilter::new(&config.topics_include, &config.topics_exclude)?;
    // A topic any mirror knows, stopped ones included, is left alone:
    // restarting a stopped topic is an operator's decision.
    let known: HashSet<&str> = image
        .topics()
        .map(|(_, e)| &e.change)
        .filter(|c| !c.mirror_name.is_empty())
        .map(|c| c.topic_name.as_str())
        .collect();
    let new: Vec<_> = source
        .recent_topics(RECENT_TOPICS_AGE)
        .await
        .doing(|| "list source topics".into())?
        .into_iter()
        .filter(|t| !t.internal && filter.matches(&t.name) && !known.contains(t.name.as_str()))
        .collect();
    let new = without_failbacks(name, new, source, history, destination).await;
    let start = ensure_destination_topics(source, destination, &new).await?;
    if !start.is_empty() {
        let ids: Vec<TopicId> = start.iter().map(|t| t.topic_id).collect();
        tracing::info!(mirror = %name, topics = ?start.iter().map(|t| &t.name).collect::<Vec<_>>(), "discovered topics");
        coordinator
            .send(Execute {
                command: Command::StartTopics {
                    mirror: name.to_string(),
                    topics: start,
                    include: vec![],
                    exclude: vec![],
                    seeds: vec![],
                },
                state_validation: Some(StateValidation {
                    offset: image.end_offset(),
                    topics: ids,
                }),
                lazy: false,
            })
            .await??;
    }
    let excluded: Vec<TopicId> = image
        .topics_of(name)
        .filter(|e| e.change.is_active() && filter.is_excluded(&e.change.topic_name))
        .map(|e| e.change.topic_id)
        .collect();
    if !excluded.is_empty() {
        tracing::info!(mirror = %name, topics = excluded.len(), "stopping topics that now match exclude");
        coordinator
            .send(Execute {
                command: Command::StopTopics {
                    mirror: name.to_string(),
                    topics: excluded.clone(),
                },
                state_validation: Some(StateValidation {
                    offset: image.end_offset(),
                    topics: excluded,
                }),
                lazy: false,
            })
            .await??;
    }
    Ok(())
}
