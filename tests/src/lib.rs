//! Test-bed support for kmirror's end-to-end tests.
//!
//! Every test that claims Kafka behaviour runs against real Apache Kafka: a
//! source and a destination KRaft cluster on loopback, started by
//! `scripts/kafka`. Starting JVMs is the slow part, so a test binary starts
//! its pair once ([`bed`]) and every test in it gets unique topic names
//! ([`unique`]). When `scripts/test` has already started a pair it exports
//! `KMIRROR_BED_ENV`, and the binaries share that pair instead.
//!
//! No orphan JVMs: a bed this process started is stopped by the watcher
//! `scripts/kafka up --owner-pid` leaves behind, within half a second of the
//! process ending, however it ends (normal exit, panic, SIGKILL).

pub mod fuzz;
pub mod mirror;
pub mod proxy;
pub mod wire;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A running pair of clusters: what a test needs to reach them.
#[derive(Debug)]
pub struct Bed {
    /// Bootstrap address of the source cluster (`127.0.0.1:port`).
    pub source: String,
    /// Bootstrap address of the destination cluster.
    pub destination: String,
    /// The Kafka version the bed runs, for test logs.
    pub kafka_version: String,
}

static BED: OnceLock<Bed> = OnceLock::new();

/// The repository root, found from this crate's manifest directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The `scripts/kafka` test-bed script.
pub fn kafka_script() -> PathBuf {
    repo_root().join("scripts").join("kafka")
}

/// The shared source/destination pair for this test binary.
///
/// Panics with the script's own error when the bed cannot start: a test
/// against real Kafka must fail loudly, never skip silently.
pub fn bed() -> &'static Bed {
    BED.get_or_init(|| {
        if let Ok(env_file) = std::env::var("KMIRROR_BED_ENV") {
            let env = std::fs::read_to_string(&env_file)
                .unwrap_or_else(|e| panic!("KMIRROR_BED_ENV={env_file}: {e}"));
            return bed_from_env(&env)
                .unwrap_or_else(|| panic!("{env_file} lacks CLUSTER_1/CLUSTER_2"));
        }
        let dir = std::env::temp_dir().join(format!("kmirror-bed-{}", std::process::id()));
        let env = start_clusters(2, &dir);
        bed_from_env(&env).expect("scripts/kafka up printed both clusters")
    })
}

fn bed_from_env(env: &str) -> Option<Bed> {
    let get = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('=').map(str::to_string))
    };
    Some(Bed {
        source: get("CLUSTER_1")?,
        destination: get("CLUSTER_2")?,
        kafka_version: get("KAFKA_VERSION").unwrap_or_else(|| "unknown".into()),
    })
}

/// A source and destination pair of one test's own, for tests that stall,
/// stop or restart a broker: the shared [`bed`] must keep answering every
/// other test meanwhile. Stopped when dropped (and by the `--owner-pid`
/// watcher should the process die first).
pub struct PrivateBed {
    /// Bootstrap address of the source: every source broker, comma-separated.
    pub source: String,
    pub destination: String,
    /// Each source broker's own address, broker 1 first.
    pub source_brokers: Vec<String>,
    /// Each destination broker's own address, broker 1 first.
    pub destination_brokers: Vec<String>,
    dir: PathBuf,
}

/// What [`PrivateBed::source_broker`] does to one source broker, through
/// `scripts/kafka broker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerOp {
    /// SIGTERM: a controlled shutdown (its partitions move or lose their
    /// ISR membership first); waits for the exit.
    Stop,
    /// SIGKILL: the machine is gone; waits for the exit.
    Kill,
    /// Starts it again on its own data and port; waits until it answers.
    Start,
    /// SIGSTOP: connections stay open and nothing answers, as with a
    /// stalled machine or a network black hole.
    Pause,
    /// SIGCONT.
    Resume,
}

impl PrivateBed {
    /// A single-broker source and a single-broker destination.
    pub fn start() -> Self {
        Self::with_source_brokers(1)
    }

