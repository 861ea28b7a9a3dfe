//! The mTLS API client used by `sovctl` (and by tests): profiles and a keep-alive HTTPS client.
//!
//! A **profile** is a directory holding everything needed to talk to one node as one principal,
//! so an operator types `sovctl --profile dev-state/operator ...` instead of four paths:
//!
//! ```toml
//! # dev-state/operator/profile.toml
//! server = "https://127.0.0.1:8443"
//! ca = "ca.pem"          # the node CA; the only CA this client trusts
//! cert = "cert.pem"      # client certificate (SPIFFE ID in its URI SAN)
//! key = "key.pem"        # its private key (mode 0600)
//! principal = "spiffe://dev.sovereign.test/operator/operator"   # informational
//! ```
//!
//! Relative paths are relative to the profile directory, so a profile can be copied elsewhere
//! as a whole.
//!
//! The [`Client`] keeps one HTTP/1.1 connection open and reuses it; when the server has closed
//! it (idle timeout, restart) the next request reconnects, and a request that provably never
//! left the client is retried once on the new connection. Errors say what to check: whether
//! hostd runs at that address, whether it refused the certificate, whether the answer was JSON.

use std::error::Error as StdError;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::principal::Principal;
use crate::tls::{self, TlsError};

/// Largest JSON response accepted by [`Client::get`], [`Client::post`], [`Client::delete`].
pub const MAX_JSON_BYTES: usize = 64 * 1024 * 1024;
/// Largest response accepted by [`Client::get_bytes`]; use [`Client::download`] beyond that.
pub const MAX_BYTES: usize = 1024 * 1024 * 1024;
/// Default time allowed to connect, and between two pieces of a response.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a profile could not be loaded or a request failed. Messages are meant for operators.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("profile {}: {reason}", path.display())]
    Profile { path: PathBuf, reason: String },
    #[error("invalid server URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("invalid request path {0:?}: must start with '/'")]
    BadPath(String),
    #[error("cannot connect to {server}: {source} (is hostd running at {server}?)")]
    Connect {
        server: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "TLS handshake with {server} failed: {source} (is the profile's ca.pem this node's CA?)"
    )]
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
    #[error("HTTP error talking to {server}: {source}")]
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
    #[error("writing the response: {0}")]
    Write(#[source] io::Error),
}

/// Where a node is and how to prove who we are to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// `https://host:port` of the hostd API.
    pub server: String,
    /// The node CA certificate (PEM); the only trust anchor for the server's certificate.
    pub ca: PathBuf,
    /// Our client certificate (PEM).
    pub cert: PathBuf,
    /// Our private key (PEM).
    pub key: PathBuf,
}

/// On-disk form of a profile.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    server: String,
    ca: String,
    cert: String,
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
}

impl Profile {
    /// The file inside a profile directory.
    pub const FILE_NAME: &'static str = "profile.toml";

    pub fn new(
        server: impl Into<String>,
        ca: impl Into<PathBuf>,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Profile {
        Profile {
            server: server.into(),
            ca: ca.into(),
            cert: cert.into(),
            key: key.into(),
        }
    }

    /// Loads `path/profile.toml` (or `path` itself if it is a file). Relative paths inside are
    /// resolved against the directory holding the file.
    pub fn load(path: &Path) -> Result<Profile, ClientError> {
        let file = if path.is_dir() {
            path.join(Self::FILE_NAME)
        } else {
            path.to_owned()
        };
        let base = file.parent().unwrap_or(Path::new("."));
        let err = |reason: String| ClientError::Profile {
            path: file.clone(),
            reason,
        };
        let text = std::fs::read_to_string(&file).map_err(|e| {
            err(if e.kind() == io::ErrorKind::NotFound {
                format!(
                    "not found; a profile is a directory holding {} (see docs/pki.md)",
                    Self::FILE_NAME
                )
            } else {
                e.to_string()
            })
        })?;
        let parsed: ProfileFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        parse_server_url(&parsed.server).map_err(|e| err(e.to_string()))?;
        let resolve = |p: &str| -> Result<PathBuf, ClientError> {
            if p.is_empty() {
                return Err(err("empty path".into()));
            }
            Ok(base.join(p))
        };
        Ok(Profile {
            server: parsed.server.clone(),
            ca: resolve(&parsed.ca)?,
            cert: resolve(&parsed.cert)?,
            key: resolve(&parsed.key)?,
        })
    }

    /// The `profile.toml` text for this profile; `principal` is recorded for humans only.
    pub fn to_toml(&self, principal: Option<&Principal>) -> String {
        let file = ProfileFile {
            server: self.server.clone(),
            ca: self.ca.to_string_lossy().into_owned(),
            cert: self.cert.to_string_lossy().into_owned(),
            key: self.key.to_string_lossy().into_owned(),
            principal: principal.map(Principal::spiffe_uri),
        };
        let body = toml::to_string(&file).unwrap_or_default();
        format!(
            "# sovctl profile: use with `sovctl --profile <this directory>`.\n\
             # Relative paths are relative to this directory.\n{body}"
        )
    }
}

/// A parsed `https://host[:port]` server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// Host name or IP address, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// `host:port` as sent in the Host header.
    pub authority: String,
}

