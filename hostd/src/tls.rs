//! The mTLS front door of the hostd API.
//!
//! Every connection is TLS 1.3 with a mandatory client certificate chaining to the node's CA;
//! a missing, foreign or expired certificate is refused inside the handshake, before any HTTP is
//! parsed. After the handshake the caller's [`Principal`] is taken from the certificate's SPIFFE
//! ID and attached to every request on that connection, so axum handlers simply take
//! `Extension<Principal>` and can never see an unauthenticated request.
//!
//! Design choices, and why:
//! - **ring is selected explicitly** for every config: a process-wide default provider would make
//!   the TLS behaviour depend on which crates happen to be linked in.
//! - **No session resumption** (no tickets, no session cache): a resumed session would skip the
//!   certificate check, letting an expired certificate keep working. With HTTP keep-alive the
//!   cost of a full handshake is paid once per connection anyway.
//! - **HTTP/1.1 only**, announced by ALPN; the API is request/response JSON plus one streamed
//!   export, which HTTP/1.1 serves well without HTTP/2's larger attack surface.
//! - **Bounded everything**: concurrent connections, handshake time, header size and count, time
//!   to send headers (which also reaps idle keep-alive connections), and the shutdown drain.

use attest::report::report;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::admission::{
    Admission, HandshakeSlot, Handshaking, InFlight, Limits, LogLimiter, Rate, RequestRate,
};
use crate::principal::Principal;

/// The only application protocol spoken over the TLS channel.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why a TLS configuration could not be built. Always names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Pem(#[from] keyfile::pem::PemError),
    #[error("{}: CA certificate rejected", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("client certificate verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("certificate {} / key {} unusable", cert.display(), key.display())]
    CertKey {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("TLS configuration")]
    Config(#[source] rustls::Error),
}

/// The crypto provider used for every hostd TLS config (sovctl selects the same one).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate in a PEM file (leaf first for chains). Errors if there is none.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    Ok(keyfile::pem::load_certs(path)?)
}

/// Reads the first private key in a PEM file with the rules of every private key file
/// (`keyfile`): refused when group or others may read it, wiped from memory after parsing.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    Ok(keyfile::pem::load_private_key(path)?)
}

fn root_store(ca_pem: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(ca_pem)? {
        roots.add(cert).map_err(|source| TlsError::BadCa {
            path: ca_pem.to_owned(),
            source,
        })?;
    }
    Ok(roots)
}

