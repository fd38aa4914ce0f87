//! `kmirror mirror …` and `kmirror offsets …`: the verbs of the KIP's
//! `kafka-cluster-mirrors.sh`, spoken to a running daemon's admin API.
//!
//! The CLI holds no state and no Kafka connection: every decision is the
//! daemon's, so the CLI and the HTTP API can never disagree.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use kmirror_events::{join_lists, list_items};
use serde::Deserialize;
use serde_json::Value;

use crate::api::{CreateBody, OperationBody};
use crate::http::{encode, BaseUrl};

/// Where `kmirror daemon` listens by default.
pub const DEFAULT_ADMIN_URL: &str = "http://127.0.0.1:9650";

#[derive(Args)]
pub struct AdminArg {
    /// The daemon's admin API.
    #[arg(long, global = true, value_name = "URL", env = "KMIRROR_ADMIN_URL", default_value = DEFAULT_ADMIN_URL)]
    admin: String,
}

#[derive(Args)]
pub struct MirrorArgs {
    #[command(flatten)]
    admin: AdminArg,
    #[command(subcommand)]
    command: MirrorCommand,
}

#[derive(Args)]
struct Output {
    /// Print the daemon's JSON answer instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct Topics {
    /// Topic names or regexes, comma-separated.
    #[arg(long, value_delimiter = ',', required = true, value_name = "TOPICS")]
    topics: Vec<String>,
}

#[derive(Args)]
struct Lock {
    /// Refuse (INVALID_CLUSTER_MIRROR_STATES) if a topic changed state after
    /// this event-log offset (see `GET /state-offset`).
    #[arg(long, value_name = "N")]
    state_validation_offset: Option<u64>,
}

#[derive(Args)]
struct Operation {
    #[arg(long)]
    mirror: String,
    #[command(flatten)]
    topics: Topics,
    #[command(flatten)]
    lock: Lock,
    #[command(flatten)]
    output: Output,
}

