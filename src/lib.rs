//! The `ringmirror` agent: configuration and wiring of the data plane's
//! shards (and, later, the control plane). The binary in `main.rs` is a thin
//! CLI over this library; integration tests drive it in-process.

pub mod agent;
pub mod cli_admin;
pub mod config;
pub mod demo;
