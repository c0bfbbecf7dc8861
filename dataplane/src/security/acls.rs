//! ACLs: Kafka's ACL bindings as the listener stores and serves them
//! (DescribeAcls, CreateAcls, DeleteAcls), and the filters that select them.
//!
//! * [`AclBinding`] — a resource pattern (type, name, pattern type LITERAL
//!   or PREFIXED) and an access control entry (principal, host, operation,
//!   permission type), as Kafka's `org.apache.kafka.common.acl.AclBinding`.
//! * [`AclBindingFilter`] — Kafka's `AclBindingFilter`: ANY matches every
//!   value of an enum field, a null name, principal or host matches any, and
//!   the MATCH pattern type matches the bindings that apply to a resource
//!   name (the literal name, the `*` wildcard, and prefixes of it).
//! * [`AclStore`] — every binding this agent holds, shared by all shards
//!   (ACL admin requests are rare and not on the data path, so one
//!   `Mutex` is enough), persisted in a [`CompactedLog`] at
//!   `<data dir>/__ringmirror/acls/`: the key is the canonical binding, the
//!   value a presence marker, a deletion a tombstone. Each change is
//!   flushed before it is acknowledged, so it survives a crash; on open the
//!   live keys are the bindings.
//! * [`describe_acls_response`], [`create_acls_response`],
//!   [`delete_acls_response`] — the listener's answers, per Kafka (KRaft's
//!   `AclControlManager`): a binding is created once however often it is
//!   asked for; a creation with UNKNOWN or ANY elements, an empty resource
//!   name, a CLUSTER resource not named `kafka-cluster` or a principal
//!   without a `Type:` prefix is refused with INVALID_REQUEST (per
//!   creation); DeleteAcls lists every binding a filter matched, under each
//!   filter that matched it, and refuses a filter with UNKNOWN elements
//!   (INVALID_REQUEST, per filter). A DescribeAcls filter with UNKNOWN
//!   elements matches nothing (Kafka refuses it; see
//!   [`describe_acls_response`]).
//! * **ClusterMirror** (code 8, KIP-1279's mirror-management resource, the
//!   admin API's authorization): a local type, selected only by filters
//!   naming it — a Kafka client's ANY filter never sees a code it does not
//!   know, nor deletes one — and changed on the listener only where it
//!   enforces ACLs ([`LOCAL_ACLS_NEED_AUTHORIZER`]).
//!
//! **Enforced when `[listener] authorizer = "acl"`** (see
//! [`super::authorizer`], Kafka's `StandardAuthorizer` semantics, with the
//! principal SASL authenticated, `User:ANONYMOUS` without SASL). With
//! `authorizer = "none"` (the default) they are stored and served only and
//! every client may do anything, including change them. Either way a
//! mirror holds the source's ACLs (metadata sync,
//! `ringmirror_control::metadata_sync::acl_sync`).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use ringmirror_storage::log::{CompactedLog, KeyedRecord, LogError};

/// Kafka error codes of the ACL APIs.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    pub const INVALID_REQUEST: i16 = 42;
    /// A broker without an authorizer answers the ACL APIs with this.
    pub const SECURITY_DISABLED: i16 = 54;
}

/// The only name a CLUSTER resource may have.
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";
/// The resource name (LITERAL) and host that stand for every one.
pub const WILDCARD: &str = "*";
/// The store's log is compacted once it is larger than this (and more than
/// twice its live bindings).
const COMPACT_MIN_BYTES: u64 = 1 << 20;
/// Record key and value versions of the store's log.
const KEY_VERSION: i16 = 1;
const VALUE_VERSION: i16 = 1;

/// A Kafka ACL enum: its wire codes, Kafka's names (`TOPIC`, `LITERAL`,
/// `READ`, …; parsed case-insensitively, with `-` for `_` or neither
/// allowed: `cluster-mirror`, `ClusterMirror`), and
/// serde as the lower-case name.
macro_rules! acl_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal $kafka:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $code,)*
        }

        impl $name {
            /// Every value, in code order.
            pub const VALUES: &[Self] = &[$(Self::$variant),*];

            /// The wire code.
            pub fn code(self) -> i8 {
                self as i8
            }

            /// The value of a wire code; `None` for UNKNOWN (0) and codes
            /// this version does not know.
            pub fn from_code(code: i8) -> Option<Self> {
                match code {
                    $($code => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// Kafka's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $kafka,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                // `cluster-mirror`, `cluster_mirror` and `ClusterMirror` alike.
                let squash = |name: &str| name.replace(['-', '_'], "");
                let wanted = squash(s.trim());
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|v| squash(v.name()).eq_ignore_ascii_case(&wanted))
                    .ok_or_else(|| {
                        let names: Vec<&str> = Self::VALUES.iter().map(|v| v.name()).collect();
                        format!("{s:?} is not a {} (one of {})", stringify!($name), names.join(", "))
                    })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.name().to_ascii_lowercase())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl Default for $name {
            /// ANY: matches every value (in filters).
            fn default() -> Self {
                Self::Any
            }
        }
    };
}

