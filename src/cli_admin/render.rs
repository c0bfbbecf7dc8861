//! The human rendering of the admin API's answers: aligned tables, a
//! mirror's description, verification reports, UTC times.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, bail};
use ringmirror_control::admin::{AdminAnswer, MirrorAcl, MirrorDescription, MirrorSummary, PartitionView, VerifyJob};
use ringmirror_control::mirror::MirrorConfig;
use serde_json::Value;

/// The human rendering of an answer.
pub(super) fn render(verb: &str, answer: Value) -> anyhow::Result<String> {
    let answer: AdminAnswer = serde_json::from_value(answer.clone())
        .with_context(|| format!("unexpected answer from the admin API: {answer}"))?;
    Ok(match answer {
        AdminAnswer::Accepted { mirror, partitions } => {
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for p in partitions {
                by_topic.entry(p.topic).or_default().push(p.partition);
            }
            let count: usize = by_topic.values().map(Vec::len).sum();
            let mut out = format!("{verb} {mirror}: accepted ({count} partitions)\n");
            for (topic, mut ps) in by_topic {
                ps.sort_unstable();
                let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                let _ = writeln!(out, "  {topic}: {}", ps.join(", "));
            }
            out
        }
        AdminAnswer::Mirrors { mirrors } => mirrors_table(&mirrors),
        AdminAnswer::Mirror { mirror } => describe(&mirror),
        AdminAnswer::Status { partitions } => partitions_table(partitions),
        AdminAnswer::Metrics { .. } => bail!("unexpected metrics answer to {verb}"),
        AdminAnswer::Acls { acls } => acls_table(verb, acls),
        AdminAnswer::Verify { job } => verify_report(&job),
    })
}

/// ClusterMirror ACLs: all of them (`list`), or those a change made.
fn acls_table(verb: &str, acls: Vec<MirrorAcl>) -> String {
    let mut out = match verb {
        "create" => format!("created {} ACL(s) (those already there are not counted)\n", acls.len()),
        "delete" => format!("deleted {} ACL(s)\n", acls.len()),
        _ => String::new(),
    };
    if acls.is_empty() {
        return out;
    }
    let rows = acls
        .into_iter()
        .map(|a| {
            vec![
                a.principal,
                a.permission_type.to_string(),
                a.operation.to_string(),
                a.mirror,
                a.pattern_type.to_string(),
                a.host,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            ("PRINCIPAL", false),
            ("PERMISSION", false),
            ("OPERATION", false),
            ("MIRROR", false),
            ("PATTERN", false),
            ("HOST", false),
        ],
        rows,
    ));
    out
}

