//! `verify` on the node: which partitions, read with the running mirror's
//! source connection and the node's destination, against the maps in the
//! image. It reads only; the log is not written.

use std::time::Duration;

use kmirror_events::MirrorPartitionKey;

use super::{Node, NodeError};
use crate::kafka::fetch::TopicPartition;
use crate::verify::{self, VerifyReport, VerifyRequest, DEFAULT_TIMEOUT};

impl Node {
    /// Compares the mirror's partitions (of `request.topics`, or all) with
    /// the source, partition by partition, within the request's time.
    pub async fn verify(
        &self,
        mirror: &str,
        request: &VerifyRequest,
    ) -> Result<VerifyReport, NodeError> {
        let (_, source) = self.running(mirror).await?;
        let image = self.image().await?;
        let mut topics: Vec<_> = image
            .topics_of(mirror)
            .map(|e| e.change.clone())
            .filter(|c| request.topics.is_empty() || request.topics.contains(&c.topic_name))
            .collect();
        if let Some(t) = request
            .topics
            .iter()
            .find(|t| !topics.iter().any(|c| &c.topic_name == *t))
        {
            return Err(NodeError::new(
                "TOPIC_NOT_IN_CLUSTER_MIRROR",
                format!("topic {t} is not in cluster mirror {mirror:?}"),
            ));
        }
        topics.sort_by(|a, b| a.topic_name.cmp(&b.topic_name));
        // A spread mirror's maps are in the shards their partitions are
        // placed in, each read to its end first.
        let wanted: Vec<_> = topics
            .iter()
            .flat_map(|t| {
                (0..t.partition_count).map(|p| {
                    (
                        MirrorPartitionKey::new(mirror, t.topic_id, p),
                        TopicPartition::new(&t.topic_name, p),
                    )
                })
            })
            .collect();
        let placed = self
            .placed_records(
                image.clone(),
                wanted.iter().map(|(k, _)| k),
                image.spreads(mirror),
            )
            .await?;
        let timeout = request
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut partitions = Vec::new();
        for (key, tp) in &wanted {
            partitions.push(
                verify::partition(
                    source.as_ref(),
                    self.inner.destination.as_ref(),
                    tp,
                    placed.of(key).offset_map(key),
                    request,
                    deadline,
                )
                .await,
            );
        }
        Ok(VerifyReport::new(mirror, request, partitions))
    }
}
