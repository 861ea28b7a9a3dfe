//! hostd's own offline subcommands, which work on a stopped node's state directory.

use crate::audit;
use attest::report::report;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `hostd audit export --state DIR --out DIR2`.
#[derive(Debug, clap::Args)]
pub struct ExportStateArgs {
    /// State directory of a stopped node (the one in its config).
    #[arg(long)]
    pub state: PathBuf,
    /// Output directory; created if missing, must be empty.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the tlog-proof receipt of these record ids (repeatable).
    #[arg(long = "receipt")]
    pub receipts: Vec<u64>,
}

pub fn run_export_state(args: ExportStateArgs) -> ExitCode {
    let export = match audit::export_state(&args.state, &args.out, &args.receipts) {
        Ok(export) => export,
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            return ExitCode::from(1);
        }
    };
    let summary = &export.summary;
    if export.problems.is_empty() {
        println!(
            "exported {} records (checkpoint size {}){} to {}",
            summary.records,
            summary.checkpoint_size,
            receipts_note(summary.receipts),
            args.out.display()
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "error: the state directory {} is damaged; the export in {} was written as \
         stored ({} records, checkpoint size {}) and will not verify:",
        args.state.display(),
        args.out.display(),
        summary.records,
        summary.checkpoint_size
    );
    for p in &export.problems {
        eprintln!("  - {p}", p = report(p));
    }
    if export.unlisted_damage > 0 {
        eprintln!("  - … and {} more damaged records", export.unlisted_damage);
    }
    ExitCode::from(1)
}

fn receipts_note(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => " and 1 receipt".to_owned(),
        n => format!(" and {n} receipts"),
    }
}

/// `hostd ledger recover --config FILE --from-export DIR`.
#[derive(Debug, clap::Args)]
pub struct RecoverArgs {
    /// The stopped node's configuration (its state directory, name and log key).
    #[arg(long, default_value = "/etc/hostd/hostd.toml")]
    pub config: PathBuf,
    /// An audit export of this node that covers every record it ever signed.
    #[arg(long)]
    pub from_export: PathBuf,
}

/// Runs the recovery (see [`crate::recover`]): exit 0 recovered, 1 refused.
pub fn run_recover(args: RecoverArgs) -> ExitCode {
    let cfg = match crate::config::Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            return ExitCode::from(2);
        }
    };
    let now = crate::clock::Clock::real().now_ms();
    match crate::recover::recover_from_export(
        &cfg.state.dir,
        &cfg.node.name,
        &cfg.log_origin(),
        &args.from_export,
        now,
    ) {
        Ok(r) => {
            println!(
                "recovered: the store held {} records, this node had signed {}; re-appended {} \
                 from {}; recorded as record {}",
                r.store_size,
                r.witnessed_size,
                r.reappended,
                args.from_export.display(),
                r.record
            );
            if !r.leases_ended.is_empty() {
                println!(
                    "ended leases the restored store still listed as active (at their last \
                     recorded interval): {}",
                    r.leases_ended.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            ExitCode::from(1)
        }
    }
}

/// Which TPM the `hostd tpm-*` commands use: `[--device PATH | --swtpm-socket PATH]`.
#[derive(Debug, clap::Args)]
pub struct TpmArgs {
    /// The TPM device (default /dev/tpmrm0).
    #[arg(long)]
    pub device: Option<PathBuf>,
    /// A swtpm data socket instead of a device (tests, VMs with a software TPM).
    #[arg(long, conflicts_with = "device")]
    pub swtpm_socket: Option<PathBuf>,
}

impl TpmArgs {
    /// Runs `f` on a connection to the chosen TPM.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut dyn tpm::Transport) -> Result<R, tpm::TpmError>,
    ) -> Result<R, tpm::TpmError> {
        match &self.swtpm_socket {
            Some(socket) => {
                let mut t = tpm::SwtpmSocket::connect(socket, Duration::from_secs(30))?;
                f(&mut t)
            }
            None => {
                let device = self
                    .device
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(tpm::DEFAULT_DEVICE));
                let mut t = tpm::Device::open(&device)?;
                f(&mut t)
            }
        }
    }
}

/// Prints `result`'s value with `print` (exit 0), or its error (exit 1).
fn finish<R, E: std::error::Error + 'static>(
    result: Result<R, E>,
    print: impl FnOnce(R),
) -> ExitCode {
    match result {
        Ok(value) => {
            print(value);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            ExitCode::from(1)
        }
    }
}

