//! # tpm — the node's TPM 2.0 client
//!
//! hostd proves what booted with a TPM 2.0 quote: the TPM signs, with an attestation key (AK)
//! that never leaves it, a digest of PCRs 4, 7, 11 and 12 together with the verifier's nonce.
//! This crate speaks just enough of the TPM 2.0 command protocol (TPM 2.0 Library, Part 3) to
//! produce that, over a [`Transport`]: the kernel's resource-managed device `/dev/tpmrm0`
//! ([`Device`]) or a software TPM's socket ([`SwtpmSocket`]).
//!
//! The AK is a primary key in the endorsement hierarchy created from a fixed template
//! ([`attest::tpm::ak_template`]): a TPM derives a primary key deterministically from its
//! hierarchy seed and the template, so the same TPM always yields the same AK and the node
//! stores nothing. The operator enrols its public area ([`ak_public`], `hostd tpm-ak`); the
//! verifier checks quotes with that enrolled key only.
//!
//! The image's initrd also seals and unseals its state disk's passphrase to PCR 11 ([`seal`],
//! [`unseal`]), as systemd does, in sessions salted with the storage key so that the secret
//! crosses the bus encrypted.
//!
//! Commands are marshalled by hand — this is protocol framing; the cryptography happens inside
//! the TPM, in RustCrypto's crates for the sessions (P-256 ECDH or RSA-OAEP salts, HMAC-SHA-256,
//! AES-128-CFB) and, on the verifier's side, in `attest`. Responses are read with `attest::tpm`'s
//! bounds-checked reader. Every call is blocking: async callers run it on a blocking thread.

mod command;
pub mod endorsement;
pub mod seal;
mod session;
#[cfg(feature = "swtpm")]
pub mod swtpm;
mod transport;
pub mod unseal;

pub use command::{
    ak_public, create_ak, flush_context, lockout, pcr_extend, pcr_read, quote, quote_with, Lockout,
};
pub use transport::{Device, SwtpmSocket, Transport, DEFAULT_DEVICE};

/// Why a TPM operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TpmError {
    /// The TPM device or socket could not be opened.
    #[error("opening the TPM at {path}")]
    Open {
        /// Device or socket path.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Sending a command or reading its response failed.
    #[error("TPM I/O while {op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TPM answered with an error response code (TPM 2.0 Part 2, §6.6).
    #[error("{command}: the TPM answered response code {rc:#x}{}", rc_hint(*rc))]
    Response {
        /// The command.
        command: &'static str,
        /// The TPM_RC value.
        rc: u32,
    },
    /// The response is not what the command returns.
    #[error("{command}: malformed response: {reason}")]
    Malformed {
        /// The command.
        command: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A structure in the response failed `attest::tpm`'s checks.
    #[error("{command}")]
    Parse {
        /// The command.
        command: &'static str,
        /// The parser's error.
        source: attest::tpm::TpmError,
    },
    /// A value this client does not handle (a sealed object's PCR bank, say).
    #[error("unsupported {what}: {value}")]
    Unsupported {
        /// What the value is.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// A sealed object's blob is not a TPM2B_PRIVATE followed by a TPM2B_PUBLIC.
    #[error("the sealed object is malformed")]
    SealedObject(#[source] attest::tpm::TpmError),
    /// A salted session's response does not carry the HMAC its contents and nonces give:
    /// altered between the TPM and this client, or not from the TPM the session was made with.
    #[error("{command}: the response's HMAC does not verify")]
    ResponseHmac {
        /// The command.
        command: &'static str,
    },
    /// The TPM made a storage key other than the one the sealed object's token pins: another
    /// TPM, a cleared owner hierarchy, or something answering in the TPM's place.
    #[error("the TPM's storage key is not the one the secret was sealed under")]
    StorageKeyChanged,
    /// The operating system's random generator failed.
    #[error("the random generator failed")]
    Random(#[source] rand_core::Error),
    /// A session's salt could not be shared with the storage key (the random generator
    /// failed, or the key is not a usable RSA or P-256 key).
    #[error("salting the session with the storage key")]
    Salt(#[source] attest::tpm::secret::SecretError),
    /// The TPM's endorsement key or its certificate is not what the enroller accepts.
    #[error("{what}")]
    Endorsement {
        /// What was read.
        what: &'static str,
        /// Why it is refused.
        source: attest::tpm::ek::EkError,
    },
    /// The TPM holds no EK certificate: nothing vouches that it is a genuine TPM.
    #[error(
        "the TPM has no EK certificate at NV index 0x01c00002 (RSA 2048) or 0x01c0000a (ECC \
         P-256): its maker's certificate is what vouches for it (a firmware TPM's comes from \
         its maker's online service, a software TPM's from swtpm_setup --create-ek-cert)"
    )]
    NoEkCertificate,
    /// PCRs kept changing between the quote and reading their values.
    #[error("PCRs changed during each of {attempts} quote attempts")]
    PcrsChanging {
        /// Attempts made.
        attempts: u32,
    },
}

/// A sentence for the response codes an operator can act on.
fn rc_hint(rc: u32) -> &'static str {
    match rc {
        0x100 => " (TPM_RC_INITIALIZE: the TPM was not started with TPM2_Startup)",
        0x9a2 | 0x98e => " (bad authorization: the endorsement hierarchy has a password)",
        0x902 | 0x903 => " (out of object memory: too many loaded objects)",
        0x922 => " (TPM_RC_RETRY: the TPM is busy, try again)",
        0x921 => {
            " (TPM_RC_LOCKOUT: dictionary-attack lockout, after failed authorizations or power \
             cuts that followed a use of a key without noDA; it ends as the TPM's recovery time \
             passes, or with TPM2_DictionaryAttackLockReset under the lockout authorization)"
        }
        0x99d => " (TPM_RC_POLICY_FAIL: the PCRs do not hold the values the object was sealed to)",
        _ => "",
    }
}
