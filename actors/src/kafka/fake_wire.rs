//! The wire of an in-process fake broker, for the protocol layer's unit
//! tests (the real broker is exercised in `tests/tests/protocol_*`): a
//! request read with its header, an answer written after its correlation
//! id. That is response header v0, so a fake answers ApiVersions (whose
//! response header is always v0) and APIs below their flexible versions.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::{decode_request_header_from_buffer, Encodable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The next request's header and body; `None` once the client hung up.
pub(crate) async fn read_request(s: &mut TcpStream) -> Option<(RequestHeader, Bytes)> {
    let n = s.read_i32().await.ok()?;
    let mut frame = vec![0u8; usize::try_from(n).ok()?];
    s.read_exact(&mut frame).await.ok()?;
    let mut frame = Bytes::from(frame);
    let header = decode_request_header_from_buffer(&mut frame).expect("a request header");
    Some((header, frame))
}

/// Writes `m`, encoded at `version`, as the answer to request `corr`.
pub(crate) async fn write_response<M: Encodable>(
    s: &mut TcpStream,
    corr: i32,
    m: &M,
    version: i16,
) {
    let mut body = BytesMut::new();
    body.put_i32(corr);
    m.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    s.write_all(&frame).await.unwrap();
}
