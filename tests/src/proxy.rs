//! A loopback fault proxy between kmirror and a broker.
//!
//! A client reaches the broker through it in one of two ways. In process,
//! by connecting to [`FaultProxy::addr`] and mapping the broker's advertised
//! address there ([`FaultProxy::route`]). From another process (the daemon,
//! which has no address map), through a bed started with
//! `scripts/kafka up --proxied N`: each broker then advertises, on an extra
//! listener, a port nobody listens on, and [`FaultProxy::listen`] binds it
//! and forwards to that listener — metadata itself keeps the client behind
//! the proxy, while the bed's main listener stays direct for Java tools.
//!
//! The proxy understands Kafka's framing and plays network faults on whole
//! frames, against a real broker:
//! - holding requests of chosen API keys ([`FaultProxy::hold`]): they wait
//!   inside the proxy while everything else flows; released, they reach the
//!   broker even if their client gave up and closed the connection long
//!   ago — which is exactly how a request a client timed out can still be
//!   appended;
//! - latency per direction and a bandwidth cap ([`FaultProxy::set_latency`],
//!   [`FaultProxy::set_bandwidth`]);
//! - closing connections with a FIN or a RST ([`FaultProxy::drop_connections`],
//!   [`FaultProxy::reset_connections`]);
//! - a black hole ([`FaultProxy::black_hole`]): connections are accepted and
//!   kept, nothing is forwarded either way, new connections hang. It stalls
//!   rather than drops frames, as TCP would: what was sent during the hole
//!   arrives after it, even from a client that closed its socket meanwhile;
//! - half-open connections ([`FaultProxy::half_open`]): the connections open
//!   now stop forwarding one direction for good, sockets kept open, as when
//!   the peer vanished; new connections work. [`FaultProxy::heal`] resets
//!   them.
//!
//! Schedules are seeded ([`FaultRng::from_env`]): the seed is printed at the
//! start and `KMIRROR_FAULT_SEED` replays it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmirror_actors::kafka::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Kafka API keys, for [`FaultProxy::hold`].
pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;

type Frame = Vec<u8>;

#[derive(Default)]
struct Shared {
    holding: HashSet<i16>,
    /// Held requests in arrival order, each with its connection's writer.
    held: Vec<(mpsc::UnboundedSender<Timed>, Frame)>,
    /// The broker's answers to requests that were held, with the API key
    /// and version of their request (to decode them).
    answers: Vec<HeldAnswer>,
    /// Every connection's control, by connection number; pruned when its
    /// tasks are gone.
    conns: HashMap<u64, watch::Sender<Conn>>,
}

/// A frame and when the proxy read it (latency counts from there).
type Timed = (Instant, Frame);

/// The faults every connection obeys, new ones included.
#[derive(Clone, Debug, Default)]
struct Faults {
    /// Added to each frame towards the broker, and towards the client.
    latency: [Duration; 2],
    /// Bytes a second per direction per connection; None is unlimited.
    bandwidth: Option<u64>,
    black_hole: bool,
}

/// What one connection obeys on its own.
#[derive(Clone, Copy, Debug, Default)]
struct Conn {
    kill: Option<Kill>,
    /// Directions that forward nothing more (half-open).
    stalled: [bool; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    /// A FIN: an orderly close.
    Close,
    /// A RST: linger 0, then close.
    Reset,
}

/// A direction through the proxy, for [`FaultProxy::half_open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client → broker: requests.
    ToBroker = 0,
    /// Broker → client: responses.
    ToClient = 1,
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
    faults: watch::Sender<Faults>,
    accept: tokio::task::JoinHandle<()>,
}

async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> Option<Frame> {
    let n = r.read_i32().await.ok()?;
    let mut buf = vec![0u8; n.max(0) as usize + 4];
    buf[..4].copy_from_slice(&n.to_be_bytes());
    r.read_exact(&mut buf[4..]).await.ok()?;
    Some(buf)
}

impl FaultProxy {
    /// A proxy on a port of its own in front of the broker at `upstream`,
    /// forwarding everything.
    pub async fn start(upstream: &str) -> Self {
        Self::listen("127.0.0.1:0", upstream).await
    }