acl_enum! {
    /// Kafka's `ResourceType`.
    ResourceType {
        /// Filters only.
        Any = 1 "ANY",
        Topic = 2 "TOPIC",
        Group = 3 "GROUP",
        Cluster = 4 "CLUSTER",
        TransactionalId = 5 "TRANSACTIONAL_ID",
        DelegationToken = 6 "DELEGATION_TOKEN",
        User = 7 "USER",
        /// KIP-1279's resource for mirror management (the admin API's
        /// CREATE, ALTER, DESCRIBE of a mirror by name). Not one of Kafka's
        /// codes (0–7): this agent's own, see [`ResourceType::is_local`].
        ClusterMirror = 8 "CLUSTER_MIRROR",
    }
}

impl ResourceType {
    /// Whether Kafka does not know this type (ClusterMirror): its bindings
    /// are selected only by a filter that names the type, never by ANY.
    /// So a Kafka client's DescribeAcls never gets a code its enum lacks
    /// (kafka-python raises on one, Java maps it to UNKNOWN), and a broad
    /// DeleteAcls or the ACL sync from a source never touches them.
    pub fn is_local(self) -> bool {
        self == Self::ClusterMirror
    }
}

acl_enum! {
    /// Kafka's `PatternType`.
    PatternType {
        /// Filters only: every pattern type, names compared exactly.
        Any = 1 "ANY",
        /// Filters only: the bindings that apply to the filter's name.
        Match = 2 "MATCH",
        Literal = 3 "LITERAL",
        Prefixed = 4 "PREFIXED",
    }
}

acl_enum! {
    /// Kafka's `AclOperation`.
    AclOperation {
        /// Filters only.
        Any = 1 "ANY",
        All = 2 "ALL",
        Read = 3 "READ",
        Write = 4 "WRITE",
        Create = 5 "CREATE",
        Delete = 6 "DELETE",
        Alter = 7 "ALTER",
        Describe = 8 "DESCRIBE",
        ClusterAction = 9 "CLUSTER_ACTION",
        DescribeConfigs = 10 "DESCRIBE_CONFIGS",
        AlterConfigs = 11 "ALTER_CONFIGS",
        IdempotentWrite = 12 "IDEMPOTENT_WRITE",
        CreateTokens = 13 "CREATE_TOKENS",
        DescribeTokens = 14 "DESCRIBE_TOKENS",
        TwoPhaseCommit = 15 "TWO_PHASE_COMMIT",
    }
}

acl_enum! {
    /// Kafka's `AclPermissionType`.
    AclPermissionType {
        /// Filters only.
        Any = 1 "ANY",
        Deny = 2 "DENY",
        Allow = 3 "ALLOW",
    }
}

/// One ACL: who (principal, host) may or may not (permission type) do
/// what (operation) to which resources (type, name, pattern type).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} from {} {} on {} {:?} ({})",
            self.permission_type,
            self.principal,
            self.host,
            self.operation,
            self.resource_type,
            self.resource_name,
            self.pattern_type
        )
    }
}

fn unknown(field: &str, code: i8) -> String {
    format!("unknown {field} code {code}")
}

