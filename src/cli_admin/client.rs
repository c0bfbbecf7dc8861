//! The admin API's blocking HTTP client (ureq; rustls for `https://`),
//! its token and CA file, and how refusals read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use ringmirror_control::admin::ErrorBody;
use ringmirror_control::admin::http::AdminToken;
use rustls::pki_types::CertificateDer;
use serde_json::Value;

use super::AdminArgs;

/// The environment variable naming the admin API's URL.
pub const ADMIN_ENV: &str = "RINGMIRROR_ADMIN";

/// The environment variable naming the file that holds the admin API's
/// bearer token.
pub const ADMIN_TOKEN_FILE_ENV: &str = "RINGMIRROR_ADMIN_TOKEN_FILE";

/// The environment variable naming the PEM file of the CAs that sign the
/// admin API's certificate.
pub const ADMIN_CA_LOCATION_ENV: &str = "RINGMIRROR_ADMIN_CA_LOCATION";

/// How long connecting to the admin API may take (TLS handshake included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A blocking client of the admin API.
pub struct AdminClient {
    pub(super) base: String,
    http: ureq::Agent,
    /// Sent as `Authorization: Bearer` with every request, when set.
    token: Option<AdminToken>,
}

impl AdminClient {
    /// The client `args` describe: `--admin` (see [`new`](Self::new)) and
    /// the token in `--admin-token-file`, else in the file
    /// `$RINGMIRROR_ADMIN_TOKEN_FILE` names, else none.
    pub fn from_args(args: &AdminArgs) -> anyhow::Result<Self> {
        let from_env = |name: &str| {
            std::env::var_os(name)
                .filter(|path| !path.is_empty())
                .map(PathBuf::from)
        };
        let token_file = args.admin_token_file.clone().or_else(|| from_env(ADMIN_TOKEN_FILE_ENV));
        let ca_location = args
            .admin_ca_location
            .clone()
            .or_else(|| from_env(ADMIN_CA_LOCATION_ENV));
        let mut client = Self::new(args.admin.as_deref());
        if let Some(path) = &ca_location {
            client = client.with_ca_location(path)?;
        }
        Ok(match token_file {
            Some(path) => client.with_token(AdminToken::read_file(&path)?),
            None => client,
        })
    }

    /// Sends `token` as a bearer token with every request.
    pub fn with_token(mut self, token: AdminToken) -> Self {
        self.token = Some(token);
        self
    }

    /// `url`: the `--admin` flag; else `$RINGMIRROR_ADMIN`; else the
    /// default address. A URL without a scheme is taken as `http://`; an
    /// `https://` one trusts the system's CA store (none read: every
    /// certificate is refused) unless [`with_ca_location`](Self::with_ca_location).
    pub fn new(url: Option<&str>) -> Self {
        let url = url
            .map(str::to_owned)
            .or_else(|| std::env::var(ADMIN_ENV).ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| format!("http://{}", ringmirror_control::admin::http::DEFAULT_ADDRESS));
        let base = if url.contains("://") {
            url
        } else {
            format!("http://{url}")
        };
        let base = base.trim_end_matches('/').to_owned();
        let roots = if base.starts_with("https://") {
            ringmirror_dataplane::client::ca_certificates(None).unwrap_or_default()
        } else {
            Vec::new()
        };
        Self {
            http: http_agent(&base, &roots),
            base,
            token: None,
        }
    }

    /// Trusts the CAs of the PEM file `path` for an `https://` URL (read
    /// here: a bad file fails before anything is sent).
    pub fn with_ca_location(mut self, path: &Path) -> anyhow::Result<Self> {
        let roots = ringmirror_dataplane::client::ca_certificates(Some(path))
            .map_err(anyhow::Error::msg)
            .context("the admin API's CA file (--admin-ca-location)")?;
        self.http = http_agent(&self.base, &roots);
        Ok(self)
    }

    /// One request; the JSON answer, or the server's message as the error.
    pub fn request(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder().method(method).uri(&url);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        if let Some(token) = &self.token {
            // ureq drops it if a redirect leads elsewhere (the API never redirects).
            request = request.header("authorization", token.authorization());
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = request
            .body(body)
            .with_context(|| format!("bad admin API URL {url:?}"))?;
        let mut response = self
            .http
            .run(request)
            .with_context(|| format!("cannot reach the admin API at {}", self.base))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .with_context(|| format!("reading the answer to {method} {url}"))?;
        if status == 401 {
            let reason = match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => e.message,
                Err(_) => text.trim().to_owned(),
            };
            match self.token {
                Some(_) => bail!("the admin API at {} refused the token: {reason} (HTTP 401)", self.base),
                None => bail!(
                    "the admin API at {} requires a token: {reason} (HTTP 401); give the file holding it \
                     with --admin-token-file PATH or ${ADMIN_TOKEN_FILE_ENV}",
                    self.base
                ),
            }
        }
        if status == 403 {
            match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => bail!("{}: {} (HTTP 403)", e.error, e.message),
                Err(_) => bail!("HTTP 403 from {method} {url}: {}", text.trim()),
            }
        }
        if status >= 400 {
            match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => bail!("{} (HTTP {status})", e.message),
                Err(_) => bail!("HTTP {status} from {method} {url}: {}", text.trim()),
            }
        }
        serde_json::from_str(&text).with_context(|| format!("the answer to {method} {url} is not JSON: {text}"))
    }
}

/// The HTTP client of `base`: over HTTPS, rustls (ring) trusting `roots`.
fn http_agent(base: &str, roots: &[CertificateDer<'static>]) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        // The server gives the coordinator 30 s; leave room for that answer.
        .timeout_global(Some(
            ringmirror_control::admin::http::REPLY_TIMEOUT + Duration::from_secs(10),
        ));
    if base.starts_with("https://") {
        let roots = roots.iter().map(|der| ureq::tls::Certificate::from_der(der).to_owned());
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .provider(ureq::tls::TlsProvider::Rustls)
                .root_certs(ureq::tls::RootCerts::from(roots))
                .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .build(),
        );
    }
    config.build().into()
}
