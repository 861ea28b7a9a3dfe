//! The mTLS API client: a keep-alive HTTPS client, typed end to end.
//!
//! The [`Client`] keeps one HTTP/1.1 connection open and reuses it; when the server has closed
//! it (idle timeout, restart) the next request reconnects, and a request that provably never
//! left the client is retried once on the new connection. Errors say what to check: whether
//! hostd runs at that address, whether it refused the certificate, whether the answer was JSON.
//!
//! Each API route has a typed method ([`Client::health`], [`Client::create_lease`], …) that
//! sends and answers the types of `hostd-api`; a refusal by the node is
//! [`ClientError::Api`] carrying the node's [`ErrorBody`]. The untyped [`Client::get`],
//! [`Client::post`] and [`Client::raw`] remain for tools and tests that probe the API with
//! what a typed client would never send.

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::tls::{self, TlsError};
use crate::upload::{Activity, ReaderBody};
use auditor::billing::Invoice;
use auditor::record::AttestationRecord;
use hostd_api::answer::{
    AttestationRequest, ErrorBody, EvidenceAnswer, Health, LeaseEnded, LeaseList, TenantList,
    UsageList, UsageReceipt,
};
use hostd_api::file::{FileList, FileWritten};
use hostd_api::gpu::GpuList;
use hostd_api::job::{Job, JobList, NewJob};
use hostd_api::lease::{Lease, NewLease};
use hostd_api::profile::{parse_server_url, Profile, ProfileError, ServerUrl};
use hostd_api::query::{BillQuery, JobsQuery, LeasesQuery, LogsQuery, RecordsQuery, UsageQuery};
use hostd_api::tenant::{NewTenant, Tenant};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest JSON response accepted by [`Client::get`], [`Client::post`], [`Client::delete`].
pub const MAX_JSON_BYTES: usize = 64 * 1024 * 1024;
/// Largest response accepted by [`Client::get_bytes`]; use [`Client::download`] beyond that.
pub const MAX_BYTES: usize = 1024 * 1024 * 1024;
/// Default time allowed to connect, and between two pieces of a response.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time one request may spend, in all, waiting as a throttling node asks (429 with
/// `Retry-After`) before the refusal is given to the caller.
pub const DEFAULT_THROTTLE_WAIT: Duration = Duration::from_secs(60);

