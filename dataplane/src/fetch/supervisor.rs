//! Per shard and mirror: keeps the source's metadata, places each partition
//! on the fetcher of its leader broker (starting fetchers as needed), takes
//! back partitions that need new metadata, and places them again after a
//! jittered exponential backoff. Control logic, off the hot path.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::{Connection, ConnectionOptions};

use super::events::ShardEvent;
use super::fetcher::{Fetcher, FetcherHandle, ReturnReason, Returned, Returns};
use super::metadata::{SourceMetadata, fetch_source_metadata};
use super::partition::MirrorPartition;

/// How often an idle supervisor looks at the stop flag.
const STOP_POLL_MS: u64 = 50;

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One mirror's settings as the data plane needs them.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    pub name: String,
    pub bootstrap_servers: Vec<String>,
    /// `fetch.max.bytes`
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes`
    pub fetch_partition_max_bytes: i32,
    /// `fetch.wait.max.ms`
    pub fetch_max_wait_ms: u64,
    /// `fetch.min.bytes`
    pub fetch_min_bytes: i32,
    /// `mirror.metadata.refresh.interval.ms`
    pub metadata_refresh_ms: u64,
    pub retry_backoff_ms: u64,
    pub retry_backoff_max_ms: u64,
    pub connection: ConnectionOptions,
}

impl Default for MirrorSettings {
    fn default() -> Self {
        Self {
            name: "mirror".into(),
            bootstrap_servers: Vec::new(),
            fetch_max_bytes: 50 * 1024 * 1024,
            fetch_partition_max_bytes: 1024 * 1024,
            fetch_max_wait_ms: 500,
            fetch_min_bytes: 1,
            metadata_refresh_ms: 30_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 10_000,
            connection: ConnectionOptions::default(),
        }
    }
}

impl MirrorSettings {
    /// Exponential backoff for the `attempt`-th retry, with jitter in
    /// [50%, 100%] so that many partitions do not retry in lockstep.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let base = self
            .retry_backoff_ms
            .saturating_mul(1 << attempt.min(16))
            .min(self.retry_backoff_max_ms);
        let jitter = (now_ms().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) % 1000;
        Duration::from_millis(base / 2 + base * jitter / 2000)
    }
}

struct Pending {
    partition: MirrorPartition,
    retry_at_ms: u64,
}

/// Runs one mirror's partitions on this shard until `stop` is set, then
/// returns every partition (with its log) for closing.
pub async fn run_mirror(
    settings: MirrorSettings,
    partitions: Vec<MirrorPartition>,
    events: async_channel::Sender<ShardEvent>,
    stop: Rc<Cell<bool>>,
) -> Vec<MirrorPartition> {
    let settings = Rc::new(settings);
    let topics: Vec<String> = partitions
        .iter()
        .map(|p| p.key.tp.topic.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let returns: Returns = Rc::new(RefCell::new(Vec::new()));
    let mut pending: Vec<Pending> = partitions
        .into_iter()
        .map(|partition| Pending {
            partition,
            retry_at_ms: 0,
        })
        .collect();
    let mut fetchers: HashMap<i32, FetcherHandle> = HashMap::new();
    let mut meta_conn: Option<Connection> = None;
    let mut metadata: Option<SourceMetadata> = None;
    let mut last_refresh_ms = 0u64;
    let mut metadata_failures = 0u32;
    loop {
        if stop.get() {
            return collect_on_stop(pending, fetchers, returns).await;
        }
        let returned_now: Vec<Returned> = returns.borrow_mut().drain(..).collect();
        for returned in returned_now {
            let mut partition = returned.partition;
            partition.failures += 1;
            let retry_at_ms = match returned.reason {
                ReturnReason::Stopping => 0,
                ReturnReason::Metadata | ReturnReason::BrokerUnreachable => {
                    metadata = None;
                    now_ms() + settings.backoff(partition.failures).as_millis() as u64
                }
            };
            pending.push(Pending { partition, retry_at_ms });
        }
        let now = now_ms();
        let due = pending.iter().any(|p| p.retry_at_ms <= now);
        if (due && metadata.is_none()) || now.saturating_sub(last_refresh_ms) >= settings.metadata_refresh_ms {
            match refresh(&settings, &mut meta_conn, &topics).await {
                Ok(m) => {
                    metadata_failures = 0;
                    last_refresh_ms = now_ms();
                    metadata = Some(m);
                }
                Err(e) => {
                    metadata_failures += 1;
                    tracing::warn!(mirror = settings.name, error = %e, "cannot refresh source metadata");
                    meta_conn = None;
                    wait(&returns, &stop, settings.backoff(metadata_failures)).await;
                    continue;
                }
            }
        }
        if let Some(m) = &metadata {
            place_due(&settings, m, &mut pending, &mut fetchers, &returns, &events, &stop);
        }
        let next_due = pending.iter().map(|p| p.retry_at_ms).min();
        let until_refresh = (last_refresh_ms + settings.metadata_refresh_ms).saturating_sub(now_ms());
        let sleep_ms = next_due
            .map_or(until_refresh, |d| d.saturating_sub(now_ms()).min(until_refresh))
            .max(10);
        wait(&returns, &stop, Duration::from_millis(sleep_ms)).await;
    }
}

/// Sleeps up to `max`, waking early when a partition comes back or `stop` is set.
async fn wait(returns: &Returns, stop: &Rc<Cell<bool>>, max: Duration) {
    let deadline = std::time::Instant::now() + max;
    while !stop.get() && std::time::Instant::now() < deadline && returns.borrow().is_empty() {
        let slice = deadline
            .saturating_duration_since(std::time::Instant::now())
            .min(Duration::from_millis(STOP_POLL_MS));
        glommio::timer::sleep(slice).await;
    }
}

async fn refresh(
    settings: &MirrorSettings,
    conn: &mut Option<Connection>,
    topics: &[String],
) -> Result<SourceMetadata, crate::client::ClientError> {
    if conn.is_none() {
        let mut last = None;
        for addr in &settings.bootstrap_servers {
            match Connection::connect(addr, settings.connection.clone()).await {
                Ok(c) => {
                    *conn = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if conn.is_none() {
            return Err(last.unwrap_or(crate::client::ClientError::Resolve {
                addr: "no bootstrap servers".into(),
            }));
        }
    }
    fetch_source_metadata(conn.as_mut().expect("connected"), Some(topics)).await
}

/// Places every due pending partition on its leader's fetcher.
fn place_due(
    settings: &Rc<MirrorSettings>,
    metadata: &SourceMetadata,
    pending: &mut Vec<Pending>,
    fetchers: &mut HashMap<i32, FetcherHandle>,
    returns: &Returns,
    events: &async_channel::Sender<ShardEvent>,
    stop: &Rc<Cell<bool>>,
) {
    let now = now_ms();
    let mut i = 0;
    while i < pending.len() {
        if pending[i].retry_at_ms > now {
            i += 1;
            continue;
        }
        let p = &pending[i].partition;
        let Some(source) = metadata.partitions.get(&p.key.tp) else {
            tracing::warn!(partition = %p.key, "partition not in source metadata; will look again");
            pending[i].retry_at_ms = now + settings.backoff(p.failures.max(1)).as_millis() as u64;
            i += 1;
            continue;
        };
        if source.topic_id != p.key.topic_id && source.topic_id != [0; 16] && p.key.topic_id != [0; 16] {
            tracing::error!(partition = %p.key, "source topic id changed (topic recreated?); not mirroring it");
            pending[i].retry_at_ms = u64::MAX;
            i += 1;
            continue;
        }
        let Some(addr) = (source.leader >= 0)
            .then(|| metadata.brokers.get(&source.leader))
            .flatten()
        else {
            pending[i].retry_at_ms = now + settings.backoff(p.failures.max(1)).as_millis() as u64;
            i += 1;
            continue;
        };
        let mut partition = pending.swap_remove(i).partition;
        partition.fetch_epoch = source.leader_epoch;
        partition.needs_truncation_check = true;
        let fetcher = fetchers.get(&source.leader).filter(|f| f.alive.get());
        match fetcher {
            Some(f) => f.inbox.borrow_mut().push(partition),
            None => {
                let handle = FetcherHandle {
                    inbox: Rc::new(RefCell::new(vec![partition])),
                    alive: Rc::new(Cell::new(true)),
                };
                let fetcher = Fetcher {
                    broker_id: source.leader,
                    addr: addr.clone(),
                    settings: Rc::clone(settings),
                    inbox: Rc::clone(&handle.inbox),
                    alive: Rc::clone(&handle.alive),
                    returns: Rc::clone(returns),
                    events: events.clone(),
                    stop: Rc::clone(stop),
                };
                glommio::spawn_local(fetcher.run()).detach();
                fetchers.insert(source.leader, handle);
            }
        }
    }
}

async fn collect_on_stop(
    pending: Vec<Pending>,
    mut fetchers: HashMap<i32, FetcherHandle>,
    returns: Returns,
) -> Vec<MirrorPartition> {
    let mut out: Vec<MirrorPartition> = pending.into_iter().map(|p| p.partition).collect();
    // Fetchers finish their in-flight fetch, then hand everything back.
    while fetchers.values().any(|f| f.alive.get()) {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    out.extend(returns.borrow_mut().drain(..).map(|r| r.partition));
    for (_, f) in fetchers.drain() {
        out.append(&mut f.inbox.borrow_mut());
    }
    out
}
