//! ACL sync (issue 6; DESIGN.md, "MirrorMetadataManager"): once per
//! metadata round, the destination's ACLs follow the source's, so the same
//! principals may do the same things on the mirror — within the mirror's
//! ACL include setting ([`AclFilterSetting`]).
//!
//! One round ([`sync_acls`]):
//!
//! 1. **Source**: DescribeAcls with a filter that matches everything (v1–3,
//!    the highest both sides speak). A source that does not serve
//!    DescribeAcls (ApiVersions does not list it, or only v0, as
//!    librdkafka's mock cluster and brokers before 2.0), or that answers
//!    SECURITY_DISABLED (a Kafka broker without an authorizer), is reported
//!    as not supporting ACLs ([`AclSyncReport::unsupported`]) and nothing
//!    changes. Any other error code is reported and nothing changes either:
//!    an ACL list we did not get must never look like an empty one.
//! 2. **Destination** (our listener): DescribeAcls the same way.
//! 3. **Compare** the two, each restricted to the bindings the include
//!    setting selects: a selected source binding missing at the destination
//!    is created (CreateAcls), a selected destination binding the source
//!    does not have is deleted (DeleteAcls, one exact filter per binding,
//!    so nothing else can match). Destination bindings outside the setting
//!    are never touched: ACLs made at the destination for its own use stay.
//!
//! **ClusterMirror ACLs are never synced** (as in the KIP's prototype,
//! which skips them when it deletes): they say who may manage this agent's
//! mirrors, a local matter. Neither side's ANY listing shows them
//! ([`ResourceType::is_local`]), so they are never created nor deleted
//! here, and an include rule naming the type is refused.
//!
//! Bindings are compared whole (resource type, name, pattern type,
//! principal, host, operation, permission type): a changed ACL at the
//! source is one deletion and one creation. A source binding with a code
//! this version does not know (a newer operation) is reported and skipped.
//!
//! The destination has one set of ACLs, and each mirror's round makes the
//! part its include setting selects equal to its own source's: two mirrors
//! whose settings overlap, from sources whose ACLs differ there, undo each
//! other's work every round. Give such mirrors disjoint settings (or
//! [`AclFilterSetting::none`] to all but one).
//!
//! Errors: a failure of the `source` or `destination` connection itself
//! (I/O, framing), or a destination that cannot take the ACL APIs (no
//! common version), ends the round with `Err`, so the caller reconnects;
//! error codes (per creation, per deletion, or for a whole listing) are in
//! the report.
//!
//! Our listener stores and serves the ACLs (`ringmirror_dataplane::security::acls`)
//! and enforces them with `authorizer = "acl"`, for the principals its SASL
//! authentication establishes (`ringmirror_dataplane::security::authorizer`).

use std::collections::BTreeSet;

use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use regex::Regex;
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_dataplane::security::acls::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType, codes,
};
use serde::{Deserialize, Serialize};

/// The ACL API versions used here (ours; the highest both sides speak wins).
const DESCRIBE_ACLS_VERSIONS: (i16, i16) = (1, 3);
const CREATE_ACLS_VERSIONS: (i16, i16) = (1, 3);
const DELETE_ACLS_VERSIONS: (i16, i16) = (1, 3);
/// Creations, or deletion filters, per request.
const ACLS_PER_REQUEST: usize = 1000;
/// Why nothing was compared, when the source cannot list its ACLs.
pub const SOURCE_WITHOUT_DESCRIBE_ACLS: &str = "the source does not serve DescribeAcls (v1 or later)";
pub const SOURCE_WITHOUT_AUTHORIZER: &str = "the source has no authorizer (SECURITY_DISABLED)";

/// One rule of a mirror's ACL include setting: the bindings it selects.
/// Every field is optional and matches anything when left out; the enum
/// fields take Kafka's names, case-insensitive (`topic`, `TRANSACTIONAL_ID`,
/// `prefixed`, `read`, `allow`, …; `any` is the default).
///
/// ```toml
/// [[mirror.acls_include]]
/// resource_type = "topic"
/// resource_name = "orders\\..*"   # regex on the whole resource name
/// [[mirror.acls_include]]
/// resource_type = "group"
/// principal = "User:app-.*"       # regex on the whole principal
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclIncludeRule {
    #[serde(default)]
    pub resource_type: ResourceType,
    /// A regex the whole resource name (as the binding spells it: a
    /// PREFIXED binding's prefix, a LITERAL binding's name or `*`) must
    /// match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// ANY (default), LITERAL or PREFIXED.
    #[serde(default)]
    pub pattern_type: PatternType,
    /// A regex the whole principal (`User:alice`) must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The host, exactly (`*` is a host like any other here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default)]
    pub operation: AclOperation,
    #[serde(default)]
    pub permission_type: AclPermissionType,
}