fn mirrors_table(mirrors: &[MirrorSummary]) -> String {
    let rows = mirrors
        .iter()
        .map(|m| {
            let states: Vec<String> = m.states.iter().map(|(s, n)| format!("{s}={n}")).collect();
            vec![
                m.name.clone(),
                m.bootstrap_servers.join(","),
                m.source_cluster_id.clone().unwrap_or_else(|| "-".into()),
                m.partitions.to_string(),
                states.join(" "),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", false),
            ("BOOTSTRAP-SERVERS", false),
            ("SOURCE-CLUSTER", false),
            ("PARTITIONS", true),
            ("STATES", false),
        ],
        rows,
    )
}

/// A mirror's security settings, the password as "***" whatever the
/// answer held.
fn security(c: &MirrorConfig) -> String {
    match c.sasl_client() {
        None => "plaintext".into(),
        Some(sasl) => {
            let password = match &c.sasl_password_file {
                Some(path) => format!("from {}", path.display()),
                None => ringmirror_protocol::sasl::REDACTED.into(),
            };
            format!(
                "sasl_plaintext {} user={} password={password}",
                sasl.mechanism, sasl.username
            )
        }
    }
}

fn describe(d: &MirrorDescription) -> String {
    let c = &d.config;
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_owned();
    let fields = [
        ("name", c.name.clone()),
        ("bootstrap servers", c.bootstrap_servers.join(", ")),
        ("source cluster id", or_dash(d.source_cluster_id.as_deref())),
        ("created", utc_time(d.created_ms)),
        ("topics (named)", c.topics.join(", ")),
        ("topics include", or_dash(c.topics_include.as_deref())),
        ("topics exclude", c.topics_exclude.clone()),
        ("topics mirrored", d.topics.join(", ")),
        (
            "fetch",
            format!(
                "max_bytes={} partition_max_bytes={} max_wait_ms={} min_bytes={}",
                c.fetch_max_bytes, c.fetch_partition_max_bytes, c.fetch_max_wait_ms, c.fetch_min_bytes
            ),
        ),
        (
            "metadata refresh",
            format!("every {} ms", c.metadata_refresh_interval_ms),
        ),
        (
            "topic deletion",
            format!(
                "confirmed after {} rounds over at least {} ms",
                c.topic_deletion_confirm_rounds, c.topic_deletion_confirm_ms
            ),
        ),
        (
            "ingest",
            serde_json::json!(c.ingest).as_str().unwrap_or_default().to_owned(),
        ),
        (
            "last sync",
            d.last_sync_ms.map(utc_time).unwrap_or_else(|| "never".into()),
        ),
        ("sync error", or_dash(d.sync_error.as_deref())),
        ("security", security(c)),
        (
            "groups",
            format!(
                "{} (exclude: {})",
                c.groups_include,
                or_dash(c.groups_exclude.as_deref())
            ),
        ),
        ("acls", if d.acls.is_empty() { "-".into() } else { d.acls.clone() }),
        (
            "groups synced",
            d.groups_synced_ms.map(utc_time).unwrap_or_else(|| "never".into()),
        ),
    ];
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in fields {
        let _ = writeln!(out, "{:<width$} {value}", format!("{key}:"));
    }
    for (topic, outcome) in &d.topic_configs {
        let _ = writeln!(out, "  topic {topic} configs: {outcome}");
    }
    for check in &d.topic_checks {
        let _ = writeln!(out, "  topic {}: {}", check.topic, topic_check(check));
    }
    for (group, outcome) in &d.groups {
        let _ = writeln!(out, "  group {group}: {outcome}");
    }
    for e in &d.partition_events {
        let _ = writeln!(
            out,
            "  partition {}-{}: diverged from the source at offset {}, truncated to {} ({} bytes lost) at {}",
            e.topic,
            e.partition,
            e.first_differing_offset,
            e.truncated_to,
            e.bytes_lost,
            utc_time(e.at_ms)
        );
    }
    out.push('\n');
    out.push_str(&partitions_table(d.partitions.clone()));
    out
}

/// A pending deletion (or a sync error) of a mirrored topic, in words.
fn topic_check(c: &ringmirror_control::metadata_sync::deletion::TopicCheck) -> String {
    let brokers = c.brokers.iter().map(i32::to_string).collect::<Vec<_>>().join(", ");
    let evidence = if c.by_id { "by name and id" } else { "by name" };
    let pending = format!(
        "round {} of {} (and at least {} ms); brokers {brokers}; {evidence}",
        c.round, c.rounds_min, c.confirm_ms
    );
    match c.kind.as_str() {
        "sync_error" => format!(
            "sync error: {} at {} (not stopped for it)",
            ringmirror_control::metadata_sync::deletion::error_name(c.error_code.unwrap_or_default()),
            utc_time(c.since_ms)
        ),
        "recreated" => format!(
            "recreated at the source as {}; {} absent since {}, {pending}",
            c.new_topic_id.as_deref().unwrap_or("-"),
            c.topic_id,
            utc_time(c.since_ms)
        ),
        _ => format!("absent at the source since {}, {pending}", utc_time(c.since_ms)),
    }
}

/// The status table, sorted, with each partition's error (if any) below.
fn partitions_table(mut partitions: Vec<PartitionView>) -> String {
    partitions.sort_by(|a, b| (&a.mirror, &a.topic, a.partition).cmp(&(&b.mirror, &b.topic, b.partition)));
    let offset = |o: i64| if o < 0 { "-".to_owned() } else { o.to_string() };
    let rows = partitions
        .iter()
        .map(|p| {
            vec![
                p.mirror.clone(),
                p.topic.clone(),
                p.partition.to_string(),
                p.state.clone(),
                offset(p.source_offset),
                offset(p.destination_offset),
                p.lag_messages.to_string(),
                format!("{:.1}", p.lag_seconds),
            ]
        })
        .collect();
    let mut out = table(
        &[
            ("MIRROR", false),
            ("TOPIC", false),
            ("PARTITION", true),
            ("STATE", false),
            ("SOURCE-OFFSET", true),
            ("DEST-OFFSET", true),
            ("LAG", true),
            ("LAG-S", true),
        ],
        rows,
    );
    for p in partitions.iter().filter(|p| p.error.is_some()) {
        let _ = writeln!(
            out,
            "{}/{}-{}: {}",
            p.mirror,
            p.topic,
            p.partition,
            p.error.as_deref().unwrap_or_default()
        );
    }
    out
}

/// Columns aligned to their widest cell (`true`: right-aligned, for
/// numbers), two spaces apart, no trailing spaces.
pub(super) fn table(headers: &[(&str, bool)], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|(h, _)| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for ((cell, width), (_, right)) in row.iter().zip(&widths).zip(headers) {
            if !line.is_empty() {
                line.push_str("  ");
            }
            let pad = width - cell.chars().count();
            if *right {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Per partition `identical`, the first differing offset, or why not done.
pub(super) fn verify_report(job: &VerifyJob) -> String {
    let mut partitions = job.partitions.clone();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let mut out = String::new();
    for p in &partitions {
        let verdict = match (p.result.as_str(), p.first_differing_offset, &p.error) {
            ("identical", ..) => format!("identical ({} batches, {} bytes)", p.batches_compared, p.bytes_compared),
            ("differs", Some(offset), _) => format!("differs at offset {offset}"),
            (_, _, Some(error)) => format!("not completed: {error}"),
            (result, ..) => result.to_owned(),
        };
        let _ = writeln!(out, "{}-{}: {verdict}", p.topic, p.partition);
    }
    if partitions.is_empty() {
        let _ = writeln!(out, "no mirroring partition to verify in {}", job.mirror);
    }
    out
}

/// `YYYY-MM-DD HH:MM:SS UTC` (days to a civil date by Howard Hinnant's
/// algorithm; not worth a date crate for two fields).
pub(super) fn utc_time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
