//! The daemon's configuration file (`/etc/hostd/hostd.toml`).
//!
//! Every field has a documented default so that a minimal file (node identity and TLS paths)
//! is enough; unknown keys are rejected so that a typo never silently falls back to a default.

use attest::report::report;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Errors reading or validating the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config {path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub node: NodeConfig,
    #[serde(default)]
    pub api: ApiConfig,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub gpu: GpuConfig,
    #[serde(default)]
    pub metering: MeteringConfig,
    /// Price per GPU-hour by GPU model (`H100 = "250.00"`), in rupees.
    #[serde(default)]
    pub rates: BTreeMap<String, Rupees>,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub attestation: AttestationConfig,
    #[serde(default)]
    pub workloads: WorkloadConfig,
    /// The file this configuration was read from (measured into attestation evidence as
    /// `hostd.config`); not a key of the file.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Node name; also names the ledger (`<name>/usage`).
    pub name: String,
    /// ISO 3166 code of where the node stands, e.g. `IN-TG`.
    pub jurisdiction: String,
    /// Facility (data centre) identifier.
    pub facility: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where the mTLS API listens. Default `127.0.0.1:8443`.
    pub listen: SocketAddr,
    /// SPIFFE trust domain of client certificates. Default `sovereign.local`.
    pub trust_domain: String,
    /// CA that issues client certificates (PEM).
    pub ca: PathBuf,
    /// Server certificate and key (PEM).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Largest request body accepted, bytes. Default 64 KiB.
    pub max_body_bytes: usize,
    /// Seconds a client has to send a whole request body. Default 10.
    pub body_deadline_secs: u64,
    /// Requests a second each tenant may send, sustained; beyond it (and its burst), 429 with
    /// `Retry-After`. 0 turns the limit off. Default 500.
    pub tenant_requests_per_sec: u32,
    /// Requests a tenant may send at once after a quiet spell. Default 5,000.
    pub tenant_request_burst: u32,
}

impl ApiConfig {
    /// The rate each tenant is held to, `None` when `tenant_requests_per_sec` is 0.
    pub fn tenant_rate(&self) -> Option<crate::admission::Rate> {
        (self.tenant_requests_per_sec > 0).then_some(crate::admission::Rate {
            per_sec: self.tenant_requests_per_sec,
            burst: self.tenant_request_burst,
        })
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            trust_domain: "sovereign.local".into(),
            ca: PathBuf::from("/etc/hostd/tls/ca.pem"),
            cert: PathBuf::from("/etc/hostd/tls/server/cert.pem"),
            key: PathBuf::from("/etc/hostd/tls/server/key.pem"),
            max_body_bytes: 64 * 1024,
            body_deadline_secs: 10,
            tenant_requests_per_sec: 500,
            tenant_request_burst: 5000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// State directory: sled database and the node's log key. Default `/var/lib/hostd`.
    pub dir: PathBuf,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/lib/hostd"),
        }
    }
}

