//! Log offsets, routed to each partition's leader: ListOffsets,
//! OffsetForLeaderEpoch and DeleteRecords, one partition at a time (with
//! retries after a leader move) or many in one request per leader (once,
//! the caller deciding what to ask again: the alignment of thousands of
//! partitions at once asks them in batches).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest,
};

use super::{topic_name, Admin};
use crate::kafka::error::{KafkaError, Result};
use crate::kafka::fetch::IsolationLevel;

/// Which offset ListOffsets should return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// Log start offset.
    Earliest,
    /// Log end offset (high watermark, or LSO under read_committed).
    Latest,
    /// First offset whose timestamp is ≥ the given ms.
    Timestamp(i64),
}

/// A ListOffsets answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// Offset (-1 if no record matches a timestamp query).
    pub offset: i64,
    /// Timestamp of that record (-1 for earliest/latest).
    pub timestamp: i64,
    /// Leader epoch of that offset.
    pub leader_epoch: i32,
}

/// Each partition's answer by (topic, partition): its value, or the error
/// its code names.
fn checked<T>(
    api: &str,
    answered: impl Iterator<Item = (String, i32, i16, T)>,
) -> HashMap<(String, i32), Result<T>> {
    answered
        .map(|(topic, partition, code, value)| {
            let answer = KafkaError::check(code, || format!("{api} {topic}-{partition}"), None)
                .map(|()| value);
            ((topic, partition), answer)
        })
        .collect()
}

