//! Finds which source partitions each mirror covers — named topics, and
//! topics matching the include regex but not the exclude — and hands the
//! ones not yet placed to their shards. It runs once at start-up (the agent
//! waits for that round) and then every mirror's metadata refresh interval,
//! so a topic that had a retriable error at start-up, a topic created at the
//! source later, and partitions added to a topic are all picked up.
//!
//! Control logic on its own executor thread; it reaches shards only
//! through their command channels.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder};
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_dataplane::fetch::{MirrorSettings, PartitionKey, SourceMetadata, fetch_source_metadata};
use ringmirror_dataplane::log::TopicPartition;
use ringmirror_dataplane::shard::ShardCommand;

use ringmirror_control::mirror::{MirrorConfig, TopicSelection};

/// How often the discovery loop looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Retry backoff after a failed round, doubling up to the refresh interval.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(200);

/// Where each (mirror, partition) lives: `Some(shard)`, or `None` once an
/// operator removed it (discovery then leaves it alone).
pub type Placement = Arc<Mutex<BTreeMap<(String, TopicPartition), Option<usize>>>>;

struct MirrorDiscovery {
    config: MirrorConfig,
    settings: MirrorSettings,
    selection: TopicSelection,
    conn: Option<Connection>,
    next_round: Instant,
    failures: u32,
    /// Named topics already reported missing (so the log is not flooded).
    reported_missing: BTreeSet<String>,
}

pub struct Discovery {
    stop: Arc<AtomicBool>,
    join: ExecutorJoinHandle<()>,
}

impl Discovery {
    /// Starts the loop; `first_round` hears once the first round is done.
    pub fn start(
        mirrors: &[MirrorConfig],
        shards: Vec<async_channel::Sender<ShardCommand>>,
        placement: Placement,
        io_memory_bytes: usize,
        first_round: std::sync::mpsc::Sender<()>,
    ) -> anyhow::Result<Self> {
        // Regexes were checked when the config was loaded; check again here
        // so the loop below can rely on them.
        for m in mirrors {
            TopicSelection::new(m)?;
        }
        let mirrors = mirrors.to_vec();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let join = LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name("discovery")
            .io_memory(io_memory_bytes)
            .spawn(move || async move {
                // Connections live on this executor: build the state here.
                let state = mirrors
                    .into_iter()
                    .map(|m| MirrorDiscovery {
                        settings: m.settings(),
                        selection: TopicSelection::new(&m).expect("checked above"),
                        config: m,
                        conn: None,
                        next_round: Instant::now(),
                        failures: 0,
                        reported_missing: BTreeSet::new(),
                    })
                    .collect();
                run(state, shards, placement, stop_flag, first_round).await
            })
            .map_err(|e| anyhow::anyhow!("start discovery executor: {e}"))?;
        Ok(Self { stop, join })
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        if let Err(e) = self.join.join() {
            tracing::error!(error = %e, "discovery executor failed");
        }
    }
}

async fn run(
    mut mirrors: Vec<MirrorDiscovery>,
    shards: Vec<async_channel::Sender<ShardCommand>>,
    placement: Placement,
    stop: Arc<AtomicBool>,
    first_round: std::sync::mpsc::Sender<()>,
) {
    let mut first = Some(first_round);
    while !stop.load(Ordering::Acquire) {
        for m in &mut mirrors {
            if Instant::now() < m.next_round {
                continue;
            }
            let refresh = Duration::from_millis(m.config.metadata_refresh_interval_ms);
            match metadata(m).await {
                Ok(metadata) => {
                    m.failures = 0;
                    m.next_round = Instant::now() + refresh;
                    report_missing(m, &metadata);
                    place_new(m, &metadata, &shards, &placement);
                }
                Err(e) => {
                    m.failures += 1;
                    m.conn = None;
                    let backoff = RETRY_BACKOFF_MIN.saturating_mul(1 << m.failures.min(10)).min(refresh);
                    tracing::warn!(mirror = m.config.name, error = %e, retry_in = ?backoff, "cannot read source metadata");
                    m.next_round = Instant::now() + backoff;
                }
            }
        }
        if let Some(done) = first.take() {
            let _ = done.send(());
        }
        let next = mirrors
            .iter()
            .map(|m| m.next_round)
            .min()
            .unwrap_or_else(|| Instant::now() + STOP_POLL);
        while !stop.load(Ordering::Acquire) && Instant::now() < next {
            glommio::timer::sleep(next.saturating_duration_since(Instant::now()).min(STOP_POLL)).await;
        }
    }
}

async fn metadata(m: &mut MirrorDiscovery) -> Result<SourceMetadata, ClientError> {
    if m.conn.is_none() {
        let mut last = None;
        for addr in &m.settings.bootstrap_servers {
            match Connection::connect(addr, m.settings.connection.clone()).await {
                Ok(c) => {
                    m.conn = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if m.conn.is_none() {
            return Err(last.unwrap_or(ClientError::Resolve {
                addr: "no bootstrap servers".into(),
            }));
        }
    }
    let topics = m.selection.request_topics();
    fetch_source_metadata(m.conn.as_mut().expect("connected"), topics.as_deref()).await
}

fn report_missing(m: &mut MirrorDiscovery, metadata: &SourceMetadata) {
    for name in m.selection.named() {
        if !metadata.topics.contains_key(name) {
            if m.reported_missing.insert(name.clone()) {
                tracing::warn!(
                    mirror = m.config.name,
                    topic = name,
                    "topic not (yet) available at the source; will look again"
                );
            }
        } else {
            m.reported_missing.remove(name);
        }
    }
}

/// Sends every wanted partition that is not placed yet to its shard.
fn place_new(
    m: &MirrorDiscovery,
    metadata: &SourceMetadata,
    shards: &[async_channel::Sender<ShardCommand>],
    placement: &Placement,
) {
    let mut placement = placement.lock().expect("placement lock");
    let mut added = 0;
    for (tp, source) in &metadata.partitions {
        if !m.selection.wants(&tp.topic) || placement.contains_key(&(m.config.name.clone(), tp.clone())) {
            continue;
        }
        if let Some(((other, _), _)) = placement
            .iter()
            .find(|((mirror, t), _)| t == tp && *mirror != m.config.name)
        {
            tracing::error!(mirror = m.config.name, other, %tp, "partition is already mirrored by another mirror; each destination partition has one source");
            continue;
        }
        let key = PartitionKey {
            mirror: m.config.name.clone(),
            topic_id: source.topic_id,
            tp: tp.clone(),
        };
        let shard = key.shard(shards.len());
        placement.insert((m.config.name.clone(), tp.clone()), Some(shard));
        if let Err(e) = shards[shard].try_send(ShardCommand::AddPartition {
            settings: m.settings.clone(),
            key,
        }) {
            tracing::error!(%tp, error = %e, "shard did not take the partition");
        }
        added += 1;
    }
    if added > 0 {
        tracing::info!(mirror = m.config.name, added, "mirroring new partitions");
    }
}
