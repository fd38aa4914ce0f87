//! A loopback fault proxy between kmirror and a broker.
//!
//! A client reaches the broker through it by connecting to [`FaultProxy::addr`]
//! and mapping the broker's advertised address there
//! ([`FaultProxy::route`]), so connections opened from metadata stay behind
//! it too. The proxy understands Kafka's framing and can hold back requests
//! of chosen API keys: they wait inside the proxy, as in a congested or
//! partitioned network, while everything else flows. Released, they reach
//! the broker even if their client gave up and closed the connection long
//! ago — which is exactly how a request a client timed out can still be
//! appended.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmirror_actors::kafka::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Kafka API keys, for [`FaultProxy::hold`].
pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;

type Frame = Vec<u8>;

#[derive(Default)]
struct Shared {
    holding: HashSet<i16>,
    /// Held requests in arrival order, each with its connection's writer.
    held: Vec<(mpsc::UnboundedSender<Frame>, Frame)>,
    /// The broker's answers to requests that were held, with the API key
    /// and version of their request (to decode them).
    answers: Vec<HeldAnswer>,
}

/// The broker's answer to a request the proxy held: what a late request
/// met once it arrived (a client that gave up never sees it).
#[derive(Clone, Debug)]
pub struct HeldAnswer {
    pub api_key: i16,
    pub api_version: i16,
    /// The whole response frame, size prefix included.
    pub frame: Vec<u8>,
}

pub struct FaultProxy {
    /// Where clients connect (`127.0.0.1:port`).
    pub addr: String,
    upstream: String,
    shared: Arc<Mutex<Shared>>,
}

async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> Option<Frame> {
    let n = r.read_i32().await.ok()?;
    let mut buf = vec![0u8; n as usize + 4];
    buf[..4].copy_from_slice(&n.to_be_bytes());
    r.read_exact(&mut buf[4..]).await.ok()?;
    Some(buf)
}

impl FaultProxy {
    /// A proxy in front of the broker at `upstream`, forwarding everything.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (up, sh) = (upstream.to_string(), shared.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, up.clone(), sh.clone()));
            }
        });
        FaultProxy {
            addr,
            upstream: upstream.to_string(),
            shared,
        }
    }

    /// Routes `config`'s connections through the proxy: bootstrap here, and
    /// the broker's advertised address (a single-node bed advertises the
    /// address it is bootstrapped at) mapped here.
    pub fn route(&self, config: &mut ClientConfig) {
        config.bootstrap_servers = vec![self.addr.clone()];
        config
            .address_map
            .insert(self.upstream.clone(), self.addr.clone());
    }

    /// From now on, requests of these API keys are held in the proxy.
    pub fn hold(&self, api_keys: &[i16]) {
        self.shared
            .lock()
            .unwrap()
            .holding
            .extend(api_keys.iter().copied());
    }

    /// Holds nothing more and forwards every held request, in order.
    pub fn release(&self) {
        let mut sh = self.shared.lock().unwrap();
        sh.holding.clear();
        for (writer, frame) in sh.held.drain(..) {
            let _ = writer.send(frame);
        }
    }

    /// The broker's answers to every request held so far and released.
    pub fn held_answers(&self) -> Vec<HeldAnswer> {
        self.shared.lock().unwrap().answers.clone()
    }

    /// How many requests are held right now.
    pub fn held(&self) -> usize {
        self.shared.lock().unwrap().held.len()
    }
}

async fn connection(client: TcpStream, upstream: String, shared: Arc<Mutex<Shared>>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
    // Correlation id → (API key, version) of this connection's held requests.
    let held_ids: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    // The writer lives as long as anyone (the client, or a held request)
    // can still send, then a while longer: a broker that sees the
    // connection close may drop requests it has not read yet.
    tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            if sw.write_all(&f).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    // Answers go back while the client listens; after that they are read
    // and dropped, so the broker is never blocked writing them.
    let (ids, answers) = (held_ids.clone(), shared.clone());
    tokio::spawn(async move {
        let mut client_gone = false;
        while let Some(f) = read_frame(&mut sr).await {
            let correlation = i32::from_be_bytes([f[4], f[5], f[6], f[7]]);
            let held = ids.lock().unwrap().remove(&correlation);
            if let Some((api_key, api_version)) = held {
                answers.lock().unwrap().answers.push(HeldAnswer {
                    api_key,
                    api_version,
                    frame: f.clone(),
                });
            }
            if !client_gone && cw.write_all(&f).await.is_err() {
                client_gone = true;
            }
        }
    });
    while let Some(f) = read_frame(&mut cr).await {
        let api_key = i16::from_be_bytes([f[4], f[5]]);
        let mut sh = shared.lock().unwrap();
        if sh.holding.contains(&api_key) {
            let version = i16::from_be_bytes([f[6], f[7]]);
            let correlation = i32::from_be_bytes([f[8], f[9], f[10], f[11]]);
            held_ids
                .lock()
                .unwrap()
                .insert(correlation, (api_key, version));
            sh.held.push((tx.clone(), f));
        } else if tx.send(f).is_err() {
            return;
        }
    }
}
