//! Framing, correlation and version negotiation against an in-process
//! fake broker (the real broker is exercised in `tests/tests/protocol_*`).
use super::*;
use crate::kafka::fake_wire::{read_request, write_response};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    ApiVersionsResponse, MetadataRequest, MetadataResponse, RequestHeader, TopicName,
};
use tokio::net::TcpListener;

/// Answers ApiVersions v>0 with UNSUPPORTED_VERSION (as a v0 body),
/// then v0 normally; collects 3 Metadata requests and answers them in
/// reverse order; never answers a Metadata request for topic "silent".
async fn fake_broker(listener: TcpListener) {
    let (mut s, _) = listener.accept().await.unwrap();
    let mut held: Vec<(RequestHeader, String)> = Vec::new();
    while let Some((h, mut f)) = read_request(&mut s).await {
        match h.request_api_key {
            18 if h.request_api_version > 0 => {
                let r = ApiVersionsResponse::default().with_error_code(35);
                write_response(&mut s, h.correlation_id, &r, 0).await;
            }
            18 => {
                let r = ApiVersionsResponse::default().with_api_keys(vec![
                    ApiVersion::default()
                        .with_api_key(18)
                        .with_min_version(0)
                        .with_max_version(3),
                    ApiVersion::default()
                        .with_api_key(3)
                        .with_min_version(0)
                        .with_max_version(8),
                ]);
                write_response(&mut s, h.correlation_id, &r, 0).await;
            }
            3 => {
                let req = MetadataRequest::decode(&mut f, h.request_api_version).unwrap();
                let name = req.topics.unwrap()[0].name.as_ref().unwrap().0.to_string();
                if name == "silent" {
                    continue;
                }
                held.push((h, name));
                if held.len() == 3 {
                    for (h, name) in held.drain(..).rev() {
                        let r = MetadataResponse::default()
                            .with_topics(vec![MetadataResponseTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(name))))]);
                        write_response(&mut s, h.correlation_id, &r, h.request_api_version).await;
                    }
                }
            }
            k => panic!("unexpected api {k}"),
        }
    }
}

fn metadata_for(name: &str) -> MetadataRequest {
    MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))]))
}

/// A request built when the writer gets to it (a Produce request's
/// batches wait as references, not as a frame) keeps its place among
/// the others and gets its own answer.
#[tokio::test]
async fn a_request_built_late_keeps_its_place_and_gets_its_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(fake_broker(listener));
    let cfg = ClientConfig::plaintext(&addr);
    let conn = BrokerConnection::connect(&addr, -1, &cfg).await.unwrap();
    let (v, t) = (
        conn.version::<MetadataRequest>().unwrap(),
        cfg.request_timeout,
    );
    let built = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = built.clone();
    let a = conn.submit(&metadata_for("a"), v, t).await.unwrap();
    let b = conn
        .submit_later(
            move || {
                flag.store(true, Ordering::SeqCst);
                metadata_for("b")
            },
            v,
            t,
        )
        .await
        .unwrap();
    let c = conn.submit(&metadata_for("c"), v, t).await.unwrap();
    // The fake broker answers once it holds all three, last first.
    let (a, b, c) = tokio::join!(a.wait(), b.wait(), c.wait());
    for (r, want) in [(a, "a"), (b, "b"), (c, "c")] {
        assert_eq!(r.unwrap().topics[0].name.as_ref().unwrap().0.as_str(), want);
    }
    assert!(built.load(Ordering::SeqCst));
}

#[tokio::test]
async fn pipelined_out_of_order_answers_and_v0_fallback_and_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(fake_broker(listener));
    // Long enough that a loaded machine answers the three in time; the
    // silent request waits it out.
    let cfg = ClientConfig {
        request_timeout: Duration::from_secs(1),
        ..ClientConfig::plaintext(&addr)
    };
    let conn = BrokerConnection::connect(&addr, -1, &cfg)
        .await
        .expect("connect with v0 fallback");
    assert_eq!(
        conn.version::<MetadataRequest>().unwrap(),
        8,
        "highest common version"
    );
    assert!(matches!(
        conn.version::<kafka_protocol::messages::FetchRequest>(),
        Err(KafkaError::UnsupportedVersion { .. })
    ));
    let (ra, rb, rc) = (metadata_for("a"), metadata_for("b"), metadata_for("c"));
    let (a, b, c) = tokio::join!(conn.send(&ra), conn.send(&rb), conn.send(&rc));
    for (r, want) in [(a, "a"), (b, "b"), (c, "c")] {
        let r = r.unwrap();
        assert_eq!(r.topics[0].name.as_ref().unwrap().0.as_str(), want);
    }
    let silent = metadata_for("silent");
    let err = conn.send(&silent).await.unwrap_err();
    assert!(matches!(err, KafkaError::Timeout { .. }), "{err}");
    assert!(conn.is_closed(), "a timed-out connection is closed");
    let err = conn.send(&ra).await.unwrap_err();
    assert!(matches!(err, KafkaError::Disconnected { .. }), "{err}");
}
