//! The mirror partition state machine (KIP-1279's states), as the control
//! plane names it. The machine itself lives in the data plane's
//! `partition` module, below both planes, so that the mirror reports the
//! listener answers DescribeClusterMirrors from carry the typed state.

pub use ringmirror_dataplane::partition::{InvalidTransition, MirrorPartitionState};
