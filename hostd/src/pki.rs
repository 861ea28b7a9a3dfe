//! A certificate authority for the hostd API: the development PKI and certificate issuing.
//!
//! Production nodes may bring their own CA (see `docs/pki.md`); this module exists so that a
//! fresh checkout, a test, or a small deployment gets a working mutual-TLS setup with one call,
//! without anyone typing certificate paths. [`DevPki::create`] lays out:
//!
//! ```text
//! <dir>/ca.pem  ca.key            the CA (key 0600)
//! <dir>/server/cert.pem key.pem   hostd's certificate (SAN DNS/IP names)
//! <dir>/<name>/                   one sovctl profile per principal:
//!     cert.pem key.pem ca.pem profile.toml
//! ```
//!
//! It is idempotent: existing files are kept, and a CA is never generated under existing
//! certificates (that would silently orphan them). Leaf certificates that no longer verify
//! against the CA, no longer match their key, or expire within a day are re-issued.
//!
//! Certificates are ECDSA P-256; client certificates are X509-SVIDs: one SPIFFE URI SAN,
//! `clientAuth` EKU, not a CA.

use attest::report::report;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration as StdDuration, SystemTime};

use rand_core::{OsRng, RngCore};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

use crate::principal::{check_trust_domain, Principal, PrincipalError, Role};
use crate::tls::{self, TlsError};
use hostd_api::profile::Profile;

/// Server URL written into dev profiles unless the caller passes another.
pub const DEFAULT_SERVER_URL: &str = "https://127.0.0.1:8443";
/// Lifetime of dev leaf certificates.
pub const DEV_LEAF_DAYS: u32 = 365;
/// Lifetime of the dev CA.
pub const DEV_CA_DAYS: u32 = 3650;
/// Names of files inside a profile directory.
pub const CERT_FILE: &str = "cert.pem";
pub const KEY_FILE: &str = "key.pem";
pub const CA_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca.key";
pub const SERVER_DIR: &str = "server";

/// Why a certificate could not be issued, loaded or written. Names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{}: {reason}", path.display())]
    BadFile { path: PathBuf, reason: String },
    #[error("certificate generation failed")]
    Rcgen(#[from] rcgen::Error),
    #[error(transparent)]
    Principal(#[from] PrincipalError),
    #[error("{0}")]
    Inconsistent(String),
    #[error(
        "principal name {0:?} is used twice; each profile directory is named after its principal"
    )]
    DuplicateName(String),
    #[error("principal name {0:?} is reserved (it names a file or directory of the PKI layout)")]
    ReservedName(String),
    #[error("{}: holds a certificate for {found}, not {wanted}; remove the directory or choose another name", dir.display())]
    IdentityMismatch {
        dir: PathBuf,
        found: String,
        wanted: String,
    },
    #[error("invalid server name {0:?}: expected a DNS name or an IP address")]
    BadServerName(String),
    #[error("invalid validity period: not_after must be later than not_before")]
    BadValidity,
    #[error("invalid server URL: {0}")]
    BadServerUrl(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A certificate's validity period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// From five minutes ago (tolerating clock skew between node and clients) to `days` from now.
    pub fn days_from_now(days: u32) -> Validity {
        let now = OffsetDateTime::now_utc();
        Validity {
            not_before: now - Duration::minutes(5),
            not_after: now + Duration::days(i64::from(days)),
        }
    }

    fn check(&self) -> Result<(), PkiError> {
        if self.not_after > self.not_before {
            Ok(())
        } else {
            Err(PkiError::BadValidity)
        }
    }
}