impl AclBinding {
    /// A binding from its wire codes; `Err` names an UNKNOWN (or unknown)
    /// code. Does not check that it may be created (see [`Self::validate`]).
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        resource_name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission_type: i8,
    ) -> Result<Self, String> {
        Ok(Self {
            resource_type: ResourceType::from_code(resource_type)
                .ok_or_else(|| unknown("resource type", resource_type))?,
            resource_name: resource_name.to_owned(),
            pattern_type: PatternType::from_code(pattern_type).ok_or_else(|| unknown("pattern type", pattern_type))?,
            principal: principal.to_owned(),
            host: host.to_owned(),
            operation: AclOperation::from_code(operation).ok_or_else(|| unknown("operation", operation))?,
            permission_type: AclPermissionType::from_code(permission_type)
                .ok_or_else(|| unknown("permission type", permission_type))?,
        })
    }

    /// Whether this binding may be created, by Kafka's rules: no ANY or
    /// MATCH in it, a resource name (`kafka-cluster` for CLUSTER), and a
    /// principal of the form `Type:name`.
    pub fn validate(&self) -> Result<(), String> {
        if self.resource_type == ResourceType::Any {
            return Err("invalid resource type ANY".into());
        }
        if !matches!(self.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Err(format!("invalid pattern type {}", self.pattern_type));
        }
        if self.operation == AclOperation::Any {
            return Err("invalid operation ANY".into());
        }
        if self.permission_type == AclPermissionType::Any {
            return Err("invalid permission type ANY".into());
        }
        if self.resource_name.is_empty() {
            return Err("resource name should not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_RESOURCE_NAME {
            return Err(format!(
                "the only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
            ));
        }
        if !self.principal.contains(':') {
            return Err(format!(
                "could not parse principal from {:?} (no colon is present separating the principal type from the principal name)",
                self.principal
            ));
        }
        Ok(())
    }

    /// The binding a CreateAcls creation asks for.
    pub fn from_creation(c: &AclCreation) -> Result<Self, String> {
        Self::from_wire(
            c.resource_type,
            &c.resource_name,
            c.resource_pattern_type,
            &c.principal,
            &c.host,
            c.operation,
            c.permission_type,
        )
    }

    /// A binding for clients on any host (`*`), the usual kind.
    pub fn from_any_host(
        resource_type: ResourceType,
        resource_name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: AclOperation,
        permission_type: AclPermissionType,
    ) -> Self {
        Self {
            resource_type,
            resource_name: resource_name.into(),
            pattern_type,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation,
            permission_type,
        }
    }

    /// The CreateAcls creation of this binding.
    pub fn to_creation(&self) -> AclCreation {
        AclCreation::default()
            .with_resource_type(self.resource_type.code())
            .with_resource_name(str(&self.resource_name))
            .with_resource_pattern_type(self.pattern_type.code())
            .with_principal(str(&self.principal))
            .with_host(str(&self.host))
            .with_operation(self.operation.code())
            .with_permission_type(self.permission_type.code())
    }

    /// The DeleteAcls filter that matches this binding and no other.
    pub fn to_delete_filter(&self) -> DeleteAclsFilter {
        AclBindingFilter::exact(self).to_delete_filter()
    }

    /// The bindings a DescribeAcls response lists; entries with codes we
    /// do not know are returned apart, as messages.
    pub fn from_describe_response(response: &DescribeAclsResponse) -> (Vec<Self>, Vec<String>) {
        let mut bindings = Vec::new();
        let mut skipped = Vec::new();
        for resource in &response.resources {
            for acl in &resource.acls {
                match Self::from_wire(
                    resource.resource_type,
                    &resource.resource_name,
                    resource.pattern_type,
                    &acl.principal,
                    &acl.host,
                    acl.operation,
                    acl.permission_type,
                ) {
                    Ok(b) => bindings.push(b),
                    Err(e) => skipped.push(format!(
                        "ACL of {} on resource {:?}: {e}",
                        acl.principal.as_str(),
                        resource.resource_name.as_str()
                    )),
                }
            }
        }
        (bindings, skipped)
    }

    /// The record key of this binding in the store's log: the version,
    /// the four enum codes, then name, principal and host, each with a u32
    /// length.
    fn encode_key(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(18 + self.resource_name.len() + self.principal.len() + self.host.len());
        out.extend_from_slice(&KEY_VERSION.to_be_bytes());
        out.extend_from_slice(&[
            self.resource_type.code() as u8,
            self.pattern_type.code() as u8,
            self.operation.code() as u8,
            self.permission_type.code() as u8,
        ]);
        for s in [&self.resource_name, &self.principal, &self.host] {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    fn decode_key(mut key: &[u8]) -> Option<Self> {
        fn take<'a>(key: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = (key.len() >= n).then(|| key.split_at(n))?;
            *key = rest;
            Some(head)
        }
        fn string(key: &mut &[u8]) -> Option<String> {
            let len = u32::from_be_bytes(take(key, 4)?.try_into().ok()?) as usize;
            String::from_utf8(take(key, len)?.to_vec()).ok()
        }
        let version = i16::from_be_bytes(take(&mut key, 2)?.try_into().ok()?);
        if version != KEY_VERSION {
            return None;
        }
        let codes = take(&mut key, 4)?;
        let (name, principal, host) = (string(&mut key)?, string(&mut key)?, string(&mut key)?);
        if !key.is_empty() {
            return None;
        }
        Self::from_wire(
            codes[0] as i8,
            &name,
            codes[1] as i8,
            &principal,
            &host,
            codes[2] as i8,
            codes[3] as i8,
        )
        .ok()
    }
}

/// Kafka's `AclBindingFilter`: which bindings a DescribeAcls or DeleteAcls
/// filter selects. ANY (the default of each enum) and `None` match
/// anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AclBindingFilter {
    pub resource_type: ResourceType,
    /// `None`: any name. Compared exactly, except under MATCH.
    pub resource_name: Option<String>,
    /// ANY: every pattern type, names compared exactly; MATCH: the
    /// bindings that apply to `resource_name` (LITERAL of that name or `*`,
    /// PREFIXED of a prefix of it); LITERAL, PREFIXED: that type only.
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

impl AclBindingFilter {
    /// Matches every binding.
    pub fn any() -> Self {
        Self::default()
    }

    /// Matches `binding` and no other.
    pub fn exact(binding: &AclBinding) -> Self {
        Self {
            resource_type: binding.resource_type,
            resource_name: Some(binding.resource_name.clone()),
            pattern_type: binding.pattern_type,
            principal: Some(binding.principal.clone()),
            host: Some(binding.host.clone()),
            operation: binding.operation,
            permission_type: binding.permission_type,
        }
    }

    /// A filter from its wire codes; `Err` for UNKNOWN (or unknown) codes,
    /// which Kafka refuses with INVALID_REQUEST.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission_type: i8,
    ) -> Result<Self, String> {
        Ok(Self {
            resource_type: ResourceType::from_code(resource_type)
                .ok_or_else(|| unknown("resource type", resource_type))?,
            resource_name: resource_name.map(str::to_owned),
            pattern_type: PatternType::from_code(pattern_type).ok_or_else(|| unknown("pattern type", pattern_type))?,
            principal: principal.map(str::to_owned),
            host: host.map(str::to_owned),
            operation: AclOperation::from_code(operation).ok_or_else(|| unknown("operation", operation))?,
            permission_type: AclPermissionType::from_code(permission_type)
                .ok_or_else(|| unknown("permission type", permission_type))?,
        })
    }

    /// The filter of a DescribeAcls request.
    pub fn from_describe_request(r: &DescribeAclsRequest) -> Result<Self, String> {
        Self::from_wire(
            r.resource_type_filter,
            r.resource_name_filter.as_deref(),
            r.pattern_type_filter,
            r.principal_filter.as_deref(),
            r.host_filter.as_deref(),
            r.operation,
            r.permission_type,
        )
    }

    /// One filter of a DeleteAcls request.
    pub fn from_delete_filter(f: &DeleteAclsFilter) -> Result<Self, String> {
        Self::from_wire(
            f.resource_type_filter,
            f.resource_name_filter.as_deref(),
            f.pattern_type_filter,
            f.principal_filter.as_deref(),
            f.host_filter.as_deref(),
            f.operation,
            f.permission_type,
        )
    }

    /// A DescribeAcls request with this filter.
    pub fn to_describe_request(&self) -> DescribeAclsRequest {
        DescribeAclsRequest::default()
            .with_resource_type_filter(self.resource_type.code())
            .with_resource_name_filter(self.resource_name.as_deref().map(str))
            .with_pattern_type_filter(self.pattern_type.code())
            .with_principal_filter(self.principal.as_deref().map(str))
            .with_host_filter(self.host.as_deref().map(str))
            .with_operation(self.operation.code())
            .with_permission_type(self.permission_type.code())
    }

    /// This filter as one of a DeleteAcls request's.
    pub fn to_delete_filter(&self) -> DeleteAclsFilter {
        DeleteAclsFilter::default()
            .with_resource_type_filter(self.resource_type.code())
            .with_resource_name_filter(self.resource_name.as_deref().map(str))
            .with_pattern_type_filter(self.pattern_type.code())
            .with_principal_filter(self.principal.as_deref().map(str))
            .with_host_filter(self.host.as_deref().map(str))
            .with_operation(self.operation.code())
            .with_permission_type(self.permission_type.code())
    }

    /// Kafka's `ResourcePatternFilter.matches`; ANY leaves out the local
    /// resource types ([`ResourceType::is_local`]).
    fn matches_pattern(&self, b: &AclBinding) -> bool {
        let any_type = self.resource_type == ResourceType::Any && !b.resource_type.is_local();
        if !any_type && self.resource_type != b.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match) && self.pattern_type != b.pattern_type {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == b.pattern_type {
            return *name == b.resource_name;
        }
        // MATCH: the bindings that apply to a resource called `name`.
        match b.pattern_type {
            PatternType::Literal => *name == b.resource_name || b.resource_name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&b.resource_name),
            PatternType::Any | PatternType::Match => false,
        }
    }

    /// Kafka's `AccessControlEntryFilter.matches`.
    fn matches_entry(&self, b: &AclBinding) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == AclOperation::Any || self.operation == b.operation)
            && (self.permission_type == AclPermissionType::Any || self.permission_type == b.permission_type)
    }

    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(binding) && self.matches_entry(binding)
    }
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// The agent's ACL bindings, in memory and in their log (see the module
/// documentation). Cheap to share: put it in an `Arc`.
pub struct AclStore {
    inner: Mutex<StoreInner>,
    /// Bumped by every change (under the lock), so that readers holding a
    /// snapshot (the authorizer's, per shard) know when to take a new one.
    generation: AtomicU64,
}