/// Why a profile could not be loaded or a request failed. Messages are meant for operators.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("invalid request path {0:?}: must start with '/'")]
    BadPath(String),
    #[error("cannot connect to {server} (is hostd running at {server}?)")]
    Connect {
        server: String,
        #[source]
        source: io::Error,
    },
    #[error("TLS handshake with {server} failed (is the profile's ca.pem this node's CA?)")]
    Handshake {
        server: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "{server} refused our client certificate (TLS alert: {alert}); check that the profile's \
         cert.pem was issued by this node's CA and has not expired"
    )]
    Rejected { server: String, alert: String },
    #[error(
        "{server} closed the connection without answering; the certificate may name a principal \
         of another trust domain (the hostd log says why)"
    )]
    Closed { server: String },
    #[error("{server} did not answer within {}s", after.as_secs())]
    Timeout { server: String, after: Duration },
    #[error("HTTP error talking to {server}")]
    Http {
        server: String,
        #[source]
        source: hyper::Error,
    },
    #[error("response (HTTP {status}) is not JSON: {snippet:?}")]
    NotJson { status: u16, snippet: String },
    #[error("response larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("HTTP {status}: {body}")]
    Status {
        status: u16,
        body: serde_json::Value,
    },
    /// The node answered with an error: the request was understood and refused.
    #[error("{} ({status}){}", body.error, reasons(body))]
    Api { status: u16, body: ErrorBody },
    /// The node refused an upload for now (429) and said when to send it again; the caller,
    /// who holds the file, sends it again ([`Client::throttle_wait`]).
    #[error("{} (429)", body.error)]
    Throttled { after: Duration, body: ErrorBody },
    #[error("the node's answer (HTTP {status}) does not have the expected shape")]
    Shape {
        status: u16,
        #[source]
        source: serde_json::Error,
    },
    #[error("the node sent non-UTF-8 text")]
    NotText,
    #[error("writing the response")]
    Write(#[source] io::Error),
    #[error("the node answered (HTTP {status}) with {}, not a file", got.as_deref().unwrap_or("no content type"))]
    ContentType { status: u16, got: Option<String> },
    #[error("reading the file to send")]
    Read(#[source] io::Error),
}

/// An API client bound to one server and one client identity. Cheap to share behind `&`;
/// concurrent requests on one `Client` are serialised over its single connection.
pub struct Client {
    server: String,
    url: ServerUrl,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    conn: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
    timeout: Duration,
    throttle_wait: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Loads the profile's certificates and key. Does not connect yet: the first request does.
    pub fn new(profile: &Profile) -> Result<Client, ClientError> {
        let url = parse_server_url(&profile.server)?;
        let server_name = ServerName::try_from(url.host.clone()).map_err(|_| {
            ClientError::Profile(ProfileError::BadUrl {
                url: profile.server.clone(),
                reason: "invalid host name".into(),
            })
        })?;
        let config = tls::client_config(&profile.ca, &profile.cert, &profile.key)?;
        Ok(Client {
            server: profile.server.trim_end_matches('/').to_owned(),
            url,
            server_name,
            connector: TlsConnector::from(config),
            conn: tokio::sync::Mutex::new(None),
            timeout: DEFAULT_TIMEOUT,
            throttle_wait: DEFAULT_THROTTLE_WAIT,
        })
    }

    /// Sets how long one request may wait, in all, as a throttling node asks (429 with
    /// `Retry-After`) before the 429 is answered to the caller; zero never waits.
    pub fn with_throttle_wait(mut self, wait: Duration) -> Client {
        self.throttle_wait = wait;
        self
    }

    /// How long one request may wait, in all, for a throttling node.
    pub fn throttle_wait(&self) -> Duration {
        self.throttle_wait
    }

    /// Sets the time allowed to connect and between two pieces of a response.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The server URL this client talks to.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// `GET path` → (status, JSON body). An empty body is `null`.
    pub async fn get(&self, path: &str) -> Result<(u16, serde_json::Value), ClientError> {
        self.json(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body → (status, JSON body).
    pub async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, serde_json::Value), ClientError> {
        self.json(Method::POST, path, Some(body.to_string().into_bytes()))
            .await
    }

    /// `DELETE path` → (status, JSON body).
    pub async fn delete(&self, path: &str) -> Result<(u16, serde_json::Value), ClientError> {
        self.json(Method::DELETE, path, None).await
    }

    /// Any request with a raw body and content type → (status, raw body). For tools and tests
    /// that must send what the JSON helpers would refuse to build (malformed or huge bodies).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|_| ClientError::BadPath(path.to_owned()))?;
        let response = self
            .send_typed(method, path, Some(body), content_type)
            .await?;
        let status = response.status().as_u16();
        let body = self.collect(response.into_body(), MAX_BYTES).await?;
        Ok((status, body))
    }

    /// `GET path` → (status, raw body), for non-JSON responses up to [`MAX_BYTES`].
    pub async fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>), ClientError> {
        let response = self.send(Method::GET, path, None).await?;
        let status = response.status().as_u16();
        let body = self.collect(response.into_body(), MAX_BYTES).await?;
        Ok((status, body))
    }

    /// `GET path`, streaming a successful (2xx) body into `out` without holding it in memory;
    /// returns the status and the number of bytes written. A non-2xx answer writes nothing and
    /// is returned as [`ClientError::Status`] with the server's JSON error.
    pub async fn download<W: AsyncWrite + Unpin>(
        &self,
        path: &str,
        out: &mut W,
    ) -> Result<(u16, u64), ClientError> {
        self.download_as(path, None, out).await
    }

    /// [`Client::download`], refusing (before writing anything) a 2xx answer whose content
    /// type is not `content_type`.
    async fn download_as<W: AsyncWrite + Unpin>(
        &self,
        path: &str,
        content_type: Option<&str>,
        out: &mut W,
    ) -> Result<(u16, u64), ClientError> {
        let response = self.send(Method::GET, path, None).await?;
        let status = response.status().as_u16();
        let got = response.headers().get(hyper::header::CONTENT_TYPE).cloned();
        if let Some(want) = content_type.filter(|_| (200..300).contains(&status)) {
            if got.as_ref().and_then(|v| v.to_str().ok()) != Some(want) {
                let got = got.and_then(|v| v.to_str().ok().map(str::to_owned));
                return Err(ClientError::ContentType { status, got });
            }
        }
        let mut body = response.into_body();
        if !(200..300).contains(&status) {
            let bytes = self.collect(body, MAX_JSON_BYTES).await?;
            let body = decode_json(status, &bytes)?;
            return Err(ClientError::Status { status, body });
        }
        let mut written = 0u64;
        while let Some(frame) = self.next_frame(&mut body).await? {
            if let Ok(data) = frame.into_data() {
                out.write_all(&data).await.map_err(ClientError::Write)?;
                written += data.len() as u64;
            }
        }
        out.flush().await.map_err(ClientError::Write)?;
        Ok((status, written))
    }

    async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, serde_json::Value), ClientError> {
        let response = self.send(method, path, body).await?;
        let status = response.status().as_u16();
        let bytes = self.collect(response.into_body(), MAX_JSON_BYTES).await?;
        Ok((status, decode_json(status, &bytes)?))
    }

    fn request(
        &self,
        method: &Method,
        path: &str,
        body: &Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, &self.url.authority)
            .header(hyper::header::ACCEPT, "application/json")
            .header(
                hyper::header::USER_AGENT,
                concat!("sovctl/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(ct) = content_type.or(body.as_ref().map(|_| "application/json")) {
            builder = builder.header(hyper::header::CONTENT_TYPE, ct);
        }
        let payload = Full::new(Bytes::from(body.clone().unwrap_or_default()));
        builder
            .body(payload)
            .map_err(|_| ClientError::BadPath(path.to_owned()))
    }

    /// Sends one request over the kept-alive connection, reconnecting when it is gone.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response<Incoming>, ClientError> {
        self.send_typed(method, path, body, None).await
    }

    /// Sends the request, and again as long as the node throttles it (429 with
    /// `Retry-After`, answered before the request ran, so sending it again is safe) and the
    /// waits fit in [`Client::throttle_wait`].
    async fn send_typed(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Response<Incoming>, ClientError> {
        let mut waited = Duration::ZERO;
        loop {
            let response = self.send_once(&method, path, &body, content_type).await?;
            match retry_after(&response) {
                Some(after) if waited + after <= self.throttle_wait => {
                    self.collect(response.into_body(), MAX_JSON_BYTES).await?;
                    tokio::time::sleep(after).await;
                    waited += after;
                }
                _ => return Ok(response),
            }
        }
    }

    async fn send_once(
        &self,
        method: &Method,
        path: &str,
        body: &Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Response<Incoming>, ClientError> {
        if !path.starts_with('/') {
            return Err(ClientError::BadPath(path.to_owned()));
        }
        let mut request = self.request(method, path, body, content_type)?;
        let mut conn = self.conn.lock().await;
        // At most two attempts, and the second only when the first provably sent nothing.
        for attempt in 0..2 {
            let mut sender = match conn.take() {
                Some(s) if !s.is_closed() => s,
                _ => self.connect().await?,
            };
            if sender.ready().await.is_err() {
                sender = self.connect().await?;
            }
            let sent = tokio::time::timeout(self.timeout, sender.try_send_request(request)).await;
            match sent {
                Err(_) => return Err(self.timed_out()),
                Ok(Ok(response)) => {
                    *conn = Some(sender);
                    return Ok(response);
                }
                Ok(Err(mut e)) => match e.take_message() {
                    Some(unsent) if attempt == 0 => request = unsent,
                    _ => return Err(self.classify(e.into_error())),
                },
            }
        }
        Err(ClientError::Closed {
            server: self.server.clone(),
        })
    }

    async fn connect<B>(&self) -> Result<SendRequest<B>, ClientError>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let server = || self.server.clone();
        let addr = (self.url.host.as_str(), self.url.port);
        let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Err(_) => return Err(self.timed_out_after(CONNECT_TIMEOUT)),
            Ok(Err(source)) => {
                return Err(ClientError::Connect {
                    server: server(),
                    source,
                })
            }
            Ok(Ok(tcp)) => tcp,
        };
        let _ = tcp.set_nodelay(true);
        let handshake = self.connector.connect(self.server_name.clone(), tcp);
        let tls = match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
            Err(_) => return Err(self.timed_out_after(CONNECT_TIMEOUT)),
            Ok(Err(source)) => {
                return Err(match received_alert(&source) {
                    Some(alert) => ClientError::Rejected {
                        server: server(),
                        alert,
                    },
                    None => ClientError::Handshake {
                        server: server(),
                        source,
                    },
                })
            }
            Ok(Ok(tls)) => tls,
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| self.classify(e))?;
        let server = self.server.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(server = %server, error = %e, "API connection ended");
            }
        });
        Ok(sender)
    }

    async fn next_frame(
        &self,
        body: &mut Incoming,
    ) -> Result<Option<hyper::body::Frame<Bytes>>, ClientError> {
        match tokio::time::timeout(self.timeout, body.frame()).await {
            Err(_) => Err(self.timed_out()),
            Ok(None) => Ok(None),
            Ok(Some(Ok(frame))) => Ok(Some(frame)),
            Ok(Some(Err(e))) => Err(self.classify(e)),
        }
    }

    async fn collect(&self, mut body: Incoming, limit: usize) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        while let Some(frame) = self.next_frame(&mut body).await? {
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > limit {
                    return Err(ClientError::TooLarge { limit });
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(out)
    }

    fn timed_out(&self) -> ClientError {
        self.timed_out_after(self.timeout)
    }

    fn timed_out_after(&self, after: Duration) -> ClientError {
        ClientError::Timeout {
            server: self.server.clone(),
            after,
        }
    }

    fn classify(&self, e: hyper::Error) -> ClientError {
        let server = self.server.clone();
        if let Some(alert) = received_alert(&e) {
            ClientError::Rejected { server, alert }
        } else if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
            ClientError::Closed { server }
        } else {
            ClientError::Http { server, source: e }
        }
    }
}

