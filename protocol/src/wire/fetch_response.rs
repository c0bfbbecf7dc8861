//! A sans-IO, streaming parser for Kafka Fetch responses, versions 4–16.
//!
//! What it owns: every field of a Fetch response *except* the record bytes.
//! The fetcher reads the response from its socket into a small buffer and
//! feeds it to [`FetchResponseReader::advance`], which parses the small fields
//! (header, topics, partition headers, aborted transactions, tagged fields)
//! and stops when a partition's `records` field starts, returning
//! [`FetchStep::Records`] with the records length. The caller then moves
//! exactly that many bytes itself — typically received straight into the tail
//! of the partition's mmapped segment, some of them perhaps already sitting in
//! its small buffer — calls [`FetchResponseReader::records_consumed`], and
//! goes on feeding the bytes that follow the records. The parser never sees,
//! copies or validates record bytes; batch validation happens in place in the
//! log (see `ringmirror_storage::batch`).
//!
//! Properties:
//!
//! * **No I/O, no allocation per record.** The only buffers are reused ones:
//!   the current topic name, the current partition's aborted transactions and
//!   the node endpoints. [`FetchResponseReader::reset`] reuses them for the
//!   next response.
//! * **Atomic units.** `advance` consumes a field group only when the buffer
//!   holds all of it, so the caller simply passes the unconsumed bytes again
//!   together with newly read ones. The only exception is an unknown (or a
//!   known one's unknown trailing part) tagged field, which is skipped
//!   incrementally so a huge one never has to be buffered whole.
//! * **Bounded by the frame.** The reader starts right after the 4-byte size
//!   prefix and is told the frame size: every count and length is checked
//!   against the bytes left in the frame (or in the enclosing tagged field)
//!   before anything is read or allocated, and the response must end exactly at
//!   the end of the frame. Errors name the field and its byte position in the
//!   frame. No input makes it panic.
//! * **Forward compatible.** Unknown tagged fields are skipped wherever a
//!   tagged-field section appears, including tags that look known but are not
//!   defined for the version at hand (tansu 0.6 sends the `NodeEndpoints` tag in
//!   Fetch v12–15 responses; it is skipped there). Known tags are decoded
//!   within their declared size, and bytes a newer writer appends inside them
//!   are ignored.

use std::fmt;

/// Lowest Fetch response version the reader accepts.
pub const FETCH_RESPONSE_MIN_VERSION: i16 = 4;
/// Highest Fetch response version the reader accepts.
pub const FETCH_RESPONSE_MAX_VERSION: i16 = 16;
/// First flexible (compact encodings, tagged fields) Fetch version.
const FIRST_FLEXIBLE_VERSION: i16 = 12;
/// Kafka rejects longer strings (`0x7fff`), compact ones included.
const MAX_STRING_LEN: usize = i16::MAX as usize;
/// The smallest possible tagged field: a one-byte tag and a one-byte size.
const MIN_TAGGED_FIELD_LEN: usize = 2;
/// node_id + host (empty) + port + rack (null) + tagged fields (none).
const MIN_NODE_ENDPOINT_LEN: usize = 4 + 1 + 4 + 1 + 1;

