//! A software TPM for tests: `swtpm socket` on a state folder, stopped when dropped.
//!
//! Behind the `swtpm` feature. The state folder keeps the TPM's seeds, so a second [`Swtpm`]
//! on the same folder is the same TPM after a restart (same AK); a fresh folder is a new TPM.

use crate::transport::SwtpmSocket;
use crate::TpmError;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long swtpm may take to open its socket.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Why swtpm could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SwtpmError {
    /// The program could not be run (not installed: Debian package `swtpm`).
    #[error("running swtpm (Debian package swtpm)")]
    Spawn(#[source] std::io::Error),
    /// The state folder could not be made.
    #[error("making swtpm's state folder {path}")]
    StateDir {
        /// The folder.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It exited before its socket was ready.
    #[error("swtpm exited during start ({status}): {stderr}")]
    Exited {
        /// Exit status.
        status: std::process::ExitStatus,
        /// What it printed.
        stderr: String,
    },
    /// `swtpm_setup` could not be run (not installed: Debian package `swtpm-tools`).
    #[error("running swtpm_setup (Debian package swtpm-tools)")]
    SetupSpawn(#[source] std::io::Error),
    /// `swtpm_setup` failed.
    #[error("swtpm_setup failed ({status}): {output}")]
    Setup {
        /// Exit status.
        status: std::process::ExitStatus,
        /// What it printed.
        output: String,
    },
    /// The socket did not accept connections in time.
    #[error("swtpm's socket {path} not ready after {timeout:?}")]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// How long was waited.
        timeout: Duration,
    },
}

/// A running `swtpm socket --tpm2` with its data socket at `<state>/swtpm.sock`, started
/// (TPM2_Startup(CLEAR)) and killed when dropped.
#[derive(Debug)]
pub struct Swtpm {
    child: Child,
    socket: PathBuf,
}

impl Swtpm {
    /// Start swtpm on `state_dir` (created if missing; unix socket paths must stay under
    /// 108 bytes, so keep it short) and wait, bounded, until its socket accepts connections.
    pub fn start(state_dir: &Path) -> Result<Self, SwtpmError> {
        std::fs::create_dir_all(state_dir).map_err(|source| SwtpmError::StateDir {
            path: state_dir.to_owned(),
            source,
        })?;
        let socket = state_dir.join("swtpm.sock");
        let ctrl = state_dir.join("swtpm.ctrl");
        for stale in [&socket, &ctrl] {
            let _ = std::fs::remove_file(stale);
        }
        let child = Command::new("swtpm")
            .arg("socket")
            .arg("--tpm2")
            .arg("--tpmstate")
            .arg(format!("dir={}", state_dir.display()))
            .arg("--server")
            .arg(format!("type=unixio,path={}", socket.display()))
            .arg("--ctrl")
            .arg(format!("type=unixio,path={}", ctrl.display()))
            .arg("--flags")
            .arg("not-need-init,startup-clear")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(SwtpmError::Spawn)?;
        let mut me = Self { child, socket };
        me.wait_ready()?;
        Ok(me)
    }

    fn wait_ready(&mut self) -> Result<(), SwtpmError> {
        let started = Instant::now();
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut stderr);
                }
                return Err(SwtpmError::Exited { status, stderr });
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(SwtpmError::Timeout {
                    path: self.socket.clone(),
                    timeout: START_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The data socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A connection to the data socket (swtpm serves one connection at a time).
    pub fn connect(&self) -> Result<SwtpmSocket, TpmError> {
        SwtpmSocket::connect(&self.socket, Duration::from_secs(30))
    }
}

/// A local certificate authority, as `swtpm_localca` keeps one: a self-signed root and the
/// intermediate that signs EK certificates, standing in for a TPM maker's CA.
#[derive(Debug, Clone)]
pub struct LocalCa {
    /// The folder holding its keys and certificates.
    pub dir: PathBuf,
}

impl LocalCa {
    /// The root certificate (PEM); `swtpm_localca` makes it on first use.
    pub fn root_pem(&self) -> PathBuf {
        self.dir.join("swtpm-localca-rootca-cert.pem")
    }

    /// The intermediate (issuer) certificate (PEM).
    pub fn issuer_pem(&self) -> PathBuf {
        self.dir.join("issuercert.pem")
    }
}

/// Manufactures a TPM in `state_dir` as a maker would: `swtpm_setup` creates its endorsement
/// keys and stores EK certificates signed by `ca` (made in `ca.dir` on first use, shared by
/// every TPM made with it) in its NV memory; SHA-256 is its only PCR bank. Start it with
/// [`Swtpm::start`].
pub fn manufacture(state_dir: &Path, ca: &LocalCa) -> Result<(), SwtpmError> {
    for dir in [state_dir, ca.dir.as_path()] {
        std::fs::create_dir_all(dir).map_err(|source| SwtpmError::StateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    let write = |name: &str, text: String| {
        let path = ca.dir.join(name);
        std::fs::write(&path, text)
            .map(|()| path)
            .map_err(|source| SwtpmError::StateDir {
                path: ca.dir.clone(),
                source,
            })
    };
    let d = ca.dir.display();
    let localca = write(
        "swtpm-localca.conf",
        format!(
            "statedir = {d}\nsigningkey = {d}/signkey.pem\nissuercert = {d}/issuercert.pem\n\
             certserial = {d}/certserial\n"
        ),
    )?;
    let options = write("swtpm-localca.options", String::new())?;
    let setup = write(
        "swtpm_setup.conf",
        format!(
            "create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = {}\n\
             create_certs_tool_options = {}\nactive_pcr_banks = sha256\n",
            localca.display(),
            options.display()
        ),
    )?;
    let out = Command::new("swtpm_setup")
        .arg("--tpm2")
        .arg("--tpmstate")
        .arg(state_dir)
        .arg("--config")
        .arg(&setup)
        .args(["--create-ek-cert", "--pcr-banks", "sha256"])
        .stdin(Stdio::null())
        .output()
        .map_err(SwtpmError::SetupSpawn)?;
    if !out.status.success() {
        return Err(SwtpmError::Setup {
            status: out.status,
            output: String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned(),
        });
    }
    Ok(())
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_folder_that_cannot_be_made_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let state = file.join("tpm");
        let err = Swtpm::start(&state).unwrap_err();
        assert!(
            matches!(&err, SwtpmError::StateDir { path, .. } if *path == state),
            "{err:?}"
        );
        assert!(!err.to_string().contains("running swtpm"), "{err}");
        assert!(std::error::Error::source(&err).is_some());
    }
}
