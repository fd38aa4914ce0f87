//! Fuzz target `admin_body`: every POST body type of the admin API, fed
//! through the routes, the JSON extractor and the handlers exactly as the
//! daemon serves them (`configure`, over an in-memory node). Any input
//! must get a success or a 4xx in the one error shape — never a 5xx, a
//! panic or a hang — and nothing over [`MAX_BODY_BYTES`] is read.
//!
//! The inputs: `fuzz/corpus/admin_body/`, then `KMIRROR_FUZZ_CASES` each
//! of random bytes, random JSON, bodies with the real field names and
//! random values, and random edits of the corpus (see
//! `kmirror_tests::fuzz`). Generated up front and replayed in order, so a
//! failure names its input.

use actix_web::http::StatusCode;
use actix_web::web::Data;
use actix_web::{test as web_test, App};
use kmirror_tests::fuzz::{self, apply, edits};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{json, Value};

use super::tests::node;
use super::{configure, NodeHandle, MAX_BODY_BYTES};

const TARGET: &str = "admin_body";

/// Every route that reads a body (`unfence`, `resume`, `recover` share
/// `OperationBody` with these).
const ROUTES: [&str; 6] = [
    "/mirrors",
    "/mirrors/fuzz/start",
    "/mirrors/fuzz/stop",
    "/mirrors/fuzz/pause",
    "/mirrors/fuzz/unfence",
    "/mirrors/fuzz/verify",
];

/// The request bodies' field names, so random values reach the handlers'
/// own checks and not only serde's.
const FIELDS: [&str; 14] = [
    "name",
    "properties",
    "topics",
    "exclude",
    "state_validation_offset",
    "failback",
    "dry_run",
    "fence_source",
    "timeout_ms",
    "quiet_ms",
    "through",
    "sample",
    "topic",
    "partition",
];

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
        Just(Value::from("bootstrap.servers")),
        Just(Value::from("127.0.0.1:1")),
        Just(Value::from("([")),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner.clone(), 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            prop::collection::btree_map(prop::sample::select(&FIELDS[..]), inner, 0..6).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

/// The corpus, then the random inputs, each with a name.
fn inputs() -> Vec<(String, Vec<u8>)> {
    let corpus = fuzz::corpus(TARGET);
    let seeds: Vec<Vec<u8>> = corpus.iter().map(|c| c.1.clone()).collect();
    let strategy = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        any_json().prop_map(|v| v.to_string().into_bytes()),
        (prop::sample::select(seeds), edits()).prop_map(|(seed, e)| apply(&seed, &e)),
    ];
    let mut runner = TestRunner::new(fuzz::config());
    let random = (0..fuzz::cases()).map(|i| {
        let bytes = strategy.new_tree(&mut runner).unwrap().current();
        (format!("random #{i}"), bytes)
    });
    corpus.into_iter().chain(random).collect()
}

#[actix_web::test]
async fn any_body_gets_an_answer_or_a_4xx() {
    let app = web_test::init_service(
        App::new()
            .app_data(Data::new(NodeHandle::new(node().await)))
            .configure(configure),
    )
    .await;
    let inputs = inputs();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for (name, body) in &inputs {
        for route in ROUTES {
            let req = web_test::TestRequest::post()
                .uri(route)
                .insert_header(("content-type", "application/json"))
                .set_payload(body.clone())
                .to_request();
            let answer = async {
                let resp = web_test::call_service(&app, req).await;
                (resp.status(), web_test::read_body(resp).await)
            };
            let (status, answer) = tokio::time::timeout(std::time::Duration::from_secs(20), answer)
                .await
                .unwrap_or_else(|_| panic!("POST {route} with {name} hangs"));
            let shown = || {
                format!(
                    "POST {route} with {name} ({:?}): {status} {}",
                    String::from_utf8_lossy(body),
                    String::from_utf8_lossy(&answer)
                )
            };
            *statuses.entry(status.as_u16()).or_default() += 1;
            assert!(
                status.is_success() || status.is_client_error(),
                "{}",
                shown()
            );
            if status.is_client_error() {
                let error: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
                assert!(
                    error["error"].is_string() && error["message"].is_string(),
                    "not the error shape: {}",
                    shown()
                );
            }
        }
    }
    eprintln!(
        "fuzz {TARGET}: {} inputs x {} routes, statuses {statuses:?}",
        inputs.len(),
        ROUTES.len()
    );
}

#[actix_web::test]
async fn an_oversized_body_is_413_and_never_read() {
    let app = web_test::init_service(
        App::new()
            .app_data(Data::new(NodeHandle::new(node().await)))
            .configure(configure),
    )
    .await;
    // At the limit: read (and refused for what it says, not for its size).
    let mut at_limit = String::from(r#"{"name":"#);
    at_limit.push_str(&" ".repeat(MAX_BODY_BYTES - at_limit.len() - 4));
    at_limit.push_str(r#""m"}"#);
    assert_eq!(at_limit.len(), MAX_BODY_BYTES);
    let over = format!("{at_limit} ");
    for (body, expected) in [
        (at_limit, StatusCode::BAD_REQUEST),
        (over, StatusCode::PAYLOAD_TOO_LARGE),
    ] {
        let len = body.len();
        let req = web_test::TestRequest::post()
            .uri("/mirrors")
            .insert_header(("content-type", "application/json"))
            .set_payload(body)
            .to_request();
        let resp = web_test::call_service(&app, req).await;
        let status = resp.status();
        let answer: Value = serde_json::from_slice(&web_test::read_body(resp).await).unwrap();
        assert_eq!(status, expected, "{len} bytes: {answer}");
        if expected == StatusCode::PAYLOAD_TOO_LARGE {
            assert_eq!(answer["error"], "PAYLOAD_TOO_LARGE", "{answer}");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(&MAX_BODY_BYTES.to_string()), "{message}");
        }
    }
}