/// Why a Fetch response could not be parsed. Every variant names the field
/// (as a dotted path after Kafka's schema) and its byte position within the
/// frame, counted from the first byte after the 4-byte size prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchParseError {
    #[error(
        "Fetch response version {version} is not supported (only {FETCH_RESPONSE_MIN_VERSION}..={FETCH_RESPONSE_MAX_VERSION})"
    )]
    UnsupportedVersion {
        field: &'static str,
        position: usize,
        version: i16,
    },
    #[error("{field} at byte {position} needs {needed} bytes but only {available} remain in the {region}")]
    Truncated {
        field: &'static str,
        position: usize,
        needed: usize,
        available: usize,
        region: &'static str,
    },
    #[error("{field} at byte {position}: count {count} needs at least {min_bytes} bytes but only {available} remain")]
    CountTooLarge {
        field: &'static str,
        position: usize,
        count: u64,
        min_bytes: u64,
        available: usize,
    },
    #[error("{field} at byte {position}: length {length} exceeds the {available} bytes that remain")]
    LengthTooLarge {
        field: &'static str,
        position: usize,
        length: u64,
        available: usize,
    },
    #[error("{field} at byte {position}: invalid length {length}")]
    InvalidLength {
        field: &'static str,
        position: usize,
        length: i64,
    },
    #[error("{field} at byte {position} is null but is not nullable")]
    UnexpectedNull { field: &'static str, position: usize },
    #[error("{field} at byte {position}: malformed unsigned varint")]
    InvalidVarint { field: &'static str, position: usize },
    #[error("{field} at byte {position}: string is not valid UTF-8")]
    InvalidUtf8 { field: &'static str, position: usize },
    #[error("{field} at byte {position}: tagged field of {size} bytes is shorter than its {minimum} fixed bytes")]
    TagTooShort {
        field: &'static str,
        position: usize,
        size: usize,
        minimum: usize,
    },
    #[error("{field} at byte {position}: the response ended but {remaining} bytes remain in the frame")]
    TrailingBytes {
        field: &'static str,
        position: usize,
        remaining: usize,
    },
    #[error("{field} at byte {position}: advance called before records_consumed() for {records_len} record bytes")]
    RecordsPending {
        field: &'static str,
        position: usize,
        records_len: usize,
    },
}

impl FetchParseError {
    /// The byte position within the frame (after the size prefix).
    pub fn position(&self) -> usize {
        match self {
            Self::UnsupportedVersion { position, .. }
            | Self::Truncated { position, .. }
            | Self::CountTooLarge { position, .. }
            | Self::LengthTooLarge { position, .. }
            | Self::InvalidLength { position, .. }
            | Self::UnexpectedNull { position, .. }
            | Self::InvalidVarint { position, .. }
            | Self::InvalidUtf8 { position, .. }
            | Self::TagTooShort { position, .. }
            | Self::TrailingBytes { position, .. }
            | Self::RecordsPending { position, .. } => *position,
        }
    }

    /// The field being read, as a dotted path after Kafka's schema.
    pub fn field(&self) -> &'static str {
        match self {
            Self::UnsupportedVersion { field, .. }
            | Self::Truncated { field, .. }
            | Self::CountTooLarge { field, .. }
            | Self::LengthTooLarge { field, .. }
            | Self::InvalidLength { field, .. }
            | Self::UnexpectedNull { field, .. }
            | Self::InvalidVarint { field, .. }
            | Self::InvalidUtf8 { field, .. }
            | Self::TagTooShort { field, .. }
            | Self::TrailingBytes { field, .. }
            | Self::RecordsPending { field, .. } => field,
        }
    }
}

/// What [`FetchResponseReader::advance`] stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchStep {
    /// Not enough bytes to make progress; feed more (what was given was consumed up to `consumed`).
    NeedMore,
    /// Top-level fields are known: see `reader.header()`.
    Header,
    /// A new topic starts: see `reader.topic()`.
    Topic,
    /// A partition's fields before its records are known (see `reader.partition()`); its records follow:
    /// `records_len` bytes (0 if null/empty). The caller must consume exactly those bytes itself and then call
    /// `reader.records_consumed()` before advancing again.
    Records { records_len: usize },
    /// The partition ended (its tagged fields, e.g. diverging epoch, are now in `reader.partition()`).
    PartitionEnd,
    /// The whole response was parsed and exactly `frame_len` bytes were accounted for.
    Done,
}

/// The response header and the top-level fields before the topics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchHeader {
    pub correlation_id: i32,
    pub throttle_time_ms: i32,
    /// 0 before v7 (the field does not exist there).
    pub error_code: i16,
    /// 0 before v7 (the field does not exist there).
    pub session_id: i32,
}

/// The current topic: a name up to v12, a topic id from v13.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRef<'a> {
    Name(&'a str),
    Id([u8; 16]),
}

/// The current partition. Fields a version lacks hold Kafka's defaults
/// (`log_start_offset` -1 before v5, `preferred_read_replica` -1 before v11);
/// the tagged fields are `None` unless the response carried them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchPartition {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// `(producer_id, first_offset)` pairs; `None` when the array was null.
    /// Complete once [`FetchStep::Records`] is returned.
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    pub preferred_read_replica: i32,
    /// `None` when the records field was null.
    pub records_len: Option<usize>,
    /// Tag 0: `(epoch, end_offset)`. Known at [`FetchStep::PartitionEnd`].
    pub diverging_epoch: Option<(i32, i64)>,
    /// Tag 1: `(leader_id, leader_epoch)`. Known at [`FetchStep::PartitionEnd`].
    pub current_leader: Option<(i32, i32)>,
    /// Tag 2: `(end_offset, epoch)`. Known at [`FetchStep::PartitionEnd`].
    pub snapshot_id: Option<(i64, i32)>,
}

/// One entry of the top-level `NodeEndpoints` tagged field (v16+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// Which tagged-field section is being read; decides the known tags and what
/// follows the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    ResponseHeader,
    AbortedTransaction,
    Partition,
    Topic,
    Response,
    NodeEndpoint,
}

