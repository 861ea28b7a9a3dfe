//! The node as an attester (RFC 9334): fresh, signed evidence about what runs here, answering
//! a verifier's nonce (`POST /v1/attestation`).
//!
//! The evidence format and every check a verifier makes are in `docs/attestation.md`; this
//! module only gathers the claims:
//!
//! * the node identity key (`<state>/node.key`, Ed25519, 0600, created on first start; its
//!   public half in `<state>/node.pub` for the operator's enrollment authority);
//! * the enrollment certificate the operator's authority issued for that key
//!   (`[attestation] enrollment_certificate`); without one the node cannot attest;
//! * measurements (SHA-256): the running `hostd` binary, its config file, the active policy
//!   digest, the ledger's latest signed checkpoint, and — where the machine exposes them — the
//!   kernel command line, kernel and initrd images. A source that
//!   is absent or unreadable is omitted, never fatal: the omission is listed in the answer's
//!   `measurement_notes` (and logged once), and a verifier whose reference values list it
//!   reports `measurement-missing`;
//! * with a TPM (`[attestation] tpm`), a TPM 2.0 quote over PCRs 4, 7, 11 and 12 answering the
//!   nonce, signed by the TPM's attestation key (the `tpm` crate). PCR values read from sysfs
//!   are not sent: they would be the node's own say-so, and verifiers ignore them;
//! * one submodule per healthy GPU, with the NVIDIA SPDM report over the *derived* nonce
//!   `SHA-256(nonce || UUID || node key)` when the GPU is in CC mode.
//!
//! Static measurements (binary, config, boot files) are computed once, on a background thread
//! started when the node opens, because hashing a large binary takes a moment.

use crate::config::{Config, TpmSetting};
use crate::gpu::{GpuInfo, Gpus};
use attest::evidence::{
    gpu_nonce, CcMode, Evidence, EvidenceClaims, GpuClaims, GpuReport, HexBytes,
};
use attest::identity::{EnrollmentCertificate, NodeKey};
use attest::report::report;

/// A cause of any kind, kept as the source of a typed error.
type BoxError = Box<dyn std::error::Error + Send + Sync>;
use attest::tpm::QuoteClaim;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tracing::{info, warn};
use zeroize::Zeroizing;

/// File name of the node identity key in the state directory.
pub const NODE_KEY_FILE: &str = "node.key";
/// File name of the node identity public key (hex) in the state directory.
pub const NODE_PUB_FILE: &str = "node.pub";

