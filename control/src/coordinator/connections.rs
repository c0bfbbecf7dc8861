//! The control plane's Kafka connections: to each mirror's source (any
//! bootstrap server, the mirror's SASL and TLS settings) and to our own
//! listener, with short timeouts, since operator requests wait behind them.

use ringmirror_dataplane::client::{ClientError, Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::{SourceMetadata, fetch_source_metadata};

use super::{CONTROL_CONNECT_TIMEOUT, CONTROL_IO_TIMEOUT, Core, Mirror};

impl Core {
    /// Our own listener (for group offsets and ACLs), connected if need be.
    pub(super) async fn listener_connection(&mut self, name: &str) -> Option<&mut Connection> {
        let addr = self.listener_addr.clone()?;
        if self.listener_conn.is_none() {
            let options = ConnectionOptions {
                sasl: self.listener_sasl.clone(),
                tls: self.listener_tls.clone(),
                ..control_options("sync")
            };
            match Connection::connect(&addr, options).await {
                Ok(c) => self.listener_conn = Some(c),
                Err(e) => {
                    tracing::warn!(mirror = name, error = %e, "cannot reach our own listener");
                    return None;
                }
            }
        }
        self.listener_conn.as_mut()
    }
}

impl Core {
    /// Drops every connection of the control plane (a request on one may
    /// have been abandoned halfway): the next use connects afresh.
    pub(super) fn forget_connections(&mut self) {
        for m in self.mirrors.values_mut() {
            m.conn = None;
        }
        self.listener_conn = None;
    }
}

/// Connection settings for the control plane's requests.
fn control_options(what: &str) -> ConnectionOptions {
    ConnectionOptions {
        client_id: format!("ringmirror-{what}"),
        connect_timeout: CONTROL_CONNECT_TIMEOUT,
        io_timeout: CONTROL_IO_TIMEOUT,
        ..ConnectionOptions::default()
    }
}

/// How the control plane connects to a mirror's source.
pub(super) fn source_options(m: &Mirror) -> ConnectionOptions {
    ConnectionOptions {
        sasl: m.record.config.sasl_client(),
        tls: m.record.config.tls_client(),
        ..control_options(&format!("{}-control", m.record.config.name))
    }
}

pub(super) async fn connection(m: &mut Mirror) -> Result<&mut Connection, ClientError> {
    if m.conn.is_none() {
        let options = source_options(m);
        let mut last = None;
        for addr in &m.record.config.bootstrap_servers {
            match Connection::connect(addr, options.clone()).await {
                Ok(c) => {
                    m.conn = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if m.conn.is_none() {
            return Err(last.unwrap_or(ClientError::Resolve {
                addr: "no bootstrap servers".into(),
            }));
        }
    }
    Ok(m.conn.as_mut().expect("connected"))
}

pub(super) async fn source_metadata(m: &mut Mirror) -> Result<SourceMetadata, ClientError> {
    let topics = m.selection.request_topics();
    let conn = connection(m).await?;
    fetch_source_metadata(conn, topics.as_deref()).await
}
