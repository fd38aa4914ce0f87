//! One connection to one broker: framing, correlation ids, pipelining,
//! ApiVersions negotiation, TLS and SASL.
//!
//! Why a writer task and a reader task: many requests can be in flight on one
//! connection (Kafka answers them in order, but we do not rely on that — each
//! answer is matched by correlation id), so callers never wait for each other
//! to *send*, only for their own answer. The response frame is handed to the
//! caller as `Bytes` and decoded there, so large fetch responses are decoded on
//! the caller's task and record data is sliced out of the frame without a copy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::config::{parse_host_port, ClientConfig, SaslMechanism};
use super::error::{protocol_err, KafkaError, Result};
use super::sasl;

/// Largest response frame accepted (a corrupted length must not make us
/// allocate gigabytes).
const MAX_FRAME: usize = 512 * 1024 * 1024;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

type Pending = HashMap<i32, oneshot::Sender<Result<Bytes>>>;

struct Shared {
    pending: Pending,
    /// Set (under the same lock as `pending`) when the connection is dead, so a
    /// request can never be registered after the reader has failed the others.
    closed: Option<String>,
}

struct Inner {
    broker: String,
    node_id: i32,
    client_id: StrBytes,
    versions: std::sync::OnceLock<HashMap<i16, (i16, i16)>>,
    next_correlation: AtomicI32,
    shared: Mutex<Shared>,
    writer: mpsc::Sender<Outbound>,
    request_timeout: Duration,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// A connection to one broker. Cheap to clone; all clones share the socket.
/// Dropping the last clone closes it.
#[derive(Clone)]
pub struct BrokerConnection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerConnection")
            .field("broker", &self.inner.broker)
            .field("node_id", &self.inner.node_id)
            .finish()
    }
}

/// The API's name for error messages.
pub(crate) fn api_name(key: i16) -> &'static str {
    match ApiKey::try_from(key) {
        Ok(k) => api_key_name(k),
        Err(_) => "unknown API",
    }
}

fn api_key_name(k: ApiKey) -> &'static str {
    // Debug names are good enough and stable within a crate version; leak once per key.
    use std::sync::OnceLock;
    static NAMES: OnceLock<Mutex<HashMap<i16, &'static str>>> = OnceLock::new();
    let map = NAMES.get_or_init(Default::default);
    let mut m = map.lock().unwrap();
    m.entry(k as i16)
        .or_insert_with(|| Box::leak(format!("{k:?}").into_boxed_str()))
}

impl BrokerConnection {
    /// Connects, negotiates API versions and authenticates, all within
    /// `socket.connection.setup.timeout.ms`. `node_id` is -1 for bootstrap
    /// connections.
    pub async fn connect(addr: &str, node_id: i32, config: &ClientConfig) -> Result<Self> {
        let broker = addr.to_owned();
        match tokio::time::timeout(
            config.connect_timeout,
            Self::connect_inner(addr, node_id, config),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(KafkaError::Timeout {
                api: "connect",
                broker,
                timeout: config.connect_timeout,
            }),
        }
    }