/// The client certificates hostd accepts: a leaf issued directly by a CA in the node's CA
/// file, nothing longer. The API CA signs leaves only (docs/pki.md); a chain through a
/// subordinate CA, even one that CA issued with CA:TRUE, is refused in the handshake, so
/// whoever holds a leaf's key cannot mint principals. (webpki alone does not enforce the
/// CA's path length here.) Everything else is the WebPKI verifier's.
#[derive(Debug)]
struct LeafOnly(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for LeafOnly {
    fn offer_client_auth(&self) -> bool {
        self.0.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        if !intermediates.is_empty() {
            tracing::warn!(
                intermediates = intermediates.len(),
                "client certificate chain through a subordinate CA refused"
            );
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        self.0.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The hostd server config: TLS 1.3 only, client certificate mandatory and verified against
/// `ca_pem` (every certificate in that file is a trust anchor), no session resumption.
pub fn server_config(
    ca_pem: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let roots = root_store(ca_pem)?;
    let verifier = Arc::new(LeafOnly(
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?,
    ));
    let chain = load_certs(cert)?;
    let private_key = load_private_key(key)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, private_key)
        .map_err(|source| TlsError::CertKey {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Limits applied by [`serve_with`] (see [`crate::admission`] for why each exists). The
/// defaults suit a node API with a handful of operators and many tenants, and hold under a
/// hostile tenant or stranger (docs/operations.md, "Limits").
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Authenticated connections served at once, all principals together.
    pub max_connections: usize,
    /// Authenticated connections of all tenants together; the rest of `max_connections` is
    /// kept for operators and auditors.
    pub max_tenant_connections: usize,
    /// Authenticated connections of one principal.
    pub max_connections_per_principal: usize,
    /// Requests of one principal in flight at once; more are answered 429 at once.
    pub max_requests_per_principal: usize,
    /// Each tenant's request rate; beyond it, 429 with `Retry-After`. None here: hostd takes
    /// it from `[api] tenant_requests_per_sec` and `tenant_request_burst`.
    pub tenant_rate: Option<Rate>,
    /// Connections still in the TLS handshake; when full, the oldest is dropped.
    pub max_handshaking: usize,
    /// Time a client gets to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time a client gets to send a request's headers, counted from when hostd starts waiting
    /// for them; this also closes keep-alive connections idle for that long.
    pub header_read_timeout: Duration,
    /// Most header fields in one request.
    pub max_headers: usize,
    /// Most bytes of request line plus headers.
    pub max_header_bytes: usize,
    /// After shutdown is signalled, how long in-flight requests may take before their
    /// connections are cut.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: 1024,
            max_tenant_connections: 768,
            max_connections_per_principal: 32,
            max_requests_per_principal: 16,
            tenant_rate: None,
            max_handshaking: 512,
            handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(30),
            max_headers: 64,
            max_header_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Serves `app` over mutual TLS on `listener` until `shutdown` resolves, with
/// [`ServeOptions::default`] limits. See [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    trust_domain: String,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(
        listener,
        config,
        trust_domain,
        app,
        shutdown,
        ServeOptions::default(),
    )
    .await
}

/// Serves `app` over mutual TLS on `listener` until `shutdown` resolves.
///
/// Every request reaching `app` carries two extensions: the caller's [`Principal`] and
/// `ConnectInfo<SocketAddr>` with the peer address. A client whose (CA-verified) certificate
/// has no valid SPIFFE ID of `trust_domain` is disconnected right after the handshake.
///
/// On shutdown the listener is closed at once, idle keep-alive connections are closed, and
/// requests in flight get `options.shutdown_grace` to finish. Returns an error only if the
/// listener itself is unusable; per-connection failures are logged and never stop the server.
pub async fn serve_with(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    trust_domain: String,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: ServeOptions,
) -> io::Result<()> {
    let handshaking = Handshaking::new(options.max_handshaking);
    let logs = Arc::new(LogLimiter::new(Duration::from_secs(10)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let template = Connection {
        acceptor: TlsAcceptor::from(config),
        trust_domain: trust_domain.into(),
        app,
        http: http_builder(&options),
        stop: stop_rx,
        handshake_timeout: options.handshake_timeout,
        admission: Admission::new(Limits {
            total: options.max_connections.max(1),
            tenants: options.max_tenant_connections,
            per_principal: options.max_connections_per_principal.max(1),
        }),
        in_flight: InFlight::new(options.max_requests_per_principal),
        rate: RequestRate::new(options.tenant_rate),
        logs: logs.clone(),
    };
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        // Accepting never waits for a slot: a full pool drops its oldest handshake instead.
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = accept(&listener, &logs) => accepted?,
        };
        let (slot, evicted) = handshaking.enter();
        if evicted {
            if let Some(n) = logs.hit("handshake-pool-full", std::time::Instant::now()) {
                tracing::warn!(
                    dropped = n,
                    pool = options.max_handshaking,
                    "handshake pool full: dropped the oldest pending handshakes"
                );
            }
        }
        connections.spawn(template.clone().run(tcp, peer, slot));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drain(connections, options.shutdown_grace).await;
    Ok(())
}

/// HTTP/1.1 with keep-alive and the options' bounds on headers.
fn http_builder(options: &ServeOptions) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(options.header_read_timeout)
        .max_headers(options.max_headers)
        .max_header_size(options.max_header_bytes);
    http
}

/// The next connection. Errors that concern one connection are skipped; others (typically
/// EMFILE/ENFILE) are logged and retried after a second instead of spinning. Only a listener
/// that cannot accept at all (`InvalidInput`) is an error.
async fn accept(listener: &TcpListener, logs: &LogLimiter) -> io::Result<(TcpStream, SocketAddr)> {
    loop {
        match listener.accept().await {
            Ok(accepted) => return Ok(accepted),
            Err(e) if is_per_connection_error(&e) => continue,
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(e),
            Err(e) => {
                if let Some(n) = logs.hit("accept", std::time::Instant::now()) {
                    tracing::error!(error = %report(&e), events = n, "accept failed; retrying in 1 s");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Lets the connections in flight finish within `grace` (they have been told to stop), then
/// closes the rest.
async fn drain(mut connections: JoinSet<()>, grace: Duration) {
    if !connections.is_empty() {
        tracing::info!(
            connections = connections.len(),
            "shutting down; draining connections"
        );
    }
    let all_done = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all_done).await.is_err() {
        tracing::warn!(
            connections = connections.len(),
            grace_s = grace.as_secs(),
            "shutdown grace period over; closing remaining connections"
        );
        connections.shutdown().await;
    }
}

/// Errors that concern one incoming connection (already gone), not the listener.
fn is_per_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Resolves once shutdown has been signalled (or the server loop is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard returned by `wait_for` is not `Send`; drop it before returning.
    let _ = stop.wait_for(|stop| *stop).await.map(|_| ());
}

/// Everything one connection task needs (cloned from one template per connection).
#[derive(Clone)]
struct Connection {
    acceptor: TlsAcceptor,
    trust_domain: Arc<str>,
    app: axum::Router,
    http: hyper::server::conn::http1::Builder,
    stop: watch::Receiver<bool>,
    handshake_timeout: Duration,
    admission: Arc<Admission>,
    in_flight: Arc<InFlight>,
    rate: Arc<RequestRate>,
    logs: Arc<LogLimiter>,
}

/// A 429 answered without running the handler: the principal has too many requests in flight.
fn too_many_requests() -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = hostd_api::answer::ErrorBody::new(
        "too many requests in flight for this client; retry when earlier ones have finished",
    );
    (
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        [(axum::http::header::RETRY_AFTER, "1")],
        axum::Json(body),
    )
        .into_response()
}

/// A 429 answered without running the handler: the tenant has spent its burst, and may send
/// its next request after `wait` (rounded up to whole seconds, as `Retry-After` counts).
fn over_rate(wait: Duration) -> axum::response::Response {
    use axum::response::IntoResponse;
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = secs.max(1);
    let body = hostd_api::answer::ErrorBody::new(format!(
        "too many requests from this tenant: over its request rate; retry in {secs} s"
    ));
    (
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        [(axum::http::header::RETRY_AFTER, secs.to_string())],
        axum::Json(body),
    )
        .into_response()
}

/// Whether `principal` may send a request now ([`RequestRate::admit`]); refusals are logged
/// at most once per interval.
fn within_rate(
    rate: &RequestRate,
    logs: &LogLimiter,
    principal: &Principal,
    peer: SocketAddr,
) -> Result<(), Duration> {
    let now = std::time::Instant::now();
    let admitted = rate.admit(principal, now);
    if let Err(wait) = admitted {
        if let Some(n) = logs.hit("over-rate", now) {
            tracing::warn!(%peer, principal = %principal, wait_ms = wait.as_millis() as u64,
                events = n, "request refused: tenant over its request rate");
        }
    }
    admitted
}

impl Connection {
    async fn run(mut self, tcp: TcpStream, peer: SocketAddr, slot: HandshakeSlot) {
        let _ = tcp.set_nodelay(true);
        let Some(tls) = self.handshake(tcp, peer, slot).await else {
            return;
        };
        let Some(principal) = self.principal(&tls, peer) else {
            close(tls).await;
            return;
        };
        let _admitted = match self.admission.admit(&principal) {
            Ok(a) => a,
            Err(why) => {
                if let Some(n) = self
                    .logs
                    .hit("connection-refused", std::time::Instant::now())
                {
                    tracing::warn!(%peer, principal = %principal, bound = ?why, events = n,
                        "connection refused: too many connections");
                }
                close(tls).await;
                return;
            }
        };
        tracing::debug!(%peer, principal = %principal, "mTLS connection established");
        self.serve(tls, principal, peer).await;
    }

    /// The TLS handshake, within the handshake timeout; `None` if it failed, timed out, its
    /// slot was given to a newer handshake, or the server is stopping.
    async fn handshake(
        &mut self,
        tcp: TcpStream,
        peer: SocketAddr,
        mut slot: HandshakeSlot,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        let handshake = tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(tcp));
        let now = std::time::Instant::now;
        tokio::select! {
            result = handshake => match result {
                Ok(Ok(tls)) => Some(tls),
                Ok(Err(e)) => {
                    // Includes every refused client certificate (none, unknown CA, expired).
                    if let Some(n) = self.logs.hit("handshake-failed", now()) {
                        tracing::warn!(%peer, error = %report(&e), events = n, "TLS handshake failed");
                    }
                    None
                }
                Err(_) => {
                    if let Some(n) = self.logs.hit("handshake-timeout", now()) {
                        tracing::warn!(%peer, timeout_s = self.handshake_timeout.as_secs(), events = n, "TLS handshake timed out");
                    }
                    None
                }
            },
            _ = &mut slot.evicted => None,
            () = stopped(&mut self.stop) => None,
        }
    }

    /// The principal the client certificate names; `None` (logged) if it names none.
    fn principal(
        &self,
        tls: &tokio_rustls::server::TlsStream<TcpStream>,
        peer: SocketAddr,
    ) -> Option<Principal> {
        let leaf = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
        match leaf.map(|der| Principal::from_cert_der(der, &self.trust_domain)) {
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                tracing::warn!(%peer, error = %report(&e), "client certificate names no principal of this node; closing connection");
                None
            }
            None => {
                // Unreachable with a verifier that mandates client auth; refuse regardless.
                tracing::warn!(%peer, "no client certificate after handshake; closing connection");
                None
            }
        }
    }

    /// HTTP over the connection until the client closes it or the server stops (then
    /// gracefully: requests in flight finish). Every request carries the principal and the
    /// peer address; one over the principal's bound of requests in flight gets a 429.
    async fn serve(
        mut self,
        tls: tokio_rustls::server::TlsStream<TcpStream>,
        principal: Principal,
        peer: SocketAddr,
    ) {
        let app = self.app;
        let (in_flight, rate, logs) = (self.in_flight, self.rate, self.logs.clone());
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let admitted = within_rate(&rate, &logs, &principal, peer);
            let permit = admitted.is_ok().then(|| in_flight.try_start(&principal));
            req.extensions_mut().insert(principal.clone());
            req.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                if let Err(wait) = admitted {
                    return Ok(over_rate(wait));
                }
                let Some(Some(_permit)) = permit else {
                    return Ok(too_many_requests());
                };
                app.oneshot(req).await
            }
        });
        let conn = self.http.serve_connection(TokioIo::new(tls), service);
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = stopped(&mut self.stop) => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %report(&e), "connection ended with an error");
        }
    }
}

/// Best-effort close_notify, so that a refused client sees a clean close rather than a reset.
async fn close(mut tls: tokio_rustls::server::TlsStream<TcpStream>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), tls.shutdown()).await;
}
