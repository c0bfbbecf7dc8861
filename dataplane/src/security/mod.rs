//! Who may do what: the ACL bindings the agent stores and serves, and
//! their enforcement with Kafka's authorizer semantics.
//!
//! * [`acls`] — the ACL bindings (DescribeAcls, CreateAcls, DeleteAcls).
//! * [`authorizer`] — their enforcement (`[listener] authorizer = "acl"`).

pub mod acls;
pub mod authorizer;

pub use acls::{AclBinding, AclBindingFilter, AclStore};
pub use authorizer::{AuthorizerMode, AuthorizerSettings};
