//! SASL client mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
//! RFC 7677). Pure message builders so they can be tested against the RFC
//! vectors; the exchange itself runs in `conn.rs` over SaslAuthenticate.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::config::SaslMechanism;

/// The PLAIN initial response: `authzid \0 authcid \0 passwd` with an empty authzid.
pub(crate) fn plain_message(username: &str, password: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(username.len() + password.len() + 2);
    v.push(0);
    v.extend_from_slice(username.as_bytes());
    v.push(0);
    v.extend_from_slice(password.as_bytes());
    v
}

/// SCRAM client state between messages.
pub(crate) struct Scram {
    mechanism: SaslMechanism,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    server_signature: Vec<u8>,
}

fn saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

impl Scram {
    pub(crate) fn new(
        mechanism: SaslMechanism,
        username: &str,
        password: &str,
        client_nonce: String,
    ) -> Self {
        let client_first_bare = format!("n={},r={}", saslname(username), client_nonce);
        Scram {
            mechanism,
            password: password.to_owned(),
            client_nonce,
            client_first_bare,
            server_signature: Vec::new(),
        }
    }

    /// A fresh random printable nonce.
    pub(crate) fn random_nonce() -> String {
        use rand::RngCore;
        let mut b = [0u8; 24];
        rand::rng().fill_bytes(&mut b);
        B64.encode(b).replace(',', "-")
    }

    pub(crate) fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Computes the client-final message from the server-first message.
    pub(crate) fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "server-first is not UTF-8".to_owned())?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for part in server_first.split(',') {
            if let Some(v) = part.strip_prefix("r=") {
                nonce = Some(v);
            } else if let Some(v) = part.strip_prefix("s=") {
                salt = Some(B64.decode(v).map_err(|e| format!("bad salt: {e}"))?);
            } else if let Some(v) = part.strip_prefix("i=") {
                iterations = Some(
                    v.parse::<u32>()
                        .map_err(|e| format!("bad iteration count: {e}"))?,
                );
            } else if let Some(v) = part.strip_prefix("e=") {
                return Err(format!("server error: {v}"));
            }
        }
        let (nonce, salt, iterations) = match (nonce, salt, iterations) {
            (Some(n), Some(s), Some(i)) => (n, s, i),
            _ => return Err(format!("malformed server-first message `{server_first}`")),
        };
        if !nonce.starts_with(&self.client_nonce) {
            return Err("server nonce does not extend the client nonce".to_owned());
        }
        if iterations < 4096 {
            return Err(format!(
                "iteration count {iterations} is below the minimum 4096"
            ));
        }
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, server_first, without_proof
        );
        let (proof, server_sig) = match self.mechanism {
            SaslMechanism::ScramSha256 => {
                compute_sha256(&self.password, &salt, iterations, &auth_message)
            }
            SaslMechanism::ScramSha512 => {
                compute_sha512(&self.password, &salt, iterations, &auth_message)
            }
            SaslMechanism::Plain => unreachable!("PLAIN is not SCRAM"),
        };
        self.server_signature = server_sig;
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server must prove it knows the
    /// stored key too, otherwise we might be talking to an impostor.
    pub(crate) fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let s = std::str::from_utf8(server_final)
            .map_err(|_| "server-final is not UTF-8".to_owned())?;
        if let Some(e) = s.strip_prefix("e=") {
            return Err(format!("server error: {e}"));
        }
        let v = s
            .split(',')
            .find_map(|p| p.strip_prefix("v="))
            .ok_or_else(|| format!("malformed server-final message `{s}`"))?;
        let v = B64
            .decode(v)
            .map_err(|e| format!("bad server signature: {e}"))?;
        if v != self.server_signature {
            return Err("server signature mismatch".to_owned());
        }
        Ok(())
    }
}

macro_rules! scram_compute {
    ($name:ident, $digest:ty) => {
        fn $name(
            password: &str,
            salt: &[u8],
            iterations: u32,
            auth_message: &str,
        ) -> (Vec<u8>, Vec<u8>) {
            type H = Hmac<$digest>;
            let mut salted = vec![0u8; <$digest as Digest>::output_size()];
            pbkdf2::pbkdf2::<H>(password.as_bytes(), salt, iterations, &mut salted)
                .expect("hmac accepts any key length");
            let hmac = |key: &[u8], msg: &[u8]| -> Vec<u8> {
                let mut m = <H as Mac>::new_from_slice(key).expect("any key length");
                m.update(msg);
                m.finalize().into_bytes().to_vec()
            };
            let client_key = hmac(&salted, b"Client Key");
            let stored_key = <$digest>::digest(&client_key).to_vec();
            let client_signature = hmac(&stored_key, auth_message.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&client_signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let server_key = hmac(&salted, b"Server Key");
            let server_signature = hmac(&server_key, auth_message.as_bytes());
            (proof, server_signature)
        }
    };
}

scram_compute!(compute_sha256, Sha256);
scram_compute!(compute_sha512, Sha512);

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3 test vector.
    #[test]
    fn scram_sha256_rfc7677() {
        let mut s = Scram::new(
            SaslMechanism::ScramSha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(s.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let fin = s
            .client_final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        s.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(s.verify_server_final(b"v=AAAA").is_err());
        assert!(s.verify_server_final(b"e=invalid-proof").is_err());
    }

    #[test]
    fn scram_rejects_foreign_nonce() {
        let mut s = Scram::new(SaslMechanism::ScramSha512, "u", "p", "abc".into());
        assert!(s.client_final(b"r=xyz,s=QUJD,i=4096").is_err());
    }

    #[test]
    fn plain() {
        assert_eq!(plain_message("a", "b"), b"\0a\0b");
    }
}
