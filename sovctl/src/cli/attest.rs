//! `sovctl attest`: challenge a node and appraise its evidence (the relying party's tool), verify
//! saved evidence offline, and make the keys, enrollment certificates and signed reference
//! manifests that appraisal needs.
//!
//! Appraisal runs the `attest` crate's [`Verifier`] in this process; the node is never asked
//! whether it is trustworthy. Exit codes: 0 affirming (or the command succeeded), 1 appraised
//! but not affirming, or the node refused, 2 usage, file or connection error.

use super::{block_on, connect, finish, CmdResult, Exit, Fail};
use crate::client::Client;
use attest::ear::{AttestationResult, Status};
use attest::evidence::Evidence;
use attest::identity::{EnrollmentAuthority, EnrollmentClaims};
use attest::manifest::{ImageManifest, SignedImageManifest};
use attest::report::report;
use attest::rim::Rim;
use attest::verifier::{NonceRegistry, ReferenceValues, Verifier, VerifierConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use zeroize::Zeroizing;

/// `sovctl attest ...`: without a subcommand, challenge the node of the profile.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AttestCmd {
    #[command(subcommand)]
    pub cmd: Option<AttestSub>,
    #[command(flatten)]
    pub fetch: FetchArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum AttestSub {
    /// Appraise saved evidence offline (no network).
    Verify(VerifyArgs),
    /// Sign a reference image manifest from files (their SHA-256 digests).
    Reference(ReferenceArgs),
    /// Create an Ed25519 key (release, enrollment authority or verifier): KEY (0600) and KEY.pub.
    Keygen {
        /// Private key file to create (refuses to overwrite); the public key goes to FILE.pub.
        #[arg(long)]
        out: PathBuf,
    },
    /// Issue an enrollment certificate for a node's identity key (`<state>/node.pub`).
    Enroll(EnrollArgs),
    /// Check a node's TPM identity (`hostd tpm-identity`) against its maker's EK certificate
    /// and make a credential challenge for its attestation key (`hostd tpm-activate`).
    TpmChallenge(super::tpm_enroll::ChallengeArgs),
    /// Deliver a signed attestation result to the node, which appends it to its ledger
    /// (operators).
    Submit {
        /// The result file written by `sovctl attest --result-out`.
        result: PathBuf,
    },
}

/// What appraisal trusts and expects.
#[derive(Debug, Clone, clap::Args)]
pub struct TrustArgs {
    /// Signed reference manifest (`sovctl attest reference`).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Release key (`KEY.pub`) the manifest must be signed with; default: the key the manifest
    /// names (its signature is still checked).
    #[arg(long)]
    pub release_key: Option<PathBuf>,
    /// NVIDIA device root certificates (PEM; several allowed in one file).
    #[arg(long)]
    pub nvidia_root: Option<PathBuf>,
    /// NVIDIA RIM files (VBIOS and driver `.swidtag`), or folders of them. Each must carry a
    /// valid XML-DSig signature chaining to `--rim-root`.
    #[arg(long = "rim")]
    pub rims: Vec<PathBuf>,
    /// Root certificate(s) of the RIM publisher (PEM; NVIDIA's "NVIDIA CoRIM signing Root
    /// CA" in production). Required with `--rim`.
    #[arg(long)]
    pub rim_root: Option<PathBuf>,
    /// Enrollment authority public key (`KEY.pub`) whose certificates are trusted.
    #[arg(long)]
    pub enrollment_authority: Option<PathBuf>,
    /// Fewer distinct GPUs with a verified report than this is contraindicated.
    #[arg(long, default_value_t = 0)]
    pub min_gpus: usize,
    /// A GPU without an attestation report is contraindicated (default: a warning).
    #[arg(long)]
    pub require_gpu_reports: bool,
    /// The node's TPM attestation key must be anchored in its maker's EK certificate (the
    /// enrollment names one: `sovctl attest tpm-challenge`); otherwise contraindicated.
    #[arg(long)]
    pub require_tpm_ek: bool,
    /// Evidence older than this many seconds is stale.
    #[arg(long, default_value_t = 300)]
    pub max_age: u64,
    /// Key that signs the attestation result (`sovctl attest keygen`); default: a new
    /// throw-away key.
    #[arg(long)]
    pub verifier_key: Option<PathBuf>,
    /// File of nonces already used (one hex nonce a line; created if missing): a nonce in it
    /// is refused as reused, and every appraised nonce is added.
    #[arg(long)]
    pub nonce_log: Option<PathBuf>,
    /// Write the signed attestation result (canonical JSON) here.
    #[arg(long)]
    pub result_out: Option<PathBuf>,
}

/// `sovctl attest [--nonce HEX | --nonce-random] ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct FetchArgs {
    /// The challenge (64 hex digits).
    #[arg(long, conflicts_with = "nonce_random")]
    pub nonce: Option<String>,
    /// A fresh random challenge.
    #[arg(long)]
    pub nonce_random: bool,
    /// Save the node's evidence here (for `sovctl attest verify`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub trust: TrustArgs,
}