    /// A source of `brokers` brokers (a dedicated KRaft controller plus
    /// brokers 1..=`brokers`, replication factors `brokers`, min ISR 1,
    /// unclean leader election off) and a single-broker destination.
    pub fn with_source_brokers(brokers: usize) -> Self {
        Self::with_brokers(brokers, 1)
    }

    /// A source of `source` brokers and a destination of `destination`
    /// brokers; a cluster of more than one broker has a dedicated KRaft
    /// controller plus brokers 1..=n, replication factors n, min ISR 1 and
    /// unclean leader election off (`scripts/kafka up --brokers`).
    pub fn with_brokers(source: usize, destination: usize) -> Self {
        let dir = std::env::temp_dir().join(unique("kmirror-private-bed"));
        let counts = format!("{source},{destination}");
        let env = start_clusters_with(2, &dir, &["--brokers", &counts]);
        let bed = bed_from_env(&env).expect("scripts/kafka up printed both clusters");
        let get = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('=').map(str::to_string))
        };
        let brokers = |cluster: usize, n: usize, all: &str| -> Vec<String> {
            if n == 1 {
                return vec![all.to_owned()];
            }
            (1..=n)
                .map(|j| get(&format!("CLUSTER_{cluster}_BROKER_{j}")).expect("a line per broker"))
                .collect()
        };
        PrivateBed {
            source_brokers: brokers(1, source, &bed.source),
            destination_brokers: brokers(2, destination, &bed.destination),
            source: bed.source,
            destination: bed.destination,
            dir,
        }
    }

    /// Applies `op` to source broker `broker` (1-based, the node id of a
    /// multi-broker source).
    pub fn source_broker(&self, broker: usize, op: BrokerOp) {
        self.broker(1, broker, op);
    }

    /// Applies `op` to destination broker `broker` (1-based, the node id of
    /// a multi-broker destination).
    pub fn destination_broker(&self, broker: usize, op: BrokerOp) {
        self.broker(2, broker, op);
    }

    fn broker(&self, cluster: usize, broker: usize, op: BrokerOp) {
        let op = match op {
            BrokerOp::Stop => "stop",
            BrokerOp::Kill => "kill",
            BrokerOp::Start => "start",
            BrokerOp::Pause => "pause",
            BrokerOp::Resume => "resume",
        };
        let (cluster, broker) = (cluster.to_string(), broker.to_string());
        let dir = self.dir.as_os_str();
        run_kafka_script(&[
            "broker".as_ref(),
            op.as_ref(),
            "--cluster".as_ref(),
            cluster.as_ref(),
            "--broker".as_ref(),
            broker.as_ref(),
            "--dir".as_ref(),
            dir,
        ]);
    }

    /// Freezes the source broker (SIGSTOP): connections stay open and
    /// nothing answers, as with a stalled machine or a network black hole.
    pub fn stall_source(&self) {
        self.source_broker(1, BrokerOp::Pause);
    }

    /// Thaws the source broker (SIGCONT).
    pub fn resume_source(&self) {
        self.source_broker(1, BrokerOp::Resume);
    }
}

