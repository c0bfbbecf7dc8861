//! A process's CPU time and page faults, read from `/proc` while it runs
//! (all threads, live and exited), so a child can be measured over exactly
//! the window of interest rather than over its whole life.

use std::time::Duration;

/// Cumulative counters of one process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// User CPU, from `/proc/<pid>/stat` (clock-tick resolution).
    pub utime: Duration,
    /// System CPU, from `/proc/<pid>/stat` (clock-tick resolution).
    pub stime: Duration,
    pub minflt: u64,
    pub majflt: u64,
}

impl ProcStat {
    pub fn cpu(&self) -> Duration {
        self.utime + self.stime
    }

    /// Counters accumulated between `earlier` and `self`.
    pub fn since(&self, earlier: &ProcStat) -> ProcStat {
        ProcStat {
            utime: self.utime.saturating_sub(earlier.utime),
            stime: self.stime.saturating_sub(earlier.stime),
            minflt: self.minflt.saturating_sub(earlier.minflt),
            majflt: self.majflt.saturating_sub(earlier.majflt),
        }
    }
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// Parses the contents of `/proc/<pid>/stat`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); field n is rest[n - 3].
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let hz = clock_ticks_per_second();
    let ticks = |t: u64| Duration::from_nanos(t * 1_000_000_000 / hz);
    Some(ProcStat {
        minflt: field(10)?,
        majflt: field(12)?,
        utime: ticks(field(14)?),
        stime: ticks(field(15)?),
    })
}

/// Reads `/proc/<pid>/stat` (`pid` 0: this process).
pub fn read(pid: u32) -> std::io::Result<ProcStat> {
    let path = if pid == 0 {
        "/proc/self/stat".to_string()
    } else {
        format!("/proc/{pid}/stat")
    };
    let text = std::fs::read_to_string(path)?;
    parse_stat(&text).ok_or_else(|| std::io::Error::other("cannot parse /proc/<pid>/stat"))
}

/// Every live thread of process `pid`: its name (`comm`) and counters.
pub fn read_threads(pid: u32) -> std::io::Result<Vec<(String, ProcStat)>> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = entry?.path();
        // A thread that exits between the listing and these reads is skipped.
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue;
        };
        if let Some(stat) = parse_stat(&stat) {
            threads.push((comm.trim().to_string(), stat));
        }
    }
    Ok(threads)
}

/// Busy (non-idle, non-iowait) CPU time of the whole machine, from `/proc/stat`.
pub fn machine_busy() -> Duration {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return Duration::ZERO;
    };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is included in user).
    let busy: u64 = v
        .iter()
        .take(8)
        .enumerate()
        .filter(|&(i, _)| i != 3 && i != 4)
        .map(|(_, t)| t)
        .sum();
    Duration::from_nanos(busy * 1_000_000_000 / clock_ticks_per_second())
}

/// CPU time of the calling thread (nanosecond resolution).
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Pins the calling thread to `cpu` (best effort).
pub fn pin_current_thread(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays in bounds for cpu < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_with_an_odd_command_name() {
        let line = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 5000 0 7 0 250 50 0 0 20 0 3 0 100 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.minflt, s.majflt), (5000, 7));
        let hz = clock_ticks_per_second();
        assert_eq!(s.utime, Duration::from_nanos(250 * 1_000_000_000 / hz));
        assert_eq!(s.stime, Duration::from_nanos(50 * 1_000_000_000 / hz));
    }

    #[test]
    fn reads_this_process() {
        let s = read(0).unwrap();
        assert!(s.minflt > 0);
    }

    #[test]
    fn reads_this_process_threads_by_name() {
        let threads = read_threads(std::process::id()).unwrap();
        assert!(!threads.is_empty());
        assert!(threads.iter().all(|(name, _)| !name.is_empty()));
    }
}
