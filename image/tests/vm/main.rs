//! The image, booted for real: qemu (TCG, one CPU), OVMF, swtpm. Builds the production hostd
//! and the test variant of the image (the simulated NVML library, its own manifest name),
//! provisions a node, boots it, and checks from the host what an operator and a verifier
//! would check. Needs root-free tools only, but many of them: `.ci/run` installs them.

mod harness;

use harness::{Fixture, Vm};

/// One boot of the image answers `sovctl attest` with `affirming` against the build's
/// manifest; the same image with one byte of its UKI command line changed boots too, and the
/// same check gives `contraindicated`, naming PCR 11. A reboot after a power cut keeps the
/// node's ledger: the later export extends the first.
#[test]
fn the_image_boots_attests_and_a_changed_command_line_is_caught() {
    let fx = Fixture::build();

    let mut vm = Vm::boot(&fx, &fx.esp, "first boot");
    let first = fx.attest(&vm);
    assert!(
        first.contains("affirming"),
        "the image as built must be affirmed:\n{first}\n--- console ---\n{}",
        vm.console_tail()
    );
    let before = fx.export_ledger(&vm, "export-1");
    vm.power_cut();

    let tampered = fx.tampered_esp();
    let mut vm = Vm::boot(&fx, &tampered, "changed command line");
    let second = fx.attest(&vm);
    assert!(
        second.contains("contraindicated") && second.contains("pcr.11"),
        "a changed command line must be caught by PCR 11:\n{second}"
    );
    vm.power_cut();

    let vm = Vm::boot(&fx, &fx.esp, "reboot");
    let after = fx.export_ledger(&vm, "export-2");
    assert!(
        after >= before,
        "the ledger shrank across a reboot: {before} then {after} records"
    );
    drop(vm);
}