#[derive(Debug, thiserror::Error)]
pub enum AttestationError {
    #[error("node identity key {path}")]
    NodeKey {
        path: PathBuf,
        #[source]
        source: BoxError,
    },
    #[error("enrollment certificate {path}")]
    Enrollment {
        path: PathBuf,
        #[source]
        source: BoxError,
    },
    #[error("enrollment certificate {path} was issued for node key {issued_for}, but this node's key is {node_key}")]
    EnrolledOtherKey {
        path: PathBuf,
        issued_for: String,
        node_key: String,
    },
    #[error("this node has no enrollment certificate; configure [attestation] enrollment_certificate (issued for the key in {0})")]
    NotEnrolled(PathBuf),
    #[error("cannot start measuring the node")]
    Measure(#[source] std::io::Error),
    #[error("signing the evidence")]
    Evidence(#[from] attest::evidence::EvidenceError),
    #[error("the TPM configured in [attestation] tpm")]
    Tpm(#[from] tpm::TpmError),
    #[error("the enrollment certificate binds TPM attestation key {enrolled}, but this node's TPM has {actual}: issue one with `sovctl attest enroll --tpm-ak` and the output of `hostd tpm-ak`")]
    TpmAkMismatch { enrolled: String, actual: String },
}

/// Whether the enrollment and the TPM in use agree, checked at start so a mistake shows in
/// hostd's log rather than only in a verifier's refusal: an enrollment binding another AK is
/// an error (every quote would fail); one binding none is a warning (returned), since every
/// quote is then refused as `tpm-ak-not-enrolled`, yet the node may be mid-enrolment.
pub fn check_tpm_enrollment(
    tpm: &SharedTpm,
    enrollment: &EnrollmentCertificate,
) -> Result<Option<String>, AttestationError> {
    let actual = {
        let mut transport = tpm.lock().unwrap_or_else(|p| p.into_inner());
        tpm::ak_public(&mut **transport)?
    };
    match &enrollment.claims.tpm_ak {
        Some(enrolled) if *enrolled == actual => Ok(None),
        Some(enrolled) => Err(AttestationError::TpmAkMismatch {
            enrolled: hex::encode(enrolled),
            actual: hex::encode(actual),
        }),
        None => Ok(Some(
            "a TPM is in use but the enrollment certificate binds no TPM attestation key: \
             verifiers will refuse its quotes (tpm-ak-not-enrolled); enrol the key `hostd tpm-ak` \
             prints, or set [attestation] tpm = \"off\""
                .into(),
        )),
    }
}

/// Loads the node identity key from `<state_dir>/node.key`, creating it (0600, from the OS
/// random generator) on first use, and (re)writes `<state_dir>/node.pub`.
pub fn load_or_create_node_key(state_dir: &Path) -> Result<NodeKey, AttestationError> {
    let path = state_dir.join(NODE_KEY_FILE);
    let err = |source: BoxError| AttestationError::NodeKey {
        path: path.clone(),
        source,
    };
    let key = match keyfile::read_ed25519_seed(&path) {
        Ok(seed) => NodeKey::from_seed(&seed),
        Err(keyfile::KeyFileError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            let seed = keyfile::random_seed().map_err(|e| err(e.into()))?;
            let text = Zeroizing::new(hex::encode(seed.as_ref()));
            keyfile::write_new_private(&path, text.as_bytes()).map_err(|e| err(e.into()))?;
            info!(path = %path.display(), "created the node identity key");
            NodeKey::from_seed(&seed)
        }
        Err(e) => return Err(err(e.into())),
    };
    let pub_path = state_dir.join(NODE_PUB_FILE);
    std::fs::write(&pub_path, format!("{}\n", hex::encode(key.public_key()))).map_err(|e| {
        AttestationError::NodeKey {
            path: pub_path.clone(),
            source: e.into(),
        }
    })?;
    Ok(key)
}

/// Reads an enrollment certificate and checks that it names `key`.
pub fn load_enrollment(
    path: &Path,
    key: &NodeKey,
) -> Result<EnrollmentCertificate, AttestationError> {
    let err = |source: BoxError| AttestationError::Enrollment {
        path: path.to_owned(),
        source,
    };
    let bytes = std::fs::read(path).map_err(|e| err(e.into()))?;
    let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let cert = EnrollmentCertificate::from_bytes(trimmed).map_err(|e| err(e.into()))?;
    if cert.claims.node_public_key != key.public_key() {
        return Err(AttestationError::EnrolledOtherKey {
            path: path.to_owned(),
            issued_for: hex::encode(cert.claims.node_public_key),
            node_key: hex::encode(key.public_key()),
        });
    }
    Ok(cert)
}

/// Measurements that do not change while hostd runs, with notes on what was left out.
#[derive(Debug, Clone, Default)]
pub struct StaticMeasurements {
    pub values: BTreeMap<String, [u8; 32]>,
    pub notes: Vec<String>,
}

fn sha256_file(path: &Path) -> std::io::Result<[u8; 32]> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// Lowers the calling thread to the lowest CPU priority (nice 19). Hashing hostd's own binary
/// is tens of megabytes of SHA-256; on a node's first CPU seconds, or a one-CPU VM, it would
/// otherwise take half the CPU from the startup that it runs beside, and delay readiness.
/// An attestation request that comes before it is done waits for it. A refusal (a seccomp
/// filter, say) leaves the priority as it was: slower, never wrong.
fn yield_to_startup() {
    let thread = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(thread), 19) {
        info!(error = %e, "the measuring thread keeps its priority");
    }
}

/// Measures the binary, config and boot files. Never fails: every missing source is a note.
pub fn measure_static(config_file: Option<&Path>) -> StaticMeasurements {
    let mut m = StaticMeasurements::default();
    let file = |name: &str, path: &Path, m: &mut StaticMeasurements| match sha256_file(path) {
        Ok(d) => {
            m.values.insert(name.to_string(), d);
        }
        Err(e) => m.notes.push(format!(
            "{name}: {} not measured: {e}",
            path.display(),
            e = report(&e)
        )),
    };
    file("hostd", Path::new("/proc/self/exe"), &mut m);
    match config_file {
        Some(p) => file("hostd.config", p, &mut m),
        None => m
            .notes
            .push("hostd.config: the configuration did not come from a file".into()),
    }
    file("cmdline", Path::new("/proc/cmdline"), &mut m);
    match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        Ok(release) => {
            let r = release.trim();
            file(
                "kernel",
                &PathBuf::from(format!("/boot/vmlinuz-{r}")),
                &mut m,
            );
            let initrds = [
                PathBuf::from(format!("/boot/initrd.img-{r}")),
                PathBuf::from(format!("/boot/initramfs-{r}.img")),
            ];
            match initrds.iter().find(|p| p.exists()) {
                Some(p) => file("initrd", p, &mut m),
                None => m.notes.push(format!(
                    "initrd: no /boot/initrd.img-{r} or /boot/initramfs-{r}.img"
                )),
            }
        }
        Err(e) => m.notes.push(format!(
            "kernel, initrd: kernel release unknown: {e}",
            e = report(&e)
        )),
    }
    m
}

enum Pending {
    Running(JoinHandle<StaticMeasurements>),
    Ready(Arc<StaticMeasurements>),
}

/// Evidence and the notes on what it leaves out.
#[derive(Debug, Clone)]
pub struct Collected {
    /// The canonical evidence document, exactly as signed.
    pub evidence: Vec<u8>,
    pub notes: Vec<String>,
}

/// A TPM connection shared by concurrent collections: a TPM runs one command at a time, and
/// a quote is several commands that must not interleave.
pub type SharedTpm = Mutex<Box<dyn tpm::Transport + Send>>;

/// The node's attester: identity key, enrollment, measurements, TPM.
pub struct Attester {
    key: NodeKey,
    key_path: PathBuf,
    enrollment: Option<EnrollmentCertificate>,
    statics: Mutex<Pending>,
    tpm: Option<SharedTpm>,
    /// The firmware's event log of that TPM, sent with each quote.
    event_log: Option<PathBuf>,
}

/// Where Linux shows the firmware's TCG event log of the TPM at `device` (`/dev/tpmrmN` or
/// `/dev/tpmN`): securityfs, which systemd mounts at boot. None for anything else (swtpm's
/// socket in tests has no firmware).
pub fn event_log_path(device: &Path) -> Option<PathBuf> {
    let name = device.file_name()?.to_str()?;
    let n = name
        .strip_prefix("tpmrm")
        .or_else(|| name.strip_prefix("tpm"))?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| {
        Path::new("/sys/kernel/security")
            .join(format!("tpm{n}"))
            .join("binary_bios_measurements")
    })
}

