//! The listener's answers to DescribeAcls, CreateAcls and DeleteAcls over
//! the [`AclStore`], per Kafka (KRaft's `AclControlManager`; the rules are
//! listed in the module documentation of [`super`]).

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};

use super::{AclBinding, AclBindingFilter, AclStore, PatternType, ResourceType, codes, str};

/// DescribeAcls: the bindings the request's filter matches, grouped by
/// resource. A filter with UNKNOWN elements matches nothing — what Kafka's
/// matcher makes of them (no binding has an UNKNOWN field) — and gets an
/// empty answer. Kafka refuses such a request outright (its parser closes
/// the connection); an empty answer keeps tools that send kafka-protocol's
/// defaults (operation and permission type 0) working.
pub fn describe_acls_response(store: &AclStore, request: &DescribeAclsRequest) -> DescribeAclsResponse {
    let filter = match AclBindingFilter::from_describe_request(request) {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(error = e, "DescribeAcls filter with UNKNOWN elements: nothing matches");
            return DescribeAclsResponse::default();
        }
    };
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    let mut last: Option<(ResourceType, String, PatternType)> = None;
    for b in store.describe(&filter) {
        let resource = (b.resource_type, b.resource_name.clone(), b.pattern_type);
        if last.as_ref() != Some(&resource) {
            resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(b.resource_type.code())
                    .with_resource_name(str(&b.resource_name))
                    .with_pattern_type(b.pattern_type.code()),
            );
            last = Some(resource);
        }
        let acl = AclDescription::default()
            .with_principal(str(&b.principal))
            .with_host(str(&b.host))
            .with_operation(b.operation.code())
            .with_permission_type(b.permission_type.code());
        resources.last_mut().expect("pushed above").acls.push(acl);
    }
    DescribeAclsResponse::default().with_resources(resources)
}

/// Why a listener without an authorizer refuses to change ClusterMirror
/// ACLs: they decide who manages mirrors through the admin API, and there
/// every Kafka client could grant itself that.
pub const LOCAL_ACLS_NEED_AUTHORIZER: &str = "ClusterMirror ACLs are changed through the admin API, \
     or on a listener with authorizer = \"acl\" (ALTER on the cluster)";

/// One creation's or deletion filter's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    Invalid(String),
    LocalAclsNeedAuthorizer,
}

impl Refusal {
    fn code_and_message(&self) -> (i16, &str) {
        match self {
            Self::Invalid(e) => (codes::INVALID_REQUEST, e),
            Self::LocalAclsNeedAuthorizer => (codes::CLUSTER_AUTHORIZATION_FAILED, LOCAL_ACLS_NEED_AUTHORIZER),
        }
    }
}

/// CreateAcls: one result per creation, in order — INVALID_REQUEST for a
/// binding Kafka would refuse, CLUSTER_AUTHORIZATION_FAILED for a
/// ClusterMirror binding unless `local_types_writable` (the listener
/// enforces ACLs), UNKNOWN_SERVER_ERROR for every valid one when the store
/// cannot write.
pub fn create_acls_response(
    store: &AclStore,
    request: &CreateAclsRequest,
    local_types_writable: bool,
) -> CreateAclsResponse {
    let parsed: Vec<Result<AclBinding, Refusal>> = request
        .creations
        .iter()
        .map(|c| {
            let binding = AclBinding::from_creation(c)
                .and_then(|b| b.validate().map(|()| b))
                .map_err(Refusal::Invalid)?;
            if binding.resource_type.is_local() && !local_types_writable {
                return Err(Refusal::LocalAclsNeedAuthorizer);
            }
            Ok(binding)
        })
        .collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let stored = store.create(&valid).map_err(|e| {
        tracing::error!(error = %e, "cannot store created ACLs");
        format!("cannot store the ACLs: {e}")
    });
    let results = parsed
        .into_iter()
        .map(|r| match (r, &stored) {
            (Err(refusal), _) => {
                let (code, message) = refusal.code_and_message();
                AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message(Some(str(message)))
            }
            (Ok(_), Err(e)) => AclCreationResult::default()
                .with_error_code(codes::UNKNOWN_SERVER_ERROR)
                .with_error_message(Some(str(e))),
            (Ok(_), Ok(_)) => AclCreationResult::default(),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// DeleteAcls: per filter, the bindings it matched and deleted;
/// INVALID_REQUEST for a filter with UNKNOWN elements, CLUSTER_AUTHORIZATION_FAILED
/// for a filter naming the ClusterMirror type unless `local_types_writable`
/// (as [`create_acls_response`]), UNKNOWN_SERVER_ERROR for every filter when
/// the store cannot write (nothing is deleted then).
pub fn delete_acls_response(
    store: &AclStore,
    request: &DeleteAclsRequest,
    local_types_writable: bool,
) -> DeleteAclsResponse {
    let parsed: Vec<Result<AclBindingFilter, Refusal>> = request
        .filters
        .iter()
        .map(|f| {
            let filter = AclBindingFilter::from_delete_filter(f)
                .map_err(|e| Refusal::Invalid(format!("the filter contains UNKNOWN elements: {e}")))?;
            if filter.resource_type.is_local() && !local_types_writable {
                return Err(Refusal::LocalAclsNeedAuthorizer);
            }
            Ok(filter)
        })
        .collect();
    let valid: Vec<AclBindingFilter> = parsed.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let deleted = store.delete(&valid).map_err(|e| {
        tracing::error!(error = %e, "cannot store deleted ACLs");
        format!("cannot store the deletion: {e}")
    });
    let mut matched = deleted.as_ref().ok().map(|m| m.iter());
    let results = parsed
        .into_iter()
        .map(|r| match (r, &deleted) {
            (Err(refusal), _) => {
                let (code, message) = refusal.code_and_message();
                DeleteAclsFilterResult::default()
                    .with_error_code(code)
                    .with_error_message(Some(str(message)))
            }
            (Ok(_), Err(e)) => DeleteAclsFilterResult::default()
                .with_error_code(codes::UNKNOWN_SERVER_ERROR)
                .with_error_message(Some(str(e))),
            (Ok(_), Ok(_)) => {
                let bindings = matched.as_mut().and_then(Iterator::next).cloned().unwrap_or_default();
                DeleteAclsFilterResult::default().with_matching_acls(
                    bindings
                        .iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type.code())
                                .with_resource_name(str(&b.resource_name))
                                .with_pattern_type(b.pattern_type.code())
                                .with_principal(str(&b.principal))
                                .with_host(str(&b.host))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission_type.code())
                        })
                        .collect(),
                )
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
