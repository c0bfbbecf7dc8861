//! The admin API's bearer token, end to end: an in-process agent with an
//! `[admin]` table on a free loopback port, the HTTP API as curl would use
//! it, and the `ringmirror` CLI binary.
//!
//! - Without `token_file` the API is open, as before (an `Authorization`
//!   header is ignored), and nothing warns on loopback.
//! - With one, every route but `GET /health` answers 401 `unauthorized`
//!   with `WWW-Authenticate: Bearer realm="ringmirror"` to a request with
//!   no token, a wrong one or another scheme, and a refused request changes
//!   nothing; the right token gets the usual answers (GET /mirrors,
//!   /status, /metrics, and a mirror created with POST).
//! - The CLI sends the token from `--admin-token-file` or
//!   `$RINGMIRROR_ADMIN_TOKEN_FILE`; without it, or with a wrong one, it
//!   exits 1 saying that the API wants a token or refused it.
//! - The token appears in no log line (the agent's, at debug level, and
//!   the CLI's), nor in any answer or error.
//! - An agent whose token file is empty does not start, and says which
//!   file.
//!
//! Everything is on loopback; every request and child process is bounded
//! by a timeout.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use serde_json::{Value, json};

/// The token of the guarded agents (as `openssl rand -hex 20` makes them).
const TOKEN: &str = "7f3c9a1e5b2d4c6f8a0b1c2d3e4f5a6b7c8d9e0f";
/// How long one HTTP request may take.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The log levels captured: everything of ours down to debug (the refusals
/// are logged there); the test's own HTTP client (ureq) is left out.
const LOG_FILTER: &str = "warn,ringmirror=debug,axum=trace,hyper=trace";

/// An agent with only an admin API on a free loopback port; `token_file`
/// guards it.
fn start_agent(data_dir: &Path, token_file: Option<&Path>) -> Agent {
    let token_file = token_file
        .map(|path| format!("token_file = {path:?}"))
        .unwrap_or_default();
    let config = AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 1
        [admin]
        address = "127.0.0.1:0"
        {token_file}
        "#
    ))
    .expect("agent config");
    Agent::start(config).expect("start the agent")
}

fn admin_url(agent: &Agent) -> String {
    format!("http://{}", agent.admin_addr().expect("an admin API"))
}

/// Writes `content` to a file named `name` in `dir`.
fn write_file(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write a token file");
    path
}

struct Reply {
    status: u16,
    www_authenticate: Option<String>,
    content_type: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One request to the admin API at `url`, with these `Authorization`
/// header values.
fn send(url: &str, method: &str, path: &str, body: Option<&str>, authorization: &[&str]) -> Reply {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(IO_TIMEOUT))
        .build()
        .into();
    let mut request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{url}{path}"));
    for value in authorization {
        request = request.header("authorization", *value);
    }
    let request = request.body(body.unwrap_or_default().to_owned()).expect("a request");
    let mut response = http.run(request).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().expect("an ASCII header").to_owned())
    };
    Reply {
        status: response.status().as_u16(),
        www_authenticate: header("www-authenticate"),
        content_type: header("content-type").unwrap_or_default(),
        body: response.body_mut().read_to_string().expect("the answer"),
    }
}

