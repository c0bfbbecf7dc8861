//! The `tansu` broker (crates.io `tansu` 0.6.0, an independent
//! Kafka-compatible broker that `scripts/setup.sh` installs) as a test
//! peer: a process on loopback with in-memory storage, and the librdkafka
//! admin and producer calls the tests make at it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

// Not every test binary that compiles this module asks for a free address.
#[allow(unused_imports)]
pub use ringmirror_kafka_harness::free_addr;

use super::{ChildGuard, KafkaConnection};

/// Bounds every wait here.
const DEADLINE: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The tansu release the tests were written against (`scripts/setup.sh`).
const TANSU_VERSION: &str = "tansu 0.6.0";

/// The tansu executable: `$TANSU`, else `tansu` on the PATH, else where
/// `cargo install` puts it; it must be the version the tests were written
/// for.
pub fn tansu_binary() -> PathBuf {
    let installed = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
        .map(|cargo_home| cargo_home.join("bin").join("tansu"));
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("tansu").is_file()));
    let binary = match (std::env::var_os("TANSU"), installed) {
        (Some(explicit), _) => PathBuf::from(explicit),
        (None, Some(installed)) if !on_path && installed.is_file() => installed,
        _ => PathBuf::from("tansu"),
    };
    let version = Command::new(&binary).arg("--version").output().unwrap_or_else(|e| {
        panic!(
            "these tests need the tansu broker ({}: {e}); scripts/setup.sh installs it \
                 (cargo install tansu --version 0.6.0 --locked --features dynostore)",
            binary.display()
        )
    });
    let printed = String::from_utf8_lossy(&version.stdout);
    assert_eq!(
        printed.trim(),
        TANSU_VERSION,
        "{} is not the tansu these tests were written for",
        binary.display()
    );
    binary
}

/// One tansu broker on `addr` with in-memory storage (gone when it stops).
pub struct Tansu {
    _child: ChildGuard,
    pub addr: String,
    log_path: PathBuf,
}

impl Tansu {
    pub fn start(binary: &Path, addr: &str, cluster_id: &str, log_path: PathBuf) -> Self {
        Self::start_advertising(binary, addr, addr, cluster_id, log_path)
    }

    /// [`Tansu::start`], telling clients to connect to `advertised` (a
    /// proxy in front of it, say) instead of `addr`.
    pub fn start_advertising(binary: &Path, addr: &str, advertised: &str, cluster_id: &str, log_path: PathBuf) -> Self {
        let url = format!("tcp://{addr}");
        let advertised_url = format!("tcp://{advertised}");
        let log = std::fs::File::create(&log_path).expect("tansu log file");
        let mut command = Command::new(binary);
        command
            .arg("broker")
            .args(["--cluster-id", cluster_id])
            .args(["--listener-url", &url])
            .args(["--advertised-listener-url", &advertised_url])
            .args(["--storage-engine", "memory://tansu/"])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("tansu log file"))
            .stderr(log);
        let child = ChildGuard::spawn(&mut command, "tansu broker").expect("start tansu");
        let tansu = Self {
            _child: child,
            addr: addr.to_owned(),
            log_path,
        };
        tansu.wait_ready();
        tansu
    }

    /// Until ApiVersions is answered.
    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let answered = KafkaConnection::connect(&self.addr, IO_TIMEOUT).and_then(|mut c| {
                c.request::<_, ApiVersionsResponse>(ApiKey::ApiVersions as i16, 3, &ApiVersionsRequest::default())
            });
            match answered {
                Ok(r) if r.error_code == 0 => return,
                other if started.elapsed() > DEADLINE => {
                    panic!("tansu at {} not ready: {other:?}\n{}", self.addr, self.log())
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

pub fn admin_client(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client")
}

/// (name, partitions, configs) of a topic to create.
pub type NewTopicSpec<'a> = (&'a str, i32, &'a [(&'a str, &'a str)]);

pub fn create_topics(bootstrap: &str, topics: &[NewTopicSpec]) {
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|&(name, partitions, configs)| {
            configs.iter().fold(
                NewTopic::new(name, partitions, TopicReplication::Fixed(1)),
                |t, &(k, v)| t.set(k, v),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(DEADLINE));
    let results =
        futures_lite::future::block_on(admin_client(bootstrap).create_topics(&new, &options)).expect("create topics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

pub fn delete_topic(bootstrap: &str, topic: &str) {
    let options = AdminOptions::new().operation_timeout(Some(DEADLINE));
    let results =
        futures_lite::future::block_on(admin_client(bootstrap).delete_topics(&[topic], &options)).expect("delete");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// `per_partition` records to every partition of `topic`, idempotent and
/// compressed with `compression`, in batches of a few records (linger).
pub fn produce(bootstrap: &str, topic: &str, partitions: i32, per_partition: usize, compression: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("compression.type", compression)
        .set("linger.ms", "5")
        .set("batch.num.messages", "7")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    for n in 0..per_partition {
        for p in 0..partitions {
            let key = format!("key-{}", n % 5);
            let value = format!("{topic}-{p}-{n}-{compression}").repeat(8);
            loop {
                match producer.send(BaseRecord::to(topic).partition(p).key(&key).payload(&value)) {
                    Ok(()) => break,
                    Err((e, _)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => panic!("queue a record for {topic}-{p}: {e}"),
                }
            }
        }
    }
    producer
        .flush(DEADLINE)
        .unwrap_or_else(|e| panic!("flush to {topic} at {bootstrap}: {e}"));
}
