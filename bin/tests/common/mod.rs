//! What the binary's end-to-end tests share: running `kmirror` (the CLI
//! and daemons) against the real test bed.
#![allow(dead_code)] // each test binary uses its own part

pub mod cluster;
pub mod fault_checks;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kmirror_tests::{bed, kafka_tool_stdin};

pub const KMIRROR: &str = env!("CARGO_BIN_EXE_kmirror");

pub fn kmirror(args: &[&str]) -> Output {
    Command::new(KMIRROR)
        .args(args)
        .env_remove("KMIRROR_DATA_DIR")
        .env_remove("KMIRROR_ADMIN_LISTEN")
        .env_remove("KMIRROR_ADMIN_URL")
        .env_remove("KMIRROR_DESTINATION__BOOTSTRAP_SERVERS")
        .stdin(Stdio::null())
        .output()
        .expect("run kmirror")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts a failure whose stderr starts with `CODE: ` and mentions `word`.
pub fn assert_fails(out: &Output, code: &str, word: &str) {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "expected failure, got success: {}",
        stdout(out)
    );
    assert!(
        err.starts_with(&format!("{code}: ")),
        "stderr should start with {code}: {err}"
    );
    assert!(err.contains(word), "stderr should mention `{word}`: {err}");
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A running daemon, killed if a test fails before it stops it.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
}

impl Daemon {
    /// A daemon on `dir` (its config and data dir); a second one on the
    /// same `dir` is a restart.
    pub fn start(dir: &Path) -> Daemon {
        let port = free_port();
        let text = format!(
            "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\n[destination]\nbootstrap_servers = \"{}\"\n",
            dir.join("data").display(),
            bed().destination
        );
        Daemon::start_config(dir, port, &text)
    }

    /// A daemon with the settings `text`, listening on `port`; its log
    /// lines go to `dir/daemon.log` (a pipe nobody reads would fill up and
    /// stall it).
    pub fn start_config(dir: &Path, port: u16, text: &str) -> Daemon {
        Daemon::start_config_env(dir, port, text, &[])
    }

    /// [`Daemon::start_config`] with `env` added to its environment.
    pub fn start_config_env(dir: &Path, port: u16, text: &str, env: &[(&str, &str)]) -> Daemon {
        let config = dir.join("kmirror.toml");
        std::fs::write(&config, text).unwrap();
        let log_path = dir.join("daemon.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let child = Command::new(KMIRROR)
            .args(["daemon", "--config", config.to_str().unwrap()])
            .env("KMIRROR_LOG_FORMAT", "json")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn kmirror daemon");
        let mut daemon = Daemon { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = daemon.try_http("GET", "/health", None) {
                return daemon;
            }
            if let Some(status) = daemon.child.try_wait().unwrap() {
                let err = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("daemon exited during start-up ({status}): {err}");
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not answer /health within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn admin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn try_http(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        self.try_http_with(method, path, body, &[])
    }

    /// [`Self::try_http`] with extra request headers.
    pub fn try_http_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        let body = body.unwrap_or("");
        let extra: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    }

    pub fn http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.try_http(method, path, body)
            .expect("admin API answers")
    }

    /// Runs the CLI against this daemon and asserts it succeeded.
    pub fn cli_ok(&self, args: &[&str]) -> Output {
        let out = self.cli(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out
    }

    /// Creates `mirror` from the properties file `props`, then starts it
    /// on `topics` (comma-separated): no auto-discovery, so a topic the
    /// test stops stays stopped.
    pub fn mirror_topics(&self, mirror: &str, props: &str, topics: &str) {
        self.cli_ok(&[
            "mirror",
            "create",
            "--mirror",
            mirror,
            "--mirror-config",
            props,
        ]);
        self.cli_ok(&["mirror", "start", "--mirror", mirror, "--topics", topics]);
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        let admin = self.admin();
        let mut all = args.to_vec();
        all.extend(["--admin", admin.as_str()]);
        kmirror(&all)
    }

    /// SIGTERM, then the exit status (within 30 s).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not exit within 30 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits up to `secs` for `check`, returning how long it took.
pub fn wait_secs(what: &str, secs: u64, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    start.elapsed()
}

pub fn write_properties(dir: &Path) -> String {
    let file = dir.join("source.properties");
    std::fs::write(
        &file,
        format!("# the source\nbootstrap.servers={}\n", bed().source),
    )
    .unwrap();
    file.to_str().unwrap().to_owned()
}

pub fn produce(topic: &str, from: usize, to: usize) {
    produce_to(&bed().source, topic, from, to)
}

/// `record-{from}` … `record-{to - 1}` into `topic` on `bootstrap`, with
/// Kafka's console producer.
pub fn produce_to(bootstrap: &str, topic: &str, from: usize, to: usize) {
    let input: String = (from..to).map(|i| format!("record-{i}\n")).collect();
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &["--bootstrap-server", bootstrap, "--topic", topic],
        input.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Records in `topic` on a cluster (sum of end offsets), read with Kafka's tool.
pub fn records_on(bootstrap: &str, topic: &str) -> usize {
    let out = kmirror_tests::kafka_tool_ok(
        "kafka-get-offsets",
        &["--bootstrap-server", bootstrap, "--topic", topic],
    );
    out.lines()
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<usize>().ok())
        .sum()
}

/// Kills a helper process if the test fails early.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// SIGKILL, no grace.
pub fn kill9(mut daemon: Daemon) {
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
}
