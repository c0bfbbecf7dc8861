//! Disk reserved ahead of the data: how far each partition reserves
//! (a step that follows its recent append rate) and the budget that bounds
//! what one shard holds ahead of its partitions' data in total.
//!
//! The active segment reserves its file's blocks with fallocate before a
//! byte goes there, so a full disk is an error from a syscall, never a
//! SIGBUS (see [`super::segment`]). Reserving only what each write needs
//! would cost a syscall per write; reserving a fixed `preallocate_bytes`
//! ahead of every partition costs 16 MiB of disk per partition ever
//! written (156 GiB at 10 000 partitions). So the room reserved *ahead*
//! of what a write needs is:
//!
//! - a **step** of [`reserve_step_bytes`]: the partition's recent append
//!   rate ([`AppendRate`], bytes committed per second) times
//!   [`RESERVE_HORIZON_MS`], no less than [`RESERVE_STEP_BYTES_MIN`] and
//!   no more than `preallocate_bytes`;
//! - granted from the shard's [`ReserveBudget`] (the `[log]` setting
//!   `reserve_budget_bytes`, split evenly across shards): once it is spent,
//!   a write gets exactly the room it needs, page-rounded — the budget
//!   bounds what is reserved ahead, it never refuses or delays a write;
//! - given back as the data reaches it, when the segment is sealed or
//!   closed, and by [`PartitionLog::release_idle_reservation`](super::PartitionLog::release_idle_reservation)
//!   when the partition has been idle for `reserve_release_idle_ms`.
//!
//! A budget belongs to one shard: only that shard's thread takes from it
//! or gives back to it (an atomic, so that a log stays `Send`, and so that
//! `/metrics` can read it from the control plane's thread without asking
//! the shard). Nothing here is shared between shards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The smallest step a partition reserves ahead (a partition appending
/// a few bytes a second still takes a fallocate per 64 KiB, not per page).
pub const RESERVE_STEP_BYTES_MIN: u64 = 64 * 1024;
/// How much of its future a partition reserves: the room its recent rate
/// fills in this long (one fallocate a second at most, until the step
/// reaches `preallocate_bytes`).
pub const RESERVE_HORIZON_MS: u64 = 1_000;
/// The window over which appended bytes are counted before they are
/// folded into the rate.
const RATE_WINDOW_MS: u64 = 1_000;

const PAGE_BYTES: u64 = 4096;

/// The step a partition appending `bytes_per_s` reserves ahead of what a
/// write needs: `bytes_per_s` × [`RESERVE_HORIZON_MS`], clamped to
/// [[`RESERVE_STEP_BYTES_MIN`], `preallocate_bytes`] (the ceiling wins
/// when it is below the floor).
pub fn reserve_step_bytes(bytes_per_s: u64, preallocate_bytes: u64) -> u64 {
    let ceiling = preallocate_bytes;
    let floor = RESERVE_STEP_BYTES_MIN.min(ceiling);
    (bytes_per_s.saturating_mul(RESERVE_HORIZON_MS) / 1000).clamp(floor, ceiling)
}

/// One shard's budget of disk reserved ahead of its partitions' data.
#[derive(Debug)]
pub struct ReserveBudget {
    budget_bytes: u64,
    /// What the shard's active segments hold ahead of what their writes need.
    reserved_ahead_bytes: AtomicU64,
    /// Bytes given back by idle partitions, since start.
    released_bytes: AtomicU64,
}