    /// A proxy on `addr` (a bed's `CLUSTER_<i>_PROXY_<k>`, the port the
    /// broker advertises) in front of `upstream`
    /// (`CLUSTER_<i>_PROXY_<k>_UPSTREAM`).
    pub async fn listen(addr: &str, upstream: &str) -> Self {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind the fault proxy on {addr}: {e}"));
        let addr = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (faults, _) = watch::channel(Faults::default());
        let (up, sh, f) = (upstream.to_string(), shared.clone(), faults.clone());
        let accept = tokio::spawn(async move {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                let (ctl, conn) = watch::channel(Conn::default());
                let id = NEXT.fetch_add(1, Ordering::Relaxed);
                {
                    let mut s = sh.lock().unwrap();
                    s.conns.retain(|_, c| !c.is_closed());
                    s.conns.insert(id, ctl);
                }
                tokio::spawn(connection(
                    client,
                    up.clone(),
                    sh.clone(),
                    f.subscribe(),
                    conn,
                ));
            }
        });
        FaultProxy {
            addr,
            upstream: upstream.to_string(),
            shared,
            faults,
            accept,
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
            let _ = writer.send((Instant::now(), frame));
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

    /// Adds `to_broker` to every request and `to_client` to every response
    /// (zero for none), from now on.
    pub fn set_latency(&self, to_broker: Duration, to_client: Duration) {
        self.faults
            .send_modify(|f| f.latency = [to_broker, to_client]);
    }

    /// Caps each direction of each connection at `bytes_per_second` (None:
    /// no cap).
    pub fn set_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.faults.send_modify(|f| f.bandwidth = bytes_per_second);
    }

    /// Starts (true) or ends (false) a black hole.
    pub fn black_hole(&self, on: bool) {
        self.faults.send_modify(|f| f.black_hole = on);
    }

    /// Closes every open connection with a FIN; returns how many.
    pub fn drop_connections(&self) -> usize {
        self.kill(Kill::Close)
    }

    /// Resets every open connection (RST); returns how many.
    pub fn reset_connections(&self) -> usize {
        self.kill(Kill::Reset)
    }

    /// Makes every open connection half-open: `direction` forwards nothing
    /// more, both sockets stay open. Returns how many.
    pub fn half_open(&self, direction: Direction) -> usize {
        self.each_conn(|c| c.stalled[direction as usize] = true)
    }

    /// Ends every fault: no latency, cap or black hole, and the half-open
    /// connections reset (their peer is gone for good). Held requests stay
    /// held.
    pub fn heal(&self) {
        self.faults.send_replace(Faults::default());
        let sh = self.shared.lock().unwrap();
        for c in sh.conns.values() {
            c.send_if_modified(|c| {
                let half_open = c.stalled.iter().any(|s| *s);
                if half_open {
                    c.kill = Some(Kill::Reset);
                }
                half_open
            });
        }
    }

    /// Connections open through the proxy now.
    pub fn connections(&self) -> usize {
        let mut sh = self.shared.lock().unwrap();
        sh.conns.retain(|_, c| !c.is_closed());
        sh.conns.len()
    }

    fn kill(&self, kill: Kill) -> usize {
        self.each_conn(|c| c.kill = Some(kill))
    }

    fn each_conn(&self, f: impl Fn(&mut Conn)) -> usize {
        let mut sh = self.shared.lock().unwrap();
        sh.conns.retain(|_, c| !c.is_closed());
        for c in sh.conns.values() {
            c.send_modify(&f);
        }
        sh.conns.len()
    }
}

impl Drop for FaultProxy {
    /// Frees the port and resets what is still open: a proxy outliving its
    /// test would keep forwarding to a bed that is going away.
    fn drop(&mut self) {
        self.accept.abort();
        self.kill(Kill::Reset);
    }
}

/// Resolves once the connection is told to die, with how.
async fn killed(conn: &mut watch::Receiver<Conn>) -> Kill {
    loop {
        if let Some(k) = conn.borrow_and_update().kill {
            return k;
        }
        if conn.changed().await.is_err() {
            // The proxy is gone.
            return Kill::Reset;
        }
    }
}

/// Waits until `direction` may forward; the faults in force then, or None
/// once the connection is killed.
async fn gate(
    faults: &mut watch::Receiver<Faults>,
    conn: &mut watch::Receiver<Conn>,
    direction: usize,
) -> Option<Faults> {
    loop {
        let c = *conn.borrow_and_update();
        if c.kill.is_some() {
            return None;
        }
        let f = faults.borrow_and_update().clone();
        if !f.black_hole && !c.stalled[direction] {
            return Some(f);
        }
        tokio::select! {
            r = faults.changed() => if r.is_err() { return None },
            r = conn.changed() => if r.is_err() { return None },
        }
    }
}

