use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::*;
use crate::admin::{MetricsSnapshot, MirrorMetrics, MirrorSummary, PartitionView, TopicPartitionName};

type Script = Box<dyn Fn(&AdminRequest) -> Result<AdminAnswer, AdminError> + Send>;

/// An AdminServer in front of a scripted coordinator that records what
/// it was asked.
struct Fixture {
    server: AdminServer,
    seen: Arc<Mutex<Vec<AdminRequest>>>,
    http: ureq::Agent,
}

struct Reply {
    status: u16,
    content_type: String,
    www_authenticate: Option<String>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn fixture(script: Script) -> Fixture {
    fixture_with_token(script, None)
}

fn fixture_with_token(script: Script, token: Option<AdminToken>) -> Fixture {
    fixture_with(
        script,
        AdminSecurity {
            token,
            ..AdminSecurity::default()
        },
    )
}

fn fixture_with(script: Script, security: AdminSecurity) -> Fixture {
    let (calls, incoming) = async_channel::unbounded::<AdminCall>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        while let Ok(AdminCall { request, reply }) = incoming.recv_blocking() {
            let answer = script(&request);
            log.lock().unwrap().push(request);
            let _ = reply.send_blocking(answer);
        }
    });
    let server = AdminServer::start_with("127.0.0.1:0".parse().unwrap(), calls, security).unwrap();
    let http = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    Fixture { server, seen, http }
}

impl Fixture {
    fn send(&self, method: &str, path: &str, body: Option<&str>) -> Reply {
        self.send_as(method, path, body, &[])
    }

    /// [`send`](Self::send) with these `Authorization` header values.
    fn send_as(&self, method: &str, path: &str, body: Option<&str>, authorization: &[&str]) -> Reply {
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.server.addr()));
        for value in authorization {
            request = request.header("authorization", *value);
        }
        let request = request.body(body.unwrap_or("").to_owned()).unwrap();
        let mut response = self.http.run(request).unwrap();
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        Reply {
            status: response.status().as_u16(),
            content_type: header("content-type").unwrap_or_default(),
            www_authenticate: header("www-authenticate"),
            body: response.body_mut().read_to_string().unwrap(),
        }
    }

    fn seen(&self) -> Vec<AdminRequest> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn view(topic: &str, partition: i32) -> PartitionView {
    PartitionView {
        mirror: "dr".into(),
        topic: topic.into(),
        partition,
        topic_id: "00000000-0000-0000-0000-000000000007".into(),
        state: "MIRRORING".into(),
        source_offset: 10,
        destination_offset: 8,
        lag_messages: 2,
        lag_seconds: 0.25,
        last_mirror_epoch: -1,
        destination_leader_epoch: 11,
        retry_attempt: 0,
        error: None,
    }
}

fn config_json() -> Value {
    json!({"name": "dr", "bootstrap_servers": ["a:1,b:2"], "topics": ["orders"]})
}

/// Answers every request the way a healthy coordinator would.
fn healthy(request: &AdminRequest) -> Result<AdminAnswer, AdminError> {
    let accepted = |mirror: &str| AdminAnswer::Accepted {
        mirror: mirror.into(),
        partitions: vec![TopicPartitionName {
            topic: "orders".into(),
            partition: 0,
        }],
    };
    Ok(match request {
        AdminRequest::CreateMirror { config } | AdminRequest::UpdateMirror { config } => accepted(&config.name),
        AdminRequest::Sync { mirror } => accepted(mirror),
        AdminRequest::ListMirrors => AdminAnswer::Mirrors {
            mirrors: vec![MirrorSummary {
                name: "dr".into(),
                bootstrap_servers: vec!["a:1".into()],
                source_cluster_id: Some("src".into()),
                partitions: 1,
                states: BTreeMap::from([("MIRRORING".into(), 1)]),
            }],
        },
        AdminRequest::DescribeMirror { mirror } if mirror == "dr" => AdminAnswer::Status {
            partitions: vec![view("orders", 0)],
        },
        AdminRequest::DescribeMirror { mirror } => {
            return Err(AdminError::UnknownMirror { mirror: mirror.clone() });
        }
        AdminRequest::DeleteMirror { mirror }
        | AdminRequest::AddTopics { mirror, .. }
        | AdminRequest::RemoveTopics { mirror, .. }
        | AdminRequest::Pause { mirror, .. }
        | AdminRequest::Resume { mirror, .. }
        | AdminRequest::Stop { mirror, .. }
        | AdminRequest::Restart { mirror, .. }
        | AdminRequest::CheckDivergence { mirror, .. } => accepted(mirror),
        AdminRequest::StartVerify {
            mirror,
            from_offset,
            bytes_per_s,
            ..
        } => AdminAnswer::Verify {
            job: crate::admin::VerifyJob {
                mirror: mirror.clone(),
                id: 1,
                started_ms: 1,
                from_offset: *from_offset,
                bytes_per_s: *bytes_per_s,
                done: false,
                partitions: Vec::new(),
            },
        },
        AdminRequest::VerifyStatus { mirror } => AdminAnswer::Verify {
            job: crate::admin::VerifyJob {
                mirror: mirror.clone(),
                id: 1,
                started_ms: 1,
                from_offset: 0,
                bytes_per_s: 1,
                done: true,
                partitions: Vec::new(),
            },
        },
        AdminRequest::Status => AdminAnswer::Status {
            partitions: vec![view("orders", 0), view("orders", 1)],
        },
        AdminRequest::Metrics => AdminAnswer::Metrics {
            metrics: MetricsSnapshot {
                partitions: vec![],
                mirrors: vec![MirrorMetrics {
                    mirror: "dr".into(),
                    fetch_errors: BTreeMap::new(),
                    fetch_latency_us: vec![(0.5, 2000)],
                    fetches: 5,
                    sync_halted: false,
                    topic_sync_errors: 0,
                    topic_deletions_pending: 0,
                    topic_recreations: 0,
                }],
                shard_events: None,
                shard_storage: Vec::new(),
            },
        },
    })
}

