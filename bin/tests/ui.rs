//! The status page (`GET /ui`) in a real browser: a daemon against the
//! real Kafka bed with partitions MIRRORING, PAUSED, STOPPED and FAILED, the
//! page rendered by headless Chromium (`scripts/browser` installs it), and
//! every state and number it shows compared with `describe --json`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use kmirror_tests::{bed, create_topic, kafka_tool_stdin, repo_root, unique};
use serde_json::Value;

/// The fields compared cell by cell: the describe JSON's names, which the
/// page's `data-field` hooks carry.
const FIELDS: [&str; 4] = ["state", "source_offset", "destination_offset", "lag"];

/// Chromium, installed by `scripts/browser` if missing; its failure is the
/// test's failure (a status page nobody rendered proves nothing).
fn chromium() -> PathBuf {
    let out = Command::new(repo_root().join("scripts/browser"))
        .output()
        .expect("run scripts/browser");
    assert!(
        out.status.success(),
        "scripts/browser could not install Chromium: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from("chromium")
}

fn browse(url: &str, extra: &[&str]) -> std::process::Output {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=8000",
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium {extra:?} {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in the first tag of `html`.
fn attr(html: &str, name: &str) -> Option<String> {
    let tag = &html[..html.find('>')?];
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[at..].find('"')?;
    Some(unescape(&tag[at..at + len]))
}

/// The text of the element that follows `start` in `html`, tags removed.
fn text_after(html: &str, start: usize) -> String {
    let from = start + html[start..].find('>').unwrap() + 1;
    let to = from + html[from..].find("</td>").unwrap();
    let mut text = String::new();
    let mut in_tag = false;
    for c in html[from..to].chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    unescape(&text)
}

/// Each partition row of the dumped DOM: (mirror, topic, partition) →
/// field → text shown.
type Shown = BTreeMap<(String, String, i64), BTreeMap<String, String>>;

fn partitions_shown(dom: &str) -> Shown {
    let mut rows = Shown::new();
    for chunk in dom.split("<tr class=\"partition").skip(1) {
        let row = &chunk[..chunk.find("</tr>").unwrap()];
        let row = format!("<tr class=\"partition{row}");
        let key = (
            attr(&row, "data-mirror").unwrap(),
            attr(&row, "data-topic").unwrap(),
            attr(&row, "data-partition").unwrap().parse().unwrap(),
        );
        let mut cells = BTreeMap::new();
        for (at, _) in row.match_indices("<td data-field=\"") {
            let name = attr(&row[at..], "data-field").unwrap();
            cells.insert(name, text_after(&row, at));
        }
        // The state's colour is its class, named after the state.
        let span = row.find("<span class=\"state ").expect("a state badge");
        cells.insert("class".into(), attr(&row[span..], "class").unwrap());
        rows.insert(key, cells);
    }
    rows
}

/// What the page must show for `p`, as it words numbers (−1: "?").
fn expected(p: &Value) -> BTreeMap<String, String> {
    FIELDS
        .iter()
        .map(|f| {
            let v = match &p[*f] {
                Value::String(s) => s.clone(),
                Value::Number(n) if n.as_i64() == Some(-1) => "?".into(),
                other => other.to_string(),
            };
            (f.to_string(), v)
        })
        .collect()
}

fn partitions(daemon: &Daemon, mirror: &str) -> Vec<Value> {
    let (status, body) = daemon.http("GET", &format!("/mirrors/{mirror}/partitions"), None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Vec<Value>>(&body).unwrap()
}

fn state_of(daemon: &Daemon, mirror: &str, topic: &str) -> Vec<Value> {
    partitions(daemon, mirror)
        .into_iter()
        .filter(|p| p["topic"] == topic)
        .collect()
}

fn output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_status_page_shows_what_describe_says() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let p = unique("ui");
    let (orders, paused, stopped, big) = (
        format!("{p}-orders"),
        format!("{p}-paused"),
        format!("{p}-stopped"),
        format!("{p}-big"),
    );
    create_topic(&bed().source, &orders, 2, &[]);
    create_topic(&bed().source, &paused, 1, &[]);
    create_topic(&bed().source, &stopped, 1, &[]);
    create_topic(&bed().source, &big, 1, &[]);
    // The destination refuses `big`'s 5 KB record: FAILED, its next retry a
    // minute away (so the countdown is on the page when it is read).
    create_topic(&bed().destination, &big, 1, &["max.message.bytes=2000"]);
    produce(&orders, 0, 120);
    produce(&paused, 0, 30);
    produce(&stopped, 0, 40);

    let mirror = unique("ui");
    let props = dir.path().join("ui.properties");
    std::fs::write(
        &props,
        format!(
            "bootstrap.servers={}\nmirror.failed.retry.initial.backoff.ms=60000\nmirror.failed.retry.max.backoff.ms=60000\nmirror.failed.retry.max.attempts=5\n",
            bed().source
        ),
    )
    .unwrap();
    let all = format!("{orders},{paused},{stopped},{big}");
    daemon.mirror_topics(&mirror, props.to_str().unwrap(), &all);
    wait_for("orders, paused and stopped mirrored", || {
        let parts = partitions(&daemon, &mirror);
        parts.len() == 5
            && parts
                .iter()
                .filter(|p| p["topic"] != big.as_str())
                .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
    });

    daemon.cli_ok(&["mirror", "pause", "--mirror", &mirror, "--topics", &paused]);
    wait_for("paused", || {
        state_of(&daemon, &mirror, &paused)[0]["state"] == "PAUSED"
    });
    daemon.cli_ok(&[
        "mirror",
        "stop",
        "--mirror",
        &mirror,
        "--topics",
        &stopped,
        "--timeout",
        "60",
    ]);
    let big_record = format!("{}\n", "x".repeat(5_000));
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &["--bootstrap-server", &bed().source, "--topic", &big],
        big_record.as_bytes(),
    );
    assert!(out.status.success());
    wait_for("big FAILED with a retry pending", || {
        let p = &state_of(&daemon, &mirror, &big)[0];
        p["state"] == "FAILED" && p["next_retry_at_ms"].is_i64()
    });
    let failed = &state_of(&daemon, &mirror, &big)[0];
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let retry_in = failed["next_retry_at_ms"].as_i64().unwrap() - now_ms;
    assert!(
        (0..=61_000).contains(&retry_in),
        "the retry is due within the 60 s backoff: {failed}"
    );
    println!(
        "FAILED {big}[0]: retry {}/{} due in {retry_in} ms",
        failed["retry_attempt"], failed["max_attempts"]
    );

    // The figures are still now (nothing produced, paused, stopped, failed),
    // so the page read between two describes must equal both; a change in
    // between (a retry, a late checkpoint) reads the page again.
    // The console producer's sticky partitioner may fill one partition only:
    // the page opens the log of one that has records.
    let busy = state_of(&daemon, &mirror, &orders)
        .into_iter()
        .find(|p| p["destination_offset"].as_i64() > Some(0))
        .expect("an orders partition with records")["partition"]
        .as_i64()
        .unwrap();
    let url = format!("{}/ui#open={mirror}/{orders}/{busy}", daemon.admin());
    let mut attempt = 0;
    let (dom, described) = loop {
        attempt += 1;
        let before = partitions(&daemon, &mirror);
        let dom = String::from_utf8(browse(&url, &["--dump-dom"]).stdout).unwrap();
        let after = partitions(&daemon, &mirror);
        let same = |a: &[Value], b: &[Value]| {
            a.iter().map(expected).collect::<Vec<_>>() == b.iter().map(expected).collect::<Vec<_>>()
        };
        if same(&before, &after) || attempt == 3 {
            break (dom, after);
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    std::fs::write(output_dir().join("status-page.html"), &dom).unwrap();
    let polls: u32 = attr(&dom[dom.find("<body").unwrap()..], "data-polls")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        polls >= 2,
        "the page polled {polls} times in 8 s of virtual time"
    );

    let shown = partitions_shown(&dom);
    assert_eq!(
        shown.len(),
        described.len(),
        "one row per partition: {shown:#?}"
    );
    let mut states = Vec::new();
    for p in &described {
        let key = (
            p["mirror"].as_str().unwrap().to_string(),
            p["topic"].as_str().unwrap().to_string(),
            p["partition"].as_i64().unwrap(),
        );
        let cells = shown
            .get(&key)
            .unwrap_or_else(|| panic!("no row for {key:?}"));
        for (field, want) in expected(p) {
            assert_eq!(cells[&field], want, "{key:?} {field}: page vs describe {p}");
        }
        assert_eq!(
            cells["class"],
            format!("state {}", p["state"].as_str().unwrap())
        );
        println!(
            "{}[{}] {:<9} source {:>4} destination {:>4} lag {:>3}  (page == describe)",
            key.1,
            key.2,
            cells["state"],
            cells["source_offset"],
            cells["destination_offset"],
            cells["lag"]
        );
        states.push(cells["state"].clone());
    }
    // And the destination offsets shown are the destination's own, as
    // Kafka's kafka-get-offsets reads them.
    for topic in [&orders, &paused, &stopped] {
        let on_page: i64 = shown
            .iter()
            .filter(|(k, _)| &k.1 == topic)
            .map(|(_, cells)| cells["destination_offset"].parse::<i64>().unwrap())
            .sum();
        let on_kafka = records_on(&bed().destination, topic) as i64;
        assert_eq!(on_page, on_kafka, "{topic}: page vs kafka-get-offsets");
        println!("{topic}: destination end offsets {on_page} on the page, {on_kafka} by kafka-get-offsets");
    }
    states.sort();
    states.dedup();
    assert_eq!(states, ["FAILED", "MIRRORING", "PAUSED", "STOPPED"]);
    let big_row = &shown[&(mirror.clone(), big.clone(), 0)];
    assert!(
        big_row["next_retry_at_ms"].starts_with("retry in "),
        "countdown: {big_row:?}"
    );
    assert!(
        big_row["error"].contains("exceeds the destination limit"),
        "{big_row:?}"
    );
    assert_eq!(
        big_row["retry_attempt"],
        format!("{}/{}", failed["retry_attempt"], failed["max_attempts"])
    );

    // The opened row tells the partition's log as `kmirror log audit` does.
    let (status, body) = daemon.http(
        "GET",
        &format!("/audit?mirror={mirror}&topic={orders}&partition={busy}&limit=50"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let audit: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert!(
        audit
            .iter()
            .any(|l| l["text"].as_str().unwrap().contains("-> MIRRORING")),
        "{body}"
    );
    let dom_text = unescape(&dom);
    for line in &audit {
        assert!(
            dom_text.contains(line["text"].as_str().unwrap()),
            "the page lacks the audit line {line}"
        );
    }
    // The failover of `stopped` is in the mirror's history.
    let (_, body) = daemon.http(
        "GET",
        &format!("/audit?mirror={mirror}&type=FailoverReport,FailbackPlan"),
        None,
    );
    let history: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(history.len(), 1, "one FailoverReport: {body}");
    assert!(dom_text.contains(history[0]["text"].as_str().unwrap()));
    println!(
        "audit lines shown for {orders}[{busy}]: {}; history: {}",
        audit.len(),
        history[0]["text"]
    );

    // Bad queries are refused with the field named.
    let (status, body) = daemon.http("GET", &format!("/audit?mirror={mirror}&limit=0"), None);
    assert!(status == 400 && body.contains("limit"), "{status} {body}");
    let (status, body) = daemon.http("GET", &format!("/audit?mirror={mirror}&type=Nope"), None);
    assert!(
        status == 400 && body.contains("FailoverReport"),
        "{status} {body}"
    );

    // Every string from JSON goes in as text: the page has no HTML sink.
    let (_, page) = daemon.http("GET", "/ui", None);
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
    ] {
        assert!(!page.contains(sink), "the page uses {sink}");
    }

    let png = output_dir().join("status-page.png");
    let shot = format!("--screenshot={}", png.display());
    browse(
        &url,
        &[&shot, "--window-size=1400,900", "--hide-scrollbars"],
    );
    let size = std::fs::metadata(&png).expect("a screenshot").len();
    assert!(size > 10_000, "a blank screenshot? {size} bytes");
    println!("screenshot: {} ({size} bytes)", png.display());
}
