//! Divergence detection by batch CRCs. After a source leader-epoch change
//! (a placement with a new epoch) and on demand, the fetcher holding a
//! partition compares the headers of our last batches with the source
//! leader's batches at the same offsets (a plain Fetch on the fetcher's
//! connection). A difference means the source rewrote history we copied —
//! an unclean leader election that epochs cannot show (KIP-1279, "LME
//! truncation"): the fetcher then truncates to the first differing batch
//! and mirrors the source's new history, and reports
//! [`StateEvent::Diverged`](super::events::StateEvent::Diverged).
//!
//! Never truncates on what it could not read: a transient error (a broken
//! connection, a lagging high watermark, an unexpected error code) is
//! retried every [`DIVERGENCE_RETRY_INTERVAL_MS`], at most
//! [`DIVERGENCE_ATTEMPTS_MAX`] times, then the check is given up with a
//! warning. Batches below the source's log start cannot be compared and
//! are not a difference. Reads headers only, and only when asked: never on
//! the fetch path.
//!
//! [`verify_partition`] (`mirror verify`) walks every batch we hold from an
//! offset up with the same comparison, rate-limited, on a connection of its
//! own, and only reports.

use crate::client::{ClientError, Connection, EARLIEST_TIMESTAMP, fetch_partition, list_offset};
use ringmirror_protocol::error_codes;
use ringmirror_storage::batch::{BatchSummary, compare_batches};

use super::partition::MirrorPartition;

/// Our last batches compared per window.
pub const DIVERGENCE_WINDOW_BATCHES: usize = 8;
/// At most this many bytes of batches per window (at least one batch).
pub const DIVERGENCE_WINDOW_BYTES_MAX: usize = 1 << 20;
/// Windows walked down while a whole window differs.
pub const DIVERGENCE_WINDOWS_MAX: usize = 16;
/// Reads of the source per window (a short answer is read on from where it ended).
const WINDOW_READS_MAX: usize = DIVERGENCE_WINDOW_BATCHES + 1;
/// A check that could not complete is tried again after this long…
pub const DIVERGENCE_RETRY_INTERVAL_MS: u64 = 500;
/// …at most this many times before it is given up.
pub const DIVERGENCE_ATTEMPTS_MAX: u32 = 20;

/// A divergence check waiting to run (or run again) for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCheck {
    pub attempts: u32,
    pub next_attempt_ms: u64,
}

impl PendingCheck {
    pub const NOW: Self = Self {
        attempts: 0,
        next_attempt_ms: 0,
    };
}

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckOutcome {
    /// No batch differs (those the source no longer has are not counted).
    NoDifference,
    /// The source holds otherwise from `first_differing_offset` on.
    Diverged { first_differing_offset: i64 },
    /// Could not read what was needed; try again later.
    Transient(String),
    /// The source's leader or epoch changed: place the partition again.
    NeedsMetadata,
}

/// What the source's answer for one window showed.
enum WindowOutcome {
    NoDifference,
    Differs {
        first_differing_offset: i64,
        /// Some batch of the window matched: the divergence starts inside it.
        matched_inside: bool,
    },
    /// The window lies below the source's log start.
    BelowSourceStart,
    Transient(String),
    NeedsMetadata,
}

/// Compares our last batches with the source leader's (see the module doc).
pub(crate) async fn check_partition(c: &mut Connection, p: &MirrorPartition) -> Result<CheckOutcome, ClientError> {
    let mut end = p.log().log_end_offset();
    let mut lowest_difference = None;
    for _ in 0..DIVERGENCE_WINDOWS_MAX {
        let window = match p
            .log()
            .tail_batches(end, DIVERGENCE_WINDOW_BATCHES, DIVERGENCE_WINDOW_BYTES_MAX)
        {
            Ok(window) => window,
            Err(e) => return Ok(CheckOutcome::Transient(format!("reading our batches: {e}"))),
        };
        let Some(first) = window.first() else { break };
        match compare_window(c, p, &window).await? {
            WindowOutcome::NoDifference | WindowOutcome::BelowSourceStart => break,
            WindowOutcome::Transient(reason) => return Ok(CheckOutcome::Transient(reason)),
            WindowOutcome::NeedsMetadata => return Ok(CheckOutcome::NeedsMetadata),
            WindowOutcome::Differs {
                first_differing_offset,
                matched_inside,
            } => {
                lowest_difference = Some(first_differing_offset);
                if matched_inside || first_differing_offset > first.base_offset {
                    break;
                }
                end = first.base_offset;
            }
        }
    }
    Ok(match lowest_difference {
        Some(first_differing_offset) => CheckOutcome::Diverged { first_differing_offset },
        None => CheckOutcome::NoDifference,
    })
}