impl AclIncludeRule {
    /// Every binding of `resource_type` (ANY: every binding).
    pub fn resource(resource_type: ResourceType) -> Self {
        Self {
            resource_type,
            ..Self::default()
        }
    }

    /// The bindings of `resource_type` whose resource name matches the
    /// regex `name` (whole).
    pub fn named(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self {
            resource_type,
            resource_name: Some(name.into()),
            ..Self::default()
        }
    }
}

/// A mirror's ACL include setting: the ACL bindings that are synced, those
/// any rule selects; the rest are neither created nor deleted at the
/// destination. The default is every TOPIC and every GROUP binding (as in
/// the TOML below); an empty list syncs no ACLs.
///
/// ```toml
/// acls_include = [{ resource_type = "topic" }, { resource_type = "group" }]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AclFilterSetting {
    pub include: Vec<AclIncludeRule>,
}

impl Default for AclFilterSetting {
    fn default() -> Self {
        Self {
            include: vec![
                AclIncludeRule::resource(ResourceType::Topic),
                AclIncludeRule::resource(ResourceType::Group),
            ],
        }
    }
}

impl AclFilterSetting {
    /// Every ACL, of every resource type.
    pub fn all() -> Self {
        Self {
            include: vec![AclIncludeRule::default()],
        }
    }

    /// No ACL: ACL sync is off.
    pub fn none() -> Self {
        Self { include: Vec::new() }
    }

    /// The bindings any of `rules` selects.
    pub fn rules(rules: impl IntoIterator<Item = AclIncludeRule>) -> Self {
        Self {
            include: rules.into_iter().collect(),
        }
    }

    /// Checks the rules: valid regexes, no MATCH pattern type (a rule
    /// selects bindings by their own names).
    pub fn validate(&self) -> Result<(), String> {
        self.compile().map(drop)
    }

    /// The rules, ready to select bindings.
    pub fn compile(&self) -> Result<AclSelection, String> {
        let whole = |field: &str, i: usize, r: &Option<String>| {
            r.as_deref()
                .map(|r| Regex::new(&format!("^(?:{r})$")))
                .transpose()
                .map_err(|e| format!("acls include rule {i}: {field}: {e}"))
        };
        let rules = self
            .include
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                if rule.pattern_type == PatternType::Match {
                    return Err(format!(
                        "acls include rule {i}: pattern_type must be any, literal or prefixed"
                    ));
                }
                if rule.resource_type.is_local() {
                    return Err(format!(
                        "acls include rule {i}: {} ACLs are this agent's own (who may manage its \
                         mirrors) and never synced",
                        rule.resource_type
                    ));
                }
                Ok(CompiledRule {
                    filter: AclBindingFilter {
                        resource_type: rule.resource_type,
                        resource_name: None,
                        pattern_type: rule.pattern_type,
                        principal: None,
                        host: rule.host.clone(),
                        operation: rule.operation,
                        permission_type: rule.permission_type,
                    },
                    resource_name: whole("resource_name", i, &rule.resource_name)?,
                    principal: whole("principal", i, &rule.principal)?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(AclSelection { rules })
    }
}

#[derive(Debug, Clone)]
struct CompiledRule {
    /// The enum fields and the host.
    filter: AclBindingFilter,
    resource_name: Option<Regex>,
    principal: Option<Regex>,
}

/// A compiled [`AclFilterSetting`].
#[derive(Debug, Clone)]
pub struct AclSelection {
    rules: Vec<CompiledRule>,
}

impl AclSelection {
    /// Whether `binding` is synced.
    pub fn wants(&self, binding: &AclBinding) -> bool {
        self.rules.iter().any(|r| {
            r.filter.matches(binding)
                && r.resource_name
                    .as_ref()
                    .is_none_or(|n| n.is_match(&binding.resource_name))
                && r.principal.as_ref().is_none_or(|p| p.is_match(&binding.principal))
        })
    }
}

/// One round's result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AclSyncReport {
    /// Why the source's ACLs could not be compared (it serves no
    /// DescribeAcls, or has no authorizer); nothing was changed then.
    pub unsupported: Option<String>,
    /// Created at the destination this round.
    pub created: Vec<AclBinding>,
    /// Deleted at the destination this round.
    pub deleted: Vec<AclBinding>,
    /// Selected bindings already at the destination.
    pub unchanged: usize,
    /// Errors: a listing that failed (nothing changed then), a creation or
    /// deletion the destination refused, a source binding we cannot read.
    pub errors: Vec<String>,
}

impl AclSyncReport {
    /// Whether the source's ACLs could be compared.
    pub fn supported(&self) -> bool {
        self.unsupported.is_none()
    }

