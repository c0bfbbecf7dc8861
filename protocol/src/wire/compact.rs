//! Writers of Kafka's flexible-version ("compact") encodings, for the
//! bodies we encode by hand: unsigned varints, compact lengths, strings and
//! arrays, checked against what the protocol can carry.

use bytes::BufMut;

/// A value the protocol cannot carry (we refuse to write a frame a peer
/// would reject).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} has {len} elements or bytes, more than the protocol allows ({max})")]
pub struct EncodeError {
    pub field: &'static str,
    pub len: usize,
    pub max: usize,
}

/// Kafka refuses longer strings (`0x7fff`), compact ones included.
pub(crate) const MAX_STRING_LEN: usize = i16::MAX as usize;

pub(crate) fn write_uvarint<B: BufMut>(buf: &mut B, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// A compact length: `len + 1`, or 0 for null.
pub(crate) fn write_compact_len<B: BufMut>(
    buf: &mut B,
    field: &'static str,
    len: Option<usize>,
) -> Result<(), EncodeError> {
    let encoded = match len {
        None => 0,
        Some(len) => u32::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(1))
            .ok_or(EncodeError {
                field,
                len,
                max: u32::MAX as usize - 1,
            })?,
    };
    write_uvarint(buf, encoded);
    Ok(())
}

pub(crate) fn write_nullable_string<B: BufMut>(
    buf: &mut B,
    field: &'static str,
    s: Option<&str>,
) -> Result<(), EncodeError> {
    match s {
        None => write_compact_len(buf, field, None),
        Some(s) => write_string(buf, field, s),
    }
}

pub(crate) fn write_string<B: BufMut>(buf: &mut B, field: &'static str, s: &str) -> Result<(), EncodeError> {
    if s.len() > MAX_STRING_LEN {
        return Err(EncodeError {
            field,
            len: s.len(),
            max: MAX_STRING_LEN,
        });
    }
    write_compact_len(buf, field, Some(s.len()))?;
    buf.put_slice(s.as_bytes());
    Ok(())
}

pub(crate) fn write_array<B: BufMut, T>(
    buf: &mut B,
    field: &'static str,
    items: &[T],
    mut write: impl FnMut(&mut B, &T) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    write_compact_len(buf, field, Some(items.len()))?;
    items.iter().try_for_each(|item| write(buf, item))
}