impl Section {
    fn field(self) -> &'static str {
        match self {
            Self::ResponseHeader => "header._tagged_fields",
            Self::AbortedTransaction => "responses.partitions.aborted_transactions._tagged_fields",
            Self::Partition => "responses.partitions._tagged_fields",
            Self::Topic => "responses._tagged_fields",
            Self::Response => "_tagged_fields",
            Self::NodeEndpoint => "node_endpoints._tagged_fields",
        }
    }
}

/// The partition tags decoded by their fixed prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KnownTag {
    DivergingEpoch,
    CurrentLeader,
    SnapshotId,
}

impl KnownTag {
    fn fixed_len(self) -> usize {
        match self {
            Self::DivergingEpoch => 4 + 8,
            Self::CurrentLeader => 4 + 4,
            Self::SnapshotId => 8 + 4,
        }
    }

    fn field(self) -> &'static str {
        match self {
            Self::DivergingEpoch => "responses.partitions.diverging_epoch",
            Self::CurrentLeader => "responses.partitions.current_leader",
            Self::SnapshotId => "responses.partitions.snapshot_id",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    CorrelationId,
    Body,
    TopicCount,
    Topic,
    PartitionHead,
    AbortedTransaction,
    PreRecords,
    /// Waiting for the caller to move `len` record bytes.
    Records {
        len: usize,
    },
    /// Records moved (non-flexible versions): the partition ends next.
    RecordsDone,
    TagCount(Section),
    TagHeader(Section),
    KnownTag {
        tag: KnownTag,
        size: usize,
    },
    TagSkip {
        section: Section,
        left: usize,
    },
    NodeEndpointCount,
    NodeEndpoint,
    /// Everything parsed; the frame must be exhausted.
    Finish,
    Done,
    Failed(FetchParseError),
}

/// Why a unit could not complete.
enum Stop {
    /// The unit needs this many bytes from its start; they are inside the frame.
    More(usize),
    Fail(FetchParseError),
}

impl From<FetchParseError> for Stop {
    fn from(e: FetchParseError) -> Self {
        Stop::Fail(e)
    }
}

type Unit<T> = Result<T, Stop>;

/// A bounds-checked reader over the bytes given to one unit.
struct Cursor<'a> {
    /// The given bytes, clipped to `limit`.
    buf: &'a [u8],
    at: usize,
    /// Bytes left in the enclosing region (frame or tagged field) from the unit's start.
    limit: usize,
    /// Frame position of `buf[0]`.
    base: usize,
    region: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], limit: usize, base: usize, region: &'static str) -> Self {
        let buf = &buf[..buf.len().min(limit)];
        Cursor {
            buf,
            at: 0,
            limit,
            base,
            region,
        }
    }

    fn position(&self) -> usize {
        self.base + self.at
    }

    /// Bytes left in the region after the cursor.
    fn region_left(&self) -> usize {
        self.limit - self.at
    }

    /// Bytes given and not yet read.
    fn available(&self) -> usize {
        self.buf.len() - self.at
    }

    /// The stop for needing `n` more bytes than are available.
    fn need(&self, n: usize, field: &'static str) -> Stop {
        if n > self.region_left() {
            Stop::Fail(FetchParseError::Truncated {
                field,
                position: self.position(),
                needed: n,
                available: self.region_left(),
                region: self.region,
            })
        } else {
            Stop::More(self.at + n)
        }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Unit<&'a [u8]> {
        if n > self.available() {
            return Err(self.need(n, field));
        }
        let bytes = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Unit<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Unit<i16> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Unit<i32> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Unit<i64> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Kafka's unsigned varint: at most 5 bytes, value within u32.
    fn uvarint(&mut self, field: &'static str) -> Unit<u32> {
        let position = self.position();
        let mut value: u32 = 0;
        for i in 0..5 {
            let byte = self.take(1, field)?[0];
            if i == 4 && byte > 0x0f {
                break;
            }
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Stop::Fail(FetchParseError::InvalidVarint { field, position }))
    }
}

/// The streaming Fetch response parser. See the module docs for the protocol
/// between it and the caller.
#[derive(Debug)]
pub struct FetchResponseReader {
    version: i16,
    flexible: bool,
    frame_len: usize,
    /// Bytes of the frame accounted for (consumed by `advance` or moved by the caller as records).
    pos: usize,
    /// End of the innermost region: the frame, or the node endpoints tagged field being read.
    region_end: usize,
    /// True while reading inside the node endpoints tagged field.
    in_node_endpoints: bool,
    state: State,
    /// Bytes the pending unit is known to need (from what was seen of it), beyond the static minimum.
    hint: usize,
    topics_left: u32,
    partitions_left: u32,
    aborted_left: u32,
    tags_left: u32,
    /// The top-level section's tags left while the node endpoints tag is read.
    outer_tags_left: u32,
    nodes_left: u32,
    header: FetchHeader,
    topic_name: String,
    topic_id: [u8; 16],
    partition: FetchPartition,
    /// The aborted-transactions buffer while the current partition's array is null.
    spare_aborted: Vec<(i64, i64)>,
    node_endpoints: Vec<NodeEndpoint>,
}