struct StoreInner {
    log: CompactedLog,
    bindings: BTreeSet<AclBinding>,
}

impl fmt::Debug for AclStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclStore").field("bindings", &self.len()).finish()
    }
}

impl AclStore {
    /// Opens (creating) the store whose log is the directory `dir`
    /// (`<data dir>/__ringmirror/acls`), and loads its bindings. A record
    /// that does not decode (written by a later version) is skipped, with
    /// a warning.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, LogError> {
        let dir = dir.as_ref();
        let (Some(root), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
            return Err(LogError::io("open ACL store", dir)(std::io::Error::other(
                "not a directory path with a parent",
            )));
        };
        let (log, values) = CompactedLog::open(root, name, COMPACT_MIN_BYTES)?;
        let mut bindings = BTreeSet::new();
        for key in values.keys() {
            match AclBinding::decode_key(key) {
                Some(binding) => {
                    bindings.insert(binding);
                }
                None => tracing::warn!(dir = %dir.display(), "skipping an undecodable ACL record"),
            }
        }
        tracing::debug!(dir = %dir.display(), acls = bindings.len(), "ACL store opened");
        Ok(Self {
            inner: Mutex::new(StoreInner { log, bindings }),
            generation: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, StoreInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn len(&self) -> usize {
        self.lock().bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of changes made so far (see [`Self::snapshot`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Every binding, with the generation they are current at.
    pub fn snapshot(&self) -> (u64, Arc<Vec<AclBinding>>) {
        let inner = self.lock();
        let generation = self.generation.load(Ordering::Acquire);
        (generation, Arc::new(inner.bindings.iter().cloned().collect()))
    }

    /// Every binding `filter` matches, in order (by resource, then entry).
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.lock()
            .bindings
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect()
    }

    /// Adds `bindings` (already valid, see [`AclBinding::validate`]) in one
    /// flushed write; returns how many were new. Bindings already held are
    /// not written again.
    pub fn create(&self, bindings: &[AclBinding]) -> Result<usize, LogError> {
        let mut inner = self.lock();
        let new: BTreeSet<&AclBinding> = bindings.iter().filter(|b| !inner.bindings.contains(*b)).collect();
        if new.is_empty() {
            return Ok(0);
        }
        let records = new
            .iter()
            .map(|b| KeyedRecord {
                key: b.encode_key(),
                value: Some(VALUE_VERSION.to_be_bytes().to_vec()),
                timestamp_ms: None,
            })
            .collect();
        inner.log.append(records)?;
        let added = new.len();
        let new: Vec<AclBinding> = new.into_iter().cloned().collect();
        inner.bindings.extend(new);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(added)
    }

    /// Removes every binding any of `filters` matches, in one flushed
    /// write; returns, per filter, the bindings it matched (a binding
    /// matched by several filters is listed under each, as Kafka does).
    pub fn delete(&self, filters: &[AclBindingFilter]) -> Result<Vec<Vec<AclBinding>>, LogError> {
        let mut inner = self.lock();
        let matched: Vec<Vec<AclBinding>> = filters
            .iter()
            .map(|f| inner.bindings.iter().filter(|b| f.matches(b)).cloned().collect())
            .collect();
        let gone: BTreeSet<&AclBinding> = matched.iter().flatten().collect();
        if gone.is_empty() {
            return Ok(matched);
        }
        let records = gone
            .iter()
            .map(|b| KeyedRecord {
                key: b.encode_key(),
                value: None,
                timestamp_ms: None,
            })
            .collect();
        inner.log.append(records)?;
        for b in gone {
            inner.bindings.remove(b);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(matched)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: AclOperation,
        permission_type: AclPermissionType,
    ) -> AclBinding {
        AclBinding::from_any_host(resource_type, name, pattern_type, principal, operation, permission_type)
    }

    fn topic(name: &str, pattern_type: PatternType, principal: &str) -> AclBinding {
        binding(
            ResourceType::Topic,
            name,
            pattern_type,
            principal,
            AclOperation::Read,
            AclPermissionType::Allow,
        )
    }

    fn sample() -> Vec<AclBinding> {
        vec![
            topic("orders", PatternType::Literal, "User:alice"),
            topic("*", PatternType::Literal, "User:bob"),
            topic("ord", PatternType::Prefixed, "User:carol"),
            topic("payments", PatternType::Literal, "User:alice"),
            binding(
                ResourceType::Group,
                "orders",
                PatternType::Literal,
                "User:alice",
                AclOperation::Read,
                AclPermissionType::Deny,
            ),
            binding(
                ResourceType::Cluster,
                CLUSTER_RESOURCE_NAME,
                PatternType::Literal,
                "User:admin",
                AclOperation::Alter,
                AclPermissionType::Allow,
            ),
        ]
    }

    fn matching(filter: &AclBindingFilter) -> Vec<usize> {
        sample()
            .iter()
            .enumerate()
            .filter(|(_, b)| filter.matches(b))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn filters_match_as_kafkas() {
        assert_eq!(matching(&AclBindingFilter::any()), [0, 1, 2, 3, 4, 5]);
        let topics = AclBindingFilter {
            resource_type: ResourceType::Topic,
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&topics), [0, 1, 2, 3]);
        // ANY pattern type with a name: exact names, any pattern type.
        let named = AclBindingFilter {
            resource_name: Some("orders".into()),
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&named), [0, 4]);
        // MATCH: what applies to the topic "orders" — its literal, the
        // wildcard, and the prefix "ord".
        let applies = AclBindingFilter {
            resource_type: ResourceType::Topic,
            resource_name: Some("orders".into()),
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&applies), [0, 1, 2]);
        // MATCH without a name: everything.
        let match_all = AclBindingFilter {
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&match_all), [0, 1, 2, 3, 4, 5]);
        // A pattern type selects only that type; the name is then exact.
        let prefixed = AclBindingFilter {
            pattern_type: PatternType::Prefixed,
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&prefixed), [2]);
        let prefixed_orders = AclBindingFilter {
            resource_name: Some("orders".into()),
            pattern_type: PatternType::Prefixed,
            ..AclBindingFilter::any()
        };
        assert!(matching(&prefixed_orders).is_empty());
        // Entry fields.
        let alice = AclBindingFilter {
            principal: Some("User:alice".into()),
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&alice), [0, 3, 4]);
        let deny = AclBindingFilter {
            permission_type: AclPermissionType::Deny,
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&deny), [4]);
        let alter = AclBindingFilter {
            operation: AclOperation::Alter,
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&alter), [5]);
        let other_host = AclBindingFilter {
            host: Some("10.0.0.1".into()),
            ..AclBindingFilter::any()
        };
        assert!(matching(&other_host).is_empty());
        // An exact filter matches its binding only.
        for (i, b) in sample().iter().enumerate() {
            assert_eq!(matching(&AclBindingFilter::exact(b)), [i]);
        }
    }

    #[test]
    fn wire_codes_and_names_round_trip() {
        for &t in ResourceType::VALUES {
            assert_eq!(ResourceType::from_code(t.code()), Some(t));
            assert_eq!(t.name().parse::<ResourceType>(), Ok(t));
        }
        assert_eq!(ResourceType::from_code(0), None);
        assert_eq!(AclOperation::from_code(16), None);
        assert_eq!("transactional-id".parse(), Ok(ResourceType::TransactionalId));
        assert_eq!("prefixed".parse(), Ok(PatternType::Prefixed));
        assert_eq!("Describe_Configs".parse(), Ok(AclOperation::DescribeConfigs));
        assert!("nope".parse::<AclPermissionType>().unwrap_err().contains("ALLOW"));
        assert_eq!(ResourceType::Topic.code(), 2);
        assert_eq!(PatternType::Literal.code(), 3);
        assert_eq!(AclOperation::IdempotentWrite.code(), 12);
        assert_eq!(AclPermissionType::Allow.code(), 3);
        for b in sample() {
            assert_eq!(AclBinding::decode_key(&b.encode_key()), Some(b.clone()));
            assert_eq!(AclBinding::from_creation(&b.to_creation()), Ok(b.clone()));
            let filter = AclBindingFilter::from_delete_filter(&b.to_delete_filter()).unwrap();
            assert_eq!(filter, AclBindingFilter::exact(&b));
        }
        let filter = AclBindingFilter {
            resource_type: ResourceType::Group,
            pattern_type: PatternType::Match,
            principal: Some("User:x".into()),
            ..AclBindingFilter::any()
        };
        assert_eq!(
            AclBindingFilter::from_describe_request(&filter.to_describe_request()),
            Ok(filter)
        );
        // A truncated or foreign key does not decode.
        let key = sample()[0].encode_key();
        assert_eq!(AclBinding::decode_key(&key[..key.len() - 1]), None);
        assert_eq!(AclBinding::decode_key(&[key.as_slice(), b"x"].concat()), None);
    }

    fn cluster_mirror(name: &str, pattern_type: PatternType, operation: AclOperation) -> AclBinding {
        binding(
            ResourceType::ClusterMirror,
            name,
            pattern_type,
            "User:ops",
            operation,
            AclPermissionType::Allow,
        )
    }

    #[test]
    fn cluster_mirror_bindings_are_selected_only_by_filters_naming_the_type() {
        let mirrors = [
            cluster_mirror("dr", PatternType::Literal, AclOperation::Describe),
            cluster_mirror("*", PatternType::Literal, AclOperation::Alter),
            cluster_mirror("prod-", PatternType::Prefixed, AclOperation::Create),
        ];
        let all: Vec<AclBinding> = sample().into_iter().chain(mirrors.iter().cloned()).collect();
        let matched =
            |filter: &AclBindingFilter| -> Vec<&AclBinding> { all.iter().filter(|b| filter.matches(b)).collect() };
        // ANY, with or without MATCH, a name or entry fields: never them.
        for filter in [
            AclBindingFilter::any(),
            AclBindingFilter {
                pattern_type: PatternType::Match,
                resource_name: Some("dr".into()),
                ..AclBindingFilter::any()
            },
            AclBindingFilter {
                principal: Some("User:ops".into()),
                ..AclBindingFilter::any()
            },
        ] {
            assert!(
                matched(&filter)
                    .iter()
                    .all(|b| b.resource_type != ResourceType::ClusterMirror),
                "{filter:?}"
            );
        }
        assert_eq!(matched(&AclBindingFilter::any()).len(), sample().len());
        let of_type = AclBindingFilter {
            resource_type: ResourceType::ClusterMirror,
            ..AclBindingFilter::any()
        };
        assert_eq!(matched(&of_type), mirrors.iter().collect::<Vec<_>>());
        // MATCH on the type: what applies to the mirror "prod-eu".
        let applies = AclBindingFilter {
            resource_name: Some("prod-eu".into()),
            pattern_type: PatternType::Match,
            ..of_type.clone()
        };
        assert_eq!(matched(&applies), [&mirrors[1], &mirrors[2]]);
        assert_eq!(ResourceType::ClusterMirror.code(), 8);
        for name in ["CLUSTER_MIRROR", "cluster-mirror", "ClusterMirror", "clustermirror"] {
            assert_eq!(name.parse(), Ok(ResourceType::ClusterMirror), "{name}");
        }
        assert_eq!("TransactionalId".parse(), Ok(ResourceType::TransactionalId));
        assert!("cluster mirror".parse::<ResourceType>().is_err());
    }

    #[test]
    fn kafka_clients_see_no_cluster_mirror_code_and_change_them_only_under_an_authorizer() {
        let dir = tempfile::tempdir().unwrap();
        let store = AclStore::open(dir.path().join("acls")).unwrap();
        let mirror_acl = cluster_mirror("dr", PatternType::Literal, AclOperation::Describe);
        let topic_acl = topic("orders", PatternType::Literal, "User:alice");
        let creations =
            CreateAclsRequest::default().with_creations(vec![mirror_acl.to_creation(), topic_acl.to_creation()]);
        // Without an authorizer: the topic ACL is created, the ClusterMirror one refused.
        let response = create_acls_response(&store, &creations, false);
        let outcome: Vec<(i16, Option<&str>)> = response
            .results
            .iter()
            .map(|r| (r.error_code, r.error_message.as_deref().filter(|m| !m.is_empty())))
            .collect();
        assert_eq!(
            outcome,
            [
                (codes::CLUSTER_AUTHORIZATION_FAILED, Some(LOCAL_ACLS_NEED_AUTHORIZER)),
                (codes::NONE, None)
            ]
        );
        assert_eq!(store.len(), 1);
        // With one (the request passed ALTER on the cluster): both.
        let response = create_acls_response(&store, &creations, true);
        assert!(response.results.iter().all(|r| r.error_code == codes::NONE));
        assert_eq!(store.len(), 2);

        // DescribeAcls ANY: only codes Kafka knows; asked by type: ours.
        let described = describe_acls_response(&store, &AclBindingFilter::any().to_describe_request());
        let types: Vec<i8> = described.resources.iter().map(|r| r.resource_type).collect();
        assert_eq!(types, [ResourceType::Topic.code()]);
        let of_type = AclBindingFilter {
            resource_type: ResourceType::ClusterMirror,
            ..AclBindingFilter::any()
        };
        let described = describe_acls_response(&store, &of_type.to_describe_request());
        assert_eq!(
            AclBinding::from_describe_response(&described).0,
            std::slice::from_ref(&mirror_acl)
        );

        // DeleteAcls ANY leaves it; by type, only under an authorizer.
        let any = DeleteAclsRequest::default().with_filters(vec![AclBindingFilter::any().to_delete_filter()]);
        let response = delete_acls_response(&store, &any, true);
        assert_eq!(response.filter_results[0].matching_acls.len(), 1);
        assert_eq!(store.describe(&of_type), std::slice::from_ref(&mirror_acl));
        let by_type = DeleteAclsRequest::default().with_filters(vec![of_type.to_delete_filter()]);
        let response = delete_acls_response(&store, &by_type, false);
        assert_eq!(
            (
                response.filter_results[0].error_code,
                response.filter_results[0].error_message.as_deref()
            ),
            (codes::CLUSTER_AUTHORIZATION_FAILED, Some(LOCAL_ACLS_NEED_AUTHORIZER))
        );
        assert_eq!(store.len(), 1);
        let response = delete_acls_response(&store, &by_type, true);
        assert_eq!(response.filter_results[0].matching_acls.len(), 1);
        assert!(store.is_empty());
    }

    #[test]
    fn creations_are_validated_as_kafka_does() {
        let ok = topic("orders", PatternType::Literal, "User:alice");
        assert_eq!(ok.validate(), Ok(()));
        let bad = [
            AclBinding {
                resource_type: ResourceType::Any,
                ..ok.clone()
            },
            AclBinding {
                pattern_type: PatternType::Match,
                ..ok.clone()
            },
            AclBinding {
                pattern_type: PatternType::Any,
                ..ok.clone()
            },
            AclBinding {
                operation: AclOperation::Any,
                ..ok.clone()
            },
            AclBinding {
                permission_type: AclPermissionType::Any,
                ..ok.clone()
            },
            AclBinding {
                resource_name: String::new(),
                ..ok.clone()
            },
            AclBinding {
                principal: "alice".into(),
                ..ok.clone()
            },
            AclBinding {
                resource_type: ResourceType::Cluster,
                resource_name: "my-cluster".into(),
                ..ok.clone()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b}");
        }
        let unknown = ok.to_creation().with_operation(0);
        assert!(AclBinding::from_creation(&unknown).unwrap_err().contains("operation"));
    }

    #[test]
    fn the_store_persists_creations_and_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("__ringmirror").join("acls");
        let all = sample();
        {
            let store = AclStore::open(&path).unwrap();
            assert!(store.is_empty());
            assert_eq!(store.create(&all).unwrap(), all.len());
            // Creating again adds nothing.
            assert_eq!(store.create(&all[..2]).unwrap(), 0);
            let alice = AclBindingFilter {
                principal: Some("User:alice".into()),
                ..AclBindingFilter::any()
            };
            let topics = AclBindingFilter {
                resource_type: ResourceType::Topic,
                ..AclBindingFilter::any()
            };
            // Per filter, everything it matched, a binding under each filter.
            let deleted = store.delete(&[alice, topics]).unwrap();
            assert_eq!(deleted[0].len(), 3);
            assert_eq!(deleted[1].len(), 4);
            assert_eq!(store.len(), 1);
            // Deleting what is gone matches nothing.
            assert_eq!(
                store.delete(&[AclBindingFilter::exact(&all[0])]).unwrap(),
                vec![Vec::new()]
            );
        }
        assert!(path.is_dir(), "the log is at <data dir>/__ringmirror/acls");
        let store = AclStore::open(&path).unwrap();
        assert_eq!(store.describe(&AclBindingFilter::any()), [all[5].clone()]);
        // Re-created after its tombstone, it is back after a reopen too.
        store.create(&all[..1]).unwrap();
        drop(store);
        let store = AclStore::open(&path).unwrap();
        assert_eq!(
            store.describe(&AclBindingFilter::any()),
            [all[0].clone(), all[5].clone()]
        );
    }

    #[test]
    fn the_store_survives_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acls");
        let store = AclStore::open(&path).unwrap();
        let b = |i: usize| topic(&format!("t{i}-{}", "x".repeat(200)), PatternType::Literal, "User:u");
        // Enough churn to pass the compaction threshold several times.
        for round in 0..40 {
            let batch: Vec<AclBinding> = (0..100).map(|i| b(round * 100 + i)).collect();
            store.create(&batch).unwrap();
            let filters: Vec<AclBindingFilter> = batch[1..].iter().map(AclBindingFilter::exact).collect();
            store.delete(&filters).unwrap();
        }
        assert_eq!(store.len(), 40);
        drop(store);
        let store = AclStore::open(&path).unwrap();
        let expected: Vec<AclBinding> = (0..40)
            .map(|round| b(round * 100))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(store.describe(&AclBindingFilter::any()), expected);
    }

    #[test]
    fn answers_follow_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let store = AclStore::open(dir.path().join("acls")).unwrap();
        let all = sample();
        let mut creations: Vec<AclCreation> = all.iter().map(AclBinding::to_creation).collect();
        creations.insert(
            1,
            all[0]
                .to_creation()
                .with_resource_pattern_type(PatternType::Match.code()),
        );
        creations.push(all[0].to_creation().with_resource_type(0));
        let response = create_acls_response(&store, &CreateAclsRequest::default().with_creations(creations), false);
        let result_codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
        assert_eq!(
            result_codes,
            [0, codes::INVALID_REQUEST, 0, 0, 0, 0, 0, codes::INVALID_REQUEST]
        );
        assert_eq!(store.len(), all.len());

        let described = describe_acls_response(&store, &AclBindingFilter::any().to_describe_request());
        assert_eq!(described.error_code, codes::NONE);
        let (bindings, unknown) = AclBinding::from_describe_response(&described);
        assert!(unknown.is_empty());
        assert_eq!(
            bindings.into_iter().collect::<BTreeSet<_>>(),
            all.iter().cloned().collect()
        );
        // Grouped by resource: TOPIC orders is one resource with one ACL,
        // GROUP orders another.
        assert_eq!(described.resources.len(), all.len());
        // UNKNOWN elements match nothing.
        let unknown_filter = AclBindingFilter::any()
            .to_describe_request()
            .with_pattern_type_filter(0);
        let described = describe_acls_response(&store, &unknown_filter);
        assert_eq!(described.error_code, codes::NONE);
        assert!(described.resources.is_empty());

        let request = DeleteAclsRequest::default().with_filters(vec![
            all[3].to_delete_filter(),
            AclBindingFilter::any().to_delete_filter().with_operation(0),
            AclBindingFilter {
                resource_type: ResourceType::Topic,
                principal: Some("User:alice".into()),
                ..AclBindingFilter::any()
            }
            .to_delete_filter(),
        ]);
        let response = delete_acls_response(&store, &request, false);
        let outcome: Vec<(i16, usize)> = response
            .filter_results
            .iter()
            .map(|r| (r.error_code, r.matching_acls.len()))
            .collect();
        assert_eq!(outcome, [(0, 1), (codes::INVALID_REQUEST, 0), (0, 2)]);
        assert_eq!(
            response.filter_results[0].matching_acls[0].resource_name.as_str(),
            "payments"
        );
        assert_eq!(store.len(), all.len() - 2);
    }
}
