//! The initrd's two boot phases, measured into PCR 11 as `systemd-pcrphase` measures them
//! (systemd 252): the SHA-256 of the phase's name (no NUL) extended into the SHA-256 bank,
//! and only when systemd-stub measured the UKI (its `StubPcrKernelImage` EFI variable is
//! set), so that PCR 11 always ends as `image::measure` predicts. The state disk's key is
//! sealed to PCR 11 after `leave-initrd`, so a phase missed here keeps it closed.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

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
        if crate::poll::until(wait, || device.exists().then_some(())).is_none() {
            return Err(PhaseError::NoDevice {
                device: device.display().to_string(),
                secs: wait.as_secs(),
            });
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

/// The phases the root's systemd measures, in its `systemd-pcrphase-sysinit.service` (start,
/// stop) and `systemd-pcrphase.service` (start, stop).
pub const ROOT_PHASES: [&str; 4] = ["sysinit", "final", "ready", "shutdown"];

/// How long the root's measurements wait for the TPM device (it is there long before).
const ROOT_WAIT: Duration = Duration::from_secs(10);

/// Why a phase of the root was not measured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootPhaseError {
    /// Not one of [`ROOT_PHASES`]: a typo in a unit would otherwise measure a word no
    /// prediction has.
    #[error("{0:?} is not a phase the root measures (one of {ROOT_PHASES:?})")]
    Unknown(String),
    /// The TPM could not be reached or refused the extension.
    #[error("measuring {phase} into PCR 11")]
    Tpm {
        /// The phase.
        phase: String,
        #[source]
        source: PhaseError,
    },
}

/// `sovereign-init pcrphase <phase>`: what `systemd-pcrphase <phase>` does in the root's
/// units, as the initrd does for its own two phases. systemd-pcrphase links systemd's shared
/// library and loads the TPM software stack and OpenSSL at each run: under the VM test's
/// emulation that made its `sysinit` and `ready` measurements, which hostd waits for, take
/// seconds. The units' conditions (a TPM, systemd-stub's measurement) still decide whether it
/// runs; `device` is the TPM.
pub fn measure_root_phase(phase: &str, device: &Path) -> Result<(), RootPhaseError> {
    if !ROOT_PHASES.contains(&phase) {
        return Err(RootPhaseError::Unknown(phase.to_owned()));
    }
    let tpm = |source| RootPhaseError::Tpm {
        phase: phase.to_owned(),
        source,
    };
    let mut phases = Phases::open(true, device, ROOT_WAIT).map_err(tpm)?;
    phases.measure(phase).map(drop).map_err(tpm)
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
    fn only_the_roots_phases_are_measured_there() {
        let err = measure_root_phase("sysnit", Path::new("/nonexistent/tpm")).unwrap_err();
        assert!(matches!(err, RootPhaseError::Unknown(_)), "{err}");
        assert!(!ROOT_PHASES.contains(&ENTER_INITRD));
    }

    #[test]
    fn a_measured_boot_without_a_tpm_device_is_an_error() {
        let err = Phases::open(true, Path::new("/nonexistent/tpm"), Duration::ZERO).unwrap_err();
        assert!(matches!(err, PhaseError::NoDevice { .. }), "{err}");
    }
}
