//! ringmirror's control plane (placeholder crate boundary; see issue 5).