/// Prints the TPM's attestation key (TPMT_PUBLIC, hex, one line) for the operator's
/// enrollment (`sovctl attest enroll --tpm-ak`): exit 0, or 1 with the TPM's error.
pub fn run_tpm_ak(args: TpmArgs) -> ExitCode {
    finish(args.with(|t| tpm::ak_public(t)), |public| {
        println!("{}", hex::encode(public))
    })
}

/// `hostd tpm-identity [--ek-certificate FILE] [--device PATH | --swtpm-socket PATH]`.
#[derive(Debug, clap::Args)]
pub struct TpmIdentityArgs {
    /// The EK certificate (DER or PEM) when the TPM does not hold it in NV memory (firmware
    /// TPMs: from the maker's online service). The enroller checks it all the same.
    #[arg(long)]
    pub ek_certificate: Option<PathBuf>,
    #[command(flatten)]
    pub tpm: TpmArgs,
}

/// Why `hostd tpm-identity` failed.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The certificate file could not be read.
    #[error("reading the EK certificate {path}")]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file holds no certificate.
    #[error("{path} is not a certificate file")]
    Certificate {
        /// The file.
        path: PathBuf,
        #[source]
        source: attest::tpm::ek::EkError,
    },
    /// The TPM failed, or holds no EK certificate.
    #[error(transparent)]
    Tpm(#[from] tpm::TpmError),
}

/// Prints the TPM's identity for an enrollment anchored in its maker's EK certificate
/// (`sovctl attest tpm-challenge --identity`): one line of JSON with the AK, the EK and the EK
/// certificate. Exit 1 with the TPM's error, or if the TPM holds no EK certificate.
pub fn run_tpm_identity(args: TpmIdentityArgs) -> ExitCode {
    finish(tpm_identity(&args), |id| {
        // A struct of three byte strings always serializes.
        println!("{}", serde_json::to_string(&id).unwrap_or_default())
    })
}

fn tpm_identity(args: &TpmIdentityArgs) -> Result<attest::tpm::ek::TpmIdentity, IdentityError> {
    let certificate = match &args.ek_certificate {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| IdentityError::Read {
                path: path.clone(),
                source,
            })?;
            let certs = attest::tpm::ek::certificates_from_file(&bytes).map_err(|source| {
                IdentityError::Certificate {
                    path: path.clone(),
                    source,
                }
            })?;
            certs.into_iter().next()
        }
        None => None,
    };
    Ok(args
        .tpm
        .with(|t| tpm::endorsement::identity_with(t, certificate))?)
}

/// `hostd tpm-activate --challenge FILE [--device PATH | --swtpm-socket PATH]`.
#[derive(Debug, clap::Args)]
pub struct TpmActivateArgs {
    /// The enroller's challenge (`sovctl attest tpm-challenge --out`), JSON.
    #[arg(long)]
    pub challenge: PathBuf,
    #[command(flatten)]
    pub tpm: TpmArgs,
}

/// Why `hostd tpm-activate` failed.
#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    /// The challenge file could not be read.
    #[error("reading the challenge {path}")]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The challenge is not the JSON `sovctl attest tpm-challenge` writes.
    #[error("the challenge {path} is not a credential challenge")]
    Parse {
        /// The file.
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The TPM refused it (made for another TPM or another key) or failed.
    #[error("the TPM did not release the challenge's secret")]
    Tpm(#[source] tpm::TpmError),
}

/// TPM2_ActivateCredential of the enroller's challenge; prints the secret it releases (hex),
/// which is the answer the enroller checks (`sovctl attest enroll --tpm-answer`).
pub fn run_tpm_activate(args: TpmActivateArgs) -> ExitCode {
    finish(activate(&args), |secret| {
        println!("{}", hex::encode(&secret[..]))
    })
}

fn activate(args: &TpmActivateArgs) -> Result<zeroize::Zeroizing<Vec<u8>>, ActivateError> {
    let path = &args.challenge;
    let text = std::fs::read(path).map_err(|source| ActivateError::Read {
        path: path.clone(),
        source,
    })?;
    let challenge: attest::tpm::credential::Challenge =
        serde_json::from_slice(&text).map_err(|source| ActivateError::Parse {
            path: path.clone(),
            source,
        })?;
    args.tpm
        .with(|t| tpm::endorsement::activate_credential(t, &challenge))
        .map_err(ActivateError::Tpm)
}
