//! The agent: opens the data directory, serves every partition log found
//! there (read-only) on the client listener, looks up the mirrored
//! partitions at each source, places them on shards, and runs until stopped. On stop,
//! every shard finishes its in-flight fetch, flushes and closes its logs,
//! and the data directory is marked cleanly shut down, so the next start
//! resumes from each log's end without a recovery scan.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use ringmirror_dataplane::fetch::{ShardEvent, ShardEventCounts, StateEvent, StopReason, TelemetryEvent, event_queue};
use ringmirror_dataplane::kafka::ListenerSettings;
use ringmirror_dataplane::partition::{
    CatalogHandle, MirrorReportsHandle, ProducerIds, ServerIdentity, ShardLinks, shard_for,
};
use ringmirror_dataplane::security::AclStore;
use ringmirror_dataplane::shard::{ShardCommand, ShardHandle, ShardPlan, ShardServing, spawn_shard};
use ringmirror_dataplane::transactions::{TransactionConfig, TransactionStore};
use ringmirror_storage::log::{LogDir, OffsetCheckpoints, ReserveBudget, TopicPartition};

use ringmirror_control::admin::http::{AdminSecurity, AdminServer};
use ringmirror_control::admin::{AdminAnswer, AdminCall, AdminError, AdminRequest, TopicPartitionName};
use ringmirror_control::coordinator::{CoordinatorSetup, MirrorCoordinator};
use ringmirror_control::state_store::MirrorStateStore;

use crate::config::{AGENT_SASL_USER, AgentConfig, GroupsConfig, ListenerConfig};
use ringmirror_protocol::sasl::{Mechanism, Password, SaslClientConfig, SaslServerConfig, Secret, scram};

/// glommio's default registered I/O memory per ring.
const IO_MEMORY_DEFAULT_BYTES: usize = 10 << 20;
/// glommio registers I/O memory on this many rings per executor.
const IO_RINGS_PER_EXECUTOR: usize = 3;
/// The agent's own state in the data directory (never served as a topic:
/// its name is not a `<topic>-<partition>`).
pub const AGENT_STATE_DIR: &str = "__ringmirror";
/// How long `start` waits for the first metadata round before returning.
const FIRST_ROUND_WAIT: Duration = Duration::from_secs(30);
/// The `__mirror_state` log, under the agent's state directory.
const MIRROR_STATE_DIR: &str = "mirror-state";
/// Admin calls (from the HTTP API and the agent's own callers) queued for
/// the coordinator at most; a caller beyond waits for room.
const ADMIN_CALLS_QUEUED_MAX: usize = 64;

/// What the agent knows of one mirrored partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionStatus {
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub stopped: Option<StopReason>,
    pub truncations: u32,
    /// Batches refused (bad CRC, bad framing) and fetched again.
    pub bad_batches: u64,
    /// Set once mirroring has ended (failover): (local writes start at this
    /// offset, at this leader epoch).
    pub mirroring_ended: Option<(i64, i32)>,
}

pub type Status = BTreeMap<(String, TopicPartition), PartitionStatus>;

/// Called on the events thread for every shard event (measurement, tests).
pub type EventObserver = Box<dyn Fn(&ShardEvent) + Send>;

pub struct Agent {
    shards: Vec<ShardHandle>,
    /// Owns the mirrors and their partitions' states.
    coordinator: MirrorCoordinator,
    /// Requests to the coordinator (the admin API's, and this API's).
    admin_calls: async_channel::Sender<AdminCall>,
    admin_server: Option<AdminServer>,
    log_dir: Arc<LogDir>,
    status: Arc<Mutex<Status>>,
    /// Ends when every shard has; returns the offset checkpoints it kept.
    events_thread: JoinHandle<OffsetCheckpoints>,
    /// The address clients connect to, when listening.
    listener_addr: Option<std::net::SocketAddr>,
    /// What the listener answers to DescribeClusterMirrors (published by
    /// the control plane).
    mirror_reports: Arc<MirrorReportsHandle>,
    /// The listener's topics and their config overrides.
    catalog: Arc<CatalogHandle>,
    /// Holds the listening port (bound with SO_REUSEPORT, never accepting)
    /// so that a port picked by the kernel stays ours while shards bind it.
    _port_reservation: Option<socket2::Socket>,
    /// An exclusive lock on the data directory, held while running.
    _data_dir_lock: std::fs::File,
}

