//! DescribeAcls, CreateAcls and DeleteAcls at the listener: the
//! cluster-level authorization Kafka's `AclApis` checks (DESCRIBE for a
//! listing, ALTER for a change), then the answers of `security::acls`
//! over the agent's ACL store (enforced by `security::authorizer` when
//! `authorizer = "acl"`).

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};

use super::connection::ClientConnection;
use super::handlers::str;
use crate::security::acls::{self, AclOperation};
use ringmirror_protocol::error_codes as ec;

/// The message of every refusal here, as Kafka's.
const CLUSTER_AUTHORIZATION_FAILED_MESSAGE: &str = "Cluster authorization failed.";

/// DescribeAcls: the stored ACLs the request's filter matches; DESCRIBE on
/// the cluster (Kafka's `AclApis.handleDescribeAcls`).
pub(super) fn describe_acls(conn: &ClientConnection, r: &DescribeAclsRequest) -> DescribeAclsResponse {
    if conn.authorized_cluster(AclOperation::Describe) {
        acls::describe_acls_response(&conn.acls, r)
    } else {
        DescribeAclsResponse::default()
            .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(str(CLUSTER_AUTHORIZATION_FAILED_MESSAGE)))
    }
}

/// CreateAcls; ALTER on the cluster (Kafka's `AclApis.handleCreateAcls`).
pub(super) fn create_acls(conn: &ClientConnection, r: &CreateAclsRequest) -> CreateAclsResponse {
    if conn.authorized_cluster(AclOperation::Alter) {
        return acls::create_acls_response(&conn.acls, r, conn.authz.enabled());
    }
    let results = r
        .creations
        .iter()
        .map(|_| {
            AclCreationResult::default()
                .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(Some(str(CLUSTER_AUTHORIZATION_FAILED_MESSAGE)))
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// DeleteAcls; ALTER on the cluster (Kafka's `AclApis.handleDeleteAcls`).
pub(super) fn delete_acls(conn: &ClientConnection, r: &DeleteAclsRequest) -> DeleteAclsResponse {
    if conn.authorized_cluster(AclOperation::Alter) {
        return acls::delete_acls_response(&conn.acls, r, conn.authz.enabled());
    }
    let results = r
        .filters
        .iter()
        .map(|_| {
            DeleteAclsFilterResult::default()
                .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(Some(str(CLUSTER_AUTHORIZATION_FAILED_MESSAGE)))
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