/// `ringmirror <args> --admin <url>` with `env` added (and neither admin
/// variable inherited): (exit code, stdout, stderr).
fn cli(url: &str, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringmirror"));
    command
        .args(args)
        .args(["--admin", url])
        .env_remove(ringmirror::cli_admin::ADMIN_ENV)
        .env_remove(ringmirror::cli_admin::ADMIN_TOKEN_FILE_ENV)
        .env("RUST_LOG", "debug")
        .env("NO_COLOR", "1");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("run the ringmirror CLI");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mirror_definition(name: &str) -> String {
    // Port 1 on loopback refuses connections: the mirror is created and its
    // metadata sync fails, quickly and without leaving this host.
    json!({"name": name, "bootstrap_servers": ["127.0.0.1:1"], "topics": ["orders"]}).to_string()
}

fn mirror_names(url: &str, authorization: &[&str]) -> Vec<String> {
    let r = send(url, "GET", "/mirrors", None, authorization);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["mirrors"]
        .as_array()
        .expect("a list of mirrors")
        .iter()
        .map(|m| m["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[test]
fn without_a_token_the_admin_api_is_open_as_before() {
    let _logs = common::logs::capture(LOG_FILTER);
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), None);
    let url = admin_url(&agent);

    for authorization in [&[][..], &["Bearer whatever"], &["Basic YTpi"]] {
        for (path, content_type) in [
            ("/mirrors", "application/json"),
            ("/status", "application/json"),
            ("/metrics", "text/plain; version=0.0.4"),
            ("/health", "text/plain"),
        ] {
            let r = send(&url, "GET", path, None, authorization);
            assert_eq!(r.status, 200, "GET {path} {authorization:?}: {}", r.body);
            assert!(r.content_type.starts_with(content_type), "{path}: {}", r.content_type);
            assert_eq!(r.www_authenticate, None);
        }
    }
    let r = send(&url, "POST", "/mirrors", Some(&mirror_definition("open")), &[]);
    assert_eq!(
        (r.status, r.json()["answer"].clone()),
        (201, json!("accepted")),
        "{}",
        r.body
    );
    assert_eq!(mirror_names(&url, &[]), ["open"]);
    // Errors keep their kinds: an unknown mirror is 404, not 401.
    let r = send(&url, "GET", "/mirrors/nope", None, &[]);
    assert_eq!((r.status, r.json()["error"].clone()), (404, json!("unknown_mirror")));

    // The CLI needs no token either.
    let (code, stdout, stderr) = cli(&url, &["mirror", "list"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("NAME") && stdout.contains("open"), "{stdout}");

    agent.stop().expect("stop the agent");
    let opened = common::logs::lines_with(&["open to the network"]);
    assert!(
        opened.is_empty(),
        "a loopback API is not open to the network: {opened:?}"
    );
}

#[test]
fn a_token_is_required_on_every_route_but_health() {
    let _logs = common::logs::capture(LOG_FILTER);
    let dir = tempfile::tempdir().unwrap();
    // Surrounding whitespace and the line break are not part of the token.
    let token_file = write_file(dir.path(), "admin-token", &format!("  {TOKEN}  \n"));
    let agent = start_agent(&dir.path().join("data"), Some(&token_file));
    let url = admin_url(&agent);
    let bearer = format!("Bearer {TOKEN}");

    let missing = "the admin API requires a bearer token (Authorization: Bearer <token>)";
    let wrong = "the bearer token is not the admin API's";
    let scheme = "the admin API takes only bearer tokens (Authorization: Bearer <token>)";
    let not_quite = format!("Bearer {}", &TOKEN[1..]);
    let token_as_basic = format!("Basic {TOKEN}");
    let refusals: [(&[&str], &str); 6] = [
        (&[], missing),
        (&["Bearer wrong-token"], wrong),
        (&[&not_quite], wrong),
        (&["Bearer"], wrong),
        (&["Basic YWRtaW46YWRtaW4="], scheme),
        (&[&token_as_basic], scheme),
    ];
    let definition = mirror_definition("dr");
    let routes = [
        ("GET", "/mirrors", None),
        ("GET", "/status", None),
        ("GET", "/metrics", None),
        ("POST", "/mirrors", Some(definition.as_str())),
        ("GET", "/mirrors/dr", None),
        ("POST", "/mirrors/dr/pause", None),
        ("DELETE", "/mirrors/dr", None),
        // An unknown route does not tell that it is unknown.
        ("GET", "/no-such-route", None),
    ];
    for (method, path, body) in routes {
        for (authorization, message) in refusals {
            let what = format!("{method} {path} with {authorization:?}");
            let r = send(&url, method, path, body, authorization);
            assert_eq!(
                (r.status, r.json()),
                (401, json!({"error": "unauthorized", "message": message})),
                "{what}"
            );
            assert_eq!(
                r.www_authenticate.as_deref(),
                Some(r#"Bearer realm="ringmirror""#),
                "{what}"
            );
            assert!(
                r.content_type.starts_with("application/json"),
                "{what}: {}",
                r.content_type
            );
        }
    }

    // Liveness probes need no token.
    for authorization in [&[][..], &["Bearer wrong-token"]] {
        let r = send(&url, "GET", "/health", None, authorization);
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    }

    // The token: the usual answers. The refused POSTs created nothing.
    let with_token = [bearer.as_str()];
    assert!(mirror_names(&url, &with_token).is_empty());
    for (path, answer) in [("/status", "status"), ("/mirrors", "mirrors")] {
        let r = send(&url, "GET", path, None, &with_token);
        assert_eq!((r.status, r.json()["answer"].clone()), (200, json!(answer)), "{path}");
    }
    let r = send(&url, "GET", "/metrics", None, &with_token);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        r.content_type
    );
    let r = send(&url, "POST", "/mirrors", Some(&definition), &with_token);
    assert_eq!(
        (r.status, r.json()),
        (201, json!({"answer": "accepted", "mirror": "dr", "partitions": []}))
    );
    assert_eq!(mirror_names(&url, &with_token), ["dr"]);
    // The scheme is case-insensitive; errors past authentication keep
    // their kinds.
    let lower = format!("bearer {TOKEN}");
    let r = send(&url, "GET", "/mirrors/dr", None, &[&lower]);
    assert_eq!(
        (r.status, r.json()["answer"].clone()),
        (200, json!("mirror")),
        "{}",
        r.body
    );
    let r = send(&url, "POST", "/mirrors", Some(&definition), &with_token);
    assert_eq!((r.status, r.json()["error"].clone()), (409, json!("mirror_exists")));
    let r = send(&url, "GET", "/no-such-route", None, &with_token);
    assert_eq!((r.status, r.json()["error"].clone()), (404, json!("not_found")));
    let r = send(&url, "DELETE", "/mirrors/dr", None, &with_token);
    assert_eq!(r.status, 200, "{}", r.body);

    agent.stop().expect("stop the agent");
    let refused = common::logs::lines_with(&["request refused"]);
    assert!(!refused.is_empty(), "refusals are logged at debug");
    assert!(
        !common::logs::all().contains(TOKEN),
        "the token is in the log:\n{}",
        common::logs::all()
    );
}

#[test]
fn the_cli_sends_the_token_from_its_file_and_says_when_it_is_refused() {
    let _logs = common::logs::capture(LOG_FILTER);
    let dir = tempfile::tempdir().unwrap();
    let token_file = write_file(dir.path(), "admin-token", &format!("{TOKEN}\n"));
    let wrong_file = write_file(dir.path(), "wrong-token", "not-the-token\n");
    let agent = start_agent(&dir.path().join("data"), Some(&token_file));
    let url = admin_url(&agent);
    let token_path = token_file.to_str().expect("a UTF-8 path");
    let no_token_leaks = |what: &str, stdout: &str, stderr: &str| {
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "{what}: {stdout}\n{stderr}"
        );
    };

    // With the flag, and with the environment variable.
    let (code, stdout, stderr) = cli(
        &url,
        &[
            "mirror",
            "create",
            "dr",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--topics",
            "orders",
            "--admin-token-file",
            token_path,
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "create dr: accepted (0 partitions)\n");
    no_token_leaks("create", &stdout, &stderr);
    let (code, stdout, stderr) = cli(&url, &["mirror", "list", "--admin-token-file", token_path], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("NAME") && stdout.contains("127.0.0.1:1"), "{stdout}");
    let env = [(ringmirror::cli_admin::ADMIN_TOKEN_FILE_ENV, token_file.as_path())];
    let (code, stdout, stderr) = cli(&url, &["status"], &env);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("MIRROR"), "{stdout}");
    no_token_leaks("status", &stdout, &stderr);
    // The flag wins over the variable.
    let env = [(ringmirror::cli_admin::ADMIN_TOKEN_FILE_ENV, wrong_file.as_path())];
    let (code, _, stderr) = cli(&url, &["status", "--admin-token-file", token_path], &env);
    assert_eq!(code, 0, "{stderr}");

    // No token: refused, saying how to give one.
    for args in [&["mirror", "list"][..], &["status"], &["mirror", "pause", "dr"]] {
        let (code, stdout, stderr) = cli(&url, args, &[]);
        assert_eq!(code, 1, "{args:?}: {stdout}\n{stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.contains(&format!("error: the admin API at {url} requires a token: "))
                && stderr.contains("(HTTP 401)")
                && stderr.contains("--admin-token-file")
                && stderr.contains("RINGMIRROR_ADMIN_TOKEN_FILE"),
            "{args:?}: {stderr}"
        );
    }
    // A wrong token: refused, and said so.
    let env = [(ringmirror::cli_admin::ADMIN_TOKEN_FILE_ENV, wrong_file.as_path())];
    for (args, env) in [
        (
            &["mirror", "list", "--admin-token-file", wrong_file.to_str().unwrap()][..],
            &[][..],
        ),
        (&["status"][..], &env[..]),
    ] {
        let (code, stdout, stderr) = cli(&url, args, env);
        assert_eq!(code, 1, "{args:?}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: the admin API at {url} refused the token: the bearer token is not the admin API's (HTTP 401)"
            )),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("not-the-token"), "{stderr}");
    }
    // An unreadable token file: said before anything is sent.
    let missing = dir.path().join("missing-token");
    let (code, _, stderr) = cli(
        &url,
        &["mirror", "list", "--admin-token-file", missing.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot read the admin token file {}", missing.display())),
        "{stderr}"
    );
    agent.stop().expect("stop the agent");
    assert!(!common::logs::all().contains(TOKEN), "the token is in the log");
}

#[test]
fn an_agent_with_an_empty_or_bad_token_file_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content, says) in [
        ("empty", "", "is empty"),
        ("blank", " \n\n", "is empty"),
        ("spaced", "secret words\n", "visible ASCII"),
    ] {
        let token_file = write_file(dir.path(), name, content);
        let config = write_file(
            dir.path(),
            &format!("{name}.toml"),
            &format!(
                "data_dir = {:?}\n[admin]\naddress = \"127.0.0.1:0\"\ntoken_file = {token_file:?}\n",
                dir.path().join("data")
            ),
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_ringmirror"));
        command.arg("run").arg("--config").arg(&config);
        let log_path = dir.path().join(format!("{name}.log"));
        common::agent_process_setup(&mut command, &log_path);
        let mut agent = common::ChildGuard::spawn(&mut command, "ringmirror run").expect("start ringmirror run");
        let status = agent
            .wait_timeout(Duration::from_secs(30))
            .expect("the agent exits at once");
        let log = std::fs::read_to_string(&log_path).expect("the agent's log");
        assert_eq!(status.code(), Some(1), "{name}: {log}");
        let expected = format!("[admin] token_file: the admin token file {}", token_file.display());
        assert!(log.contains(&expected) && log.contains(says), "{name}: {log}");
        assert!(!log.contains("secret"), "{name}: {log}");
        assert!(!dir.path().join("data").exists(), "{name}: nothing started");
    }
}
