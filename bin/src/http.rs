//! A minimal blocking HTTP/1.1 client for the CLI (and for a clustered
//! node forwarding to its peers), over plain TCP or rustls.
//!
//! It only ever talks to a kmirror admin API, one request per connection;
//! a few dozen lines over `TcpStream` avoid pulling a full HTTP client into
//! the binary, and rustls is already linked for Kafka.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use rustls::pki_types::ServerName;

use crate::admin_auth::ClientAuth;

/// How long to wait for the daemon. Operations that connect to a source
/// cluster can take a while (the Kafka client's own timeouts bound them).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// A response: status code and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request got no answer. A daemon that accepted the connection but
/// did not answer in time is alive and busy; one that cannot be reached is
/// not there at all: an operator (or a script reading the code) acts on the
/// two differently, so they keep apart up to the exit message.
#[derive(Debug)]
pub struct TransportError {
    pub message: String,
    pub timed_out: bool,
}

impl TransportError {
    fn unreachable(message: String) -> Self {
        TransportError {
            message,
            timed_out: false,
        }
    }

    /// The Kafka error name the CLI reports it under.
    pub fn code(&self) -> &'static str {
        if self.timed_out {
            "REQUEST_TIMED_OUT"
        } else {
            "NETWORK_EXCEPTION"
        }
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// `http[s]://host:port[/prefix]`, split once, with what to prove to the
/// daemon there.
#[derive(Clone)]
pub struct BaseUrl {
    https: bool,
    host_port: String,
    prefix: String,
    read_timeout: Duration,
    auth: ClientAuth,
}

impl BaseUrl {
    pub fn parse(url: &str) -> Result<Self, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else {
            return Err(format!("`{url}`: expected http:// or https://"));
        };
        let (host_port, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if host_port.is_empty() {
            return Err(format!("`{url}`: no host"));
        }
        let host_port = if host_port
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host_port.to_owned()
        } else {
            format!("{host_port}:{}", if https { 443 } else { 80 })
        };
        Ok(BaseUrl {
            https,
            host_port,
            prefix: prefix.to_owned(),
            read_timeout: READ_TIMEOUT,
            auth: ClientAuth::default(),
        })
    }

    /// The same URL, sending `auth`'s token and trusting its CA.
    pub fn with_auth(mut self, auth: ClientAuth) -> Self {
        self.auth = auth;
        self
    }

    fn scheme(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }

    /// The same URL, waiting up to `timeout` for an answer: for operations
    /// that wait on the daemon's side (a stop waits for its partitions).
    pub fn with_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout.max(READ_TIMEOUT);
        self
    }

    /// The same URL, waiting exactly `timeout` for an answer, however
    /// short: a node forwarding or fanning out to another knows how long
    /// it may wait (a hung peer must not hold up every node's answer).
    pub fn with_exact_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// Sends one request; `body` is JSON. Errors are transport errors only:
    /// any HTTP status is a `Response`.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, TransportError> {
        self.request_with(method, path, body, &[])
    }

    /// [`Self::request`] with extra headers (a forwarding node marks what it
    /// forwards).
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Result<Response, TransportError> {
        let fail = |e: std::io::Error| {
            TransportError::unreachable(format!(
                "cannot reach the kmirror daemon at {}://{}: {e}",
                self.scheme(),
                self.host_port
            ))
        };
        let addr = self
            .host_port
            .to_socket_addrs()
            .map_err(fail)?
            .next()
            .ok_or_else(|| {
                TransportError::unreachable(format!("{}: no address", self.host_port))
            })?;
        // Once connected, a socket read timeout surfaces as WouldBlock (EAGAIN)
        // on Linux, TimedOut elsewhere: the daemon is there but slow.
        let no_answer = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => TransportError {
                message: format!(
                    "the kmirror daemon at {}://{} did not answer within {} s",
                    self.scheme(),
                    self.host_port,
                    self.read_timeout.as_secs_f64()
                ),
                timed_out: true,
            },
            _ => fail(e),
        };
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(fail)?;
        stream
            .set_read_timeout(Some(self.read_timeout))
            .map_err(fail)?;
        let body = body.unwrap_or_default();
        let mut request = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAccept: application/json\r\nContent-Length: {}\r\n",
            self.prefix,
            self.host_port,
            body.len()
        );
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(token) = &self.auth.token {
            request.push_str(&format!("Authorization: {}\r\n", token.header_value()));
        }
        request.push_str("\r\n");
        if !self.https {
            return exchange(stream, request.as_bytes(), body).map_err(no_answer);
        }
        let tls = self.auth.tls.clone().ok_or_else(|| {
            TransportError::unreachable(format!(
                "{}://{}: HTTPS needs the CA that signed the daemon's certificate: set KMIRROR_ADMIN_CA (or --admin-ca) to its PEM file",
                self.scheme(),
                self.host_port
            ))
        })?;
        let host = self
            .host_port
            .rsplit_once(':')
            .map_or(self.host_port.as_str(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            TransportError::unreachable(format!("{}: not a TLS server name: {e}", self.host_port))
        })?;
        let connection =
            rustls::ClientConnection::new(tls, name).map_err(|e| fail(std::io::Error::other(e)))?;
        exchange(
            rustls::StreamOwned::new(connection, stream),
            request.as_bytes(),
            body,
        )
        .map_err(no_answer)
    }
}

