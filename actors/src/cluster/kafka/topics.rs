//! The source's topic list, read by one metadata request for everyone who
//! asks at once.

use std::sync::{Arc, Mutex};

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
/// two requests.
#[derive(Default)]
pub(super) struct TopicsFlight {
    turn: tokio::sync::Mutex<()>,
    newest: Mutex<Option<(tokio::time::Instant, TopicsAnswer)>>,
}

impl TopicsFlight {
    pub(super) async fn topics(&self, client: &KafkaClient) -> Result<Vec<TopicInfo>, KafkaError> {
        let asked = tokio::time::Instant::now();
        let _turn = self.turn.lock().await;
        if let Some((started, answer)) = &*self.newest.lock().unwrap() {
            if *started >= asked {
                return answer
                    .as_ref()
                    .map(|t| t.to_vec())
                    .map_err(KafkaError::duplicate);
            }
        }
        let started = tokio::time::Instant::now();
        let answer = describe_topics(client).await.map(Arc::new);
        let out = answer
            .as_ref()
            .map(|t| t.to_vec())
            .map_err(KafkaError::duplicate);
        *self.newest.lock().unwrap() = Some((started, answer));
        out
    }
}