/// A CA certificate with its private key, able to issue server and client certificates.
pub struct CertificateAuthority {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    /// The CA as rcgen needs it for signing: same subject, key and key identifier as `cert_pem`.
    issuer: rcgen::Certificate,
    key: Zeroizing<KeyPair>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Generates a new CA (P-256) named `common_name`, path length 0: it issues leaves only.
    pub fn generate(common_name: &str, validity: Validity) -> Result<Self, PkiError> {
        validity.check()?;
        let key = Zeroizing::new(KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?);
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Sovereign Host");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(random_serial());
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        let issuer = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_pem: issuer.pem(),
            cert_der: issuer.der().clone(),
            issuer,
            key,
        })
    }

    /// Issues a subordinate CA (CA:TRUE, no path length limit) under this one. hostd accepts
    /// no client certificate issued through one (see `tls`): this exists so tests can prove it.
    pub fn issue_intermediate(
        &self,
        common_name: &str,
        validity: Validity,
    ) -> Result<CertificateAuthority, PkiError> {
        validity.check()?;
        let key = Zeroizing::new(KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?);
        // A leaf's parameters (name, serial, validity, key identifier), made a CA.
        let mut params = leaf_params(validity, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.clone().signed_by(&*key, &self.issuer, &self.key)?;
        // rcgen signs with an issuer built from the same parameters and key.
        let issuer = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer,
            key,
        })
    }

    /// Loads a CA from its PEM certificate and PEM private key (PKCS#8), checking that the key
    /// belongs to the certificate and that the certificate is a CA.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, PkiError> {
        let cert_pem = fs::read_to_string(cert_path).map_err(io_err(cert_path))?;
        let key_pem = Zeroizing::new(fs::read_to_string(key_path).map_err(io_err(key_path))?);
        let bad = |path: &Path, reason: String| PkiError::BadFile {
            path: path.to_owned(),
            reason,
        };
        let certs = tls::load_certs(cert_path)?;
        let [cert_der] = <[_; 1]>::try_from(certs).map_err(|v| {
            bad(
                cert_path,
                format!("expected exactly one certificate, found {}", v.len()),
            )
        })?;
        let key = Zeroizing::new(KeyPair::from_pem(&key_pem).map_err(|e| {
            bad(
                key_path,
                format!("unusable private key: {e}", e = report(&e)),
            )
        })?);
        let params = CertificateParams::from_ca_cert_der(&cert_der).map_err(|e| {
            bad(
                cert_path,
                format!("unusable CA certificate: {e}", e = report(&e)),
            )
        })?;
        if !matches!(params.is_ca, IsCa::Ca(_)) {
            return Err(bad(cert_path, "not a CA certificate".into()));
        }
        if !key_matches_cert(&key, &cert_der) {
            return Err(bad(
                key_path,
                format!("key does not belong to {}", cert_path.display()),
            ));
        }
        // Re-signing the parsed parameters yields an issuer with the original subject, key and
        // key identifier; its own signature is irrelevant (only `cert_pem` is ever published).
        let issuer = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_pem,
            cert_der,
            issuer,
            key,
        })
    }

    /// Writes the certificate (0644) and key (0600), each atomically.
    pub fn write(&self, cert_path: &Path, key_path: &Path) -> Result<(), PkiError> {
        let key_pem = Zeroizing::new(self.key.serialize_pem());
        write_atomic(key_path, key_pem.as_bytes(), 0o600)?;
        write_atomic(cert_path, self.cert_pem.as_bytes(), 0o644)
    }

    /// The CA certificate in PEM, as clients and servers must trust it.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate in DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, PkiError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.cert_der.clone()).map_err(|e| {
            PkiError::Inconsistent(format!(
                "CA certificate unusable as a root: {e}",
                e = report(&e)
            ))
        })?;
        Ok(Arc::new(roots))
    }

    fn sign(&self, params: CertificateParams) -> Result<IssuedCert, PkiError> {
        let key = Zeroizing::new(KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?);
        let cert = params.signed_by(&*key, &self.issuer, &self.key)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_pem: Zeroizing::new(key.serialize_pem()),
        })
    }
}

