//! TLS to a source (Kafka's `security.protocol` SSL and SASL_SSL): rustls
//! over the connection's glommio socket. The server's certificate chain is
//! checked against a CA file of the mirror's (PEM), or the system's CA
//! store, and its name against the host the connection was opened to
//! (Kafka's `ssl.endpoint.identification.algorithm=https`, the default),
//! unless the mirror turns the name check off. A client certificate
//! (mutual TLS) is offered when the mirror names one and its key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_rustls::TlsConnector;
use futures_rustls::client::TlsStream;
use glommio::net::TcpStream;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How a connection sets up TLS.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsClientConfig {
    /// PEM file of the CA certificates to trust (`None`: the system's).
    pub ca_file: Option<PathBuf>,
    /// Check that the certificate names the host connected to.
    pub verify_hostname: bool,
    /// PEM files of our certificate chain and its (unencrypted) private
    /// key, offered to a server that asks for one.
    pub client_cert: Option<ClientCertFiles>,
    /// Trust exactly the first certificate of this PEM file, whatever its
    /// name or issuer (the agent's connections to its own listener, which
    /// serves that certificate); `ca_file` and the name check do not apply.
    pub pinned_certificate: Option<PathBuf>,
}

/// Where a client certificate and its key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

impl ClientCertFiles {
    fn load(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.certificate)
            .and_then(|certs| certs.collect())
            .map_err(|e| format!("ssl_certificate_location {}: {e}", self.certificate.display()))?;
        if chain.is_empty() {
            return Err(format!(
                "ssl_certificate_location {}: no certificate in the file",
                self.certificate.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| format!("ssl_key_location {}: {e}", self.key.display()))?;
        Ok((chain, key))
    }
}

impl TlsClientConfig {
    /// A rustls client config: the trust anchors are read at each call, so
    /// a rotated CA file applies from the next connection on.
    fn rustls_config(&self) -> Result<Arc<ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?;
        let algorithms = provider.signature_verification_algorithms;
        let custom = |check| Arc::new(CustomCheck { check, algorithms });
        let builder = if let Some(path) = &self.pinned_certificate {
            let pinned = CertificateDer::pem_file_iter(path)
                .and_then(|mut certs| certs.next().transpose())
                .map_err(|e| format!("{}: {e}", path.display()))?
                .ok_or_else(|| format!("{}: no certificate in the file", path.display()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(custom(Check::Pinned(pinned)))
        } else if self.verify_hostname {
            builder.with_root_certificates(Arc::new(self.roots()?))
        } else {
            let chain_only = WebPkiServerVerifier::builder_with_provider(Arc::new(self.roots()?), provider)
                .build()
                .map_err(|e| format!("TLS certificate verifier: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(custom(Check::AnyName(chain_only)))
        };
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some(files) => {
                let (chain, key) = files.load()?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("ssl_certificate_location/ssl_key_location: {e}"))?
            }
        };
        Ok(Arc::new(config))
    }

    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        let certs = ca_certificates(self.ca_file.as_deref()).map_err(|e| match &self.ca_file {
            Some(_) => format!("ssl_ca_location {e}"),
            None => format!("{e}; set ssl_ca_location"),
        })?;
        roots.add_parsable_certificates(certs);
        Ok(roots)
    }
}

/// The CA certificates to trust: those of the PEM file `ca_file` (the
/// error starts with its path), else of the system's store; an error when
/// there is none that parses.
pub fn ca_certificates(ca_file: Option<&Path>) -> Result<Vec<CertificateDer<'static>>, String> {
    let parsable = |certs: Vec<CertificateDer<'static>>| {
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certs.iter().cloned());
        (added > 0).then_some(certs)
    };
    match ca_file {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            parsable(certs).ok_or_else(|| format!("{}: no CA certificate in the file", path.display()))
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let errors = found.errors.len();
            parsable(found.certs)
                .ok_or_else(|| format!("no CA certificate in the system's store ({errors} error(s) reading it)"))
        }
    }
}

/// TLS over `stream`, to the server `host` (a DNS name or an IP address).
pub(super) async fn handshake(
    config: &TlsClientConfig,
    host: &str,
    stream: TcpStream,
) -> Result<TlsStream<TcpStream>, std::io::Error> {
    let rustls_config = config.rustls_config().map_err(std::io::Error::other)?;
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("TLS server name {host}: {e}")))?;
    TlsConnector::from(rustls_config).connect(name, stream).await
}

/// A server certificate check rustls does not have built in; the
/// handshake's signatures are checked as usual.
#[derive(Debug)]
struct CustomCheck {
    check: Check,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

#[derive(Debug)]
enum Check {
    /// The chain checked, the name not (Kafka's empty
    /// `ssl.endpoint.identification.algorithm`).
    AnyName(Arc<WebPkiServerVerifier>),
    /// Exactly this certificate, whatever its name or issuer.
    Pinned(CertificateDer<'static>),
}

impl ServerCertVerifier for CustomCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.check {
            Check::AnyName(chain) => {
                match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
                    Err(rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                    )) => Ok(ServerCertVerified::assertion()),
                    other => other,
                }
            }
            Check::Pinned(pinned) if end_entity.as_ref() == pinned.as_ref() => Ok(ServerCertVerified::assertion()),
            Check::Pinned(_) => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let config = TlsClientConfig {
            ca_file: Some(path.clone()),
            verify_hostname: true,
            client_cert: None,
            pinned_certificate: None,
        };
        let err = config.rustls_config().unwrap_err();
        assert!(err.contains("no CA certificate") && err.contains("empty.pem"), "{err}");
        let missing = TlsClientConfig {
            ca_file: Some(dir.path().join("missing.pem")),
            verify_hostname: false,
            client_cert: None,
            pinned_certificate: None,
        };
        let err = missing.rustls_config().unwrap_err();
        assert!(
            err.starts_with("ssl_ca_location") && err.contains("missing.pem"),
            "{err}"
        );
    }
}