/// `sovctl attest verify EVIDENCE --nonce HEX ...`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Evidence file (`sovctl attest --out`).
    pub evidence: PathBuf,
    /// The challenge the evidence must answer (64 hex digits).
    #[arg(long)]
    pub nonce: String,
    /// Appraise as of this time (Unix seconds) instead of now.
    #[arg(long)]
    pub at: Option<u64>,
    #[command(flatten)]
    pub trust: TrustArgs,
}

#[derive(Debug, clap::Args)]
pub struct ReferenceArgs {
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub version: String,
    /// `NAME=FILE` (the file's SHA-256) or `NAME=sha256:HEX`; repeatable.
    #[arg(long = "measurement", required = true)]
    pub measurements: Vec<String>,
    /// Release key (`sovctl attest keygen`).
    #[arg(long)]
    pub key: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct EnrollArgs {
    /// Enrollment authority private key (`sovctl attest keygen`).
    #[arg(long)]
    pub authority_key: PathBuf,
    /// The node's public key: 64 hex digits, or a file holding them (`<state>/node.pub`).
    #[arg(long)]
    pub node_key: String,
    #[arg(long)]
    pub node_name: String,
    /// ISO 3166-1 alpha-2, optionally with a subdivision (`IN-TG`).
    #[arg(long)]
    pub jurisdiction: String,
    #[arg(long)]
    pub facility: String,
    /// Validity in days from now.
    #[arg(long, default_value_t = 365)]
    pub days: u64,
    /// The node TPM's attestation key, as `hostd tpm-ak` prints it: hex, or a file holding
    /// it. Binds the TPM to the node on the operator's word: its evidence must then carry a
    /// quote by this key. `--tpm-identity` binds it once the TPM proved it.
    #[arg(long)]
    pub tpm_ak: Option<String>,
    #[command(flatten)]
    pub tpm: super::tpm_enroll::EnrollTpmArgs,
    #[arg(long)]
    pub out: PathBuf,
}

fn usage(e: impl std::fmt::Display) -> Fail {
    Fail::usage(e)
}

/// Runs `sovctl attest`; `profile` is sovctl's `--profile` (needed to reach a node).
pub fn run(cmd: AttestCmd, profile: Option<&Path>, json_out: bool) -> ExitCode {
    finish(execute(cmd, profile, json_out))
}

fn execute(cmd: AttestCmd, profile: Option<&Path>, json_out: bool) -> CmdResult {
    match cmd.cmd {
        None => {
            let c = connect(profile)?;
            block_on(fetch_and_appraise(c, cmd.fetch, json_out))
        }
        Some(AttestSub::Submit { result }) => {
            let c = connect(profile)?;
            block_on(submit(c, &result, json_out))
        }
        Some(AttestSub::Verify(args)) => verify_offline(args, json_out),
        Some(AttestSub::Reference(args)) => reference(args),
        Some(AttestSub::Keygen { out }) => {
            let key = keyfile::create_ed25519(&out).map_err(|e| usage(report(&e)))?;
            println!(
                "created {} (private, 0600) and {} (public key {})",
                out.display(),
                keyfile::public_key_path(&out).display(),
                hex::encode(key.verifying_key().to_bytes())
            );
            Ok(Exit::Ok)
        }
        Some(AttestSub::Enroll(args)) => enroll(args),
        Some(AttestSub::TpmChallenge(args)) => {
            super::tpm_enroll::make_challenge(&args, unix_now()).map_err(|e| usage(report(&e)))?;
            Ok(Exit::Ok)
        }
    }
}

/// Why the keys, certificates, RIMs or manifest an appraisal trusts could not be had. Shown
/// with its causes ([`report`]): the file, then what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    #[error("--reference MANIFEST is required (make one with `sovctl attest reference`)")]
    NoReference,
    #[error("--enrollment-authority KEY.pub is required: the authority whose enrollment certificates you trust")]
    NoAuthority,
    #[error(
        "--rim-root ROOT.pem is required with --rim: RIM signatures are verified up to the RIM publisher's root"
    )]
    NoRimRoot,
    /// A key file that does not read (its own error names the file).
    #[error(transparent)]
    KeyFile(#[from] keyfile::KeyFileError),
    /// A PEM file that does not read (its own error names the file).
    #[error(transparent)]
    Pem(#[from] keyfile::pem::PemError),
    /// A file that reads but is not what it should be, or a folder that does not list.
    #[error("{}", .path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The verifier refused the configuration built from the files.
    #[error(transparent)]
    Verifier(#[from] attest::verifier::VerifierError),
}

impl TrustError {
    fn file(path: &Path, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        TrustError::File {
            path: path.to_owned(),
            source: source.into(),
        }
    }
}

/// Reads a private key made by `sovctl attest keygen` (the key-file rules of `keyfile`).
fn read_signing_key(path: &Path) -> Result<ed25519_dalek::SigningKey, TrustError> {
    Ok(keyfile::read_ed25519(path)?)
}

/// Reads a public key file (64 hex digits, e.g. `KEY.pub`).
fn read_verifying_key(path: &Path) -> Result<ed25519_dalek::VerifyingKey, TrustError> {
    let b = keyfile::read_ed25519_public(path)?;
    attest::identity::verifying_key(&b).map_err(|e| TrustError::file(path, e))
}

/// SHA-256 of a file's bytes, as measured into evidence and reference manifests.
fn file_digest(path: &Path) -> std::io::Result<[u8; 32]> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(h.finalize().into())
}

/// Real time in Unix seconds: attestation is about wall-clock freshness.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn parse_nonce(hex_text: &str) -> Result<[u8; 32], Fail> {
    let mut n = [0u8; 32];
    if hex_text.len() != 64 || hex::decode_to_slice(hex_text, &mut n).is_err() {
        return Err(usage("--nonce must be 32 bytes as 64 hex digits"));
    }
    Ok(n)
}