    async fn connect_inner(addr: &str, node_id: i32, config: &ClientConfig) -> Result<Self> {
        let broker = addr.to_owned();
        let (host, _port) =
            parse_host_port(addr).map_err(|m| KafkaError::config("bootstrap.servers", m))?;
        let io_err = |source| KafkaError::Io {
            broker: broker.clone(),
            source,
        };
        let tcp = TcpStream::connect(addr).await.map_err(io_err)?;
        tcp.set_nodelay(true).map_err(io_err)?;
        let stream: Box<dyn Stream> = if let Some(tls) = &config.tls {
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                KafkaError::Tls {
                    broker: broker.clone(),
                    message: format!("invalid server name `{host}`: {e}"),
                }
            })?;
            let tls_stream = tokio_rustls::TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| KafkaError::Tls {
                    broker: broker.clone(),
                    message: e.to_string(),
                })?;
            Box::new(tls_stream)
        } else {
            Box::new(tcp)
        };
        let (read_half, write_half) = tokio::io::split(stream);
        let (writer_tx, writer_rx) = mpsc::channel::<Outbound>(256);
        let inner = Arc::new(Inner {
            broker: broker.clone(),
            node_id,
            client_id: StrBytes::from_string(config.client_id.clone()),
            versions: std::sync::OnceLock::new(),
            next_correlation: AtomicI32::new(1),
            shared: Mutex::new(Shared {
                pending: HashMap::new(),
                closed: None,
            }),
            writer: writer_tx,
            request_timeout: config.request_timeout,
            tasks: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&inner);
        let reader = tokio::spawn(read_loop(
            BufReader::with_capacity(64 * 1024, read_half),
            weak.clone(),
        ));
        let writer = tokio::spawn(write_loop(
            BufWriter::with_capacity(64 * 1024, write_half),
            writer_rx,
            weak,
        ));
        inner.tasks.lock().unwrap().extend([reader, writer]);
        let conn = BrokerConnection { inner };
        let versions = conn.negotiate_versions().await?;
        let _ = conn.inner.versions.set(versions);

        if let Some(sasl) = &config.sasl {
            conn.authenticate(sasl.mechanism, &sasl.username, &sasl.password)
                .await?;
        }
        Ok(conn)
    }

    async fn negotiate_versions(&self) -> Result<HashMap<i16, (i16, i16)>> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kmirror"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut version = ApiVersionsRequest::VERSIONS.max.min(3);
        loop {
            let resp = self
                .send_versioned(&req, version, self.inner.request_timeout)
                .await;
            match resp {
                Ok(r) if r.error_code == 0 => {
                    return Ok(r
                        .api_keys
                        .iter()
                        .map(|k| (k.api_key, (k.min_version, k.max_version)))
                        .collect())
                }
                // UNSUPPORTED_VERSION: the broker answers in v0 with its range; retry v0.
                Ok(r) if r.error_code == 35 && version != 0 => version = 0,
                Err(KafkaError::Protocol(_)) if version != 0 => version = 0,
                Ok(r) => {
                    return Err(KafkaError::from_code(
                        r.error_code,
                        format!("ApiVersions to {}", self.inner.broker),
                        None,
                    )
                    .expect("non-zero"))
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn authenticate(
        &self,
        mechanism: SaslMechanism,
        username: &str,
        password: &str,
    ) -> Result<()> {
        let broker = self.inner.broker.clone();
        let auth_err = |message: String| KafkaError::Authentication {
            broker: broker.clone(),
            mechanism: mechanism.name().to_owned(),
            message,
        };
        let hs = self
            .send(
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(mechanism.name())),
            )
            .await?;
        if hs.error_code != 0 {
            let enabled: Vec<&str> = hs.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(auth_err(format!(
                "mechanism not enabled on the listener (error code {}); enabled: {enabled:?}",
                hs.error_code
            )));
        }
        let step = |bytes: Vec<u8>| async {
            let r = self
                .send(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)))
                .await?;
            if r.error_code != 0 {
                let msg = r
                    .error_message
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                return Err(auth_err(format!("{msg} (error code {})", r.error_code)));
            }
            Ok(r.auth_bytes)
        };
        match mechanism {
            SaslMechanism::Plain => {
                step(sasl::plain_message(username, password)).await?;
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let mut scram =
                    sasl::Scram::new(mechanism, username, password, sasl::Scram::random_nonce());
                let server_first = step(scram.client_first()).await?;
                let client_final = scram.client_final(&server_first).map_err(&auth_err)?;
                let server_final = step(client_final).await?;
                scram
                    .verify_server_final(&server_final)
                    .map_err(&auth_err)?;
            }
        }
        Ok(())
    }

    fn versions(&self) -> &HashMap<i16, (i16, i16)> {
        static EMPTY: std::sync::OnceLock<HashMap<i16, (i16, i16)>> = std::sync::OnceLock::new();
        self.inner
            .versions
            .get()
            .unwrap_or_else(|| EMPTY.get_or_init(HashMap::new))
    }

    /// The broker's advertised version range for an API key, if any.
    pub fn broker_versions(&self, api_key: i16) -> Option<(i16, i16)> {
        self.versions().get(&api_key).copied()
    }

    /// `request.timeout.ms` of this connection.
    pub fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// `host:port` this connection goes to.
    pub fn broker(&self) -> &str {
        &self.inner.broker
    }

    /// Node id (-1 for a bootstrap connection).
    pub fn node_id(&self) -> i32 {
        self.inner.node_id
    }

    /// Whether the socket is known to be dead (reconnect needed).
    pub fn is_closed(&self) -> bool {
        self.inner.shared.lock().unwrap().closed.is_some()
    }

    /// Closes the connection, failing everything in flight.
    pub fn close(&self, reason: &str) {
        close(&self.inner, reason.to_owned());
    }

    /// Highest version of `R` both sides speak. Errors if there is none.
    pub fn version<R: Request>(&self) -> Result<i16> {
        self.version_for(R::KEY, R::VERSIONS.min, R::VERSIONS.max)
    }

    /// Whether the broker speaks version `v` of `R`.
    pub fn supports<R: Request>(&self, v: i16) -> bool {
        matches!(self.versions().get(&R::KEY), Some(&(lo, hi)) if lo <= v && v <= hi)
            && R::VERSIONS.min <= v
            && v <= R::VERSIONS.max
    }

    fn version_for(&self, key: i16, ours_min: i16, ours_max: i16) -> Result<i16> {
        let (lo, hi) =
            *self
                .versions()
                .get(&key)
                .ok_or_else(|| KafkaError::UnsupportedVersion {
                    api: api_name(key),
                    broker: self.inner.broker.clone(),
                    broker_range: "none".into(),
                    our_range: format!("{ours_min}..{ours_max}"),
                })?;
        let v = hi.min(ours_max);
        if v < lo.max(ours_min) {
            return Err(KafkaError::UnsupportedVersion {
                api: api_name(key),
                broker: self.inner.broker.clone(),
                broker_range: format!("{lo}..{hi}"),
                our_range: format!("{ours_min}..{ours_max}"),
            });
        }
        Ok(v)
    }

    /// Sends `req` at the highest common version with `request.timeout.ms`.
    pub async fn send<R: Request>(&self, req: &R) -> Result<R::Response> {
        let v = self.version::<R>()?;
        self.send_versioned(req, v, self.inner.request_timeout)
            .await
    }

    /// Sends `req` at version `version` and waits at most `timeout` for the answer.
    /// On timeout the connection is closed (the answer could still arrive, and
    /// a retry must not race it).
    pub async fn send_versioned<R: Request>(
        &self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response> {
        self.submit(req, version, timeout).await?.wait().await
    }

    /// Puts `req` on the wire (queued to the writer, in call order) and
    /// returns a handle for its answer. Why separate from waiting: a caller
    /// that pipelines (the producer) must fix the *order* requests hit the
    /// socket — the broker checks sequences in arrival order — while still
    /// waiting for many answers at once.
    pub async fn submit<R: Request>(
        &self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<PendingResponse<R>> {
        let correlation_id = self.next_correlation();
        let frame = encode(&self.inner.client_id, correlation_id, req, version)?;
        self.enqueue(correlation_id, Outbound::Frame(frame), version, timeout)
            .await
    }

    /// [`submit`](Self::submit) for a request built and encoded only when
    /// the writer gets to it. Why: a broker reads one request per
    /// connection at a time, so pipelined requests wait in our queue; a
    /// Produce request encoded at submit would wait there as a second copy
    /// of every batch it carries (18 MiB of a backlog copy's peak), where
    /// built late it waits as references to the batches.
    pub async fn submit_later<R, F>(
        &self,
        build: F,
        version: i16,
        timeout: Duration,
    ) -> Result<PendingResponse<R>>
    where
        R: Request,
        F: FnOnce() -> R + Send + 'static,
    {
        let correlation_id = self.next_correlation();
        let client_id = self.inner.client_id.clone();
        let encode = Box::new(move || encode(&client_id, correlation_id, &build(), version));
        let later = Outbound::Later {
            correlation_id,
            encode,
        };
        self.enqueue(correlation_id, later, version, timeout).await
    }

    fn next_correlation(&self) -> i32 {
        self.inner.next_correlation.fetch_add(1, Ordering::Relaxed) & i32::MAX
    }

    /// Registers the answer's receiver, then queues `out` to the writer.
    async fn enqueue<R: Request>(
        &self,
        correlation_id: i32,
        out: Outbound,
        version: i16,
        timeout: Duration,
    ) -> Result<PendingResponse<R>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (tx, rx) = oneshot::channel();
        {
            let mut shared = self.inner.shared.lock().unwrap();
            if let Some(reason) = &shared.closed {
                return Err(KafkaError::Disconnected {
                    broker: self.inner.broker.clone(),
                    reason: reason.clone(),
                });
            }
            shared.pending.insert(correlation_id, tx);
        }
        let pending = PendingResponse {
            conn: self.clone(),
            rx,
            correlation_id,
            version,
            deadline,
            timeout,
            _request: std::marker::PhantomData,
        };
        match tokio::time::timeout_at(deadline, self.inner.writer.send(out)).await {
            Ok(Ok(())) => Ok(pending),
            Ok(Err(_)) => Err(KafkaError::Disconnected {
                broker: self.inner.broker.clone(),
                reason: "writer stopped".into(),
            }),
            Err(_) => Err(pending.timed_out()),
        }
    }
}

