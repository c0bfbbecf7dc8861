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
//! - Principals (`principals_file`) and ClusterMirror ACLs, made with
//!   `ringmirror acls create`: `ClusterMirror:dr:DESCRIBE` reads `dr` and
//!   only `dr` (describe, list, `/status`, `/metrics`) and may not stop it
//!   (403 `CLUSTER_MIRROR_AUTHORIZATION_FAILED`, through curl's way and the
//!   CLI, the partition still MIRRORING); `ClusterMirror:*:ALTER` stops it
//!   (the partition reaches STOPPED) but not a mirror it is DENYed; a
//!   CREATE on a prefix creates only mirrors so named. Mirrors of
//!   librdkafka's mock cluster.
//! - HTTPS (`ssl_certificate_location`): curl with `--cacert` and the CLI
//!   with `--admin-ca-location` (or its variable) reach it, another CA and
//!   clear text do not.
//! - ClusterMirror ACLs and Kafka clients: kafka-python's
//!   `describe_acls` with an ANY filter works and never sees them (our own
//!   listener shows them when asked for the type, and refuses to change
//!   them without an authorizer); they survive a restart; and an ACL sync
//!   from another agent, which deletes our extra TOPIC ACL, leaves them.
//!
//! Everything is on loopback; every request and child process is bounded
//! by a timeout.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsResponse,
};
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_control::admin::AdminRequest;
use ringmirror_control::mirror::MirrorConfig;
use ringmirror_dataplane::security::acls::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType, codes,
};
use serde_json::{Value, json};

/// The token of the guarded agents (as `openssl rand -hex 20` makes them).
const TOKEN: &str = "7f3c9a1e5b2d4c6f8a0b1c2d3e4f5a6b7c8d9e0f";
/// How long one HTTP request may take.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one CLI, curl or kafka-python run may take.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a partition may take to reach a state.
const DEADLINE: Duration = Duration::from_secs(60);
/// The principals' tokens (`User:<name>` has `<name>-` and these digits).
const PRINCIPAL_TOKEN_TAIL: &str = "0b1c2d3e4f5a6b7c8d9e0f7f3c9a1e5b2d4c6f8a";
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
        .env_remove(ringmirror::cli_admin::ADMIN_CA_LOCATION_ENV)
        .env("RUST_LOG", "debug")
        .env("NO_COLOR", "1");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = common::run_client(command, &format!("ringmirror {}", args.join(" ")), "", CLIENT_TIMEOUT);
    (out.status.code().unwrap_or(-1), out.stdout, out.stderr)
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

// ---------------------------------------------------------------------------
// Principals, ClusterMirror ACLs, HTTPS
// ---------------------------------------------------------------------------

/// `User:<name>`'s bearer token.
fn principal_token(name: &str) -> String {
    format!("{name}-{PRINCIPAL_TOKEN_TAIL}")
}