/// Locks `<data_dir>/.lock` (as Kafka does) so that a second agent cannot
/// open logs this one writes.
fn lock_data_dir(data_dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(data_dir).with_context(|| format!("create {}", data_dir.display()))?;
    let path = data_dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "{} is in use by another process ({})",
            data_dir.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(file)
}

/// Binds `addr` with SO_REUSEPORT without listening, to learn (and hold)
/// the port when `addr` asks for any free one.
fn reserve_port(addr: std::net::SocketAddr) -> anyhow::Result<(socket2::Socket, std::net::SocketAddr)> {
    use socket2::{Domain, Socket, Type};
    // SO_REUSEPORT would let us share a port another process listens on
    // (and split its clients with it): a plain bind first says whether the
    // port is free. It also fails while the connections of an agent that
    // was killed linger on the port (their sockets have SO_REUSEPORT): the
    // port is ours again when no process listens on it.
    if addr.port() != 0
        && let Err(e) = std::net::TcpListener::bind(addr)
        && (e.kind() != std::io::ErrorKind::AddrInUse || someone_listens(addr))
    {
        return Err(e).with_context(|| format!("{addr} is in use"));
    }
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_port(true)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    let bound = socket
        .local_addr()?
        .as_socket()
        .context("listener address is not an IP address")?;
    Ok((socket, bound))
}

/// Whether a process accepts connections on `addr` (its port on loopback
/// when `addr` is any address).
fn someone_listens(addr: std::net::SocketAddr) -> bool {
    let target = if addr.ip().is_unspecified() {
        let loopback: std::net::IpAddr = if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        std::net::SocketAddr::new(loopback, addr.port())
    } else {
        addr
    };
    std::net::TcpStream::connect_timeout(&target, Duration::from_secs(1)).is_ok()
}

