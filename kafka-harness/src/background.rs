//! Long-running Java processes of a test — a Kafka Streams application, a
//! group member, a Connect worker — whose output lines the test watches
//! while they run ([`Background`]), unlike [`crate::tool`] and
//! [`crate::driver`], which wait for the process to end.
//!
//! A [`Background`] owns its process (a [`ChildGuard`]: SIGKILLed when
//! dropped or when the spawning thread ends), and keeps at most
//! [`LINES_MAX`] lines of each stream; every wait on it is bounded by the
//! caller's deadline. It never interprets the lines.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{ChildGuard, QUICK_JVM_FLAGS, java_with};

/// The most lines kept of each of a process's streams (the oldest go first).
pub const LINES_MAX: usize = 100_000;
/// The heap of a background driver's JVM (a Streams application with its
/// RocksDB store off-heap, a group member).
const DRIVER_HEAP: &str = "-Xmx256m";
/// How many stderr lines a failure message shows.
const STDERR_TAIL_LINES: usize = 40;

/// Lines read so far from one stream of the process.
type Lines = Arc<Mutex<VecDeque<String>>>;

/// A running Java process whose stdout and stderr lines are collected as
/// they come.
pub struct Background {
    child: Option<ChildGuard>,
    what: String,
    stdout: Lines,
    stderr: Lines,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// Starts the Java test driver's `command` against `bootstrap` with `args`
/// in the background (see `Driver.java`).
pub fn spawn_driver(command: &str, bootstrap: &str, args: &[&str]) -> Background {
    let mut java = java_with("ringmirror.kafka.Driver", DRIVER_HEAP, QUICK_JVM_FLAGS);
    java.arg(command).args(["--bootstrap", bootstrap]).args(args);
    Background::spawn(java, format!("driver {command}"))
}

impl Background {
    /// Starts `command` (its stdout and stderr are taken over).
    pub fn spawn(mut command: Command, what: String) -> Self {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = ChildGuard::spawn(&mut command, what.clone()).unwrap_or_else(|e| panic!("start {what}: {e}"));
        let stdout: Lines = Arc::default();
        let stderr: Lines = Arc::default();
        let out = child.child().stdout.take().expect("piped stdout");
        let err = child.child().stderr.take().expect("piped stderr");
        let readers = vec![collect(out, Arc::clone(&stdout)), collect(err, Arc::clone(&stderr))];
        Self {
            child: Some(child),
            what,
            stdout,
            stderr,
            readers,
        }
    }

    /// The stdout lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.stdout.lock().expect("lines lock").iter().cloned().collect()
    }

    /// The stderr lines so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().expect("lines lock").iter().cloned().collect()
    }

    /// The last stderr lines, for failure messages.
    pub fn stderr_tail(&self) -> String {
        let err = self.stderr.lock().expect("lines lock");
        let skip = err.len().saturating_sub(STDERR_TAIL_LINES);
        err.iter().skip(skip).cloned().collect::<Vec<_>>().join("\n")
    }

    /// Waits until some stdout line satisfies `matches` and returns the first
    /// one; panics (with the process's output) after `deadline`, or if the
    /// process ends without one.
    pub fn wait_for_line(&mut self, deadline: Duration, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| matches(l)) {
                return line;
            }
            let running = self.is_running();
            if !running || started.elapsed() > deadline {
                // The readers may still hold the last lines of an ended process.
                if let Some(line) = self.lines().into_iter().find(|l| matches(l)) {
                    return line;
                }
                panic!(
                    "{}: {what}: {}\nstdout:\n{}\nstderr:\n{}",
                    self.what,
                    if running {
                        format!("not within {deadline:?}")
                    } else {
                        "the process ended without it".to_owned()
                    },
                    self.lines().join("\n"),
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(ChildGuard::is_running)
    }

    /// The process's pid, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(ChildGuard::id)
    }

    /// Waits up to `deadline` for the process to end by itself; returns its
    /// exit status and every stdout line. Panics if it is still running.
    pub fn wait_exit(mut self, deadline: Duration) -> (ExitStatus, Vec<String>) {
        let status = self.wait_status(deadline);
        (status, self.finish())
    }

    /// [`Background::wait_exit`] that keeps the process's output for
    /// [`Background::lines`] and [`Background::stderr_tail`].
    pub fn wait_status(&mut self, deadline: Duration) -> ExitStatus {
        let status = self
            .child
            .as_mut()
            .expect("process not yet reaped")
            .wait_timeout(deadline);
        let status = status.unwrap_or_else(|| {
            panic!(
                "{} still running after {deadline:?}\nstdout:\n{}\nstderr:\n{}",
                self.what,
                self.lines().join("\n"),
                self.stderr_tail()
            )
        });
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        status
    }

    /// SIGTERM, then up to `deadline` for the process to end (SIGKILL
    /// after that); returns its exit status and every stdout line.
    pub fn terminate(mut self, deadline: Duration) -> (ExitStatus, Vec<String>) {
        let mut child = self.child.take().expect("process not yet reaped");
        let status = if child.is_running() {
            child.signal(libc::SIGTERM);
            match child.wait_timeout(deadline) {
                Some(status) => status,
                None => child.kill(),
            }
        } else {
            child.wait_timeout(Duration::ZERO).expect("ended")
        };
        (status, self.finish())
    }

    /// SIGKILL (a crash); returns every stdout line.
    pub fn kill(mut self) -> Vec<String> {
        if let Some(child) = self.child.take() {
            child.kill();
        }
        self.finish()
    }

    /// Every stdout line, once the readers have seen the streams end.
    fn finish(&mut self) -> Vec<String> {
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        self.lines()
    }
}

/// A thread that appends `pipe`'s lines to `lines` until it ends.
fn collect(pipe: impl std::io::Read + Send + 'static, lines: Lines) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let mut lines = lines.lock().expect("lines lock");
            if lines.len() == LINES_MAX {
                lines.pop_front();
            }
            lines.push_back(line);
        }
    })
}