/// `profile.toml` text with its `server = ...` line set to `server_url`, every other line
/// (and comment) as it was; `None` when it already names that server.
fn with_server(text: &str, server_url: &str) -> Option<String> {
    let wanted = format!("server = \"{server_url}\"");
    let mut changed = false;
    let mut out = String::with_capacity(text.len() + wanted.len());
    for line in text.lines() {
        let is_server = line
            .trim_start()
            .strip_prefix("server")
            .is_some_and(|rest| rest.trim_start().starts_with('='));
        if is_server && line.trim() != wanted {
            out.push_str(&wanted);
            changed = true;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    changed.then_some(out)
}

/// A freshly issued leaf certificate and its private key.
pub struct IssuedCert {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    key_pem: Zeroizing<String>,
}

impl std::fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl IssuedCert {
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The PKCS#8 private key in PEM. Handle with care: never log it.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Writes the key (0600, created with that mode before any byte is written) and then the
    /// certificate (0644), each atomically (temporary file + rename).
    pub fn write(&self, cert_path: &Path, key_path: &Path) -> Result<(), PkiError> {
        write_atomic(key_path, self.key_pem.as_bytes(), 0o600)?;
        write_atomic(cert_path, self.cert_pem.as_bytes(), 0o644)
    }
}

/// Issues an X509-SVID client certificate for `principal`: its SPIFFE ID as the only URI SAN,
/// EKU clientAuth, not a CA. The principal's trust domain is not checked against the CA on
/// purpose (tests issue certificates of foreign trust domains to prove hostd refuses them).
pub fn issue_client(
    ca: &CertificateAuthority,
    principal: &Principal,
    validity: Validity,
) -> Result<IssuedCert, PkiError> {
    validity.check()?;
    let uri = principal.spiffe_uri();
    let mut params = leaf_params(validity, &format!("{} {}", principal.role, principal.name));
    params.subject_alt_names = vec![SanType::URI(uri.as_str().try_into()?)];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    ca.sign(params)
}

/// Issues hostd's server certificate for `names` (DNS names and/or IP addresses), EKU serverAuth.
pub fn issue_server(
    ca: &CertificateAuthority,
    names: &[&str],
    validity: Validity,
) -> Result<IssuedCert, PkiError> {
    validity.check()?;
    if names.is_empty() {
        return Err(PkiError::BadServerName(String::new()));
    }
    let mut params = leaf_params(validity, names[0]);
    params.subject_alt_names = names
        .iter()
        .map(|n| server_san(n))
        .collect::<Result<_, _>>()?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    ca.sign(params)
}

fn server_san(name: &str) -> Result<SanType, PkiError> {
    if let Ok(ip) = name.parse::<std::net::IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    // Validate as rustls will when a client connects, so we never issue an unusable name.
    match ServerName::try_from(name) {
        Ok(ServerName::DnsName(_)) if !name.is_empty() => Ok(SanType::DnsName(
            name.try_into()
                .map_err(|_| PkiError::BadServerName(name.to_owned()))?,
        )),
        _ => Err(PkiError::BadServerName(name.to_owned())),
    }
}

fn leaf_params(validity: Validity, common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial());
    params.not_before = validity.not_before;
    params.not_after = validity.not_after;
    params
}

/// 128 random bits, top bit clear so the DER INTEGER stays positive and within 20 octets.
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01 << 6; // never a leading zero octet
    SerialNumber::from_slice(&bytes)
}

fn key_matches_cert(key: &KeyPair, cert: &CertificateDer<'_>) -> bool {
    match x509_parser::parse_x509_certificate(cert) {
        Ok((_, parsed)) => {
            parsed.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
        }
        Err(_) => false,
    }
}

