//! `kmirror mirror …` and `kmirror offsets …`: the verbs of the KIP's
//! `kafka-cluster-mirrors.sh`, spoken to a running daemon's admin API.
//!
//! The CLI holds no state and no Kafka connection: every decision is the
//! daemon's, so the CLI and the HTTP API can never disagree. This module
//! dispatches the parsed arguments ([`args`]) to one HTTP call each and
//! decodes the answer into the node's own view types for [`render`].

mod args;
mod render;
mod risk;
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kmirror_actors::node::NodeError;
use kmirror_actors::verify::{VerifyReport, VerifyRequest};
use kmirror_events::{join_lists, list_items};
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use args::{ClusterArgs, MirrorArgs, OffsetsArgs, VerifyArgs};

use crate::admin_auth::{AdminToken, ClientAuth};
use crate::api::{CreateBody, OperationBody};
use crate::http::{encode, BaseUrl};
use args::{
    AdminArg, ClusterCommand, Lock, MirrorCommand, OffsetsCommand, Operation, Output, Topics,
};

/// Prints the outcome and picks the exit code; the one place CLI errors
/// reach the terminal, as `CODE: message` with the KIP error name first.
fn finish(result: Result<String, NodeError>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

pub fn run_mirror(args: MirrorArgs) -> ExitCode {
    finish(mirror(args))
}

pub fn run_offsets(args: OffsetsArgs) -> ExitCode {
    finish(offsets(args))
}

pub fn run_cluster(args: ClusterArgs) -> ExitCode {
    finish(cluster(args))
}

/// `kmirror verify`'s exit code when the copy differs: not 2, which clap's
/// usage errors already take, so a script can tell "differs" from "wrong
/// flags" (and from 1, could not verify).
pub const VERIFY_DIFFERS: u8 = 3;

/// Exit 0 when equal, [`VERIFY_DIFFERS`] when a record differs, 1 when
/// the verify could not be done (or a partition could not be read).
pub fn run_verify(args: VerifyArgs) -> ExitCode {
    match verify(args) {
        Ok((text, report)) => {
            print!("{text}");
            if report.differences > 0 {
                ExitCode::from(VERIFY_DIFFERS)
            } else if report.equal {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => finish(Err(e)),
    }
}

fn verify(args: VerifyArgs) -> Result<(String, VerifyReport), NodeError> {
    let client = Client::new(&args.admin)?;
    let client = Client {
        base: client
            .base
            .with_read_timeout(Duration::from_millis(args.timeout_ms) + Duration::from_secs(60)),
    };
    let request = VerifyRequest {
        topics: clean(&args.topics),
        through: args.through,
        sample: args.sample,
        seed: args.seed,
        timeout_ms: Some(args.timeout_ms),
    };
    let path = format!("/mirrors/{}/verify", encode(&args.mirror));
    let answer = client.call("POST", &path, Some(to_json(&request)))?;
    let report: VerifyReport = serde_json::from_value(answer.clone()).map_err(|e| {
        NodeError::new(
            "UNKNOWN_SERVER_ERROR",
            format!("unexpected answer from the daemon: {e}"),
        )
    })?;
    let text = if args.output.json {
        render::pretty(&answer)
    } else {
        render::verify_text(&report)
    };
    Ok((text, report))
}

struct Client {
    base: BaseUrl,
}

impl Client {
    fn new(admin: &AdminArg) -> Result<Self, NodeError> {
        let base = BaseUrl::parse(&admin.admin)
            .map_err(|m| NodeError::new("INVALID_REQUEST", format!("--admin {m}")))?;
        let token = std::env::var("KMIRROR_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .map(|t| AdminToken::new(&t))
            .transpose()
            .map_err(|m| NodeError::new("INVALID_REQUEST", format!("KMIRROR_ADMIN_TOKEN {m}")))?;
        let tls = admin
            .admin_ca
            .as_deref()
            .map(crate::admin_auth::client_config)
            .transpose()
            .map_err(|m| NodeError::new("INVALID_REQUEST", format!("--admin-ca {m}")))?;
        Ok(Client {
            base: base.with_auth(ClientAuth { token, tls }),
        })
    }

    /// One call; a non-2xx answer becomes its `{"error", "message"}`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, NodeError> {
        let body = body.map(|b| b.to_string().into_bytes());
        let resp = self
            .base
            .request(method, path, body.as_deref())
            .map_err(|e| NodeError::new(e.code(), e.message))?;
        if (200..300).contains(&resp.status) {
            return serde_json::from_slice(&resp.body).map_err(|_| {
                NodeError::new(
                    "UNKNOWN_SERVER_ERROR",
                    "the daemon answered something that is not JSON",
                )
            });
        }
        Err(serde_json::from_slice(&resp.body).unwrap_or_else(|_| {
            NodeError::new(
                "UNKNOWN_SERVER_ERROR",
                format!(
                    "HTTP {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                ),
            )
        }))
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("request bodies serialise")
}

/// The daemon's answer as the CLI prints it: pretty JSON with `--json`,
/// else decoded into the node's view type `T` and rendered by `text`.
fn show<T: DeserializeOwned>(
    answer: Value,
    output: &Output,
    text: impl FnOnce(T) -> String,
) -> Result<String, NodeError> {
    if output.json {
        return Ok(render::pretty(&answer));
    }
    Ok(text(decode(answer)?))
}

/// The daemon's answer as the node's own view type.
fn decode<T: DeserializeOwned>(answer: Value) -> Result<T, NodeError> {
    serde_json::from_value(answer).map_err(|e| {
        NodeError::new(
            "UNKNOWN_SERVER_ERROR",
            format!("unexpected answer from the daemon: {e}"),
        )
    })
}

/// A list flag's items, as the daemon will read them.
fn clean(list: &[String]) -> Vec<String> {
    list_items(list).into_iter().map(str::to_owned).collect()
}

fn mirror(args: MirrorArgs) -> Result<String, NodeError> {
    let client = Client::new(&args.admin)?;
    match args.command {
        MirrorCommand::Create {
            mirror,
            mirror_config,
            topics,
            exclude,
            output,
        } => {
            let properties = mirror_properties(&mirror_config, &clean(&topics), &clean(&exclude))?;
            let body = to_json(&CreateBody {
                name: mirror,
                properties,
            });
            let answer = client.call("POST", "/mirrors", Some(body))?;
            show(answer, &output, |l| render::created(&l))
        }
        MirrorCommand::List { output } => {
            let answer = client.call("GET", "/mirrors", None)?;
            show(answer, &output, |l: Vec<_>| render::list_table(&l))
        }
        MirrorCommand::Describe {
            mirror,
            failed,
            watch,
            interval,
            output,
        } => {
            let path = match &mirror {
                Some(m) => format!("/mirrors/{}/partitions", encode(m)),
                None => "/partitions".to_owned(),
            };
            let path = if failed {
                format!("{path}?failed=true")
            } else {
                path
            };
            if watch {
                let fetch = || {
                    let answer = client.call("GET", &path, None)?;
                    decode(answer)
                };
                return watch::run(fetch, Duration::from_secs_f64(interval));
            }
            let answer = client.call("GET", &path, None)?;
            show(answer, &output, |p: Vec<_>| {
                render::describe_table(&p, failed)
            })
        }
        MirrorCommand::Start {
            op,
            exclude,
            failback,
            dry_run,
        } => operate(
            &client,
            "start",
            op,
            OperationBody {
                exclude: clean(&exclude),
                failback,
                dry_run,
                ..OperationBody::default()
            },
        ),
        MirrorCommand::Stop {
            op,
            dry_run,
            fence_source,
            timeout,
            quiet_ms,
        } => {
            if timeout == 0 {
                return Err(NodeError::new(
                    "INVALID_REQUEST",
                    "--timeout: must be at least 1 second",
                ));
            }
            // Fencing and draining, then stopping: each may take `timeout`.
            let client = Client {
                base: client
                    .base
                    .with_read_timeout(Duration::from_secs(2 * timeout + 60)),
            };
            operate(
                &client,
                "stop",
                op,
                OperationBody {
                    dry_run,
                    fence_source,
                    timeout_ms: Some(timeout * 1000),
                    quiet_ms: fence_source.then_some(quiet_ms),
                    ..OperationBody::default()
                },
            )
        }
        MirrorCommand::Pause(op) => operate(&client, "pause", op, OperationBody::default()),
        MirrorCommand::Resume(op) => operate(&client, "resume", op, OperationBody::default()),
        MirrorCommand::Unfence {
            mirror,
            topics,
            output,
        } => operate(
            &client,
            "unfence",
            unlocked(mirror, topics, output),
            OperationBody::default(),
        ),
        MirrorCommand::Recover {
            mirror,
            topics,
            output,
        } => operate(
            &client,
            "recover",
            unlocked(mirror, topics, output),
            OperationBody::default(),
        ),
        MirrorCommand::Delete {
            mirror,
            lock,
            output,
        } => {
            let mut path = format!("/mirrors/{}", encode(&mirror));
            if let Some(n) = lock.state_validation_offset {
                path.push_str(&format!("?state_validation_offset={n}"));
            }
            let answer = client.call("DELETE", &path, None)?;
            show(answer, &output, |_: Value| render::deleted(&mirror))
        }
    }
}

/// An operation that takes no state validation offset.
fn unlocked(mirror: String, topics: Topics, output: Output) -> Operation {
    Operation {
        mirror,
        topics,
        lock: Lock {
            state_validation_offset: None,
        },
        output,
    }
}

/// One operation on topics; `body` carries the verb's own fields, the
/// topics and the lock come from `op`.
fn operate(
    client: &Client,
    verb: &str,
    op: Operation,
    body: OperationBody,
) -> Result<String, NodeError> {
    let body = to_json(&OperationBody {
        topics: clean(&op.topics.topics),
        state_validation_offset: op.lock.state_validation_offset,
        ..body
    });
    let path = format!("/mirrors/{}/{verb}", encode(&op.mirror));
    let answer = client.call("POST", &path, Some(body))?;
    match verb {
        "stop" => show(answer, &op.output, |r| render::stop_text(&op.mirror, &r)),
        "unfence" => show(answer, &op.output, |r| render::unfence_text(&op.mirror, &r)),
        _ => show(answer, &op.output, |r| {
            render::report_text(verb, &op.mirror, &r)
        }),
    }
}

fn cluster(args: ClusterArgs) -> Result<String, NodeError> {
    let client = Client::new(&args.admin)?;
    let ClusterCommand::Status { output } = args.command;
    let answer = client.call("GET", "/cluster", None)?;
    show(answer, &output, |s| render::cluster_status(&s))
}

fn offsets(args: OffsetsArgs) -> Result<String, NodeError> {
    let client = Client::new(&args.admin)?;
    let OffsetsCommand::Translate {
        mirror,
        topic,
        partition,
        offset,
        output,
    } = args.command;
    let path = format!(
        "/offsets/translate?mirror={}&topic={}&partition={partition}&offset={offset}",
        encode(&mirror),
        encode(&topic)
    );
    let answer = client.call("GET", &path, None)?;
    show(answer, &output, |t| render::translation_table(&t))
}

/// The mirror's properties: the file, with `--topics` and `--exclude`
/// appended to its include / exclude lists.
fn mirror_properties(
    file: &PathBuf,
    topics: &[String],
    exclude: &[String],
) -> Result<BTreeMap<String, String>, NodeError> {
    let bad = |m: String| {
        NodeError::new(
            "INVALID_CONFIG",
            format!("--mirror-config {}: {m}", file.display()),
        )
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let mut props = kmirror_actors::props::parse(&text).map_err(bad)?;
    append_list(&mut props, "mirror.topics.include", topics);
    append_list(&mut props, "mirror.topics.exclude", exclude);
    Ok(props)
}

fn append_list(props: &mut BTreeMap<String, String>, key: &str, extra: &[String]) {
    if !extra.is_empty() {
        let joined = join_lists(props.get(key).map_or("", String::as_str), extra);
        props.insert(key.to_owned(), joined);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_exclude_add_to_the_properties_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("source.properties");
        std::fs::write(
            &file,
            "bootstrap.servers=127.0.0.1:9092\nmirror.topics.include=orders-.*\n",
        )
        .unwrap();
        let props =
            mirror_properties(&file, &["payments".into()], &["orders-tmp.*".into()]).unwrap();
        assert_eq!(props["bootstrap.servers"], "127.0.0.1:9092");
        assert_eq!(props["mirror.topics.include"], "orders-.*,payments");
        assert_eq!(props["mirror.topics.exclude"], "orders-tmp.*");

        let missing = mirror_properties(&dir.path().join("nope"), &[], &[]).unwrap_err();
        assert_eq!(missing.code, "INVALID_CONFIG");
        assert!(
            missing.message.contains("--mirror-config"),
            "{}",
            missing.message
        );
    }

    #[test]
    fn errors_from_the_daemon_keep_their_kip_name() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).unwrap();
            let body = r#"{"error":"MIRROR_TOPIC_NOT_PAUSED","message":"orders is MIRRORING"}"#;
            write!(
                s,
                "HTTP/1.1 409 Conflict\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        });
        let client = Client::new(&AdminArg {
            admin_ca: None,
            admin: format!("http://127.0.0.1:{port}"),
        })
        .unwrap();
        let e = client
            .call("POST", "/mirrors/m/resume", Some(serde_json::json!({})))
            .unwrap_err();
        server.join().unwrap();
        assert_eq!(
            e,
            NodeError::new("MIRROR_TOPIC_NOT_PAUSED", "orders is MIRRORING")
        );
    }

    #[test]
    fn an_unreachable_daemon_is_a_network_exception() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client = Client::new(&AdminArg {
            admin_ca: None,
            admin: format!("http://127.0.0.1:{port}"),
        })
        .unwrap();
        assert_eq!(
            client.call("GET", "/mirrors", None).unwrap_err().code,
            "NETWORK_EXCEPTION"
        );
    }
}