/// The event log at `path`, or a note saying why evidence goes without it (a verifier that
/// appraises what the firmware started then says the log is missing).
fn read_event_log(path: &Path, notes: &mut Vec<String>) -> Option<Vec<u8>> {
    let refused = |notes: &mut Vec<String>, why: String| {
        warn!(path = %path.display(), why = %why, "no TPM event log in evidence");
        notes.push(format!("tpm: no event log: {why}"));
        None
    };
    match std::fs::read(path) {
        Ok(log) if log.len() > attest::tpm::MAX_EVENT_LOG_BYTES => refused(
            notes,
            format!(
                "{}: {} bytes, more than {}",
                path.display(),
                log.len(),
                attest::tpm::MAX_EVENT_LOG_BYTES
            ),
        ),
        Ok(log) => Some(log),
        Err(e) => refused(notes, format!("{}: {}", path.display(), report(&e))),
    }
}

/// Opens the TPM `[attestation] tpm` names. `auto` without a device is no TPM; an explicit
/// device that cannot be opened is an error, as is `auto` with a device that cannot (a node
/// with a TPM that silently stopped quoting would look like one without).
pub fn open_tpm(setting: &TpmSetting) -> Result<Option<SharedTpm>, AttestationError> {
    let Some(path) = setting.device() else {
        info!(setting = %String::from(setting.clone()), "no TPM in use: evidence carries no quote");
        return Ok(None);
    };
    let device = tpm::Device::open(&path)?;
    info!(device = %path.display(), "TPM quotes go into evidence");
    Ok(Some(Mutex::new(Box::new(device))))
}

