//! `ringmirror mirror …`, `ringmirror status` and `ringmirror acls …`: the
//! operator's CLI over a running agent's admin API (see
//! `ringmirror_control::admin::http` for the routes).
//!
//! The client is ureq, blocking: one request per command (or per redraw
//! with `status --watch`), so nothing here needs an async runtime. An
//! `https://` URL is spoken with rustls, trusting the CA file of
//! `--admin-ca-location` (or `$RINGMIRROR_ADMIN_CA_LOCATION`), else the
//! system's CA store.
//! Answers print as aligned tables, or as the API's JSON with `--json`. A
//! refused request prints the server's message and exits 1 (through `main`).
//! With `--admin-token-file` (or `$RINGMIRROR_ADMIN_TOKEN_FILE`) every
//! request carries the file's bearer token; a 401 says whether the token
//! was refused or missing, never what it is; a 403 names the error
//! (`CLUSTER_MIRROR_AUTHORIZATION_FAILED`) and what was refused.
//!
//! `args` holds the subcommands and flags, `client` the HTTP client,
//! `render` the tables; the commands themselves are here.

mod args;
mod client;
mod render;

use std::time::Duration;

use anyhow::bail;
use ringmirror_control::admin::{AdminAnswer, TopicsBody, VerifyBody, VerifyJob};
use ringmirror_storage::clock::now_ms;
use serde_json::Value;

pub use self::args::{AclArgs, AclCommand, AdminArgs, CreateArgs, MirrorCommand};
pub use self::client::{ADMIN_CA_LOCATION_ENV, ADMIN_ENV, ADMIN_TOKEN_FILE_ENV, AdminClient};
use self::render::{render, utc_time, verify_report};

/// The exit status of `mirror verify` when it could not complete.
pub const VERIFY_INCOMPLETE_EXIT: u8 = 3;

/// Runs one `mirror` subcommand and returns what to print and the exit
/// status (0 but for `verify`: see [`VerifyJob::exit_code`]).
pub fn mirror(args: &AdminArgs, command: MirrorCommand) -> anyhow::Result<(String, u8)> {
    let client = AdminClient::from_args(args)?;
    if let MirrorCommand::Verify {
        name,
        topics,
        from_offset,
        rate_mib_per_s,
    } = command
    {
        let body = VerifyBody {
            topics,
            from_offset,
            bytes_per_s: rate_mib_per_s.saturating_mul(1 << 20),
        };
        let job = verify(&client, &name, &body)?;
        let code = job.exit_code();
        let text = if args.json {
            format!("{}\n", serde_json::to_string_pretty(&job)?)
        } else {
            verify_report(&job)
        };
        return Ok((text, code));
    }
    let topics = |topics: Vec<String>| Some(serde_json::json!(TopicsBody { topics }));
    let path = |name: &str, rest: &str| format!("/mirrors/{}{rest}", path_segment(name));
    let (verb, answer) = match command {
        MirrorCommand::Create(create) => {
            let config = create.config()?;
            (
                "create",
                client.request("POST", "/mirrors", Some(serde_json::json!(config)))?,
            )
        }
        MirrorCommand::Update(update) => {
            let config = update.config()?;
            let route = path(&config.name, "");
            (
                "update",
                client.request("PUT", &route, Some(serde_json::json!(config)))?,
            )
        }
        MirrorCommand::Sync { name } => ("sync", client.request("POST", &path(&name, "/sync"), None)?),
        MirrorCommand::List => ("list", client.request("GET", "/mirrors", None)?),
        MirrorCommand::Describe { name } => ("describe", client.request("GET", &path(&name, ""), None)?),
        MirrorCommand::Delete { name } => ("delete", client.request("DELETE", &path(&name, ""), None)?),
        MirrorCommand::AddTopics { name, topics: t } => (
            "add-topics",
            client.request("POST", &path(&name, "/topics"), topics(t))?,
        ),
        MirrorCommand::RemoveTopics { name, topics: t } => (
            "remove-topics",
            client.request("DELETE", &path(&name, "/topics"), topics(t))?,
        ),
        MirrorCommand::Pause { name, topics: t } => {
            ("pause", client.request("POST", &path(&name, "/pause"), topics(t))?)
        }
        MirrorCommand::Resume { name, topics: t } => {
            ("resume", client.request("POST", &path(&name, "/resume"), topics(t))?)
        }
        MirrorCommand::Stop { name, topics: t } => ("stop", client.request("POST", &path(&name, "/stop"), topics(t))?),
        MirrorCommand::Restart { name, topics: t } => {
            ("restart", client.request("POST", &path(&name, "/restart"), topics(t))?)
        }
        MirrorCommand::Check { name, topics: t } => {
            ("check", client.request("POST", &path(&name, "/check"), topics(t))?)
        }
        MirrorCommand::Verify { .. } => unreachable!("answered above"),
    };
    if args.json {
        return Ok((format!("{}\n", serde_json::to_string_pretty(&answer)?), 0));
    }
    Ok((render(verb, answer)?, 0))
}