fn random_nonce() -> Result<[u8; 32], Fail> {
    use rand_core::{OsRng, RngCore};
    let mut n = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut n)
        .map_err(|e| usage(format!("random generator: {e}", e = report(&e))))?;
    Ok(n)
}

/// DER certificates from a PEM file.
pub fn read_pem_certs(path: &Path) -> Result<Vec<Vec<u8>>, TrustError> {
    let certs = keyfile::pem::load_certs(path)?;
    Ok(certs.iter().map(|c| c.as_ref().to_vec()).collect())
}

/// RIMs from files and folders, each signature-verified against `roots` at `now`: a RIM
/// that does not verify is an error naming the file, never a silently weaker reference.
fn read_rims(paths: &[PathBuf], roots: &[Vec<u8>], now: u64) -> Result<Vec<Rim>, TrustError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| TrustError::file(p, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "swidtag" || x == "xml"))
                .collect();
            entries.sort();
            files.extend(entries);
        } else {
            files.push(p.clone());
        }
    }
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).map_err(|e| TrustError::file(f, e))?;
            Rim::parse_verified(&text, roots, now).map_err(|e| TrustError::file(f, e))
        })
        .collect()
}

/// The verifier `t` describes, with RIM signatures checked as of `now` (the appraisal time).
pub fn build_verifier(t: &TrustArgs, now: u64) -> Result<Verifier, TrustError> {
    let reference_path = t.reference.as_ref().ok_or(TrustError::NoReference)?;
    let bytes = std::fs::read(reference_path).map_err(|e| TrustError::file(reference_path, e))?;
    let manifest = SignedImageManifest::from_bytes(bytes.strip_suffix(b"\n").unwrap_or(&bytes))
        .map_err(|e| TrustError::file(reference_path, e))?;
    let release_keys = match &t.release_key {
        Some(p) => vec![read_verifying_key(p)?],
        None => vec![attest::identity::verifying_key(&manifest.release_key)
            .map_err(|e| TrustError::file(reference_path, e))?],
    };
    let rim_roots = match (&t.rim_root, t.rims.is_empty()) {
        (Some(p), _) => read_pem_certs(p)?,
        (None, true) => Vec::new(),
        (None, false) => return Err(TrustError::NoRimRoot),
    };
    let rims = read_rims(&t.rims, &rim_roots, now)?;
    let reference = ReferenceValues::from_signed_manifest(&manifest, &release_keys, rims)
        .map_err(|e| TrustError::file(reference_path, e))?;
    let authority = t
        .enrollment_authority
        .as_ref()
        .ok_or(TrustError::NoAuthority)?;
    let nvidia_roots = match &t.nvidia_root {
        Some(p) => read_pem_certs(p)?,
        None => Vec::new(),
    };
    let signing_key = match &t.verifier_key {
        Some(p) => read_signing_key(p)?,
        None => {
            let seed: Zeroizing<[u8; 32]> = keyfile::random_seed()?;
            ed25519_dalek::SigningKey::from_bytes(&seed)
        }
    };
    Verifier::new(VerifierConfig {
        enrollment_authorities: vec![read_verifying_key(authority)?],
        revoked_nodes: Default::default(),
        nvidia_roots,
        reference,
        min_gpus: t.min_gpus,
        require_gpu_reports: t.require_gpu_reports,
        require_tpm_ek: t.require_tpm_ek,
        max_age: t.max_age,
        max_clock_skew: 30,
        signing_key,
    })
    .map_err(TrustError::from)
}

