//! The operator files in `deploy/`: Prometheus's own `promtool` checks the
//! alert rules and runs their unit tests (each alert fires on the series
//! that should raise it, and only then), and the Grafana dashboard is a
//! well-formed dashboard. That they name only metrics kmirror exports is
//! checked beside the metrics themselves (`bin/src/metrics.rs`).

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new(root().join("scripts/promtool"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run scripts/promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_and_tests_the_alert_rules() {
    let checked = promtool(&["check", "rules", "deploy/prometheus/alerts.yml"]);
    assert!(checked.contains("SUCCESS: 6 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "deploy/prometheus/alerts_test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    println!("{checked}{tested}");
}

#[test]
fn the_grafana_dashboard_is_well_formed() {
    let body = std::fs::read_to_string(root().join("deploy/grafana/kmirror.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&body).expect("dashboard JSON");
    assert_eq!(dash["uid"], "kmirror");
    let variables: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "instance", "mirror"]);
    let panels = dash["panels"].as_array().unwrap();
    assert!(panels.len() >= 15, "{} panels", panels.len());
    let mut ids = std::collections::BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_i64().unwrap()),
            "duplicate id: {title}"
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_i64().unwrap(), g["w"].as_i64().unwrap());
        assert!(
            x >= 0 && w > 0 && x + w <= 24,
            "{title} leaves the 24-column grid"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            assert!(
                expr.contains("kmirror_") || expr.contains("up{job=\"kmirror\"}"),
                "{title}: {expr}"
            );
            // Balanced brackets: a typo here shows as an empty panel only in Grafana.
            for (open, close) in [('(', ')'), ('{', '}'), ('[', ']')] {
                assert_eq!(
                    expr.matches(open).count(),
                    expr.matches(close).count(),
                    "{title}: {expr}"
                );
            }
        }
    }
}
