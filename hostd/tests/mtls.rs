//! Mutual TLS end to end on loopback: the real `tls::serve` accept loop, real certificates from
//! the dev PKI, the real `client::Client`, plus raw rustls clients for the refusals that `Client`
//! cannot produce (no certificate, TLS 1.2).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Extension, State};
use axum::routing::get;
use axum::{Json, Router};
use hostd::admission::Rate;
use hostd::pki::{issue_client, CertificateAuthority, DevPki, IssuedCert, Validity};
use hostd::principal::{Principal, Role};
use hostd::tls::{self, ServeOptions};
use hostd_api::profile::Profile;
use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use serde_json::{json, Value};
use sovctl::client::{Client, ClientError};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

const TD: &str = "node1.sovereign.test";
const EXPORT_LEN: usize = 3 * 1024 * 1024 + 17;

struct Node {
    _tmp: tempfile::TempDir,
    pki: DevPki,
    addr: SocketAddr,
    url: String,
    /// Requests that reached a handler.
    hits: Arc<AtomicUsize>,
    /// Notified when `/v1/slow` has started.
    slow_started: Arc<Notify>,
    /// (path, bytes) of every upload that reached its handler.
    uploads: Uploads,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::io::Result<()>>,
}

type Uploads = Arc<std::sync::Mutex<Vec<(String, usize)>>>;

#[derive(Clone)]
struct AppState {
    hits: Arc<AtomicUsize>,
    slow_started: Arc<Notify>,
    uploads: Uploads,
}

fn app(state: AppState) -> Router {
    async fn whoami(
        State(AppState { hits, .. }): State<AppState>,
        Extension(p): Extension<Principal>,
        ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ) -> Json<Value> {
        hits.fetch_add(1, Ordering::SeqCst);
        Json(json!({"uri": p.to_string(), "principal": p, "peer": peer.to_string()}))
    }
    async fn echo(Extension(p): Extension<Principal>, Json(body): Json<Value>) -> Json<Value> {
        Json(json!({"name": p.name, "echo": body}))
    }
    async fn slow(State(state): State<AppState>) -> Json<Value> {
        state.slow_started.notify_one();
        tokio::time::sleep(Duration::from_millis(400)).await;
        Json(json!({"slow": "done"}))
    }
    /// Stands in for hostd's upload route: the whole body, its path and length kept.
    async fn upload(
        State(state): State<AppState>,
        axum::extract::Path((_, path)): axum::extract::Path<(String, String)>,
        body: axum::body::Bytes,
    ) -> (axum::http::StatusCode, Json<Value>) {
        state
            .uploads
            .lock()
            .unwrap()
            .push((path.clone(), body.len()));
        let written = json!({"path": path, "bytes": body.len()});
        (axum::http::StatusCode::CREATED, Json(written))
    }
    async fn export() -> Vec<u8> {
        (0..EXPORT_LEN).map(|i| (i % 251) as u8).collect()
    }
    Router::new()
        .route("/v1/whoami", get(whoami).delete(whoami))
        .route("/v1/echo", axum::routing::post(echo))
        .route("/v1/slow", get(slow))
        .route("/v1/export", get(export))
        .route("/v1/text", get(|| async { "plain text" }))
        .route("/v1/leases/{id}/files/{*path}", axum::routing::put(upload))
        .with_state(state)
}

async fn start_with(options: ServeOptions) -> Node {
    let tmp = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("https://127.0.0.1:{}", addr.port());
    let pki = DevPki::create(
        &tmp.path().join("pki"),
        TD,
        &["localhost", "127.0.0.1"],
        &[
            (Role::Operator, "ops"),
            (Role::Tenant, "acme"),
            (Role::Auditor, "eve"),
        ],
        &url,
    )
    .unwrap();
    let config = tls::server_config(
        &pki.ca_cert_path(),
        &pki.server_cert_path(),
        &pki.server_key_path(),
    )
    .unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let slow_started = Arc::new(Notify::new());
    let uploads = Uploads::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(tls::serve_with(
        listener,
        config,
        TD.to_owned(),
        app(AppState {
            hits: hits.clone(),
            slow_started: slow_started.clone(),
            uploads: uploads.clone(),
        }),
        async move {
            let _ = stopped.await;
        },
        options,
    ));
    Node {
        _tmp: tmp,
        pki,
        addr,
        url,
        hits,
        slow_started,
        uploads,
        stop: Some(stop),
        server,
    }
}