impl std::fmt::Debug for Attester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attester")
            .field("node_public_key", &hex::encode(self.key.public_key()))
            .field("enrolled", &self.enrollment.is_some())
            .field("tpm", &self.tpm.is_some())
            .finish_non_exhaustive()
    }
}

impl Attester {
    /// Loads (or creates) the identity key and the configured enrollment certificate, and
    /// starts measuring in the background. A missing certificate is not an error (the node
    /// runs, and says why it cannot attest); a wrong one is.
    pub fn open(cfg: &Config) -> Result<Attester, AttestationError> {
        let key = load_or_create_node_key(&cfg.state.dir)?;
        let enrollment = match &cfg.attestation.enrollment_certificate {
            Some(p) => Some(load_enrollment(p, &key)?),
            None => {
                warn!("no enrollment certificate configured: the node cannot answer attestation requests");
                None
            }
        };
        let tpm = open_tpm(&cfg.attestation.tpm)?;
        let event_log = tpm
            .as_ref()
            .and(cfg.attestation.tpm.device())
            .and_then(|device| event_log_path(&device));
        if let (Some(tpm), Some(enrollment)) = (&tpm, &enrollment) {
            if let Some(warning) = check_tpm_enrollment(tpm, enrollment)? {
                warn!("{warning}");
            }
        }
        let config_file = cfg.source.clone();
        let handle = std::thread::Builder::new()
            .name("measure".into())
            .spawn(move || {
                yield_to_startup();
                let m = measure_static(config_file.as_deref());
                for n in &m.notes {
                    info!(note = %n, "measurement omitted");
                }
                m
            })
            .map_err(AttestationError::Measure)?;
        Ok(Attester {
            key,
            key_path: cfg.state.dir.join(NODE_KEY_FILE),
            enrollment,
            statics: Mutex::new(Pending::Running(handle)),
            tpm,
            event_log,
        })
    }

    /// An attester from parts, with no static measurements (tests and tools that bring
    /// their own TPM transport).
    pub fn from_parts(
        key: NodeKey,
        key_path: PathBuf,
        enrollment: Option<EnrollmentCertificate>,
        tpm: Option<SharedTpm>,
    ) -> Attester {
        Attester {
            key,
            key_path,
            enrollment,
            statics: Mutex::new(Pending::Ready(Arc::default())),
            tpm,
            event_log: None,
        }
    }

    /// The same, sending the event log at `path` with each quote.
    pub fn with_event_log(self, path: PathBuf) -> Attester {
        Attester {
            event_log: Some(path),
            ..self
        }
    }

    /// Whether evidence carries TPM quotes.
    pub fn has_tpm(&self) -> bool {
        self.tpm.is_some()
    }

    /// The TPM's quote answering `nonce`, or `None` without a TPM. A failing TPM is a note,
    /// not an error: the evidence then lacks the quote, which a verifier that expects one (the
    /// enrollment binds an AK) reports as `tpm-quote-missing`.
    fn quote(&self, nonce: &[u8; 32], notes: &mut Vec<String>) -> Option<QuoteClaim> {
        let shared = self.tpm.as_ref()?;
        let mut transport = shared.lock().unwrap_or_else(|p| p.into_inner());
        match tpm::quote(&mut **transport, nonce) {
            Ok(mut q) => {
                q.event_log = self
                    .event_log
                    .as_deref()
                    .and_then(|path| read_event_log(path, notes));
                Some(q)
            }
            Err(e) => {
                warn!(error = %report(&e), "TPM quote failed");
                notes.push(format!("tpm: no quote: {e}", e = report(&e)));
                None
            }
        }
    }