/// Appraises `evidence` answering `nonce` at `now` with `verifier` (built from `t`),
/// honouring `--nonce-log` and `--result-out`.
fn appraise(
    verifier: &Verifier,
    t: &TrustArgs,
    evidence: &[u8],
    nonce: [u8; 32],
    now: u64,
) -> Result<AttestationResult, Fail> {
    let mut registry = NonceRegistry::new(t.max_age.max(1));
    registry
        .issue(nonce, now)
        .map_err(|e| usage(format!("nonce: {e}", e = report(&e))))?;
    let nonce_hex = hex::encode(nonce);
    if let Some(log) = &t.nonce_log {
        let seen = match std::fs::read_to_string(log) {
            Ok(t) => t.lines().any(|l| l.trim() == nonce_hex),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(usage(format!("{}: {e}", log.display(), e = report(&e)))),
        };
        if seen {
            // Already answered once: consuming it here makes the appraisal report the reuse.
            let _ = registry.consume(&nonce, now);
        } else {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| usage(format!("{}: {e}", log.display(), e = report(&e))))?;
            writeln!(f, "{nonce_hex}")
                .and_then(|()| f.sync_all())
                .map_err(|e| usage(format!("{}: {e}", log.display(), e = report(&e))))?;
        }
    }
    let result = verifier
        .appraise(evidence, &nonce, now, &mut registry)
        .map_err(|e| usage(report(&e)))?;
    if let Some(out) = &t.result_out {
        let bytes = result.to_bytes().map_err(|e| usage(report(&e)))?;
        std::fs::write(out, bytes)
            .map_err(|e| usage(format!("{}: {e}", out.display(), e = report(&e))))?;
    }
    Ok(result)
}

/// The GPU reports in the evidence and the nonces they signed (empty if it does not parse).
fn gpu_summary(evidence: &[u8]) -> Vec<Value> {
    let Ok(e) = Evidence::from_bytes(evidence) else {
        return Vec::new();
    };
    e.claims
        .submods
        .iter()
        .map(|g| {
            let signed = g.report.as_ref().and_then(|r| {
                attest::nvidia::spdm::SpdmReport::parse(&r.spdm)
                    .ok()
                    .map(|p| hex::encode(p.request_nonce))
            });
            json!({
                "uuid": g.uuid,
                "model": g.model,
                "cc_mode": g.cc_mode,
                "report": g.report.is_some(),
                "report_nonce": signed,
                "derived_nonce": hex::encode(attest::evidence::gpu_nonce(
                    &e.claims.eat_nonce,
                    &g.uuid,
                    e.claims.node_public_key(),
                )),
            })
        })
        .collect()
}

