//! A client for one cluster: bootstrap, a connection per broker (reconnected
//! with backoff), and the metadata cache.
//!
//! Why one connection per broker: the mirror talks to each broker with few,
//! large, pipelined requests (fetches and produces of whole batches), like
//! Kafka's replica fetchers; more sockets would add no throughput because a
//! broker processes one request per connection at a time but spreads
//! partitions' work across its I/O threads anyway. Create a second client for
//! traffic that must not queue behind fetches (e.g. admin calls).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::{Request, StrBytes};
use rand::Rng;
use uuid::Uuid;

use super::config::ClientConfig;
use super::conn::BrokerConnection;
use super::error::{KafkaError, ResponseError, Result};

/// A broker as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Node id.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
    /// Rack, if configured.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition's leadership as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Partition index.
    pub partition: i32,
    /// Leader node id, -1 when there is none.
    pub leader: i32,
    /// Leader epoch: sent with fetches so a stale leader is detected (fencing).
    pub leader_epoch: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
    /// Offline replica node ids.
    pub offline_replicas: Vec<i32>,
    /// Partition-level error (e.g. LEADER_NOT_AVAILABLE).
    pub error: Option<ResponseError>,
}

/// One topic as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Name.
    pub name: String,
    /// Topic id: recreated topics get a new one, which is how a mirror notices
    /// that "the same name" is not the same topic.
    pub topic_id: Uuid,
    /// `__consumer_offsets` and friends.
    pub is_internal: bool,
    /// Partitions sorted by index.
    pub partitions: Vec<PartitionMetadata>,
}

impl TopicMetadata {
    /// Partition by index.
    pub fn partition(&self, p: i32) -> Option<&PartitionMetadata> {
        self.partitions
            .binary_search_by_key(&p, |m| m.partition)
            .ok()
            .map(|i| &self.partitions[i])
    }
}

/// A snapshot of the cluster's metadata. Immutable; refreshes replace it.
#[derive(Debug, Clone)]
pub struct ClusterMetadata {
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// Active controller id as reported to clients (-1 in KRaft if hidden).
    pub controller_id: i32,
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMetadata>,
    /// When this snapshot was fetched.
    pub fetched_at: Instant,
}

impl ClusterMetadata {
    fn empty() -> Self {
        ClusterMetadata {
            cluster_id: None,
            controller_id: -1,
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            fetched_at: Instant::now() - Duration::from_secs(3600 * 24),
        }
    }

    /// Topic by name.
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.get(name)
    }

    /// Topic by id.
    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicMetadata> {
        self.topics.values().find(|t| t.topic_id == id)
    }
}

#[derive(Default)]
struct Slot {
    conn: Option<BrokerConnection>,
    failures: u32,
    next_attempt: Option<Instant>,
    /// The last failed attempt: when it ended, and why.
    last_failure: Option<(Instant, KafkaError)>,
}

/// A metadata refresh: when it was sent and which topics it read.
struct Refreshed {
    started: Instant,
    /// `None`: every topic.
    topics: Option<BTreeSet<String>>,
}

/// The newest refresh that answered, and the newest that failed (with its
/// error), for the callers that waited while they were sent.
#[derive(Default)]
struct Refreshes {
    answered: Option<Refreshed>,
    failed: Option<(Refreshed, KafkaError)>,
}

impl Refreshed {
    /// Whether this refresh read everything a refresh of `wanted` would.
    fn covers(&self, wanted: Option<&[String]>) -> bool {
        match (&self.topics, wanted) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(read), Some(wanted)) => wanted.iter().all(|t| read.contains(t)),
        }
    }
}

/// A connection's place: (broker node id, lane).
type Lane = (i32, u8);

struct Inner {
    config: ClientConfig,
    metadata: RwLock<Arc<ClusterMetadata>>,
    /// Connections by (node, lane): lane 0 is the one every caller shares,
    /// other lanes a producer's or a fetch session's own (see
    /// [`KafkaClient::lane_connection`]).
    slots: Mutex<HashMap<Lane, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Held while a refresh is in flight: one at a time, and a caller that
    /// waited may take the answer of the refresh it waited for
    /// ([`KafkaClient::refresh_metadata`]).
    refresh: tokio::sync::Mutex<Refreshes>,
    /// Requests sent through the shared calls (metadata refreshes,
    /// `send_to`, `send_any`), by API key: what kmirror's own bookkeeping
    /// costs the brokers (produce and fetch lanes are not counted here).
    sent: Sent,
    timer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(t) = self.timer.lock().unwrap().take() {
            t.abort();
        }
    }
}

