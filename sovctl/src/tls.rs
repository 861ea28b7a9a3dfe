//! The client's TLS configuration: TLS 1.3 only, trusting only the node CA of the profile.

use keyfile::pem::{load_certs, load_private_key, PemError};
use rustls::{ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The only application protocol spoken over the TLS channel.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why the client's TLS configuration could not be built. Always names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("{}: CA certificate rejected", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
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

/// The sovctl client config: TLS 1.3 only, trusting only the node CA in `ca_pem` (never the
/// system roots, so a public CA cannot impersonate the node), presenting `cert`/`key`. ring is
/// selected explicitly so behaviour does not depend on which crates happen to be linked in.
pub fn client_config(
    ca_pem: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(ca_pem)? {
        roots.add(c).map_err(|source| TlsError::BadCa {
            path: ca_pem.to_owned(),
            source,
        })?;
    }
    let chain = load_certs(cert)?;
    let private_key = load_private_key(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, private_key)
        .map_err(|source| TlsError::CertKey {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}
