//! `/init` of the image's initrd (see the library's documentation). Runs only as PID 1: it
//! mounts, loads modules and replaces the root, which on any other process would be harm.
//!
//! The root has a copy too, for three other jobs: `sovereign-init pcrphase <phase>` measures
//! the root's boot phases into PCR 11 in place of `systemd-pcrphase` (see
//! `sovereign_init::phase::measure_root_phase`), `sovereign-init open-state [device]` makes
//! and opens the state disk on a first boot that the initrd left to the root (see
//! `sovereign_init::boot::open_state_in_root`), and `sovereign-init provision` copies the
//! provisioning disk on a first boot whose initrd did not (see `sovereign_init::provision`).

#![deny(unsafe_code)]

use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, phase] if mode == "pcrphase" => std::process::exit(pcrphase(phase)),
        [mode] if mode == "open-state" => std::process::exit(open_state(None)),
        [mode] if mode == "provision" => std::process::exit(provision()),
        [mode, device] if mode == "open-state" => {
            std::process::exit(open_state(Some(std::path::Path::new(device))))
        }
        _ => {}
    }
    if std::process::id() != 1 {
        eprintln!(
            "sovereign-init: this is the image's initrd init; it runs only as PID 1 \
             (or as `sovereign-init pcrphase <phase>`, `sovereign-init open-state [device]` \
             or `sovereign-init provision`)"
        );
        std::process::exit(2);
    }
    let Err(error) = sovereign_init::boot::run();
    eprintln!(
        "sovereign-init: the boot failed: {}",
        attest::report::report(&error)
    );
    eprintln!("sovereign-init: powering off");
    power_off();
}

/// Measures a phase of the root's boot.
fn pcrphase(phase: &str) -> i32 {
    let device = std::path::Path::new(tpm::DEFAULT_DEVICE);
    let measured = sovereign_init::phase::measure_root_phase(phase, device);
    exit_status(measured.map(|()| format!("extended PCR 11 with '{phase}' (SHA-256 bank)")))
}

/// Opens and mounts the state disk in the root.
fn open_state(device: Option<&std::path::Path>) -> i32 {
    let opened = sovereign_init::boot::open_state_in_root(device);
    exit_status(
        opened.map(|(part, mapped, created)| {
            sovereign_init::boot::state_opened(&part, &mapped, created)
        }),
    )
}

/// Copies the provisioning disk onto the state disk, unless it was.
fn provision() -> i32 {
    exit_status(sovereign_init::boot::provision_in_root())
}

/// A root job's outcome as systemd sees it: a line for the journal (what was done on
/// stdout, the error with its causes on stderr) and the exit status.
fn exit_status<T, E>(outcome: Result<T, E>) -> i32
where
    T: std::fmt::Display,
    E: std::error::Error + 'static,
{
    match outcome {
        Ok(done) => {
            println!("{done}");
            0
        }
        Err(e) => {
            eprintln!("sovereign-init: {}", attest::report::report(&e));
            1
        }
    }
}

/// PID 1 must not exit (the kernel would panic): power off, or wait for the operator.
fn power_off() -> ! {
    rustix::fs::sync();
    let _ = rustix::system::reboot(rustix::system::RebootCommand::PowerOff);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
