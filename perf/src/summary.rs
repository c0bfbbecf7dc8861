//! What the harnesses' reports are made of: rates in decimal units (MB/s,
//! CPU seconds per GB), medians of repeated runs, and the line that says
//! which machine and load a table was measured on. Pure arithmetic and
//! reads of `/proc`; it never measures a window itself (`procstat` and the
//! binaries do).

use std::process::Command;
use std::time::Duration;

/// Bytes in the GB of "per GB" (10^9: the unit Kafka's tools report in).
pub const GB: f64 = 1e9;

/// MB/s (10^6 bytes) of `bytes` over `wall`.
pub fn mb_per_s(bytes: u64, wall: Duration) -> f64 {
    bytes as f64 / 1e6 / wall.as_secs_f64()
}

/// CPU seconds per GB (10^9 bytes).
pub fn cpu_s_per_gb(cpu: Duration, bytes: u64) -> f64 {
    cpu.as_secs_f64() / (bytes as f64 / GB)
}

/// The median of `v` (NaN when empty): what a table shows of repeated runs.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The CPUs (count and model) and kernel a table was measured on.
pub fn machine_line() -> String {
    let uname = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpus} CPUs ({model}), Linux {uname}")
}

/// The 1, 5 and 15 minute load averages, from `/proc/loadavg`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_decimal_megabyte_and_gigabyte() {
        assert_eq!(mb_per_s(2_000_000_000, Duration::from_secs(2)), 1000.0);
        assert_eq!(cpu_s_per_gb(Duration::from_millis(1500), 3_000_000_000), 0.5);
    }

    #[test]
    fn median_of_odd_and_even_counts_and_of_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn load_average_has_three_fields() {
        assert_eq!(loadavg().split(' ').count(), 3);
    }
}