    /// Whether anything changed at the destination.
    pub fn changed(&self) -> bool {
        !self.created.is_empty() || !self.deleted.is_empty()
    }
}

/// Makes the destination's ACLs (those `include` selects) the source's;
/// see the module documentation.
///
/// `source` is a connection to any source broker (ACLs are cluster-wide);
/// `destination` one to our own listener. Returns `Err` only when one of
/// those two connections fails or the destination cannot take the ACL
/// APIs; the rest is in the report.
pub async fn sync_acls(
    source: &mut Connection,
    destination: &mut Connection,
    include: &AclFilterSetting,
) -> Result<AclSyncReport, ClientError> {
    let mut report = AclSyncReport::default();
    let selection = match include.compile() {
        Ok(s) => s,
        Err(e) => {
            report.errors.push(e);
            return Ok(report);
        }
    };
    if include.include.is_empty() {
        return Ok(report);
    }
    let Some(at_source) = describe_source(source, &mut report).await? else {
        return Ok(report);
    };
    let (min, max) = DESCRIBE_ACLS_VERSIONS;
    let version = destination.version_for::<DescribeAclsRequest>(min, max)?;
    let response = destination
        .request(&AclBindingFilter::any().to_describe_request(), version)
        .await?;
    if response.error_code != codes::NONE {
        report.errors.push(format!(
            "{}: DescribeAcls failed with error code {}{}",
            destination.addr(),
            response.error_code,
            message(response.error_message.as_deref())
        ));
        return Ok(report);
    }
    let (at_destination, unreadable) = AclBinding::from_describe_response(&response);
    report
        .errors
        .extend(unreadable.into_iter().map(|e| format!("{}: {e}", destination.addr())));
    let wanted: BTreeSet<AclBinding> = at_source.into_iter().filter(|b| selection.wants(b)).collect();
    let held: BTreeSet<AclBinding> = at_destination.into_iter().filter(|b| selection.wants(b)).collect();
    report.unchanged = wanted.intersection(&held).count();
    let missing: Vec<AclBinding> = wanted.difference(&held).cloned().collect();
    let extra: Vec<AclBinding> = held.difference(&wanted).cloned().collect();
    create(destination, &missing, &mut report).await?;
    delete(destination, &extra, &mut report).await?;
    tracing::debug!(
        created = report.created.len(),
        deleted = report.deleted.len(),
        unchanged = report.unchanged,
        errors = report.errors.len(),
        "ACLs synced"
    );
    Ok(report)
}

fn message(m: Option<&str>) -> String {
    m.filter(|m| !m.is_empty())
        .map(|m| format!(" ({m})"))
        .unwrap_or_default()
}

/// Every ACL binding at the source; `None` (with the report saying why)
/// when it cannot list them.
async fn describe_source(
    source: &mut Connection,
    report: &mut AclSyncReport,
) -> Result<Option<Vec<AclBinding>>, ClientError> {
    let (min, max) = DESCRIBE_ACLS_VERSIONS;
    let version = match source.version_for::<DescribeAclsRequest>(min, max) {
        Ok(v) => v,
        Err(_) => {
            tracing::debug!(
                source = source.addr(),
                "the source serves no DescribeAcls; ACLs not synced"
            );
            report.unsupported = Some(SOURCE_WITHOUT_DESCRIBE_ACLS.into());
            return Ok(None);
        }
    };
    let response = source
        .request(&AclBindingFilter::any().to_describe_request(), version)
        .await?;
    match response.error_code {
        codes::NONE => {}
        codes::SECURITY_DISABLED => {
            report.unsupported = Some(SOURCE_WITHOUT_AUTHORIZER.into());
            return Ok(None);
        }
        code => {
            let error = format!(
                "{}: DescribeAcls failed with error code {code}{}",
                source.addr(),
                message(response.error_message.as_deref())
            );
            tracing::warn!(error, "cannot list the source's ACLs; none changed");
            report.errors.push(error);
            return Ok(None);
        }
    }
    let (bindings, unreadable) = AclBinding::from_describe_response(&response);
    for e in unreadable {
        tracing::warn!(source = source.addr(), error = e, "skipping a source ACL");
        report.errors.push(format!("{}: {e}", source.addr()));
    }
    Ok(Some(bindings))
}

/// CreateAcls for `missing`, in batches; each result into the report.
async fn create(
    destination: &mut Connection,
    missing: &[AclBinding],
    report: &mut AclSyncReport,
) -> Result<(), ClientError> {
    if missing.is_empty() {
        return Ok(());
    }
    let (min, max) = CREATE_ACLS_VERSIONS;
    let version = destination.version_for::<CreateAclsRequest>(min, max)?;
    for chunk in missing.chunks(ACLS_PER_REQUEST) {
        let request = CreateAclsRequest::default().with_creations(chunk.iter().map(AclBinding::to_creation).collect());
        let response = destination.request(&request, version).await?;
        for (i, binding) in chunk.iter().enumerate() {
            match response.results.get(i) {
                Some(r) if r.error_code == codes::NONE => report.created.push(binding.clone()),
                Some(r) => report.errors.push(format!(
                    "create {binding}: error code {}{}",
                    r.error_code,
                    message(r.error_message.as_deref())
                )),
                None => report
                    .errors
                    .push(format!("create {binding}: no result in the response")),
            }
        }
    }
    Ok(())
}

/// DeleteAcls for `extra`, one exact filter each, in batches; each result
/// into the report.
async fn delete(
    destination: &mut Connection,
    extra: &[AclBinding],
    report: &mut AclSyncReport,
) -> Result<(), ClientError> {
    if extra.is_empty() {
        return Ok(());
    }
    let (min, max) = DELETE_ACLS_VERSIONS;
    let version = destination.version_for::<DeleteAclsRequest>(min, max)?;
    for chunk in extra.chunks(ACLS_PER_REQUEST) {
        let request =
            DeleteAclsRequest::default().with_filters(chunk.iter().map(AclBinding::to_delete_filter).collect());
        let response = destination.request(&request, version).await?;
        for (i, binding) in chunk.iter().enumerate() {
            let Some(result) = response.filter_results.get(i) else {
                report
                    .errors
                    .push(format!("delete {binding}: no result in the response"));
                continue;
            };
            if result.error_code != codes::NONE {
                report.errors.push(format!(
                    "delete {binding}: error code {}{}",
                    result.error_code,
                    message(result.error_message.as_deref())
                ));
                continue;
            }
            // The filter is exact: it matched this binding, or nothing
            // (deleted meanwhile by someone else).
            for acl in &result.matching_acls {
                if acl.error_code == codes::NONE {
                    report.deleted.push(binding.clone());
                } else {
                    report.errors.push(format!(
                        "delete {binding}: error code {}{}",
                        acl.error_code,
                        message(acl.error_message.as_deref())
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(resource_type: ResourceType, name: &str, pattern_type: PatternType, principal: &str) -> AclBinding {
        AclBinding::from_any_host(
            resource_type,
            name,
            pattern_type,
            principal,
            AclOperation::Read,
            AclPermissionType::Allow,
        )
    }

    fn bindings() -> Vec<AclBinding> {
        vec![
            binding(ResourceType::Topic, "orders", PatternType::Literal, "User:alice"),
            binding(ResourceType::Topic, "pay", PatternType::Prefixed, "User:bob"),
            binding(ResourceType::Group, "g1", PatternType::Literal, "User:app-1"),
            binding(
                ResourceType::Cluster,
                "kafka-cluster",
                PatternType::Literal,
                "User:admin",
            ),
            binding(ResourceType::TransactionalId, "tx", PatternType::Literal, "User:alice"),
        ]
    }

    fn selected(setting: &AclFilterSetting) -> Vec<usize> {
        let selection = setting.compile().unwrap();
        bindings()
            .iter()
            .enumerate()
            .filter(|(_, b)| selection.wants(b))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn the_default_is_every_topic_and_group_acl() {
        assert_eq!(selected(&AclFilterSetting::default()), [0, 1, 2]);
        assert_eq!(selected(&AclFilterSetting::all()), [0, 1, 2, 3, 4]);
        assert!(selected(&AclFilterSetting::none()).is_empty());
    }

    #[test]
    fn cluster_mirror_acls_are_never_selected() {
        let mirror_acl = binding(ResourceType::ClusterMirror, "*", PatternType::Literal, "User:ops");
        for setting in [
            AclFilterSetting::all(),
            AclFilterSetting::default(),
            AclFilterSetting::rules([AclIncludeRule::named(ResourceType::Any, ".*")]),
        ] {
            assert!(!setting.compile().unwrap().wants(&mirror_acl), "{setting:?}");
        }
        let by_type = AclFilterSetting::rules([AclIncludeRule::resource(ResourceType::ClusterMirror)]);
        let e = by_type.validate().unwrap_err();
        assert!(e.contains("CLUSTER_MIRROR ACLs are this agent's own"), "{e}");
    }

    #[test]
    fn rules_select_by_regex_and_kafka_fields() {
        let names = AclFilterSetting::rules([AclIncludeRule::named(ResourceType::Any, "or.*|g1")]);
        assert_eq!(selected(&names), [0, 2]);
        // Whole names: "pay" alone does not match "pa".
        let whole = AclFilterSetting::rules([AclIncludeRule::named(ResourceType::Topic, "pa")]);
        assert!(selected(&whole).is_empty());
        let prefixed = AclFilterSetting::rules([AclIncludeRule {
            pattern_type: PatternType::Prefixed,
            ..AclIncludeRule::default()
        }]);
        assert_eq!(selected(&prefixed), [1]);
        let principals = AclFilterSetting::rules([AclIncludeRule {
            principal: Some("User:(alice|app-.*)".into()),
            ..AclIncludeRule::resource(ResourceType::Group)
        }]);
        assert_eq!(selected(&principals), [2]);
        let deny = AclFilterSetting::rules([AclIncludeRule {
            permission_type: AclPermissionType::Deny,
            ..AclIncludeRule::default()
        }]);
        assert!(selected(&deny).is_empty());
        let bad = AclFilterSetting::rules([AclIncludeRule::named(ResourceType::Topic, "(")]);
        assert!(bad.validate().unwrap_err().contains("resource_name"));
        let matching = AclFilterSetting::rules([AclIncludeRule {
            pattern_type: PatternType::Match,
            ..AclIncludeRule::default()
        }]);
        assert!(matching.validate().is_err());
    }

    #[test]
    fn the_setting_reads_as_a_list_of_rules() {
        let setting: AclFilterSetting = serde_json::from_str(
            r#"[{"resource_type": "TOPIC", "resource_name": "orders\\..*"},
                {"resource_type": "transactional_id", "pattern_type": "prefixed", "permission_type": "allow"}]"#,
        )
        .unwrap();
        assert_eq!(
            setting.include,
            [
                AclIncludeRule::named(ResourceType::Topic, "orders\\..*"),
                AclIncludeRule {
                    pattern_type: PatternType::Prefixed,
                    permission_type: AclPermissionType::Allow,
                    ..AclIncludeRule::resource(ResourceType::TransactionalId)
                },
            ]
        );
        let round_trip: AclFilterSetting =
            serde_json::from_value(serde_json::to_value(AclFilterSetting::default()).unwrap()).unwrap();
        assert_eq!(round_trip, AclFilterSetting::default());
        assert_eq!(
            serde_json::to_string(&AclFilterSetting::default()).unwrap(),
            r#"[{"resource_type":"topic","pattern_type":"any","operation":"any","permission_type":"any"},{"resource_type":"group","pattern_type":"any","operation":"any","permission_type":"any"}]"#
        );
        assert!(serde_json::from_str::<AclFilterSetting>(r#"[{"resource_type": "table"}]"#).is_err());
        assert!(serde_json::from_str::<AclFilterSetting>(r#"[{"name": "x"}]"#).is_err());
    }
}