/// A client for one Kafka cluster. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct KafkaClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KafkaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaClient")
            .field("bootstrap", &self.inner.config.bootstrap_servers)
            .finish()
    }
}

/// Highest metadata version this layer asks for (v12: topic ids, nullable names).
const METADATA_MAX_VERSION: i16 = 12;

impl KafkaClient {
    /// Connects to one of the bootstrap servers and loads the cluster metadata
    /// (all topics). Starts the `metadata.max.age.ms` refresh timer.
    pub async fn connect(config: ClientConfig) -> Result<Self> {
        let client = Self::unconnected(config)?;
        client.refresh_metadata(None).await?;
        client.start_metadata_timer();
        Ok(client)
    }

    /// [`KafkaClient::connect`] for a cluster that may be down: nothing
    /// waits for it to answer. Metadata loads in the background, then on
    /// the `metadata.max.age.ms` timer and at every caller's own refresh,
    /// so a caller meets the cluster's absence as the error of its own
    /// request. A mirror's source is the cluster a disaster takes away, and
    /// a daemon restarted during the outage must still start, describe and
    /// fail over — at once, not after a request timeout per mirror. Only a
    /// configuration error fails here; a TLS or authentication failure
    /// shows at the first request.
    pub fn connect_lazy(config: ClientConfig) -> Result<Self> {
        let client = Self::unconnected(config)?;
        let first = client.clone();
        tokio::spawn(async move {
            if let Err(e) = first.refresh_metadata(None).await {
                tracing::warn!(
                    bootstrap = ?first.inner.config.bootstrap_servers,
                    error = %e,
                    "cluster not reachable yet; its clients ask again"
                );
            }
        });
        client.start_metadata_timer();
        Ok(client)
    }

    fn unconnected(config: ClientConfig) -> Result<Self> {
        if config.bootstrap_servers.is_empty() {
            return Err(KafkaError::config("bootstrap.servers", "is empty"));
        }
        Ok(KafkaClient {
            inner: Arc::new(Inner {
                config,
                metadata: RwLock::new(Arc::new(ClusterMetadata::empty())),
                slots: Mutex::new(HashMap::new()),
                refresh: tokio::sync::Mutex::default(),
                sent: Sent::default(),
                timer: Mutex::new(None),
            }),
        })
    }

    fn start_metadata_timer(&self) {
        let weak = Arc::downgrade(&self.inner);
        let period = self.inner.config.metadata_max_age;
        let handle = tokio::spawn(metadata_timer(weak, period));
        *self.inner.timer.lock().unwrap() = Some(handle);
    }

    /// Parses Kafka client properties and connects.
    pub async fn from_properties(props: &BTreeMap<String, String>) -> Result<Self> {
        Self::connect(ClientConfig::from_properties(props)?).await
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The current metadata snapshot (never blocks on the network).
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.inner.metadata.read().unwrap().clone()
    }

    /// Reloads metadata. `None` loads every topic and replaces the topic map
    /// (topics deleted on the cluster disappear); `Some(topics)` updates only
    /// those (a topic that no longer exists is removed).
    ///
    /// A caller whose refresh would read nothing that one sent after it
    /// asked has not read takes that answer, as fresh as its own: when the
    /// partitions of a topic all find their leader moved at once (thousands
    /// aligning while the broker still creates their logs), each asks for
    /// the topic, and one request after another — each decoding every
    /// partition of it — was O(partitions²). A burst now costs two. So
    /// does a failure: a caller that waited while a refresh failed gets its
    /// error, where each took its turn to fail again (a request timeout
    /// each, one after another, while a broker did not answer).
    pub async fn refresh_metadata(
        &self,
        topics: Option<&[String]>,
    ) -> Result<Arc<ClusterMetadata>> {
        let asked = Instant::now();
        let mut newest = self.inner.refresh.lock().await;
        if let Some(r) = &newest.answered {
            if r.started >= asked && r.covers(topics) {
                return Ok(self.metadata());
            }
        }
        if let Some((r, e)) = &newest.failed {
            if r.started >= asked && r.covers(topics) {
                return Err(e.duplicate());
            }
        }
        let refresh = Refreshed {
            started: Instant::now(),
            topics: topics.map(|t| t.iter().cloned().collect()),
        };
        match self.load_metadata(topics).await {
            Ok(md) => {
                newest.answered = Some(refresh);
                Ok(md)
            }
            Err(e) => {
                newest.failed = Some((refresh, e.duplicate()));
                Err(e)
            }
        }
    }