#[derive(Subcommand)]
enum MirrorCommand {
    /// Create a mirror from a source-connection properties file.
    Create {
        #[arg(long)]
        mirror: String,
        /// Kafka-style properties: bootstrap.servers, security.protocol,
        /// mirror.topics.include, …
        #[arg(long, value_name = "FILE")]
        mirror_config: PathBuf,
        /// Added to mirror.topics.include.
        #[arg(long, value_delimiter = ',', value_name = "TOPICS")]
        topics: Vec<String>,
        /// Added to mirror.topics.exclude.
        #[arg(long, value_delimiter = ',', value_name = "PATTERNS")]
        exclude: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
    /// List mirrors: MIRROR TOPICS SOURCE-CLUSTER-ID SOURCE-BOOTSTRAP-SERVER.
    List {
        #[command(flatten)]
        output: Output,
    },
    /// Describe the partitions of one mirror (or all).
    Describe {
        #[arg(long)]
        mirror: Option<String>,
        /// Only FAILED partitions, with their retry count and error.
        #[arg(long)]
        failed: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Start mirroring topics (and save the patterns for auto-discovery).
    Start {
        #[command(flatten)]
        op: Operation,
        /// Patterns never to mirror, comma-separated.
        #[arg(long, value_delimiter = ',', value_name = "PATTERNS")]
        exclude: Vec<String>,
    },
    /// Stop mirroring topics (failover: the destination topics become writable).
    Stop(Operation),
    /// Pause mirroring topics.
    Pause(Operation),
    /// Resume paused topics.
    Resume(Operation),
    /// Send FAILED partitions back to their previous state, retries cleared.
    Recover {
        #[arg(long)]
        mirror: String,
        #[command(flatten)]
        topics: Topics,
        #[command(flatten)]
        output: Output,
    },
    /// Delete a mirror whose topics are all STOPPED.
    Delete {
        #[arg(long)]
        mirror: String,
        #[command(flatten)]
        lock: Lock,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Args)]
pub struct OffsetsArgs {
    #[command(flatten)]
    admin: AdminArg,
    #[command(subcommand)]
    command: OffsetsCommand,
}

#[derive(Subcommand)]
enum OffsetsCommand {
    /// The destination offset for a source offset, from the offset map.
    Translate {
        #[arg(long)]
        mirror: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        offset: i64,
        #[command(flatten)]
        output: Output,
    },
}

/// A failed command: printed as `CODE: message`, the KIP error name first.
#[derive(Debug, PartialEq, Eq)]
pub struct CliError {
    pub code: String,
    pub message: String,
}

impl CliError {
    fn new(code: &str, message: impl Into<String>) -> Self {
        CliError {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

/// Prints the outcome and picks the exit code; the one place CLI errors
/// reach the terminal.
pub fn finish(result: Result<String, CliError>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {}", e.code, e.message);
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

struct Client {
    base: BaseUrl,
}

impl Client {
    fn new(admin: &AdminArg) -> Result<Self, CliError> {
        let base = BaseUrl::parse(&admin.admin)
            .map_err(|m| CliError::new("INVALID_REQUEST", format!("--admin {m}")))?;
        Ok(Client { base })
    }

    /// One call; a non-2xx answer becomes its `{"error", "message"}`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, CliError> {
        let body = body.map(|b| b.to_string().into_bytes());
        let resp = self
            .base
            .request(method, path, body.as_deref())
            .map_err(|m| CliError::new("NETWORK_EXCEPTION", m))?;
        let json: Option<Value> = serde_json::from_slice(&resp.body).ok();
        if (200..300).contains(&resp.status) {
            return json.ok_or_else(|| {
                CliError::new(
                    "UNKNOWN_SERVER_ERROR",
                    "the daemon answered something that is not JSON",
                )
            });
        }
        let field = |k: &str| json.as_ref().and_then(|j| j[k].as_str()).map(str::to_owned);
        Err(match (field("error"), field("message")) {
            (Some(code), message) => CliError {
                code,
                message: message.unwrap_or_default(),
            },
            _ => CliError::new(
                "UNKNOWN_SERVER_ERROR",
                format!(
                    "HTTP {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                ),
            ),
        })
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("request bodies serialise")
}

fn pretty(v: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(v).expect("JSON values serialise")
    )
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, CliError> {
    serde_json::from_value(v).map_err(|e| {
        CliError::new(
            "UNKNOWN_SERVER_ERROR",
            format!("unexpected answer from the daemon: {e}"),
        )
    })
}

/// A list flag's items, as the daemon will read them.
fn clean(list: &[String]) -> Vec<String> {
    list_items(list).into_iter().map(str::to_owned).collect()
}

fn mirror(args: MirrorArgs) -> Result<String, CliError> {
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
                name: mirror.clone(),
                properties,
            });
            let answer = client.call("POST", "/mirrors", Some(body))?;
            if output.json {
                return Ok(pretty(&answer));
            }
            let listing: Listing = decode(answer)?;
            Ok(format!(
                "Created mirror {} (source cluster {}).\n",
                listing.mirror, listing.source_cluster_id
            ))
        }
        MirrorCommand::List { output } => {
            let answer = client.call("GET", "/mirrors", None)?;
            if output.json {
                return Ok(pretty(&answer));
            }
            Ok(list_table(&decode::<Vec<Listing>>(answer)?))
        }
        MirrorCommand::Describe {
            mirror,
            failed,
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
            let answer = client.call("GET", &path, None)?;
            if output.json {
                return Ok(pretty(&answer));
            }
            Ok(describe_table(&decode::<Vec<Partition>>(answer)?, failed))
        }
        MirrorCommand::Start { op, exclude } => operate(&client, "start", op, clean(&exclude)),
        MirrorCommand::Stop(op) => operate(&client, "stop", op, Vec::new()),
        MirrorCommand::Pause(op) => operate(&client, "pause", op, Vec::new()),
        MirrorCommand::Resume(op) => operate(&client, "resume", op, Vec::new()),
        MirrorCommand::Recover {
            mirror,
            topics,
            output,
        } => operate(
            &client,
            "recover",
            Operation {
                mirror,
                topics,
                lock: Lock {
                    state_validation_offset: None,
                },
                output,
            },
            Vec::new(),
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
            if output.json {
                return Ok(pretty(&answer));
            }
            Ok(format!("Deleted mirror {mirror}.\n"))
        }
    }
}

fn operate(
    client: &Client,
    verb: &str,
    op: Operation,
    exclude: Vec<String>,
) -> Result<String, CliError> {
    let body = to_json(&OperationBody {
        topics: clean(&op.topics.topics),
        exclude,
        state_validation_offset: op.lock.state_validation_offset,
    });
    let path = format!("/mirrors/{}/{verb}", encode(&op.mirror));
    let answer = client.call("POST", &path, Some(body))?;
    if op.output.json {
        return Ok(pretty(&answer));
    }
    Ok(report_text(verb, &op.mirror, &decode(answer)?))
}

fn offsets(args: OffsetsArgs) -> Result<String, CliError> {
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
    if output.json {
        return Ok(pretty(&answer));
    }
    let t: Translation = decode(answer)?;
    Ok(table(
        &[
            "MIRROR",
            "TOPIC",
            "PARTITION",
            "SOURCE-OFFSET",
            "DESTINATION-OFFSET",
            "KIND",
        ],
        vec![vec![
            t.mirror,
            t.topic,
            t.partition.to_string(),
            t.source_offset.to_string(),
            t.destination_offset
                .map_or_else(|| "-".to_owned(), |o| o.to_string()),
            t.kind,
        ]],
    ))
}

/// The mirror's properties: the file, with `--topics` and `--exclude`
/// appended to its include / exclude lists.
fn mirror_properties(
    file: &PathBuf,
    topics: &[String],
    exclude: &[String],
) -> Result<BTreeMap<String, String>, CliError> {
    let bad = |m: String| {
        CliError::new(
            "INVALID_CONFIG",
            format!("--mirror-config {}: {m}", file.display()),
        )
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let mut props = crate::props::parse(&text).map_err(bad)?;
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

#[derive(Debug, Deserialize)]
struct Listing {
    mirror: String,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    source_cluster_id: String,
    #[serde(default)]
    source_bootstrap: String,
}

#[derive(Debug, Deserialize)]
struct Partition {
    mirror: String,
    topic: String,
    partition: i32,
    source_offset: i64,
    destination_offset: i64,
    lag: i64,
    lag_seconds: f64,
    state: String,
    retry_attempt: i16,
    #[serde(default)]
    max_attempts: u32,
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Report {
    topics: Vec<String>,
    state_validation_offset: u64,
    note: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Translation {
    mirror: String,
    topic: String,
    partition: i32,
    source_offset: i64,
    destination_offset: Option<i64>,
    kind: String,
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

fn list_table(mirrors: &[Listing]) -> String {
    let rows = mirrors
        .iter()
        .map(|m| {
            vec![
                m.mirror.clone(),
                or_dash(&m.topics.join(",")),
                or_dash(&m.source_cluster_id),
                or_dash(&m.source_bootstrap),
            ]
        })
        .collect();
    table(
        &[
            "MIRROR",
            "TOPICS",
            "SOURCE-CLUSTER-ID",
            "SOURCE-BOOTSTRAP-SERVER",
        ],
        rows,
    )
}

fn describe_table(partitions: &[Partition], failed: bool) -> String {
    if failed {
        let rows = partitions
            .iter()
            .map(|p| {
                let retry = if p.retry_attempt < 0 {
                    "NonRetryable".to_owned()
                } else {
                    format!("{}/{}", p.retry_attempt, p.max_attempts)
                };
                vec![
                    p.mirror.clone(),
                    p.topic.clone(),
                    p.partition.to_string(),
                    retry,
                    or_dash(p.error.as_deref().unwrap_or("")),
                ]
            })
            .collect();
        return table(&["MIRROR", "TOPIC", "PARTITION", "RETRY", "ERROR"], rows);
    }
    let rows = partitions
        .iter()
        .map(|p| {
            vec![
                p.mirror.clone(),
                p.topic.clone(),
                p.partition.to_string(),
                p.source_offset.to_string(),
                p.destination_offset.to_string(),
                p.lag.to_string(),
                format!("{:.3}", p.lag_seconds),
                p.state.clone(),
            ]
        })
        .collect();
    table(
        &[
            "MIRROR",
            "TOPIC",
            "PARTITION",
            "SOURCE-OFFSET",
            "DESTINATION-OFFSET",
            "LAG",
            "LAG-SECONDS",
            "STATE",
        ],
        rows,
    )
}

fn report_text(verb: &str, mirror: &str, r: &Report) -> String {
    let done = match verb {
        "start" => "Started",
        "stop" => "Stopped",
        "pause" => "Paused",
        "resume" => "Resumed",
        _ => "Recovered",
    };
    let mut text = if r.topics.is_empty() {
        format!(
            "{done} no topics of mirror {mirror} (state validation offset {}).\n",
            r.state_validation_offset
        )
    } else {
        format!(
            "{done} topics {} of mirror {mirror} (state validation offset {}).\n",
            r.topics.join(", "),
            r.state_validation_offset
        )
    };
    if let Some(note) = &r.note {
        text.push_str(note);
        text.push('\n');
    }
    text
}

/// The one table printer: left-aligned columns, two spaces apart, last
/// column unpadded (so error messages can be long).
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(headers.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(state: &str, retry: i16, error: Option<&str>) -> Partition {
        Partition {
            mirror: "m".into(),
            topic: "orders".into(),
            partition: 3,
            source_offset: 120,
            destination_offset: 100,
            lag: 20,
            lag_seconds: 0.25,
            state: state.into(),
            retry_attempt: retry,
            max_attempts: 20,
            error: error.map(Into::into),
        }
    }

    #[test]
    fn describe_prints_the_kip_columns() {
        let text = describe_table(&[partition("MIRRORING", 0, None)], false);
        assert_eq!(
            text,
            "MIRROR  TOPIC   PARTITION  SOURCE-OFFSET  DESTINATION-OFFSET  LAG  LAG-SECONDS  STATE\n\
             m       orders  3          120            100                 20   0.250        MIRRORING\n"
        );
    }

    #[test]
    fn describe_failed_shows_retry_as_n_of_max_or_non_retryable() {
        let text = describe_table(
            &[
                partition("FAILED", 2, Some("leader not available")),
                partition("FAILED", -1, Some("The source topic is deleted.")),
            ],
            true,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "MIRROR  TOPIC   PARTITION  RETRY         ERROR");
        assert_eq!(
            lines[1],
            "m       orders  3          2/20          leader not available"
        );
        assert_eq!(
            lines[2],
            "m       orders  3          NonRetryable  The source topic is deleted."
        );
    }

    #[test]
    fn list_prints_the_kip_columns() {
        let text = list_table(&[
            Listing {
                mirror: "east".into(),
                topics: vec!["a".into(), "b".into()],
                source_cluster_id: "abc".into(),
                source_bootstrap: "127.0.0.1:9092".into(),
            },
            Listing {
                mirror: "west".into(),
                topics: vec![],
                source_cluster_id: String::new(),
                source_bootstrap: "127.0.0.1:9093".into(),
            },
        ]);
        assert_eq!(
            text,
            "MIRROR  TOPICS  SOURCE-CLUSTER-ID  SOURCE-BOOTSTRAP-SERVER\n\
             east    a,b     abc                127.0.0.1:9092\n\
             west    -       -                  127.0.0.1:9093\n"
        );
    }

    #[test]
    fn reports() {
        let r = Report {
            topics: vec!["a".into(), "b".into()],
            state_validation_offset: 7,
            note: None,
        };
        assert_eq!(
            report_text("pause", "m", &r),
            "Paused topics a, b of mirror m (state validation offset 7).\n"
        );
        let r = Report {
            topics: vec![],
            state_validation_offset: 7,
            note: Some("Patterns saved for auto-discovery.".into()),
        };
        assert_eq!(
            report_text("start", "m", &r),
            "Started no topics of mirror m (state validation offset 7).\nPatterns saved for auto-discovery.\n"
        );
    }

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
            admin: format!("http://127.0.0.1:{port}"),
        })
        .unwrap();
        let e = client
            .call("POST", "/mirrors/m/resume", Some(serde_json::json!({})))
            .unwrap_err();
        server.join().unwrap();
        assert_eq!(
            e,
            CliError::new("MIRROR_TOPIC_NOT_PAUSED", "orders is MIRRORING")
        );
    }

    #[test]
    fn an_unreachable_daemon_is_a_network_exception() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client = Client::new(&AdminArg {
            admin: format!("http://127.0.0.1:{port}"),
        })
        .unwrap();
        assert_eq!(
            client.call("GET", "/mirrors", None).unwrap_err().code,
            "NETWORK_EXCEPTION"
        );
    }
}