/// Group offsets live in one log per shard, placed by hashing the group id
/// over the shard count: a different count would strand them. The count is
/// kept in the agent's state directory and a change is refused, loudly.
fn check_group_shard_count(data_dir: &std::path::Path, shards: usize) -> anyhow::Result<()> {
    let dir = data_dir.join(AGENT_STATE_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let path = dir.join("group-shards");
    let kept = match std::fs::read_to_string(&path) {
        Ok(text) => Some(
            text.trim()
                .parse::<usize>()
                .with_context(|| format!("{}: not a shard count", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let has_group_logs = std::fs::read_dir(&dir)
        .with_context(|| format!("list {}", dir.display()))?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("group-offsets-"));
    if let Some(kept) = kept.filter(|&k| k != shards && has_group_logs) {
        bail!(
            "the consumer group offsets in {} were written with {kept} shards; run with `shards = {kept}` (another shard count would strand them)",
            dir.display()
        );
    }
    if kept != Some(shards) {
        std::fs::write(&path, format!("{shards}\n")).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// The cluster id clients see: configured, or kept in the data directory's
/// `meta.properties` (generated on first start), as a Kafka broker keeps it.
fn cluster_id(data_dir: &std::path::Path, configured: Option<&str>) -> anyhow::Result<String> {
    if let Some(id) = configured {
        return Ok(id.to_owned());
    }
    let path = data_dir.join("meta.properties");
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Some(id) = text.lines().find_map(|l| l.strip_prefix("cluster.id="))
    {
        return Ok(id.trim().to_owned());
    }
    let id = ringmirror_dataplane::partition::catalog::random_cluster_id().context("generate a cluster id")?;
    std::fs::write(&path, format!("version=1\ncluster.id={id}\n"))
        .with_context(|| format!("write {}", path.display()))?;
    Ok(id)
}

fn listener_settings(
    config: &ListenerConfig,
    groups: &GroupsConfig,
    data_dir: &std::path::Path,
) -> anyhow::Result<(ListenerSettings, ServerIdentity, socket2::Socket)> {
    let (reservation, bound) = reserve_port(config.address).with_context(|| format!("bind {}", config.address))?;
    let host = config.advertised_host.clone().unwrap_or_else(|| {
        if bound.ip().is_unspecified() {
            "127.0.0.1".into()
        } else {
            bound.ip().to_string()
        }
    });
    let identity = ServerIdentity {
        node_id: config.node_id,
        cluster_id: cluster_id(data_dir, config.cluster_id.as_deref())?,
        host,
        port: config.advertised_port.unwrap_or(bound.port()),
    };
    let settings = ListenerSettings {
        addr: bound,
        max_request_bytes: config.max_request_bytes,
        zero_copy: config.zero_copy,
        connections_max_idle: Duration::from_millis(config.connections_max_idle_ms),
        accept: config.accept,
        sasl: None,
        tls: config.tls()?,
        authorizer: config.authorizer_settings(),
        groups: groups.coordinator_config(),
        topic_creation: config.topic_creation(),
    };
    if settings.tls.is_some() {
        tracing::info!("the listener requires TLS");
    }
    Ok((settings, identity, reservation))
}

/// The listener's SASL users (SCRAM credentials derived now: random salt,
/// Kafka's 4096 iterations), set on `settings`, and the credentials the
/// agent itself uses at its listener: [`AGENT_SASL_USER`] with a random
/// password, by the strongest enabled mechanism. `None` without SASL.
fn listener_sasl(config: &ListenerConfig, settings: &mut ListenerSettings) -> anyhow::Result<Option<SaslClientConfig>> {
    if config.sasl_mechanisms.is_empty() {
        return Ok(None);
    }
    let users = config.sasl_users()?;
    let own: [u8; 32] = ringmirror_dataplane::partition::catalog::random_bytes().context("random bytes")?;
    let own = Secret::new(own.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let count = users.len();
    let all = users
        .into_iter()
        .map(|u| (u.name, u.password))
        .chain([(AGENT_SASL_USER.to_string(), own.clone())]);
    let server = SaslServerConfig::new(&config.sasl_mechanisms, all, scram::DEFAULT_ITERATIONS)
        .map_err(anyhow::Error::msg)
        .context("[listener] SASL users")?;
    let mechanism = [Mechanism::ScramSha512, Mechanism::ScramSha256, Mechanism::Plain]
        .into_iter()
        .find(|m| config.sasl_mechanisms.contains(m))
        .expect("a mechanism is enabled");
    tracing::info!(mechanisms = ?server.mechanisms(), users = count, "the listener requires SASL authentication");
    settings.sasl = Some(Arc::new(server));
    Ok(Some(SaslClientConfig {
        mechanism,
        username: AGENT_SASL_USER.into(),
        password: Password::Inline(own),
    }))
}

/// Below this limit on open files, even after raising it, start-up warns:
/// each partition holds three descriptors per segment (`.log`, `.index`,
/// `.timeindex`), so a few hundred partitions would already fail with
/// EMFILE. Above it the limit is said at INFO, as the operator's to size.
const OPEN_FILES_WARN_BELOW: libc::rlim_t = 4096;

/// The soft limit on open files to ask for: the hard one, when it is higher
/// (what the JVM does for every Kafka broker, HotSpot's `-XX:+MaxFDLimit`,
/// on by default); `None` when there is nothing to raise.
fn raised_open_files(soft: libc::rlim_t, hard: libc::rlim_t) -> Option<libc::rlim_t> {
    (soft < hard).then_some(hard)
}

/// Raises RLIMIT_NOFILE's soft limit to the hard one: a systemd unit's
/// default soft limit (1024) would stop the agent at a few hundred
/// partitions with EMFILE. Says at WARN when even the hard limit is low.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let before = lim.rlim_cur;
    if let Some(raised) = raised_open_files(lim.rlim_cur, lim.rlim_max) {
        lim.rlim_cur = raised;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            tracing::info!(
                from = before,
                to = raised,
                "raised the open files limit (RLIMIT_NOFILE) to its hard limit"
            );
        } else {
            lim.rlim_cur = before;
        }
    }
    if lim.rlim_cur < OPEN_FILES_WARN_BELOW {
        tracing::warn!(
            open_files_limit = lim.rlim_cur,
            "the open files limit is low: each partition holds 3 files per segment; raise it (LimitNOFILE= in the systemd unit)"
        );
    } else {
        tracing::info!(
            open_files_limit = lim.rlim_cur,
            "open files limit (each partition holds 3 files per segment)"
        );
    }
}

/// Registered I/O memory per ring that fits RLIMIT_MEMLOCK for a non-root
/// process (root is not charged), said out loud when it has to shrink.
fn io_memory_bytes(executors: usize) -> usize {
    // SAFETY: plain syscalls with valid out-pointers.
    let (euid, limit) = unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let ok = libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0;
        (libc::geteuid(), if ok { lim.rlim_cur } else { 0 })
    };
    if euid == 0 || limit == libc::RLIM_INFINITY {
        return IO_MEMORY_DEFAULT_BYTES;
    }
    // +1 executor for the coordinator.
    let fit = (limit as usize / (IO_RINGS_PER_EXECUTOR * (executors + 1))) & !0xfff;
    if fit < IO_MEMORY_DEFAULT_BYTES {
        tracing::warn!(
            memlock_limit_bytes = limit,
            io_memory_bytes = fit,
            "RLIMIT_MEMLOCK is low: shrinking glommio's registered I/O memory; raise it (LimitMEMLOCK= in the systemd unit) for full speed"
        );
    }
    fit.min(IO_MEMORY_DEFAULT_BYTES)
}

impl Agent {
    pub fn start(config: AgentConfig) -> anyhow::Result<Self> {
        Self::start_observed(config, Box::new(|_| {}))
    }

    /// Like [`Agent::start`], also handing every shard event to `observer`.
    pub fn start_observed(config: AgentConfig, observer: EventObserver) -> anyhow::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shard_count = config.shards.unwrap_or(cores).max(1);
        // Read before anything starts, so that a bad token, principals or
        // certificate file fails fast.
        let admin_security = config.admin.as_ref().map(|admin| admin.security()).transpose()?;
        let io_memory = io_memory_bytes(shard_count);
        raise_open_files_limit();
        let data_dir_lock = lock_data_dir(&config.data_dir)?;
        let log_dir = LogDir::open(&config.data_dir).context("open data dir")?;
        tracing::info!(data_dir = %config.data_dir.display(), clean = log_dir.was_clean_shutdown(), shards = shard_count, "starting agent");
        check_group_shard_count(&config.data_dir, shard_count)?;
        // Each transactional id's record to its shard's log, before any
        // shard opens its transaction coordinator.
        TransactionStore::rebalance(
            &config.data_dir,
            shard_count,
            TransactionConfig::default().compact_min_bytes,
        )
        .context("move transactional ids to their shards")?;
        let listener = config
            .listener
            .as_ref()
            .map(|l| listener_settings(l, &config.groups, &config.data_dir))
            .transpose()?;
        let mut own_sasl = None;
        let (listener_settings, identity, reservation) = match listener {
            Some((mut settings, identity, reservation)) => {
                if let Some(l) = &config.listener {
                    own_sasl = listener_sasl(l, &mut settings)?;
                }
                (Some(settings), identity, Some(reservation))
            }
            None => {
                tracing::info!("no [listener] configured: not serving Kafka clients");
                (None, ServerIdentity::default(), None)
            }
        };
        let listener_addr = listener_settings.as_ref().map(|s| s.addr);
        let catalog = CatalogHandle::new(identity);
        let mirror_reports = Arc::new(MirrorReportsHandle::default());
        let (links, link_ends) = ShardLinks::new(shard_count);
        let producer_ids = Arc::new(
            ProducerIds::open(config.data_dir.join(AGENT_STATE_DIR)).context("open the producer id allocator")?,
        );
        let acls =
            Arc::new(AclStore::open(config.data_dir.join(AGENT_STATE_DIR).join("acls")).context("open the ACL store")?);
        let log_dir = Arc::new(log_dir);
        let on_disk = log_dir
            .partitions_on_disk()
            .context("list partitions in the data dir")?;
        // Shards → this agent's events thread → the coordinator: two queues
        // that never drop a state event and cap (and count) telemetry.
        let event_counts = ShardEventCounts::default();
        let (events_tx, events_rx) = event_queue(config.telemetry_events_queued_max, &event_counts);
        let mut shards = Vec::with_capacity(shard_count);
        let (ready_tx, ready) = std::sync::mpsc::channel();
        // Each shard takes its share: no budget is shared between shards.
        let reserve_budgets = ReserveBudget::per_shard(config.log.reserve_budget_bytes, shard_count);
        for (index, end) in link_ends.into_iter().enumerate() {
            let plan = ShardPlan {
                index,
                cpu: index % cores,
                io_memory_bytes: io_memory,
                log_config: config.log,
                reserve_budget: Arc::clone(&reserve_budgets[index]),
                listener: listener_settings.clone(),
            };
            let serving = ShardServing {
                ready: ready_tx.clone(),
                catalog: Arc::clone(&catalog),
                mirror_reports: Arc::clone(&mirror_reports),
                acls: Arc::clone(&acls),
                producer_ids: Arc::clone(&producer_ids),
                links: Arc::clone(&links),
                end,
            };
            shards.push(spawn_shard(plan, Arc::clone(&log_dir), events_tx.clone(), serving).context("start shard")?);
        }
        drop(events_tx);
        drop(ready_tx);
        for _ in 0..shard_count {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("{e}"),
                Err(_) => bail!("a shard ended during start-up"),
            }
        }
        // What is on disk is served from the start, source reachable or not
        // (opened, and recovered if need be, before start returns).
        for tp in on_disk {
            let shard = shard_for(&tp, shard_count);
            shards[shard]
                .send(ShardCommand::ServePartition { tp })
                .map_err(anyhow::Error::msg)?;
        }
        let (opened_tx, opened) = std::sync::mpsc::channel();
        for shard in &shards {
            shard
                .send(ShardCommand::Barrier(opened_tx.clone()))
                .map_err(anyhow::Error::msg)?;
        }
        for _ in 0..shard_count {
            opened.recv().context("a shard ended during start-up")?;
        }
        if let Some(addr) = listener_addr {
            tracing::info!(%addr, "serving Kafka clients");
        }
        let status = Arc::new(Mutex::new(Status::new()));
        let status_writer = Arc::clone(&status);
        let (to_coordinator, coordinator_events) = event_queue(config.telemetry_events_queued_max, &event_counts);
        let mut checkpoints = log_dir.checkpoints().clone();
        let checkpoint_interval = Duration::from_millis(config.offset_checkpoint_interval_ms);
        let events_thread = std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                let mut last_write = std::time::Instant::now();
                let mut dirty = false;
                while let Some(event) = events_rx.recv_blocking() {
                    observer(&event);
                    dirty |= record_checkpoint(&mut checkpoints, &event);
                    // State events always; telemetry unless the coordinator's
                    // queue is full (counted). The coordinator ends before
                    // this thread: nothing to tell then.
                    to_coordinator.forward(event.clone());
                    apply_event(&status_writer, event);
                    if dirty && last_write.elapsed() >= checkpoint_interval {
                        // Bounds how much a crash makes the next start re-scan.
                        if let Err(e) = checkpoints.write() {
                            tracing::error!(error = %e, "cannot write offset checkpoints");
                        }
                        last_write = std::time::Instant::now();
                        dirty = false;
                    }
                }
                checkpoints
            })
            .context("start events thread")?;
        let store = MirrorStateStore::open(
            &config.data_dir.join(AGENT_STATE_DIR).join(MIRROR_STATE_DIR),
            config.mirror_topic_num_partitions,
        )
        .context("open __mirror_state")?;
        let (admin_calls, calls) = async_channel::bounded::<AdminCall>(ADMIN_CALLS_QUEUED_MAX);
        let (first_round_tx, first_round) = std::sync::mpsc::channel();
        let coordinator = MirrorCoordinator::start(
            CoordinatorSetup {
                store,
                configured_mirrors: config.mirrors.clone(),
                shards: shards.iter().map(ShardHandle::commands).collect(),
                events: coordinator_events,
                event_counts,
                reserve_budgets,
                calls,
                local_cluster_id: catalog.snapshot().identity.cluster_id.clone(),
                listener_addr: listener_addr.map(|a| a.to_string()),
                listener_sasl: own_sasl,
                listener_tls: config.listener.as_ref().and_then(ListenerConfig::own_tls_client),
                reports: Arc::clone(&mirror_reports),
                catalog: Arc::clone(&catalog),
                io_memory_bytes: io_memory,
            },
            first_round_tx,
        )
        .map_err(anyhow::Error::msg)?;
        if first_round.recv_timeout(FIRST_ROUND_WAIT).is_err() {
            tracing::warn!("first metadata round is slow; partitions will be placed as they are found");
        }
        let admin_server = match (&config.admin, admin_security) {
            (Some(admin), Some(security)) => {
                let security = AdminSecurity {
                    acls: Some(Arc::clone(&acls)),
                    ..security
                };
                let server = AdminServer::start_with(admin.address, admin_calls.clone(), security)
                    .with_context(|| format!("start the admin API on {}", admin.address))?;
                tracing::info!(addr = %server.addr(), "admin API listening");
                Some(server)
            }
            _ => None,
        };
        Ok(Self {
            shards,
            coordinator,
            admin_calls,
            admin_server,
            log_dir,
            status,
            events_thread,
            listener_addr,
            mirror_reports,
            catalog,
            _port_reservation: reservation,
            _data_dir_lock: data_dir_lock,
        })
    }

    /// Where Kafka clients connect (with the port picked, if it was 0).
    pub fn listener_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener_addr
    }

    /// Where the mirror reports are published for DescribeClusterMirrors.
    pub fn mirror_reports(&self) -> Arc<MirrorReportsHandle> {
        Arc::clone(&self.mirror_reports)
    }

    /// The listener's catalog: its topics, and the config overrides its
    /// DescribeConfigs answers (published by the control plane for mirror
    /// topics; set here for a local topic).
    pub fn catalog(&self) -> Arc<CatalogHandle> {
        Arc::clone(&self.catalog)
    }

    /// Where the admin API listens, when configured.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin_server.as_ref().map(AdminServer::addr)
    }

    /// Asks the coordinator, as the admin API does (and waits for the answer).
    pub fn admin(&self, request: AdminRequest) -> Result<AdminAnswer, AdminError> {
        let (reply, answer) = async_channel::bounded(1);
        self.admin_calls
            .send_blocking(AdminCall { request, reply })
            .map_err(|_| AdminError::Unavailable("the coordinator has stopped".into()))?;
        answer
            .recv_blocking()
            .map_err(|_| AdminError::Unavailable("the coordinator has stopped".into()))?
    }

    fn accepted(&self, request: AdminRequest) -> anyhow::Result<Vec<TopicPartition>> {
        match self.admin(request)? {
            AdminAnswer::Accepted { partitions, .. } => Ok(partitions
                .into_iter()
                .map(|TopicPartitionName { topic, partition }| TopicPartition { topic, partition })
                .collect()),
            other => bail!("unexpected answer {other:?}"),
        }
    }

    /// Pauses a topic of a mirror: no fetching, its data stays served.
    pub fn pause(&self, mirror: &str, topic: &str) -> anyhow::Result<Vec<TopicPartition>> {
        self.accepted(AdminRequest::Pause {
            mirror: mirror.into(),
            topics: vec![topic.into()],
        })
    }

    /// Resumes a paused topic.
    pub fn resume(&self, mirror: &str, topic: &str) -> anyhow::Result<Vec<TopicPartition>> {
        self.accepted(AdminRequest::Resume {
            mirror: mirror.into(),
            topics: vec![topic.into()],
        })
    }

    /// Removes a named topic from a mirror: no fetching; its data stays,
    /// served read-only.
    pub fn remove_topic(&self, mirror: &str, topic: &str) -> anyhow::Result<Vec<TopicPartition>> {
        self.accepted(AdminRequest::RemoveTopics {
            mirror: mirror.into(),
            topics: vec![topic.into()],
        })
    }

    /// Ends mirroring of every partition of `topic` (failover, STOPPING →
    /// STOPPED): each leaves its fetcher, gets ABORT markers for
    /// transactions the source left open and a MIRROR_PID_RESET at a
    /// bumped leader epoch, and becomes local and writable. Returns at
    /// once; `status` shows each partition's `mirroring_ended` when done.
    pub fn end_mirroring(&self, mirror: &str, topic: &str) -> anyhow::Result<Vec<TopicPartition>> {
        self.accepted(AdminRequest::Stop {
            mirror: mirror.into(),
            topics: vec![topic.into()],
        })
    }

    /// A snapshot of every partition's progress.
    pub fn status(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }

    /// Stops cleanly: shards finish in-flight appends, flush and close their
    /// logs; then checkpoints and the clean-shutdown marker are written.
    pub fn stop(self) -> anyhow::Result<()> {
        if let Some(server) = self.admin_server {
            server.stop();
        }
        self.coordinator.stop();
        for shard in &self.shards {
            shard.request_stop();
        }
        let mut closed = Vec::new();
        let mut failures = Vec::new();
        for shard in self.shards {
            match shard.join() {
                Ok(c) => closed.extend(c),
                Err(e) => failures.push(e),
            }
        }
        let mut checkpoints = self
            .events_thread
            .join()
            .map_err(|_| anyhow::anyhow!("events thread panicked"))?;
        drop(self.log_dir);
        for c in &closed {
            checkpoints.record_offsets(&c.tp, c.recovery_point, c.log_start_offset);
        }
        if !failures.is_empty() {
            checkpoints.write().context("write offset checkpoints")?;
            bail!("shards failed to stop cleanly: {}", failures.join("; "));
        }
        checkpoints.mark_clean_shutdown().context("mark clean shutdown")?;
        tracing::info!(partitions = closed.len(), "agent stopped cleanly");
        Ok(())
    }
}