/// Tenants' jobs: where systemd is, where their logs and scratch live, and their limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadConfig {
    /// Run jobs at all. Default true; a node without systemd sets false (the API then answers
    /// 503 for jobs and says why).
    pub enabled: bool,
    /// D-Bus address of systemd. Default the system bus.
    pub systemd_bus: String,
    /// Where job logs and lease scratch directories live. Default `/var/lib/hostd-work`: not
    /// inside the state directory, which is hostd's alone (0700) while jobs' uids must reach
    /// their scratch.
    pub work_dir: PathBuf,
    /// Where leases' encrypted scratch directories live: a file system with fscrypt enabled
    /// (ext4 made or tuned with `-O encrypt`). Default `<work_dir>/scratch`.
    pub scratch_dir: Option<PathBuf>,
    /// Scratch a lease may fill, bytes (checked on uploads; see docs/isolation.md).
    pub scratch_quota_bytes: u64,
    /// Interfaces leases' allowed traffic leaves through (forwarding is switched on for them
    /// alone). Default none: leases reach nothing beyond the node.
    pub uplinks: Vec<String>,
    /// Address jobs' published service ports listen on (the port is picked by the kernel).
    /// Default `0.0.0.0`.
    pub publish_address: std::net::IpAddr,
    /// Connections one published port forwards at once. Default 256.
    pub publish_max_connections: usize,
    /// First uid (and gid) of the range hostd gives leases' jobs. Default 60000.
    pub uid_first: u32,
    /// How many uids. Default 1000.
    pub uid_count: u32,
    /// Limits for jobs that ask for none.
    pub default_memory_bytes: u64,
    pub default_cpu_millis: u64,
    pub default_tasks: u64,
    pub default_max_runtime_secs: u64,
    /// The most a job may ask for.
    pub max_memory_bytes: u64,
    pub max_cpu_millis: u64,
    pub max_tasks: u64,
    pub max_runtime_secs: u64,
    /// Most jobs running at once on one lease.
    pub max_jobs_per_lease: usize,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            systemd_bus: "unix:path=/run/dbus/system_bus_socket".into(),
            work_dir: PathBuf::from("/var/lib/hostd-work"),
            scratch_dir: None,
            scratch_quota_bytes: 100 << 30,
            uplinks: Vec::new(),
            publish_address: std::net::IpAddr::from([0, 0, 0, 0]),
            publish_max_connections: 256,
            uid_first: 60_000,
            uid_count: 1_000,
            default_memory_bytes: 4 << 30,
            default_cpu_millis: 2_000,
            default_tasks: 512,
            default_max_runtime_secs: 24 * 3600,
            max_memory_bytes: 512 << 30,
            max_cpu_millis: 64_000,
            max_tasks: 65_536,
            max_runtime_secs: 30 * 24 * 3600,
            max_jobs_per_lease: 64,
        }
    }
}

impl WorkloadConfig {
    /// Where scratch directories live.
    pub fn scratch_dir(&self) -> PathBuf {
        self.scratch_dir
            .clone()
            .unwrap_or_else(|| self.work_dir.join("scratch"))
    }