impl FetchResponseReader {
    /// A reader for one response of `version` (4..=16) whose frame, after the
    /// 4-byte size prefix, is `frame_len` bytes.
    pub fn new(version: i16, frame_len: usize) -> Result<Self, FetchParseError> {
        let mut reader = FetchResponseReader {
            version: FETCH_RESPONSE_MIN_VERSION,
            flexible: false,
            frame_len: 0,
            pos: 0,
            region_end: 0,
            in_node_endpoints: false,
            state: State::Done,
            hint: 0,
            topics_left: 0,
            partitions_left: 0,
            aborted_left: 0,
            tags_left: 0,
            outer_tags_left: 0,
            nodes_left: 0,
            header: FetchHeader::default(),
            topic_name: String::new(),
            topic_id: [0; 16],
            partition: FetchPartition::default(),
            spare_aborted: Vec::new(),
            node_endpoints: Vec::new(),
        };
        reader.reset(version, frame_len)?;
        Ok(reader)
    }

    /// Starts over for the next response, keeping the buffers' capacity.
    pub fn reset(&mut self, version: i16, frame_len: usize) -> Result<(), FetchParseError> {
        if !(FETCH_RESPONSE_MIN_VERSION..=FETCH_RESPONSE_MAX_VERSION).contains(&version) {
            return Err(FetchParseError::UnsupportedVersion {
                field: "api_version",
                position: 0,
                version,
            });
        }
        self.version = version;
        self.flexible = version >= FIRST_FLEXIBLE_VERSION;
        self.frame_len = frame_len;
        self.pos = 0;
        self.region_end = frame_len;
        self.in_node_endpoints = false;
        self.state = State::CorrelationId;
        self.hint = 0;
        self.topics_left = 0;
        self.partitions_left = 0;
        self.aborted_left = 0;
        self.tags_left = 0;
        self.outer_tags_left = 0;
        self.nodes_left = 0;
        self.header = FetchHeader::default();
        self.topic_name.clear();
        self.topic_id = [0; 16];
        let aborted = self.take_aborted_buffer();
        self.spare_aborted = aborted;
        self.partition = FetchPartition::default();
        self.node_endpoints.clear();
        Ok(())
    }

