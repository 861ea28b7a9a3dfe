//! Client profiles: where a node is and which certificate proves who we are to it.
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
//! as a whole. hostd's dev PKI writes profiles; clients read them.

use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Why a profile or a server URL is not usable. Messages are meant for operators.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The profile file is missing, unreadable or malformed.
    #[error("profile {}: {reason}", path.display())]
    Profile {
        /// The profile file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The server URL is not `https://host[:port]`.
    #[error("invalid server URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
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

    /// A profile from its parts, taken as given: paths are not resolved or checked and the
    /// server URL is not parsed (see [`parse_server_url`]).
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
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let file = if path.is_dir() {
            path.join(Self::FILE_NAME)
        } else {
            path.to_owned()
        };
        let base = file.parent().unwrap_or(Path::new("."));
        let err = |reason: String| ProfileError::Profile {
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
        let resolve = |p: &str| -> Result<PathBuf, ProfileError> {
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
    pub fn to_toml(&self, principal: Option<&str>) -> String {
        let file = ProfileFile {
            server: self.server.clone(),
            ca: self.ca.to_string_lossy().into_owned(),
            cert: self.cert.to_string_lossy().into_owned(),
            key: self.key.to_string_lossy().into_owned(),
            principal: principal.map(str::to_owned),
        };
        // A struct of four strings and an optional one always serialises.
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
    /// TCP port; 443 when the URL names none.
    pub port: u16,
    /// `host:port` as sent in the Host header.
    pub authority: String,
}

/// Parses a server URL: `https` only, no user info, path, query or fragment.
pub fn parse_server_url(url: &str) -> Result<ServerUrl, ProfileError> {
    let bad = |reason: &str| ProfileError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
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
    if !valid_host(host) {
        return Err(bad("invalid host name"));
    }
    let port = authority.port_u16().unwrap_or(443);
    Ok(ServerUrl {
        host: host.to_owned(),
        port,
        authority: authority.as_str().to_owned(),
    })
}

/// A DNS name of letters, digits, `-` and `.`, or an IP address.
fn valid_host(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
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
}
