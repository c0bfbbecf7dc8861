//! Retry backoff toward a source: exponential from a minimum up to a
//! maximum, with jitter in [50%, 100%] so that many partitions (or
//! mirrors) do not retry in lockstep. One copy for the fetchers and the
//! coordinator's FAILED retries.

use std::time::Duration;

use ringmirror_storage::clock::now_ms;

/// Doublings of the backoff at most: keeps the multiplier inside a `u32`;
/// the maximum caps the backoff long before.
const BACKOFF_DOUBLINGS_MAX: u32 = 16;

/// The wait before the `attempt`-th retry: `min` doubled per attempt, at
/// most `max`, then jittered down to no less than half of that.
pub fn jittered_backoff(min: Duration, max: Duration, attempt: u32) -> Duration {
    let base = min.saturating_mul(1 << attempt.min(BACKOFF_DOUBLINGS_MAX)).min(max);
    let jitter_permille = ((now_ms().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) % 1000) as u32;
    base / 2 + base.saturating_mul(jitter_permille) / 2000
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::jittered_backoff;

    #[test]
    fn the_backoff_doubles_up_to_the_maximum_and_keeps_at_least_half() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(10));
        for attempt in 0..64 {
            let base = min.saturating_mul(1 << attempt.min(16)).min(max);
            let backoff = jittered_backoff(min, max, attempt);
            assert!(
                backoff >= base / 2 && backoff <= base,
                "attempt {attempt}: {backoff:?} for {base:?}"
            );
        }
        assert!(jittered_backoff(min, max, 40) >= max / 2);
    }
}