    /// One Metadata request, its answer made the current snapshot.
    async fn load_metadata(&self, topics: Option<&[String]>) -> Result<Arc<ClusterMetadata>> {
        let req = MetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        self.inner.sent.count(MetadataRequest::KEY);
        let (conn, resp) = self
            .send_to_any_with(|c| {
                let v = c
                    .version::<MetadataRequest>()
                    .map(|v| v.min(METADATA_MAX_VERSION));
                let req = req.clone();
                let c = c.clone();
                async move {
                    let v = v?;
                    c.send_versioned(&req, v, c.request_timeout()).await
                }
            })
            .await?;
        let _ = conn;
        let old = self.metadata();
        let mut md = ClusterMetadata {
            cluster_id: resp.cluster_id.map(|s| s.to_string()),
            controller_id: resp.controller_id.0,
            brokers: resp
                .brokers
                .iter()
                .map(|b| {
                    (
                        b.node_id.0,
                        BrokerInfo {
                            node_id: b.node_id.0,
                            host: b.host.to_string(),
                            port: b.port as u16,
                            rack: b.rack.as_ref().map(|r| r.to_string()),
                        },
                    )
                })
                .collect(),
            topics: if topics.is_some() {
                old.topics.clone()
            } else {
                BTreeMap::new()
            },
            fetched_at: if topics.is_some() {
                old.fetched_at
            } else {
                Instant::now()
            },
        };
        for t in resp.topics {
            let Some(name) = t.name.map(|n| n.0.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                if t.error_code == ResponseError::UnknownTopicOrPartition.code() {
                    md.topics.remove(&name);
                }
                continue;
            }
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|n| n.0).collect(),
                    isr: p.isr_nodes.iter().map(|n| n.0).collect(),
                    offline_replicas: p.offline_replicas.iter().map(|n| n.0).collect(),
                    error: ResponseError::try_from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            md.topics.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    topic_id: t.topic_id,
                    is_internal: t.is_internal,
                    partitions,
                },
            );
        }
        let md = Arc::new(md);
        *self.inner.metadata.write().unwrap() = md.clone();
        Ok(md)
    }

    /// Requests of API `R` this client has sent through its shared calls
    /// (metadata refreshes, [`KafkaClient::send_to`], [`KafkaClient::send_any`]).
    pub fn requests_sent<R: Request>(&self) -> u64 {
        self.inner.sent.of(R::KEY)
    }

    /// Leader node and leader epoch of a partition, refreshing the topic's
    /// metadata once if it is unknown or leaderless.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<(i32, i32)> {
        self.leaders(&[(topic, partition)])
            .await
            .pop()
            .expect("one answer per partition asked")
    }

    /// [`KafkaClient::leader`] of many partitions, in the order asked, from
    /// one snapshot: the topics of those without a known leader are
    /// refreshed once, together. A batch of thousands asked one by one
    /// would refresh a leaderless partition's topic each, one refresh after
    /// another (none could share the one before it).
    pub async fn leaders(&self, partitions: &[(&str, i32)]) -> Vec<Result<(i32, i32)>> {
        fn known(md: &ClusterMetadata, topic: &str, partition: i32) -> Option<(i32, i32)> {
            let p = md.topic(topic)?.partition(partition)?;
            (p.leader >= 0).then_some((p.leader, p.leader_epoch))
        }
        let mut md = self.metadata();
        let unknown: BTreeSet<String> = partitions
            .iter()
            .filter(|(t, p)| known(&md, t, *p).is_none())
            .map(|(t, _)| t.to_string())
            .collect();
        let mut refresh_failed = None;
        if !unknown.is_empty() {
            let topics: Vec<String> = unknown.into_iter().collect();
            match self.refresh_metadata(Some(&topics)).await {
                Ok(fresh) => md = fresh,
                Err(e) => refresh_failed = Some(e),
            }
        }
        partitions
            .iter()
            .map(|(t, p)| {
                known(&md, t, *p).ok_or_else(|| match &refresh_failed {
                    Some(e) => e.duplicate(),
                    None => KafkaError::Unknown(format!("leader for {t}-{p}")),
                })
            })
            .collect()
    }

    /// The connection to broker `node_id`, connecting (with exponential
    /// backoff after failures, `reconnect.backoff.ms` … `reconnect.backoff.max.ms`)
    /// if needed.
    pub async fn connection(&self, node_id: i32) -> Result<BrokerConnection> {
        self.lane_connection(node_id, 0).await
    }

    /// Connection `lane` to broker `node_id` (lane 0 is [`KafkaClient::connection`]).
    /// A broker reads one request per connection at a time and answers a
    /// parked Fetch before the next request on it, so two fetches are only
    /// at the broker together on two connections: each fetch session of a
    /// broker gets a lane of its own, and so does each producer lane.
    pub async fn lane_connection(&self, node_id: i32, lane: u8) -> Result<BrokerConnection> {
        let slot = {
            let mut slots = self.inner.slots.lock().unwrap();
            slots.entry((node_id, lane)).or_default().clone()
        };
        let asked = Instant::now();
        let mut slot = slot.lock().await;
        if let Some(c) = &slot.conn {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        slot.conn = None;
        // An attempt failed while we waited for the slot: that is our
        // answer too. Each caller making an attempt of its own in turn would
        // keep the last of N waiting N × `socket.connection.setup.timeout.ms`
        // on an unreachable broker, under no timeout of its own.
        if let Some((at, e)) = &slot.last_failure {
            if *at >= asked {
                return Err(e.duplicate());
            }
        }
        if let Some(at) = slot.next_attempt {
            tokio::time::sleep_until(at.into()).await;
        }
        let addr = self
            .metadata()
            .brokers
            .get(&node_id)
            .map(BrokerInfo::address)
            .ok_or_else(|| KafkaError::Unknown(format!("broker {node_id}")))?;
        let addr = self
            .inner
            .config
            .address_map
            .get(&addr)
            .cloned()
            .unwrap_or(addr);
        match BrokerConnection::connect(&addr, node_id, &self.inner.config).await {
            Ok(c) => {
                slot.failures = 0;
                slot.next_attempt = None;
                slot.last_failure = None;
                slot.conn = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                let d = self.inner.config.reconnect_delay(slot.failures);
                slot.failures = slot.failures.saturating_add(1);
                slot.next_attempt = Some(Instant::now() + d);
                slot.last_failure = Some((Instant::now(), e.duplicate()));
                Err(e)
            }
        }
    }

    /// A connection to some live broker: known brokers first, then the
    /// bootstrap list (used for cluster-wide RPCs such as CreateTopics).
    pub async fn any_connection(&self) -> Result<BrokerConnection> {
        let ids: Vec<i32> = self.metadata().brokers.keys().copied().collect();
        let mut last = None;
        let start = if ids.is_empty() {
            0
        } else {
            rand::rng().random_range(0..ids.len())
        };
        for i in 0..ids.len() {
            match self.connection(ids[(start + i) % ids.len()]).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        for addr in &self.inner.config.bootstrap_servers {
            match self.bootstrap_connection(addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| KafkaError::Unknown("broker".into())))
    }

    async fn bootstrap_connection(&self, addr: &str) -> Result<BrokerConnection> {
        let key = -1000
            - (self
                .inner
                .config
                .bootstrap_servers
                .iter()
                .position(|a| a == addr)
                .unwrap_or(0) as i32);
        let slot = {
            let mut slots = self.inner.slots.lock().unwrap();
            slots.entry((key, 0)).or_default().clone()
        };
        let mut slot = slot.lock().await;
        if let Some(c) = &slot.conn {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let c = BrokerConnection::connect(addr, -1, &self.inner.config).await?;
        slot.conn = Some(c.clone());
        Ok(c)
    }

    async fn send_to_any_with<T, F, Fut>(&self, f: F) -> Result<(BrokerConnection, T)>
    where
        F: Fn(&BrokerConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut last = None;
        for _ in 0..3 {
            let conn = match self.any_connection().await {
                Ok(c) => c,
                Err(e) if e.is_retriable() => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            match f(&conn).await {
                Ok(r) => return Ok((conn, r)),
                Err(e) if e.is_retriable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Sends a request to any broker (retrying on another after a network
    /// failure). For RPCs that every broker forwards or answers.
    pub async fn send_any<R: Request + Clone>(&self, req: &R) -> Result<R::Response> {
        self.send_to_any_with(|c| {
            self.inner.sent.count(R::KEY);
            let c = c.clone();
            let req = req.clone();
            async move { c.send(&req).await }
        })
        .await
        .map(|(_, r)| r)
    }

    /// Sends a request to broker `node_id`.
    pub async fn send_to<R: Request>(&self, node_id: i32, req: &R) -> Result<R::Response> {
        let conn = self.connection(node_id).await?;
        self.inner.sent.count(R::KEY);
        conn.send(req).await
    }

    /// The backoff before retry number `attempt` (0-based): see
    /// [`ClientConfig::retry_delay`].
    pub fn retry_backoff(&self, attempt: u32) -> Duration {
        self.inner.config.retry_delay(attempt)
    }
}

/// A counter per API key.
struct Sent([std::sync::atomic::AtomicU64; 128]);

impl Default for Sent {
    fn default() -> Self {
        Sent(std::array::from_fn(|_| Default::default()))
    }
}

impl Sent {
    fn count(&self, api: i16) {
        if let Some(c) = usize::try_from(api).ok().and_then(|i| self.0.get(i)) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn of(&self, api: i16) -> u64 {
        usize::try_from(api)
            .ok()
            .and_then(|i| self.0.get(i))
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }
}

async fn metadata_timer(inner: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        let client = KafkaClient { inner };
        if let Err(e) = client.refresh_metadata(None).await {
            tracing::warn!(error = %e, "periodic metadata refresh failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataResponse};
    use kafka_protocol::protocol::Decodable;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::kafka::fake_wire::{read_request, write_response};

    /// A broker that answers a Metadata request for every topic (itself
    /// the only broker) and never one that names topics.
    async fn serve(port: u16, mut s: TcpStream) {
        while let Some((h, mut f)) = read_request(&mut s).await {
            let (corr, v) = (h.correlation_id, h.request_api_version);
            match h.request_api_key {
                18 => {
                    let r = ApiVersionsResponse::default().with_api_keys(
                        [(18, 3), (3, 8)]
                            .into_iter()
                            .map(|(k, hi)| {
                                ApiVersion::default().with_api_key(k).with_max_version(hi)
                            })
                            .collect(),
                    );
                    write_response(&mut s, corr, &r, 0).await;
                }
                3 if MetadataRequest::decode(&mut f, v).unwrap().topics.is_none() => {
                    let r = MetadataResponse::default().with_brokers(vec![
                        MetadataResponseBroker::default()
                            .with_node_id(1.into())
                            .with_host(StrBytes::from_static_str("127.0.0.1"))
                            .with_port(i32::from(port)),
                    ]);
                    write_response(&mut s, corr, &r, v).await;
                }
                3 => {}
                k => panic!("fake broker: unexpected api {k}"),
            }
        }
    }

    /// Callers that waited while a refresh failed get its error. Each used
    /// to send its own after it, one after another, and wait out a request
    /// timeout each while the broker did not answer.
    #[tokio::test]
    async fn callers_that_waited_while_a_refresh_failed_get_its_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(port, s));
            }
        });
        let client = KafkaClient::connect(ClientConfig {
            request_timeout: Duration::from_millis(300),
            ..ClientConfig::plaintext(&format!("127.0.0.1:{port}"))
        })
        .await
        .unwrap();
        let before = client.requests_sent::<MetadataRequest>();
        let asks: Vec<_> = (0..8)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { client.refresh_metadata(Some(&["silent".into()])).await })
            })
            .collect();
        for ask in futures_util::future::join_all(asks).await {
            assert!(ask.unwrap().is_err());
        }
        let sent = client.requests_sent::<MetadataRequest>() - before;
        assert!(sent <= 2, "8 callers sent {sent} Metadata requests");
    }
}
