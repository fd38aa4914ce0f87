//! Issue 16's security, at the binary's edges: the admin API refuses to
//! leave loopback unguarded, asks for its bearer token on every route and
//! speaks HTTPS (the CLI through `KMIRROR_ADMIN_TOKEN` and
//! `KMIRROR_ADMIN_CA`); the daemon mirrors from a SASL/SCRAM-SHA-512 source
//! to a TLS destination (server-verified, then with a client certificate)
//! of a `scripts/kafka up --security` pair, checked with Kafka's own
//! console consumer and `kmirror verify`; and no secret — the SCRAM
//! password, the private keys, the admin token — shows up in the daemon's
//! log, `describe`, `/metrics`, the data dir or the destination's state
//! topic.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kmirror_tests::mirror::{self, consume_sorted_with};
use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique, OwnPair};
use serde_json::Value;

/// A test CA and a server certificate for 127.0.0.1 signed by it, made
/// with `openssl`: `(ca.pem, server.pem, server.key)`.
fn admin_certs(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let ext = p("ext.cnf");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let s = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let (ca_key, ca, key, csr, cert) = (
        p("ca.key"),
        p("ca.pem"),
        p("server.key"),
        p("server.csr"),
        p("server.pem"),
    );
    let steps: [Vec<String>; 3] = [
        [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([
            format!("/CN=kmirror-admin-test-ca-{name}"),
            "-addext".into(),
            "basicConstraints=critical,CA:TRUE".into(),
            "-addext".into(),
            "keyUsage=critical,keyCertSign,cRLSign".into(),
            "-keyout".into(),
            s(&ca_key),
            "-out".into(),
            s(&ca),
        ])
        .collect(),
        [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &s(&key),
            "-out",
            &s(&csr),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect(),
        [
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &s(&csr),
            "-CA",
            &s(&ca),
            "-CAkey",
            &s(&ca_key),
            "-CAcreateserial",
            "-extfile",
            &s(&ext),
            "-out",
            &s(&cert),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect(),
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
    }
    (ca, cert, key)
}

/// `kmirror ARGS` with exactly the admin environment given (nothing
/// inherited from the test's own environment).
fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(KMIRROR);
    cmd.args(args)
        .env_remove("KMIRROR_ADMIN_URL")
        .env_remove("KMIRROR_ADMIN_TOKEN")
        .env_remove("KMIRROR_ADMIN_CA")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run kmirror")
}

/// Starts `kmirror daemon --config dir/kmirror.toml` (settings `text`), its
/// log appended to `dir/daemon.log`; ready once `ready` answers true.
fn spawn_daemon(dir: &Path, port: u16, text: &str, mut ready: impl FnMut() -> bool) -> Daemon {
    let config = dir.join("kmirror.toml");
    std::fs::write(&config, text).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("daemon.log"))
        .unwrap();
    let child = Command::new(KMIRROR)
        .args(["daemon", "--config", config.to_str().unwrap()])
        .env_remove("KMIRROR_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn kmirror daemon");
    let mut daemon = Daemon { child, port };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            panic!(
                "daemon exited during start-up ({status}): {}",
                std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "daemon not ready within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    daemon
}

/// One plain-HTTP request to 127.0.0.1:`port` with an optional
/// `Authorization` header: (status, body).
fn raw(port: u16, path: &str, authorization: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn an_admin_api_off_loopback_needs_a_token_or_tls() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let daemon = |extra: &[&str]| {
        let mut args = vec![
            "daemon",
            "--data-dir",
            data.to_str().unwrap(),
            "--destination",
            "127.0.0.1:1",
        ];
        args.extend_from_slice(extra);
        cli(&args, &[])
    };
    let out = daemon(&["--admin-listen", "0.0.0.0:9650"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_fails(
        &out,
        "INVALID_CONFIG",
        "admin_listen: 0.0.0.0:9650 is not a loopback address",
    );
    assert!(stderr(&out).contains("admin_token"), "{}", stderr(&out));
    println!("refused: {}", stderr(&out).trim());

    let config = dir.path().join("kmirror.toml");
    let refused = |text: &str, key: &str| {
        std::fs::write(&config, text).unwrap();
        let out = daemon(&["--config", config.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_fails(&out, "INVALID_CONFIG", &format!("{key}: "));
        println!("refused: {}", stderr(&out).trim());
    };
    let g = garbage.display();
    refused(&format!("admin_tls_cert = \"{g}\"\n"), "admin_tls_key");
    refused(&format!("admin_tls_key = \"{g}\"\n"), "admin_tls_cert");
    refused(
        &format!("admin_tls_cert = \"{g}\"\nadmin_tls_key = \"{g}\"\n"),
        "admin_tls_cert",
    );
    refused(
        "admin_listen = \"0.0.0.0:9650\"\nadmin_token = \"two words\"\n",
        "admin_token",
    );
    assert!(!data.exists(), "nothing was started");
}

#[test]
fn the_admin_token_guards_every_route_and_the_cli_sends_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let token = format!("tok-{}", unique("admin"));
    let text = format!(
        "data_dir = \"{}\"\nadmin_listen = \"0.0.0.0:{port}\"\nadmin_token = \"{token}\"\n[destination]\nbootstrap_servers = \"{}\"\n",
        dir.path().join("data").display(),
        bed().destination
    );
    let admin = format!("http://127.0.0.1:{port}");
    let with_token = [("KMIRROR_ADMIN_TOKEN", token.as_str())];
    let daemon = spawn_daemon(dir.path(), port, &text, || {
        cli(&["mirror", "list", "--admin", &admin], &with_token)
            .status
            .success()
    });

    for path in [
        "/mirrors",
        "/metrics",
        "/health",
        "/ui",
        "/partitions",
        "/nowhere",
    ] {
        for auth in [None, Some("Bearer wrong"), Some(&*format!("Basic {token}"))] {
            let (status, body) = raw(port, path, auth);
            assert_eq!(status, 401, "{path} {auth:?}: {body}");
            let error: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(error["error"], "AUTHENTICATION_FAILED", "{body}");
        }
    }
    let (status, metrics) = raw(port, "/metrics", Some(&format!("Bearer {token}")));
    assert_eq!(status, 200);
    assert!(metrics.contains("kmirror_mirrors"), "{metrics}");
    assert!(!metrics.contains(&token));

    let out = cli(&["mirror", "list", "--admin", &admin], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_fails(&out, "AUTHENTICATION_FAILED", "KMIRROR_ADMIN_TOKEN");
    let out = cli(
        &["mirror", "list", "--admin", &admin],
        &[("KMIRROR_ADMIN_TOKEN", "wrong")],
    );
    assert_fails(&out, "AUTHENTICATION_FAILED", "admin token");
    let out = cli(
        &["mirror", "list", "--json", "--admin", &admin],
        &with_token,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");
    println!("401 without or with a wrong token on 6 routes; 200 with it (CLI and /metrics)");

    assert!(daemon.terminate().success());
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(log.contains("kmirror daemon ready"), "{log}");
    assert!(!log.contains(&token), "the token is in the daemon's log");
}

#[test]
fn the_admin_api_speaks_https_to_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = admin_certs(dir.path(), "admin");
    let (other_ca, _, _) = admin_certs(dir.path(), "other");
    let port = free_port();
    let text = format!(
        "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nadmin_tls_cert = \"{}\"\nadmin_tls_key = \"{}\"\n[destination]\nbootstrap_servers = \"{}\"\n",
        dir.path().join("data").display(),
        cert.display(),
        key.display(),
        bed().destination
    );
    let https = format!("https://127.0.0.1:{port}");
    let ca = ca.to_str().unwrap();
    let daemon = spawn_daemon(dir.path(), port, &text, || {
        cli(
            &["mirror", "list", "--admin", &https],
            &[("KMIRROR_ADMIN_CA", ca)],
        )
        .status
        .success()
    });
    let out = cli(
        &["mirror", "list", "--admin", &https, "--admin-ca", ca],
        &[],
    );
    assert!(out.status.success(), "--admin-ca: {}", stderr(&out));

    let out = cli(&["mirror", "list", "--admin", &https], &[]);
    assert_fails(&out, "NETWORK_EXCEPTION", "KMIRROR_ADMIN_CA");
    let out = cli(
        &["mirror", "list", "--admin", &https],
        &[("KMIRROR_ADMIN_CA", other_ca.to_str().unwrap())],
    );
    assert_fails(&out, "NETWORK_EXCEPTION", "certificate");
    println!("a certificate from another CA: {}", stderr(&out).trim());
    let out = cli(
        &[
            "mirror",
            "list",
            "--admin",
            &format!("http://127.0.0.1:{port}"),
        ],
        &[],
    );
    assert!(!out.status.success(), "plain HTTP to the HTTPS port");
    assert!(daemon.terminate().success());
}

#[test]
fn clustered_nodes_forward_to_each_other_over_https_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = admin_certs(dir.path(), "cluster");
    let token = format!("tok-{}", unique("cluster"));
    let (cluster, state_topic) = (unique("sec-cluster"), unique("__sec_state"));
    let env = [
        ("KMIRROR_ADMIN_TOKEN", token.as_str()),
        ("KMIRROR_ADMIN_CA", ca.to_str().unwrap()),
    ];
    let status = |admin: &str| -> Option<Value> {
        let out = cli(&["cluster", "status", "--json", "--admin", admin], &env);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    };
    let mut nodes = Vec::new();
    for i in 0..2 {
        let node_dir = dir.path().join(format!("node-{i}"));
        std::fs::create_dir_all(&node_dir).unwrap();
        let port = free_port();
        // No advertised_url: with TLS it defaults to https://admin_listen.
        let text = format!(
            "admin_listen = \"127.0.0.1:{port}\"\nadmin_token = \"{token}\"\nadmin_tls_cert = \"{}\"\nadmin_tls_key = \"{}\"\nadmin_tls_ca = \"{}\"\nstate_topic = \"{state_topic}\"\nstate_topic_num_partitions = 6\n[destination]\nbootstrap_servers = \"{}\"\n[cluster]\nid = \"{cluster}\"\nsession_timeout_ms = 6000\nheartbeat_interval_ms = 1000\n",
            cert.display(),
            key.display(),
            ca.display(),
            bed().destination
        );
        let admin = format!("https://127.0.0.1:{port}");
        let daemon = spawn_daemon(&node_dir, port, &text, || status(&admin).is_some());
        nodes.push((daemon, admin));
    }
    // Both members, every shard owned.
    let owners = |admin: &str| -> Vec<(String, Vec<i64>)> {
        status(admin)
            .and_then(|s| s["members"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let shards = m["shards"].as_array().cloned().unwrap_or_default();
                (
                    m["url"].as_str().unwrap_or("").to_owned(),
                    shards.iter().filter_map(|s| s.as_i64()).collect(),
                )
            })
            .collect()
    };
    wait_for("two members sharing 6 shards", || {
        let o = owners(&nodes[0].1);
        o.len() == 2 && o.iter().map(|(_, s)| s.len()).sum::<usize>() == 6
    });
    let urls: Vec<String> = owners(&nodes[0].1).into_iter().map(|(u, _)| u).collect();
    assert!(urls.iter().all(|u| u.starts_with("https://")), "{urls:?}");

    // Mirrors created through node 0 land on both nodes' shards (those of
    // node 1 forwarded), and node 1 lists them all (a fan-out to node 0).
    let props = write_properties(dir.path());
    let names: Vec<String> = (0..8).map(|i| format!("sec-m{i}")).collect();
    for name in &names {
        let out = cli(
            &[
                "mirror",
                "create",
                "--mirror",
                name,
                "--mirror-config",
                &props,
                "--admin",
                &nodes[0].1,
            ],
            &env,
        );
        assert!(out.status.success(), "create {name}: {}", stderr(&out));
    }
    let out = cli(&["mirror", "list", "--json", "--admin", &nodes[1].1], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut listed: Vec<String> = listed
        .iter()
        .map(|m| m["mirror"].as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, names);
    let owners = owners(&nodes[1].1);
    let on = |i: usize| {
        names
            .iter()
            .filter(|n| {
                let shard = kmirror_events::coordinator_partition(n, 6) as i64;
                owners
                    .iter()
                    .find(|(_, s)| s.contains(&shard))
                    .is_some_and(|(u, _)| *u == nodes[i].1)
            })
            .count()
    };
    let (here, there) = (on(0), on(1));
    assert!(
        here > 0 && there > 0,
        "mirrors on node 0: {here}, node 1: {there}"
    );
    println!("8 mirrors created through node 0 over HTTPS: {here} served there, {there} forwarded to node 1; node 1 lists all 8");
    for (daemon, _) in nodes {
        assert!(daemon.terminate().success());
    }
    for i in 0..2 {
        let log = std::fs::read_to_string(dir.path().join(format!("node-{i}/daemon.log"))).unwrap();
        assert!(!log.contains(&token), "the token is in node {i}'s log");
    }
}

/// Kafka client properties in a file of `dir`, for Kafka's tools.
fn properties(dir: &Path, name: &str, lines: &[String]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.to_str().unwrap().to_owned()
}

/// Every byte under `dir`, file by file.
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The second line of a PEM private key: base64 of the key itself.
fn key_line(pem: &Path) -> String {
    let text = std::fs::read_to_string(pem).unwrap();
    let body = text
        .split("PRIVATE KEY-----\n")
        .nth(1)
        .expect("a private key in the PEM");
    body.lines().nth(1).unwrap().to_owned()
}

#[test]
fn sasl_scram_source_to_tls_destination_with_and_without_client_certificates_leaking_nothing() {
    let pair = OwnPair::start("kmirror-sec-bed", &["--security"]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A password of this run's own, so finding it anywhere is a leak.
    let password = format!("pw-{}", unique("scram"));
    kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &pair.source,
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "kmirror",
            "--add-config",
            &format!("SCRAM-SHA-512=[iterations=4096,password={password}]"),
        ],
    );
    let token = format!("tok-{}", unique("admin"));
    let (admin_ca, admin_cert, admin_key) = admin_certs(d, "admin");
    let ca = pair.get("CLUSTER_2_CA");
    let client_pem = PathBuf::from(pair.get("CLIENT_PEM"));

    // Kafka's tools: the source over SASL/SCRAM with the new password, the
    // destination over TLS (server-verified) and mTLS.
    let source_sasl = properties(
        d,
        "source-sasl.properties",
        &[
            "security.protocol=SASL_PLAINTEXT".into(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            format!("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"kmirror\" password=\"{password}\";"),
        ],
    );
    let tls_lines = vec![
        "security.protocol=SSL".to_string(),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={ca}"),
    ];
    let dest_tls = properties(d, "dest-tls.properties", &tls_lines);
    let mut mtls_lines = tls_lines.clone();
    mtls_lines.extend([
        "ssl.keystore.type=PEM".to_string(),
        format!("ssl.keystore.location={}", client_pem.display()),
    ]);
    let dest_mtls = properties(d, "dest-mtls.properties", &mtls_lines);

    let topic = unique("secure-orders");
    create_topic(&pair.source, &topic, 2, &[]);
    // Keys, headers and nulls on both partitions, lz4 then zstd.
    mirror::produce_to(&pair.source, &topic, &mirror::lines(200, "tls"), "lz4");

    // The mirror: the source over SASL/SCRAM-SHA-512, the password by
    // reference to a file, as the README says.
    let secrets = d.join("secrets.properties");
    std::fs::write(&secrets, format!("source.password={password}\n")).unwrap();
    let mirror_props = properties(
        d,
        "mirror.properties",
        &[
            format!("bootstrap.servers={}", pair.get("CLUSTER_1_SASL")),
            "security.protocol=SASL_PLAINTEXT".into(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            "sasl.username=kmirror".into(),
            format!(
                "sasl.password=${{file:{}:source.password}}",
                secrets.display()
            ),
        ],
    );

    let port = free_port();
    let https = format!("https://127.0.0.1:{port}");
    let admin_env = [
        ("KMIRROR_ADMIN_TOKEN", token.as_str()),
        ("KMIRROR_ADMIN_CA", admin_ca.to_str().unwrap()),
    ];
    let run = |args: &[&str]| -> Output {
        let mut all = args.to_vec();
        all.extend(["--admin", &https]);
        let out = cli(&all, &admin_env);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out
    };
    let settings = |destination: &str, extra: &str| {
        format!(
            "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nadmin_token = \"{token}\"\nadmin_tls_cert = \"{}\"\nadmin_tls_key = \"{}\"\nmetadata_refresh_interval_ms = 1000\n[destination]\nbootstrap_servers = \"{destination}\"\nsecurity_protocol = \"SSL\"\nssl_truststore_location = \"{ca}\"\n{extra}",
            d.join("data").display(),
            admin_cert.display(),
            admin_key.display(),
        )
    };
    let ready = || {
        cli(&["mirror", "list", "--admin", &https], &admin_env)
            .status
            .success()
    };
    let mirrored = |records: i64| {
        let out = run(&["mirror", "describe", "--mirror", "sec", "--json"]);
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        let total: i64 = rows
            .iter()
            .map(|r| r["destination_offset"].as_i64().unwrap_or(0))
            .sum();
        rows.len() == 2
            && total == records
            && rows
                .iter()
                .all(|r| r["state"] == "MIRRORING" && r["lag"] == 0)
    };
    let same_on_both = |records: usize, dest_props: &str| {
        let source = consume_sorted_with(
            &pair.get("CLUSTER_1_SASL"),
            &topic,
            records,
            60_000,
            &["--consumer.config", &source_sasl],
        );
        let destination = consume_sorted_with(
            &pair.get(if dest_props == dest_tls {
                "CLUSTER_2_SSL"
            } else {
                "CLUSTER_2_MTLS"
            }),
            &topic,
            records,
            60_000,
            &["--consumer.config", dest_props],
        );
        assert_eq!(source.len(), records);
        assert_eq!(
            source, destination,
            "partition, offset, timestamp, key, headers and value"
        );
        let out = run(&["verify", "--mirror", "sec"]);
        println!("kmirror verify: {}", stdout(&out).trim());
    };

    // Run 1: the destination over TLS, its certificate verified.
    let started = Instant::now();
    let daemon = spawn_daemon(d, port, &settings(&pair.get("CLUSTER_2_SSL"), ""), ready);
    run(&[
        "mirror",
        "create",
        "--mirror",
        "sec",
        "--mirror-config",
        &mirror_props,
    ]);
    run(&["mirror", "start", "--mirror", "sec", "--topics", &topic]);
    wait_for("200 records mirrored over SASL → TLS", || mirrored(200));
    println!(
        "run 1 (SASL/SCRAM-SHA-512 → TLS): 200 records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    same_on_both(200, &dest_tls);
    assert!(daemon.terminate().success());

    // Run 2: the same daemon restarted against the listener that requires
    // a client certificate.
    let started = Instant::now();
    let mtls = format!("ssl_keystore_location = \"{}\"\n", client_pem.display());
    let daemon = spawn_daemon(
        d,
        port,
        &settings(&pair.get("CLUSTER_2_MTLS"), &mtls),
        ready,
    );
    mirror::produce_to(&pair.source, &topic, &mirror::lines(100, "mtls"), "zstd");
    wait_for("300 records mirrored over SASL → mTLS", || mirrored(300));
    println!(
        "run 2 (SASL/SCRAM-SHA-512 → mTLS): 100 more records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    same_on_both(300, &dest_mtls);

    // Nothing shows a secret.
    let describe_text = run(&["mirror", "describe", "--mirror", "sec"]);
    let describe_json = run(&["mirror", "describe", "--mirror", "sec", "--json"]);
    let list_json = run(&["mirror", "list", "--json"]);
    let metrics = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(&admin_ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{https}/metrics"))
        .output()
        .expect("run curl");
    assert!(metrics.status.success(), "{}", stderr(&metrics));
    assert!(contains(&metrics.stdout, "kmirror_records_mirrored_total"));
    assert!(daemon.terminate().success());
    let state_topic = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            &pair.get("CLUSTER_2_MTLS"),
            "--consumer.config",
            &dest_mtls,
            "--topic",
            "__kmirror_state",
            "--from-beginning",
            "--timeout-ms",
            "15000",
            "--property",
            "print.key=true",
        ],
    );
    assert!(
        state_topic.lines().count() > 10,
        "the state topic holds the log: {state_topic}"
    );

    let secrets = [
        ("the SCRAM password", password.clone()),
        ("the admin token", token.clone()),
        ("the client's private key", key_line(&client_pem)),
        ("the admin API's private key", key_line(&admin_key)),
    ];
    let mut places: Vec<(String, Vec<u8>)> = vec![
        ("describe".into(), describe_text.stdout),
        ("describe --json".into(), describe_json.stdout),
        ("list --json".into(), list_json.stdout),
        ("/metrics".into(), metrics.stdout),
        ("__kmirror_state".into(), state_topic.into_bytes()),
        (
            "the daemon's log".into(),
            std::fs::read(d.join("daemon.log")).unwrap(),
        ),
    ];
    let mut data = Vec::new();
    files_under(&d.join("data"), &mut data);
    let data_files = data.len();
    places.extend(data.into_iter().map(|(p, b)| (p.display().to_string(), b)));
    for (what, secret) in &secrets {
        for (place, bytes) in &places {
            assert!(!contains(bytes, secret), "{what} is in {place}");
        }
    }
    // The reference, not the password, is what the log keeps.
    assert!(
        places.iter().any(|(_, b)| contains(b, "source.password}")),
        "the mirror's config keeps its ${{file:…}} reference"
    );
    println!(
        "4 secrets absent from describe (text, JSON), list, /metrics, the daemon's log, \
         {data_files} data-dir files and {} bytes of __kmirror_state",
        places[4].1.len()
    );
}