    pub fn node_public_key(&self) -> [u8; 32] {
        self.key.public_key()
    }

    pub fn enrollment(&self) -> Option<&EnrollmentCertificate> {
        self.enrollment.as_ref()
    }

    fn statics(&self) -> Arc<StaticMeasurements> {
        let mut g = self.statics.lock().unwrap_or_else(|p| p.into_inner());
        if let Pending::Ready(m) = &*g {
            return m.clone();
        }
        let m = match std::mem::replace(&mut *g, Pending::Ready(Arc::default())) {
            Pending::Running(h) => h.join().unwrap_or_else(|_| StaticMeasurements {
                values: BTreeMap::new(),
                notes: vec!["static measurements failed (measuring thread panicked)".into()],
            }),
            Pending::Ready(m) => return m,
        };
        let m = Arc::new(m);
        *g = Pending::Ready(m.clone());
        m
    }

    /// Signed evidence answering `nonce` at `now` (Unix seconds), with `dynamic` measurements
    /// (policy digest, ledger checkpoint) and one submodule per healthy GPU in `inventory`.
    pub fn collect(
        &self,
        nonce: [u8; 32],
        now: u64,
        gpus: &Gpus,
        inventory: &[GpuInfo],
        dynamic: &[(&str, [u8; 32])],
    ) -> Result<Collected, AttestationError> {
        // Checked before GPUs are asked to sign anything.
        if self.enrollment.is_none() {
            return Err(AttestationError::NotEnrolled(self.key_path.clone()));
        }
        let statics = self.statics();
        let mut notes = statics.notes.clone();
        let mut measurements = statics.values.clone();
        for (name, value) in dynamic {
            measurements.insert((*name).to_string(), *value);
        }
        let healthy = healthy_gpus(inventory, &mut notes);
        let reports = gpu_reports(gpus, &healthy, &nonce, &self.key.public_key());
        let submods = healthy
            .into_iter()
            .zip(reports)
            .map(|(g, report)| {
                let report = report.unwrap_or_else(|missing| {
                    notes.push(report_text(&missing));
                    None
                });
                gpu_claims(g, report)
            })
            .collect();
        self.build_evidence(nonce, now, measurements, submods, notes)
    }

    /// Signed evidence from gathered parts, with the TPM's quote over `nonce` when a TPM is
    /// in use. Blocking (the TPM): call it on a blocking thread.
    pub fn build_evidence(
        &self,
        nonce: [u8; 32],
        now: u64,
        measurements: BTreeMap<String, [u8; 32]>,
        submods: Vec<GpuClaims>,
        mut notes: Vec<String>,
    ) -> Result<Collected, AttestationError> {
        let enrollment = self
            .enrollment
            .clone()
            .ok_or_else(|| AttestationError::NotEnrolled(self.key_path.clone()))?;
        let tpm = self.quote(&nonce, &mut notes);
        let claims = EvidenceClaims {
            eat_profile: attest::evidence::EVIDENCE_PROFILE.into(),
            eat_nonce: nonce,
            ueid: self.key.ueid().to_vec(),
            enrollment,
            iat: now,
            measurements,
            submods,
            tpm,
        };
        let evidence = Evidence::sign(claims, &self.key).and_then(|e| e.to_bytes())?;
        Ok(Collected { evidence, notes })
    }
}

/// The GPUs that answer NVML and have a UUID; a note for each that does not, which the
/// evidence leaves out.
fn healthy_gpus<'a>(inventory: &'a [GpuInfo], notes: &mut Vec<String>) -> Vec<&'a GpuInfo> {
    inventory
        .iter()
        .filter(|g| {
            let ok = g.is_healthy() && !g.uuid.is_empty();
            if !ok {
                notes.push(format!(
                    "GPU at index {} is not answering ({:?}) and is not in the evidence",
                    g.index, g.status
                ));
            }
            ok
        })
        .collect()
}

