//! TLS with rustls: server verification always on (chain against the
//! configured PEM trust store), host name check as Kafka's
//! `ssl.endpoint.identification.algorithm` says, optional client certificate.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;

use super::config::{config_err, TlsConfig};
use super::error::Result;

/// Builds the rustls client configuration; errors name the Kafka key whose
/// content is wrong.
pub(crate) fn build_client_config(tls: &TlsConfig) -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    if tls.trusted_certs_pem.is_empty() {
        return Err(config_err(
            "ssl.truststore.location",
            "a PEM trust store (ssl.truststore.location or ssl.truststore.certificates) is required for SSL",
        ));
    }
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(&tls.trusted_certs_pem) {
        let cert =
            cert.map_err(|e| config_err("ssl.truststore.location", &format!("bad PEM: {e}")))?;
        roots.add(cert).map_err(|e| {
            config_err(
                "ssl.truststore.location",
                &format!("unusable certificate: {e}"),
            )
        })?;
        n += 1;
    }
    if n == 0 {
        return Err(config_err(
            "ssl.truststore.location",
            "no CERTIFICATE found in the PEM",
        ));
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| config_err("ssl.truststore.location", &e.to_string()))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| config_err("ssl.protocol", &e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier {
            inner: webpki,
            verify_hostname: tls.verify_hostname,
        }));
    let config = match (&tls.client_cert_chain_pem, &tls.client_key_pem) {
        (Some(chain), Some(key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| {
                    config_err(
                        "ssl.keystore.location",
                        &format!("bad PEM certificate chain: {e}"),
                    )
                })?;
            if certs.is_empty() {
                return Err(config_err(
                    "ssl.keystore.location",
                    "no CERTIFICATE found in the keystore PEM",
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                config_err(
                    "ssl.keystore.key",
                    &format!("no usable unencrypted private key: {e}"),
                )
            })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| config_err("ssl.keystore.key", &e.to_string()))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
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
            Err(rustls::Error::InvalidCertificate(e))
                if !self.verify_hostname && format!("{e:?}").starts_with("NotValidForName") =>
            {
                Ok(ServerCertVerified::assertion())
            }
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
