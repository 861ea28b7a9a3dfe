//! PEM certificates and TLS private keys, read with the same rules as every other key file.

use crate::{read_private, KeyFileError};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A certificate bundle larger than this is not one (a chain is a few kilobytes).
pub const MAX_PEM_FILE_LEN: u64 = 1 << 20;

/// Why a PEM file could not be used. Always names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PemError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no certificate.
    #[error("{}: no PEM certificate found", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid PEM.
    #[error("{}: invalid PEM: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// The file holds no private key.
    #[error("{}: no PEM private key found (PKCS#8, SEC1 or PKCS#1)", path.display())]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// The private key file breaks the key-file rules (mode, type, size).
    #[error(transparent)]
    KeyFile(#[from] KeyFileError),
}

/// Reads every certificate in a PEM file (leaf first for chains). Errors if there is none.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let io_err = |source| PemError::Io {
        path: path.to_owned(),
        source,
    };
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .map_err(io_err)?
        .take(MAX_PEM_FILE_LEN)
        .read_to_end(&mut pem)
        .map_err(io_err)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemError::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// Reads the first private key in a PEM file, with the rules of [`read_private`]: a key file
/// that group or others may read is refused, and its contents are wiped from memory after
/// parsing.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let pem = read_private(path)?;
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => PemError::NoPrivateKey {
            path: path.to_owned(),
        },
        other => PemError::Pem {
            path: path.to_owned(),
            reason: other.to_string(),
        },
    })
}
