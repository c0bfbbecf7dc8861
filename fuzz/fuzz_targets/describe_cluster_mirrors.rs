//! Fuzzes the DescribeClusterMirrors decoders (KIP-1279, API 99), above
//! all the response's: the client reads it from a peer when it asks for
//! last mirror epochs before failing back. (Requests also reach their
//! decoder through `request_decoder`, as the listener decodes them.) Any
//! bytes decode or are refused, never panic, and never allocate more than
//! the input justifies. Whatever decodes encodes again to bytes that
//! decode to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmirror_protocol::wire::describe_cluster_mirrors::{
    DescribeClusterMirrorsRequest, DescribeClusterMirrorsResponse,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(response) = DescribeClusterMirrorsResponse::decode(data) {
        let mut again = Vec::new();
        response.encode(&mut again).expect("a decoded response encodes");
        assert_eq!(DescribeClusterMirrorsResponse::decode(&again), Ok(response));
    }
    if let Ok(request) = DescribeClusterMirrorsRequest::decode(data) {
        let mut again = Vec::new();
        request.encode(&mut again).expect("a decoded request encodes");
        assert_eq!(DescribeClusterMirrorsRequest::decode(&again), Ok(request));
    }
});
