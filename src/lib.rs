//! The `ringmirror` agent: configuration and the wiring of the data
//! plane's shards and the control plane, the admin CLI and the demo. The
//! binary in `main.rs` is a thin CLI over this library (with its
//! selfcheck and dump-log tools); integration tests drive it in-process.

pub mod agent;
pub mod cli_admin;
pub mod config;
pub mod demo;