/// Why a GPU in confidential-computing mode goes into the evidence without its report.
#[derive(Debug, thiserror::Error)]
enum MissingReport {
    #[error("GPU {uuid}: CC is on but it gave no attestation report")]
    NoReport { uuid: String },
    #[error("GPU {uuid}: attestation report failed")]
    Failed {
        uuid: String,
        #[source]
        source: crate::gpu::GpuError,
    },
    #[error("GPU attestation worker panicked")]
    WorkerPanicked,
}

/// Each GPU's signed report over its nonce (derived from `nonce`, its UUID and the node key);
/// `None` for a GPU not in CC mode, which has none to give. GPUs sign concurrently (a real
/// GPU takes a while to answer).
fn gpu_reports(
    gpus: &Gpus,
    healthy: &[&GpuInfo],
    nonce: &[u8; 32],
    node_pk: &[u8; 32],
) -> Vec<Result<Option<GpuReport>, MissingReport>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = healthy
            .iter()
            .map(|g| scope.spawn(move || gpu_report(gpus, g, nonce, node_pk)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(MissingReport::WorkerPanicked)))
            .collect()
    })
}

fn gpu_report(
    gpus: &Gpus,
    g: &GpuInfo,
    nonce: &[u8; 32],
    node_pk: &[u8; 32],
) -> Result<Option<GpuReport>, MissingReport> {
    if g.cc_mode != Some(true) {
        return Ok(None);
    }
    let uuid = g.uuid.clone();
    match gpus.attestation_report(&g.uuid, gpu_nonce(nonce, &g.uuid, node_pk)) {
        Ok(Some(a)) => Ok(Some(GpuReport {
            spdm: a.spdm,
            cert_chain: a.cert_chain.into_iter().map(HexBytes).collect(),
        })),
        Ok(None) => Err(MissingReport::NoReport { uuid }),
        Err(source) => {
            warn!(gpu = %g.uuid, error = %report(&source), "GPU attestation report failed");
            Err(MissingReport::Failed { uuid, source })
        }
    }
}

/// The note on a missing report, with its cause.
fn report_text(missing: &MissingReport) -> String {
    report(missing).to_string()
}

/// A GPU's claims in the evidence, from its inventory.
fn gpu_claims(g: &GpuInfo, report: Option<GpuReport>) -> GpuClaims {
    GpuClaims {
        uuid: g.uuid.clone(),
        serial: g.serial.clone().unwrap_or_default(),
        model: g.name.clone(),
        vbios_version: g.vbios_version.clone().unwrap_or_default(),
        driver_version: g.driver_version.clone(),
        cc_mode: if g.cc_mode == Some(true) {
            CcMode::On
        } else {
            CcMode::Off
        },
        report,
    }
}

/// SHA-256 of a file's bytes, as measured into evidence and reference manifests.
pub fn file_digest(path: &Path) -> std::io::Result<[u8; 32]> {
    sha256_file(path)
}