fn print_result(
    result: &AttestationResult,
    evidence: &[u8],
    notes: &[String],
    json_out: bool,
) -> CmdResult {
    let signed: Value = serde_json::from_slice(&result.to_bytes().map_err(|e| usage(report(&e)))?)
        .map_err(|e| usage(report(&e).to_string()))?;
    let r = &result.result;
    let v = json!({
        "status": signed["result"]["status"],
        "nonce": hex::encode(r.eat_nonce),
        "evidence_digest": hex::encode(r.evidence_digest),
        "node": signed["result"]["node"],
        "image": signed["result"]["image"],
        "reasons": signed["result"]["reasons"],
        "trust_vector": signed["result"]["trust_vector"],
        "gpus": gpu_summary(evidence),
        "measurement_notes": notes,
        "result": signed,
    });
    if json_out {
        super::print_json(&v)?;
    } else {
        println!(
            "attestation: {}  (nonce {}, evidence {})",
            v["status"].as_str().unwrap_or("?"),
            v["nonce"].as_str().unwrap_or_default(),
            v["evidence_digest"].as_str().unwrap_or_default()
        );
        if let Some(n) = r.node.as_ref() {
            println!(
                "node: {} in {} ({})",
                n.node_name, n.jurisdiction, n.facility
            );
        }
        if let Some(i) = r.image.as_ref() {
            println!("image: {} {}", i.name, i.version);
        }
        for g in v["gpus"].as_array().into_iter().flatten() {
            println!(
                "gpu {}: report={} nonce={}",
                g["uuid"].as_str().unwrap_or_default(),
                g["report"],
                g["report_nonce"].as_str().unwrap_or("-")
            );
        }
        for reason in &r.reasons {
            println!("  - {} [{}]: {}", reason.code, reason.claim, reason.detail);
        }
        for n in notes {
            println!("  note: {n}");
        }
    }
    Ok(if result.status() == Status::Affirming {
        Exit::Ok
    } else {
        Exit::Bad
    })
}

async fn fetch_and_appraise(client: Client, f: FetchArgs, json_out: bool) -> CmdResult {
    let nonce = match (&f.nonce, f.nonce_random) {
        (Some(h), _) => parse_nonce(h)?,
        (None, true) => random_nonce()?,
        (None, false) => return Err(usage("pass --nonce HEX or --nonce-random")),
    };
    // Build (and so check) the trust inputs before bothering the node; RIM signatures are
    // checked once, here, for the appraisal below.
    let verifier = build_verifier(&f.trust, unix_now()).map_err(|e| usage(report(&e)))?;
    let answer = client.attest(&nonce).await?;
    let evidence = answer.evidence.into_bytes();
    let notes = answer.measurement_notes;
    if let Some(out) = &f.out {
        std::fs::write(out, &evidence)
            .map_err(|e| usage(format!("{}: {e}", out.display(), e = report(&e))))?;
    }
    let result = appraise(&verifier, &f.trust, &evidence, nonce, unix_now())?;
    print_result(&result, &evidence, &notes, json_out)
}

fn verify_offline(args: VerifyArgs, json_out: bool) -> CmdResult {
    let nonce = parse_nonce(&args.nonce)?;
    let bytes = std::fs::read(&args.evidence)
        .map_err(|e| usage(format!("{}: {e}", args.evidence.display(), e = report(&e))))?;
    let evidence = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let now = args.at.unwrap_or_else(unix_now);
    let verifier = build_verifier(&args.trust, now).map_err(|e| usage(report(&e)))?;
    let result = appraise(&verifier, &args.trust, evidence, nonce, now)?;
    print_result(&result, evidence, &[], json_out)
}

async fn submit(client: Client, path: &Path, json_out: bool) -> CmdResult {
    let bytes = std::fs::read(path)
        .map_err(|e| usage(format!("{}: {e}", path.display(), e = report(&e))))?;
    let rec = client.submit_attestation_result(bytes).await?;
    if json_out {
        super::print_json(&rec)?;
    } else {
        println!(
            "attestation result ({}) appended to the ledger as record {}",
            rec.status, rec.id
        );
    }
    Ok(Exit::Ok)
}

