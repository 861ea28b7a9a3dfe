//! The image, booted for real: qemu (TCG, one CPU), OVMF, swtpm. Builds the production hostd
//! and the test variant of the image (the simulated NVML library, its own manifest name),
//! provisions a node, boots it, and checks from the host what an operator and a verifier
//! would check. Needs root-free tools only, but many of them: `.ci/run` installs them.

mod blame;
mod harness;
mod jobs;

use harness::{Fixture, Provisioning, Vm};
use std::time::Duration;

/// One boot of the image answers `sovctl attest` with `affirming` against the build's
/// manifest, and runs a tenant's jobs under its systemd within their memory and task limits
/// and the policy's egress. The same image with one byte of its UKI command line changed cannot open the
/// node's sealed state disk (PCR 11 differs), so hostd never starts; given a fresh state disk it boots,
/// and the same check gives `contraindicated`, naming PCR 11 (that boot's provisioning disk is
/// plugged in after the initrd, so the root copies it). After a power cut the original
/// image opens its state again, and the node's ledger is extended, not replaced. The power
/// button shuts a running node down cleanly.
#[test]
fn the_image_boots_attests_and_a_changed_command_line_is_caught() {
    let fx = Fixture::build();

    let mut vm = Vm::boot(&fx, &fx.esp, &fx.state, "first boot");
    let first = fx.attest(&vm);
    assert!(
        first.contains("affirming"),
        "the image as built must be affirmed:\n{first}\n--- console ---\n{}",
        vm.console_tail()
    );
    jobs::jobs_are_confined(&fx);
    let before = fx.export_ledger(&vm, "export-1");
    vm.power_cut();

    let tampered = fx.tampered_esp();
    // A good boot reaches hostd in about a minute here; this one gets three and must not. It
    // normally powers itself off in under one (a power cut instead counts against the TPM's
    // dictionary-attack budget, which swtpm keeps at 3 unclean restarts).
    let (console, powered_off) = Vm::boot_refused(
        &fx,
        &tampered,
        &fx.state,
        "changed command line, sealed state",
        Duration::from_secs(180),
    );
    // Refused for the right reason, by the TPM (the spec's name for response code 0x99d: the
    // PCRs differ from the sealing policy's), and the node then powered itself off; not a
    // qemu that failed to start or a kernel that never ran (the tampered command line drops
    // `quiet`, so the initrd's lines reach the console).
    assert!(
        console.contains("TPM_RC_POLICY_FAIL") && !console.contains("hostd ready"),
        "under a changed UKI the TPM must refuse the sealed state disk's secret:\n{console}"
    );
    assert!(
        powered_off,
        "the node must power itself off when its state disk stays closed:\n{console}"
    );

    let fresh = fx.work.join("state-fresh.img");
    harness::blank_disk(&fresh);
    // A first boot whose provisioning disk shows up only after the initrd is done (virtual
    // media attached late): the root's `sovereign-provision.service` copies it.
    let mut vm = Vm::boot_with(
        &fx,
        &tampered,
        &fresh,
        "changed command line",
        Provisioning::AfterTheInitrd,
    );
    let second = fx.attest(&vm);
    assert!(
        second.contains("contraindicated") && second.contains("pcr.11"),
        "a changed command line must be caught by PCR 11:\n{second}"
    );
    // And by what the firmware measured into PCR 4: another UKI than the manifest's.
    assert!(
        second.contains("efi.boot_applications"),
        "the firmware started another UKI than the manifest's:\n{second}"
    );
    assert!(
        vm.press_power_button(Duration::from_secs(120)),
        "the node must shut down cleanly when its power button is pressed:\n{}",
        vm.console_tail()
    );

    let vm = Vm::boot(&fx, &fx.esp, &fx.state, "reboot");
    let after = fx.export_ledger(&vm, "export-2");
    assert!(
        after >= before,
        "the ledger shrank across a reboot: {before} then {after} records"
    );
    drop(vm);
}
