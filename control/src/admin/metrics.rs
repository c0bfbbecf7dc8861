//! `/metrics`: a [`MetricsSnapshot`] rendered in Prometheus' text exposition
//! format (version 0.0.4).
//!
//! Every name starts with `ringmirror_`. Per partition the labels are
//! `mirror`, `topic`, `partition`; per mirror, `mirror`. A partition's state
//! is a state set — one `ringmirror_partition_state` series per state name,
//! 1 for the current one and 0 for the others — so that
//! `ringmirror_partition_state{state="FAILED"} == 1` alerts and
//! `sum by (state)` counts work, and a state change never leaves a stale
//! series behind. Counters end in `_total`; the fetch latency is a summary
//! in seconds (the coordinator keeps microseconds).

use std::fmt::Write;

use crate::admin::{MetricsSnapshot, MirrorMetrics, PartitionMetrics, ShardStorageMetrics};
use crate::state::MirrorPartitionState;

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One per-mirror family: name, type, help, and the sample value.
type MirrorFamily = (&'static str, &'static str, &'static str, fn(&MirrorMetrics) -> f64);

/// One per-partition family: name, type, help, and the sample value.
type PartitionFamily = (&'static str, &'static str, &'static str, fn(&PartitionMetrics) -> f64);

const PARTITION_FAMILIES: [PartitionFamily; 11] = [
    (
        "ringmirror_partition_source_offset",
        "gauge",
        "The source's high watermark at the last fetch (-1: not known yet).",
        |p| p.view.source_offset as f64,
    ),
    (
        "ringmirror_partition_destination_offset",
        "gauge",
        "The log end offset of the mirror partition.",
        |p| p.view.destination_offset as f64,
    ),
    (
        "ringmirror_partition_lag_messages",
        "gauge",
        "Offsets the mirror partition is behind the source.",
        |p| p.view.lag_messages as f64,
    ),
    (
        "ringmirror_partition_lag_seconds",
        "gauge",
        "How long the mirror partition has been behind the source (0 when caught up).",
        |p| p.view.lag_seconds,
    ),
    (
        "ringmirror_partition_destination_leader_epoch",
        "gauge",
        "The destination leader epoch clients see.",
        |p| p.view.destination_leader_epoch as f64,
    ),
    (
        "ringmirror_partition_bytes_mirrored_total",
        "counter",
        "Record batch bytes appended to the mirror partition.",
        |p| p.bytes_mirrored as f64,
    ),
    (
        "ringmirror_partition_batches_mirrored_total",
        "counter",
        "Record batches appended to the mirror partition.",
        |p| p.batches_mirrored as f64,
    ),
    (
        "ringmirror_partition_epoch_bumps_total",
        "counter",
        "Destination leader epoch bumps.",
        |p| p.epoch_bumps as f64,
    ),
    (
        "ringmirror_partition_crc_failures_total",
        "counter",
        "Fetched batches refused for a bad CRC or framing (fetched again).",
        |p| p.crc_failures as f64,
    ),
    (
        "ringmirror_partition_truncations_total",
        "counter",
        "Truncations of the mirror partition to converge with the source.",
        |p| p.truncations as f64,
    ),
    (
        "ringmirror_partition_divergences_total",
        "counter",
        "Truncations because the source rewrote history already mirrored (an unclean leader election).",
        |p| p.divergences as f64,
    ),
];

/// Renders the snapshot. Families appear in a fixed order, each with its
/// HELP and TYPE lines (also when it has no samples), and all samples of a
/// family together, as the format requires.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut out = String::new();

    header(
        &mut out,
        "ringmirror_partition_state",
        "gauge",
        "The mirror partition's state: 1 for the current state, 0 for the others.",
    );
    for p in &snapshot.partitions {
        let known = MirrorPartitionState::ALL.iter().any(|s| s.name() == p.view.state);
        // A state name this build does not know still shows, as the current one.
        let unknown = (!known).then_some(p.view.state.as_str());
        let names = MirrorPartitionState::ALL.iter().map(|s| s.name()).chain(unknown);
        for state in names {
            let labels = partition_labels(p, &[("state", state)]);
            sample(
                &mut out,
                "ringmirror_partition_state",
                &labels,
                bool_value(state == p.view.state),
            );
        }
    }
    for (name, kind, help, value) in PARTITION_FAMILIES {
        header(&mut out, name, kind, help);
        for p in &snapshot.partitions {
            sample(&mut out, name, &partition_labels(p, &[]), value(p));
        }
    }

    mirror_families(&mut out, &snapshot.mirrors);
    if let Some(events) = &snapshot.shard_events {
        header(
            &mut out,
            "ringmirror_shard_events_dropped_total",
            "counter",
            "Telemetry events from the shards (progress, statistics, checkpoints) dropped because a queue was full.",
        );
        sample(
            &mut out,
            "ringmirror_shard_events_dropped_total",
            "",
            events.telemetry_dropped as f64,
        );
        header(
            &mut out,
            "ringmirror_shard_state_events_queued",
            "gauge",
            "State events from the shards (acknowledgements, stops; never dropped) not yet acted on.",
        );
        sample(
            &mut out,
            "ringmirror_shard_state_events_queued",
            "",
            events.state_queued as f64,
        );
    }
    shard_storage_families(&mut out, &snapshot.shard_storage);
    out
}

/// Per shard (label `shard`): the disk its active segments hold reserved
/// ahead of their data, its budget for that, and what idle partitions gave back.
fn shard_storage_families(out: &mut String, shards: &[ShardStorageMetrics]) {
    type ShardFamily = (
        &'static str,
        &'static str,
        &'static str,
        fn(&ShardStorageMetrics) -> u64,
    );
    let families: [ShardFamily; 3] = [
        (
            "ringmirror_shard_disk_reserved_ahead_bytes",
            "gauge",
            "Disk the shard's active segments hold reserved (fallocate) ahead of their data and writes in flight.",
            |s| s.reserved_ahead_bytes,
        ),
        (
            "ringmirror_shard_disk_reserve_budget_bytes",
            "gauge",
            "The shard's budget of disk reserved ahead of data (its share of reserve_budget_bytes).",
            |s| s.reserve_budget_bytes,
        ),
        (
            "ringmirror_shard_disk_reserve_released_bytes_total",
            "counter",
            "Reserved disk that idle partitions gave back to the file system.",
            |s| s.reserve_released_bytes,
        ),
    ];
    for (name, kind, help, value) in families {
        header(out, name, kind, help);
        for s in shards {
            let labels = labels(&[("shard", &s.shard.to_string())]);
            sample(out, name, &labels, value(s) as f64);
        }
    }
}

fn mirror_families(out: &mut String, mirrors: &[MirrorMetrics]) {
    header(
        out,
        "ringmirror_mirror_fetch_errors_total",
        "counter",
        "Fetch errors from the source, by Kafka error code.",
    );
    for m in mirrors {
        for (code, count) in &m.fetch_errors {
            let labels = labels(&[("mirror", &m.mirror), ("code", &code.to_string())]);
            sample(out, "ringmirror_mirror_fetch_errors_total", &labels, *count as f64);
        }
    }
    header(
        out,
        "ringmirror_mirror_fetch_latency_seconds",
        "summary",
        "Fetch round-trip latency to the source.",
    );
    for m in mirrors {
        for (quantile, micros) in &m.fetch_latency_us {
            let labels = labels(&[("mirror", &m.mirror), ("quantile", &float(*quantile))]);
            sample(
                out,
                "ringmirror_mirror_fetch_latency_seconds",
                &labels,
                *micros as f64 / 1e6,
            );
        }
    }
    header(
        out,
        "ringmirror_mirror_fetches_total",
        "counter",
        "Fetch requests sent to the source.",
    );
    for m in mirrors {
        let labels = labels(&[("mirror", &m.mirror)]);
        sample(out, "ringmirror_mirror_fetches_total", &labels, m.fetches as f64);
    }
    header(
        out,
        "ringmirror_mirror_sync_halted",
        "gauge",
        "1 when the mirror's metadata sync is halted (such as a changed source cluster id).",
    );
    for m in mirrors {
        let labels = labels(&[("mirror", &m.mirror)]);
        sample(out, "ringmirror_mirror_sync_halted", &labels, bool_value(m.sync_halted));
    }
    let topic_families: [MirrorFamily; 3] = [
        (
            "ringmirror_mirror_topic_sync_errors",
            "gauge",
            "Mirrored topics the source refused to describe in the last round (an authorization error; never stopped for it).",
            |m| m.topic_sync_errors as f64,
        ),
        (
            "ringmirror_mirror_topic_deletions_pending",
            "gauge",
            "Mirrored topics absent at the source whose deletion is not confirmed yet (stopped once it is).",
            |m| m.topic_deletions_pending as f64,
        ),
        (
            "ringmirror_mirror_topic_recreations_total",
            "counter",
            "Mirrored topics found recreated at the source under a new topic id (each new id once).",
            |m| m.topic_recreations as f64,
        ),
    ];
    for (name, kind, help, value) in topic_families {
        header(out, name, kind, help);
        for m in mirrors {
            sample(out, name, &labels(&[("mirror", &m.mirror)]), value(m));
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    // HELP text escapes only backslash and newline; ours has neither, but
    // the format is cheap to honour.
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {}", float(value));
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {}", float(value));
    }
}

fn partition_labels(p: &PartitionMetrics, extra: &[(&str, &str)]) -> String {
    let partition = p.view.partition.to_string();
    let mut pairs = vec![
        ("mirror", p.view.mirror.as_str()),
        ("topic", p.view.topic.as_str()),
        ("partition", partition.as_str()),
    ];
    pairs.extend_from_slice(extra);
    labels(&pairs)
}

/// `k1="v1",k2="v2"` with label values escaped (backslash, double quote,
/// newline), so a topic or mirror name can never break the line structure.
fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

fn bool_value(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// Prometheus spells the special values `+Inf`, `-Inf` and `NaN`; Rust's
/// Display gives plain decimals otherwise (never an exponent).
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::admin::{PartitionView, ShardEventMetrics};

    fn partition(topic: &str, partition: i32, state: &str) -> PartitionMetrics {
        PartitionMetrics {
            view: PartitionView {
                mirror: "dr".into(),
                topic: topic.into(),
                partition,
                topic_id: "00000000-0000-0000-0000-000000000001".into(),
                state: state.into(),
                source_offset: 120,
                destination_offset: 100,
                lag_messages: 20,
                lag_seconds: 1.5,
                last_mirror_epoch: -1,
                destination_leader_epoch: 13,
                retry_attempt: 0,
                error: None,
            },
            bytes_mirrored: 4096,
            batches_mirrored: 7,
            epoch_bumps: 1,
            crc_failures: 2,
            truncations: 0,
            divergences: 0,
        }
    }

    fn snapshot() -> MetricsSnapshot {
        MetricsSnapshot {
            partitions: vec![partition("orders", 0, "MIRRORING")],
            mirrors: vec![MirrorMetrics {
                mirror: "dr".into(),
                fetch_errors: BTreeMap::from([(6, 3), (74, 1)]),
                fetch_latency_us: vec![(0.5, 1500), (0.99, 250_000)],
                fetches: 42,
                sync_halted: false,
                topic_sync_errors: 1,
                topic_deletions_pending: 2,
                topic_recreations: 3,
            }],
            shard_events: Some(ShardEventMetrics {
                telemetry_dropped: 9,
                state_queued: 2,
            }),
            shard_storage: vec![
                ShardStorageMetrics {
                    shard: 0,
                    reserved_ahead_bytes: 65_536,
                    reserve_budget_bytes: 536_870_912,
                    reserve_released_bytes: 4096,
                },
                ShardStorageMetrics {
                    shard: 1,
                    reserved_ahead_bytes: 0,
                    reserve_budget_bytes: 536_870_912,
                    reserve_released_bytes: 0,
                },
            ],
        }
    }

    #[test]
    fn renders_exact_lines_for_a_small_snapshot() {
        let text = render(&snapshot());
        let lines: BTreeSet<&str> = text.lines().collect();
        let pl = r#"mirror="dr",topic="orders",partition="0""#;
        for expected in [
            "# TYPE ringmirror_partition_state gauge".to_owned(),
            format!(r#"ringmirror_partition_state{{{pl},state="MIRRORING"}} 1"#),
            format!(r#"ringmirror_partition_state{{{pl},state="PAUSED"}} 0"#),
            format!("ringmirror_partition_source_offset{{{pl}}} 120"),
            format!("ringmirror_partition_destination_offset{{{pl}}} 100"),
            format!("ringmirror_partition_lag_messages{{{pl}}} 20"),
            format!("ringmirror_partition_lag_seconds{{{pl}}} 1.5"),
            format!("ringmirror_partition_destination_leader_epoch{{{pl}}} 13"),
            "# TYPE ringmirror_partition_bytes_mirrored_total counter".to_owned(),
            format!("ringmirror_partition_bytes_mirrored_total{{{pl}}} 4096"),
            format!("ringmirror_partition_batches_mirrored_total{{{pl}}} 7"),
            format!("ringmirror_partition_epoch_bumps_total{{{pl}}} 1"),
            format!("ringmirror_partition_crc_failures_total{{{pl}}} 2"),
            format!("ringmirror_partition_truncations_total{{{pl}}} 0"),
            format!("ringmirror_partition_divergences_total{{{pl}}} 0"),
            r#"ringmirror_mirror_fetch_errors_total{mirror="dr",code="6"} 3"#.to_owned(),
            r#"ringmirror_mirror_fetch_errors_total{mirror="dr",code="74"} 1"#.to_owned(),
            "# TYPE ringmirror_mirror_fetch_latency_seconds summary".to_owned(),
            r#"ringmirror_mirror_fetch_latency_seconds{mirror="dr",quantile="0.5"} 0.0015"#.to_owned(),
            r#"ringmirror_mirror_fetch_latency_seconds{mirror="dr",quantile="0.99"} 0.25"#.to_owned(),
            r#"ringmirror_mirror_fetches_total{mirror="dr"} 42"#.to_owned(),
            r#"ringmirror_mirror_sync_halted{mirror="dr"} 0"#.to_owned(),
            "# TYPE ringmirror_shard_events_dropped_total counter".to_owned(),
            "ringmirror_shard_events_dropped_total 9".to_owned(),
            "# TYPE ringmirror_shard_state_events_queued gauge".to_owned(),
            "ringmirror_shard_state_events_queued 2".to_owned(),
            r#"ringmirror_mirror_topic_sync_errors{mirror="dr"} 1"#.to_owned(),
            r#"ringmirror_mirror_topic_deletions_pending{mirror="dr"} 2"#.to_owned(),
            "# TYPE ringmirror_mirror_topic_recreations_total counter".to_owned(),
            r#"ringmirror_mirror_topic_recreations_total{mirror="dr"} 3"#.to_owned(),
            "# TYPE ringmirror_shard_disk_reserved_ahead_bytes gauge".to_owned(),
            r#"ringmirror_shard_disk_reserved_ahead_bytes{shard="0"} 65536"#.to_owned(),
            r#"ringmirror_shard_disk_reserved_ahead_bytes{shard="1"} 0"#.to_owned(),
            r#"ringmirror_shard_disk_reserve_budget_bytes{shard="1"} 536870912"#.to_owned(),
            "# TYPE ringmirror_shard_disk_reserve_released_bytes_total counter".to_owned(),
            r#"ringmirror_shard_disk_reserve_released_bytes_total{shard="0"} 4096"#.to_owned(),
        ] {
            assert!(lines.contains(expected.as_str()), "missing {expected:?} in:\n{text}");
        }
        // One state series per known state, exactly one of them set.
        let states: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("ringmirror_partition_state{"))
            .collect();
        assert_eq!(states.len(), MirrorPartitionState::ALL.len());
        assert_eq!(states.iter().filter(|l| l.ends_with(" 1")).count(), 1);
        check_exposition(&text).unwrap();
    }

    #[test]
    fn escapes_label_values_and_keeps_an_unknown_state() {
        let mut s = snapshot();
        s.partitions.push(partition("we\"ird\\to\npic", 3, "SOMETHING_NEW"));
        s.mirrors[0].sync_halted = true;
        s.partitions[1].view.lag_seconds = f64::INFINITY;
        let text = render(&s);
        assert!(
            text.contains(
                r#"ringmirror_partition_state{mirror="dr",topic="we\"ird\\to\npic",partition="3",state="SOMETHING_NEW"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"ringmirror_partition_lag_seconds{mirror="dr",topic="we\"ird\\to\npic",partition="3"} +Inf"#
            )
        );
        assert!(text.contains(r#"ringmirror_mirror_sync_halted{mirror="dr"} 1"#));
        check_exposition(&text).unwrap();
    }

    #[test]
    fn an_empty_snapshot_is_valid_and_has_only_comments() {
        let text = render(&MetricsSnapshot::default());
        check_exposition(&text).unwrap();
        assert!(text.lines().all(|l| l.starts_with("# ")), "{text}");
    }

    /// A checker for the text exposition format, as strict as Prometheus'
    /// parser where it matters: comment syntax, metric and label names,
    /// label value escapes, float values, one TYPE per family before its
    /// samples, a family's samples together, no duplicate series, counter
    /// names ending in `_total`, summary samples with a `quantile`.
    fn check_exposition(text: &str) -> Result<(), String> {
        let name_ok = |n: &str| {
            let mut cs = n.chars();
            cs.next().is_some_and(|c| c.is_ascii_alphabetic() || "_:".contains(c))
                && cs.all(|c| c.is_ascii_alphanumeric() || "_:".contains(c))
        };
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut finished: BTreeSet<String> = BTreeSet::new();
        let mut current: Option<String> = None;
        let mut series = BTreeSet::new();
        if !text.is_empty() && !text.ends_with('\n') {
            return Err("no final newline".into());
        }
        for (n, line) in text.lines().enumerate() {
            let err = |m: &str| Err(format!("line {}: {m}: {line:?}", n + 1));
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (kw, name, arg) = (parts.next(), parts.next(), parts.next());
                let (Some(kw), Some(name)) = (kw, name) else {
                    return err("bad comment");
                };
                if !name_ok(name) {
                    return err("bad metric name");
                }
                match kw {
                    "HELP" => {}
                    "TYPE" => {
                        let kind = arg.unwrap_or_default();
                        if !["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind) {
                            return err("bad type");
                        }
                        if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                            return err("second TYPE");
                        }
                        if kind == "counter" && !name.ends_with("_total") {
                            return err("counter without _total");
                        }
                        if let Some(previous) = current.replace(name.to_owned()) {
                            finished.insert(previous);
                        }
                    }
                    _ => return err("unknown comment keyword"),
                }
                continue;
            }
            let value_ok = |value: &str| match value {
                "+Inf" | "-Inf" | "NaN" => true,
                v => v.parse::<f64>().is_ok() && !v.contains(['i', 'n', 'I', 'N']),
            };
            // name value: a family of one series, without labels.
            if let Some((name, value)) = line.split_once(' ').filter(|(name, _)| !name.contains('{')) {
                if !name_ok(name) {
                    return err("bad metric name");
                }
                if current.as_deref() != Some(name) || finished.contains(name) {
                    return err("sample outside its family's block");
                }
                if types.get(name).is_some_and(|t| t == "summary") {
                    return err("summary sample without quantile");
                }
                if !value_ok(value) {
                    return err("bad value");
                }
                if !series.insert(name.to_owned()) {
                    return err("duplicate series");
                }
                continue;
            }
            // name{labels} value
            let Some(open) = line.find('{') else {
                return err("no value");
            };
            let name = &line[..open];
            if !name_ok(name) {
                return err("bad metric name");
            }
            let family = ["_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| types.get(*f).is_some_and(|t| t == "summary"))
                })
                .unwrap_or(name);
            if current.as_deref() != Some(family) || finished.contains(family) {
                return err("sample outside its family's block");
            }
            let mut chars = line[open + 1..].char_indices().peekable();
            let mut label_names = BTreeSet::new();
            let close;
            loop {
                let start = chars.peek().map(|(i, _)| *i).ok_or("eof")?;
                let mut label = String::new();
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    label.push(c);
                }
                if !name_ok(&label) || label.contains(':') || !label_names.insert(label.clone()) {
                    return err(&format!("bad or repeated label name at {start}"));
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return err("label value not quoted");
                }
                loop {
                    match chars.next().map(|(_, c)| c) {
                        Some('\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\' | '"' | 'n') => {}
                            _ => return err("bad escape"),
                        },
                        Some('"') => break,
                        Some('\n') | None => return err("unterminated label value"),
                        Some(_) => {}
                    }
                }
                match chars.next() {
                    Some((_, ',')) => continue,
                    Some((i, '}')) => {
                        close = open + 1 + i;
                        break;
                    }
                    _ => return err("expected , or }"),
                }
            }
            if types.get(family).is_some_and(|t| t == "summary") && name == family && !label_names.contains("quantile")
            {
                return err("summary sample without quantile");
            }
            let Some(value) = line[close + 1..].strip_prefix(' ') else {
                return err("no space before the value");
            };
            if !value_ok(value) {
                return err("bad value");
            }
            if !series.insert(line[..close + 1].to_owned()) {
                return err("duplicate series");
            }
        }
        Ok(())
    }

    #[test]
    fn the_checker_catches_what_it_claims_to() {
        for bad in [
            "# TYPE x_total counter\nx_total{a=\"1\"} one\n",
            "# TYPE x_total counter\nx_total{a=\"1} 1\n",
            "# TYPE x counter\n",
            "# TYPE x_total counter\nx_total{a=\"1\"} 1\nx_total{a=\"1\"} 2\n",
            "# TYPE a gauge\n# TYPE b gauge\na{x=\"1\"} 1\n",
            "# TYPE s summary\ns{m=\"1\"} 1\n",
            "# TYPE g gauge\ng{x=\"\\q\"} 1\n",
            "# TYPE g gauge\ng 1\ng 2\n",
            "# TYPE g gauge\ng\n",
        ] {
            assert!(check_exposition(bad).is_err(), "accepted {bad:?}");
        }
        check_exposition("# HELP g a gauge\n# TYPE g gauge\ng{x=\"a\\\"b\"} -1.5\n").unwrap();
        check_exposition("# TYPE g gauge\ng 3\n").unwrap();
    }
}
