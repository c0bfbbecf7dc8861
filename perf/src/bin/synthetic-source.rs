//! `synthetic-source`: a Kafka-protocol server on 127.0.0.1 that serves
//! pre-built record batches from memory (see `ringmirror_perf::synthetic_source`).
//!
//! ```sh
//! synthetic-source --port 19092 --partitions 4 --size-mb 1024             # fixed dataset
//! synthetic-source --port 19092 --rate-mb-s 50 --size-mb 2048             # steady appends
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use ringmirror_perf::dataset::{Dataset, DatasetSpec};
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};

#[derive(Parser)]
#[command(about = "A Kafka-protocol source on 127.0.0.1 serving pre-built batches from memory")]
struct Args {
    /// Port on 127.0.0.1 (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 19092)]
    port: u16,
    #[arg(long, default_value = "perf-source")]
    topic: String,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// MiB of batches over all partitions.
    #[arg(long, default_value_t = 1024)]
    size_mb: u64,
    /// Value bytes per record.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    #[arg(long, default_value_t = 16)]
    batch_records: usize,
    /// Steady append mode: MB/s (10^6 bytes) over all partitions, from the first Fetch on.
    /// Without it, the whole dataset is available at start.
    #[arg(long)]
    rate_mb_s: Option<f64>,
    /// Accept (and discard) Produce requests to this topic.
    #[arg(long)]
    sink_topic: Option<String>,
    /// Pin connection threads to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Exit after this many seconds (default: run until killed).
    #[arg(long)]
    duration_s: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let built = Instant::now();
    let dataset = Arc::new(Dataset::build(DatasetSpec {
        topic: args.topic.clone(),
        partitions: args.partitions,
        bytes_per_partition: (args.size_mb << 20) / args.partitions.max(1) as u64,
        record_bytes: args.record_bytes,
        records_per_batch: args.batch_records,
        seed: 0x5eed,
    }));
    eprintln!(
        "built {} partitions, {:.1} MiB in batches of {} bytes ({} records each) in {:.2} s",
        args.partitions,
        dataset.total_bytes() as f64 / (1 << 20) as f64,
        dataset.batch_bytes(),
        args.batch_records,
        built.elapsed().as_secs_f64()
    );
    let source = SyntheticSource::start(
        Arc::clone(&dataset),
        SourceOptions {
            rate_bytes_per_s: args.rate_mb_s.map(|r| r * 1e6),
            cpu: args.cpu,
            sink_topic: args.sink_topic.clone(),
            port: args.port,
            ..SourceOptions::default()
        },
    )?;
    println!("listening on {}", source.addr());
    let started = Instant::now();
    let mut last = source.stats();
    loop {
        std::thread::sleep(Duration::from_secs(5));
        let now = source.stats();
        let sent = now.record_bytes_sent - last.record_bytes_sent;
        if sent > 0 || now.record_bytes_produced > last.record_bytes_produced {
            eprintln!(
                "served {:.1} MB/s ({} fetches total), produced into sink {:.1} MB, source CPU {:.2} s",
                sent as f64 / 5e6,
                now.fetch_requests,
                now.record_bytes_produced as f64 / 1e6,
                now.cpu.as_secs_f64()
            );
        }
        last = now;
        if args
            .duration_s
            .is_some_and(|d| started.elapsed() >= Duration::from_secs(d))
        {
            break;
        }
    }
    source.stop();
    Ok(())
}
