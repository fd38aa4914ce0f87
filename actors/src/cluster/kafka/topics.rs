//! The source's topic list, read by one metadata request for everyone who
//! asks at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmirror_events::TopicId;

use crate::cluster::TopicInfo;
use crate::kafka::{KafkaClient, KafkaError};

fn topic_id(uuid: uuid::Uuid) -> TopicId {
    TopicId(*uuid.as_bytes())
}

async fn describe_topics(client: &KafkaClient) -> Result<Vec<TopicInfo>, KafkaError> {
    let md = client.refresh_metadata(None).await?;
    Ok(md
        .topics
        .values()
        .map(|t| TopicInfo {
            name: t.name.clone(),
            topic_id: topic_id(t.topic_id),
            partitions: t.partitions.len() as i32,
            internal: t.is_internal,
        })
        .collect())
}

/// A metadata refresh's answer, shared by the callers it serves.
type TopicsAnswer = Result<Arc<Vec<TopicInfo>>, KafkaError>;

/// The answer of the newest metadata refresh for `topics`, and when that
/// refresh started. Thousands of partitions aligning at once each check
/// their source topic: one full metadata request per partition was O(N²)
/// bytes at 10 000 partitions. A caller waits its turn and takes the
/// newest answer if that refresh started after it asked (so it is as
/// fresh as one of its own), else refreshes itself: a burst costs at most
/// two requests. A periodic check may also take an answer up to a given
/// age ([`crate::cluster::ClusterView::recent_topics`]).
#[derive(Default)]
pub(super) struct TopicsFlight {
    turn: tokio::sync::Mutex<()>,
    newest: Mutex<Option<(tokio::time::Instant, TopicsAnswer)>>,
}

impl TopicsFlight {
    pub(super) async fn topics(
        &self,
        client: &KafkaClient,
        max_age: Duration,
    ) -> Result<Vec<TopicInfo>, KafkaError> {
        self.topics_from(describe_topics(client), max_age).await
    }

    /// The newest answer if its refresh started at most `max_age` before
    /// the caller asked, else `refresh`'s.
    async fn topics_from(
        &self,
        refresh: impl std::future::Future<Output = Result<Vec<TopicInfo>, KafkaError>>,
        max_age: Duration,
    ) -> Result<Vec<TopicInfo>, KafkaError> {
        let asked = tokio::time::Instant::now();
        let _turn = self.turn.lock().await;
        if let Some((started, answer)) = &*self.newest.lock().unwrap() {
            if *started + max_age >= asked {
                return answer
                    .as_ref()
                    .map(|t| t.to_vec())
                    .map_err(KafkaError::duplicate);
            }
        }
        let started = tokio::time::Instant::now();
        let answer = refresh.await.map(Arc::new);
        let out = answer
            .as_ref()
            .map(|t| t.to_vec())
            .map_err(KafkaError::duplicate);
        *self.newest.lock().unwrap() = Some((started, answer));
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    async fn refresh(count: &AtomicUsize) -> Result<Vec<TopicInfo>, KafkaError> {
        let n = count.fetch_add(1, Ordering::SeqCst) as i32 + 1;
        Ok(vec![TopicInfo {
            name: "t".into(),
            topic_id: TopicId([1; 16]),
            partitions: n,
            internal: false,
        }])
    }

    /// A caller that must see the cluster as of now refreshes; a periodic
    /// check takes an answer as old as it allows, and refreshes once that
    /// answer is older.
    #[tokio::test]
    async fn an_answer_is_shared_only_as_old_as_the_caller_allows() {
        let flight = TopicsFlight::default();
        let count = AtomicUsize::new(0);
        let partitions = |t: Vec<TopicInfo>| t[0].partitions;
        let now = Duration::ZERO;
        let recent = Duration::from_secs(1);
        assert_eq!(
            partitions(flight.topics_from(refresh(&count), now).await.unwrap()),
            1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            partitions(flight.topics_from(refresh(&count), recent).await.unwrap()),
            1,
            "50 ms old: shared with a caller that allows 1 s"
        );
        assert_eq!(
            partitions(flight.topics_from(refresh(&count), now).await.unwrap()),
            2,
            "a caller that needs now refreshes"
        );
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(
            partitions(flight.topics_from(refresh(&count), recent).await.unwrap()),
            3,
            "1.1 s old: refreshed"
        );
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }
}
