//! Kafka's bounds on the strings that reach us from the network (a
//! source's answers, a client's requests) and that we write again into
//! fixed-width fields: a Kafka STRING's i16 length (MIRROR_PID_RESET
//! values, `__consumer_offsets` records), topic names (partition
//! directories, our own records). Checked where they enter, with an error
//! that says which field and by how much; the encoders check again, so a
//! length never wraps and nothing panics.

/// The longest Kafka STRING (an i16 length prefix).
pub const STRING_BYTES_MAX: usize = i16::MAX as usize;
/// Kafka's `Topic.MAX_NAME_LENGTH` (a partition directory name must stay
/// within the file system's 255 bytes).
pub const TOPIC_NAME_CHARS_MAX: usize = 249;

/// A string longer than the field it goes into holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {bytes} bytes, longer than Kafka allows ({limit})")]
pub struct TooLong {
    pub field: &'static str,
    pub bytes: usize,
    pub limit: &'static str,
}

/// The i16 length prefix of `s` as a Kafka STRING `field`.
pub fn string_length(field: &'static str, s: &str) -> Result<i16, TooLong> {
    i16::try_from(s.len()).map_err(|_| TooLong {
        field,
        bytes: s.len(),
        limit: "a Kafka STRING holds at most 32767 bytes",
    })
}

/// Appends `s` as a Kafka STRING (i16 length, then the bytes).
pub fn put_string(out: &mut Vec<u8>, field: &'static str, s: &str) -> Result<(), TooLong> {
    out.extend_from_slice(&string_length(field, s)?.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// A source cluster's id as its Metadata answer gives it: what the
/// MIRROR_PID_RESET record (a Kafka STRING) and the ending-mirror marker
/// (one line) can hold. Kafka's own are 22-character base64 UUIDs.
pub fn check_cluster_id(id: &str) -> Result<(), String> {
    if id.len() > STRING_BYTES_MAX {
        let too_long = TooLong {
            field: "source cluster id",
            bytes: id.len(),
            limit: "at most 32767 bytes, a Kafka STRING; Kafka's own ids are 22-character base64 UUIDs",
        };
        return Err(too_long.to_string());
    }
    if id.chars().any(char::is_control) {
        return Err(format!("source cluster id {:?} holds control characters", shown(id)));
    }
    Ok(())
}

/// Kafka's rule for topic names (`Topic.validate`): 1 to 249 characters
/// of ASCII letters, digits, '.', '_' and '-', and not "." or "..".
pub fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("{name:?} is not a valid topic name"));
    }
    if name.len() > TOPIC_NAME_CHARS_MAX {
        return Err(format!(
            "topic names are at most {TOPIC_NAME_CHARS_MAX} characters, not {} ({:?}…)",
            name.len(),
            shown(name)
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "{name:?}: topic names use only ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// The start of a (possibly huge) string, for messages and logs.
pub fn shown(s: &str) -> &str {
    const SHOWN_CHARS_MAX: usize = 64;
    s.char_indices().nth(SHOWN_CHARS_MAX).map_or(s, |(at, _)| &s[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_holds_up_to_i16_max_bytes() {
        let longest = "x".repeat(STRING_BYTES_MAX);
        assert_eq!(string_length("f", &longest), Ok(i16::MAX));
        let mut out = Vec::new();
        put_string(&mut out, "f", "ab").unwrap();
        assert_eq!(out, [0, 2, b'a', b'b']);
        let err = put_string(&mut out, "group id", &"x".repeat(STRING_BYTES_MAX + 1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "group id is 32768 bytes, longer than Kafka allows (a Kafka STRING holds at most 32767 bytes)"
        );
        assert_eq!(out.len(), 4, "nothing written for a string that does not fit");
    }

    #[test]
    fn cluster_ids_are_bounded_by_what_we_write_them_into() {
        check_cluster_id("MkU3OEVBNTcwNTJENDM2Qk").unwrap();
        check_cluster_id(&"c".repeat(STRING_BYTES_MAX)).unwrap();
        let err = check_cluster_id(&"c".repeat(40_000)).unwrap_err();
        assert!(
            err.starts_with("source cluster id is 40000 bytes, longer than Kafka allows (at most 32767 bytes"),
            "{err}"
        );
        assert!(check_cluster_id("a\nb").unwrap_err().contains("control characters"));
    }

    #[test]
    fn topic_names_follow_kafka() {
        check_topic_name("orders.v2_eu-1").unwrap();
        check_topic_name(&"t".repeat(TOPIC_NAME_CHARS_MAX)).unwrap();
        let err = check_topic_name(&"t".repeat(40_000)).unwrap_err();
        assert!(
            err.starts_with("topic names are at most 249 characters, not 40000"),
            "{err}"
        );
        assert!(err.len() < 200, "the message shows only the name's start: {err}");
        for bad in ["", ".", "..", "a/b", "é"] {
            assert!(check_topic_name(bad).is_err(), "{bad:?}");
        }
    }
}