/// How often `mirror verify` asks how far the verification got.
const VERIFY_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Starts a verification of `name` and waits until every partition has a result.
fn verify(client: &AdminClient, name: &str, body: &VerifyBody) -> anyhow::Result<VerifyJob> {
    let route = format!("/mirrors/{}/verify", path_segment(name));
    let job = |answer: Value| -> anyhow::Result<VerifyJob> {
        match serde_json::from_value(answer.clone()) {
            Ok(AdminAnswer::Verify { job }) => Ok(job),
            _ => bail!("unexpected answer from the admin API: {answer}"),
        }
    };
    let started = job(client.request("POST", &route, Some(serde_json::json!(body)))?)?;
    let mut current = started.clone();
    while !current.done {
        std::thread::sleep(VERIFY_POLL_INTERVAL);
        current = job(client.request("GET", &route, None)?)?;
        if current.id != started.id {
            bail!("another verification of {name} started meanwhile (job {})", current.id);
        }
    }
    Ok(current)
}

/// Runs one `acls` subcommand and returns what to print.
pub fn acls(args: &AdminArgs, command: AclCommand) -> anyhow::Result<String> {
    let client = AdminClient::from_args(args)?;
    let (verb, answer) = match command {
        AclCommand::List => ("list", client.request("GET", "/acls", None)?),
        AclCommand::Create(acl) => (
            "create",
            client.request("POST", "/acls", Some(serde_json::json!(acl.body())))?,
        ),
        AclCommand::Delete(acl) => (
            "delete",
            client.request("DELETE", "/acls", Some(serde_json::json!(acl.body())))?,
        ),
    };
    if args.json {
        return Ok(format!(
            "{}
",
            serde_json::to_string_pretty(&answer)?
        ));
    }
    render(verb, answer)
}

/// `ringmirror status`: the partitions table once, or redrawn every
/// interval until Ctrl-C with `watch`.
pub fn status(args: &AdminArgs, watch: bool, interval: Duration) -> anyhow::Result<()> {
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let client = AdminClient::from_args(args)?;
    let screen = |answer: anyhow::Result<Value>| -> anyhow::Result<String> {
        let answer = answer?;
        if args.json {
            // One JSON document per line while watching, so it can be piped.
            return Ok(if watch {
                format!("{answer}\n")
            } else {
                format!("{}\n", serde_json::to_string_pretty(&answer)?)
            });
        }
        render("status", answer)
    };
    if !watch {
        print!("{}", screen(client.request("GET", "/status", None))?);
        return Ok(());
    }
    // Ctrl-C ends the watch between redraws, leaving the last table on screen.
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))?;
    }
    let mut out = std::io::stdout().lock();
    while !interrupted.load(Ordering::Acquire) {
        let drawn = screen(client.request("GET", "/status", None));
        if args.json {
            // An unreachable agent is worth a line on stderr, not the end of the watch.
            match drawn {
                Ok(line) => out.write_all(line.as_bytes())?,
                Err(e) => eprintln!("error: {e:#}"),
            }
        } else {
            let body = drawn.unwrap_or_else(|e| format!("error: {e:#}\n"));
            let heading = format!(
                "ringmirror status  {}  every {} ms  {}  (Ctrl-C to stop)\n\n",
                client.base,
                interval.as_millis(),
                utc_time(now_ms())
            );
            // Home the cursor and clear the screen, then draw.
            write!(out, "\x1b[H\x1b[2J{heading}{body}")?;
        }
        out.flush()?;
        let until = std::time::Instant::now() + interval;
        while std::time::Instant::now() < until && !interrupted.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
    }
    Ok(())
}