async fn start() -> Node {
    start_with(ServeOptions::default()).await
}

impl Node {
    fn profile(&self, name: &str) -> Profile {
        Profile::load(&self.pki.profile_dir(name)).unwrap()
    }

    fn client(&self, name: &str) -> Client {
        Client::new(&self.profile(name)).unwrap()
    }

    /// Writes `cert` to a scratch profile trusting this node's CA and returns a client for it.
    fn client_with(&self, label: &str, cert: &IssuedCert) -> Client {
        let dir = self._tmp.path().join(label);
        std::fs::create_dir_all(&dir).unwrap();
        cert.write(&dir.join("cert.pem"), &dir.join("key.pem"))
            .unwrap();
        Client::new(&Profile::new(
            &self.url,
            self.pki.ca_cert_path(),
            dir.join("cert.pem"),
            dir.join("key.pem"),
        ))
        .unwrap()
    }
}

fn raw_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in tls::load_certs(ca).unwrap() {
        roots.add(c).unwrap();
    }
    let builder = ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                tls::load_certs(cert).unwrap(),
                tls::load_private_key(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![tls::ALPN_HTTP1.to_vec()];
    Arc::new(config)
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Alert(AlertDescription),
    Closed,
    Other(String),
}

fn alert_of(e: &std::io::Error) -> Option<AlertDescription> {
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(a) => Some(*a),
        _ => None,
    }
}

/// Handshakes with a raw rustls client and waits for what the server does next. Sends no HTTP,
/// so the server has nothing unread when it closes and the alert always reaches us intact.
async fn raw_outcome(addr: SocketAddr, config: Arc<ClientConfig>) -> Outcome {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut stream = match TlsConnector::from(config).connect(name, tcp).await {
        Ok(s) => s,
        Err(e) => {
            return alert_of(&e).map_or_else(|| Outcome::Other(e.to_string()), Outcome::Alert)
        }
    };
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
        Err(_) => Outcome::Other("server kept the connection open".into()),
        Ok(Ok(0)) => Outcome::Closed,
        Ok(Ok(n)) => Outcome::Other(format!("server sent {n} bytes")),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Outcome::Closed,
        Ok(Err(e)) => alert_of(&e).map_or_else(|| Outcome::Other(e.to_string()), Outcome::Alert),
    }
}

fn days_ago(from: i64, to: i64) -> Validity {
    let now = time::OffsetDateTime::now_utc();
    Validity {
        not_before: now - time::Duration::days(from),
        not_after: now - time::Duration::days(to),
    }
}

#[tokio::test]
async fn each_role_reaches_handlers_with_its_principal() {
    let node = start().await;
    for (name, role) in [("ops", "operator"), ("acme", "tenant"), ("eve", "auditor")] {
        let client = node.client(name);
        let (status, body) = client.get("/v1/whoami").await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body["uri"], format!("spiffe://{TD}/{role}/{name}"));
        assert_eq!(
            body["principal"],
            json!({"trust_domain": TD, "role": role, "name": name})
        );
        let (status, body) = client
            .post("/v1/echo", &json!({"n": [1, 2, 3]}))
            .await
            .unwrap();
        assert_eq!((status, &body["name"]), (200, &json!(name)));
        assert_eq!(body["echo"], json!({"n": [1, 2, 3]}));
        let (status, _) = client.delete("/v1/whoami").await.unwrap();
        assert_eq!(status, 200);
    }
    assert_eq!(node.hits.load(Ordering::SeqCst), 6);

    // Error statuses come back as statuses, non-JSON bodies as a clear error.
    let client = node.client("ops");
    let (status, _) = client.get("/v1/missing").await.unwrap();
    assert_eq!(status, 404);
    match client.get("/v1/text").await {
        Err(ClientError::NotJson {
            status: 200,
            snippet,
        }) => assert_eq!(snippet, "plain text"),
        other => panic!("expected NotJson, got {other:?}"),
    }
    assert!(matches!(
        client.get("v1/whoami").await,
        Err(ClientError::BadPath(_))
    ));
}

#[tokio::test]
async fn keep_alive_serves_many_requests_over_one_connection() {
    let node = start().await;
    let client = node.client("acme");
    let mut peers = std::collections::HashSet::new();
    for _ in 0..100 {
        let (status, body) = client.get("/v1/whoami").await.unwrap();
        assert_eq!(status, 200);
        peers.insert(body["peer"].as_str().unwrap().to_owned());
    }
    assert_eq!(peers.len(), 1, "requests used {} connections", peers.len());
    assert_eq!(node.hits.load(Ordering::SeqCst), 100);
}

