//! Errors of the Kafka client: what failed, against which broker, and why.

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{addr}: {op}: {source}")]
    Io {
        addr: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("{addr}: cannot resolve address")]
    Resolve { addr: String },
    #[error("{addr}: response of {len} bytes exceeds the limit of {limit}")]
    FrameTooLarge { addr: String, len: usize, limit: usize },
    #[error("{addr}: response correlation id {got} does not match request {expected}")]
    CorrelationMismatch { addr: String, expected: i32, got: i32 },
    #[error("{addr}: cannot encode {api} v{version}: {reason}")]
    Encode {
        addr: String,
        api: &'static str,
        version: i16,
        reason: String,
    },
    #[error("{addr}: malformed {api} v{version} response: {reason}")]
    Decode {
        addr: String,
        api: &'static str,
        version: i16,
        reason: String,
    },
    #[error("{addr}: broker supports no common version of {api} (ours {ours_min}..={ours_max})")]
    NoCommonVersion {
        addr: String,
        api: &'static str,
        ours_min: i16,
        ours_max: i16,
    },
    #[error("{addr}: {api} failed with error code {code}")]
    ErrorCode { addr: String, api: &'static str, code: i16 },
    #[error("{addr}: the broker does not enable SASL mechanism {mechanism} (it enables: {enabled})")]
    SaslMechanism {
        addr: String,
        mechanism: ringmirror_protocol::sasl::Mechanism,
        enabled: String,
    },
    /// Never carries the password: `reason` is the broker's message or
    /// what our side of the exchange found wrong.
    #[error("{addr}: SASL authentication failed ({mechanism} as user {username:?}): {reason}")]
    SaslAuthentication {
        addr: String,
        mechanism: ringmirror_protocol::sasl::Mechanism,
        username: String,
        reason: String,
    },
}

impl ClientError {
    /// Whether retrying on a fresh connection may help (network trouble),
    /// as opposed to a broker that speaks something we cannot.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Self::Io { .. } | Self::CorrelationMismatch { .. } | Self::ErrorCode { .. }
        )
    }
}