/// Parses a server URL: `https` only, no user info, path, query or fragment.
pub fn parse_server_url(url: &str) -> Result<ServerUrl, ClientError> {
    let bad = |reason: &str| ClientError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad(
            "the scheme must be https (hostd speaks mutual TLS only)",
        ));
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("user info is not allowed"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("give only https://host:port, without a path or query"));
    }
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad("no host"));
    }
    ServerName::try_from(host).map_err(|_| bad("invalid host name"))?;
    let port = authority.port_u16().unwrap_or(443);
    Ok(ServerUrl {
        host: host.to_owned(),
        port,
        authority: authority.as_str().to_owned(),
    })
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
        let server_name =
            ServerName::try_from(url.host.clone()).map_err(|_| ClientError::BadUrl {
                url: profile.server.clone(),
                reason: "invalid host name".into(),
            })?;
        let config = tls::client_config(&profile.ca, &profile.cert, &profile.key)?;
        Ok(Client {
            server: profile.server.trim_end_matches('/').to_owned(),
            url,
            server_name,
            connector: TlsConnector::from(config),
            conn: tokio::sync::Mutex::new(None),
            timeout: DEFAULT_TIMEOUT,
        })
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
        let response = self.send(Method::GET, path, None).await?;
        let status = response.status().as_u16();
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

    async fn send_typed(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Result<Response<Incoming>, ClientError> {
        if !path.starts_with('/') {
            return Err(ClientError::BadPath(path.to_owned()));
        }
        let mut request = self.request(&method, path, &body, content_type)?;
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

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ClientError> {
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
    fn parses_server_urls() {
        let u = parse_server_url("https://127.0.0.1:8443").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 8443));
        let u = parse_server_url("https://node1.example/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.authority.as_str()),
            ("node1.example", 443, "node1.example")
        );
        let u = parse_server_url("https://[::1]:9000").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9000));
        for bad in [
            "http://127.0.0.1:8443",
            "127.0.0.1:8443",
            "https://",
            "https://user@host:1",
            "https://host:1/v1",
            "https://host:1?x",
            "",
        ] {
            assert!(parse_server_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_round_trips_and_resolves_relative_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Profile::new(
            "https://127.0.0.1:8443",
            "ca.pem",
            "cert.pem",
            "/abs/key.pem",
        );
        std::fs::write(tmp.path().join(Profile::FILE_NAME), p.to_toml(None)).unwrap();
        let loaded = Profile::load(tmp.path()).unwrap();
        assert_eq!(loaded.server, p.server);
        assert_eq!(loaded.ca, tmp.path().join("ca.pem"));
        assert_eq!(loaded.key, PathBuf::from("/abs/key.pem"));
        // Loading the file directly works too.
        assert_eq!(
            Profile::load(&tmp.path().join(Profile::FILE_NAME)).unwrap(),
            loaded
        );
    }

    #[test]
    fn profile_errors_name_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let e = Profile::load(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("profile.toml") && e.contains("not found"), "{e}");
        let f = tmp.path().join(Profile::FILE_NAME);
        std::fs::write(
            &f,
            "server = \"https://h:1\"\nca = \"a\"\ncert = \"b\"\nkey = \"c\"\nextra = 1\n",
        )
        .unwrap();
        assert!(Profile::load(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("extra"));
        std::fs::write(
            &f,
            "server = \"http://h:1\"\nca = \"a\"\ncert = \"b\"\nkey = \"c\"\n",
        )
        .unwrap();
        assert!(Profile::load(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("https"));
    }

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