#[tokio::test]
async fn client_reconnects_after_the_server_closes_an_idle_connection() {
    let node = start_with(ServeOptions {
        header_read_timeout: Duration::from_millis(500),
        ..ServeOptions::default()
    })
    .await;
    let client = node.client("ops");
    let (_, first) = client.get("/v1/whoami").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, second) = client.get("/v1/whoami").await.unwrap();
    assert_eq!(status, 200);
    assert_ne!(first["peer"], second["peer"], "expected a new connection");
}

#[tokio::test]
async fn missing_client_certificate_is_refused_in_the_handshake() {
    let node = start().await;
    let config = raw_config(&node.pki.ca_cert_path(), None, &[&rustls::version::TLS13]);
    assert_eq!(
        raw_outcome(node.addr, config).await,
        Outcome::Alert(AlertDescription::CertificateRequired)
    );
    assert_eq!(node.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn certificate_from_another_ca_is_refused() {
    let node = start().await;
    let other_tmp = tempfile::tempdir().unwrap();
    // Same trust domain and names, different CA: only the CA tells them apart.
    let other = DevPki::create(
        other_tmp.path(),
        TD,
        &["127.0.0.1"],
        &[(Role::Operator, "ops")],
        &node.url,
    )
    .unwrap();
    let dir = other.profile_dir("ops");
    let config = raw_config(
        &node.pki.ca_cert_path(),
        Some((&dir.join("cert.pem"), &dir.join("key.pem"))),
        &[&rustls::version::TLS13],
    );
    assert_eq!(
        raw_outcome(node.addr, config).await,
        Outcome::Alert(AlertDescription::UnknownCA)
    );

    // A CA impersonating ours by name (same subject, different key) fails on the signature.
    let ca_der = tls::load_certs(&node.pki.ca_cert_path()).unwrap().remove(0);
    let (_, parsed) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    let our_cn = parsed
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let impostor = CertificateAuthority::generate(&our_cn, Validity::days_from_now(1)).unwrap();
    let ops = Principal::new(TD, Role::Operator, "ops").unwrap();
    let cert = issue_client(&impostor, &ops, Validity::days_from_now(1)).unwrap();
    node.client_with("impostor", &cert);
    let imp = node._tmp.path().join("impostor");
    let config = raw_config(
        &node.pki.ca_cert_path(),
        Some((&imp.join("cert.pem"), &imp.join("key.pem"))),
        &[&rustls::version::TLS13],
    );
    assert_eq!(
        raw_outcome(node.addr, config).await,
        Outcome::Alert(AlertDescription::DecryptError)
    );

    let foreign = Profile {
        ca: node.pki.ca_cert_path(),
        ..Profile::load(&dir).unwrap()
    };
    let err = Client::new(&foreign)
        .unwrap()
        .get("/v1/whoami")
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Rejected { .. }), "{err:?}");

    // And the client refuses a server whose certificate is not from the profile's CA.
    let err = Client::new(&Profile::load(&dir).unwrap())
        .unwrap()
        .get("/v1/whoami")
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Handshake { .. }), "{err:?}");
    assert!(err.to_string().contains("CA"), "{err}");
    assert_eq!(node.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn expired_and_not_yet_valid_certificates_are_refused() {
    let node = start().await;
    let ops = Principal::new(TD, Role::Operator, "ops").unwrap();
    for (label, validity) in [("expired", days_ago(30, 1)), ("future", days_ago(-1, -30))] {
        let cert = issue_client(node.pki.ca(), &ops, validity).unwrap();
        let dir = node._tmp.path().join(label);
        let client = node.client_with(label, &cert);
        let config = raw_config(
            &node.pki.ca_cert_path(),
            Some((&dir.join("cert.pem"), &dir.join("key.pem"))),
            &[&rustls::version::TLS13],
        );
        assert_eq!(
            raw_outcome(node.addr, config).await,
            Outcome::Alert(AlertDescription::CertificateExpired),
            "{label}"
        );
        let err = client.get("/v1/whoami").await.unwrap_err();
        assert!(
            matches!(err, ClientError::Rejected { .. }),
            "{label}: {err:?}"
        );
    }
    // The same principal with a current certificate works, so the refusal was the dates.
    let current = issue_client(node.pki.ca(), &ops, Validity::days_from_now(1)).unwrap();
    let (status, _) = node
        .client_with("current", &current)
        .get("/v1/whoami")
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(node.hits.load(Ordering::SeqCst), 1);
}

/// The CA signs leaves only: a certificate issued through a subordinate CA that the node's CA
/// issued with CA:TRUE (the chain sent in full) is refused in the handshake, although each
/// link verifies; the same principal issued directly by the CA is served.
#[tokio::test]
async fn a_chain_through_a_subordinate_ca_is_refused() {
    let node = start().await;
    let ops = Principal::new(TD, Role::Operator, "operator").unwrap();
    let sub = node
        .pki
        .ca()
        .issue_intermediate("rogue sub-CA", Validity::days_from_now(30))
        .unwrap();
    let leaf = issue_client(&sub, &ops, Validity::days_from_now(1)).unwrap();
    let dir = node._tmp.path().join("sub");
    std::fs::create_dir_all(&dir).unwrap();
    leaf.write(&dir.join("leaf.pem"), &dir.join("key.pem"))
        .unwrap();
    let chain = format!("{}{}", leaf.cert_pem(), sub.cert_pem());
    std::fs::write(dir.join("cert.pem"), chain).unwrap();
    let config = raw_config(
        &node.pki.ca_cert_path(),
        Some((&dir.join("cert.pem"), &dir.join("key.pem"))),
        &[&rustls::version::TLS13],
    );
    assert!(
        matches!(raw_outcome(node.addr, config).await, Outcome::Alert(_)),
        "a chain through a sub-CA must be refused in the handshake"
    );
    let client = Client::new(&Profile::new(
        &node.url,
        node.pki.ca_cert_path(),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    ))
    .unwrap();
    let err = client.get("/v1/whoami").await.unwrap_err();
    assert!(matches!(err, ClientError::Rejected { .. }), "{err:?}");
    let direct = issue_client(node.pki.ca(), &ops, Validity::days_from_now(1)).unwrap();
    let (status, _) = node
        .client_with("direct", &direct)
        .get("/v1/whoami")
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn tls12_only_client_is_refused() {
    let node = start().await;
    let dir = node.pki.profile_dir("ops");
    let config = raw_config(
        &node.pki.ca_cert_path(),
        Some((&dir.join("cert.pem"), &dir.join("key.pem"))),
        &[&rustls::version::TLS12],
    );
    assert_eq!(
        raw_outcome(node.addr, config).await,
        Outcome::Alert(AlertDescription::ProtocolVersion)
    );
}

#[tokio::test]
async fn server_certificate_is_no_client_certificate() {
    // Right CA, but EKU serverAuth and no SPIFFE ID: refused for its purpose in the handshake.
    let node = start().await;
    let config = raw_config(
        &node.pki.ca_cert_path(),
        Some((&node.pki.server_cert_path(), &node.pki.server_key_path())),
        &[&rustls::version::TLS13],
    );
    assert_eq!(
        raw_outcome(node.addr, config).await,
        Outcome::Alert(AlertDescription::UnsupportedCertificate)
    );
}

#[tokio::test]
async fn spiffe_id_of_another_trust_domain_is_disconnected() {
    let node = start().await;
    for (label, principal) in [
        (
            "foreign-td",
            Principal::new("evil.example", Role::Operator, "ops").unwrap(),
        ),
        (
            "parent-td",
            Principal::new("sovereign.test", Role::Operator, "ops").unwrap(),
        ),
    ] {
        // Signed by the node's own CA: the chain is fine, the identity is not ours.
        let cert = issue_client(node.pki.ca(), &principal, Validity::days_from_now(1)).unwrap();
        let dir = node._tmp.path().join(label);
        let client = node.client_with(label, &cert);
        let config = raw_config(
            &node.pki.ca_cert_path(),
            Some((&dir.join("cert.pem"), &dir.join("key.pem"))),
            &[&rustls::version::TLS13],
        );
        assert_eq!(
            raw_outcome(node.addr, config).await,
            Outcome::Closed,
            "{label}"
        );
        let err = client.get("/v1/whoami").await.unwrap_err();
        assert!(
            matches!(err, ClientError::Closed { .. }),
            "{label}: {err:?}"
        );
    }
    assert_eq!(node.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn connection_refused_says_where_hostd_was_expected() {
    let node = start().await;
    // A port that was free a moment ago and has no listener now.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("https://127.0.0.1:{port}");
    let client = Client::new(&Profile {
        server: url.clone(),
        ..node.profile("ops")
    })
    .unwrap();
    let err = client.get("/v1/whoami").await.unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("is hostd running at {url}")),
        "{err}"
    );
}

#[tokio::test]
async fn raw_and_streamed_downloads() {
    let node = start().await;
    let client = node.client("eve");
    let (status, bytes) = client.get_bytes("/v1/export").await.unwrap();
    assert_eq!((status, bytes.len()), (200, EXPORT_LEN));
    assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));

    let mut out: Vec<u8> = Vec::new();
    let (status, written) = client.download("/v1/export", &mut out).await.unwrap();
    assert_eq!((status, written), (200, EXPORT_LEN as u64));
    assert_eq!(out, bytes);

    let mut nothing: Vec<u8> = Vec::new();
    let err = client
        .download("/v1/missing", &mut nothing)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Status { status: 404, .. }),
        "{err:?}"
    );
    assert!(nothing.is_empty());
    // The connection is still usable after all that.
    assert_eq!(client.get("/v1/whoami").await.unwrap().0, 200);
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests_then_stops() {
    let mut node = start().await;
    let client = Arc::new(node.client("ops"));
    // An idle kept-alive connection must not hold shutdown up.
    let idle = node.client("acme");
    assert_eq!(idle.get("/v1/whoami").await.unwrap().0, 200);

    let slow = {
        let client = client.clone();
        tokio::spawn(async move { client.get("/v1/slow").await })
    };
    node.slow_started.notified().await;
    node.stop.take().unwrap().send(()).unwrap();

    let (status, body) = slow.await.unwrap().unwrap();
    assert_eq!((status, body), (200, json!({"slow": "done"})));
    tokio::time::timeout(Duration::from_secs(5), &mut node.server)
        .await
        .expect("serve() did not return after shutdown")
        .unwrap()
        .unwrap();
    let err = node.client("ops").get("/v1/whoami").await.unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
}