/// The TLS alert the server sent, if that is what ended the connection. rustls reports alerts
/// as a `rustls::Error` wrapped in an `io::Error`, itself somewhere in hyper's error chain.
fn received_alert(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = current {
        let tls_err = err
            .downcast_ref::<rustls::Error>()
            .or_else(|| err.downcast_ref::<io::Error>()?.get_ref()?.downcast_ref());
        if let Some(rustls::Error::AlertReceived(alert)) = tls_err {
            return Some(format!("{alert:?}"));
        }
        current = err.source();
    }
    None
}

/// The reasons of a policy refusal, one per line, for [`ClientError::Api`]'s message.
/// The wait a throttling node asks for: a 429's `Retry-After` in seconds (the HTTP-date form
/// is not one hostd sends, and is not waited for).
fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    if response.status() != hyper::StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let secs = response.headers().get(hyper::header::RETRY_AFTER)?;
    secs.to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_secs)
}

fn reasons(body: &ErrorBody) -> String {
    let mut s = String::new();
    for r in body.reasons.iter().flatten() {
        s.push_str("\n  - ");
        s.push_str(r);
    }
    if let Some(id) = &body.request_id {
        s.push_str(&format!(" [request {id}]"));
    }
    s
}

/// A JSON answer as `T` when the status is 2xx, else the node's [`ErrorBody`].
fn typed<T: DeserializeOwned>(status: u16, body: serde_json::Value) -> Result<T, ClientError> {
    if (200..300).contains(&status) {
        return serde_json::from_value(body)
            .map_err(|source| ClientError::Shape { status, source });
    }
    Err(api_error(status, body))
}

