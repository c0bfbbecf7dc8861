//! Fuzzes the streaming Fetch response parser: the first two bytes pick the
//! version and a chunk size, the rest is the frame, fed in chunks with
//! records skipped as the fetcher skips them. Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmirror_protocol::wire::{FetchResponseReader, FetchStep};

fuzz_target!(|data: &[u8]| {
    let [version, chunk, frame @ ..] = data else { return };
    let version = 4 + (*version % 13) as i16;
    let chunk = 1 + *chunk as usize;
    let Ok(mut reader) = FetchResponseReader::new(version, frame.len()) else { return };
    let (mut pos, mut fed) = (0usize, 0usize);
    for _ in 0..100_000 {
        let avail = &frame[pos..fed.min(frame.len())];
        match reader.advance(avail) {
            Err(_) => return,
            Ok((n, step)) => {
                pos += n;
                match step {
                    FetchStep::NeedMore => {
                        if fed >= frame.len() {
                            return;
                        }
                        fed += chunk;
                    }
                    FetchStep::Records { records_len } => {
                        if pos + records_len > frame.len() {
                            return;
                        }
                        pos += records_len;
                        fed = fed.max(pos);
                        reader.records_consumed();
                    }
                    FetchStep::Done => return,
                    _ => {}
                }
            }
        }
    }
});
