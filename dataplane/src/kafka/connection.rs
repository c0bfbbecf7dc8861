//! A client connection as its handlers see it: who is on the other end
//! (address, principal), what the shard offers them (the served
//! partitions, the catalog, the mirror reports, the ACLs and authorizer)
//! and the state the connection keeps between requests (its fetch
//! session, its SASL exchange). It holds no socket: handlers return a
//! [`Response`](super::response::Response) and the session in
//! `listener.rs` writes it.

use std::rc::Rc;
use std::sync::Arc;

use super::fetch::FetchSession;
use super::listener::ListenerSettings;
use super::sasl::ConnectionAuth;
use crate::partition::catalog::CatalogView;
use crate::partition::mirror_reports::MirrorReportsHandle;
use crate::partition::registry::ShardAccess;
use crate::security::acls::{AclOperation, AclStore, ResourceType};
use crate::security::authorizer::ShardAuthorizer;

/// One client connection and what its handlers need.
pub struct ClientConnection {
    pub(super) peer: String,
    pub settings: Rc<ListenerSettings>,
    pub access: ShardAccess,
    pub catalog: CatalogView,
    /// What the control plane reports of each mirror (DescribeClusterMirrors).
    pub mirror_reports: Arc<MirrorReportsHandle>,
    /// The agent's ACLs (DescribeAcls, CreateAcls, DeleteAcls).
    pub acls: Arc<AclStore>,
    /// This shard's authorizer.
    pub authz: Rc<ShardAuthorizer>,
    /// This connection's incremental fetch session, if the client made one.
    pub fetch_session: Option<FetchSession>,
    /// Its SASL state and principal (`User:ANONYMOUS` without SASL).
    pub auth: ConnectionAuth,
}

impl ClientConnection {
    pub(super) fn new(
        peer: String,
        settings: Rc<ListenerSettings>,
        access: ShardAccess,
        mirror_reports: Arc<MirrorReportsHandle>,
        acls: Arc<AclStore>,
        authz: Rc<ShardAuthorizer>,
    ) -> Self {
        let catalog = CatalogView::new(access.local.catalog());
        let auth = ConnectionAuth::new(settings.sasl.as_ref());
        Self {
            peer,
            settings,
            access,
            catalog,
            mirror_reports,
            acls,
            authz,
            fetch_session: None,
            auth,
        }
    }

    /// The client's address, as Kafka shows it (`/ip` in DescribeGroups).
    pub fn peer_host(&self) -> String {
        match self.peer.rsplit_once(':') {
            Some((host, _)) => format!("/{}", host.trim_start_matches('[').trim_end_matches(']')),
            None => self.peer.clone(),
        }
    }

    /// The client's IP address, as ACL hosts name it.
    pub fn peer_ip(&self) -> &str {
        match self.peer.rsplit_once(':') {
            Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
            None => &self.peer,
        }
    }

    /// Whether ACLs are enforced against this connection's principal (an
    /// authorizer is on and the principal is not a super user).
    pub fn authz_restricted(&self) -> bool {
        !self.authz.is_super(self.auth.principal())
    }

    /// Whether this connection's principal may do `operation` on the
    /// resource (always, without an authorizer).
    pub fn authorized(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.authz
            .authorize(self.auth.principal(), self.peer_ip(), operation, resource_type, name)
    }

    /// [`Self::authorized`] on the cluster resource.
    pub fn authorized_cluster(&self, operation: AclOperation) -> bool {
        self.authorized(
            operation,
            ResourceType::Cluster,
            crate::security::acls::CLUSTER_RESOURCE_NAME,
        )
    }

    /// Whether an idempotent producer may get a producer id: IDEMPOTENT_WRITE
    /// on the cluster, or WRITE on some topic (Kafka's
    /// `handleInitProducerIdRequest`, `authorizeByResourceType`).
    pub fn authorized_idempotent_write(&self) -> bool {
        self.authorized_cluster(AclOperation::IdempotentWrite)
            || self.authz.authorize_any(
                self.auth.principal(),
                self.peer_ip(),
                AclOperation::Write,
                ResourceType::Topic,
            )
    }
}