/// A non-2xx answer as [`ClientError::Api`] (or [`ClientError::Shape`] when the node did not
/// send the documented error shape).
fn api_error(status: u16, body: serde_json::Value) -> ClientError {
    match serde_json::from_value::<ErrorBody>(body) {
        Ok(body) => ClientError::Api { status, body },
        Err(source) => ClientError::Shape { status, source },
    }
}

/// One method per API route, each sending and answering `hostd-api` types.
impl Client {
    async fn call<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let (status, body) = self.get(path).await?;
        typed(status, body)
    }

    async fn call_post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let body =
            serde_json::to_vec(body).map_err(|source| ClientError::Shape { status: 0, source })?;
        let response = self.send(Method::POST, path, Some(body)).await?;
        let status = response.status().as_u16();
        let bytes = self.collect(response.into_body(), MAX_JSON_BYTES).await?;
        typed(status, decode_json(status, &bytes)?)
    }

    /// `GET path` as text (checkpoints, keys, proofs), or the node's error.
    pub async fn text(&self, path: &str) -> Result<String, ClientError> {
        String::from_utf8(self.bytes(path).await?).map_err(|_| ClientError::NotText)
    }

    /// `GET path` as bytes up to [`MAX_BYTES`], or the node's error.
    pub async fn bytes(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let (status, body) = self.get_bytes(path).await?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        Err(api_error(status, decode_json(status, &body)?))
    }

    /// `GET /v1/health`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.call("/v1/health").await
    }

    /// `POST /v1/tenants` (operators).
    pub async fn create_tenant(&self, t: &NewTenant) -> Result<Tenant, ClientError> {
        self.call_post("/v1/tenants", t).await
    }

    /// `GET /v1/tenants`.
    pub async fn tenants(&self) -> Result<TenantList, ClientError> {
        self.call("/v1/tenants").await
    }

    /// `GET /v1/tenants/{id}`.
    pub async fn tenant(&self, id: &str) -> Result<Tenant, ClientError> {
        self.call(&format!("/v1/tenants/{}", segment(id))).await
    }

    /// `POST /v1/tenants/{id}/suspend` (operators).
    pub async fn suspend_tenant(&self, id: &str) -> Result<Tenant, ClientError> {
        let path = format!("/v1/tenants/{}/suspend", segment(id));
        self.call_post(&path, &serde_json::json!({})).await
    }

    /// `GET /v1/gpus`.
    pub async fn gpus(&self) -> Result<GpuList, ClientError> {
        self.call("/v1/gpus").await
    }

    /// `POST /v1/leases`.
    pub async fn create_lease(&self, l: &NewLease) -> Result<Lease, ClientError> {
        self.call_post("/v1/leases", l).await
    }

    /// `GET /v1/leases`: one page (see [`LeasesQuery`]).
    pub async fn leases(&self, q: &LeasesQuery) -> Result<LeaseList, ClientError> {
        self.call(&q.path()).await
    }

    /// `GET /v1/leases/{id}`.
    pub async fn lease(&self, id: &str) -> Result<Lease, ClientError> {
        self.call(&format!("/v1/leases/{}", segment(id))).await
    }

    /// `POST /v1/leases/{id}/end`.
    pub async fn end_lease(&self, id: &str) -> Result<LeaseEnded, ClientError> {
        let path = format!("/v1/leases/{}/end", segment(id));
        self.call_post(&path, &serde_json::json!({})).await
    }

    /// `GET /v1/usage`.
    pub async fn usage(&self, q: &UsageQuery) -> Result<UsageList, ClientError> {
        self.call(&q.path()).await
    }

    /// `GET /v1/usage/{id}/receipt`.
    pub async fn receipt(&self, id: u64) -> Result<UsageReceipt, ClientError> {
        self.call(&format!("/v1/usage/{id}/receipt")).await
    }

    /// `GET /v1/bill`.
    pub async fn bill(&self, q: &BillQuery) -> Result<Invoice, ClientError> {
        self.call(&q.path()).await
    }

    /// `GET /v1/audit/checkpoint`: the latest signed checkpoint note.
    pub async fn checkpoint(&self) -> Result<String, ClientError> {
        self.text("/v1/audit/checkpoint").await
    }

    /// `GET /v1/audit/vkey`: the log's verifier key, one line.
    pub async fn vkey(&self) -> Result<String, ClientError> {
        self.text("/v1/audit/vkey").await
    }

    /// `GET /v1/audit/records`: `records.jsonl` of records `0..size`.
    pub async fn records(&self, q: &RecordsQuery) -> Result<Vec<u8>, ClientError> {
        self.bytes(&q.path()).await
    }

    /// `POST /v1/attestation`: fresh evidence over `nonce`.
    pub async fn attest(&self, nonce: &[u8; 32]) -> Result<EvidenceAnswer, ClientError> {
        let req = AttestationRequest {
            nonce: hex::encode(nonce),
        };
        self.call_post("/v1/attestation", &req).await
    }
}