#[test]
fn every_route_maps_to_its_request_status_and_answer() {
    let f = fixture(Box::new(healthy));
    let accepted = json!({"answer": "accepted", "mirror": "dr", "partitions": [{"topic": "orders", "partition": 0}]});
    let topics = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let all = Vec::<String>::new;

    let r = f.send("POST", "/mirrors", Some(&config_json().to_string()));
    assert_eq!((r.status, r.json()), (201, accepted.clone()));
    assert!(r.content_type.starts_with("application/json"), "{}", r.content_type);
    let [AdminRequest::CreateMirror { config }] = &f.seen()[..] else {
        panic!("not a CreateMirror");
    };
    // Comma-separated bootstrap entries are split, and defaults applied.
    assert_eq!(
        (config.bootstrap_servers.clone(), config.fetch_max_wait_ms),
        (topics(&["a:1", "b:2"]), 500)
    );

    let r = f.send("GET", "/mirrors", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["answer"], "mirrors");
    assert_eq!(r.json()["mirrors"][0]["states"]["MIRRORING"], 1);
    assert_eq!(f.seen(), [AdminRequest::ListMirrors]);

    let r = f.send("GET", "/mirrors/dr", None);
    assert_eq!(
        (r.status, r.json()["partitions"][0]["lag_seconds"].clone()),
        (200, json!(0.25))
    );
    assert_eq!(f.seen(), [AdminRequest::DescribeMirror { mirror: "dr".into() }]);

    let r = f.send("DELETE", "/mirrors/dr", None);
    assert_eq!((r.status, r.json()), (200, accepted.clone()));
    assert_eq!(f.seen(), [AdminRequest::DeleteMirror { mirror: "dr".into() }]);

    // PUT replaces the definition; its name must be the route's.
    let r = f.send("PUT", "/mirrors/dr", Some(&config_json().to_string()));
    assert_eq!((r.status, r.json()), (202, accepted.clone()));
    let [AdminRequest::UpdateMirror { config }] = &f.seen()[..] else {
        panic!("not an UpdateMirror");
    };
    assert_eq!(config.bootstrap_servers, topics(&["a:1", "b:2"]));
    let r = f.send("POST", "/mirrors/dr/sync", None);
    assert_eq!((r.status, r.json()), (202, accepted.clone()));
    assert_eq!(f.seen(), [AdminRequest::Sync { mirror: "dr".into() }]);
    // A verification: the defaults without a body, else the body's.
    let r = f.send("POST", "/mirrors/dr/verify", None);
    assert_eq!((r.status, r.json()["answer"].clone()), (202, json!("verify")));
    assert_eq!(
        f.seen(),
        [AdminRequest::StartVerify {
            mirror: "dr".into(),
            topics: all(),
            from_offset: 0,
            bytes_per_s: VerifyBody::BYTES_PER_S_DEFAULT,
        }]
    );
    let r = f.send(
        "POST",
        "/mirrors/dr/verify",
        Some(r#"{"topics": ["orders"], "from_offset": 7, "bytes_per_s": 1024}"#),
    );
    assert_eq!(r.json()["job"]["from_offset"], 7);
    assert_eq!(
        f.seen(),
        [AdminRequest::StartVerify {
            mirror: "dr".into(),
            topics: topics(&["orders"]),
            from_offset: 7,
            bytes_per_s: 1024,
        }]
    );
    let r = f.send("GET", "/mirrors/dr/verify", None);
    assert_eq!((r.status, r.json()["job"]["done"].clone()), (200, json!(true)));
    assert_eq!(f.seen(), [AdminRequest::VerifyStatus { mirror: "dr".into() }]);
    let r = f.send("POST", "/mirrors/dr/check", None);
    assert_eq!((r.status, r.json()), (202, accepted.clone()));
    assert_eq!(
        f.seen(),
        [AdminRequest::CheckDivergence {
            mirror: "dr".into(),
            topics: all(),
        }]
    );
    let r = f.send("PUT", "/mirrors/other", Some(&config_json().to_string()));
    assert_eq!((r.status, r.json()["error"].clone()), (400, json!("invalid")));
    assert!(f.seen().is_empty(), "refused before the coordinator");

    let r = f.send("POST", "/mirrors/dr/topics", Some(r#"{"topics": ["a", "b"]}"#));
    assert_eq!((r.status, r.json()), (202, accepted.clone()));
    let r = f.send("DELETE", "/mirrors/dr/topics", Some(r#"{"topics": ["a"]}"#));
    assert_eq!((r.status, r.json()), (202, accepted.clone()));
    assert_eq!(
        f.seen(),
        [
            AdminRequest::AddTopics {
                mirror: "dr".into(),
                topics: topics(&["a", "b"])
            },
            AdminRequest::RemoveTopics {
                mirror: "dr".into(),
                topics: topics(&["a"])
            }
        ]
    );

    // Actions: no body, an empty list and a named topic.
    for (action, body) in [
        ("pause", None),
        ("resume", Some(r#"{"topics": []}"#)),
        ("stop", Some(r#"{"topics": ["orders"]}"#)),
        ("restart", Some("{}")),
    ] {
        let r = f.send("POST", &format!("/mirrors/dr/{action}"), body);
        assert_eq!((r.status, r.json()), (202, accepted.clone()), "{action}");
    }
    let mirror = || "dr".to_owned();
    assert_eq!(
        f.seen(),
        [
            AdminRequest::Pause {
                mirror: mirror(),
                topics: all()
            },
            AdminRequest::Resume {
                mirror: mirror(),
                topics: all()
            },
            AdminRequest::Stop {
                mirror: mirror(),
                topics: topics(&["orders"])
            },
            AdminRequest::Restart {
                mirror: mirror(),
                topics: all()
            },
        ]
    );

    let r = f.send("GET", "/status", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["answer"], "status");
    assert_eq!(r.json()["partitions"].as_array().unwrap().len(), 2);

    let r = f.send("GET", "/metrics", None);
    assert_eq!(
        (r.status, r.content_type.as_str()),
        (200, "text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        r.body
            .contains("ringmirror_mirror_fetch_latency_seconds{mirror=\"dr\",quantile=\"0.5\"} 0.002\n"),
        "{}",
        r.body
    );
    assert!(r.body.contains("ringmirror_mirror_fetches_total{mirror=\"dr\"} 5\n"));
    assert_eq!(f.seen(), [AdminRequest::Status, AdminRequest::Metrics]);

    let r = f.send("GET", "/health", None);
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    assert!(f.seen().is_empty(), "health does not ask the coordinator");
    f.server.stop();
}

#[test]
fn coordinator_errors_map_to_their_status_and_kind() {
    let f = fixture(Box::new(|request| match request {
        AdminRequest::DescribeMirror { mirror } => Err(AdminError::UnknownMirror { mirror: mirror.clone() }),
        AdminRequest::CreateMirror { config } => Err(AdminError::MirrorExists {
            mirror: config.name.clone(),
        }),
        AdminRequest::Pause { mirror, .. } => Err(AdminError::AlreadyPaused {
            mirror: mirror.clone(),
            topic: "orders".into(),
        }),
        AdminRequest::AddTopics { .. } => Err(AdminError::Invalid("bad topic name".into())),
        AdminRequest::Status => Err(AdminError::Internal("boom".into())),
        // The wrong kind of answer for /metrics.
        _ => Ok(AdminAnswer::Status { partitions: vec![] }),
    }));
    let cases = [
        (
            "GET",
            "/mirrors/nope",
            None,
            404,
            "unknown_mirror",
            r#"unknown mirror "nope""#,
        ),
        (
            "POST",
            "/mirrors",
            Some(config_json().to_string()),
            409,
            "mirror_exists",
            r#"mirror "dr" exists"#,
        ),
        (
            "POST",
            "/mirrors/dr/pause",
            None,
            409,
            "already_paused",
            r#""dr": "orders" is already paused"#,
        ),
        (
            "POST",
            "/mirrors/dr/topics",
            Some(r#"{"topics":["x"]}"#.into()),
            400,
            "invalid",
            "invalid request: bad topic name",
        ),
        ("GET", "/status", None, 500, "internal", "internal error: boom"),
        (
            "GET",
            "/metrics",
            None,
            500,
            "internal",
            r#"internal error: asked for metrics, the coordinator answered "status""#,
        ),
    ];
    for (method, path, body, status, kind, message) in cases {
        let r = f.send(method, path, body.as_deref());
        assert_eq!(
            (r.status, r.json()),
            (status, json!({"error": kind, "message": message})),
            "{method} {path}"
        );
        assert!(r.content_type.starts_with("application/json"));
    }
}

#[test]
fn malformed_bodies_are_400_and_never_reach_the_coordinator() {
    let f = fixture(Box::new(healthy));
    let cases = [
        (
            "POST",
            "/mirrors",
            "{",
            "body is not a mirror definition (JSON): EOF while parsing",
        ),
        (
            "POST",
            "/mirrors",
            "",
            "expected a JSON body: a mirror definition (JSON)",
        ),
        (
            "POST",
            "/mirrors",
            r#"{"name": "dr"}"#,
            "missing field `bootstrap_servers`",
        ),
        (
            "POST",
            "/mirrors",
            r#"{"name": "dr", "bootstrap_servers": [], "bogus": 1}"#,
            "unknown field `bogus`",
        ),
        ("POST", "/mirrors/dr/topics", "", "expected a JSON body"),
        (
            "POST",
            "/mirrors/dr/topics",
            r#"{"topics": []}"#,
            "the body names no topics",
        ),
        (
            "DELETE",
            "/mirrors/dr/topics",
            r#"{"topics": "orders"}"#,
            "invalid type: string",
        ),
        ("POST", "/mirrors/dr/stop", "[1,", "body is not {\"topics\""),
        (
            "POST",
            "/mirrors/dr/pause",
            r#"{"topic": ["x"]}"#,
            "unknown field `topic`",
        ),
    ];
    for (method, path, body, needle) in cases {
        let r = f.send(method, path, Some(body));
        assert_eq!(r.status, 400, "{method} {path} {body:?}: {}", r.body);
        assert_eq!(r.json()["error"], "invalid");
        let message = r.json()["message"].as_str().unwrap().to_owned();
        assert!(message.contains(needle), "{method} {path} {body:?}: {message}");
    }
    assert!(f.seen().is_empty());
}

#[test]
fn unknown_routes_are_404_and_wrong_methods_405() {
    let f = fixture(Box::new(healthy));
    for (method, path, status, kind, message) in [
        ("GET", "/nope", 404, "not_found", "no route for GET /nope"),
        (
            "POST",
            "/mirrors/dr/explode",
            404,
            "not_found",
            "no route for POST /mirrors/dr/explode",
        ),
        (
            "PUT",
            "/mirrors",
            405,
            "method_not_allowed",
            "/mirrors does not take PUT",
        ),
        (
            "GET",
            "/mirrors/dr/pause",
            405,
            "method_not_allowed",
            "/mirrors/dr/pause does not take GET",
        ),
    ] {
        let r = f.send(method, path, None);
        assert_eq!(
            (r.status, r.json()),
            (status, json!({"error": kind, "message": message})),
            "{method} {path}"
        );
    }
    assert!(f.seen().is_empty());
}

#[test]
fn a_gone_coordinator_is_503() {
    // Closed channel: nobody receives calls.
    let (calls, incoming) = async_channel::unbounded::<AdminCall>();
    drop(incoming);
    let server = AdminServer::start("127.0.0.1:0".parse().unwrap(), calls).unwrap();
    let f = Fixture {
        server,
        seen: Arc::default(),
        http: ureq::Agent::config_builder().http_status_as_error(false).build().into(),
    };
    let r = f.send("GET", "/status", None);
    assert_eq!(
        (r.status, r.json()),
        (
            503,
            json!({"error": "unavailable", "message": "unavailable: the mirror coordinator is not running"})
        )
    );

    // A coordinator that drops the reply without answering.
    let (calls, incoming) = async_channel::unbounded::<AdminCall>();
    std::thread::spawn(move || {
        while let Ok(call) = incoming.recv_blocking() {
            drop(call);
        }
    });
    let f = Fixture {
        server: AdminServer::start("127.0.0.1:0".parse().unwrap(), calls).unwrap(),
        ..f
    };
    let r = f.send("POST", "/mirrors/dr/pause", None);
    assert_eq!((r.status, r.json()["error"].clone()), (503, json!("unavailable")));
}

#[test]
fn start_binds_up_front_and_stop_is_prompt_with_idle_connections() {
    let f = fixture(Box::new(healthy));
    let taken = f.server.addr();
    let (calls, _incoming) = async_channel::unbounded();
    let err = AdminServer::start(taken, calls).err().expect("the port is taken");
    assert!(
        format!("{err:#}").contains(&format!("admin API: bind {taken}")),
        "{err:#}"
    );

    // A keep-alive connection left idle after a request does not hold
    // the stop up; nor does one that never sent anything.
    let mut idle = std::net::TcpStream::connect(taken).unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = idle.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let _silent = std::net::TcpStream::connect(taken).unwrap();
    let started = std::time::Instant::now();
    f.server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        started.elapsed()
    );
    assert!(
        std::net::TcpStream::connect(taken).is_err(),
        "still accepting after stop"
    );
}
#[test]
fn a_token_guards_every_route_but_health() {
    const TOKEN: &str = "s3cr3t-Token_0123456789";
    let token = AdminToken::new(&format!("  {TOKEN}\n")).unwrap();
    let f = fixture_with_token(Box::new(healthy), Some(token));
    let bearer = format!("Bearer {TOKEN}");
    let refused = |r: &Reply, message: &str, what: &str| {
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
        assert!(r.content_type.starts_with("application/json"), "{what}");
        assert!(!r.body.contains(TOKEN), "{what}: {}", r.body);
    };
    let missing = "the admin API requires a bearer token (Authorization: Bearer <token>)";
    let wrong = "the bearer token is not the admin API's";
    let scheme = "the admin API takes only bearer tokens (Authorization: Bearer <token>)";
    let routes = [
        ("GET", "/mirrors", None),
        ("POST", "/mirrors", Some(config_json().to_string())),
        ("GET", "/mirrors/dr", None),
        ("PUT", "/mirrors/dr", Some(config_json().to_string())),
        ("DELETE", "/mirrors/dr", None),
        ("POST", "/mirrors/dr/topics", Some(r#"{"topics": ["a"]}"#.to_owned())),
        ("POST", "/mirrors/dr/stop", None),
        ("POST", "/mirrors/dr/sync", None),
        ("GET", "/status", None),
        ("GET", "/metrics", None),
        // Unknown routes and wrong methods do not tell what exists.
        ("GET", "/nope", None),
        ("PUT", "/mirrors", None),
        ("POST", "/health", None),
    ];
    let prefix_of_token = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let longer_token = format!("Bearer {TOKEN}x");
    let basic = "Basic YWRtaW46czNjcjN0";
    for (method, path, body) in &routes {
        let what = format!("{method} {path}");
        refused(&f.send(method, path, body.as_deref()), missing, &what);
        refused(&f.send_as(method, path, body.as_deref(), &[""]), scheme, &what);
        refused(&f.send_as(method, path, body.as_deref(), &["Bearer"]), wrong, &what);
        refused(
            &f.send_as(method, path, body.as_deref(), &["Bearer wrong"]),
            wrong,
            &what,
        );
        refused(
            &f.send_as(method, path, body.as_deref(), &[&prefix_of_token]),
            wrong,
            &what,
        );
        refused(
            &f.send_as(method, path, body.as_deref(), &[&longer_token]),
            wrong,
            &what,
        );
        refused(&f.send_as(method, path, body.as_deref(), &[basic]), scheme, &what);
        // The token under another scheme is no better.
        refused(
            &f.send_as(method, path, body.as_deref(), &[&format!("Token {TOKEN}")]),
            scheme,
            &what,
        );
        refused(
            &f.send_as(method, path, body.as_deref(), &[&bearer, &bearer]),
            "more than one Authorization header",
            &what,
        );
    }
    assert!(f.seen().is_empty(), "nothing refused reached the coordinator");

    // The token: each route answers as without authentication. The
    // scheme is case-insensitive (RFC 7235).
    let lower = format!("bearer {TOKEN}");
    let expected = [200, 201, 200, 202, 200, 202, 202, 202, 200, 200, 404, 405, 405];
    for ((method, path, body), status) in routes.iter().zip(expected) {
        for authorization in [bearer.as_str(), lower.as_str()] {
            let r = f.send_as(method, path, body.as_deref(), &[authorization]);
            assert_eq!(r.status, status, "{method} {path} ({authorization:?}): {}", r.body);
            assert_eq!(r.www_authenticate, None);
        }
    }
    assert_eq!(
        f.seen().len(),
        2 * 10,
        "every known route reached the coordinator twice"
    );

    // Liveness probes need no token, with or without a wrong one.
    for authorization in [&[][..], &["Bearer wrong"]] {
        let r = f.send_as("GET", "/health", None, authorization);
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    }
    f.server.stop();
}

#[test]
fn only_an_unauthenticated_server_off_loopback_is_open_to_the_network() {
    let open = |addr: &str, authenticated| open_to_network(addr.parse().unwrap(), authenticated);
    let in_clear = |addr: &str, authenticated, tls| tokens_in_clear(addr.parse().unwrap(), authenticated, tls);
    for addr in ["127.0.0.1:9644", "127.0.0.2:1", "[::1]:9644"] {
        assert!(!open(addr, false), "{addr}");
        assert!(!in_clear(addr, true, false), "{addr}");
    }
    for addr in ["0.0.0.0:9644", "[::]:9644", "10.1.2.3:9644", "[fd00::1]:1"] {
        assert!(open(addr, false), "{addr}");
        assert!(!open(addr, true), "{addr}");
        // Tokens in clear off loopback; not with TLS, nor without tokens.
        assert!(in_clear(addr, true, false), "{addr}");
        assert!(!in_clear(addr, true, true) && !in_clear(addr, false, false), "{addr}");
    }
}

/// The hex SHA-256 of `token`, as the principals file holds it.
fn token_hash(token: &str) -> String {
    ringmirror_protocol::sasl::plain::password_digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A coordinator of three mirrors, `dr`, `other` and `secret`, whose
/// listings name all three.
fn three_mirrors(request: &AdminRequest) -> Result<AdminAnswer, AdminError> {
    let names = ["dr", "other", "secret"];
    let in_mirror = |mirror: &str, partition| PartitionView {
        mirror: mirror.into(),
        ..view("orders", partition)
    };
    Ok(match request {
        AdminRequest::ListMirrors => AdminAnswer::Mirrors {
            mirrors: names
                .iter()
                .map(|name| MirrorSummary {
                    name: (*name).into(),
                    bootstrap_servers: vec!["a:1".into()],
                    source_cluster_id: None,
                    partitions: 1,
                    states: BTreeMap::new(),
                })
                .collect(),
        },
        AdminRequest::Status => AdminAnswer::Status {
            partitions: names.iter().map(|m| in_mirror(m, 0)).collect(),
        },
        AdminRequest::Metrics => AdminAnswer::Metrics {
            metrics: MetricsSnapshot {
                partitions: names
                    .iter()
                    .map(|m| crate::admin::PartitionMetrics {
                        view: in_mirror(m, 0),
                        bytes_mirrored: 1,
                        batches_mirrored: 1,
                        epoch_bumps: 0,
                        crc_failures: 0,
                        truncations: 0,
                        divergences: 0,
                    })
                    .collect(),
                mirrors: names
                    .iter()
                    .map(|m| MirrorMetrics {
                        mirror: (*m).into(),
                        fetch_errors: BTreeMap::new(),
                        fetch_latency_us: vec![],
                        fetches: 1,
                        sync_halted: false,
                        topic_sync_errors: 0,
                        topic_deletions_pending: 0,
                        topic_recreations: 0,
                    })
                    .collect(),
                shard_events: None,
                shard_storage: Vec::new(),
            },
        },
        AdminRequest::DescribeMirror { mirror } => AdminAnswer::Status {
            partitions: vec![in_mirror(mirror, 0)],
        },
        other => return healthy(other),
    })
}

#[test]
fn principals_get_each_route_checked_against_its_cluster_mirror_operation() {
    use ringmirror_dataplane::security::acls::{AclPermissionType, PatternType, ResourceType};
    let dir = tempfile::tempdir().unwrap();
    let acls = Arc::new(AclStore::open(dir.path().join("acls")).unwrap());
    let acl = |name: &str, pattern, principal: &str, operation, permission| {
        AclBinding::from_any_host(
            ResourceType::ClusterMirror,
            name,
            pattern,
            principal,
            operation,
            permission,
        )
    };
    use AclOperation::{All, Alter, Create, Describe};
    use AclPermissionType::{Allow, Deny};
    use PatternType::{Literal, Prefixed};
    acls.create(&[
        acl("dr", Literal, "User:ro", Describe, Allow),
        acl("*", Literal, "User:ops", Alter, Allow),
        acl("secret", Literal, "User:ops", All, Deny),
        acl("new-", Prefixed, "User:maker", Create, Allow),
    ])
    .unwrap();
    let principals = AdminPrincipals::parse(
        &["ro", "ops", "maker", "nobody"]
            .map(|p| format!("User:{p} sha256:{}\n", token_hash(&format!("{p}-token"))))
            .concat(),
    )
    .unwrap();
    let f = fixture_with(
        Box::new(three_mirrors),
        AdminSecurity {
            token: Some(AdminToken::new("admin-token").unwrap()),
            principals: Some(principals),
            acls: Some(Arc::clone(&acls)),
            tls: None,
        },
    );
    let as_ = |who: &str| format!("Bearer {who}-token");
    let new_config = json!({"name": "new-dr", "bootstrap_servers": ["a:1"]}).to_string();
    let topics = r#"{"topics": ["orders"]}"#.to_owned();
    /// method, path, body, operation, mirror, success.
    type Route<'a> = (&'a str, String, Option<String>, &'a str, &'a str, u16);
    let routes: Vec<Route> = vec![
        ("POST", "/mirrors".into(), Some(new_config), "CREATE", "new-dr", 201),
        ("GET", "/mirrors/dr".into(), None, "DESCRIBE", "dr", 200),
        (
            "PUT",
            "/mirrors/dr".into(),
            Some(config_json().to_string()),
            "ALTER",
            "dr",
            202,
        ),
        ("DELETE", "/mirrors/dr".into(), None, "ALTER", "dr", 200),
        (
            "POST",
            "/mirrors/dr/topics".into(),
            Some(topics.clone()),
            "ALTER",
            "dr",
            202,
        ),
        ("DELETE", "/mirrors/dr/topics".into(), Some(topics), "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/pause".into(), None, "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/resume".into(), None, "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/stop".into(), None, "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/restart".into(), None, "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/sync".into(), None, "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/check".into(), None, "ALTER", "dr", 202),
        ("POST", "/mirrors/dr/verify".into(), None, "ALTER", "dr", 202),
        ("GET", "/mirrors/dr/verify".into(), None, "DESCRIBE", "dr", 200),
        ("POST", "/mirrors/secret/stop".into(), None, "ALTER", "secret", 202),
    ];
    // Who may: ro DESCRIBEs dr; ops ALTERs (so DESCRIBEs) all but
    // secret (DENY wins); maker CREATEs new-*; nobody nothing.
    let allowed = |who: &str, operation: &str, mirror: &str| match who {
        "ro" => operation == "DESCRIBE" && mirror == "dr",
        "ops" => operation != "CREATE" && mirror != "secret",
        "maker" => operation == "CREATE" && mirror.starts_with("new-"),
        _ => false,
    };
    for (method, path, body, operation, mirror, success) in &routes {
        for who in ["ro", "ops", "maker", "nobody"] {
            let r = f.send_as(method, path, body.as_deref(), &[&as_(who)]);
            let what = format!("{method} {path} as User:{who}");
            if allowed(who, operation, mirror) {
                assert_eq!(r.status, *success, "{what}: {}", r.body);
                assert_eq!(f.seen().len(), 1, "{what} reached the coordinator");
            } else {
                assert_eq!(
                    (r.status, r.json()),
                    (
                        403,
                        json!({
                            "error": "CLUSTER_MIRROR_AUTHORIZATION_FAILED",
                            "message": format!("User:{who} is not authorized to {operation} ClusterMirror {mirror:?}"),
                        })
                    ),
                    "{what}"
                );
                assert!(f.seen().is_empty(), "{what}: refused, yet the coordinator was asked");
            }
        }
        // The admin token may do everything.
        let r = f.send_as(method, path, body.as_deref(), &["Bearer admin-token"]);
        assert_eq!(r.status, *success, "{method} {path} as the admin: {}", r.body);
        f.seen();
    }

    // Listings: only what the caller may describe.
    let listed = |path: &str, list: &str, field: &str, who: &str| -> Vec<String> {
        let r = f.send_as("GET", path, None, &[&as_(who)]);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[field].as_str().unwrap().to_owned())
            .collect()
    };
    let names = |who| listed("/mirrors", "mirrors", "name", who);
    assert_eq!(names("ro"), ["dr"]);
    assert_eq!(names("ops"), ["dr", "other"]);
    assert!(names("nobody").is_empty() && names("maker").is_empty());
    assert_eq!(names("admin"), ["dr", "other", "secret"]);
    let status_mirrors = |who| listed("/status", "partitions", "mirror", who);
    assert_eq!(status_mirrors("ro"), ["dr"]);
    assert_eq!(status_mirrors("ops"), ["dr", "other"]);
    assert!(status_mirrors("nobody").is_empty());
    let metrics = f.send_as("GET", "/metrics", None, &[&as_("ro")]).body;
    assert!(metrics.contains(r#"mirror="dr""#), "{metrics}");
    assert!(
        !metrics.contains(r#"mirror="other""#) && !metrics.contains(r#"mirror="secret""#),
        "{metrics}"
    );
    let all = f.send_as("GET", "/metrics", None, &["Bearer admin-token"]).body;
    assert!(all.contains(r#"mirror="secret""#), "{all}");

    // ACLs: listed and changed by the admin token only; a change
    // applies from the next request on.
    for (method, body) in [
        ("GET", None),
        ("POST", Some(r#"{"acls": []}"#)),
        ("DELETE", Some(r#"{"acls": []}"#)),
    ] {
        let r = f.send_as(method, "/acls", body, &[&as_("ops")]);
        assert_eq!(
            (r.status, r.json()["error"].clone()),
            (403, json!("CLUSTER_AUTHORIZATION_FAILED")),
            "{method}"
        );
    }
    let grant = r#"{"acls": [{"principal": "User:ro", "operation": "alter", "mirror": "dr"}]}"#;
    let r = f.send_as("POST", "/acls", Some(grant), &["Bearer admin-token"]);
    assert_eq!(
        (r.status, r.json()),
        (
            201,
            json!({"answer": "acls", "acls": [{"principal": "User:ro", "operation": "alter", "mirror": "dr",
                   "pattern_type": "literal", "permission_type": "allow", "host": "*"}]})
        )
    );
    // Again: nothing new.
    let r = f.send_as("POST", "/acls", Some(grant), &["Bearer admin-token"]);
    assert_eq!((r.status, r.json()["acls"].clone()), (201, json!([])));
    assert_eq!(f.send_as("POST", "/mirrors/dr/stop", None, &[&as_("ro")]).status, 202);
    f.seen();
    let r = f.send_as("GET", "/acls", None, &["Bearer admin-token"]);
    assert_eq!(r.json()["acls"].as_array().unwrap().len(), 5, "{}", r.body);
    let r = f.send_as("DELETE", "/acls", Some(grant), &["Bearer admin-token"]);
    assert_eq!((r.status, r.json()["acls"].as_array().unwrap().len()), (200, 1));
    assert_eq!(f.send_as("POST", "/mirrors/dr/stop", None, &[&as_("ro")]).status, 403);
    // Only ClusterMirror ACLs of the operations the API checks.
    for (body, says) in [
        (
            r#"{"acls": [{"principal": "User:ro", "operation": "read", "mirror": "dr"}]}"#,
            "CREATE, ALTER, DESCRIBE or ALL",
        ),
        (
            r#"{"acls": [{"principal": "ro", "operation": "alter", "mirror": "dr"}]}"#,
            "could not parse principal",
        ),
        (
            r#"{"acls": [{"principal": "User:ro", "operation": "alter", "mirror": ""}]}"#,
            "resource name should not be empty",
        ),
        (r#"{"acls": []}"#, "names no ACLs"),
        (
            r#"{"acls": [{"principal": "User:ro", "operation": "alter", "topic": "dr"}]}"#,
            "unknown field",
        ),
    ] {
        let r = f.send_as("POST", "/acls", Some(body), &["Bearer admin-token"]);
        assert_eq!((r.status, r.json()["error"].clone()), (400, json!("invalid")), "{body}");
        assert!(
            r.json()["message"].as_str().unwrap().contains(says),
            "{body}: {}",
            r.body
        );
    }
    assert_eq!(acls.len(), 4);
    assert!(f.seen().is_empty());
    f.server.stop();
}
