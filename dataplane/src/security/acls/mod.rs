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

mod answers;

pub use answers::{LOCAL_ACLS_NEED_AUTHORIZER, create_acls_response, delete_acls_response, describe_acls_response};

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};
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

#[cfg(test)]
mod tests;