impl Admin {
    /// ListOffsets for one partition, on its leader, asked again while
    /// its leader moved.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<ListedOffset> {
        let asked = [(topic.to_owned(), partition)];
        self.again_while_moved(topic, || async {
            let mut answers = self.list_offsets_many(&asked, spec, isolation).await;
            answers.pop().expect("one answer per partition asked")
        })
        .await
    }

    /// ListOffsets for many partitions: one request per leader (from one
    /// metadata snapshot, [`KafkaClient::leaders`]), so a sample of
    /// thousands of partitions costs a request per broker, not one per
    /// partition. Answers in the order asked, each partition on its own,
    /// once: one whose leader moved answers its error
    /// ([`KafkaError::awaits_leader`]) and the caller decides whether to ask
    /// it again ([`Self::list_offset`] retries); retrying here would hold
    /// back every other partition's answer.
    pub async fn list_offsets_many(
        &self,
        partitions: &[(String, i32)],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Vec<Result<ListedOffset>> {
        let ts = match spec {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
        };
        let asked: Vec<(&str, i32)> = partitions.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        self.on_leaders("ListOffsets", &asked, |leader, on_leader| async move {
            let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
            for (i, current) in on_leader {
                let (topic, partition) = &partitions[i];
                topics.entry(topic).or_default().push(
                    ListOffsetsPartition::default()
                        .with_partition_index(*partition)
                        .with_current_leader_epoch(current)
                        .with_timestamp(ts),
                );
            }
            let req = ListOffsetsRequest::default()
                .with_replica_id((-1).into())
                .with_isolation_level(matches!(isolation, IsolationLevel::ReadCommitted) as i8)
                .with_timeout_ms(self.timeout_ms())
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            ListOffsetsTopic::default()
                                .with_name(topic_name(t))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            let resp = self.client.send_to(leader, &req).await?;
            Ok(checked(
                "ListOffsets",
                resp.topics.into_iter().flat_map(|t| {
                    let topic = t.name.0.to_string();
                    t.partitions.into_iter().map(move |p| {
                        let listed = ListedOffset {
                            offset: p.offset,
                            timestamp: p.timestamp,
                            leader_epoch: p.leader_epoch,
                        };
                        (topic.clone(), p.partition_index, p.error_code, listed)
                    })
                }),
            ))
        })
        .await
    }

    /// OffsetForLeaderEpoch: the end offset of `leader_epoch` on the current
    /// leader, as `(epoch, end offset)` — the largest epoch ≤ the one asked
    /// and where it ended. This is how divergence after a leader change is
    /// found. Asked again while the partition's leader moved.
    pub async fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64)> {
        let asked = [(topic.to_owned(), partition, leader_epoch)];
        self.again_while_moved(topic, || async {
            let mut answers = self.offset_for_leader_epoch_many(&asked).await;
            answers.pop().expect("one answer per partition asked")
        })
        .await
    }

    /// OffsetForLeaderEpoch for many partitions, `(topic, partition, epoch)`
    /// each: one request per leader, the answers in the order asked. A
    /// partition whose leader is unknown or moved answers its error (see
    /// [`KafkaError::awaits_leader`]); [`Admin::offset_for_leader_epoch`]
    /// asks one alone, with retries.
    pub async fn offset_for_leader_epoch_many(
        &self,
        asked: &[(String, i32, i32)],
    ) -> Vec<Result<(i32, i64)>> {
        let partitions: Vec<(&str, i32)> = asked.iter().map(|(t, p, _)| (t.as_str(), *p)).collect();
        self.on_leaders(
            "OffsetForLeaderEpoch",
            &partitions,
            |leader, on_leader| async move {
                let mut topics: BTreeMap<&str, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
                for (i, current) in on_leader {
                    let (topic, partition, epoch) = &asked[i];
                    topics.entry(topic).or_default().push(
                        OffsetForLeaderPartition::default()
                            .with_partition(*partition)
                            .with_current_leader_epoch(current)
                            .with_leader_epoch(*epoch),
                    );
                }
                let req = OffsetForLeaderEpochRequest::default()
                    .with_replica_id((-1).into())
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                OffsetForLeaderTopic::default()
                                    .with_topic(topic_name(t))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    );
                let resp = self.client.send_to(leader, &req).await?;
                Ok(checked(
                    "OffsetForLeaderEpoch",
                    resp.topics.into_iter().flat_map(|t| {
                        let topic = t.topic.0.to_string();
                        t.partitions.into_iter().map(move |p| {
                            let end = (p.leader_epoch, p.end_offset);
                            (topic.clone(), p.partition, p.error_code, end)
                        })
                    }),
                ))
            },
        )
        .await
    }

    /// Sends `send(leader, its partitions)` once per leader of the
    /// partitions asked, all at once; each request names, per partition,
    /// its index in `asked` and the leader epoch to check. Leaders come
    /// from one metadata snapshot ([`KafkaClient::leaders`]). `send`
    /// answers by (topic, partition); the answers come back in the order
    /// asked, a partition without a leader, whose request failed or that
    /// its answer left out getting an error.
    async fn on_leaders<T, F, Fut>(
        &self,
        api: &str,
        asked: &[(&str, i32)],
        send: F,
    ) -> Vec<Result<T>>
    where
        F: Fn(i32, Vec<(usize, i32)>) -> Fut,
        Fut: Future<Output = Result<HashMap<(String, i32), Result<T>>>>,
    {
        let mut out: Vec<Option<Result<T>>> = asked.iter().map(|_| None).collect();
        let mut grouped: BTreeMap<i32, Vec<(usize, i32)>> = BTreeMap::new();
        for (i, leader) in self.client.leaders(asked).await.into_iter().enumerate() {
            match leader {
                Ok((leader, epoch)) => grouped.entry(leader).or_default().push((i, epoch)),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        let requests = grouped.into_iter().map(|(leader, on_leader)| {
            let indexes: Vec<usize> = on_leader.iter().map(|&(i, _)| i).collect();
            let answer = send(leader, on_leader);
            async move { (indexes, answer.await) }
        });
        for (indexes, answer) in futures_util::future::join_all(requests).await {
            match answer {
                Err(e) => {
                    for i in indexes {
                        out[i] = Some(Err(e.duplicate()));
                    }
                }
                Ok(mut answers) => {
                    for i in indexes {
                        let (topic, partition) = asked[i];
                        out[i] = Some(
                            answers
                                .remove(&(topic.to_owned(), partition))
                                .unwrap_or_else(|| {
                                    Err(KafkaError::Protocol(format!(
                                        "{api} response without {topic}-{partition}"
                                    )))
                                }),
                        );
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.expect("every partition asked is answered or refused above"))
            .collect()
    }

    /// DeleteRecords: moves the log start offset of a partition to
    /// `before_offset` (-1: the high watermark). Returns the new low watermark.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> Result<i64> {
        self.on_leader(topic, partition, |leader, _| async move {
            let req = DeleteRecordsRequest::default()
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(partition)
                        .with_offset(before_offset)])])
                .with_timeout_ms(self.timeout_ms());
            let resp = self.client.send_to(leader, &req).await?;
            let p = resp
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.partition_index == partition)
                .ok_or_else(|| {
                    KafkaError::Protocol("DeleteRecords response without our partition".into())
                })?;
            KafkaError::check(
                p.error_code,
                || format!("DeleteRecords {topic}-{partition}"),
                None,
            )?;
            Ok(p.low_watermark)
        })
        .await
    }
}
