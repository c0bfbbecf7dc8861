//! DescribeShareGroupOffsets responses (API key 90) encoded by hand, so that
//! version 1 can carry each share-partition's `Lag` (KIP-1226, Kafka 4.2+):
//! `kafka-protocol` 0.18 knows version 0 only. The request is the same at
//! both versions, so `kafka-protocol` still decodes it; the response is the
//! crate's v0 type plus, at v1, a lag per partition that the caller looks
//! up.
//!
//! ```text
//! Response (v0–v1, flexible) =>
//!   throttle_time_ms  INT32
//!   groups            COMPACT_ARRAY of
//!     group_id          COMPACT_STRING
//!     topics            COMPACT_ARRAY of
//!       topic_name        COMPACT_STRING
//!       topic_id          UUID
//!       partitions        COMPACT_ARRAY of
//!         partition_index   INT32
//!         start_offset      INT64
//!         leader_epoch      INT32
//!         lag               INT64  (v1+; -1: not known)
//!         error_code        INT16
//!         error_message     COMPACT_NULLABLE_STRING
//!         _tagged_fields
//!       _tagged_fields
//!     error_code        INT16
//!     error_message     COMPACT_NULLABLE_STRING
//!     _tagged_fields
//!   _tagged_fields
//! ```
//! (Kafka's `DescribeShareGroupOffsetsResponse.json`.) We write no tagged
//! fields.

use bytes::BufMut;
use kafka_protocol::messages::DescribeShareGroupOffsetsResponse;
use kafka_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition;

use super::compact::{EncodeError, write_array, write_nullable_string, write_string, write_uvarint};

/// The highest version we answer: the first with `Lag`.
pub const MAX_VERSION: i16 = 1;
/// Kafka's `Lag` default: the lag is not known.
pub const LAG_UNKNOWN: i64 = -1;

/// Encodes `body` at `version` (0 or 1); at 1 each partition's lag is
/// `lag(topic_name, partition)`.
pub fn encode_response<B: BufMut>(
    body: &DescribeShareGroupOffsetsResponse,
    version: i16,
    lag: impl Fn(&str, &DescribeShareGroupOffsetsResponsePartition) -> i64,
    buf: &mut B,
) -> Result<(), EncodeError> {
    buf.put_i32(body.throttle_time_ms);
    write_array(buf, "groups", &body.groups, |b, g| {
        write_string(b, "groups[].group_id", &g.group_id.0)?;
        write_array(b, "groups[].topics", &g.topics, |b, t| {
            write_string(b, "groups[].topics[].topic_name", &t.topic_name.0)?;
            b.put_slice(t.topic_id.as_bytes());
            write_array(b, "groups[].topics[].partitions", &t.partitions, |b, p| {
                b.put_i32(p.partition_index);
                b.put_i64(p.start_offset);
                b.put_i32(p.leader_epoch);
                if version >= 1 {
                    b.put_i64(lag(&t.topic_name.0, p));
                }
                b.put_i16(p.error_code);
                write_nullable_string(
                    b,
                    "groups[].topics[].partitions[].error_message",
                    p.error_message.as_deref(),
                )?;
                write_uvarint(b, 0);
                Ok(())
            })?;
            write_uvarint(b, 0);
            Ok(())
        })?;
        b.put_i16(g.error_code);
        write_nullable_string(b, "groups[].error_message", g.error_message.as_deref())?;
        write_uvarint(b, 0);
        Ok(())
    })?;
    write_uvarint(buf, 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponseTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use uuid::Uuid;

    use super::*;

    fn body() -> DescribeShareGroupOffsetsResponse {
        let partition = |index: i32, start: i64, error: i16| {
            DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(index)
                .with_start_offset(start)
                .with_leader_epoch(7)
                .with_error_code(error)
                .with_error_message((error != 0).then(|| StrBytes::from_static_str("denied")))
        };
        let topic = |name: &'static str, id: u8, partitions| {
            DescribeShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(StrBytes::from_static_str(name)))
                .with_topic_id(Uuid::from_bytes([id; 16]))
                .with_partitions(partitions)
        };
        DescribeShareGroupOffsetsResponse::default()
            .with_throttle_time_ms(3)
            .with_groups(vec![
                DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("workers")))
                    .with_topics(vec![
                        topic("orders", 1, vec![partition(0, 90, 0), partition(1, -1, 0)]),
                        topic("payments", 2, vec![partition(4, -1, 29)]),
                    ]),
                DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("refused")))
                    .with_error_code(30)
                    .with_error_message(Some(StrBytes::from_static_str("no"))),
            ])
    }

    #[test]
    fn version_0_is_byte_for_byte_what_kafka_protocol_writes() {
        let mut ours = BytesMut::new();
        encode_response(&body(), 0, |_, _| unreachable!("no lag at v0"), &mut ours).unwrap();
        let mut theirs = BytesMut::new();
        body().encode(&mut theirs, 0).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn version_1_adds_each_partitions_lag_after_its_leader_epoch() {
        let mut v0 = BytesMut::new();
        encode_response(&body(), 0, |_, _| LAG_UNKNOWN, &mut v0).unwrap();
        let mut v1 = BytesMut::new();
        let lag = |topic: &str, p: &DescribeShareGroupOffsetsResponsePartition| {
            if topic == "orders" && p.partition_index == 0 {
                12
            } else {
                LAG_UNKNOWN
            }
        };
        encode_response(&body(), 1, lag, &mut v1).unwrap();
        assert_eq!(v1.len(), v0.len() + 3 * 8, "one INT64 per partition");
        // The first partition of "orders": its fields, then lag 12.
        let start = v0
            .windows(8)
            .position(|w| w == 90i64.to_be_bytes())
            .expect("start offset 90 in the body");
        let after_epoch = start + 8 + 4;
        assert_eq!(v1[..after_epoch], v0[..after_epoch]);
        assert_eq!(v1[after_epoch..after_epoch + 8], 12i64.to_be_bytes());
        assert_eq!(
            v1[after_epoch + 8..after_epoch + 8 + 2],
            v0[after_epoch..after_epoch + 2]
        );
    }
}
