//! `/init` of the image's initrd (see the library's documentation). Runs only as PID 1: it
//! mounts, loads modules and replaces the root, which on any other process would be harm.

#![deny(unsafe_code)]

use std::time::Duration;

fn main() {
    if std::process::id() != 1 {
        eprintln!("sovereign-init: this is the image's initrd init; it runs only as PID 1");
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

/// PID 1 must not exit (the kernel would panic): power off, or wait for the operator.
fn power_off() -> ! {
    rustix::fs::sync();
    let _ = rustix::system::reboot(rustix::system::RebootCommand::PowerOff);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
