//! TLS on our listener (a Kafka SSL / SASL_SSL listener): every accepted
//! connection does a rustls handshake with the listener's certificate
//! before its first request. Record bytes then go through a buffer and
//! rustls instead of sendfile. Client certificates are not asked for.

use std::path::Path;
use std::sync::Arc;

use futures_rustls::TlsAcceptor;
use glommio::net::TcpStream;
pub use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::transport::Transport;

/// The listener's TLS settings from its certificate chain and unencrypted
/// private key (PEM files), read once at start.
pub fn server_config(certificate: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("{}: {e}", certificate.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in the file", certificate.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    // The key must match the certificate: checked by with_single_cert.
    let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", certificate.display()))?;
    Ok(Arc::new(config))
}

/// The handshake of an accepted connection.
pub(super) async fn accept(config: &Arc<ServerConfig>, stream: TcpStream) -> std::io::Result<Transport> {
    let tls = TlsAcceptor::from(Arc::clone(config)).accept(stream).await?;
    Ok(Transport::Tls(Box::new(futures_rustls::TlsStream::Server(tls))))
}