    /// The uid range stays clear of root and of systemd's DynamicUser range; defaults never
    /// exceed maxima.
    fn validate(&self) -> Result<(), (&'static str, String)> {
        let end = u64::from(self.uid_first) + u64::from(self.uid_count);
        if self.uid_first < 1000 || self.uid_count == 0 || (end > 61_184 && self.uid_first < 65_520)
        {
            return Err((
                "workloads.uid_first",
                "the job uid range must start at 1000 or above, hold at least one uid and stay clear of systemd's DynamicUser range 61184-65519".into(),
            ));
        }
        let pairs = [
            (
                "workloads.default_memory_bytes",
                self.default_memory_bytes,
                self.max_memory_bytes,
            ),
            (
                "workloads.default_cpu_millis",
                self.default_cpu_millis,
                self.max_cpu_millis,
            ),
            (
                "workloads.default_tasks",
                self.default_tasks,
                self.max_tasks,
            ),
            (
                "workloads.default_max_runtime_secs",
                self.default_max_runtime_secs,
                self.max_runtime_secs,
            ),
        ];
        for (field, default, max) in pairs {
            if default > max || default == 0 {
                return Err((field, format!("must be between 1 and its maximum ({max})")));
            }
        }
        if self.max_jobs_per_lease == 0 {
            return Err(("workloads.max_jobs_per_lease", "must be at least 1".into()));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GpuConfig {
    /// Path of `libnvidia-ml.so`; default: the system's `libnvidia-ml.so.1`.
    pub nvml_library: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MeteringConfig {
    /// Seconds between samples of each leased GPU. Default 10.
    pub interval_secs: f64,
    /// Time acceleration (dev mode only): virtual seconds per real second. Default 1.
    pub time_scale: f64,
    /// Real seconds of uninterrupted metering failure (a full disk, a store that refuses
    /// writes) after which hostd stops so its supervisor restarts it. Default 120.
    pub stop_after_failing_secs: u64,
}

impl Default for MeteringConfig {
    fn default() -> Self {
        Self {
            interval_secs: 10.0,
            time_scale: 1.0,
            stop_after_failing_secs: 120,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Residency policy (TOML) consulted before every placement, with its signature in
    /// `<file>.sig`. Without one, every placement is denied (deny by default).
    pub file: Option<PathBuf>,
    /// The policy authority's verifier key (`<name>+<id>+<base64>`); required with `file`.
    pub authority: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AttestationConfig {
    /// Enrollment certificate (canonical JSON, see docs/attestation.md §2) that the operator's
    /// enrollment authority issued for this node's identity key (`<state>/node.pub`). Without
    /// one, `POST /v1/attestation` answers 503. Default: none.
    pub enrollment_certificate: Option<PathBuf>,
    /// Verifier keys (Ed25519 public keys, 64 hex digits) whose signed attestation results the
    /// node accepts on `POST /v1/attestation/results` and appends to the ledger. Default:
    /// none (results are refused).
    pub verifier_keys: Vec<String>,
    /// The TPM whose quotes go into evidence: `"auto"` (default: `/dev/tpmrm0` if it
    /// exists), `"off"`, or an absolute device path.
    pub tpm: TpmSetting,
}

/// `[attestation] tpm`. Written as a string in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum TpmSetting {
    /// The kernel's resource-managed device if it exists, else no TPM.
    #[default]
    Auto,
    /// No quotes, even with a TPM (the enrollment must then not bind an AK).
    Off,
    /// This device; failing to open it stops hostd from starting.
    Device(PathBuf),
}

/// A `tpm` setting that is none of `auto`, `off` or an absolute device path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tpm = {0:?}: expected \"auto\", \"off\" or an absolute device path")]
pub struct BadTpmSetting(pub String);

impl TryFrom<String> for TpmSetting {
    type Error = BadTpmSetting;
    fn try_from(s: String) -> Result<Self, BadTpmSetting> {
        match s.as_str() {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            p if Path::new(p).is_absolute() => Ok(Self::Device(PathBuf::from(p))),
            _ => Err(BadTpmSetting(s)),
        }
    }
}

impl From<TpmSetting> for String {
    fn from(t: TpmSetting) -> String {
        match t {
            TpmSetting::Auto => "auto".into(),
            TpmSetting::Off => "off".into(),
            TpmSetting::Device(p) => p.display().to_string(),
        }
    }
}

impl TpmSetting {
    /// The device to use: `auto` looks for `/dev/tpmrm0` now.
    pub fn device(&self) -> Option<PathBuf> {
        match self {
            Self::Auto => Some(PathBuf::from(tpm::DEFAULT_DEVICE)).filter(|p| p.exists()),
            Self::Off => None,
            Self::Device(p) => Some(p.clone()),
        }
    }
}

/// A configured verifier key that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BadVerifierKey {
    /// Not 32 bytes of hex.
    #[error("`{key}` is not 64 hex digits")]
    NotHex {
        /// The key as configured.
        key: String,
    },
    /// 32 bytes, but not a valid Ed25519 public key.
    #[error("`{key}` is not a usable Ed25519 key")]
    NotEd25519 {
        /// The key as configured.
        key: String,
        /// Why the bytes are refused.
        #[source]
        source: attest::identity::IdentityError,
    },
}

impl AttestationConfig {
    /// The configured verifier keys, parsed (validated when the config is loaded).
    pub fn verifier_keys(&self) -> Result<Vec<ed25519_dalek::VerifyingKey>, BadVerifierKey> {
        self.verifier_keys
            .iter()
            .map(|k| {
                let mut b = [0u8; 32];
                hex::decode_to_slice(k.trim(), &mut b)
                    .map_err(|_| BadVerifierKey::NotHex { key: k.clone() })?;
                attest::identity::verifying_key(&b).map_err(|source| BadVerifierKey::NotEd25519 {
                    key: k.clone(),
                    source,
                })
            })
            .collect()
    }
}

/// Why a text is not an amount of rupees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadAmount {
    /// Not digits with at most two decimals (a sign, a third decimal, letters, nothing).
    #[error("`{0}` is not an amount in rupees with at most two decimals")]
    NotAnAmount(String),
    /// More paise than a `u64` holds.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// An amount of rupees with at most two decimals, kept as integer paise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rupees(pub u64);

impl Rupees {
    pub fn paise(self) -> u64 {
        self.0
    }

    /// Parses `250`, `250.5`, `250.50`; rejects negatives, more than two decimals, garbage.
    pub fn parse(s: &str) -> Result<Rupees, BadAmount> {
        let s = s.trim();
        let (whole, frac) = match s.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (s, None),
        };
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || frac.is_some_and(|f| !digits(f) || f.len() > 2) {
            return Err(BadAmount::NotAnAmount(s.to_owned()));
        }
        let whole: u64 = whole
            .parse()
            .map_err(|_| BadAmount::TooLarge(s.to_owned()))?;
        let frac = frac.unwrap_or("");
        let frac_paise: u64 = match frac.len() {
            0 => 0,
            1 => frac.parse::<u64>().unwrap_or(0) * 10,
            _ => frac.parse::<u64>().unwrap_or(0),
        };
        whole
            .checked_mul(100)
            .and_then(|p| p.checked_add(frac_paise))
            .map(Rupees)
            .ok_or_else(|| BadAmount::TooLarge(s.to_owned()))
    }
}

impl std::fmt::Display for Rupees {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

impl Serialize for Rupees {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Rupees {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => n
                .checked_mul(100)
                .map(Rupees)
                .ok_or_else(|| serde::de::Error::custom("rate too large")),
            Raw::Str(s) => Rupees::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut cfg = Self::from_toml(&text, path)?;
        cfg.source = Some(path.to_owned());
        Ok(cfg)
    }

    /// Parses and validates config text; `path` is only used in messages and to resolve
    /// relative paths against the file's directory.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: report(&e).to_string(),
        })?;
        if let Some(base) = path.parent() {
            cfg.resolve_relative(base);
        }
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn resolve_relative(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.api.ca);
        fix(&mut self.api.cert);
        fix(&mut self.api.key);
        fix(&mut self.state.dir);
        fix(&mut self.workloads.work_dir);
        if let Some(p) = self.workloads.scratch_dir.as_mut() {
            fix(p);
        }
        if let Some(p) = self.gpu.nvml_library.as_mut() {
            fix(p);
        }
        if let Some(p) = self.policy.file.as_mut() {
            fix(p);
        }
        if let Some(p) = self.policy.authority.as_mut() {
            fix(p);
        }
        if let Some(p) = self.attestation.enrollment_certificate.as_mut() {
            fix(p);
        }
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            field: field.into(),
            message,
        };
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        };
        if !name_ok(&self.node.name) {
            return Err(invalid(
                "node.name",
                "must be 1-64 characters of A-Z a-z 0-9 . _ -".into(),
            ));
        }
        if self.node.jurisdiction.trim().is_empty() {
            return Err(invalid("node.jurisdiction", "must not be empty".into()));
        }
        if !(self.metering.interval_secs.is_finite()
            && self.metering.interval_secs >= 0.01
            && self.metering.interval_secs <= 3600.0)
        {
            return Err(invalid(
                "metering.interval_secs",
                "must be between 0.01 and 3600".into(),
            ));
        }
        if !(self.metering.time_scale.is_finite()
            && self.metering.time_scale >= 1.0
            && self.metering.time_scale <= 1_000_000.0)
        {
            return Err(invalid(
                "metering.time_scale",
                "must be between 1 and 1000000".into(),
            ));
        }
        if self.policy.file.is_some() && self.policy.authority.is_none() {
            return Err(invalid(
                "policy.authority",
                "a policy file needs the policy authority's key: the node runs signed policies only".into(),
            ));
        }
        if let Err(e) = self.attestation.verifier_keys() {
            return Err(invalid("attestation.verifier_keys", report(&e).to_string()));
        }
        if self.api.max_body_bytes < 1024 || self.api.max_body_bytes > 16 * 1024 * 1024 {
            return Err(invalid(
                "api.max_body_bytes",
                "must be between 1 KiB and 16 MiB".into(),
            ));
        }
        if self.api.tenant_requests_per_sec > 1_000_000 {
            return Err(invalid(
                "api.tenant_requests_per_sec",
                "must be at most 1000000 (0 turns the limit off)".into(),
            ));
        }
        if !(1..=1_000_000).contains(&self.api.tenant_request_burst) {
            return Err(invalid(
                "api.tenant_request_burst",
                "must be between 1 and 1000000".into(),
            ));
        }
        self.workloads
            .validate()
            .map_err(|(field, m)| invalid(field, m))
    }

