//! The initrd's two boot phases, measured into PCR 11 as `systemd-pcrphase` measures them
//! (systemd 252): the SHA-256 of the phase's name (no NUL) extended into the SHA-256 bank,
//! and only when systemd-stub measured the UKI (its `StubPcrKernelImage` EFI variable is
//! set), so that PCR 11 always ends as `image::measure` predicts. The state disk's key is
//! sealed to PCR 11 after `leave-initrd`, so a phase missed here keeps it closed.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Duration, Instant};

/// Measured as the initrd starts.
pub const ENTER_INITRD: &str = "enter-initrd";
/// Measured just before the initrd hands over to the root.
pub const LEAVE_INITRD: &str = "leave-initrd";
/// The PCR systemd's phases go to.
pub const PCR: u8 = 11;
/// Set by systemd-stub when it measured the UKI's sections into PCR 11.
pub const STUB_MEASURED: &str =
    "/sys/firmware/efi/efivars/StubPcrKernelImage-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";

/// What a phase extends PCR 11 with.
pub fn digest(phase: &str) -> [u8; 32] {
    Sha256::digest(phase.as_bytes()).into()
}

/// Why a phase could not be measured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PhaseError {
    /// The stub measured the UKI, but no TPM device appeared.
    #[error("systemd-stub measured this boot, but {device} did not appear within {secs} s")]
    NoDevice {
        /// The TPM device.
        device: String,
        /// How long the init waited.
        secs: u64,
    },
    /// The TPM refused or failed.
    #[error(transparent)]
    Tpm(#[from] tpm::TpmError),
}

/// The TPM the phases go to, or none when the stub measured nothing (no TPM, or not booted
/// from the UKI): then, as with systemd-pcrphase's condition, nothing is measured.
#[derive(Debug)]
pub struct Phases {
    tpm: Option<tpm::Device>,
}

impl Phases {
    /// Opens `device` if the stub measured this boot, waiting up to `wait` for its driver.
    pub fn open(stub_measured: bool, device: &Path, wait: Duration) -> Result<Phases, PhaseError> {
        if !stub_measured {
            return Ok(Phases { tpm: None });
        }
        let deadline = Instant::now() + wait;
        while !device.exists() {
            if Instant::now() > deadline {
                return Err(PhaseError::NoDevice {
                    device: device.display().to_string(),
                    secs: wait.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Phases {
            tpm: Some(tpm::Device::open(device)?),
        })
    }

    /// Extends PCR 11 with `phase`; false when nothing is measured on this boot.
    pub fn measure(&mut self, phase: &str) -> Result<bool, PhaseError> {
        match &mut self.tpm {
            Some(t) => {
                tpm::pcr_extend(t, PCR, &digest(phase))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_the_digest_of_its_name_without_nul() {
        assert_eq!(
            hex::encode(digest(ENTER_INITRD)),
            hex::encode(Sha256::digest(b"enter-initrd"))
        );
        assert_ne!(digest(ENTER_INITRD), digest(LEAVE_INITRD));
    }

    #[test]
    fn without_the_stubs_measurement_nothing_is_measured() {
        let mut p = Phases::open(false, Path::new("/nonexistent/tpm"), Duration::ZERO).unwrap();
        assert!(!p.measure(ENTER_INITRD).unwrap());
    }

    #[test]
    fn a_measured_boot_without_a_tpm_device_is_an_error() {
        let err = Phases::open(true, Path::new("/nonexistent/tpm"), Duration::ZERO).unwrap_err();
        assert!(matches!(err, PhaseError::NoDevice { .. }), "{err}");
    }
}