impl ReserveBudget {
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            budget_bytes,
            reserved_ahead_bytes: AtomicU64::new(0),
            released_bytes: AtomicU64::new(0),
        }
    }

    /// The agent-wide `reserve_budget_bytes` split evenly across `shards`.
    pub fn per_shard(agent_budget_bytes: u64, shards: usize) -> Vec<Arc<Self>> {
        let share = agent_budget_bytes / shards.max(1) as u64;
        (0..shards).map(|_| Arc::new(Self::new(share))).collect()
    }

    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    /// Disk the shard's active segments hold reserved ahead of their data
    /// (and of the writes in flight), granted from this budget.
    pub fn reserved_ahead_bytes(&self) -> u64 {
        self.reserved_ahead_bytes.load(Ordering::Relaxed)
    }

    /// Reserved bytes idle partitions gave back to the file system, since start.
    pub fn released_bytes_total(&self) -> u64 {
        self.released_bytes.load(Ordering::Relaxed)
    }

    /// Takes up to `wanted` bytes (whole pages) from what is left.
    fn take_up_to(&self, wanted: u64) -> u64 {
        let left = self.budget_bytes.saturating_sub(self.reserved_ahead_bytes());
        let grant = wanted.min(left) / PAGE_BYTES * PAGE_BYTES;
        if grant > 0 {
            self.reserved_ahead_bytes.fetch_add(grant, Ordering::Relaxed);
        }
        grant
    }

    fn give_back(&self, bytes: u64) {
        if bytes > 0 {
            self.reserved_ahead_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_released(&self, bytes: u64) {
        self.released_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Bytes an active segment holds reserved ahead, granted from a budget;
/// given back when it shrinks or is dropped (sealed, deleted, closed).
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<ReserveBudget>,
    bytes: u64,
}

impl Reservation {
    /// Up to `wanted` bytes from `budget` (none when it is spent).
    pub(crate) fn take(budget: &Arc<ReserveBudget>, wanted: u64) -> Self {
        Self {
            budget: Arc::clone(budget),
            bytes: budget.take_up_to(wanted),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives back what is above `bytes` (the data reached it, or it was released).
    pub(crate) fn shrink_to(&mut self, bytes: u64) {
        if bytes < self.bytes {
            self.budget.give_back(self.bytes - bytes);
            self.bytes = bytes;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// What a write may reserve ahead: the partition's step, from its budget.
pub(crate) struct ReservePlan<'a> {
    pub(crate) budget: &'a Arc<ReserveBudget>,
    pub(crate) step_bytes: u64,
}

/// A partition's recent append rate: bytes committed in the current
/// window, folded at each window's end into a moving average that halves
/// the weight of the past every window. Updated with the time its caller
/// already has (the `now_ms` of the append): no clock read, no syscall and
/// no allocation per append.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AppendRate {
    window_start_ms: u64,
    window_bytes: u64,
    average_bytes_per_s: u64,
    last_append_ms: u64,
}

impl AppendRate {
    /// No appends yet; idle from `now_ms` (the log's opening) on.
    pub(crate) fn since(now_ms: u64) -> Self {
        Self {
            window_start_ms: now_ms,
            last_append_ms: now_ms,
            ..Self::default()
        }
    }

    /// Counts `bytes` committed at `now_ms`.
    pub(crate) fn record(&mut self, bytes: u64, now_ms: u64) {
        if now_ms.saturating_sub(self.window_start_ms) >= RATE_WINDOW_MS {
            self.average_bytes_per_s = self.average_at(now_ms);
            self.window_start_ms = now_ms;
            self.window_bytes = 0;
        }
        self.window_bytes += bytes;
        self.last_append_ms = now_ms;
    }

    /// The average once the current window is folded in at `now_ms`: each
    /// window that went by halves the old average's weight, and the bytes
    /// of the window are spread over the whole time since it began.
    fn average_at(&self, now_ms: u64) -> u64 {
        let elapsed_ms = now_ms.saturating_sub(self.window_start_ms);
        if elapsed_ms < RATE_WINDOW_MS {
            return self.average_bytes_per_s;
        }
        let windows = u32::try_from(elapsed_ms / RATE_WINDOW_MS).unwrap_or(u32::MAX).min(63);
        let window_rate = self.window_bytes.saturating_mul(1000) / elapsed_ms;
        (self.average_bytes_per_s >> windows) + (window_rate - (window_rate >> windows))
    }

    /// The rate at `now_ms`: the moving average, or what the current
    /// window already holds when more (a partition that starts fast
    /// reaches its step within its first window).
    pub(crate) fn bytes_per_s(&self, now_ms: u64) -> u64 {
        let in_window = if now_ms.saturating_sub(self.window_start_ms) < RATE_WINDOW_MS {
            self.window_bytes.saturating_mul(1000) / RATE_WINDOW_MS
        } else {
            0
        };
        self.average_at(now_ms).max(in_window)
    }

    /// How long since the last append (or since [`since`](Self::since)).
    pub(crate) fn idle_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.last_append_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn the_step_is_the_rate_times_the_horizon_within_floor_and_ceiling() {
        let ceiling = 16 * MIB;
        // Idle, or a trickle: the floor.
        assert_eq!(reserve_step_bytes(0, ceiling), RESERVE_STEP_BYTES_MIN);
        assert_eq!(reserve_step_bytes(1024, ceiling), RESERVE_STEP_BYTES_MIN);
        // In between: one horizon of appends.
        assert_eq!(reserve_step_bytes(MIB, ceiling), MIB * RESERVE_HORIZON_MS / 1000);
        assert_eq!(
            reserve_step_bytes(3 * MIB, ceiling),
            3 * MIB * RESERVE_HORIZON_MS / 1000
        );
        // Fast: the ceiling, `preallocate_bytes`.
        assert_eq!(reserve_step_bytes(2 * 1024 * MIB, ceiling), ceiling);
        assert_eq!(reserve_step_bytes(u64::MAX, ceiling), ceiling);
        // A ceiling below the floor wins (`preallocate_bytes` set small).
        assert_eq!(reserve_step_bytes(0, 4096), 4096);
        assert_eq!(reserve_step_bytes(u64::MAX, 4096), 4096);
        assert_eq!(reserve_step_bytes(u64::MAX, 0), 0);
    }

    #[test]
    fn the_rate_follows_appends_and_decays_when_idle() {
        let t0 = 1_700_000_000_000;
        let mut rate = AppendRate::since(t0 - 5);
        assert_eq!(rate.bytes_per_s(t0), 0);
        assert_eq!(rate.idle_ms(t0), 5);
        // 4 MiB within the first window: at least 4 MiB/s right away.
        rate.record(4 * MIB, t0);
        rate.record(0, t0 + 10);
        assert!(rate.bytes_per_s(t0 + 10) >= 4 * MIB);
        assert_eq!(rate.idle_ms(t0 + 25), 15);
        // A steady 2 MiB per window converges to 2 MiB/s.
        let mut t = t0;
        for _ in 0..20 {
            t += RATE_WINDOW_MS;
            rate.record(2 * MIB, t);
        }
        let steady = rate.bytes_per_s(t + RATE_WINDOW_MS);
        assert!(
            (2 * MIB * 9 / 10..=2 * MIB * 11 / 10).contains(&steady),
            "steady rate {steady}"
        );
        // Idle: the past halves every window and the last window's bytes
        // spread over the time since; after a minute the step is the floor.
        let later = rate.bytes_per_s(t + 8 * RATE_WINDOW_MS);
        assert!(later < steady / 4, "{later} after 8 idle windows");
        let idle = rate.bytes_per_s(t + 64 * RATE_WINDOW_MS);
        assert_eq!(reserve_step_bytes(idle, 16 * MIB), RESERVE_STEP_BYTES_MIN, "{idle} B/s");
        // Time going backwards (a caller's clock) is not a panic.
        rate.record(1, t0);
        assert!(rate.bytes_per_s(0) > 0);
    }

    #[test]
    fn a_budget_grants_whole_pages_up_to_what_is_left_and_takes_them_back() {
        let budget = Arc::new(ReserveBudget::new(10 * 4096 + 100));
        let a = Reservation::take(&budget, 6 * 4096 + 1);
        assert_eq!(a.bytes(), 6 * 4096);
        let mut b = Reservation::take(&budget, 6 * 4096);
        assert_eq!(b.bytes(), 4 * 4096, "only what is left");
        assert_eq!(Reservation::take(&budget, 4096).bytes(), 0, "spent");
        assert_eq!(budget.reserved_ahead_bytes(), 10 * 4096);
        b.shrink_to(4096);
        assert_eq!(budget.reserved_ahead_bytes(), 7 * 4096);
        b.shrink_to(8 * 4096);
        assert_eq!(b.bytes(), 4096, "shrinking never grows");
        drop(a);
        drop(b);
        assert_eq!(budget.reserved_ahead_bytes(), 0);
        let shares = ReserveBudget::per_shard(1 << 30, 3);
        assert_eq!(shares.len(), 3);
        assert!(shares.iter().all(|s| s.budget_bytes() == (1 << 30) / 3));
    }
}