    /// Paise per GPU-hour for a GPU model, if the operator priced it.
    pub fn rate_for(&self, model: &str) -> Option<u64> {
        self.rates
            .iter()
            .find(|(m, _)| m.eq_ignore_ascii_case(model))
            .map(|(_, r)| r.paise())
    }

    /// Origin (and key name) of the node's usage log.
    pub fn log_origin(&self) -> String {
        format!("{}/usage", self.node.name)
    }
}

#[cfg(test)]
mod tests {
    /// docs/operations.md's configuration example is a valid configuration, every key in it
    /// real (unknown keys are errors).
    #[test]
    fn the_documented_configuration_parses() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
        )
        .unwrap();
        let section = doc.split("## Configuration").nth(1).unwrap();
        let toml = section
            .split("```toml\n")
            .nth(1)
            .and_then(|t| t.split("```").next())
            .unwrap();
        let cfg = Config::from_toml(toml, std::path::Path::new("/etc/hostd/hostd.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.workloads.uplinks, vec!["eth0".to_owned()]);
        assert_eq!(cfg.workloads.max_jobs_per_lease, 64);
    }

    use super::*;

    const MIN: &str = r#"
[node]
name = "hyd-node-01"
jurisdiction = "IN-TG"
facility = "hyd-dc-1"
[rates]
H100 = "250.00"
L4 = 60
"#;

    #[test]
    fn minimal_config_gets_documented_defaults() {
        let c = Config::from_toml(MIN, Path::new("/etc/hostd/hostd.toml")).unwrap();
        assert_eq!(c.api.listen.to_string(), "127.0.0.1:8443");
        assert_eq!(c.metering.interval_secs, 10.0);
        assert_eq!(c.rate_for("h100"), Some(25_000));
        assert_eq!(c.rate_for("L4"), Some(6_000));
        assert_eq!(c.rate_for("A100"), None);
        assert_eq!(c.log_origin(), "hyd-node-01/usage");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let typo = format!("{MIN}\n[metering]\nintervall_secs = 5\n");
        let e = Config::from_toml(&typo, Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("intervall_secs"), "{e}");
        let bad = MIN.replace("\"250.00\"", "\"250.001\"");
        assert!(Config::from_toml(&bad, Path::new("x.toml")).is_err());
        let bad = MIN.replace("hyd-node-01", "hyd node");
        assert!(Config::from_toml(&bad, Path::new("x.toml")).is_err());
    }

    #[test]
    fn attestation_section() {
        let c = Config::from_toml(MIN, Path::new("/etc/hostd/hostd.toml")).unwrap();
        assert_eq!(c.attestation, AttestationConfig::default());
        let key = hex::encode(
            ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
                .verifying_key()
                .to_bytes(),
        );
        let text = format!(
            "{MIN}\n[attestation]\nenrollment_certificate = \"enrollment.json\"\nverifier_keys = [\"{key}\"]\n"
        );
        let c = Config::from_toml(&text, Path::new("/etc/hostd/hostd.toml")).unwrap();
        assert_eq!(
            c.attestation.enrollment_certificate.as_deref(),
            Some(Path::new("/etc/hostd/enrollment.json"))
        );
        assert_eq!(c.attestation.verifier_keys().unwrap().len(), 1);
        for bad in ["\"abc\"", "\"zz\""] {
            let text = format!("{MIN}\n[attestation]\nverifier_keys = [{bad}]\n");
            let e = Config::from_toml(&text, Path::new("x.toml")).unwrap_err();
            assert!(e.to_string().contains("attestation.verifier_keys"), "{e}");
        }
        let typo = format!("{MIN}\n[attestation]\nenrolment_certificate = \"x\"\n");
        assert!(Config::from_toml(&typo, Path::new("x.toml")).is_err());
    }

    #[test]
    fn tpm_setting() {
        let c = Config::from_toml(MIN, Path::new("x.toml")).unwrap();
        assert_eq!(c.attestation.tpm, TpmSetting::Auto);
        for (value, want) in [
            ("off", TpmSetting::Off),
            ("auto", TpmSetting::Auto),
            ("/dev/tpm0", TpmSetting::Device("/dev/tpm0".into())),
        ] {
            let text = format!("{MIN}\n[attestation]\ntpm = \"{value}\"\n");
            let c = Config::from_toml(&text, Path::new("x.toml")).unwrap();
            assert_eq!(c.attestation.tpm, want);
            assert_eq!(String::from(want), value);
        }
        assert_eq!(TpmSetting::Off.device(), None);
        for bad in ["on", "dev/tpmrm0", ""] {
            let text = format!("{MIN}\n[attestation]\ntpm = \"{bad}\"\n");
            let e = Config::from_toml(&text, Path::new("x.toml")).unwrap_err();
            assert!(e.to_string().contains("tpm"), "{e}");
        }
    }

    /// Tenants are rate-limited unless the operator says 0; a burst of 0 would refuse every
    /// request and is an error, not a silent lock-out.
    #[test]
    fn tenant_request_rate() {
        let c = Config::from_toml(MIN, Path::new("x.toml")).unwrap();
        let rate = crate::admission::Rate {
            per_sec: 500,
            burst: 5000,
        };
        assert_eq!(c.api.tenant_rate(), Some(rate));
        let text = format!("{MIN}\n[api]\ntenant_requests_per_sec = 0\n");
        let c = Config::from_toml(&text, Path::new("x.toml")).unwrap();
        assert_eq!(c.api.tenant_rate(), None);
        for (key, bad) in [
            ("tenant_request_burst", "0"),
            ("tenant_request_burst", "1000001"),
            ("tenant_requests_per_sec", "1000001"),
            ("tenant_requests_per_sec", "-1"),
        ] {
            let text = format!("{MIN}\n[api]\n{key} = {bad}\n");
            let e = Config::from_toml(&text, Path::new("x.toml")).unwrap_err();
            assert!(e.to_string().contains(key), "{key} = {bad}: {e}");
        }
    }

    #[test]
    fn rupees_parse_exactly() {
        assert_eq!(Rupees::parse("250").unwrap().paise(), 25_000);
        assert_eq!(Rupees::parse("0.5").unwrap().paise(), 50);
        assert_eq!(Rupees::parse("12.34").unwrap().to_string(), "12.34");
        for bad in ["", "-1", "1.234", "abc", "1.", ".5"] {
            assert_eq!(
                Rupees::parse(bad),
                Err(BadAmount::NotAnAmount(bad.into())),
                "{bad}"
            );
        }
        for huge in ["99999999999999999999", "184467440737095516.16"] {
            assert_eq!(
                Rupees::parse(huge),
                Err(BadAmount::TooLarge(huge.into())),
                "{huge}"
            );
        }
    }
}
