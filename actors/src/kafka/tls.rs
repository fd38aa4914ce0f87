//! TLS with rustls: server verification always on (chain against the
//! configured PEM trust store), host name check as Kafka's
//! `ssl.endpoint.identification.algorithm` says, optional client certificate.
//!
//! The rustls configuration is built once, when the client properties are
//! parsed, so a bad PEM is reported against its key before any connection
//! and every broker connection reuses the same parsed certificates.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;

use super::error::{KafkaError, Result};

/// The PEM material TLS is built from. Only PEM is accepted: JKS/PKCS12 need
/// a JVM-compatible keystore reader, and PEM is what Kafka itself accepts
/// since KIP-651.
#[derive(Clone, Default)]
pub struct TlsConfig {
    /// PEM certificates of trusted CAs; empty means "no trust store configured".
    pub trusted_certs_pem: Vec<u8>,
    /// PEM client certificate chain, for mutual TLS.
    pub client_cert_chain_pem: Option<Vec<u8>>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted) for mutual TLS.
    pub client_key_pem: Option<Vec<u8>>,
    /// Whether the broker's host name (or IP) must match its certificate
    /// (`ssl.endpoint.identification.algorithm=https`, Kafka's default).
    pub verify_hostname: bool,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("trusted_certs_pem_len", &self.trusted_certs_pem.len())
            .field("client_cert", &self.client_cert_chain_pem.is_some())
            .field("verify_hostname", &self.verify_hostname)
            .finish()
    }
}

impl TlsConfig {
    /// Parses the PEM and builds the rustls client configuration that every
    /// connection shares; errors name the Kafka key whose content is wrong.
    pub fn build(&self) -> Result<Arc<rustls::ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        let truststore = "ssl.truststore.location";
        if self.trusted_certs_pem.is_empty() {
            return Err(KafkaError::config(
                truststore,
                "a PEM trust store (ssl.truststore.location or ssl.truststore.certificates) is required for SSL",
            ));
        }
        for cert in CertificateDer::pem_slice_iter(&self.trusted_certs_pem) {
            let cert = cert.map_err(|e| KafkaError::config(truststore, format!("bad PEM: {e}")))?;
            roots.add(cert).map_err(|e| {
                KafkaError::config(truststore, format!("unusable certificate: {e}"))
            })?;
        }
        if roots.is_empty() {
            return Err(KafkaError::config(
                truststore,
                "no CERTIFICATE found in the PEM",
            ));
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| KafkaError::config(truststore, e.to_string()))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| KafkaError::config("ssl.protocol", e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier {
                inner: webpki,
                verify_hostname: self.verify_hostname,
            }));
        let config = match (&self.client_cert_chain_pem, &self.client_key_pem) {
            (Some(chain), Some(key)) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| {
                        KafkaError::config(
                            "ssl.keystore.location",
                            format!("bad PEM certificate chain: {e}"),
                        )
                    })?;
                if certs.is_empty() {
                    return Err(KafkaError::config(
                        "ssl.keystore.location",
                        "no CERTIFICATE found in the keystore PEM",
                    ));
                }
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                    KafkaError::config(
                        "ssl.keystore.key",
                        format!("no usable unencrypted private key: {e}"),
                    )
                })?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| KafkaError::config("ssl.keystore.key", e.to_string()))?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

/// Full chain verification by webpki; the name check is skipped only when
/// `ssl.endpoint.identification.algorithm` is empty (as in Kafka).
#[derive(Debug)]
struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    verify_hostname: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.verify_hostname => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