/// Reads the source from the window's first batch on (again from where a
/// short answer ended) and compares.
async fn compare_window(
    c: &mut Connection,
    p: &MirrorPartition,
    window: &[BatchSummary],
) -> Result<WindowOutcome, ClientError> {
    let max_batch_bytes = p.log().config().max_batch_bytes;
    let mut next = 0;
    let mut matched_inside = false;
    for _ in 0..WINDOW_READS_MAX {
        let rest = &window[next..];
        let offset = rest[0].base_offset;
        let bytes: usize = rest.iter().map(|b| b.size_bytes).sum();
        let max_bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        let answer = match read_from(c, p.tp(), p.fetch_epoch, offset, max_bytes).await? {
            SourceRead::Records(answer) => answer,
            SourceRead::BelowLogStart(_) => return Ok(WindowOutcome::BelowSourceStart),
            // The source lost what we hold there.
            SourceRead::AboveLogEnd => {
                return Ok(WindowOutcome::Differs {
                    first_differing_offset: offset,
                    matched_inside,
                });
            }
            SourceRead::LeaderMoved(_) => return Ok(WindowOutcome::NeedsMetadata),
            SourceRead::Failed(reason) => return Ok(WindowOutcome::Transient(reason)),
        };
        let found = compare_batches(rest, &answer.records, max_batch_bytes);
        matched_inside |= found.batches_matched > 0;
        if let Some(first_differing_offset) = found.first_differing_offset {
            return Ok(WindowOutcome::Differs {
                first_differing_offset,
                matched_inside,
            });
        }
        if !found.incomplete(rest) {
            return Ok(WindowOutcome::NoDifference);
        }
        if found.batches_compared == 0 {
            // Nothing readable yet at `offset` (a new leader's high
            // watermark below what it holds): not a difference.
            return Ok(WindowOutcome::Transient(format!(
                "source served nothing at {offset} (high watermark {})",
                answer.high_watermark
            )));
        }
        next += found.batches_compared;
    }
    Ok(WindowOutcome::Transient("source answers too short".into()))
}

/// What `mirror verify` found for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyOutcome {
    /// Every batch we hold from the start offset up to our log end when the
    /// verification began matches the source's (or the source no longer
    /// holds it: removed by its cleaner or retention).
    Identical { batches_compared: u64, bytes_compared: u64 },
    /// Our batch at `first_differing_offset` is not the source's.
    Differs { first_differing_offset: i64 },
    /// Could not be completed (the source unreachable, its leader moved).
    Incomplete { error: String },
}

/// Where a verification reads the source: the partition's leader.
#[derive(Debug, Clone)]
pub(crate) struct VerifySource {
    pub addr: String,
    pub options: crate::client::ConnectionOptions,
    pub leader_epoch: i32,
}