#[tokio::test]
async fn stalled_handshake_is_cut_off() {
    let node = start_with(ServeOptions {
        handshake_timeout: Duration::from_millis(200),
        ..ServeOptions::default()
    })
    .await;
    let mut tcp = TcpStream::connect(node.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("server never closed a silent connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

#[tokio::test]
async fn oversized_headers_are_refused_and_the_server_keeps_serving() {
    let node = start().await;
    let dir = node.pki.profile_dir("ops");
    let config = raw_config(
        &node.pki.ca_cert_path(),
        Some((&dir.join("cert.pem"), &dir.join("key.pem"))),
        &[&rustls::version::TLS13],
    );
    let tcp = TcpStream::connect(node.addr).await.unwrap();
    let mut tls = TlsConnector::from(config)
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    let big = "x".repeat(64 * 1024);
    let request = format!("GET /v1/whoami HTTP/1.1\r\nhost: a\r\nx-big: {big}\r\n\r\n");
    use tokio::io::AsyncWriteExt;
    let _ = tls.write_all(request.as_bytes()).await;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut response)).await;
    let head = String::from_utf8_lossy(&response);
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    assert_eq!(node.hits.load(Ordering::SeqCst), 0);
    assert_eq!(node.client("ops").get("/v1/whoami").await.unwrap().0, 200);
}

/// Plain TCP connections that never start TLS (a stranger's idle sockets) cannot lock the
/// operator out: the accept loop never waits, and a full handshake pool drops its oldest.
#[tokio::test]
async fn idle_sockets_do_not_lock_out_the_operator() {
    let node = start_with(ServeOptions {
        max_connections: 64,
        max_handshaking: 16,
        handshake_timeout: Duration::from_secs(10),
        ..ServeOptions::default()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(tokio::net::TcpStream::connect(node.addr).await.unwrap());
    }
    let ops = node.client("ops").with_timeout(Duration::from_secs(3));
    let started = std::time::Instant::now();
    let (status, _) = ops.get("/v1/whoami").await.unwrap();
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(idle);
}

/// A tenant holds at most its share of connections, tenants together theirs, and the
/// operator always gets in; more requests in flight than allowed are answered 429 at once.
#[tokio::test]
async fn a_tenant_cannot_take_the_operators_connections() {
    let node = start_with(ServeOptions {
        max_connections: 12,
        max_tenant_connections: 8,
        max_connections_per_principal: 4,
        ..ServeOptions::default()
    })
    .await;
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..10 {
        let c = node.client("acme");
        match c.get("/v1/whoami").await {
            Ok((200, _)) => held.push(c),
            Ok((s, b)) => panic!("{s} {b}"),
            Err(ClientError::Closed { .. }) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!((held.len(), refused), (4, 6));
    let (status, _) = node.client("ops").get("/v1/whoami").await.unwrap();
    assert_eq!(status, 200);
    drop(held);
    // The slots come back once the server has seen the tenant's connections close (its own
    // tasks, which a loaded machine may run late).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match node.client("acme").get("/v1/whoami").await {
            Ok((200, _)) => break,
            Err(ClientError::Closed { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => panic!("{other:?}"),
        }
    }
}

fn rate(per_sec: u32, burst: u32) -> ServeOptions {
    ServeOptions {
        tenant_rate: Some(Rate { per_sec, burst }),
        ..ServeOptions::default()
    }
}

/// A tenant past its burst is answered 429, saying when to come back, before any handler
/// runs; operators and auditors are not held to a rate; a client that waits as told gets
/// every answer, each request handled once.
#[tokio::test]
async fn a_tenant_over_its_request_rate_is_told_when_to_come_back() {
    // One a second: the three requests below have a second between the first and the third
    // before a token comes back, however busy the machine.
    let node = start_with(rate(1, 2)).await;
    let impatient = node.client("acme").with_throttle_wait(Duration::ZERO);
    for _ in 0..2 {
        assert_eq!(impatient.get("/v1/whoami").await.unwrap().0, 200);
    }
    let (status, body) = impatient.get("/v1/whoami").await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("request rate; retry in 1 s"),
        "{body}"
    );
    assert_eq!(node.hits.load(Ordering::SeqCst), 2);
    for name in ["ops", "eve"] {
        let c = node.client(name).with_throttle_wait(Duration::ZERO);
        for _ in 0..10 {
            assert_eq!(c.get("/v1/whoami").await.unwrap().0, 200, "{name}");
        }
    }
    let patient = node.client("acme");
    let started = std::time::Instant::now();
    for _ in 0..3 {
        assert_eq!(patient.get("/v1/whoami").await.unwrap().0, 200);
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(node.hits.load(Ordering::SeqCst), 2 + 20 + 3);
}

/// `sovctl cp -r` of more files than the tenant's burst goes at its rate: every file is sent
/// again, whole, after the wait the node asked for, and each arrives exactly once.
#[tokio::test]
async fn a_throttled_recursive_copy_sends_every_file_once() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cp {
        #[command(flatten)]
        args: sovctl::cli::cp::CpArgs,
    }
    let node = start_with(rate(3, 2)).await;
    let local = tempfile::tempdir().unwrap();
    let mut want = Vec::new();
    for i in 0..7 {
        let name = format!("f{i}");
        std::fs::write(local.path().join(&name), vec![b'x'; 1000 + i]).unwrap();
        want.push((format!("in/{name}"), 1000 + i));
    }
    let src = local.path().to_str().unwrap();
    let cp = Cp::parse_from(["cp", "-q", "-r", src, "lease-1:in"]).args;
    let started = std::time::Instant::now();
    let exit = sovctl::cli::cp::cp(node.client("acme"), cp, true).await;
    assert!(exit.is_ok(), "{:?}", exit.err().map(|f| f.message));
    assert!(started.elapsed() >= Duration::from_secs(1), "the rate held");
    let mut got = node.uploads.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, want);
    // Told to wait longer than it may, the client gives the refusal to its caller (a node of
    // one request a second, so the upload comes well within the second after the first).
    let strict = start_with(rate(1, 1)).await;
    let impatient = strict.client("acme").with_throttle_wait(Duration::ZERO);
    assert_eq!(impatient.get("/v1/whoami").await.unwrap().0, 200);
    let file = tokio::fs::File::open(local.path().join("f0"))
        .await
        .unwrap();
    let refused = impatient.upload("lease-1", "x", file, 1000, |_| {}).await;
    match refused {
        Err(ClientError::Throttled { after, body }) => {
            assert_eq!(after, Duration::from_secs(1));
            assert!(body.error.contains("request rate"), "{}", body.error);
        }
        other => panic!("{other:?}"),
    }
}