impl Drop for PrivateBed {
    fn drop(&mut self) {
        // `down` thaws paused brokers before stopping them.
        stop_clusters(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A source and destination pair of one test binary's own, started with
/// `scripts/kafka up` flags (`--authorizer`, `--security`) and stopped when
/// dropped (and by the `--owner-pid` watcher should the process die first).
pub struct OwnPair {
    /// `CLUSTER_1`, the source's PLAINTEXT listener.
    pub source: String,
    /// `CLUSTER_2`.
    pub destination: String,
    env: String,
    dir: PathBuf,
}

impl OwnPair {
    pub fn start(name: &str, flags: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(unique(name));
        let env = start_clusters_with(2, &dir, flags);
        let mut pair = OwnPair {
            source: String::new(),
            destination: String::new(),
            env,
            dir,
        };
        pair.source = pair.get("CLUSTER_1");
        pair.destination = pair.get("CLUSTER_2");
        pair
    }

    /// A value `scripts/kafka up` printed (`CLUSTER_1_SASL`, `SCRAM_USER`, …).
    pub fn get(&self, key: &str) -> String {
        self.env
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
            .unwrap_or_else(|| panic!("no {key} in {}", self.env))
    }
}

impl Drop for OwnPair {
    fn drop(&mut self) {
        stop_clusters(&self.dir);
    }
}

/// A source and destination pair of a test binary's own whose brokers each
/// advertise `slots` proxied listeners (`scripts/kafka up --proxied`): a
/// test takes a [`ProxySlot`] and binds its [`proxy::FaultProxy`]s there
/// ([`proxy::FaultProxy::listen`]), so any process that bootstraps at the
/// slot — the daemon included — stays behind that test's proxies, while
/// `source` and `destination` stay direct for Kafka's Java tools. Stopped
/// when dropped (and by the `--owner-pid` watcher).
pub struct ProxiedBed {
    /// The source's direct listener (`CLUSTER_1`).
    pub source: String,
    /// The destination's direct listener (`CLUSTER_2`).
    pub destination: String,
    pub kafka_version: String,
    slots: std::sync::Mutex<Vec<ProxySlot>>,
    dir: PathBuf,
}

/// Where one test's proxies listen and forward to, on both clusters.
#[derive(Clone, Debug)]
pub struct ProxySlot {
    pub source: ProxyAddr,
    pub destination: ProxyAddr,
}

/// One proxied listener: the advertised address clients use (the proxy
/// binds it) and the broker's listener behind it.
#[derive(Clone, Debug)]
pub struct ProxyAddr {
    pub listen: String,
    pub upstream: String,
}

impl ProxiedBed {
    /// Starts the pair with `slots` proxied listeners per broker.
    pub fn start(slots: usize) -> Self {
        let dir = std::env::temp_dir().join(unique("kmirror-proxied-bed"));
        let env = start_clusters_with(2, &dir, &["--proxied", &slots.to_string()]);
        let bed = bed_from_env(&env).expect("scripts/kafka up printed both clusters");
        let get = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('=').map(str::to_string))
                .unwrap_or_else(|| panic!("scripts/kafka up printed no {k}"))
        };
        let addr = |cluster: usize, k: usize| ProxyAddr {
            listen: get(&format!("CLUSTER_{cluster}_PROXY_{k}")),
            upstream: get(&format!("CLUSTER_{cluster}_PROXY_{k}_UPSTREAM")),
        };
        let slots = (1..=slots)
            .rev()
            .map(|k| ProxySlot {
                source: addr(1, k),
                destination: addr(2, k),
            })
            .collect();
        ProxiedBed {
            source: bed.source,
            destination: bed.destination,
            kafka_version: bed.kafka_version,
            slots: std::sync::Mutex::new(slots),
            dir,
        }
    }

    /// A slot no other test of this bed uses; panics when all are taken.
    pub fn take_slot(&self) -> ProxySlot {
        self.slots
            .lock()
            .unwrap()
            .pop()
            .expect("every proxied listener of the bed is taken: start it with more slots")
    }
}

impl Drop for ProxiedBed {
    fn drop(&mut self) {
        stop_clusters(&self.dir);
    }
}

/// Starts `n` independent clusters under `dir`, stopped when this process ends.
/// Returns the env-file text (`CLUSTER_<i>=host:port` lines).
pub fn start_clusters(n: usize, dir: &Path) -> String {
    start_clusters_with(n, dir, &[])
}

/// A single-broker cluster of a test's own, started with these broker
/// settings (`scripts/kafka up --broker-config K=V`, e.g. short expiry
/// times the shared bed must not have); stopped when dropped.
pub struct OwnCluster {
    pub bootstrap: String,
    dir: PathBuf,
}

impl OwnCluster {
    pub fn start(configs: &[String]) -> Self {
        let dir = std::env::temp_dir().join(unique("kmirror-own-cluster"));
        let mut flags = Vec::new();
        for c in configs {
            flags.extend(["--broker-config", c.as_str()]);
        }
        let env = start_clusters_with(1, &dir, &flags);
        let bootstrap = env
            .lines()
            .find_map(|l| l.strip_prefix("CLUSTER_1="))
            .expect("CLUSTER_1")
            .to_owned();
        OwnCluster { bootstrap, dir }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        stop_clusters(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// [`start_clusters`] with extra `scripts/kafka up` flags (`--authorizer`,
/// `--security`).
pub fn start_clusters_with(n: usize, dir: &Path, flags: &[&str]) -> String {
    let (n, owner) = (n.to_string(), std::process::id().to_string());
    let mut args: Vec<&OsStr> = vec![
        "up".as_ref(),
        "--clusters".as_ref(),
        n.as_ref(),
        "--dir".as_ref(),
        dir.as_os_str(),
    ];
    args.extend(flags.iter().map(OsStr::new));
    args.extend(["--owner-pid".as_ref(), OsStr::new(&owner)]);
    run_kafka_script(&args)
}

/// Runs `scripts/kafka` with `args` and returns what it printed; panics
/// with its standard error unless it succeeded.
fn run_kafka_script(args: &[&OsStr]) -> String {
    let out = Command::new(kafka_script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/kafka");
    assert!(
        out.status.success(),
        "scripts/kafka {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Stops clusters started with [`start_clusters`].
pub fn stop_clusters(dir: &Path) {
    let _ = Command::new(kafka_script())
        .args(["down", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A topic (or group) name no other test in any binary of this run uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// Runs one of Kafka's own command-line tools (`kafka-topics`, …).
pub fn kafka_tool(name: &str, args: &[&str]) -> Output {
    kafka_tool_stdin(name, args, &[])
}

/// Runs a Kafka tool with `input` on its standard input.
pub fn kafka_tool_stdin(name: &str, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(kafka_script())
        .arg("tool")
        .arg(name)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn scripts/kafka tool {name}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for Kafka tool");
    let _ = writer.join();
    out
}

/// Like [`kafka_tool`], but panics with the tool's stderr unless it succeeded.
pub fn kafka_tool_ok(name: &str, args: &[&str]) -> String {
    let out = kafka_tool(name, args);
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kafka's `kafka-transactions describe-producers`: the producer state a
/// partition leader holds (id, epoch, last sequence, last timestamp).
pub fn describe_producers(bootstrap: &str, topic: &str, p: i32) -> String {
    kafka_tool_ok(
        "kafka-transactions",
        &[
            "--bootstrap-server",
            bootstrap,
            "describe-producers",
            "--topic",
            topic,
            "--partition",
            &p.to_string(),
        ],
    )
}

/// Creates a topic with Kafka's own `kafka-topics` tool.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: u32, configs: &[&str]) {
    let p = partitions.to_string();
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        &p,
        "--replication-factor",
        "1",
    ];
    for c in configs {
        args.push("--config");
        args.push(c);
    }
    kafka_tool_ok("kafka-topics", &args);
}

/// `kafka-acls --list` as `TYPE:PATTERN:name principal host OPERATION PERMISSION` lines.
pub fn acl_list(bootstrap: &str) -> std::collections::BTreeSet<String> {
    let out = kafka_tool_ok("kafka-acls", &["--bootstrap-server", bootstrap, "--list"]);
    let mut resource = String::new();
    let mut set = std::collections::BTreeSet::new();
    for line in out.lines() {
        let field = |l: &str, name: &str| -> String {
            l.split(name)
                .nth(1)
                .map(|r| r.split([',', ')']).next().unwrap_or("").to_string())
                .unwrap_or_default()
        };
        if line.contains("ResourcePattern(") {
            resource = format!(
                "{}:{}:{}",
                field(line, "resourceType="),
                field(line, "patternType="),
                field(line, "name=")
            );
        } else if line.contains("(principal=") {
            set.insert(format!(
                "{resource} {} {} {} {}",
                field(line, "principal="),
                field(line, "host="),
                field(line, "operation="),
                field(line, "permissionType=")
            ));
        }
    }
    set
}
