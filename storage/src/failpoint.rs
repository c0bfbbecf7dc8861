//! Crash points for tests that kill the agent between the steps of a
//! multi-step change (such as ending a mirror) and check that a restart
//! finishes it exactly once. Set `RINGMIRROR_CRASH_AT=<point>` and the
//! process kills itself with SIGKILL — as `kill -9` would — when it reaches
//! that point. Unset (always, in production), a point costs one load of a
//! cached flag.

use std::sync::OnceLock;

/// The environment variable naming the point to crash at.
pub const CRASH_AT_ENV: &str = "RINGMIRROR_CRASH_AT";

/// Kills the process here if `RINGMIRROR_CRASH_AT` names `point`.
pub fn crash_point(point: &str) {
    static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
    let armed = CRASH_AT.get_or_init(|| std::env::var(CRASH_AT_ENV).ok().filter(|p| !p.is_empty()));
    if armed.as_deref() == Some(point) {
        tracing::warn!(point, "crash point reached: killing the process (SIGKILL)");
        // SAFETY: plain syscalls; SIGKILL cannot be caught, like `kill -9`.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
