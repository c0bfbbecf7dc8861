//! The `ringmirror` agent: configuration and the wiring of the data
//! plane's shards and the control plane, the admin CLI and the tools
//! (demo, selfcheck, dump-log). The binary in `main.rs` is a thin CLI over
//! this library; integration tests drive it in-process.

pub mod agent;
pub mod cli_admin;
pub mod config;
pub mod tools;
