//! Fuzzes request decoding as the listener does it, on every frame a client
//! could send. Each input is tried twice: as a whole frame (short frames,
//! unknown keys, unsupported versions, lying header fields), and as the body
//! of a request whose header the first byte picks among the served APIs and
//! versions, so that most runs get past the header into kafka-protocol's
//! body decoders. Decoding must never abort: lying array counts cost only
//! address space (hence the agent's allocator, registered here too), and a
//! panic inside the decoders becomes a malformed-request error (hence the
//! panic hook that reports and unwinds instead of aborting, as in the
//! agent). Any other panic — in our code — still aborts and is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmirror_protocol::lazy_alloc::LazyHugeAlloc;
use ringmirror_protocol::request::{RequestError, SUPPORTED_APIS, decode_request};

#[global_allocator]
static ALLOCATOR: LazyHugeAlloc = LazyHugeAlloc;

const CORRELATION_ID: i32 = 0x5eed;

/// The frame as received: the refusal, or the header, must agree with the
/// fixed fields at its start.
fn raw(data: &[u8]) {
    let fixed = |at: usize| data.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]]));
    let correlation_id = data.get(4..8).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    match decode_request(data.to_vec().into()) {
        Ok((header, _)) => {
            assert_eq!(Some(header.request_api_key), fixed(0));
            assert_eq!(Some(header.request_api_version), fixed(2));
            assert_eq!(Some(header.correlation_id), correlation_id);
        }
        Err(RequestError::TooShort { len }) => assert_eq!(len, data.len()),
        Err(
            RequestError::UnknownApi { correlation_id: id, .. }
            | RequestError::UnsupportedVersion { correlation_id: id, .. }
            | RequestError::UnsupportedApi { correlation_id: id, .. }
            | RequestError::Malformed { correlation_id: id, .. },
        ) => assert_eq!(Some(id), correlation_id),
    }
}

/// `body` behind a valid header of the served (API, version) `pick` names:
/// decoded, or refused as malformed — nothing else.
fn structured(pick: u8, body: &[u8]) {
    let mut served = SUPPORTED_APIS
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |version| (api, version)));
    let count = served.clone().count();
    let (api, version) = served.nth(usize::from(pick) % count).expect("pick is below the count");
    let header_version = api.request_header_version(version);
    let mut frame = Vec::with_capacity(16 + body.len());
    frame.extend_from_slice(&(api as i16).to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    if header_version >= 1 {
        frame.extend_from_slice(&4i16.to_be_bytes());
        frame.extend_from_slice(b"fuzz");
    }
    if header_version >= 2 {
        // No tagged fields.
        frame.push(0);
    }
    frame.extend_from_slice(body);
    match decode_request(frame.into()) {
        Ok((header, _)) => {
            assert_eq!(header.request_api_key, api as i16);
            assert_eq!(header.request_api_version, version);
            assert_eq!(header.correlation_id, CORRELATION_ID);
        }
        Err(RequestError::Malformed {
            api: a,
            version: v,
            correlation_id,
            ..
        }) => assert_eq!((a, v, correlation_id), (api, version, CORRELATION_ID)),
        Err(e) => panic!("{api:?} v{version} with a valid header refused: {e}"),
    }
}

fuzz_target!(
    init: {
        // libfuzzer-sys aborts on every panic, even one that is caught;
        // the default hook reports it and lets it unwind to the catch.
        drop(std::panic::take_hook());
    },
    |data: &[u8]| {
        raw(data);
        if let [pick, body @ ..] = data {
            structured(*pick, body);
        }
    }
);
