//! ACL authorization on the listener, with the semantics of Kafka's
//! `StandardAuthorizer` (`StandardAuthorizerData.findAclRule`/`findResult`):
//!
//! * a super user (and the agent's own principal, [`AGENT_PRINCIPAL`]) may
//!   do anything;
//! * the bindings that apply to a resource are those of its type that are
//!   LITERAL with its name, LITERAL `*`, or PREFIXED with a prefix of its
//!   name; among them, those whose principal is the client's or `User:*`
//!   and whose host is the client's address or `*` decide;
//! * a DENY for the operation (or ALL) denies — a DENY does not imply
//!   anything; otherwise an ALLOW for the operation, ALL, or one that
//!   implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS
//!   implies DESCRIBE_CONFIGS) allows;
//! * otherwise: denied if any binding applies to the resource (whatever its
//!   principal, host or operation), else `allow_everyone_if_no_acl_found`.
//!
//! Where it is enforced (each as Kafka's `KafkaApis`, with its error
//! codes, per resource): Metadata, Fetch, ListOffsets,
//! OffsetForLeaderEpoch, DescribeConfigs, CreateAcls / DeleteAcls /
//! DescribeAcls and DescribeClusterMirrors (`kafka/handlers.rs`, `kafka/fetch.rs`);
//! Produce, CreateTopics, CreatePartitions, InitProducerId (in
//! `kafka/handlers.rs`, around `kafka/write.rs`); the group and share-group APIs
//! (`kafka/groups.rs`). ApiVersions, the SASL APIs and DescribeCluster are
//! not authorized, as in Kafka.
//!
//! The decision reads a per-shard snapshot of the [`AclStore`]'s bindings,
//! refreshed when the store's generation (bumped by every change) moves, so
//! requests do not take the store's lock.

use std::cell::RefCell;
use std::sync::Arc;

use super::acls::{AclBinding, AclOperation, AclPermissionType, AclStore, PatternType, ResourceType, WILDCARD};

/// The principal the agent's own sync authenticates as; always allowed.
pub const AGENT_PRINCIPAL: &str = "User:__ringmirror_agent";
/// The principal that stands for every one in a binding.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Which authorizer the listener runs (`[listener] authorizer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthorizerMode {
    /// Every request is allowed (the ACLs are stored and served only).
    #[default]
    None,
    /// The stored ACLs are enforced.
    Acl,
}

/// The authorizer's settings.
#[derive(Debug, Clone, Default)]
pub struct AuthorizerSettings {
    pub mode: AuthorizerMode,
    /// Principals (`User:name`) allowed everything.
    pub super_users: Vec<String>,
    /// Kafka's `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
}

/// Whether an ALLOW binding for `granted` allows `asked` (Kafka's
/// `IMPLIES_DESCRIBE`, `IMPLIES_DESCRIBE_CONFIGS`).
fn allow_covers(granted: AclOperation, asked: AclOperation) -> bool {
    use AclOperation as O;
    granted == O::All
        || granted == asked
        || (asked == O::Describe && matches!(granted, O::Read | O::Write | O::Delete | O::Alter))
        || (asked == O::DescribeConfigs && granted == O::AlterConfigs)
}

/// Whether `b` applies to the resource (type, name).
fn applies_to(b: &AclBinding, resource_type: ResourceType, name: &str) -> bool {
    b.resource_type == resource_type
        && match b.pattern_type {
            PatternType::Literal => b.resource_name == name || b.resource_name == WILDCARD,
            PatternType::Prefixed => name.starts_with(b.resource_name.as_str()),
            _ => false,
        }
}

/// The decision over `bindings` for a client that is not a super user.
pub fn decide(
    bindings: &[AclBinding],
    allow_everyone_if_no_acl_found: bool,
    principal: &str,
    host: &str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: &str,
) -> bool {
    let mut any_for_resource = false;
    let mut allowed = false;
    for b in bindings.iter().filter(|b| applies_to(b, resource_type, name)) {
        any_for_resource = true;
        if b.principal != principal && b.principal != WILDCARD_PRINCIPAL {
            continue;
        }
        if b.host != WILDCARD && b.host != host {
            continue;
        }
        match b.permission_type {
            AclPermissionType::Deny if b.operation == AclOperation::All || b.operation == operation => return false,
            AclPermissionType::Allow if allow_covers(b.operation, operation) => allowed = true,
            _ => {}
        }
    }
    allowed || (!any_for_resource && allow_everyone_if_no_acl_found)
}

