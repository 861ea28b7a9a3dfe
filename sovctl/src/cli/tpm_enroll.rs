//! Enrolling a node's attestation key against its TPM maker's EK certificate (the Keylime
//! registrar's anchor), in two steps around the node:
//!
//! 1. `sovctl attest tpm-challenge --identity ID.json --tpm-root ROOT [--tpm-intermediate CA]
//!    --out CHALLENGE.json --secret-out SECRET`: checks the node's identity (`hostd
//!    tpm-identity`): the AK is in the profile, the EK is template L-1's, its certificate
//!    verifies up to a maker root given here and certifies that EK. Then makes a credential
//!    challenge for the AK under the EK, and keeps its secret, with the digest of the identity
//!    it was made for, in a new file only the operator can read.
//! 2. The node answers with `hostd tpm-activate --challenge CHALLENGE.json`: its TPM releases
//!    the secret only if the AK sits beside that EK.
//! 3. `sovctl attest enroll … --tpm-identity ID.json --tpm-root … --tpm-secret SECRET
//!    --tpm-answer HEX`: checks the identity again, that the secret was made for it, and the
//!    answer, then binds the AK and names the EK certificate in the enrollment certificate.
//!    The secret file is removed once used, so an answer cannot be replayed into another
//!    enrollment.

use attest::tpm::credential::{challenge, SECRET_BYTES};
use attest::tpm::ek::{certificates_from_file, CheckedIdentity, EkError, TpmIdentity};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Where the maker's certificates come from.
#[derive(Debug, Clone, clap::Args)]
pub struct TpmCaArgs {
    /// A TPM maker's root certificate (PEM, one or more, or one DER certificate); repeatable.
    #[arg(long = "tpm-root")]
    pub roots: Vec<PathBuf>,
    /// An intermediate CA certificate between a root and the EK certificate (PEM or DER);
    /// repeatable.
    #[arg(long = "tpm-intermediate")]
    pub intermediates: Vec<PathBuf>,
}

/// `sovctl attest tpm-challenge`.
#[derive(Debug, clap::Args)]
pub struct ChallengeArgs {
    /// The node's TPM identity, as `hostd tpm-identity` prints it.
    #[arg(long)]
    pub identity: PathBuf,
    #[command(flatten)]
    pub ca: TpmCaArgs,
    /// Write the challenge for the node here (`hostd tpm-activate --challenge`).
    #[arg(long)]
    pub out: PathBuf,
    /// Keep the challenge's secret here: a new file, mode 0600, for `sovctl attest enroll
    /// --tpm-secret`.
    #[arg(long)]
    pub secret_out: PathBuf,
}

/// The EK-anchored part of `sovctl attest enroll`.
#[derive(Debug, Clone, clap::Args)]
pub struct EnrollTpmArgs {
    /// The node's TPM identity the challenge was made for (`hostd tpm-identity`). With it,
    /// the enrollment binds the AK only once the TPM answered the challenge.
    #[arg(long, conflicts_with = "tpm_ak", requires_all = ["tpm_secret", "tpm_answer"])]
    pub tpm_identity: Option<PathBuf>,
    #[command(flatten)]
    pub ca: TpmCaArgs,
    /// The secret file `sovctl attest tpm-challenge --secret-out` wrote; removed once used.
    #[arg(long, requires = "tpm_identity")]
    pub tpm_secret: Option<PathBuf>,
    /// The node's answer (`hostd tpm-activate`): hex, or a file holding it.
    #[arg(long, requires = "tpm_identity")]
    pub tpm_answer: Option<String>,
}

/// Why an EK-anchored step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TpmEnrollError {
    #[error("{}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a TPM identity as `hostd tpm-identity` prints it", .path.display())]
    Identity {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: not a certificate file", .path.display())]
    CaFile {
        path: PathBuf,
        #[source]
        source: EkError,
    },
    #[error("--tpm-root is required: the TPM makers' root certificates you trust")]
    NoRoots,
    #[error("the node's TPM identity does not check out")]
    Check(#[source] EkError),
    #[error("making the credential challenge")]
    Challenge(#[source] attest::tpm::credential::CredentialError),
    #[error(
        "{} exists: it may hold the secret of a challenge still to be answered (remove it, or \
         choose another --secret-out)",
        .path.display()
    )]
    SecretExists { path: PathBuf },
    #[error("writing {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{}: not a secret file written by `sovctl attest tpm-challenge`", .path.display())]
    SecretFile {
        path: PathBuf,
        #[source]
        source: Option<keyfile::KeyFileError>,
    },
    #[error(
        "the secret was made for another TPM identity (SHA-256 {}), not this one ({})",
        hex::encode(made_for),
        hex::encode(given)
    )]
    OtherIdentity { made_for: [u8; 32], given: [u8; 32] },
    #[error(
        "--tpm-answer: not {SECRET_BYTES} bytes of hex (or a file holding them), as `hostd \
         tpm-activate` prints"
    )]
    AnswerSyntax,
    #[error(
        "the answer is not the challenge's secret: the attestation key is not in the TPM whose \
         EK certificate was checked (or the answer is for another challenge)"
    )]
    WrongAnswer,
}

