//! The admin API's handlers, through actix-web's test service.

use super::error::status_for;
use super::*;
use actix_web::http::StatusCode;
use actix_web::{test as web_test, App};
use std::sync::Arc;

use kmirror_actors::cluster::memory::{MemoryDestination, MemorySource};
use kmirror_actors::cluster::SourceCluster;
use kmirror_actors::node::{Node, NodeSettings, SourceConnector};

pub(super) async fn node() -> Node {
    let connect: SourceConnector = Arc::new(|_props| {
        Box::pin(async { Ok(Arc::new(MemorySource::new("source-id")) as Arc<dyn SourceCluster>) })
    });
    Node::start(
        Arc::new(kmirror_store::MemLog::new()),
        Arc::new(MemoryDestination::new("destination-id")),
        connect,
        NodeSettings::default(),
    )
    .await
    .expect("node starts on in-memory clusters")
}

/// One request to a fresh app; a node call that never answers fails the
/// test instead of hanging it.
async fn call_raw(req: web_test::TestRequest) -> (StatusCode, Vec<u8>) {
    let app = web_test::init_service(
        App::new()
            .app_data(Data::new(NodeHandle::new(node().await)))
            .configure(configure),
    )
    .await;
    let answer = async {
        let resp = web_test::call_service(&app, req.to_request()).await;
        let status = resp.status();
        (status, web_test::read_body(resp).await.to_vec())
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), answer)
        .await
        .expect("the admin API answers within 20 s")
}

async fn call(req: web_test::TestRequest) -> (StatusCode, serde_json::Value) {
    let (status, body) = call_raw(req).await;
    let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    (status, json)
}

fn assert_error(got: (StatusCode, serde_json::Value), status: u16, code: &str, mentions: &str) {
    assert_eq!(got.0.as_u16(), status, "{}", got.1);
    assert_eq!(got.1["error"], code, "{}", got.1);
    let message = got.1["message"].as_str().unwrap();
    assert!(
        message.contains(mentions),
        "`{message}` should mention `{mentions}`"
    );
}