fn reference(args: ReferenceArgs) -> CmdResult {
    let key = read_signing_key(&args.key).map_err(|e| usage(report(&e)))?;
    let mut measurements = BTreeMap::new();
    for m in &args.measurements {
        let (name, source) = m.split_once('=').ok_or_else(|| {
            usage(format!(
                "--measurement {m:?}: expected NAME=FILE or NAME=sha256:HEX"
            ))
        })?;
        let digest = match source.strip_prefix("sha256:") {
            Some(h) => {
                let mut d = [0u8; 32];
                hex::decode_to_slice(h, &mut d)
                    .map_err(|_| usage(format!("--measurement {name}: not 64 hex digits")))?;
                d
            }
            None => file_digest(Path::new(source))
                .map_err(|e| usage(format!("--measurement {name}: {source}: {e}")))?,
        };
        if measurements.insert(name.to_string(), digest).is_some() {
            return Err(usage(format!("--measurement {name} given twice")));
        }
    }
    let manifest = ImageManifest {
        name: args.name,
        version: args.version,
        measurements,
        components: Default::default(),
    }
    .sign(&key)
    .map_err(|e| usage(report(&e)))?;
    let bytes = manifest.to_bytes().map_err(|e| usage(report(&e)))?;
    std::fs::write(&args.out, bytes)
        .map_err(|e| usage(format!("{}: {e}", args.out.display(), e = report(&e))))?;
    println!(
        "wrote {} ({} measurements, release key {})",
        args.out.display(),
        manifest.manifest.measurements.len(),
        hex::encode(manifest.release_key)
    );
    Ok(Exit::Ok)
}

/// A value given inline or as the path of a file holding it.
fn hex_or_file(arg: &str) -> Result<Zeroizing<String>, Fail> {
    super::inline_or_file(arg).map_err(|e| usage(format!("{arg}: {e}", e = report(&e))))
}

/// `--tpm-ak`: hex TPMT_PUBLIC (inline or in a file), checked against the AK profile here so
/// the operator learns what is wrong before a certificate exists.
fn read_tpm_ak(arg: &str) -> Result<Vec<u8>, Fail> {
    let bytes = hex::decode(hex_or_file(arg)?.trim()).map_err(|_| {
        usage("--tpm-ak: not hex (or a file holding hex), as `hostd tpm-ak` prints")
    })?;
    attest::tpm::AkPublic::parse(&bytes).map_err(|e| {
        usage(format!(
            "--tpm-ak: not an acceptable attestation key: {e}",
            e = report(&e)
        ))
    })?;
    Ok(bytes)
}

fn enroll(args: EnrollArgs) -> CmdResult {
    let key = read_signing_key(&args.authority_key).map_err(|e| usage(report(&e)))?;
    let text = hex_or_file(&args.node_key)?;
    let (tpm_ak, tpm_ek_certificate_sha256) = match &args.tpm.tpm_identity {
        Some(identity) => {
            let checked = super::tpm_enroll::verify_answer(&args.tpm, identity, unix_now())
                .map_err(|e| usage(report(&e)))?;
            (Some(checked.ak_public), Some(checked.ek_certificate_sha256))
        }
        None => (args.tpm_ak.as_deref().map(read_tpm_ak).transpose()?, None),
    };
    let mut node_pk = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut node_pk)
        .map_err(|_| usage("--node-key: not 64 hex digits (or a file holding them)"))?;
    let now = unix_now();
    let days = args.days.clamp(1, 3650);
    let cert = EnrollmentAuthority::from_seed(key.as_bytes())
        .issue(EnrollmentClaims {
            tpm_ak,
            tpm_ek_certificate_sha256,
            node_public_key: node_pk,
            node_name: args.node_name,
            jurisdiction: args.jurisdiction,
            facility: args.facility,
            not_before: now,
            not_after: now + days * 86_400,
            authority_public_key: [0; 32],
        })
        .map_err(|e| usage(report(&e)))?;
    std::fs::write(&args.out, cert.to_bytes().map_err(|e| usage(report(&e)))?)
        .map_err(|e| usage(format!("{}: {e}", args.out.display(), e = report(&e))))?;
    super::tpm_enroll::consume_secret(&args.tpm).map_err(|e| usage(report(&e)))?;
    println!("wrote {} (valid {days} days)", args.out.display());
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trust(args: &[&str]) -> TrustArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            trust: TrustArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("sovctl").chain(args.iter().copied()))
            .expect("trust arguments")
            .trust
    }

    #[test]
    fn missing_trust_material_is_named_with_the_file_and_its_cause() {
        assert!(matches!(
            build_verifier(&trust(&[]), 0),
            Err(TrustError::NoReference)
        ));
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("manifest.json");
        let Err(e) = build_verifier(&trust(&["--reference", missing.to_str().unwrap()]), 0) else {
            panic!("a missing manifest is an error");
        };
        assert!(matches!(&e, TrustError::File { path, .. } if path == &missing));
        assert_eq!(
            report(&e).to_string(),
            format!(
                "{}: No such file or directory (os error 2)",
                missing.display()
            )
        );
    }
}