/// Percent-encodes a path segment (mirror names are plain, but a typo
/// should reach the server as the name typed, not as another path).
fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::render::table;
    use super::*;

    #[test]
    fn tables_align_and_dates_format() {
        let t = table(
            &[("NAME", false), ("N", true)],
            vec![vec!["a".into(), "1".into()], vec!["longer".into(), "100".into()]],
        );
        assert_eq!(t, "NAME      N\na         1\nlonger  100\n");
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(1_709_210_096_000), "2024-02-29 12:34:56 UTC");
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn create_flags_override_the_file_and_defaults_apply() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.toml");
        std::fs::write(
            &file,
            "name = \"dr\"\nbootstrap_servers = [\"f:1\"]\ntopics = [\"a\"]\n",
        )
        .unwrap();
        let args = CreateArgs {
            name: None,
            file: Some(file),
            bootstrap_servers: vec!["x:1".into(), "y:2".into()],
            topics: vec![],
            topics_include: None,
            topics_exclude: None,
            fetch_max_bytes: Some(1024),
            fetch_partition_max_bytes: None,
            fetch_max_wait_ms: Some(100),
            fetch_min_bytes: None,
            metadata_refresh_interval_ms: None,
            topic_deletion_confirm_rounds: Some(5),
            topic_deletion_confirm_ms: None,
            ingest: Some("mmap".into()),
            security_protocol: None,
            ssl_ca_location: None,
            ssl_endpoint_identification_algorithm: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            sasl_password_file: None,
        };
        let c = args.config().unwrap();
        assert_eq!(
            (c.name.as_str(), c.topics.as_slice()),
            ("dr", ["a".to_owned()].as_slice())
        );
        assert_eq!(c.bootstrap_servers, ["x:1", "y:2"]);
        assert_eq!(
            (c.fetch_max_bytes, c.fetch_max_wait_ms, c.fetch_min_bytes),
            (1024, 100, 1)
        );
        assert_eq!(c.ingest, ringmirror_dataplane::fetch::IngestMode::Mmap);
        assert_eq!(
            (c.topic_deletion_confirm_rounds, c.topic_deletion_confirm_ms),
            (5, 120_000)
        );
        let tls = CreateArgs {
            security_protocol: Some("ssl".into()),
            ssl_ca_location: Some("/etc/ca.pem".into()),
            ssl_endpoint_identification_algorithm: Some("none".into()),
            ..args.clone()
        }
        .config()
        .unwrap();
        assert_eq!(
            tls.tls_client(),
            Some(ringmirror_dataplane::client::TlsClientConfig {
                ca_file: Some("/etc/ca.pem".into()),
                verify_hostname: false,
                client_cert: None,
                pinned_certificate: None,
            })
        );
        let bad = CreateArgs {
            topics_include: None,
            file: None,
            name: Some("dr".into()),
            ..args
        };
        // No topics at all: refused before anything is sent.
        assert!(format!("{:#}", bad.config().unwrap_err()).contains("names no topics"));
    }
}