#[actix_web::test]
async fn health_is_ok() {
    let (status, body) = call(web_test::TestRequest::get().uri("/health")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
}

#[actix_web::test]
async fn bad_bodies_are_400_and_name_the_problem() {
    let post = |uri: &str, body: &str| {
        web_test::TestRequest::post()
            .uri(uri)
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned())
    };
    assert_error(
        call(post("/mirrors", "{")).await,
        400,
        "INVALID_REQUEST",
        "bad JSON body",
    );
    assert_error(
        call(post("/mirrors", r#"{"properties":{}}"#)).await,
        400,
        "INVALID_REQUEST",
        "missing field `name`",
    );
    assert_error(
        call(post("/mirrors", r#"{"name":"m","propertiez":{}}"#)).await,
        400,
        "INVALID_REQUEST",
        "unknown field `propertiez`",
    );
    assert_error(
        call(post("/mirrors", r#"{"name":" "}"#)).await,
        400,
        "INVALID_REQUEST",
        "name",
    );
    assert_error(
        call(post("/mirrors/m/pause", r#"{"topics":[]}"#)).await,
        400,
        "INVALID_REQUEST",
        "topics",
    );
    assert_error(
        call(post(
            "/mirrors/m/stop",
            r#"{"topics":["a"],"exclude":["b"]}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "exclude",
    );
    assert_error(
        call(post(
            "/mirrors/m/pause",
            r#"{"topics":["a"],"dry_run":true}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "dry_run: only start and stop take it",
    );
    assert_error(
        call(post(
            "/mirrors/m/stop",
            r#"{"topics":["a"],"failback":"delta"}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "failback: only start takes it",
    );
    assert_error(
        call(post(
            "/mirrors/m/start",
            r#"{"topics":["a"],"failback":"sideways"}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "`sideways` is neither delta nor from-scratch",
    );
    assert_error(
        call(post(
            "/mirrors/m/start",
            r#"{"topics":["a"],"fence_source":true}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "fence_source",
    );
    assert_error(
        call(post(
            "/mirrors/m/stop",
            r#"{"topics":["a"],"timeout_ms":0}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "timeout_ms",
    );
    assert_error(
        call(post(
            "/mirrors/m/unfence",
            r#"{"topics":["a"],"state_validation_offset":3}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "unfence does not take one",
    );
    // 2^63: once taken for a negative count, a draw that never ended on
    // the daemon's own thread.
    assert_error(
        call(post(
            "/mirrors/m/verify",
            r#"{"sample":9223372036854775808}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "sample: at most 1000000",
    );
    assert_error(
        call(post("/mirrors/m/start", r#"{"topics":"a"}"#)).await,
        400,
        "INVALID_REQUEST",
        "invalid type",
    );
    assert_error(
        call(post(
            "/mirrors/m/start",
            r#"{"topics":["a"],"state_validation_offset":-1}"#,
        ))
        .await,
        400,
        "INVALID_REQUEST",
        "invalid value",
    );
}

#[actix_web::test]
async fn bad_queries_routes_and_methods() {
    assert_error(
        call(web_test::TestRequest::get().uri("/offsets/translate?mirror=m&topic=t&partition=0"))
            .await,
        400,
        "INVALID_REQUEST",
        "missing field `offset`",
    );
    assert_error(
        call(web_test::TestRequest::get().uri("/mirrors/m/partitions?failed=maybe")).await,
        400,
        "INVALID_REQUEST",
        "bad query string",
    );
    assert_error(
        call(
            web_test::TestRequest::post()
                .uri("/mirrors/m/frobnicate")
                .set_payload(r#"{"topics":["a"]}"#),
        )
        .await,
        404,
        "NOT_FOUND",
        "frobnicate",
    );
    assert_error(
        call(web_test::TestRequest::get().uri("/nope")).await,
        404,
        "NOT_FOUND",
        "/nope",
    );
    assert_error(
        call(web_test::TestRequest::put().uri("/mirrors")).await,
        405,
        "METHOD_NOT_ALLOWED",
        "PUT",
    );
}

#[actix_web::test]
async fn node_errors_keep_their_kip_name() {
    let (status, body) = call(web_test::TestRequest::delete().uri("/mirrors/never-created")).await;
    assert!(
        status.is_client_error() || status.is_server_error(),
        "{status}"
    );
    assert!(
        body["error"].as_str().is_some_and(|c| !c.is_empty()),
        "{body}"
    );
    assert_eq!(status, status_for(body["error"].as_str().unwrap()));
}

#[actix_web::test]
async fn metrics_and_state_offset_answer() {
    let (status, body) = call_raw(web_test::TestRequest::get().uri("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("kmirror_MirroringPartitionState"), "{text}");
    let (status, body) = call(web_test::TestRequest::get().uri("/state-offset")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["state_validation_offset"].is_u64(), "{body}");
    assert_eq!(body["state_offset"], body["state_validation_offset"]);
}

#[actix_web::test]
async fn the_page_and_the_audit_answer() {
    let (status, body) = call_raw(web_test::TestRequest::get().uri("/ui")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("<title>kmirror status</title>"));
    let (status, body) = call(web_test::TestRequest::get().uri("/audit?mirror=m")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!([]));
    for (uri, mentions) in [
        ("/audit", "missing field `mirror`"),
        ("/audit?mirror=m&limit=0", "limit"),
        ("/audit?mirror=m&limit=1001", "limit"),
        ("/audit?mirror=m&type=FailoverReport,Nope", "`Nope`"),
    ] {
        let got = call(web_test::TestRequest::get().uri(uri)).await;
        assert_error(got, 400, "INVALID_REQUEST", mentions);
    }
    assert_error(
        call(web_test::TestRequest::get().uri("/audit?mirror=m&topic=nope")).await,
        404,
        "TOPIC_NOT_IN_CLUSTER_MIRROR",
        "nope",
    );
}
