//! Kafka Connect in distributed mode (Connect's own `ConnectDistributed`,
//! a JVM per worker, its REST API on loopback) running a FileStream source
//! and sink connector through a worker restart — at one cluster, or
//! stopped at Kafka and restarted at the agent after a failover — and what
//! a cluster shows of it. Every wait is bounded and waits on a condition.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common;
use crate::common::kafka::Background;
use crate::scenarios::{DEADLINE, cluster, stopped_cleanly};

/// A Connect worker in distributed mode (its own JVM), with its REST API on loopback.
struct ConnectWorker {
    process: Background,
    rest: String,
}

impl ConnectWorker {
    /// Starts a worker whose group, config, offset and status topics are
    /// `<tag>-…` at `bootstrap`; its properties file is written in `dir`.
    /// Returns once its REST API answers.
    fn start(bootstrap: &str, tag: &str, dir: &Path, rest_addr: &str) -> Self {
        let properties = dir.join(format!("{tag}-worker.properties"));
        std::fs::write(
            &properties,
            format!(
                "bootstrap.servers={bootstrap}\n\
                 group.id={tag}-workers\n\
                 key.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 value.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 config.storage.topic={tag}-configs\n\
                 offset.storage.topic={tag}-offsets\n\
                 status.storage.topic={tag}-status\n\
                 config.storage.replication.factor=-1\n\
                 offset.storage.replication.factor=-1\n\
                 status.storage.replication.factor=-1\n\
                 offset.storage.partitions=3\n\
                 status.storage.partitions=2\n\
                 offset.flush.interval.ms=500\n\
                 scheduled.rebalance.max.delay.ms=1000\n\
                 listeners=http://{rest_addr}\n\
                 plugin.discovery=only_scan\n"
            ),
        )
        .expect("write the worker's properties");
        let mut java = common::kafka::java_with(
            "org.apache.kafka.connect.cli.ConnectDistributed",
            "-Xmx256m",
            common::kafka::QUICK_JVM_FLAGS,
        );
        java.arg(&properties);
        let mut process = Background::spawn(java, format!("Connect worker {tag}"));
        let rest = format!("http://{rest_addr}");
        let started = std::time::Instant::now();
        while rest_call("GET", &format!("{rest}/connectors"), None).is_err() {
            assert!(
                process.is_running() && started.elapsed() < DEADLINE,
                "the Connect worker's REST API did not answer within {DEADLINE:?}:\n{}",
                errors(&process)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Self { process, rest }
    }

    fn get(&self, path: &str) -> serde_json::Value {
        rest_call("GET", &format!("{}{path}", self.rest), None)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.process.stderr_tail()))
    }

    fn put(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        rest_call("PUT", &format!("{}{path}", self.rest), Some(body))
            .unwrap_or_else(|e| panic!("PUT {path}: {e}\n{}", self.process.stderr_tail()))
    }