impl Client {
    /// `POST /v1/attestation/results` (operators): a signed attestation result, sent as it
    /// is (canonical JSON), answered with the ledger record it became.
    pub async fn submit_attestation_result(
        &self,
        result: Vec<u8>,
    ) -> Result<AttestationRecord, ClientError> {
        let (status, body) = self
            .raw(
                "POST",
                "/v1/attestation/results",
                Some("application/json"),
                result,
            )
            .await?;
        typed(status, decode_json(status, &body)?)
    }
}

/// Jobs (`/v1/leases/{id}/jobs`).
impl Client {
    fn jobs_path(lease: &str) -> String {
        format!("/v1/leases/{}/jobs", segment(lease))
    }

    /// `POST /v1/leases/{id}/jobs`.
    pub async fn start_job(&self, lease: &str, job: &NewJob) -> Result<Job, ClientError> {
        self.call_post(&Self::jobs_path(lease), job).await
    }

    /// `GET /v1/leases/{id}/jobs`: one page.
    pub async fn jobs(&self, lease: &str, q: &JobsQuery) -> Result<JobList, ClientError> {
        self.call(&q.path(lease)).await
    }

    /// `GET /v1/leases/{id}/jobs/{job}`.
    pub async fn job(&self, lease: &str, job: &str) -> Result<Job, ClientError> {
        self.call(&format!("{}/{}", Self::jobs_path(lease), segment(job)))
            .await
    }