    /// Parses from `buf` (bytes that follow what was consumed before). Returns (bytes consumed, step).
    /// Never consumes record bytes. Consumes 0 bytes and returns NeedMore when `buf` holds less than the next
    /// field(s) need.
    ///
    /// Bytes in `buf` beyond the frame are never consumed. After an error the
    /// reader is poisoned and returns the same error again (except for
    /// [`FetchParseError::RecordsPending`], a caller mistake that leaves it
    /// usable). After [`FetchStep::Done`] it keeps returning `(0, Done)`.
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, FetchStep), FetchParseError> {
        if let State::Records { len } = self.state {
            return Err(FetchParseError::RecordsPending {
                field: "responses.partitions.records",
                position: self.pos,
                records_len: len,
            });
        }
        let mut consumed = 0;
        loop {
            match self.step(&buf[consumed..]) {
                Ok((used, event)) => {
                    consumed += used;
                    self.hint = 0;
                    if let Some(event) = event {
                        return Ok((consumed, event));
                    }
                }
                Err(Stop::More(needed)) => {
                    self.hint = if consumed == 0 { self.hint.max(needed) } else { needed };
                    return Ok((consumed, FetchStep::NeedMore));
                }
                Err(Stop::Fail(e)) => {
                    self.state = State::Failed(e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// Tells the reader the caller moved the `records_len` bytes announced by
    /// the last [`FetchStep::Records`]. Does nothing at any other time.
    pub fn records_consumed(&mut self) {
        if let State::Records { len } = self.state {
            self.pos += len;
            self.state = if self.flexible {
                State::TagCount(Section::Partition)
            } else {
                State::RecordsDone
            };
        }
    }

    /// Minimum number of bytes `advance` needs next to make progress (a hint for sizing reads); 0 at Done.
    ///
    /// Also 0 while records are pending (move them first), when the next step
    /// needs no bytes (a `PartitionEnd` or `Done` is due) and after an error.
    /// Never more than [`remaining`](Self::remaining): when the frame is too
    /// short for the next field, `advance` fails instead.
    pub fn min_bytes_needed(&self) -> usize {
        let count_len = if self.flexible { 1 } else { 4 };
        let fixed = match &self.state {
            State::CorrelationId => 4,
            State::Body => {
                if self.version >= 7 {
                    4 + 2 + 4
                } else {
                    4
                }
            }
            State::TopicCount => count_len,
            State::Topic => self.min_topic_len() - usize::from(self.flexible),
            State::PartitionHead => 4 + 2 + 8 + 8 + (if self.version >= 5 { 8 } else { 0 }) + count_len,
            State::AbortedTransaction => 16,
            State::PreRecords => (if self.version >= 11 { 4 } else { 0 }) + count_len,
            State::TagCount(_) | State::TagSkip { .. } | State::NodeEndpointCount => 1,
            State::TagHeader(_) => MIN_TAGGED_FIELD_LEN,
            State::KnownTag { tag, .. } => tag.fixed_len(),
            State::NodeEndpoint => MIN_NODE_ENDPOINT_LEN - 1,
            State::Records { .. } | State::RecordsDone | State::Finish | State::Done | State::Failed(_) => 0,
        };
        fixed.max(self.hint).min(self.remaining())
    }

    /// Bytes of the frame not yet accounted for (including records not yet consumed).
    pub fn remaining(&self) -> usize {
        self.frame_len - self.pos
    }

    /// Bytes of the frame accounted for so far (the frame position of the next byte to feed).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The frame length given to [`new`](Self::new) or [`reset`](Self::reset).
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// The response version being parsed.
    pub fn version(&self) -> i16 {
        self.version
    }

    /// True once [`FetchStep::Done`] was returned.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Correlation id and the top-level fields; complete at [`FetchStep::Header`].
    pub fn header(&self) -> &FetchHeader {
        &self.header
    }

    /// The current topic; valid from [`FetchStep::Topic`] until the next one.
    pub fn topic(&self) -> TopicRef<'_> {
        if self.version >= 13 {
            TopicRef::Id(self.topic_id)
        } else {
            TopicRef::Name(&self.topic_name)
        }
    }

    /// The current partition; valid from [`FetchStep::Records`] (tagged fields
    /// from [`FetchStep::PartitionEnd`]) until the next partition starts.
    pub fn partition(&self) -> &FetchPartition {
        &self.partition
    }

    /// The top-level `NodeEndpoints` (v16+); complete at [`FetchStep::Done`].
    pub fn node_endpoints(&self) -> &[NodeEndpoint] {
        &self.node_endpoints
    }

    fn min_topic_len(&self) -> usize {
        match self.version {
            ..=11 => 2 + 4,
            12 => 1 + 1 + 1,
            _ => 16 + 1 + 1,
        }
    }

    fn min_partition_len(&self) -> usize {
        let count_len = if self.flexible { 1 } else { 4 };
        4 + 2
            + 8
            + 8
            + if self.version >= 5 { 8 } else { 0 }
            + count_len
            + if self.version >= 11 { 4 } else { 0 }
            + count_len
            + usize::from(self.flexible)
    }

    fn take_aborted_buffer(&mut self) -> Vec<(i64, i64)> {
        let mut v = self
            .partition
            .aborted_transactions
            .take()
            .unwrap_or_else(|| std::mem::take(&mut self.spare_aborted));
        v.clear();
        v
    }

    /// A nullable length or count: in flexible versions a uvarint holding
    /// N+1 (0 = null); before, a signed i32 (`wide`) or i16 where -1 is null
    /// and any other negative is invalid.
    fn read_nullable_len(&self, c: &mut Cursor<'_>, field: &'static str, wide: bool) -> Unit<Option<u32>> {
        let position = c.position();
        if self.flexible {
            return Ok(c.uvarint(field)?.checked_sub(1));
        }
        let n = if wide { c.i32(field)? } else { i32::from(c.i16(field)?) };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(FetchParseError::InvalidLength {
                field,
                position,
                length: n.into(),
            }
            .into()),
            n => Ok(Some(n.unsigned_abs())),
        }
    }

    /// An array count: `None` for null. Checks it against the bytes left.
    fn read_count(&self, c: &mut Cursor<'_>, field: &'static str, min_entry: usize) -> Unit<Option<u32>> {
        let position = c.position();
        let count = self.read_nullable_len(c, field, true)?;
        if let Some(count) = count {
            let min_bytes = u64::from(count) * min_entry as u64;
            if min_bytes > c.region_left() as u64 {
                return Err(FetchParseError::CountTooLarge {
                    field,
                    position,
                    count: count.into(),
                    min_bytes,
                    available: c.region_left(),
                }
                .into());
            }
        }
        Ok(count)
    }

    /// A non-nullable array count.
    fn read_required_count(&self, c: &mut Cursor<'_>, field: &'static str, min_entry: usize) -> Unit<u32> {
        let position = c.position();
        self.read_count(c, field, min_entry)?
            .ok_or(Stop::Fail(FetchParseError::UnexpectedNull { field, position }))
    }

    /// A length-prefixed byte string (STRING / COMPACT_STRING); `None` for null.
    fn read_string<'a>(&self, c: &mut Cursor<'a>, field: &'static str) -> Unit<Option<&'a str>> {
        let position = c.position();
        let Some(len) = self.read_nullable_len(c, field, false)? else {
            return Ok(None);
        };
        let len = len as usize;
        if len > MAX_STRING_LEN {
            return Err(FetchParseError::InvalidLength {
                field,
                position,
                length: len as i64,
            }
            .into());
        }
        if len > c.region_left() {
            return Err(FetchParseError::LengthTooLarge {
                field,
                position,
                length: len as u64,
                available: c.region_left(),
            }
            .into());
        }
        let bytes = c.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Some(s)),
            Err(_) => Err(FetchParseError::InvalidUtf8 { field, position }.into()),
        }
    }

    fn read_required_string<'a>(&self, c: &mut Cursor<'a>, field: &'static str) -> Unit<&'a str> {
        let position = c.position();
        self.read_string(c, field)?
            .ok_or(Stop::Fail(FetchParseError::UnexpectedNull { field, position }))
    }

    /// Parses one unit from `buf`. Returns the bytes it used (already added to
    /// `pos`) and the event to report, if any.
    fn step(&mut self, buf: &[u8]) -> Unit<(usize, Option<FetchStep>)> {
        let region = if self.in_node_endpoints {
            "node_endpoints tagged field"
        } else {
            "frame"
        };
        let mut c = Cursor::new(buf, self.region_end - self.pos, self.pos, region);
        let event = match self.state.clone() {
            State::CorrelationId => {
                let correlation_id = c.i32("header.correlation_id")?;
                self.pos += c.at;
                self.header.correlation_id = correlation_id;
                self.state = if self.flexible {
                    State::TagCount(Section::ResponseHeader)
                } else {
                    State::Body
                };
                None
            }
            State::Body => {
                let throttle_time_ms = c.i32("throttle_time_ms")?;
                let (error_code, session_id) = if self.version >= 7 {
                    (c.i16("error_code")?, c.i32("session_id")?)
                } else {
                    (0, 0)
                };
                self.pos += c.at;
                self.header.throttle_time_ms = throttle_time_ms;
                self.header.error_code = error_code;
                self.header.session_id = session_id;
                self.state = State::TopicCount;
                Some(FetchStep::Header)
            }
            State::TopicCount => {
                let count = self.read_required_count(&mut c, "responses", self.min_topic_len())?;
                self.pos += c.at;
                self.topics_left = count;
                self.state = if count > 0 { State::Topic } else { self.after_topics() };
                None
            }
            State::Topic => {
                let (name, topic_id) = if self.version >= 13 {
                    (None, Some(c.array("responses.topic_id")?))
                } else {
                    (Some(self.read_required_string(&mut c, "responses.topic")?), None)
                };
                let count = self.read_required_count(&mut c, "responses.partitions", self.min_partition_len())?;
                self.pos += c.at;
                if let Some(name) = name {
                    self.topic_name.clear();
                    self.topic_name.push_str(name);
                }
                if let Some(topic_id) = topic_id {
                    self.topic_id = topic_id;
                }
                self.topics_left = self.topics_left.saturating_sub(1);
                self.partitions_left = count;
                self.state = if count > 0 {
                    State::PartitionHead
                } else {
                    self.after_partitions()
                };
                Some(FetchStep::Topic)
            }
            State::PartitionHead => {
                let partition_index = c.i32("responses.partitions.partition_index")?;
                let error_code = c.i16("responses.partitions.error_code")?;
                let high_watermark = c.i64("responses.partitions.high_watermark")?;
                let last_stable_offset = c.i64("responses.partitions.last_stable_offset")?;
                let log_start_offset = if self.version >= 5 {
                    c.i64("responses.partitions.log_start_offset")?
                } else {
                    -1
                };
                let min_entry = 16 + usize::from(self.flexible);
                let aborted = self.read_count(&mut c, "responses.partitions.aborted_transactions", min_entry)?;
                self.pos += c.at;
                self.partitions_left = self.partitions_left.saturating_sub(1);
                let buffer = self.take_aborted_buffer();
                self.partition = FetchPartition {
                    partition_index,
                    error_code,
                    high_watermark,
                    last_stable_offset,
                    log_start_offset,
                    aborted_transactions: None,
                    preferred_read_replica: -1,
                    records_len: None,
                    diverging_epoch: None,
                    current_leader: None,
                    snapshot_id: None,
                };
                match aborted {
                    Some(n) => {
                        self.partition.aborted_transactions = Some(buffer);
                        self.aborted_left = n;
                    }
                    None => {
                        self.spare_aborted = buffer;
                        self.aborted_left = 0;
                    }
                }
                self.state = self.after_aborted_entry();
                None
            }
            State::AbortedTransaction => {
                let producer_id = c.i64("responses.partitions.aborted_transactions.producer_id")?;
                let first_offset = c.i64("responses.partitions.aborted_transactions.first_offset")?;
                self.pos += c.at;
                if let Some(v) = self.partition.aborted_transactions.as_mut() {
                    v.push((producer_id, first_offset));
                }
                self.aborted_left = self.aborted_left.saturating_sub(1);
                self.state = if self.flexible {
                    State::TagCount(Section::AbortedTransaction)
                } else {
                    self.after_aborted_entry()
                };
                None
            }
            State::PreRecords => {
                let preferred_read_replica = if self.version >= 11 {
                    c.i32("responses.partitions.preferred_read_replica")?
                } else {
                    -1
                };
                let field = "responses.partitions.records";
                let position = c.position();
                let records_len = self.read_nullable_len(&mut c, field, true)?.map(|n| n as usize);
                let len = records_len.unwrap_or(0);
                if len > c.region_left() {
                    return Err(FetchParseError::LengthTooLarge {
                        field,
                        position,
                        length: len as u64,
                        available: c.region_left(),
                    }
                    .into());
                }
                self.pos += c.at;
                self.partition.preferred_read_replica = preferred_read_replica;
                self.partition.records_len = records_len;
                self.state = State::Records { len };
                Some(FetchStep::Records { records_len: len })
            }
            State::Records { len } => {
                // `advance` reports this before stepping; kept for completeness.
                return Err(FetchParseError::RecordsPending {
                    field: "responses.partitions.records",
                    position: self.pos,
                    records_len: len,
                }
                .into());
            }
            State::RecordsDone => {
                self.state = self.after_partition();
                Some(FetchStep::PartitionEnd)
            }
            State::TagCount(section) => {
                let field = section.field();
                let position = c.position();
                let count = c.uvarint(field)?;
                let min_bytes = u64::from(count) * MIN_TAGGED_FIELD_LEN as u64;
                if min_bytes > c.region_left() as u64 {
                    return Err(FetchParseError::CountTooLarge {
                        field,
                        position,
                        count: count.into(),
                        min_bytes,
                        available: c.region_left(),
                    }
                    .into());
                }
                self.pos += c.at;
                self.tags_left = count;
                if count == 0 {
                    self.end_section(section)
                } else {
                    self.next_tag(section)
                }
            }
            State::TagHeader(section) => {
                let field = section.field();
                let tag = c.uvarint(field)?;
                let position = c.position();
                let size = c.uvarint(field)? as usize;
                if size > c.region_left() {
                    return Err(FetchParseError::LengthTooLarge {
                        field,
                        position,
                        length: size as u64,
                        available: c.region_left(),
                    }
                    .into());
                }
                self.pos += c.at;
                self.tags_left = self.tags_left.saturating_sub(1);
                match (section, tag) {
                    (Section::Partition, 0) => self.known_tag(KnownTag::DivergingEpoch, size),
                    (Section::Partition, 1) => self.known_tag(KnownTag::CurrentLeader, size),
                    (Section::Partition, 2) => self.known_tag(KnownTag::SnapshotId, size),
                    (Section::Response, 0) if self.version >= 16 => {
                        self.outer_tags_left = self.tags_left;
                        self.region_end = self.pos + size;
                        self.in_node_endpoints = true;
                        self.node_endpoints.clear();
                        self.state = State::NodeEndpointCount;
                        None
                    }
                    _ => self.skip(section, size),
                }
            }
            State::KnownTag { tag, size } => {
                let field = tag.field();
                if size < tag.fixed_len() {
                    return Err(FetchParseError::TagTooShort {
                        field,
                        position: c.position(),
                        size,
                        minimum: tag.fixed_len(),
                    }
                    .into());
                }
                match tag {
                    KnownTag::DivergingEpoch => {
                        let epoch = c.i32(field)?;
                        let end_offset = c.i64(field)?;
                        self.partition.diverging_epoch = Some((epoch, end_offset));
                    }
                    KnownTag::CurrentLeader => {
                        let leader_id = c.i32(field)?;
                        let leader_epoch = c.i32(field)?;
                        self.partition.current_leader = Some((leader_id, leader_epoch));
                    }
                    KnownTag::SnapshotId => {
                        let end_offset = c.i64(field)?;
                        let epoch = c.i32(field)?;
                        self.partition.snapshot_id = Some((end_offset, epoch));
                    }
                }
                self.pos += c.at;
                self.skip(Section::Partition, size - tag.fixed_len())
            }
            State::TagSkip { section, left } => {
                let n = left.min(c.available());
                if n == 0 {
                    return Err(c.need(1, section.field()));
                }
                self.pos += n;
                c.at = n;
                if left == n {
                    self.tag_done(section)
                } else {
                    self.state = State::TagSkip {
                        section,
                        left: left - n,
                    };
                    None
                }
            }
            State::NodeEndpointCount => {
                let count = self.read_required_count(&mut c, "node_endpoints", MIN_NODE_ENDPOINT_LEN)?;
                self.pos += c.at;
                self.nodes_left = count;
                if count > 0 {
                    self.state = State::NodeEndpoint;
                    None
                } else {
                    self.end_node_endpoints()
                }
            }
            State::NodeEndpoint => {
                let node_id = c.i32("node_endpoints.node_id")?;
                let host = self.read_required_string(&mut c, "node_endpoints.host")?;
                let port = c.i32("node_endpoints.port")?;
                let rack = self.read_string(&mut c, "node_endpoints.rack")?;
                self.pos += c.at;
                self.node_endpoints.push(NodeEndpoint {
                    node_id,
                    host: host.to_owned(),
                    port,
                    rack: rack.map(str::to_owned),
                });
                self.nodes_left = self.nodes_left.saturating_sub(1);
                self.state = State::TagCount(Section::NodeEndpoint);
                None
            }
            State::Finish => {
                if self.pos != self.frame_len {
                    return Err(FetchParseError::TrailingBytes {
                        field: "_end",
                        position: self.pos,
                        remaining: self.remaining(),
                    }
                    .into());
                }
                self.state = State::Done;
                Some(FetchStep::Done)
            }
            State::Done => Some(FetchStep::Done),
            State::Failed(e) => return Err(Stop::Fail(e)),
        };
        Ok((c.at, event))
    }

    fn after_aborted_entry(&self) -> State {
        if self.aborted_left > 0 {
            State::AbortedTransaction
        } else {
            State::PreRecords
        }
    }

    fn after_partition(&self) -> State {
        if self.partitions_left > 0 {
            State::PartitionHead
        } else {
            self.after_partitions()
        }
    }

    fn after_partitions(&self) -> State {
        if self.flexible {
            State::TagCount(Section::Topic)
        } else {
            self.after_topic()
        }
    }

    fn after_topic(&self) -> State {
        if self.topics_left > 0 {
            State::Topic
        } else {
            self.after_topics()
        }
    }

    fn after_topics(&self) -> State {
        if self.flexible {
            State::TagCount(Section::Response)
        } else {
            State::Finish
        }
    }

    fn known_tag(&mut self, tag: KnownTag, size: usize) -> Option<FetchStep> {
        self.state = State::KnownTag { tag, size };
        None
    }

    fn skip(&mut self, section: Section, left: usize) -> Option<FetchStep> {
        if left == 0 {
            self.tag_done(section)
        } else {
            self.state = State::TagSkip { section, left };
            None
        }
    }

    fn next_tag(&mut self, section: Section) -> Option<FetchStep> {
        self.state = State::TagHeader(section);
        None
    }

    fn tag_done(&mut self, section: Section) -> Option<FetchStep> {
        if self.tags_left == 0 {
            self.end_section(section)
        } else {
            self.next_tag(section)
        }
    }

    fn end_section(&mut self, section: Section) -> Option<FetchStep> {
        match section {
            Section::ResponseHeader => {
                self.state = State::Body;
                None
            }
            Section::AbortedTransaction => {
                self.state = self.after_aborted_entry();
                None
            }
            Section::Partition => {
                self.state = self.after_partition();
                Some(FetchStep::PartitionEnd)
            }
            Section::Topic => {
                self.state = self.after_topic();
                None
            }
            Section::Response => {
                self.state = State::Finish;
                None
            }
            Section::NodeEndpoint => {
                if self.nodes_left > 0 {
                    self.state = State::NodeEndpoint;
                    None
                } else {
                    self.end_node_endpoints()
                }
            }
        }
    }

    /// Leaves the node endpoints tagged field: skips what follows the array
    /// inside it and resumes the top-level section.
    fn end_node_endpoints(&mut self) -> Option<FetchStep> {
        let left = self.region_end - self.pos;
        self.region_end = self.frame_len;
        self.in_node_endpoints = false;
        self.tags_left = self.outer_tags_left;
        self.skip(Section::Response, left)
    }
}

impl fmt::Display for TopicRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicRef::Name(name) => f.write_str(name),
            TopicRef::Id(id) => {
                for (i, b) in id.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}
