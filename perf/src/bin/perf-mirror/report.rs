//! The tables a run prints (Markdown, on stdout) and the line each run
//! prints as it ends (stderr): medians per scenario, ratios between
//! scenarios, the serving table and every run's shard spread, the lag
//! percentiles and slow episodes. It only formats what `measure` measured.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::plot;
use ringmirror_perf::procstat::ProcStat;
use ringmirror_perf::summary::{cpu_s_per_gb, machine_line, median};

use crate::Args;
use crate::measure::{Lags, Measured};
use crate::serve::{SERVE_MANY_SHARDS, SERVER_CPU, Spread};
use crate::throughput::{Scenario, Server};

/// A table's heading: the line saying what was measured, then the columns.
fn print_heading(what: &str, columns: &str, alignment: &str) {
    println!();
    println!("{what}");
    println!();
    println!("{columns}");
    println!("{alignment}");
}

/// "`<n>`-byte batches (`<r>` × `<b>` B records); medians of `<k>` runs".
fn batches_and_runs(args: &Args, dataset: &Dataset) -> String {
    format!(
        "{}-byte batches ({} × {} B records); medians of {} runs",
        dataset.batch_bytes(),
        args.batch_records,
        args.record_bytes,
        args.repeats
    )
}

/// The scenarios that have measured runs (warm-ups are never kept).
fn measured(results: &[(Scenario, Vec<Measured>)]) -> impl Iterator<Item = (&Scenario, &[Measured])> {
    results
        .iter()
        .filter(|(_, runs)| !runs.is_empty())
        .map(|(scenario, runs)| (scenario, &runs[..]))
}