/// One shard's authorizer: the settings and a snapshot of the bindings.
pub struct ShardAuthorizer {
    settings: AuthorizerSettings,
    store: Arc<AclStore>,
    snapshot: RefCell<(u64, Arc<Vec<AclBinding>>)>,
}

impl ShardAuthorizer {
    pub fn new(settings: AuthorizerSettings, store: Arc<AclStore>) -> Self {
        let snapshot = RefCell::new(store.snapshot());
        Self {
            settings,
            store,
            snapshot,
        }
    }

    /// Whether ACLs are enforced at all.
    pub fn enabled(&self) -> bool {
        self.settings.mode == AuthorizerMode::Acl
    }

    /// Whether `principal` may do anything (no authorizer, a super user, or
    /// the agent itself).
    pub fn is_super(&self, principal: &str) -> bool {
        !self.enabled() || principal == AGENT_PRINCIPAL || self.settings.super_users.iter().any(|u| u == principal)
    }

    fn bindings(&self) -> Arc<Vec<AclBinding>> {
        let current = self.store.generation();
        let mut snapshot = self.snapshot.borrow_mut();
        if snapshot.0 != current {
            *snapshot = self.store.snapshot();
        }
        Arc::clone(&snapshot.1)
    }

    /// Whether `principal` connected from `host` (an IP address) may do
    /// `operation` on the resource.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super(principal) {
            return true;
        }
        let bindings = self.bindings();
        let allowed = decide(
            &bindings,
            self.settings.allow_everyone_if_no_acl_found,
            principal,
            host,
            operation,
            resource_type,
            name,
        );
        if !allowed {
            tracing::debug!(principal, host, %operation, %resource_type, name, "not authorized");
        }
        allowed
    }

    /// Whether `principal` may do `operation` on some resource of the type
    /// (Kafka's `Authorizer.authorizeByResourceType` default): allowed on
    /// a made-up name, or an ALLOW binding (for the operation or ALL) that
    /// no DENY dominates — a literal `*` DENY denies all, a literal DENY of
    /// the same name or a PREFIXED DENY of a prefix of the allowed name
    /// cancels an ALLOW.
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if self.authorize(principal, host, operation, resource_type, "hardcode") {
            return true;
        }
        let bindings = self.bindings();
        let mine = bindings.iter().filter(|b| {
            b.resource_type == resource_type
                && (b.host == WILDCARD || b.host == host)
                && (b.principal == principal || b.principal == WILDCARD_PRINCIPAL)
                && (b.operation == operation || b.operation == AclOperation::All)
        });
        let (deny, allow): (Vec<&AclBinding>, Vec<&AclBinding>) =
            mine.partition(|b| b.permission_type == AclPermissionType::Deny);
        if deny
            .iter()
            .any(|d| d.pattern_type == PatternType::Literal && d.resource_name == WILDCARD)
        {
            return false;
        }
        if allow
            .iter()
            .any(|a| a.pattern_type == PatternType::Literal && a.resource_name == WILDCARD)
        {
            return true;
        }
        allow.iter().any(|a| {
            let literal_denied = a.pattern_type == PatternType::Literal
                && deny
                    .iter()
                    .any(|d| d.pattern_type == PatternType::Literal && d.resource_name == a.resource_name);
            let prefix_denied = deny.iter().any(|d| {
                d.pattern_type == PatternType::Prefixed && a.resource_name.starts_with(d.resource_name.as_str())
            });
            !literal_denied && !prefix_denied
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(
        rt: ResourceType,
        name: &str,
        pt: PatternType,
        principal: &str,
        host: &str,
        op: AclOperation,
        perm: AclPermissionType,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission_type: perm,
        }
    }

    use AclOperation as O;
    use AclPermissionType::{Allow, Deny};
    use PatternType::{Literal, Prefixed};
    use ResourceType::{Cluster, Group, Topic};

    fn topic(name: &str, pt: PatternType, principal: &str, op: AclOperation, perm: AclPermissionType) -> AclBinding {
        b(Topic, name, pt, principal, "*", op, perm)
    }

    fn check(bindings: &[AclBinding], principal: &str, op: AclOperation, name: &str) -> bool {
        decide(bindings, false, principal, "127.0.0.1", op, Topic, name)
    }

    #[test]
    fn rules_follow_standard_authorizer() {
        let acls = vec![
            topic("orders", Literal, "User:alice", O::Read, Allow),
            topic("pay", Prefixed, "User:alice", O::Write, Allow),
            topic("pay-secret", Prefixed, "User:alice", O::All, Deny),
            topic("*", Literal, "User:*", O::DescribeConfigs, Allow),
            topic("cfg", Literal, "User:carol", O::AlterConfigs, Allow),
            topic("denyread", Literal, "User:dave", O::Read, Deny),
            topic("denyread", Literal, "User:dave", O::All, Allow),
        ];
        assert!(check(&acls, "User:alice", O::Read, "orders"));
        // READ implies DESCRIBE.
        assert!(check(&acls, "User:alice", O::Describe, "orders"));
        assert!(!check(&acls, "User:alice", O::Write, "orders"));
        assert!(!check(&acls, "User:bob", O::Read, "orders"));
        // Not a prefix match for a literal binding.
        assert!(!check(&acls, "User:alice", O::Read, "orders2"));
        assert!(check(&acls, "User:alice", O::Write, "payments"));
        assert!(check(&acls, "User:alice", O::Describe, "payments"));
        // A DENY ALL on a longer prefix beats the ALLOW.
        assert!(!check(&acls, "User:alice", O::Write, "pay-secret-1"));
        assert!(!check(&acls, "User:alice", O::Describe, "pay-secret-1"));
        // Wildcard resource and principal.
        assert!(check(&acls, "User:zed", O::DescribeConfigs, "anything"));
        // ALTER_CONFIGS implies DESCRIBE_CONFIGS, not the other way round.
        assert!(check(&acls, "User:carol", O::DescribeConfigs, "cfg"));
        // A DENY READ does not deny DESCRIBE; the ALLOW ALL allows it.
        assert!(!check(&acls, "User:dave", O::Read, "denyread"));
        assert!(check(&acls, "User:dave", O::Describe, "denyread"));
    }

    #[test]
    fn no_acl_found_and_hosts() {
        let acls = vec![
            b(Group, "g", Literal, "User:alice", "10.0.0.1", O::Read, Allow),
            b(Cluster, "kafka-cluster", Literal, "User:bob", "*", O::Describe, Allow),
        ];
        let d = |allow, p: &str, host, rt, name| decide(&acls, allow, p, host, O::Read, rt, name);
        assert!(d(false, "User:alice", "10.0.0.1", Group, "g"));
        assert!(!d(false, "User:alice", "10.0.0.2", Group, "g"));
        // A binding applies to g: denied even when no ACL found allows.
        assert!(!d(true, "User:alice", "10.0.0.2", Group, "g"));
        assert!(!d(true, "User:bob", "10.0.0.1", Group, "g"));
        // Nothing applies to h.
        assert!(d(true, "User:bob", "10.0.0.1", Group, "h"));
        assert!(!d(false, "User:bob", "10.0.0.1", Group, "h"));
        // Another resource type's bindings do not count.
        assert!(d(true, "User:bob", "10.0.0.1", Topic, "g"));
    }

    #[test]
    fn super_users_and_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(AclStore::open(dir.path().join("acls")).unwrap());
        let settings = AuthorizerSettings {
            mode: AuthorizerMode::Acl,
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
        };
        let authz = ShardAuthorizer::new(settings, Arc::clone(&store));
        assert!(authz.authorize("User:admin", "h", O::Write, Topic, "t"));
        assert!(authz.authorize(AGENT_PRINCIPAL, "h", O::Write, Topic, "t"));
        assert!(!authz.authorize("User:alice", "h", O::Write, Topic, "t"));
        store
            .create(&[topic("t", Literal, "User:alice", O::Write, Allow)])
            .unwrap();
        assert!(authz.authorize("User:alice", "h", O::Write, Topic, "t"));
        store.delete(&[super::super::acls::AclBindingFilter::any()]).unwrap();
        assert!(!authz.authorize("User:alice", "h", O::Write, Topic, "t"));
        let off = ShardAuthorizer::new(AuthorizerSettings::default(), store);
        assert!(off.authorize("User:alice", "h", O::Write, Topic, "t"));
    }

    #[test]
    fn by_resource_type_as_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(AclStore::open(dir.path().join("acls")).unwrap());
        let settings = AuthorizerSettings {
            mode: AuthorizerMode::Acl,
            ..AuthorizerSettings::default()
        };
        let authz = ShardAuthorizer::new(settings, Arc::clone(&store));
        let any = |p: &str| authz.authorize_any(p, "h", O::Write, Topic);
        assert!(!any("User:alice"));
        store
            .create(&[
                topic("pay", Prefixed, "User:alice", O::Write, Allow),
                topic("p", Prefixed, "User:alice", O::All, Deny),
                topic("t", Literal, "User:bob", O::Write, Allow),
                topic("u", Prefixed, "User:carol", O::Write, Allow),
                topic("*", Literal, "User:dave", O::Write, Deny),
                topic("x", Literal, "User:dave", O::Write, Allow),
            ])
            .unwrap();
        // A DENY on a shorter prefix dominates the ALLOW.
        assert!(!any("User:alice"));
        assert!(any("User:bob"));
        assert!(any("User:carol"));
        // A wildcard DENY denies all.
        assert!(!any("User:dave"));
        assert!(!any("User:erin"));
    }

    /// The reference: Kafka's rules written out plainly, one binding at a
    /// time.
    fn reference(bindings: &[AclBinding], allow_if_none: bool, p: &str, host: &str, op: O, name: &str) -> bool {
        let on_resource: Vec<&AclBinding> = bindings
            .iter()
            .filter(|b| {
                b.resource_type == Topic
                    && ((b.pattern_type == Literal && (b.resource_name == name || b.resource_name == "*"))
                        || (b.pattern_type == Prefixed && name.get(..b.resource_name.len()) == Some(&b.resource_name)))
            })
            .collect();
        if on_resource.is_empty() {
            return allow_if_none;
        }
        let mine = || {
            on_resource
                .iter()
                .filter(|b| (b.principal == p || b.principal == "User:*") && (b.host == "*" || b.host == host))
        };
        if mine().any(|b| b.permission_type == Deny && (b.operation == op || b.operation == O::All)) {
            return false;
        }
        let implied: &[O] = match op {
            O::Describe => &[O::Describe, O::Read, O::Write, O::Delete, O::Alter, O::All],
            O::DescribeConfigs => &[O::DescribeConfigs, O::AlterConfigs, O::All],
            _ => &[op, O::All],
        };
        mine().any(|b| b.permission_type == Allow && implied.contains(&b.operation))
    }

    fn arb_binding() -> impl Strategy<Value = AclBinding> {
        let names = prop::sample::select(vec!["a", "ab", "abc", "b", "*"]);
        let principals = prop::sample::select(vec!["User:alice", "User:bob", "User:*"]);
        let hosts = prop::sample::select(vec!["*", "1.1.1.1", "2.2.2.2"]);
        let ops = prop::sample::select(AclOperation::VALUES[1..].to_vec());
        let rts = prop::sample::select(vec![Topic, Group]);
        (rts, names, prop::bool::ANY, principals, hosts, ops, prop::bool::ANY).prop_map(
            |(rt, n, prefixed, p, h, op, allow)| {
                b(
                    rt,
                    n,
                    if prefixed { Prefixed } else { Literal },
                    p,
                    h,
                    op,
                    if allow { Allow } else { Deny },
                )
            },
        )
    }

    proptest! {
        #[test]
        fn decide_matches_the_reference(
            bindings in prop::collection::vec(arb_binding(), 0..8),
            allow_if_none in prop::bool::ANY,
            p in prop::sample::select(vec!["User:alice", "User:bob"]),
            host in prop::sample::select(vec!["1.1.1.1", "2.2.2.2"]),
            op in prop::sample::select(AclOperation::VALUES[2..].to_vec()),
            name in prop::sample::select(vec!["a", "ab", "abc", "abd", "b", "c"]),
        ) {
            prop_assert_eq!(
                decide(&bindings, allow_if_none, p, host, op, Topic, name),
                reference(&bindings, allow_if_none, p, host, op, name)
            );
        }
    }
}