/// Compares every batch we hold from `from_offset` to our log end (as it is
/// when called) with the source leader's, reading at most `bytes_per_s` of
/// our batches a second. Transient errors are retried like a divergence
/// check's; nothing is ever truncated.
pub(crate) async fn verify_partition(
    source: VerifySource,
    served: std::rc::Rc<crate::partition::ServedPartition>,
    tp: ringmirror_storage::log::TopicPartition,
    from_offset: i64,
    bytes_per_s: u64,
) -> VerifyOutcome {
    let (mut offset, end, max_batch_bytes) = {
        let log = served.log.borrow();
        (
            from_offset.max(log.log_start_offset()),
            log.log_end_offset(),
            log.config().max_batch_bytes,
        )
    };
    let started = std::time::Instant::now();
    let mut conn: Option<Connection> = None;
    let (mut batches_compared, mut bytes_compared) = (0u64, 0u64);
    let mut attempts = 0;
    let mut last_error = String::new();
    while offset < end {
        if attempts > 0 {
            if attempts >= DIVERGENCE_ATTEMPTS_MAX {
                return VerifyOutcome::Incomplete { error: last_error };
            }
            glommio::timer::sleep(std::time::Duration::from_millis(DIVERGENCE_RETRY_INTERVAL_MS)).await;
        }
        let window =
            match served
                .log
                .borrow()
                .batches_from(offset, DIVERGENCE_WINDOW_BATCHES, DIVERGENCE_WINDOW_BYTES_MAX)
            {
                Ok(window) => window.into_iter().filter(|b| b.base_offset < end).collect::<Vec<_>>(),
                Err(e) => return VerifyOutcome::Incomplete { error: e.to_string() },
            };
        let Some(first) = window.first().copied() else { break };
        let c = match &mut conn {
            Some(c) => c,
            None => match Connection::connect(&source.addr, source.options.clone()).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    attempts += 1;
                    last_error = e.to_string();
                    continue;
                }
            },
        };
        let window_bytes: usize = window.iter().map(|b| b.size_bytes).sum();
        let max_bytes = i32::try_from(window_bytes).unwrap_or(i32::MAX);
        let answer = match read_from(c, &tp, source.leader_epoch, first.base_offset, max_bytes).await {
            Ok(SourceRead::Records(answer)) => answer,
            // Retention at the source passed these batches: not comparable.
            Ok(SourceRead::BelowLogStart(start)) => {
                offset = start;
                continue;
            }
            Ok(SourceRead::AboveLogEnd) => {
                return VerifyOutcome::Differs {
                    first_differing_offset: first.base_offset,
                };
            }
            Ok(SourceRead::LeaderMoved(code)) => {
                return VerifyOutcome::Incomplete {
                    error: format!("the source's leader moved (error code {code}); run it again"),
                };
            }
            Ok(SourceRead::Failed(error)) => {
                attempts += 1;
                last_error = error;
                continue;
            }
            Err(e) => {
                attempts += 1;
                last_error = e.to_string();
                conn = None;
                continue;
            }
        };
        let found = compare_batches(&window, &answer.records, max_batch_bytes);
        if let Some(first_differing_offset) = found.first_differing_offset {
            return VerifyOutcome::Differs { first_differing_offset };
        }
        let Some(last) = found.batches_compared.checked_sub(1).map(|i| window[i]) else {
            attempts += 1;
            last_error = format!(
                "source served nothing at {} (high watermark {})",
                first.base_offset, answer.high_watermark
            );
            continue;
        };
        attempts = 0;
        offset = last.end_offset();
        batches_compared += found.batches_compared as u64;
        bytes_compared += window[..found.batches_compared]
            .iter()
            .map(|b| b.size_bytes as u64)
            .sum::<u64>();
        // The rate limit: our bytes compared so far at `bytes_per_s`.
        let due = std::time::Duration::from_secs_f64(bytes_compared as f64 / bytes_per_s.max(1) as f64);
        if let Some(ahead) = due.checked_sub(started.elapsed()) {
            glommio::timer::sleep(ahead).await;
        }
    }
    VerifyOutcome::Identical {
        batches_compared,
        bytes_compared,
    }
}

/// What the source answered a read at an offset (a check's or a verification's).
enum SourceRead {
    Records(crate::client::PartitionFetch),
    /// The offset is below the source's log start (which is given).
    BelowLogStart(i64),
    /// The offset is past what the source holds.
    AboveLogEnd,
    LeaderMoved(i16),
    Failed(String),
}

async fn read_from(
    c: &mut Connection,
    tp: &ringmirror_storage::log::TopicPartition,
    leader_epoch: i32,
    offset: i64,
    max_bytes: i32,
) -> Result<SourceRead, ClientError> {
    Ok(match fetch_partition(c, tp, leader_epoch, offset, max_bytes).await? {
        Ok(answer) => SourceRead::Records(answer),
        Err(error_codes::OFFSET_OUT_OF_RANGE) => match list_offset(c, tp, leader_epoch, EARLIEST_TIMESTAMP).await? {
            Ok(start) if offset < start => SourceRead::BelowLogStart(start),
            Ok(_) => SourceRead::AboveLogEnd,
            Err(code) => SourceRead::Failed(format!("ListOffsets error code {code}")),
        },
        Err(code) if error_codes::needs_metadata(code) => SourceRead::LeaderMoved(code),
        Err(code) => SourceRead::Failed(format!("Fetch error code {code} at {offset}")),
    })
}