/// A request's frame: size, header (with `correlation_id`), body.
fn encode<R: Request>(
    client_id: &StrBytes,
    correlation_id: i32,
    req: &R,
    version: i16,
) -> Result<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    let hv = R::header_version(version);
    let size = header
        .compute_size(hv)
        .and_then(|h| req.compute_size(version).map(|b| h + b))
        .map_err(|e| protocol_err("sizing request", e))?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header
        .encode(&mut buf, hv)
        .map_err(|e| protocol_err("encoding header", e))?;
    req.encode(&mut buf, version)
        .map_err(|e| protocol_err(&format!("encoding {} v{version}", api_name(R::KEY)), e))?;
    Ok(buf.freeze())
}

/// What the writer task puts on the socket, in queue order.
enum Outbound {
    Frame(Bytes),
    /// Encoded when its turn comes ([`BrokerConnection::submit_later`]); a
    /// request that cannot be encoded fails alone.
    Later {
        correlation_id: i32,
        encode: Box<dyn FnOnce() -> Result<Bytes> + Send>,
    },
}

/// A request that is on the wire; [`PendingResponse::wait`] yields its answer.
#[derive(Debug)]
pub struct PendingResponse<R: Request> {
    conn: BrokerConnection,
    rx: oneshot::Receiver<Result<Bytes>>,
    correlation_id: i32,
    version: i16,
    deadline: tokio::time::Instant,
    timeout: Duration,
    _request: std::marker::PhantomData<fn() -> R>,
}