/// One request written and its answer read, over TCP or TLS.
fn exchange(mut stream: impl Read + Write, head: &[u8], body: &[u8]) -> std::io::Result<Response> {
    stream.write_all(head)?;
    stream.write_all(body)?;
    stream.flush()?;
    read_response(BufReader::new(stream))
}

fn bad(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.to_owned())
}

/// The largest answer body read: a describe of tens of thousands of
/// partitions is a few MiB. A peer's answer (its URL comes from the group
/// on the destination) announcing more is refused before anything is
/// allocated for it, not trusted to size a buffer.
const MAX_ANSWER_BYTES: usize = 256 << 20;

fn too_large() -> std::io::Error {
    bad(&format!("answer body larger than {MAX_ANSWER_BYTES} bytes"))
}

fn read_response(mut reader: impl BufRead) -> std::io::Result<Response> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("not an HTTP response"))?;
    let mut length = None;
    let mut chunked = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("connection closed inside the headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                break;
            }
            let start = body.len();
            if size > MAX_ANSWER_BYTES - start {
                return Err(too_large());
            }
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            line.clear();
            reader.read_line(&mut line)?;
        }
    } else if let Some(n) = length {
        if n > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.resize(n, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader
            .take(MAX_ANSWER_BYTES as u64 + 1)
            .read_to_end(&mut body)?;
        if body.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
    }
    Ok(Response { status, body })
}

/// Percent-encodes a path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = BaseUrl::parse("http://127.0.0.1:9650").unwrap();
        assert_eq!(
            (u.host_port.as_str(), u.prefix.as_str()),
            ("127.0.0.1:9650", "")
        );
        let u = BaseUrl::parse("http://localhost/kmirror/").unwrap();
        assert_eq!(
            (u.host_port.as_str(), u.prefix.as_str()),
            ("localhost:80", "/kmirror")
        );
        let u = BaseUrl::parse("https://node-1.dr").unwrap();
        assert_eq!((u.https, u.host_port.as_str()), (true, "node-1.dr:443"));
        assert!(BaseUrl::parse("ftp://x:1").is_err());
        assert!(BaseUrl::parse("http://").is_err());
    }

    #[test]
    fn responses_with_length_chunks_or_close() {
        let r = read_response(&b"HTTP/1.1 409 Conflict\r\ncontent-length: 2\r\n\r\n{}extra"[..])
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (409, &b"{}"[..]));
        let r = read_response(
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"[..],
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
        let r = read_response(&b"HTTP/1.0 200 OK\r\n\r\nall of it"[..]).unwrap();
        assert_eq!(r.body, b"all of it");
        assert!(read_response(&b"garbage"[..]).is_err());
        // A size announced past the cap is refused before any allocation
        // (before: an abort of the whole daemon forwarding to that peer).
        for huge in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 4611686018427387904\r\n\r\n"[..],
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4000000000000000\r\n"[..],
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\nffffffffffffffff\r\n"[..],
        ] {
            let e = read_response(huge).unwrap_err();
            assert!(e.to_string().contains("larger than"), "{e}");
        }
    }

    /// A daemon that accepts but does not answer in time: the error says so,
    /// not "cannot reach … (os error 11)", which is how the socket's read
    /// timeout surfaces on Linux.
    #[test]
    fn a_silent_daemon_is_reported_as_a_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut url =
            BaseUrl::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        url.read_timeout = Duration::from_millis(200);
        let e = url.request("GET", "/mirrors", None).unwrap_err();
        assert!(e.message.contains("did not answer within 0.2 s"), "{e}");
        assert_eq!(e.code(), "REQUEST_TIMED_OUT");
        drop(listener);
    }

    #[test]
    fn encoding() {
        assert_eq!(encode("orders-1.a_b~"), "orders-1.a_b~");
        assert_eq!(encode("a b/c?&é"), "a%20b%2Fc%3F%26%C3%A9");
    }
}