/// The median over `runs` of one number of each.
fn median_of(runs: &[Measured], f: impl Fn(&Measured) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

/// One run's line on stderr as it ends (`label`: "warm-up" or "run").
pub fn print_run(name: &str, label: &str, number: usize, m: &Measured) {
    eprintln!(
        "  {:<18} {} {}: {:>8.1} MB/s  {:>6.3} s wall  CPU {:.2} s (user {:.2}, sys {:.2})  minflt {}  majflt {}  source CPU {:.2} s  others {:.2} s",
        name,
        label,
        number,
        m.mb_s(),
        m.wall.as_secs_f64(),
        m.stat.cpu().as_secs_f64(),
        m.stat.utime.as_secs_f64(),
        m.stat.stime.as_secs_f64(),
        m.stat.minflt,
        m.stat.majflt,
        m.source_cpu.as_secs_f64(),
        m.others_cpu.as_secs_f64()
    );
    if let Some(server) = &m.server {
        eprintln!(
            "  {:<18} server CPU {:.2} s ({:.3} s/GB); the CPU above is the consumers'",
            "",
            server.cpu.as_secs_f64(),
            m.server_cpu_s_per_gb().unwrap_or_default()
        );
    }
    if let Some(spread) = m.spread.as_ref().filter(|s| s.connections.len() > 1) {
        eprintln!(
            "  {:<18} connections per shard {}, Fetch connections per shard {}, agent CPU per shard {} s/GB",
            "",
            spread.per_shard(),
            spread.fetch_per_shard(),
            m.shard_cpu_s_per_gb()
        );
    }
}

/// The throughput table: medians per scenario, then ratios.
pub fn print_table(args: &Args, dataset: &Dataset, results: &[(Scenario, Vec<Measured>)]) {
    print_heading(
        &format!(
            "{}; dataset {:.0} MB, {} partitions, {}; fetch max_wait {} ms, min_bytes 1, partition_max {} B, max {} B",
            machine_line(),
            dataset.total_bytes() as f64 / 1e6,
            args.partitions,
            batches_and_runs(args, dataset),
            args.fetch_max_wait_ms,
            args.fetch_partition_max_bytes,
            args.fetch_max_bytes
        ),
        "| scenario | MB/s | CPU s/GB | user s/GB | sys s/GB | minor faults/GB | major faults | source CPU % | others' CPU % | what |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    );
    let mut medians = BTreeMap::new();
    for (scenario, runs) in measured(results) {
        let mb_s = median_of(runs, Measured::mb_s);
        let cpu = median_of(runs, Measured::cpu_s_per_gb);
        let user = median_of(runs, |m| cpu_s_per_gb(m.stat.utime, m.bytes));
        let sys = median_of(runs, |m| cpu_s_per_gb(m.stat.stime, m.bytes));
        let faults = median_of(runs, Measured::faults_per_gb);
        let major = median_of(runs, |m| m.stat.majflt as f64);
        let source = median_of(runs, |m| percent_of_wall(m.source_cpu, m));
        let others = median_of(runs, |m| percent_of_wall(m.others_cpu, m));
        println!(
            "| {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            scenario.name(),
            mb_s,
            cpu,
            user,
            sys,
            faults,
            major,
            source,
            others,
            scenario.describe()
        );
        medians.insert(scenario.name(), (mb_s, cpu));
    }
    println!();
    let ratio = |a: &str, b: &str| match (medians.get(a), medians.get(b)) {
        (Some(x), Some(y)) => Some((x.0 / y.0, x.1 / y.1)),
        _ => None,
    };
    // The fastest fetch-and-discard variant is the ceiling this source allows.
    let ceiling = medians
        .iter()
        .filter(|(name, _)| name.starts_with("discard-"))
        .max_by(|a, b| a.1.0.total_cmp(&b.1.0))
        .map(|(name, m)| (name.clone(), *m));
    if let Some((name, (best, _))) = &ceiling {
        for a in [
            "mirror-1",
            "mirror-1-copy",
            "mirror-1-uring",
            "mirror-1-sqpoll",
            "mirror-2",
            "segment-pwrite",
            "segment-offload",
        ] {
            if let Some((mb_s, _)) = medians.get(a) {
                println!(
                    "- {a} / fastest fetch-and-discard ({name}): throughput {:.2}",
                    mb_s / best
                );
            }
        }
    }
    for (a, b) in [
        ("mirror-1", "discard-read"),
        ("mirror-1-copy", "discard-read"),
        ("mirror-1-uring", "discard-read"),
        ("mirror-1-uring", "segment-pwrite"),
        ("mirror-1-uring", "mirror-1-copy"),
        ("mirror-1-sqpoll", "mirror-1-uring"),
        ("mirror-2", "discard-read"),
        ("discard-crc", "discard-read"),
        ("segment-inline", "discard-read"),
        ("segment-ahead", "discard-read"),
        ("segment-pwrite", "discard-read"),
        ("rdkafka-consume", "mirror-1"),
        ("rdkafka-mirror", "mirror-1"),
    ] {
        if let Some((throughput, cpu)) = ratio(a, b) {
            println!("- {a} / {b}: throughput {throughput:.2}, CPU per GB {cpu:.2}");
        }
    }
}

/// The serving table: medians per scenario, ratios, then every run's spread.
pub fn print_serving_table(
    args: &Args,
    dataset: &Dataset,
    mock_dataset: Option<&Dataset>,
    results: &[(Scenario, Vec<Measured>)],
    (load_before, load_after): (&str, &str),
) {
    let shape = |d: &Dataset| {
        format!(
            "{:.0} MB, {} partitions",
            d.total_bytes() as f64 / 1e6,
            d.partitions.len()
        )
    };
    let many = |s: &Scenario| matches!(s, Scenario::Consume(Server::AgentShards { .. }));
    let mut setups = Vec::new();
    if results.iter().any(|(s, _)| !many(s)) {
        setups.push(format!(
            "an rdkafka consumer pinned to CPU {} reads everything from a server pinned to CPU {SERVER_CPU}",
            std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
        ));
    }
    if results.iter().any(|(s, _)| many(s)) {
        setups.push(format!(
            "serve-2c-*: {} unpinned rdkafka consumers at once, each reading everything, from an agent with \
             {SERVE_MANY_SHARDS} shards (pinned by the agent to CPU 0..{}), sharing the CPUs with it; MB/s and CPU \
             per GB over all consumers' bytes",
            args.serve_consumers,
            SERVE_MANY_SHARDS - 1
        ));
    }
    print_heading(
        &format!(
            "{}; serving: {}; {}; consumer fetch.wait.max.ms {}, max.partition.fetch.bytes {}, fetch.max.bytes {}; \
             load average {load_before} before, {load_after} after",
            machine_line(),
            setups.join("; "),
            batches_and_runs(args, dataset),
            args.fetch_max_wait_ms,
            args.fetch_partition_max_bytes,
            args.fetch_max_bytes
        ),
        "| scenario | MB/s | server CPU s/GB | server user s/GB | server sys s/GB | consumer CPU s/GB | others' CPU % | data | what |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    );
    let mut medians = BTreeMap::new();
    for (scenario, runs) in measured(results) {
        let mb_s = median_of(runs, Measured::mb_s);
        let server = median(runs.iter().filter_map(Measured::server_cpu_s_per_gb).collect());
        let split = |f: fn(&ProcStat) -> Duration| {
            let v: Vec<f64> = runs
                .iter()
                .filter_map(|m| m.server.as_ref()?.stat.map(|s| cpu_s_per_gb(f(&s), m.bytes)))
                .collect();
            if v.is_empty() {
                "–".to_string()
            } else {
                format!("{:.3}", median(v))
            }
        };
        let consumer = median_of(runs, Measured::cpu_s_per_gb);
        let others = median_of(runs, |m| percent_of_wall(m.others_cpu, m));
        let data = match scenario {
            Scenario::Consume(Server::Mock | Server::Synthetic { mock_data: true }) => {
                mock_dataset.map_or_else(String::new, shape)
            }
            Scenario::Consume(Server::AgentShards { .. }) => {
                format!("{} consumers × {}", args.serve_consumers, shape(dataset))
            }
            _ => shape(dataset),
        };
        println!(
            "| {} | {:.0} | {:.3} | {} | {} | {:.3} | {:.0} | {} | {} |",
            scenario.name(),
            mb_s,
            server,
            split(|s| s.utime),
            split(|s| s.stime),
            consumer,
            others,
            data,
            scenario.describe()
        );
        medians.insert(scenario.name(), (mb_s, server));
    }
    println!();
    println!(
        "The synthetic source's CPU is its connection threads' (no user/system split); the mock's is its helper process's."
    );
    for (a, b, note) in [
        ("serve-zero-copy", "synthetic-consume", ""),
        ("serve-copy", "synthetic-consume", ""),
        ("serve-zero-copy", "serve-copy", ""),
        ("mock-consume", "synthetic-consume-mockdata", ""),
        (
            "synthetic-consume-mockdata",
            "synthetic-consume",
            " (different datasets)",
        ),
        ("serve-zero-copy", "mock-consume", " (different datasets)"),
        ("serve-2c-one-acceptor", "serve-2c-each-shard", ""),
    ] {
        if let (Some(x), Some(y)) = (medians.get(a), medians.get(b)) {
            println!(
                "- {a} / {b}: throughput {:.2}, server CPU per GB {:.2}{note}",
                x.0 / y.0,
                x.1 / y.1
            );
        }
    }
    print_spread_table(results);
}

/// Every run that spread its connections over shards, one row each.
fn print_spread_table(results: &[(Scenario, Vec<Measured>)]) {
    // Where connections land varies from run to run (SO_REUSEPORT hashes the
    // clients' ports), so every run is shown, not only medians.
    let spread_runs: Vec<(&Scenario, usize, &Measured, &Spread)> = results
        .iter()
        .flat_map(|(scenario, runs)| {
            runs.iter().enumerate().filter_map(move |(i, m)| {
                let spread = m.spread.as_ref().filter(|s| s.connections.len() > 1)?;
                Some((scenario, i + 1, m, spread))
            })
        })
        .collect();
    if spread_runs.is_empty() {
        return;
    }
    println!();
    println!(
        "| scenario | run | MB/s | agent CPU s/GB | agent CPU per shard, s/GB | connections per shard | consumers' Fetch connections per shard | others' CPU % |"
    );
    println!("| --- | ---: | ---: | ---: | --- | --- | --- | ---: |");
    for (scenario, run, m, spread) in spread_runs {
        println!(
            "| {} | {run} | {:.0} | {:.3} | {} | {} | {} | {:.0} |",
            scenario.name(),
            m.mb_s(),
            m.server_cpu_s_per_gb().unwrap_or_default(),
            m.shard_cpu_s_per_gb(),
            spread.per_shard(),
            spread.fetch_per_shard(),
            percent_of_wall(m.others_cpu, m)
        );
    }
    println!();
    println!(
        "Connections: every connection the consumers opened, as the agent logged them (the harness's readiness probe left out); \
         a consumer's Fetch connection is the one that received the most bytes."
    );
}

/// `cpu` as a percentage of one CPU over `m`'s window.
fn percent_of_wall(cpu: Duration, m: &Measured) -> f64 {
    100.0 * cpu.as_secs_f64() / m.wall.as_secs_f64()
}

/// The lag table (`agent_cpu_percent`: the agent's CPU over the window, as
/// a percentage of one core) and the episodes of slow batches.
/// `(rate, max_rate)`: the append rate, bytes/s, and the maximum it is a fraction of, when measured.
pub fn print_lag(
    args: &Args,
    (rate, max_rate): (f64, Option<f64>),
    dataset: &Dataset,
    lags: &Lags,
    agent_cpu_percent: f64,
) {
    let histogram = &lags.histogram;
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    println!();
    println!(
        "{}; lag at {:.0} MB/s over {} partitions ({:.0} batches/s of {} B), {} s (first {} s left out), \
         1 shard, ingest {}, fetch min_bytes 1, max_wait {} ms (the source long-polls: a waiting Fetch is answered as soon \
         as a batch becomes available)",
        machine_line(),
        rate / 1e6,
        args.partitions,
        rate / dataset.batch_bytes() as f64,
        dataset.batch_bytes(),
        args.lag_seconds,
        args.lag_warmup_s,
        args.ingest,
        args.fetch_max_wait_ms
    );
    if let (Some(max), Some(fraction)) = (max_rate, args.rate_fraction) {
        println!(
            "The rate is {fraction} of the maximum, {:.0} MB/s, measured first in this run (the agent mirroring {} MiB \
             as fast as it can, timed until a sync of what it wrote returned).",
            max / 1e6,
            args.size_mb
        );
    }
    println!();
    println!("| batches | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | not committed | agent CPU (approx.) |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.0} % of a core |",
        lags.measured,
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(0.999),
        histogram.max() as f64 / 1000.0,
        lags.missing,
        agent_cpu_percent
    );
    if !lags.slow.is_empty() {
        // Episodes: runs of slow batches less than 50 ms apart.
        let slow = &lags.slow;
        let mut episodes: Vec<(Duration, Duration, Duration)> = Vec::new(); // start, end, worst delay
        for &(at, delay, _) in slow {
            match episodes.last_mut() {
                Some(e) if at <= e.1 + Duration::from_millis(50) => {
                    e.1 = at;
                    e.2 = e.2.max(delay);
                }
                _ => episodes.push((at, at, delay)),
            }
        }
        let list: Vec<String> = episodes
            .iter()
            .take(12)
            .map(|(a, _, worst)| format!("{:.2}s:{:.0}ms", a.as_secs_f64(), worst.as_secs_f64() * 1e3))
            .collect();
        println!();
        println!(
            "{} batches waited ≥ 20 ms, in {} episodes (batch available at t0+, worst delay): {}",
            slow.len(),
            episodes.len(),
            list.join(" ")
        );
    }
}

/// `--plot-dir`: the median MB/s and CPU s/GB of each scenario as bar charts
/// (`throughput.png`, `cpu-per-gb.png`).
pub fn plot_throughput(dir: &Path, results: &[(Scenario, Vec<Measured>)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let named = |f: fn(&Measured) -> f64| -> Vec<(String, f64)> {
        measured(results)
            .map(|(scenario, runs)| (scenario.name(), median_of(runs, f)))
            .collect()
    };
    let title = |what: &str| format!("{what}, median of each scenario ({})", machine_line());
    plot::bars(
        &dir.join("throughput.png"),
        &title("MB/s"),
        "MB/s",
        &named(Measured::mb_s),
    )?;
    plot::bars(
        &dir.join("cpu-per-gb.png"),
        &title("CPU s/GB"),
        "CPU s/GB",
        &named(Measured::cpu_s_per_gb),
    )?;
    eprintln!("plots: {}/{{throughput,cpu-per-gb}}.png", dir.display());
    Ok(())
}

/// `--plot-dir`: the lag's cumulative distribution (`lag-cdf-<partitions>p.png`).
pub fn plot_lag(dir: &Path, args: &Args, rate: f64, lags: &Lags) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Every recorded bucket, with the fraction of batches at or below it.
    let total = lags.histogram.len().max(1) as f64;
    let points: Vec<(f64, f64)> = lags
        .histogram
        .iter_recorded()
        .scan(0u64, |below, v| {
            *below += v.count_at_value();
            Some((v.value_iterated_to() as f64 / 1000.0, *below as f64 / total))
        })
        .collect();
    let path = dir.join(format!("lag-cdf-{}p.png", args.partitions));
    let label = format!(
        "{:.0} MB/s, {} partitions, ingest {}",
        rate / 1e6,
        args.partitions,
        args.ingest
    );
    plot::cdf(
        &path,
        &format!("Lag, availability to commit ({})", machine_line()),
        &[(label, points)],
    )?;
    eprintln!("plot: {}", path.display());
    Ok(())
}