impl<R: Request> PendingResponse<R> {
    /// Waits for and decodes the answer (until the deadline set at submit).
    pub async fn wait(mut self) -> Result<R::Response> {
        let mut body = match tokio::time::timeout_at(self.deadline, &mut self.rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => {
                return Err(KafkaError::Disconnected {
                    broker: self.conn.inner.broker.clone(),
                    reason: "connection dropped".into(),
                })
            }
            Err(_) => return Err(self.timed_out()),
        };
        let version = self.version;
        let hv = <R::Response as HeaderVersion>::header_version(version);
        ResponseHeader::decode(&mut body, hv).map_err(|e| protocol_err("response header", e))?;
        R::Response::decode(&mut body, version).map_err(|e| {
            protocol_err(
                &format!("decoding {} v{version} response", api_name(R::KEY)),
                e,
            )
        })
    }

    fn timed_out(&self) -> KafkaError {
        let inner = &self.conn.inner;
        inner
            .shared
            .lock()
            .unwrap()
            .pending
            .remove(&self.correlation_id);
        close(inner, format!("{} request timed out", api_name(R::KEY)));
        KafkaError::Timeout {
            api: api_name(R::KEY),
            broker: inner.broker.clone(),
            timeout: self.timeout,
        }
    }
}

fn close(inner: &Inner, reason: String) {
    let pending = {
        let mut shared = inner.shared.lock().unwrap();
        if shared.closed.is_none() {
            shared.closed = Some(reason.clone());
        }
        std::mem::take(&mut shared.pending)
    };
    for (_, tx) in pending {
        let _ = tx.send(Err(KafkaError::Disconnected {
            broker: inner.broker.clone(),
            reason: reason.clone(),
        }));
    }
    for t in inner.tasks.lock().unwrap().iter() {
        t.abort();
    }
}