/// Writes `contents` to `path` via a temporary file created with `mode` (so a private key is
/// never readable by others, not even for an instant) and an atomic rename.
fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), PkiError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .ok_or_else(|| PkiError::Inconsistent(format!("{} has no file name", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp); // left over from a crashed run of this process id
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        // Persist the rename; not all filesystems allow syncing a directory, so best effort.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

fn create_private_dir(dir: &Path) -> Result<(), PkiError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

/// The development PKI in one directory; see the module documentation for the layout.
#[derive(Debug)]
pub struct DevPki {
    dir: PathBuf,
    trust_domain: String,
    ca: CertificateAuthority,
    profiles: Vec<(Principal, PathBuf)>,
}

/// What to do about one leaf certificate found on disk.
enum Leaf {
    Keep,
    Issue(String),
}

impl DevPki {
    /// Creates (or completes, or simply loads) the dev PKI in `dir`.
    ///
    /// `server_names` go into hostd's certificate (e.g. `["localhost", "127.0.0.1"]`);
    /// `principals` each get a profile directory `dir/<name>` whose `profile.toml` points at
    /// `server_url` (usually [`DEFAULT_SERVER_URL`]). An existing `profile.toml` is left as is,
    /// since an operator may have edited it.
    pub fn create(
        dir: &Path,
        trust_domain: &str,
        server_names: &[&str],
        principals: &[(Role, &str)],
        server_url: &str,
    ) -> Result<DevPki, PkiError> {
        let wanted = Self::check_request(trust_domain, server_names, principals, server_url)?;
        create_private_dir(dir)?;
        let ca = Self::load_or_create_ca(dir, trust_domain, &wanted)?;
        let pki = DevPki {
            dir: dir.to_owned(),
            trust_domain: trust_domain.to_owned(),
            ca,
            profiles: Vec::new(),
        };
        pki.ensure_server(server_names)?;
        let mut profiles = Vec::with_capacity(wanted.len());
        for principal in wanted {
            let path = pki.ensure_profile(&principal, server_url)?;
            profiles.push((principal, path));
        }
        Ok(DevPki { profiles, ..pki })
    }

    /// Checks everything `create` is asked for before touching the disk, and returns the
    /// principals to issue profiles for.
    fn check_request(
        trust_domain: &str,
        server_names: &[&str],
        principals: &[(Role, &str)],
        server_url: &str,
    ) -> Result<Vec<Principal>, PkiError> {
        check_trust_domain(trust_domain)?;
        hostd_api::profile::parse_server_url(server_url)
            .map_err(|e| PkiError::BadServerUrl(report(&e).to_string()))?;
        if server_names.is_empty() {
            return Err(PkiError::BadServerName(String::new()));
        }
        for name in server_names {
            server_san(name)?;
        }
        let mut wanted = Vec::with_capacity(principals.len());
        for (role, name) in principals {
            let principal = Principal::new(trust_domain, *role, name)?;
            if [SERVER_DIR, CA_FILE, CA_KEY_FILE].contains(name) {
                return Err(PkiError::ReservedName((*name).to_owned()));
            }
            if wanted.iter().any(|p: &Principal| p.name == *name) {
                return Err(PkiError::DuplicateName((*name).to_owned()));
            }
            wanted.push(principal);
        }
        Ok(wanted)
    }

    fn load_or_create_ca(
        dir: &Path,
        trust_domain: &str,
        wanted: &[Principal],
    ) -> Result<CertificateAuthority, PkiError> {
        let cert = dir.join(CA_FILE);
        let key = dir.join(CA_KEY_FILE);
        match (cert.exists(), key.exists()) {
            (true, true) => CertificateAuthority::load(&cert, &key),
            (false, false) => {
                let leaves = std::iter::once(dir.join(SERVER_DIR))
                    .chain(wanted.iter().map(|p| dir.join(&p.name)))
                    .map(|d| d.join(CERT_FILE))
                    .find(|c| c.exists());
                if let Some(leaf) = leaves {
                    return Err(PkiError::Inconsistent(format!(
                        "{} exists but {} and {} do not; refusing to create a new CA that \
                         would not match it (restore the CA or remove {})",
                        leaf.display(),
                        cert.display(),
                        key.display(),
                        dir.display()
                    )));
                }
                // A random suffix keeps two dev CAs of one trust domain apart by name too, so a
                // certificate from the wrong one is reported as "unknown CA".
                let mut id = [0u8; 4];
                OsRng.fill_bytes(&mut id);
                let ca = CertificateAuthority::generate(
                    &format!("Sovereign Host dev CA {trust_domain} {}", hex::encode(id)),
                    Validity::days_from_now(DEV_CA_DAYS),
                )?;
                ca.write(&cert, &key)?;
                tracing::info!(path = %cert.display(), "created dev CA");
                Ok(ca)
            }
            (has_cert, _) => Err(PkiError::Inconsistent(format!(
                "{} exists but {} does not; restore it or remove {}",
                if has_cert {
                    cert.display()
                } else {
                    key.display()
                },
                if has_cert {
                    key.display()
                } else {
                    cert.display()
                },
                dir.display()
            ))),
        }
    }

    /// Whether an existing leaf can stay: present with its key, matching it, and accepted by
    /// `verify` (which checks the chain and validity as the peer will, one day from now).
    fn inspect_leaf(
        cert_path: &Path,
        key_path: &Path,
        verify: impl FnOnce(&CertificateDer<'_>, UnixTime) -> Result<(), rustls::Error>,
    ) -> Result<(Leaf, Option<CertificateDer<'static>>), PkiError> {
        match (cert_path.exists(), key_path.exists()) {
            (false, false) => return Ok((Leaf::Issue("new".into()), None)),
            (true, true) => {}
            _ => return Ok((Leaf::Issue("certificate or key file missing".into()), None)),
        }
        let cert = match tls::load_certs(cert_path) {
            Ok(mut certs) => certs.swap_remove(0),
            Err(e) => {
                return Ok((
                    Leaf::Issue(format!("unreadable certificate: {e}", e = report(&e))),
                    None,
                ))
            }
        };
        let key_pem = Zeroizing::new(fs::read_to_string(key_path).map_err(io_err(key_path))?);
        match KeyPair::from_pem(&key_pem) {
            Ok(key) if key_matches_cert(&key, &cert) => {}
            _ => {
                return Ok((
                    Leaf::Issue("key does not match certificate".into()),
                    Some(cert),
                ))
            }
        }
        let tomorrow = SystemTime::now() + StdDuration::from_secs(24 * 3600);
        let at = UnixTime::since_unix_epoch(
            tomorrow
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        );
        match verify(&cert, at) {
            Ok(()) => Ok((Leaf::Keep, Some(cert))),
            Err(e) => Ok((
                Leaf::Issue(format!("no longer valid: {e}", e = report(&e))),
                Some(cert),
            )),
        }
    }

    fn ensure_server(&self, names: &[&str]) -> Result<(), PkiError> {
        let dir = self.dir.join(SERVER_DIR);
        create_private_dir(&dir)?;
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        let verifier =
            WebPkiServerVerifier::builder_with_provider(self.ca.roots()?, tls::provider())
                .build()
                .map_err(|e| {
                    PkiError::Inconsistent(format!("server verifier: {e}", e = report(&e)))
                })?;
        let (leaf, _) = Self::inspect_leaf(&cert_path, &key_path, |cert, at| {
            for name in names {
                let server_name = ServerName::try_from(*name)
                    .map_err(|e| rustls::Error::General(report(&e).to_string()))?;
                verifier.verify_server_cert(cert, &[], &server_name, &[], at)?;
            }
            Ok(())
        })?;
        if let Leaf::Issue(why) = leaf {
            issue_server(&self.ca, names, Validity::days_from_now(DEV_LEAF_DAYS))?
                .write(&cert_path, &key_path)?;
            tracing::info!(path = %cert_path.display(), reason = %why, "issued dev server certificate");
        }
        Ok(())
    }

    fn ensure_profile(&self, principal: &Principal, server_url: &str) -> Result<PathBuf, PkiError> {
        let dir = self.dir.join(&principal.name);
        create_private_dir(&dir)?;
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        let verifier =
            WebPkiClientVerifier::builder_with_provider(self.ca.roots()?, tls::provider())
                .build()
                .map_err(|e| {
                    PkiError::Inconsistent(format!("client verifier: {e}", e = report(&e)))
                })?;
        let (leaf, existing) = Self::inspect_leaf(&cert_path, &key_path, |cert, at| {
            verifier.verify_client_cert(cert, &[], at).map(|_| ())
        })?;
        if let Some(existing) = existing {
            // A parseable certificate for someone else: never silently change who a profile is.
            let found = x509_parser::parse_x509_certificate(&existing)
                .ok()
                .and_then(|(_, c)| {
                    let san = c.subject_alternative_name().ok()??;
                    san.value.general_names.iter().find_map(|n| match n {
                        x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
                        _ => None,
                    })
                });
            if let Some(found) = found {
                if found != principal.spiffe_uri() {
                    return Err(PkiError::IdentityMismatch {
                        dir,
                        found,
                        wanted: principal.spiffe_uri(),
                    });
                }
            }
        }
        if let Leaf::Issue(why) = leaf {
            issue_client(&self.ca, principal, Validity::days_from_now(DEV_LEAF_DAYS))?
                .write(&cert_path, &key_path)?;
            tracing::info!(principal = %principal, path = %cert_path.display(), reason = %why, "issued dev client certificate");
        }
        let ca_copy = dir.join(CA_FILE);
        if fs::read_to_string(&ca_copy).ok().as_deref() != Some(self.ca.cert_pem()) {
            write_atomic(&ca_copy, self.ca.cert_pem().as_bytes(), 0o644)?;
        }
        let profile_path = dir.join(Profile::FILE_NAME);
        match fs::read_to_string(&profile_path) {
            Ok(text) => {
                // Kept as the operator may have edited it, but pointed at where the node
                // listens now: a dev node restarted on another port keeps working profiles.
                if let Some(updated) = with_server(&text, server_url) {
                    write_atomic(&profile_path, updated.as_bytes(), 0o644)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let profile = Profile::new(server_url, CA_FILE, CERT_FILE, KEY_FILE);
                write_atomic(
                    &profile_path,
                    profile.to_toml(Some(&principal.spiffe_uri())).as_bytes(),
                    0o644,
                )?;
            }
            Err(e) => return Err(io_err(&profile_path)(e)),
        }
        Ok(dir)
    }

    /// The PKI directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The CA, e.g. to issue further client certificates with [`issue_client`].
    pub fn ca(&self) -> &CertificateAuthority {
        &self.ca
    }

    pub fn ca_cert_path(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }

    pub fn ca_key_path(&self) -> PathBuf {
        self.dir.join(CA_KEY_FILE)
    }

    pub fn server_cert_path(&self) -> PathBuf {
        self.dir.join(SERVER_DIR).join(CERT_FILE)
    }

    pub fn server_key_path(&self) -> PathBuf {
        self.dir.join(SERVER_DIR).join(KEY_FILE)
    }

    /// The profile directory of the principal named `name` (whether or not it exists).
    pub fn profile_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Every principal requested from [`DevPki::create`] with its profile directory.
    pub fn profiles(&self) -> &[(Principal, PathBuf)] {
        &self.profiles
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const TD: &str = "dev.sovereign.test";

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    fn create(dir: &Path) -> Result<DevPki, PkiError> {
        DevPki::create(
            dir,
            TD,
            &["localhost", "127.0.0.1"],
            &[(Role::Operator, "operator"), (Role::Tenant, "acme")],
            DEFAULT_SERVER_URL,
        )
    }

    /// A dev node restarted on another port updates its profiles' server, keeping every
    /// other line an operator may have added.
    #[test]
    fn profiles_follow_the_server_url_and_keep_edits() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dev-state");
        let pki = create(&dir).unwrap();
        let profile = pki.profile_dir("operator").join(Profile::FILE_NAME);
        let mut text = fs::read_to_string(&profile).unwrap();
        text.push_str("# my note\n");
        fs::write(&profile, &text).unwrap();
        DevPki::create(
            &dir,
            TD,
            &["localhost", "127.0.0.1"],
            &[(Role::Operator, "operator"), (Role::Tenant, "acme")],
            "https://127.0.0.1:9555",
        )
        .unwrap();
        let after = fs::read_to_string(&profile).unwrap();
        assert!(after.contains("# my note"), "{after}");
        assert_eq!(
            Profile::load(&pki.profile_dir("operator")).unwrap().server,
            "https://127.0.0.1:9555"
        );
        assert_eq!(with_server(&after, "https://127.0.0.1:9555"), None);
    }

    /// One rule for every private key the daemon reads: the TLS server key too is refused,
    /// not merely warned about, once group or others may read it.
    #[test]
    fn a_tls_key_readable_by_others_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let pki = create(&tmp.path().join("dev-state")).unwrap();
        let key = pki.server_key_path();
        tls::server_config(&pki.ca_cert_path(), &pki.server_cert_path(), &key).unwrap();
        for m in [0o644, 0o640, 0o604] {
            fs::set_permissions(&key, fs::Permissions::from_mode(m)).unwrap();
            let err = tls::server_config(&pki.ca_cert_path(), &pki.server_cert_path(), &key)
                .expect_err("refused");
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
    }

    #[test]
    fn creates_layout_with_private_keys_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dev-state");
        let pki = create(&dir).unwrap();
        assert_eq!(mode(&dir.join("ca.key")), 0o600);
        assert_eq!(mode(&dir.join("server/key.pem")), 0o600);
        for name in ["operator", "acme"] {
            let p = dir.join(name);
            assert_eq!(mode(&p.join("key.pem")), 0o600);
            for f in ["cert.pem", "ca.pem", "profile.toml"] {
                assert!(p.join(f).is_file(), "{name}/{f}");
            }
            let profile = Profile::load(&p).unwrap();
            assert_eq!(profile.server, DEFAULT_SERVER_URL);
            assert_eq!(profile.cert, p.join("cert.pem"));
            let der = tls::load_certs(&profile.cert).unwrap().remove(0);
            let principal = Principal::from_cert_der(&der, TD).unwrap();
            assert_eq!(principal.name, name);
        }
        assert_eq!(pki.profiles().len(), 2);
        assert_eq!(pki.profiles()[1].0.role, Role::Tenant);
        // No temporary files left behind.
        for entry in fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(!name.to_string_lossy().contains(".tmp-"), "{name:?}");
        }
        // The configs the server and clients build from these files are accepted by rustls.
        tls::server_config(
            &pki.ca_cert_path(),
            &pki.server_cert_path(),
            &pki.server_key_path(),
        )
        .unwrap();
        let op = Profile::load(&dir.join("operator")).unwrap();
        sovctl::tls::client_config(&op.ca, &op.cert, &op.key).unwrap();
    }

    #[test]
    fn is_idempotent_and_never_replaces_the_ca() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        create(dir).unwrap();
        let read = |p: &str| fs::read(dir.join(p)).unwrap();
        let before: Vec<_> = [
            "ca.pem",
            "ca.key",
            "server/cert.pem",
            "operator/cert.pem",
            "operator/key.pem",
        ]
        .iter()
        .map(|p| read(p))
        .collect();
        create(dir).unwrap();
        let after: Vec<_> = [
            "ca.pem",
            "ca.key",
            "server/cert.pem",
            "operator/cert.pem",
            "operator/key.pem",
        ]
        .iter()
        .map(|p| read(p))
        .collect();
        assert_eq!(before, after);

        // A deleted client key: that leaf is re-issued under the same CA.
        fs::remove_file(dir.join("acme/key.pem")).unwrap();
        let old = read("acme/cert.pem");
        create(dir).unwrap();
        assert_ne!(read("acme/cert.pem"), old);
        assert_eq!(read("ca.pem"), before[0]);

        // A lost CA key with certificates present is an error, not a new CA.
        fs::remove_file(dir.join("ca.key")).unwrap();
        assert!(matches!(create(dir), Err(PkiError::Inconsistent(_))));
        fs::remove_file(dir.join("ca.pem")).unwrap();
        assert!(matches!(create(dir), Err(PkiError::Inconsistent(_))));
    }

    #[test]
    fn reissues_expired_leaf_and_refuses_identity_change() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let pki = create(dir).unwrap();
        let p = Principal::new(TD, Role::Operator, "operator").unwrap();
        let now = OffsetDateTime::now_utc();
        let expired = Validity {
            not_before: now - Duration::days(30),
            not_after: now - Duration::days(1),
        };
        let cert_path = dir.join("operator/cert.pem");
        let key_path = dir.join("operator/key.pem");
        issue_client(pki.ca(), &p, expired)
            .unwrap()
            .write(&cert_path, &key_path)
            .unwrap();
        let stale = fs::read(&cert_path).unwrap();
        create(dir).unwrap();
        assert_ne!(fs::read(&cert_path).unwrap(), stale);

        // Same directory name requested for another role: refused.
        let err = DevPki::create(
            dir,
            TD,
            &["localhost"],
            &[(Role::Auditor, "operator")],
            DEFAULT_SERVER_URL,
        )
        .unwrap_err();
        assert!(matches!(err, PkiError::IdentityMismatch { .. }), "{err}");
    }

    #[test]
    fn rejects_bad_arguments() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let bad = |td: &str, names: &[&str], ps: &[(Role, &str)], url: &str| {
            DevPki::create(dir, td, names, ps, url).is_err()
        };
        assert!(bad("Upper.Case", &["localhost"], &[], DEFAULT_SERVER_URL));
        assert!(bad(TD, &[], &[], DEFAULT_SERVER_URL));
        assert!(bad(TD, &["bad name"], &[], DEFAULT_SERVER_URL));
        assert!(bad(
            TD,
            &["localhost"],
            &[(Role::Tenant, "..")],
            DEFAULT_SERVER_URL
        ));
        assert!(bad(
            TD,
            &["localhost"],
            &[(Role::Tenant, "server")],
            DEFAULT_SERVER_URL
        ));
        assert!(bad(
            TD,
            &["localhost"],
            &[(Role::Tenant, "a"), (Role::Operator, "a")],
            DEFAULT_SERVER_URL
        ));
        assert!(bad(TD, &["localhost"], &[], "http://127.0.0.1:8443"));
        // Nothing was created by the refused calls.
        assert_eq!(fs::read_dir(dir).unwrap().count(), 0);
    }

    #[test]
    fn loaded_ca_issues_certificates_that_verify_against_the_original() {
        let tmp = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("test CA", Validity::days_from_now(10)).unwrap();
        let (c, k) = (tmp.path().join("ca.pem"), tmp.path().join("ca.key"));
        ca.write(&c, &k).unwrap();
        assert_eq!(mode(&k), 0o600);
        let loaded = CertificateAuthority::load(&c, &k).unwrap();
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        let p = Principal::new(TD, Role::Auditor, "eve").unwrap();
        let leaf = issue_client(&loaded, &p, Validity::days_from_now(1)).unwrap();
        let verifier =
            WebPkiClientVerifier::builder_with_provider(ca.roots().unwrap(), tls::provider())
                .build()
                .unwrap();
        verifier
            .verify_client_cert(leaf.cert_der(), &[], UnixTime::now())
            .unwrap();
        assert!(!format!("{leaf:?}").contains("PRIVATE KEY"));
        assert!(!format!("{loaded:?}").contains("PRIVATE KEY"));

        // A key that is not the CA's is refused.
        let other = CertificateAuthority::generate("other", Validity::days_from_now(10)).unwrap();
        let k2 = tmp.path().join("other.key");
        other.write(&tmp.path().join("other.pem"), &k2).unwrap();
        assert!(CertificateAuthority::load(&c, &k2).is_err());
        // A leaf is not a CA.
        let lc = tmp.path().join("leaf.pem");
        let lk = tmp.path().join("leaf.key");
        leaf.write(&lc, &lk).unwrap();
        assert!(CertificateAuthority::load(&lc, &lk).is_err());
    }
}