/// Keeps the checkpoint entries current; returns whether they changed.
fn record_checkpoint(checkpoints: &mut OffsetCheckpoints, event: &ShardEvent) -> bool {
    match event {
        ShardEvent::Telemetry(TelemetryEvent::Checkpoint {
            tp,
            recovery_point,
            log_start_offset,
            ..
        })
        | ShardEvent::State(StateEvent::Removed {
            tp,
            recovery_point,
            log_start_offset,
            ..
        }) => {
            checkpoints.record_offsets(tp, *recovery_point, *log_start_offset);
            true
        }
        _ => false,
    }
}

fn apply_event(status: &Mutex<Status>, event: ShardEvent) {
    let mut status = status.lock().expect("status lock");
    match event {
        ShardEvent::Telemetry(TelemetryEvent::Progress {
            mirror,
            tp,
            log_end_offset,
            high_watermark,
            ..
        }) => {
            let s = status.entry((mirror, tp)).or_default();
            s.log_end_offset = log_end_offset;
            s.high_watermark = high_watermark;
        }
        ShardEvent::State(StateEvent::Truncated {
            mirror,
            tp,
            to_offset,
            reason,
        }) => {
            tracing::info!(mirror, %tp, to_offset, reason, "log truncated to converge with the source");
            let s = status.entry((mirror, tp)).or_default();
            s.log_end_offset = to_offset;
            s.truncations += 1;
        }
        ShardEvent::State(StateEvent::Stopped { mirror, tp, reason }) => {
            tracing::error!(mirror, %tp, ?reason, "partition stopped appending");
            status.entry((mirror, tp)).or_default().stopped = Some(reason);
        }
        ShardEvent::State(StateEvent::Removed {
            mirror,
            tp,
            recovery_point,
            log_start_offset,
        }) => {
            tracing::info!(mirror, %tp, recovery_point, log_start_offset, "partition no longer mirrored");
            status.remove(&(mirror, tp));
        }
        ShardEvent::State(StateEvent::Placed {
            mirror,
            tp,
            log_end_offset,
            truncated_to,
        }) => {
            if let Some(to) = truncated_to {
                tracing::info!(mirror, %tp, to, "log truncated above the source's last mirror epoch");
            }
            let s = status.entry((mirror, tp)).or_default();
            s.log_end_offset = log_end_offset;
            s.stopped = None;
        }
        ShardEvent::Telemetry(TelemetryEvent::Checkpoint { .. } | TelemetryEvent::FetchStats { .. })
        | ShardEvent::State(
            StateEvent::EpochBumpDue { .. }
            | StateEvent::Paused { .. }
            | StateEvent::Diverged { .. }
            | StateEvent::Verified { .. },
        ) => {}
        ShardEvent::Telemetry(TelemetryEvent::BadBatch {
            mirror,
            tp,
            offset,
            error,
        }) => {
            tracing::warn!(mirror, %tp, offset, error, "bad batch from the source refused");
            status.entry((mirror, tp)).or_default().bad_batches += 1;
        }
        ShardEvent::State(StateEvent::MirrorEnded {
            mirror,
            tp,
            log_end_offset,
            leader_epoch,
            aborted_transactions,
            ..
        }) => {
            tracing::info!(mirror, %tp, log_end_offset, leader_epoch, aborted_transactions, "mirroring ended; writable");
            let s = status.entry((mirror, tp)).or_default();
            s.log_end_offset = log_end_offset;
            s.mirroring_ended = Some((log_end_offset, leader_epoch));
        }
        ShardEvent::State(StateEvent::CommandFailed { mirror, tp, error }) => {
            tracing::error!(mirror, %tp, error, "command failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_one_only_when_higher() {
        assert_eq!(raised_open_files(1024, 524_288), Some(524_288));
        assert_eq!(raised_open_files(1024, libc::RLIM_INFINITY), Some(libc::RLIM_INFINITY));
        assert_eq!(raised_open_files(524_288, 524_288), None);
    }

    #[test]
    fn a_new_shard_count_is_refused_only_when_group_offsets_exist() {
        let dir = tempfile::tempdir().unwrap();
        check_group_shard_count(dir.path(), 2).unwrap();
        // No group offsets yet: any count may follow.
        check_group_shard_count(dir.path(), 3).unwrap();
        std::fs::create_dir(dir.path().join(AGENT_STATE_DIR).join("group-offsets-0")).unwrap();
        check_group_shard_count(dir.path(), 3).unwrap();
        let refused = check_group_shard_count(dir.path(), 2).unwrap_err().to_string();
        assert!(refused.contains("shards = 3"), "{refused}");
    }
}