    /// (connector state, task states) of `name`, once the worker reports them.
    fn status(&self, name: &str) -> Result<(String, Vec<String>), String> {
        let status = rest_call("GET", &format!("{}/connectors/{name}/status", self.rest), None)?;
        let connector = status["connector"]["state"].as_str().unwrap_or_default().to_owned();
        let tasks = status["tasks"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["state"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        Ok((connector, tasks))
    }

    fn wait_running(&self, name: &str) {
        common::wait_until(DEADLINE, &format!("{name} RUNNING"), || match self.status(name) {
            Ok((c, t)) if c == "RUNNING" && t == ["RUNNING"] => Ok(()),
            other => Err(format!("{other:?}\n{}", self.process.stderr_tail())),
        });
    }

    /// A graceful stop (SIGTERM: tasks stopped, offsets flushed, the group left).
    fn stop(self) {
        let (status, _) = self.process.terminate(DEADLINE);
        assert!(stopped_cleanly(status), "the worker stopped: {status}");
    }
}

/// The error lines of a JVM's log and their causes, for failure messages.
fn errors(process: &Background) -> String {
    let lines: Vec<String> = process
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("ERROR") || l.starts_with("Caused by") || l.contains("Exception:"))
        .collect();
    lines.join("\n")
}

/// One call to a Connect REST API; the answer's JSON, or why there is none.
fn rest_call(method: &str, url: &str, body: Option<serde_json::Value>) -> Result<serde_json::Value, String> {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(body.map(|b| b.to_string()).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let mut response = http.run(request).map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
}

/// What a cluster shows of a [`ConnectScenario`], with the tag's names as `<tag>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectView {
    /// The connectors the restarted worker lists (from its config topic).
    pub connectors: Vec<String>,
    /// The source's file position and the sink's topic offset before the
    /// restart and after it (from the offset topic and the sink's group).
    pub offsets_before: (i64, i64),
    pub offsets_after: (i64, i64),
    /// The sink's file: exactly the source's lines, once each.
    pub sink_file_is_source_file: bool,
}

/// The source connector's file position and the sink's committed offset, through the REST API.
fn connector_offsets(worker: &ConnectWorker, tag: &str) -> Result<(i64, i64), String> {
    let source = rest_call("GET", &format!("{}/connectors/{tag}-source/offsets", worker.rest), None)?;
    let sink = rest_call("GET", &format!("{}/connectors/{tag}-sink/offsets", worker.rest), None)?;
    let position = source["offsets"][0]["offset"]["position"]
        .as_i64()
        .ok_or(format!("source offsets {source}"))?;
    let offset = sink["offsets"][0]["offset"]["kafka_offset"]
        .as_i64()
        .ok_or(format!("sink offsets {sink}"))?;
    Ok((position, offset))
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn text(from: usize, to: usize) -> String {
    (from..to).map(|i| format!("line-{i}\n")).collect()
}

/// A Connect worker with its topics (`<tag>-configs`, `<tag>-offsets`,
/// `<tag>-status`) runs a FileStreamSource connector (a file of 50 lines →
/// topic `<tag>-lines`, which the test creates) and a FileStreamSink (that
/// topic → another file) until the sink file holds every line; it is
/// stopped, 30 lines are appended, and a new worker with the same topics
/// — at the same cluster, or at the agent after a failover — carries on:
/// the connectors come back from the config topic, RUNNING (statuses), the
/// source from its stored file position and the sink from its committed
/// offset; the sink file ends up holding every line once.
pub struct ConnectScenario {
    tag: String,
    dir: PathBuf,
    source_file: PathBuf,
    sink_file: PathBuf,
    rest_addr: String,
}

impl ConnectScenario {
    /// The scenario's files in `dir`, the source file holding its first 50 lines.
    pub fn new(tag: &str, dir: &Path) -> Self {
        let source_file = dir.join(format!("{tag}-in.txt"));
        std::fs::write(&source_file, text(0, 50)).expect("the source file");
        Self {
            tag: tag.to_owned(),
            dir: dir.to_owned(),
            sink_file: dir.join(format!("{tag}-out.txt")),
            source_file,
            rest_addr: common::kafka::free_addr(),
        }
    }

    /// The topic the source connector writes and the sink reads.
    pub fn lines_topic(&self) -> String {
        format!("{}-lines", self.tag)
    }

    /// The first worker, at `bootstrap`: the connectors created, the 50
    /// lines through, the worker stopped. Returns the offsets it stored.
    pub fn first_run(&self, bootstrap: &str) -> (i64, i64) {
        let tag = &self.tag;
        let worker = ConnectWorker::start(bootstrap, tag, &self.dir, &self.rest_addr);
        worker.put(
            &format!("/connectors/{tag}-source/config"),
            serde_json::json!({
                "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max": "1",
                "file": self.source_file,
                "topic": self.lines_topic(),
            }),
        );
        worker.put(
            &format!("/connectors/{tag}-sink/config"),
            serde_json::json!({
                "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "tasks.max": "1",
                "file": self.sink_file,
                "topics": self.lines_topic(),
            }),
        );
        worker.wait_running(&format!("{tag}-source"));
        worker.wait_running(&format!("{tag}-sink"));
        let offsets = self.wait_caught_up(&worker, bootstrap, 50);
        worker.stop();
        offsets
    }

    /// 30 lines appended, and a new worker at `bootstrap` carries on until
    /// the sink file holds all 80: the connectors it found (sorted) and the
    /// offsets it stored.
    pub fn second_run(&self, bootstrap: &str) -> (Vec<String>, (i64, i64)) {
        let tag = &self.tag;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&self.source_file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text(50, 80).as_bytes()))
            .expect("append to the source file");
        let worker = ConnectWorker::start(bootstrap, tag, &self.dir, &self.rest_addr);
        let mut connectors: Vec<String> = common::wait_until(DEADLINE, "the connectors are back", || {
            let listed = worker.get("/connectors");
            let names: Vec<String> = listed
                .as_array()
                .map(|a| a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            if names.len() == 2 {
                Ok(names)
            } else {
                Err(format!("{listed}"))
            }
        });
        connectors.sort();
        worker.wait_running(&format!("{tag}-source"));
        worker.wait_running(&format!("{tag}-sink"));
        let offsets = self.wait_caught_up(&worker, bootstrap, 80);
        worker.stop();
        (connectors, offsets)
    }

    /// Both runs at `bootstrap`.
    pub fn run(&self, bootstrap: &str) -> ConnectView {
        let offsets_before = self.first_run(bootstrap);
        let (connectors, offsets_after) = self.second_run(bootstrap);
        self.view(connectors, offsets_before, offsets_after)
    }

    pub fn view(&self, connectors: Vec<String>, offsets_before: (i64, i64), offsets_after: (i64, i64)) -> ConnectView {
        ConnectView {
            connectors: connectors.into_iter().map(|n| n.replace(&self.tag, "<tag>")).collect(),
            offsets_before,
            offsets_after,
            sink_file_is_source_file: lines_of(&self.sink_file) == lines_of(&self.source_file),
        }
    }

    /// Waits until the sink file holds `lines` lines, the source
    /// connector's stored position is the end of the source file and the
    /// sink has committed the lines topic's end at `bootstrap`; returns
    /// those offsets as the REST API shows them.
    fn wait_caught_up(&self, worker: &ConnectWorker, bootstrap: &str, lines: i64) -> (i64, i64) {
        let size = std::fs::metadata(&self.source_file).expect("the source file").len() as i64;
        let topic = self.lines_topic();
        common::wait_until(DEADLINE, "the connectors caught up", || {
            let written = lines_of(&self.sink_file).len() as i64;
            let offsets = connector_offsets(worker, &self.tag)?;
            let end = common::source_partition_log(bootstrap, &topic, 0, DEADLINE).high_watermark;
            if written == lines && offsets == (size, end) {
                Ok(offsets)
            } else {
                Err(format!(
                    "{written} lines, offsets {offsets:?}, topic end {end}\n{}",
                    worker.process.stderr_tail()
                ))
            }
        })
    }
}

/// The scenario at Kafka, run once per test binary: what the agent must show.
pub fn kafka_connect_view() -> &'static ConnectView {
    static VIEW: OnceLock<ConnectView> = OnceLock::new();
    VIEW.get_or_init(|| {
        let c = cluster();
        let dir = tempfile::tempdir().unwrap();
        let scenario = ConnectScenario::new("wl-connect-ref", dir.path());
        c.create_topic(&scenario.lines_topic(), 1, &[]);
        scenario.run(&c.bootstrap)
    })
}