async fn read_loop<R: AsyncRead + Unpin>(mut rd: BufReader<R>, inner: std::sync::Weak<Inner>) {
    let reason = loop {
        let len = match rd.read_i32().await {
            Ok(n) => n,
            Err(e) => break format!("read failed: {e}"),
        };
        if len < 4 || len as usize > MAX_FRAME {
            break format!("invalid response frame length {len}");
        }
        let len = len as usize;
        let mut buf = BytesMut::with_capacity(len);
        let mut failed = None;
        while buf.len() < len {
            let mut lim = (&mut rd).take((len - buf.len()) as u64);
            match lim.read_buf(&mut buf).await {
                Ok(0) => {
                    failed = Some("connection closed mid-frame".to_owned());
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    failed = Some(format!("read failed: {e}"));
                    break;
                }
            }
        }
        if let Some(f) = failed {
            break f;
        }
        let body = buf.freeze();
        let correlation_id = (&body[..4]).get_i32();
        let Some(inner) = inner.upgrade() else { return };
        let tx = inner.shared.lock().unwrap().pending.remove(&correlation_id);
        match tx {
            Some(tx) => {
                let _ = tx.send(Ok(body));
            }
            // A late answer to a request that timed out; the connection is
            // being closed anyway.
            None => {
                tracing::debug!(broker = %inner.broker, correlation_id, "response with no pending request")
            }
        }
    };
    if let Some(inner) = inner.upgrade() {
        tracing::debug!(broker = %inner.broker, %reason, "connection closed");
        close(&inner, reason);
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: BufWriter<W>,
    mut rx: mpsc::Receiver<Outbound>,
    inner: std::sync::Weak<Inner>,
) {
    let reason = 'outer: loop {
        let Some(out) = rx.recv().await else {
            return;
        };
        if let Err(e) = write_out(&mut wr, out, &inner).await {
            break format!("write failed: {e}");
        }
        // Coalesce whatever else is queued into the same flush.
        while let Ok(out) = rx.try_recv() {
            if let Err(e) = write_out(&mut wr, out, &inner).await {
                break 'outer format!("write failed: {e}");
            }
        }
        if let Err(e) = wr.flush().await {
            break format!("flush failed: {e}");
        }
    };
    if let Some(inner) = inner.upgrade() {
        close(&inner, reason);
    }
}

/// Writes one request; one that fails to encode is answered with the error
/// and never written.
async fn write_out<W: AsyncWrite + Unpin>(
    wr: &mut BufWriter<W>,
    out: Outbound,
    inner: &std::sync::Weak<Inner>,
) -> std::io::Result<()> {
    let frame = match out {
        Outbound::Frame(frame) => frame,
        Outbound::Later {
            correlation_id,
            encode,
        } => match encode() {
            Ok(frame) => frame,
            Err(e) => {
                let tx = inner
                    .upgrade()
                    .and_then(|i| i.shared.lock().unwrap().pending.remove(&correlation_id));
                if let Some(tx) = tx {
                    let _ = tx.send(Err(e));
                }
                return Ok(());
            }
        },
    };
    wr.write_all(&frame).await
}

#[cfg(test)]
mod tests;