/// A principals file of `User:<name>` for each name, with its token's
/// SHA-256 (as `printf %s "$token" | sha256sum` prints it).
fn write_principals(dir: &Path, names: &[&str]) -> PathBuf {
    let lines: String = names
        .iter()
        .map(|name| {
            let digest = ringmirror_protocol::sasl::plain::password_digest(principal_token(name).as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("User:{name}  sha256:{hex}\n")
        })
        .collect();
    write_file(dir, "admin-principals", &format!("# who manages mirrors\n{lines}"))
}

/// An agent with `[admin]` on a free loopback port plus `admin` (more
/// settings of the table), and `extra` TOML before it.
fn start_agent_with(data_dir: &Path, extra: &str, admin: &str) -> Agent {
    let config = AgentConfig::parse(&format!(
        "data_dir = {data_dir:?}\nshards = 1\n{extra}\n[admin]\naddress = \"127.0.0.1:0\"\n{admin}\n"
    ))
    .expect("agent config");
    Agent::start(config).expect("start the agent")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The mirror names a listing (`/mirrors`) or the partitions of `/status`
/// show.
fn names_in(reply: &Reply, list: &str, field: &str) -> Vec<String> {
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}: {}", reply.body))
        .iter()
        .map(|m| m[field].as_str().expect("a mirror name").to_owned())
        .collect()
}

/// The state of the one partition of `mirror`, as the admin token sees it.
fn partition_state(url: &str, mirror: &str) -> Option<String> {
    let r = send(url, "GET", "/status", None, &[&bearer(TOKEN)]);
    r.json()["partitions"]
        .as_array()?
        .iter()
        .find(|p| p["mirror"] == mirror)
        .map(|p| p["state"].as_str().expect("a state").to_owned())
}

fn wait_state(url: &str, mirror: &str, state: &str) {
    common::wait_until(DEADLINE, &format!("{mirror} {state}"), || {
        match partition_state(url, mirror) {
            Some(s) if s == state => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

fn forbidden(principal: &str, operation: &str, mirror: &str) -> Value {
    json!({
        "error": "CLUSTER_MIRROR_AUTHORIZATION_FAILED",
        "message": format!("User:{principal} is not authorized to {operation} ClusterMirror {mirror:?}"),
    })
}

#[test]
fn cluster_mirror_acls_decide_what_each_principal_may_do() {
    let _logs = common::logs::capture(LOG_FILTER);
    let started = std::time::Instant::now();
    let source = MockCluster::new(1).expect("mock cluster");
    for topic in ["orders", "payments", "audit"] {
        source.create_topic(topic, 1, 1).expect("topic");
    }
    let bootstrap = source.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let token_file = write_file(dir.path(), "admin-token", TOKEN);
    let principals = write_principals(dir.path(), &["ro", "ops", "maker"]);
    let agent = start_agent_with(
        &dir.path().join("data"),
        "",
        &format!("token_file = {token_file:?}\nprincipals_file = {principals:?}"),
    );
    let url = admin_url(&agent);
    let admin = [bearer(TOKEN)];
    let admin = [admin[0].as_str()];
    for (mirror, topic) in [("dr", "orders"), ("other", "payments"), ("secret", "audit")] {
        let definition = json!({"name": mirror, "bootstrap_servers": [bootstrap], "topics": [topic],
                                "metadata_refresh_interval_ms": 1000});
        let r = send(&url, "POST", "/mirrors", Some(&definition.to_string()), &admin);
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // The ACLs, made with the CLI and the admin token.
    let token_path = token_file.to_str().expect("a UTF-8 path");
    for acl in [
        &["--principal", "User:ro", "--operation", "describe", "--mirror", "dr"][..],
        &["--principal", "User:ops", "--operation", "alter", "--mirror", "*"],
        &[
            "--principal",
            "User:ops",
            "--operation",
            "alter",
            "--mirror",
            "secret",
            "--deny",
        ],
        &[
            "--principal",
            "User:maker",
            "--operation",
            "create",
            "--mirror",
            "new-",
            "--prefixed",
        ],
    ] {
        let args = [&["acls", "create", "--admin-token-file", token_path][..], acl].concat();
        let (code, stdout, stderr) = cli(&url, &args, &[]);
        assert_eq!(
            (code, stdout.lines().next()),
            (0, Some("created 1 ACL(s) (those already there are not counted)")),
            "{acl:?}: {stderr}"
        );
    }
    let (code, stdout, stderr) = cli(&url, &["acls", "list", "--admin-token-file", token_path], &[]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows,
        [
            vec!["PRINCIPAL", "PERMISSION", "OPERATION", "MIRROR", "PATTERN", "HOST"],
            vec!["User:ops", "ALLOW", "ALTER", "*", "LITERAL", "*"],
            vec!["User:ro", "ALLOW", "DESCRIBE", "dr", "LITERAL", "*"],
            vec!["User:maker", "ALLOW", "CREATE", "new-", "PREFIXED", "*"],
            vec!["User:ops", "DENY", "ALTER", "secret", "LITERAL", "*"],
        ]
    );
    // A principal may not list or change ACLs.
    let ro_file = write_file(dir.path(), "ro-token", &principal_token("ro"));
    let (code, _, stderr) = cli(
        &url,
        &["acls", "list", "--admin-token-file", ro_file.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("error: CLUSTER_AUTHORIZATION_FAILED: User:ro may not list or change ACLs"),
        "{stderr}"
    );
    for mirror in ["dr", "other", "secret"] {
        wait_state(&url, mirror, "MIRRORING");
    }

    // User:ro: reads dr, sees nothing else, changes nothing.
    let ro = bearer(&principal_token("ro"));
    let ro = [ro.as_str()];
    let r = send(&url, "GET", "/mirrors/dr", None, &ro);
    assert_eq!(
        (r.status, r.json()["answer"].clone()),
        (200, json!("mirror")),
        "{}",
        r.body
    );
    let r = send(&url, "GET", "/mirrors/other", None, &ro);
    assert_eq!((r.status, r.json()), (403, forbidden("ro", "DESCRIBE", "other")));
    // A mirror that does not exist tells no more than one it may not see.
    let r = send(&url, "GET", "/mirrors/nope", None, &ro);
    assert_eq!((r.status, r.json()), (403, forbidden("ro", "DESCRIBE", "nope")));
    assert_eq!(
        names_in(&send(&url, "GET", "/mirrors", None, &ro), "mirrors", "name"),
        ["dr"]
    );
    assert_eq!(
        names_in(&send(&url, "GET", "/status", None, &ro), "partitions", "mirror"),
        ["dr"]
    );
    let metrics = send(&url, "GET", "/metrics", None, &ro).body;
    assert!(metrics.contains(r#"mirror="dr""#), "{metrics}");
    assert!(
        !metrics.contains(r#"mirror="other""#) && !metrics.contains(r#"mirror="secret""#),
        "{metrics}"
    );
    for action in ["stop", "pause", "restart", "sync"] {
        let r = send(&url, "POST", &format!("/mirrors/dr/{action}"), None, &ro);
        assert_eq!((r.status, r.json()), (403, forbidden("ro", "ALTER", "dr")), "{action}");
    }
    let r = send(&url, "DELETE", "/mirrors/dr", None, &ro);
    assert_eq!((r.status, r.json()), (403, forbidden("ro", "ALTER", "dr")));
    let r = send(&url, "POST", "/mirrors", Some(&mirror_definition("new-ro")), &ro);
    assert_eq!((r.status, r.json()), (403, forbidden("ro", "CREATE", "new-ro")));
    // The CLI says the same, and shows only dr.
    let env = [(ringmirror::cli_admin::ADMIN_TOKEN_FILE_ENV, ro_file.as_path())];
    let (code, stdout, stderr) = cli(&url, &["mirror", "stop", "dr"], &env);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert!(
        stderr.contains(r#"error: CLUSTER_MIRROR_AUTHORIZATION_FAILED: User:ro is not authorized to ALTER ClusterMirror "dr" (HTTP 403)"#),
        "{stderr}"
    );
    let (code, stdout, stderr) = cli(&url, &["mirror", "list"], &env);
    assert_eq!(code, 0, "{stderr}");
    let listed: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(listed, ["dr"], "{stdout}");
    // Nothing changed: dr is still mirroring, nothing was created.
    assert_eq!(partition_state(&url, "dr").as_deref(), Some("MIRRORING"));
    assert_eq!(mirror_names(&url, &admin), ["dr", "other", "secret"]);

    // User:maker: creates mirrors named new-*, nothing else, and may not
    // even see what it made (CREATE implies no DESCRIBE).
    let maker = bearer(&principal_token("maker"));
    let maker = [maker.as_str()];
    let r = send(&url, "POST", "/mirrors", Some(&mirror_definition("new-dr")), &maker);
    assert_eq!(
        (r.status, r.json()["answer"].clone()),
        (201, json!("accepted")),
        "{}",
        r.body
    );
    let r = send(&url, "POST", "/mirrors", Some(&mirror_definition("dr2")), &maker);
    assert_eq!((r.status, r.json()), (403, forbidden("maker", "CREATE", "dr2")));
    let r = send(&url, "GET", "/mirrors/new-dr", None, &maker);
    assert_eq!((r.status, r.json()), (403, forbidden("maker", "DESCRIBE", "new-dr")));
    assert!(names_in(&send(&url, "GET", "/mirrors", None, &maker), "mirrors", "name").is_empty());

    // User:ops: ALTER on every mirror, DENYed secret: DENY wins.
    let ops = bearer(&principal_token("ops"));
    let ops = [ops.as_str()];
    let r = send(&url, "POST", "/mirrors/secret/stop", None, &ops);
    assert_eq!((r.status, r.json()), (403, forbidden("ops", "ALTER", "secret")));
    // ALTER implies DESCRIBE; the DENY is of ALTER only.
    assert_eq!(
        names_in(&send(&url, "GET", "/mirrors", None, &ops), "mirrors", "name"),
        ["dr", "new-dr", "other", "secret"]
    );
    let r = send(&url, "POST", "/mirrors/dr/stop", None, &ops);
    assert_eq!(
        (r.status, r.json()["answer"].clone()),
        (202, json!("accepted")),
        "{}",
        r.body
    );
    wait_state(&url, "dr", "STOPPED");
    assert_eq!(partition_state(&url, "secret").as_deref(), Some("MIRRORING"));
    assert_eq!(partition_state(&url, "other").as_deref(), Some("MIRRORING"));

    // No token, or a token nobody has: 401, whoever could be meant.
    for authorization in [&[][..], &["Bearer ro-not-quite"]] {
        let r = send(&url, "GET", "/mirrors/dr", None, authorization);
        assert_eq!((r.status, r.json()["error"].clone()), (401, json!("unauthorized")));
    }

    agent.stop().expect("stop the agent");
    let log = common::logs::all();
    for token in [
        TOKEN.to_owned(),
        principal_token("ro"),
        principal_token("ops"),
        principal_token("maker"),
    ] {
        assert!(!log.contains(&token), "a token is in the log");
    }
    assert!(!common::logs::lines_with(&["admin API: not authorized", "User:ro"]).is_empty());
    eprintln!("took {:?}", started.elapsed());
}

/// `curl` with `args` (and a bound): (exit code, stdout, stderr).
fn curl(args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args);
    let out = common::run_client(command, &format!("curl {}", args.join(" ")), "", CLIENT_TIMEOUT);
    (out.status.code().unwrap_or(-1), out.stdout, out.stderr)
}

#[test]
fn over_tls_curl_and_the_cli_reach_the_admin_api_and_clear_text_does_not() {
    let _logs = common::logs::capture(LOG_FILTER);
    let dir = tempfile::tempdir().unwrap();
    let pki = common::pki::make_pki(dir.path());
    let token_file = write_file(dir.path(), "admin-token", TOKEN);
    let agent = start_agent_with(
        &dir.path().join("data"),
        "",
        &format!(
            "token_file = {token_file:?}\nssl_certificate_location = {:?}\nssl_key_location = {:?}",
            pki.server_cert, pki.server_key
        ),
    );
    let addr = agent.admin_addr().expect("an admin API");
    let https = format!("https://{addr}");
    let (ca, other_ca) = (pki.ca.to_str().unwrap(), pki.other_ca.to_str().unwrap());
    let authorization = format!("Authorization: Bearer {TOKEN}");

    // curl with the CA: the API; without a token 401; /health open.
    let (code, stdout, stderr) = curl(&["--cacert", ca, "-H", &authorization, &format!("{https}/mirrors")]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap(),
        json!({"answer": "mirrors", "mirrors": []})
    );
    let (code, stdout, _) = curl(&[
        "--cacert",
        ca,
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("{https}/status"),
    ]);
    assert_eq!((code, stdout.as_str()), (0, "401"));
    let (code, stdout, _) = curl(&["--cacert", ca, &format!("{https}/health")]);
    assert_eq!((code, stdout.as_str()), (0, "ok"));
    // Another CA: the certificate is refused (curl's 60).
    let (code, _, stderr) = curl(&["--cacert", other_ca, "-H", &authorization, &format!("{https}/mirrors")]);
    assert_eq!(code, 60, "{stderr}");
    // In clear: no HTTP answer at all (the token went nowhere).
    let (code, stdout, stderr) = curl(&["-H", &authorization, &format!("http://{addr}/mirrors")]);
    assert!(
        code != 0 && stdout.is_empty(),
        "clear text answered: {code} {stdout} {stderr}"
    );

    // The CLI: the CA from the flag or the variable.
    let token_path = token_file.to_str().unwrap();
    let (code, stdout, stderr) = cli(
        &https,
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
            "--admin-ca-location",
            ca,
        ],
        &[],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "create dr: accepted (0 partitions)\n"),
        "{stderr}"
    );
    let env = [
        (ringmirror::cli_admin::ADMIN_CA_LOCATION_ENV, pki.ca.as_path()),
        (ringmirror::cli_admin::ADMIN_TOKEN_FILE_ENV, token_file.as_path()),
    ];
    let (code, stdout, stderr) = cli(&https, &["mirror", "list"], &env);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("NAME") && stdout.contains("127.0.0.1:1"), "{stdout}");
    let (code, stdout, stderr) = cli(&https, &["status"], &env);
    assert_eq!((code, stdout.starts_with("MIRROR")), (0, true), "{stdout}{stderr}");
    // Another CA, the flag winning over the variable: refused, saying why.
    let (code, _, stderr) = cli(&https, &["mirror", "list", "--admin-ca-location", other_ca], &env);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("cannot reach the admin API at {https}")) && stderr.contains("UnknownIssuer"),
        "{stderr}"
    );
    // A CA file that is not one: said before anything is sent.
    let (code, _, stderr) = cli(&https, &["mirror", "list", "--admin-ca-location", token_path], &env);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("the admin API's CA file (--admin-ca-location)") && stderr.contains("no CA certificate"),
        "{stderr}"
    );
    assert!(!stderr.contains(TOKEN), "{stderr}");
    // The CLI in clear to the HTTPS port gets no answer either.
    let (code, _, stderr) = cli(&format!("http://{addr}"), &["mirror", "list"], &env);
    assert_eq!(code, 1, "{stderr}");

    agent.stop().expect("stop the agent");
    assert!(!common::logs::all().contains(TOKEN), "the token is in the log");
    assert!(!common::logs::lines_with(&["admin API listening", "https"]).is_empty());
    // On loopback, tokens in clear would not be worth a warning either.
    assert!(common::logs::lines_with(&["travel in clear"]).is_empty());
}

fn kafka(addr: &str) -> common::KafkaConnection {
    common::KafkaConnection::connect(addr, IO_TIMEOUT).expect("connect to the listener")
}

fn describe_acls(addr: &str, filter: &AclBindingFilter) -> Vec<AclBinding> {
    let r: DescribeAclsResponse = kafka(addr)
        .request(ApiKey::DescribeAcls as i16, 3, &filter.to_describe_request())
        .expect("DescribeAcls");
    assert_eq!(r.error_code, codes::NONE, "{:?}", r.error_message);
    let (bindings, unknown) = AclBinding::from_describe_response(&r);
    assert!(unknown.is_empty(), "{unknown:?}");
    bindings
}

fn create_acls(addr: &str, bindings: &[AclBinding]) -> Vec<i16> {
    let request = CreateAclsRequest::default().with_creations(bindings.iter().map(AclBinding::to_creation).collect());
    let r: CreateAclsResponse = kafka(addr)
        .request(ApiKey::CreateAcls as i16, 3, &request)
        .expect("CreateAcls");
    r.results.iter().map(|r| r.error_code).collect()
}

fn cluster_mirrors() -> AclBindingFilter {
    AclBindingFilter {
        resource_type: ResourceType::ClusterMirror,
        ..AclBindingFilter::any()
    }
}

/// The ClusterMirror ACLs the admin API lists, as (principal, operation, mirror).
fn admin_acls(url: &str) -> Vec<(String, String, String)> {
    let r = send(url, "GET", "/acls", None, &[&bearer(TOKEN)]);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["acls"]
        .as_array()
        .expect("acls")
        .iter()
        .map(|a| {
            let field = |f: &str| a[f].as_str().expect("a string").to_owned();
            (field("principal"), field("operation"), field("mirror"))
        })
        .collect()
}

fn grant(url: &str, principal: &str, operation: &str, mirror: &str) {
    let body = json!({"acls": [{"principal": principal, "operation": operation, "mirror": mirror}]});
    let r = send(url, "POST", "/acls", Some(&body.to_string()), &[&bearer(TOKEN)]);
    assert_eq!(r.status, 201, "{}", r.body);
}

fn topic_acl(name: &str, principal: &str) -> AclBinding {
    AclBinding::from_any_host(
        ResourceType::Topic,
        name,
        PatternType::Literal,
        principal,
        AclOperation::Read,
        AclPermissionType::Allow,
    )
}

/// kafka-python's `KafkaAdminClient.describe_acls` with a filter of ANY
/// everything: the ACLs as (resource type, name, principal), or the
/// exception it raised.
const KAFKA_PYTHON_DESCRIBE_ACLS: &str = r#"
import json, sys
from kafka.admin import (KafkaAdminClient, ACLFilter, ResourcePatternFilter, ResourceType,
                         ACLResourcePatternType, ACLOperation, ACLPermissionType)
admin = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=10000)
pattern = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
try:
    acls, error = admin.describe_acls(ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                                                 permission_type=ACLPermissionType.ANY, resource_pattern=pattern))
    print(json.dumps({"acls": sorted([a.resource_pattern.resource_type.name, a.resource_pattern.resource_name,
                                      a.principal] for a in acls), "error": str(error)}))
except Exception as e:
    print(json.dumps({"acls": None, "error": f"{type(e).__name__}: {e}"}))
admin.close()
"#;

#[test]
fn kafka_clients_listing_every_acl_never_see_cluster_mirror_acls() {
    let _logs = common::logs::capture(LOG_FILTER);
    common::require_kafka_python();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token_file = write_file(dir.path(), "admin-token", TOKEN);
    let listener = "[listener]\naddress = \"127.0.0.1:0\"";
    let admin = format!("token_file = {token_file:?}");
    let agent = start_agent_with(&data, listener, &admin);
    let (url, addr) = (
        admin_url(&agent),
        agent.listener_addr().expect("a listener").to_string(),
    );
    let alice = topic_acl("orders", "User:alice");
    assert_eq!(create_acls(&addr, std::slice::from_ref(&alice)), [codes::NONE]);
    grant(&url, "User:ro", "describe", "dr");
    grant(&url, "User:ops", "all", "*");
    // Without an authorizer, no Kafka client may grant itself mirrors.
    let sneaky = AclBinding::from_any_host(
        ResourceType::ClusterMirror,
        "*",
        PatternType::Literal,
        "User:ANONYMOUS",
        AclOperation::All,
        AclPermissionType::Allow,
    );
    assert_eq!(create_acls(&addr, &[sneaky]), [codes::CLUSTER_AUTHORIZATION_FAILED]);

    let mut python = Command::new("python3");
    python.arg("-c").arg(KAFKA_PYTHON_DESCRIBE_ACLS).arg(&addr);
    let out = common::run_client(python, "kafka-python describe_acls", "", CLIENT_TIMEOUT);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let answer: Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(
        answer,
        json!({"acls": [["TOPIC", "orders", "User:alice"]], "error": "<class 'kafka.errors.NoError'>"}),
        "{}",
        out.stderr
    );
    // Our own listener: ANY shows Kafka's types only; the type, ours.
    assert_eq!(
        describe_acls(&addr, &AclBindingFilter::any()),
        std::slice::from_ref(&alice)
    );
    let ours: Vec<(String, AclOperation, String)> = describe_acls(&addr, &cluster_mirrors())
        .into_iter()
        .map(|b| (b.principal, b.operation, b.resource_name))
        .collect();
    assert_eq!(
        ours,
        [
            ("User:ops".to_owned(), AclOperation::All, "*".to_owned()),
            ("User:ro".to_owned(), AclOperation::Describe, "dr".to_owned())
        ]
    );
    // A DeleteAcls of everything deletes Kafka's kinds only.
    let delete_all = DeleteAclsRequest::default().with_filters(vec![AclBindingFilter::any().to_delete_filter()]);
    let r: DeleteAclsResponse = kafka(&addr)
        .request(ApiKey::DeleteAcls as i16, 3, &delete_all)
        .expect("DeleteAcls");
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert!(describe_acls(&addr, &AclBindingFilter::any()).is_empty());
    agent.stop().expect("stop the agent");

    // Kept in the ACL store: there after a restart.
    let agent = start_agent_with(&data, listener, &admin);
    let url = admin_url(&agent);
    let token_path = token_file.to_str().unwrap();
    let (code, stdout, stderr) = cli(&url, &["acls", "list", "--admin-token-file", token_path, "--json"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["acls"].as_array().map(Vec::len), Some(2), "{stdout}");
    // And deleted with the CLI.
    let (code, stdout, stderr) = cli(
        &url,
        &[
            "acls",
            "delete",
            "--principal",
            "User:ro",
            "--operation",
            "describe",
            "--mirror",
            "dr",
            "--admin-token-file",
            token_path,
        ],
        &[],
    );
    assert_eq!((code, stdout.lines().next()), (0, Some("deleted 1 ACL(s)")), "{stderr}");
    assert_eq!(admin_acls(&url), [("User:ops".into(), "all".into(), "*".into())]);
    agent.stop().expect("stop the agent");
}

#[test]
fn acl_sync_from_a_source_agent_leaves_our_cluster_mirror_acls_alone() {
    let _logs = common::logs::capture(LOG_FILTER);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let token_file = write_file(dir_a.path(), "admin-token", TOKEN);
    let listener = "[listener]\naddress = \"127.0.0.1:0\"";
    let admin = format!("token_file = {token_file:?}");
    let a = start_agent_with(&dir_a.path().join("data"), listener, &admin);
    let b = start_agent_with(&dir_b.path().join("data"), listener, &admin);
    let (a_addr, b_addr) = (
        a.listener_addr().expect("A listens").to_string(),
        b.listener_addr().expect("B listens").to_string(),
    );
    let at_a = topic_acl("orders", "User:alice");
    let extra_at_b = topic_acl("payments", "User:bob");
    assert_eq!(create_acls(&a_addr, std::slice::from_ref(&at_a)), [codes::NONE]);
    assert_eq!(create_acls(&b_addr, std::slice::from_ref(&extra_at_b)), [codes::NONE]);
    grant(&admin_url(&a), "User:a-ops", "alter", "*");
    grant(&admin_url(&b), "User:b-ops", "alter", "*");

    // B mirrors A with every ACL in scope: B's TOPIC ACLs become A's.
    let config: MirrorConfig = serde_json::from_value(json!({
        "name": "from-a", "bootstrap_servers": [a_addr], "topics": ["orders"],
        "acls_include": [{}], "metadata_refresh_interval_ms": 1000,
    }))
    .expect("a mirror definition");
    b.admin(AdminRequest::CreateMirror { config })
        .expect("create the mirror");
    common::wait_until(DEADLINE, "B's TOPIC ACLs are A's", || {
        let held = describe_acls(&b_addr, &AclBindingFilter::any());
        if held == [at_a.clone()] {
            Ok(())
        } else {
            Err(format!("{held:?}"))
        }
    });
    // Another round after that one: A's ACL unchanged, no errors — the
    // ClusterMirror ACLs on either side were not even looked at (a try to
    // create A's at B, or delete B's, would be an error: B's listener
    // refuses both without an authorizer).
    let round = common::wait_until(DEADLINE, "a round that found nothing to do", || {
        let round = common::describe_mirror(&b, "from-a");
        if round.acls == "0 created, 0 deleted, 1 unchanged" {
            Ok(round)
        } else {
            Err(round.acls)
        }
    });
    assert!(round.acls_synced_ms.is_some());
    assert_eq!(
        admin_acls(&admin_url(&b)),
        [("User:b-ops".into(), "alter".into(), "*".into())]
    );
    assert_eq!(
        admin_acls(&admin_url(&a)),
        [("User:a-ops".into(), "alter".into(), "*".into())]
    );
    b.stop().expect("stop B");
    a.stop().expect("stop A");
}
