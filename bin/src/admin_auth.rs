//! Who may use the admin API, and how kmirror proves itself when it is the
//! client: the bearer token (`admin_token`, `KMIRROR_ADMIN_TOKEN`) and the
//! TLS material (`admin_tls_cert`/`admin_tls_key` for the server, a CA file
//! for the CLI and for a clustered node forwarding to its peers).
//!
//! The admin API can stop mirrors and fence a source's writers, so leaving
//! loopback without either is refused at start-up (`settings.rs`).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use subtle::ConstantTimeEq;

/// The admin bearer token. Its `Debug` never shows it, so settings can be
/// logged or printed in an error without leaking it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// Refuses what cannot travel in an `Authorization` header.
    pub fn new(token: &str) -> Result<Self, String> {
        if token.is_empty() {
            return Err("is empty".into());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces".into());
        }
        Ok(AdminToken(token.to_owned()))
    }

    /// Whether an `Authorization` header value carries this token. The
    /// comparison takes the same time wherever the first wrong byte is, so
    /// a client cannot find the token byte by byte from response times.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(presented) = authorization.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        bool::from(self.0.as_bytes().ct_eq(presented))
    }

    /// The header value a client sends.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

/// The admin API's rustls server configuration from a PEM certificate chain
/// and key; the error names the setting whose file is at fault.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, (String, String)> {
    let cert_err = |m: String| ("admin_tls_cert".to_owned(), m);
    let key_err = |m: String| ("admin_tls_key".to_owned(), m);
    let chain = read_certs(cert).map_err(cert_err)?;
    let pem = std::fs::read(key).map_err(|e| key_err(format!("{}: {e}", key.display())))?;
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        key_err(format!(
            "{}: no usable private key (PKCS#8, PKCS#1 or SEC1 PEM, unencrypted): {e}",
            key.display()
        ))
    })?;
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| cert_err(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| key_err(format!("does not fit admin_tls_cert: {e}")))
}

/// A client configuration trusting the CA certificates in `ca` (PEM), for
/// the CLI (`KMIRROR_ADMIN_CA`) and for nodes forwarding to each other.
pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: unusable certificate: {e}", ca.display()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no CERTIFICATE in the PEM", path.display()));
    }
    Ok(certs)
}

/// What kmirror sends as an admin client: the token, and the trust for
/// `https://` URLs. The CLI fills it from its environment, a clustered
/// node from its settings.
#[derive(Clone, Default)]
pub struct ClientAuth {
    pub token: Option<AdminToken>,
    /// None: `https://` URLs are refused with an error naming what to set.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let t = AdminToken::new("s3cret-Token").unwrap();
        assert!(t.accepts(Some(b"Bearer s3cret-Token")));
        for wrong in [
            &b"Bearer s3cret-Toke"[..],
            b"Bearer s3cret-Token2",
            b"bearer s3cret-Token",
            b"Basic s3cret-Token",
            b"s3cret-Token",
            b"",
        ] {
            assert!(
                !t.accepts(Some(wrong)),
                "{}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!t.accepts(None));
        assert!(AdminToken::new("").is_err());
        assert!(AdminToken::new("a b").is_err());
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
