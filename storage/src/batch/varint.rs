//! Zig-zag varints as Kafka's record format uses them (protobuf style),
//! and the unsigned ones under them (which Kafka's flexible-version
//! messages use for lengths and tags).
//!
//! Decoders take a cursor and fail on truncation or overlong encodings
//! instead of panicking: these bytes come from the network and from disk.

/// A varint that was truncated or longer than its type allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed varint at byte {position}")]
pub struct VarintError {
    pub position: usize,
}

/// Reads an unsigned varint of at most `max_bytes` bytes (5 for Kafka's
/// UNSIGNED_VARINT, 10 for a u64).
pub fn read_unsigned(buf: &[u8], pos: &mut usize, max_bytes: usize) -> Result<u64, VarintError> {
    let start = *pos;
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let Some(&byte) = buf.get(*pos) else {
            return Err(VarintError { position: start });
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(VarintError { position: start })
}

/// Reads a zig-zag varint (at most 5 bytes) into an i32.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, VarintError> {
    let start = *pos;
    let raw = read_unsigned(buf, pos, 5)?;
    let raw = u32::try_from(raw).map_err(|_| VarintError { position: start })?;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Reads a zig-zag varlong (at most 10 bytes) into an i64.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, VarintError> {
    let raw = read_unsigned(buf, pos, 10)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

pub fn write_unsigned(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub fn write_varint(out: &mut Vec<u8>, value: i32) {
    write_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

pub fn write_varlong(out: &mut Vec<u8>, value: i64) {
    write_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trips(v: i32) {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            let mut pos = 0;
            prop_assert_eq!(read_varint(&out, &mut pos).unwrap(), v);
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn varlong_round_trips(v: i64) {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            let mut pos = 0;
            prop_assert_eq!(read_varlong(&out, &mut pos).unwrap(), v);
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn varint_never_panics_on_garbage(bytes: Vec<u8>) {
            let mut pos = 0;
            let _ = read_varint(&bytes, &mut pos);
            let mut pos = 0;
            let _ = read_varlong(&bytes, &mut pos);
        }
    }

    #[test]
    fn truncated_and_overlong_varints_are_errors() {
        assert!(read_varint(&[0x80], &mut 0).is_err());
        assert!(read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut 0).is_err());
        assert_eq!(read_varint(&[0x01], &mut 0).unwrap(), -1);
    }
}
