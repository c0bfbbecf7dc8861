//! KIP-1279's last mirror epoch (LME) as a type of its own, so that it is
//! never passed where another epoch is meant: the last source leader epoch
//! a mirror wrote into a partition, which a peer asks for
//! (DescribeClusterMirrors) before mirroring the partition back, to
//! truncate what diverged above it.

/// The last source leader epoch mirrored into a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LastMirrorEpoch(i32);

impl LastMirrorEpoch {
    /// No epoch: nothing was mirrored, or the peer does not know (it does
    /// not speak API 99, or leaves the partition out). Always safe: a
    /// truncation above it keeps nothing and the partition is mirrored again.
    pub const NONE: Self = Self(-1);

    /// The LME of a wire or stored epoch; any negative one is [`Self::NONE`].
    pub fn new(epoch: i32) -> Self {
        Self(epoch.max(Self::NONE.0))
    }

    /// The epoch as Kafka's records and wire carry it (-1 for none).
    pub fn get(self) -> i32 {
        self.0
    }
}

impl Default for LastMirrorEpoch {
    fn default() -> Self {
        Self::NONE
    }
}

impl std::fmt::Display for LastMirrorEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::LastMirrorEpoch;

    #[test]
    fn a_negative_epoch_is_none_and_order_follows_the_epoch() {
        assert_eq!(LastMirrorEpoch::new(-7), LastMirrorEpoch::NONE);
        assert_eq!(LastMirrorEpoch::default(), LastMirrorEpoch::NONE);
        assert!(LastMirrorEpoch::new(3) > LastMirrorEpoch::NONE);
        assert_eq!(LastMirrorEpoch::new(3).max(LastMirrorEpoch::new(5)).get(), 5);
    }
}