/// Real time in Unix seconds: attestation is about wall-clock freshness, never the dev
/// mode's accelerated metering clock.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_event_log_is_the_one_of_the_tpm_in_use() {
        let log = |dev: &str| event_log_path(Path::new(dev)).map(|p| p.display().to_string());
        let sysfs = "/sys/kernel/security";
        assert_eq!(
            log("/dev/tpmrm0").as_deref(),
            Some(&*format!("{sysfs}/tpm0/binary_bios_measurements"))
        );
        assert_eq!(
            log("/dev/tpm1").as_deref(),
            Some(&*format!("{sysfs}/tpm1/binary_bios_measurements"))
        );
        for other in ["/run/swtpm.sock", "/dev/tpmrm", "/dev/tpmx0", "/"] {
            assert_eq!(log(other), None, "{other}");
        }
        let dir = tempfile::tempdir().unwrap();
        let mut notes = Vec::new();
        let file = dir.path().join("log");
        std::fs::write(&file, b"\x01\x02").unwrap();
        assert_eq!(read_event_log(&file, &mut notes), Some(vec![1, 2]));
        assert!(notes.is_empty());
        assert_eq!(read_event_log(&dir.path().join("none"), &mut notes), None);
        assert!(notes[0].starts_with("tpm: no event log:"), "{notes:?}");
    }

    #[test]
    fn a_configured_tpm_that_cannot_be_opened_stops_the_start() {
        assert!(open_tpm(&TpmSetting::Off).unwrap().is_none());
        let missing = PathBuf::from("/nonexistent/tpmrm0");
        match open_tpm(&TpmSetting::Device(missing)) {
            Err(e @ AttestationError::Tpm(_)) => {
                let shown = attest::report::report(&e).to_string();
                assert!(shown.contains("/nonexistent/tpmrm0"), "{shown}");
            }
            other => panic!("{:?}", other.map(|t| t.is_some())),
        }
    }

    /// The node identity key follows the rule of every private key: group- or
    /// world-accessible is refused at start, never merely warned about.
    #[test]
    fn a_node_key_readable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create_node_key(dir.path()).unwrap();
        let path = dir.path().join(NODE_KEY_FILE);
        for m in [0o666, 0o644, 0o640] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
            let err = load_or_create_node_key(dir.path()).expect_err("refused");
            let shown = report(&err).to_string();
            assert!(shown.contains("chmod 600"), "{shown}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        load_or_create_node_key(dir.path()).unwrap();
    }

    #[test]
    fn node_key_is_created_0600_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create_node_key(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(NODE_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = load_or_create_node_key(dir.path()).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        let published = std::fs::read_to_string(dir.path().join(NODE_PUB_FILE)).unwrap();
        assert_eq!(published.trim(), hex::encode(a.public_key()));
        std::fs::write(dir.path().join(NODE_KEY_FILE), "not hex\n").unwrap();
        assert!(load_or_create_node_key(dir.path()).is_err());
    }

    #[test]
    fn an_enrollment_for_another_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let key = load_or_create_node_key(dir.path()).unwrap();
        let other = NodeKey::from_seed(&[9u8; 32]);
        let ca = attest::identity::EnrollmentAuthority::from_seed(&[1u8; 32]);
        let claims = |pk: [u8; 32]| attest::identity::EnrollmentClaims {
            tpm_ak: None,
            tpm_ek_certificate_sha256: None,
            node_public_key: pk,
            node_name: "n".into(),
            jurisdiction: "IN-TG".into(),
            facility: "f".into(),
            not_before: 0,
            not_after: 4_000_000_000,
            authority_public_key: ca.verifying_key().to_bytes(),
        };
        let path = dir.path().join("enrollment.json");
        let wrong = ca.issue(claims(other.public_key())).unwrap();
        std::fs::write(&path, wrong.to_bytes().unwrap()).unwrap();
        let e = load_enrollment(&path, &key).unwrap_err();
        assert!(e.to_string().contains("issued for node key"), "{e}");
        let right = ca.issue(claims(key.public_key())).unwrap();
        std::fs::write(&path, right.to_bytes().unwrap()).unwrap();
        assert_eq!(load_enrollment(&path, &key).unwrap(), right);
    }

    #[test]
    fn the_measuring_thread_runs_at_the_lowest_priority_and_the_rest_do_not() {
        let nice = || rustix::process::getpriority_process(Some(rustix::thread::gettid()));
        let before = nice().unwrap();
        let measuring = std::thread::spawn(move || {
            yield_to_startup();
            nice()
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(measuring, 19);
        assert_eq!(
            nice().unwrap(),
            before,
            "only the measuring thread is lowered"
        );
    }

    #[test]
    fn absent_sources_become_notes() {
        let dir = tempfile::tempdir().unwrap();
        let s = measure_static(Some(&dir.path().join("missing.toml")));
        assert!(
            s.values.contains_key("hostd"),
            "the running binary is always readable"
        );
        assert!(
            s.notes.iter().any(|n| n.starts_with("hostd.config")),
            "{:?}",
            s.notes
        );
        assert!(
            !s.values.keys().any(|k| k.starts_with("pcr.")),
            "PCR values come only in a TPM quote: {:?}",
            s.values.keys()
        );
    }
}
