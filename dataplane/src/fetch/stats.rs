//! Fetch statistics a mirror's fetchers keep on their shard — round-trip
//! latency (an HDR histogram), fetches and error codes — and hand to the
//! control plane as deltas once a second, for `/metrics`. One record per
//! Fetch request, never per record.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Latencies above this are counted at it (a fetch can long-poll for
/// `fetch.wait.max.ms`; anything near a minute is an outage anyway).
const LATENCY_MAX_US: u64 = 60_000_000;
/// Two significant digits: 1% precision at a few KiB per histogram.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 2;

#[derive(Debug, Clone)]
pub struct FetchStats {
    pub fetches: u64,
    /// Error codes answered, per partition or for a whole response.
    pub errors: BTreeMap<i16, u64>,
    /// Fetch round trips, in microseconds.
    pub latency_us: Histogram<u64>,
}

impl Default for FetchStats {
    fn default() -> Self {
        Self {
            fetches: 0,
            errors: BTreeMap::new(),
            latency_us: Histogram::new_with_bounds(1, LATENCY_MAX_US, LATENCY_SIGNIFICANT_DIGITS)
                .expect("valid histogram bounds"),
        }
    }
}

impl PartialEq for FetchStats {
    fn eq(&self, other: &Self) -> bool {
        self.fetches == other.fetches && self.errors == other.errors && self.latency_us == other.latency_us
    }
}

impl Eq for FetchStats {}

impl FetchStats {
    pub fn record_fetch(&mut self, round_trip: Duration) {
        self.fetches += 1;
        let us = u64::try_from(round_trip.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.saturating_record(us.clamp(1, LATENCY_MAX_US));
    }

    pub fn record_error(&mut self, code: i16) {
        *self.errors.entry(code).or_default() += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.fetches == 0 && self.errors.is_empty()
    }

    /// Adds another shard's (or period's) statistics to these.
    pub fn merge(&mut self, other: &Self) {
        self.fetches += other.fetches;
        for (code, n) in &other.errors {
            *self.errors.entry(*code).or_default() += n;
        }
        // Same bounds on both sides: adding cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
    }

    /// The latency at each quantile, in microseconds.
    pub fn latency_quantiles_us(&self, quantiles: &[f64]) -> Vec<(f64, u64)> {
        if self.latency_us.is_empty() {
            return Vec::new();
        }
        quantiles
            .iter()
            .map(|&q| (q, self.latency_us.value_at_quantile(q)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_merge_and_report_quantiles() {
        let mut a = FetchStats::default();
        assert!(a.is_empty() && a.latency_quantiles_us(&[0.5]).is_empty());
        for ms in 1..=100 {
            a.record_fetch(Duration::from_millis(ms));
        }
        a.record_error(6);
        let mut b = FetchStats::default();
        b.record_fetch(Duration::from_secs(3600));
        b.record_error(6);
        b.record_error(74);
        a.merge(&b);
        assert_eq!(a.fetches, 101);
        assert_eq!(a.errors, BTreeMap::from([(6, 2), (74, 1)]));
        let q = a.latency_quantiles_us(&[0.5, 1.0]);
        // The median of 1..=100 ms is 50 or 51 ms; 2 significant digits
        // report the top of its bucket, within 1%.
        assert!((50_000..=51_600).contains(&q[0].1), "{q:?}");
        assert!(
            q[1].1 >= LATENCY_MAX_US && q[1].1 <= LATENCY_MAX_US * 101 / 100,
            "{q:?}"
        );
    }
}