    /// `POST /v1/leases/{id}/jobs/{job}/stop`.
    pub async fn stop_job(&self, lease: &str, job: &str) -> Result<Job, ClientError> {
        let path = format!("{}/{}/stop", Self::jobs_path(lease), segment(job));
        self.call_post(&path, &serde_json::json!({})).await
    }

    /// `GET /v1/leases/{id}/jobs/{job}/logs`, streamed into `out` as it arrives (with
    /// `follow`, until the job ends); returns the bytes written.
    pub async fn job_logs<W: AsyncWrite + Unpin>(
        &self,
        lease: &str,
        job: &str,
        q: &LogsQuery,
        out: &mut W,
    ) -> Result<u64, ClientError> {
        let (_, n) = self.download(&q.path(lease, job), out).await?;
        Ok(n)
    }
}

/// Files in a lease's scratch (`/v1/leases/{id}/files/{path}`).
impl Client {
    /// The route of `path` (relative to the scratch), each component percent-encoded so that
    /// the node sees exactly the components given (it refuses `..` and absolute paths).
    pub fn files_path(lease: &str, path: &str) -> String {
        let parts: Vec<String> = path.split('/').map(segment).collect();
        format!("/v1/leases/{}/files/{}", segment(lease), parts.join("/"))
    }

    /// `PUT /v1/leases/{id}/files/{path}`: streams `len` bytes of `reader` (in pieces, on a
    /// connection of its own) and answers what the node stored. `progress` hears the bytes
    /// sent so far. Waits for the node's `100 Continue` first (see [`crate::upload`]), so an
    /// upload refused up front sends nothing. Times out only when nothing moved for the
    /// client's timeout, however long the whole upload takes.
    pub async fn upload<R>(
        &self,
        lease: &str,
        path: &str,
        reader: R,
        len: u64,
        progress: impl FnMut(u64) + Send + 'static,
    ) -> Result<FileWritten, ClientError>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
    {
        let go = Arc::new(tokio::sync::Notify::new());
        let activity = Activity::new();
        let body = ReaderBody::new(
            reader,
            len,
            go.clone(),
            Box::new(progress),
            activity.clone(),
        );
        let mut request = Request::builder()
            .method(Method::PUT)
            .uri(Self::files_path(lease, path))
            .header(hyper::header::HOST, &self.url.authority)
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::CONTENT_TYPE, "application/octet-stream")
            .header(hyper::header::CONTENT_LENGTH, len)
            .header(hyper::header::EXPECT, "100-continue")
            .body(body)
            .map_err(|_| ClientError::BadPath(path.to_owned()))?;
        hyper::ext::on_informational(&mut request, move |r| {
            if r.status() == hyper::StatusCode::CONTINUE {
                go.notify_one();
            }
        });
        let mut sender = self.connect::<ReaderBody<R>>().await?;
        let response = self
            .await_moving(sender.send_request(request), &activity)
            .await?;
        let status = response.status().as_u16();
        let after = retry_after(&response);
        let bytes = self.collect(response.into_body(), MAX_JSON_BYTES).await?;
        match (typed(status, decode_json(status, &bytes)?), after) {
            (Err(ClientError::Api { body, .. }), Some(after)) => {
                Err(ClientError::Throttled { after, body })
            }
            (answer, _) => answer,
        }
    }

    /// The answer to an upload, given up only when the body has not moved for the timeout.
    async fn await_moving<F>(
        &self,
        send: F,
        activity: &Activity,
    ) -> Result<Response<Incoming>, ClientError>
    where
        F: std::future::Future<Output = Result<Response<Incoming>, hyper::Error>>,
    {
        tokio::pin!(send);
        loop {
            match tokio::time::timeout(self.timeout, &mut send).await {
                Ok(Ok(response)) => return Ok(response),
                Ok(Err(e)) => return Err(self.upload_failed(e)),
                Err(_) if activity.idle() >= self.timeout => return Err(self.timed_out()),
                Err(_) => {}
            }
        }
    }

    /// A failed upload: the reader's own error when that is what stopped it.
    fn upload_failed(&self, e: hyper::Error) -> ClientError {
        let mut source = StdError::source(&e);
        while let Some(s) = source {
            if let Some(io) = s.downcast_ref::<io::Error>() {
                return ClientError::Read(io::Error::new(io.kind(), io.to_string()));
            }
            source = s.source();
        }
        self.classify(e)
    }

    /// `GET /v1/leases/{id}/files/{path}` of a file, streamed into `out`; returns the bytes
    /// written. A directory is refused (see [`Client::list_files`]) before anything is written.
    pub async fn download_file<W: AsyncWrite + Unpin>(
        &self,
        lease: &str,
        path: &str,
        out: &mut W,
    ) -> Result<u64, ClientError> {
        let route = Self::files_path(lease, path);
        match self
            .download_as(&route, Some("application/octet-stream"), out)
            .await
        {
            Ok((_, n)) => Ok(n),
            Err(ClientError::Status { status, body }) => Err(api_error(status, body)),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/leases/{id}/files/{path}` of a directory (`""`: the scratch itself).
    pub async fn list_files(&self, lease: &str, path: &str) -> Result<FileList, ClientError> {
        if path.is_empty() {
            return self
                .call(&format!("/v1/leases/{}/files", segment(lease)))
                .await;
        }
        self.call(&Self::files_path(lease, path)).await
    }
}

/// An id as one path segment: percent-encoded, so an id can never add a path component.
fn segment(id: &str) -> String {
    hostd_api::query::encode(id)
}

fn decode_json(status: u16, bytes: &[u8]) -> Result<serde_json::Value, ClientError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|_| ClientError::NotJson {
        status,
        snippet: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_json_or_reports_a_snippet() {
        assert_eq!(decode_json(204, b"").unwrap(), serde_json::Value::Null);
        assert_eq!(decode_json(200, b"{\"a\":1}").unwrap()["a"], 1);
        match decode_json(502, b"<html>bad gateway</html>") {
            Err(ClientError::NotJson {
                status: 502,
                snippet,
            }) => assert!(snippet.contains("bad gateway")),
            other => panic!("{other:?}"),
        }
    }
}