/// `sovctl attest tpm-challenge`: prints what it wrote.
pub fn make_challenge(args: &ChallengeArgs, now: u64) -> Result<(), TpmEnrollError> {
    // The secret file is never overwritten (it may be the one an answer is on its way for):
    // refused before the challenge file is written, so the two always belong together.
    if args.secret_out.symlink_metadata().is_ok() {
        return Err(TpmEnrollError::SecretExists {
            path: args.secret_out.clone(),
        });
    }
    let (identity, digest) = read_identity(&args.identity)?;
    let checked = check(&identity, &args.ca, now)?;
    let (challenge, secret) =
        challenge(&checked, &mut getrandom_04::SysRng).map_err(TpmEnrollError::Challenge)?;
    let line = Zeroizing::new(format!(
        "{} {}",
        hex::encode(digest),
        hex::encode(&secret[..])
    ));
    // A struct of two byte strings always serializes.
    let json = serde_json::to_string(&challenge).unwrap_or_default();
    std::fs::write(&args.out, json + "\n").map_err(|e| TpmEnrollError::Write {
        path: args.out.clone(),
        source: e.into(),
    })?;
    // The secret last: a challenge file left by a failed run is harmless, and a run made again
    // writes it anew.
    keyfile::write_new_private(&args.secret_out, line.as_bytes()).map_err(|e| {
        TpmEnrollError::Write {
            path: args.secret_out.clone(),
            source: e.into(),
        }
    })?;
    println!(
        "the EK certificate verifies (SHA-256 {}); wrote the challenge {} for the node \
         (`hostd tpm-activate --challenge`) and its secret {} (0600)",
        hex::encode(checked.ek_certificate_sha256),
        args.out.display(),
        args.secret_out.display()
    );
    Ok(())
}

/// The checked identity of an EK-anchored enrollment whose answer matched its secret. Remove
/// the secret with [`consume_secret`] once the certificate is written.
pub fn verify_answer(
    args: &EnrollTpmArgs,
    identity_path: &Path,
    now: u64,
) -> Result<CheckedIdentity, TpmEnrollError> {
    let (identity, digest) = read_identity(identity_path)?;
    let checked = check(&identity, &args.ca, now)?;
    let secret_path = args.tpm_secret.as_deref().unwrap_or(Path::new(""));
    let (made_for, secret) = read_secret(secret_path)?;
    if made_for != digest {
        return Err(TpmEnrollError::OtherIdentity {
            made_for,
            given: digest,
        });
    }
    let answer = read_answer(args.tpm_answer.as_deref().unwrap_or(""))?;
    if !bool::from(answer[..].ct_eq(&secret[..])) {
        return Err(TpmEnrollError::WrongAnswer);
    }
    Ok(checked)
}

/// Removes the used secret file, so its answer cannot enrol again.
pub fn consume_secret(args: &EnrollTpmArgs) -> Result<(), TpmEnrollError> {
    match &args.tpm_secret {
        Some(path) => std::fs::remove_file(path).map_err(|e| TpmEnrollError::Write {
            path: path.clone(),
            source: e.into(),
        }),
        None => Ok(()),
    }
}

/// The identity and SHA-256 of its canonical JSON (so the same identity, however the file was
/// spaced, has one digest).
fn read_identity(path: &Path) -> Result<(TpmIdentity, [u8; 32]), TpmEnrollError> {
    let bytes = read(path)?;
    let identity: TpmIdentity =
        serde_json::from_slice(&bytes).map_err(|source| TpmEnrollError::Identity {
            path: path.to_owned(),
            source,
        })?;
    let canonical = serde_json::to_vec(&identity).unwrap_or_default();
    Ok((identity, Sha256::digest(canonical).into()))
}

fn check(
    identity: &TpmIdentity,
    ca: &TpmCaArgs,
    now: u64,
) -> Result<CheckedIdentity, TpmEnrollError> {
    if ca.roots.is_empty() {
        return Err(TpmEnrollError::NoRoots);
    }
    let roots = read_certificates(&ca.roots)?;
    let intermediates = read_certificates(&ca.intermediates)?;
    identity
        .check(&roots, &intermediates, now)
        .map_err(TpmEnrollError::Check)
}

fn read_certificates(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>, TpmEnrollError> {
    let mut all = Vec::new();
    for path in paths {
        let certs =
            certificates_from_file(&read(path)?).map_err(|source| TpmEnrollError::CaFile {
                path: path.clone(),
                source,
            })?;
        all.extend(certs);
    }
    Ok(all)
}

/// The secret file: `<identity SHA-256 hex> <secret hex>`, private to its owner.
fn read_secret(path: &Path) -> Result<([u8; 32], Zeroizing<[u8; SECRET_BYTES]>), TpmEnrollError> {
    let text = keyfile::read_private(path).map_err(|e| TpmEnrollError::SecretFile {
        path: path.to_owned(),
        source: Some(e),
    })?;
    let bad = || TpmEnrollError::SecretFile {
        path: path.to_owned(),
        source: None,
    };
    let (digest, secret) = text.trim().split_once(' ').ok_or_else(bad)?;
    let mut made_for = [0u8; 32];
    hex::decode_to_slice(digest, &mut made_for).map_err(|_| bad())?;
    let mut out = Zeroizing::new([0u8; SECRET_BYTES]);
    hex::decode_to_slice(secret, &mut out[..]).map_err(|_| bad())?;
    Ok((made_for, out))
}

fn read_answer(arg: &str) -> Result<Zeroizing<[u8; SECRET_BYTES]>, TpmEnrollError> {
    let text = super::inline_or_file(arg).map_err(|source| TpmEnrollError::Read {
        path: arg.into(),
        source,
    })?;
    let mut out = Zeroizing::new([0u8; SECRET_BYTES]);
    hex::decode_to_slice(text.trim(), &mut out[..]).map_err(|_| TpmEnrollError::AnswerSyntax)?;
    Ok(out)
}

/// A file of at most 64 KiB (identities and certificates are a few KiB).
fn read(path: &Path) -> Result<Vec<u8>, TpmEnrollError> {
    use std::io::Read as _;
    let io = |source| TpmEnrollError::Read {
        path: path.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(64 * 1024 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > 64 * 1024 {
        return Err(io(std::io::Error::other("larger than 64 KiB")));
    }
    Ok(bytes)
}