/// Forwards frames from `rx` to `w` under the faults of `direction`; ends
/// when `rx` ends or the connection is killed (returning the kill).
async fn forward(
    mut rx: mpsc::UnboundedReceiver<Timed>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Faults>,
    mut conn: watch::Receiver<Conn>,
    direction: usize,
) -> Option<Kill> {
    let mut writable = true;
    loop {
        let mut kill_watch = conn.clone();
        let next = tokio::select! {
            k = killed(&mut kill_watch) => return Some(k),
            next = rx.recv() => next,
        };
        // The sending side is gone: nothing more to forward.
        let (read_at, frame) = next?;
        let mut kill_watch = conn.clone();
        let forwarded = async {
            let f = gate(&mut faults, &mut conn, direction).await?;
            tokio::time::sleep_until(read_at + f.latency[direction]).await;
            if writable && w.write_all(&frame).await.is_err() {
                // The peer is gone; keep draining so the other side is
                // never blocked (late answers to held requests still count).
                writable = false;
            }
            if let Some(rate) = f.bandwidth.filter(|r| *r > 0) {
                let secs = frame.len() as f64 / rate as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
            Some(())
        };
        tokio::select! {
            k = killed(&mut kill_watch) => return Some(k),
            done = forwarded => if done.is_none() {
                return Some(killed(&mut kill_watch).await);
            },
        }
    }
}

async fn connection(
    client: TcpStream,
    upstream: String,
    shared: Arc<Mutex<Shared>>,
    faults: watch::Receiver<Faults>,
    conn: watch::Receiver<Conn>,
) {
    // A black hole hangs a new connection before it reaches the broker too.
    {
        let (mut f, mut c) = (faults.clone(), conn.clone());
        if gate(&mut f, &mut c, 0).await.is_none() {
            linger_zero(&client);
            return;
        }
    }
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (tx, rx) = mpsc::unbounded_channel::<Timed>();
    let (back_tx, back_rx) = mpsc::unbounded_channel::<Timed>();
    // Correlation id → (API key, version) of this connection's held requests.
    let held_ids: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    // Towards the broker. The writer lives as long as anyone (the client,
    // or a held request) can still send, then a while longer: a broker that
    // sees the connection close may drop requests it has not read yet.
    let (f, c) = (faults.clone(), conn.clone());
    tokio::spawn(async move {
        if forward(rx, &mut sw, f, c, Direction::ToBroker as usize)
            .await
            .is_none()
        {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    // Towards the client: answers go back while the client listens; after
    // that they are read and dropped, so the broker is never blocked
    // writing them. A kill resets or closes the client's socket.
    let (f, c) = (faults.clone(), conn.clone());
    let client_writer = tokio::spawn(async move {
        let kill = forward(back_rx, &mut cw, f, c, Direction::ToClient as usize).await;
        if kill == Some(Kill::Reset) {
            linger_zero(cw.as_ref());
        }
        kill
    });
    let (ids, answers) = (held_ids.clone(), shared.clone());
    tokio::spawn(async move {
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
            let _ = back_tx.send((Instant::now(), f));
        }
    });
    let mut kill_watch = conn.clone();
    let reading = async {
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
            } else if tx.send((Instant::now(), f)).is_err() {
                return;
            }
        }
    };
    let kill = tokio::select! {
        k = killed(&mut kill_watch) => Some(k),
        () = reading => None,
    };
    if kill == Some(Kill::Reset) {
        linger_zero(cr.as_ref());
    }
    drop(tx);
    if kill.is_some() {
        // The socket closes (FIN, or RST under linger 0) once both halves
        // are dropped: the writer's half goes with its task.
        let _ = client_writer.await;
    }
    drop(cr);
}

/// Makes the socket's close a RST. Tokio deprecates `set_linger` because a
/// non-zero linger blocks the thread on drop; a zero linger never blocks —
/// the kernel discards the unsent data and resets at once.
#[allow(deprecated)]
fn linger_zero(s: &TcpStream) {
    let _ = s.set_linger(Some(Duration::ZERO));
}

/// A small seeded generator (xorshift64*) for fault schedules: the seed is
/// printed when made, and `KMIRROR_FAULT_SEED=<seed>` replays a run.
#[derive(Clone, Debug)]
pub struct FaultRng {
    pub seed: u64,
    state: u64,
}

impl FaultRng {
    /// A generator from `seed` (0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Self {
        FaultRng {
            seed,
            state: seed.max(1),
        }
    }

    /// The seed in `KMIRROR_FAULT_SEED`, else one from the clock; printed
    /// with `what`, so a failing run names the seed that replays it.
    pub fn from_env(what: &str) -> Self {
        let seed = match std::env::var("KMIRROR_FAULT_SEED") {
            Ok(s) => s
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("KMIRROR_FAULT_SEED={s:?} is not a u64")),
            Err(_) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
        };
        println!("{what}: fault seed {seed} (replay with KMIRROR_FAULT_SEED={seed})");
        Self::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A duration uniformly in `[lo, hi)` (ms resolution).
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo_ms, hi_ms) = (lo.as_millis() as u64, hi.as_millis() as u64);
        if hi_ms <= lo_ms {
            return lo;
        }
        Duration::from_millis(lo_ms + self.next_u64() % (hi_ms - lo_ms))
    }
}
