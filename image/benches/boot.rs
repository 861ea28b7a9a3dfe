//! Boot to hostd ready under qemu TCG (one vCPU, 1 GiB, OVMF, swtpm), printed, not asserted:
//! the VM test's image with its debug hostd beside the same image with the release hostd a
//! node gets, booted in turn so that the shared machine's drift falls on both alike. Each
//! image boots first with a blank state disk and a fresh TPM (the first boot formats and
//! seals the state disk), then reboots; every boot ends with the power button, as a node's
//! does. Each figure is split at the kernel's start, read off the readiness line's kernel
//! timestamp: what comes before it is firmware, the UKI's measurement and the kernel's
//! decompression, none of it the image's userspace.
//!
//! Uses the binaries `cargo test --workspace` builds (hostd, sovctl, the simulated NVML
//! library) for the node's material, and builds the image's two hostd itself (the release one
//! takes minutes, once): `cargo bench --profile dev -p image --bench boot` after the tests, or
//! `cargo build --release -p hostd -p sovctl -p fake-nvml && cargo bench -p image --bench boot`.
//! The machine's speed at the time (a shell loop, before and after) is printed with the
//! figures: these machines are shared, and a TCG boot takes twice as long when they are busy.
//! `SOVEREIGN_BOOT_ROUNDS` (default 3) sets the number of reboots, `SOVEREIGN_BOOT_IMAGES`
//! (`release`, `debug` or `both`, the default) which images boot. With `SOVEREIGN_VM_DEBUG=1`
//! the images send their journal to the console (slower boots) and each boot's
//! `systemd-analyze blame` is printed, read off that console.

// The console's parsing, shared with the VM test. Its unit tests run there; here
// (`clippy --all-targets` builds benches as tests) they would be compiled with no runner.
#[cfg_attr(test, allow(dead_code, unused_imports))]
#[path = "../tests/vm/blame.rs"]
mod blame;
#[allow(dead_code)] // the boot half of the VM test's harness; the rest is the test's
#[path = "../tests/vm/harness.rs"]
mod harness;

use harness::{Fixture, HostdBuild, Vm};
use std::time::Duration;

/// One boot's figures, in seconds.
struct Boot {
    /// qemu's start to hostd's readiness line.
    total: f64,
    /// The kernel's start to the readiness line (its kernel timestamp), where the line has one.
    kernel: Option<f64>,
}

/// The kernel timestamp (`[   18.508276]`) of the console line that says hostd is ready.
fn kernel_seconds(console: &str) -> Option<f64> {
    let line = console.lines().find(|l| l.contains("hostd ready"))?;
    blame::kernel_stamp(line).map(|(stamp, _)| stamp)
}

fn boot(fx: &Fixture, label: &str) -> Boot {
    let mut vm = Vm::boot(fx, &fx.esp, &fx.state, label);
    let figures = Boot {
        total: vm.ready_after().as_secs_f64(),
        kernel: kernel_seconds(&vm.console_text()),
    };
    assert!(
        vm.press_power_button(Duration::from_secs(120)),
        "{label}: the node did not shut down on its power button:\n{}",
        vm.console_tail()
    );
    figures
}

fn row(name: &str, boots: &[Boot]) {
    let cell = |b: &Boot| match b.kernel {
        Some(k) => format!("{:5.1} ({:4.1} + {:4.1})", b.total, b.total - k, k),
        None => format!("{:5.1}", b.total),
    };
    let reboots = &boots[1..];
    let mean = reboots.iter().map(|b| b.total).sum::<f64>() / reboots.len().max(1) as f64;
    let cells: Vec<String> = boots.iter().map(cell).collect();
    println!("{name:14} | {} | mean reboot {mean:4.1}", cells.join(" | "));
}

/// The images `SOVEREIGN_BOOT_IMAGES` names: `release` (the production hostd only, for the
/// boot target's figure in half the time), `debug`, or both (the default, side by side).
fn selected_images() -> Vec<(&'static str, &'static str, HostdBuild)> {
    let debug = ("debug hostd", "image-boot-debug", HostdBuild::Debug);
    let release = ("release hostd", "image-boot-release", HostdBuild::Release);
    match std::env::var("SOVEREIGN_BOOT_IMAGES").as_deref() {
        Ok("release") => vec![release],
        Ok("debug") => vec![debug],
        Ok("both") | Err(std::env::VarError::NotPresent) => vec![debug, release],
        Ok(other) => refuse(&format!("={other}: expected release, debug or both")),
        Err(e) => refuse(&format!(": {e}")),
    }
}

fn refuse(what: &str) -> ! {
    eprintln!("SOVEREIGN_BOOT_IMAGES{what}");
    std::process::exit(2)
}

fn main() {
    let rounds: usize = std::env::var("SOVEREIGN_BOOT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1);
    let images: Vec<(&str, Fixture)> = selected_images()
        .into_iter()
        .map(|(name, folder, build)| (name, Fixture::build_in(folder, build)))
        .collect();
    let before = machine_speed();
    let mut figures: Vec<Vec<Boot>> = images.iter().map(|_| Vec::new()).collect();
    for round in 0..=rounds {
        for ((name, fx), boots) in images.iter().zip(&mut figures) {
            let label = match round {
                0 => format!("{name}, first boot"),
                r => format!("{name}, reboot {r}"),
            };
            boots.push(boot(fx, &label));
        }
    }
    println!(
        "\nboot to hostd ready, s: total (before the kernel + kernel and userspace); \
         first boot, then {rounds} reboots"
    );
    for ((name, _), boots) in images.iter().zip(&figures) {
        row(name, boots);
    }
    let after = machine_speed();
    println!(
        "machine: a shell loop of 300,000 additions took {} s before the boots and {} s after \
         (0.30 s when the 29.0 s boot of 2026-12-06 was measured)",
        seconds(before),
        seconds(after)
    );
}

/// How fast the shared machine is right now: the seconds `sh` takes for a loop of 300,000
/// additions, the yardstick the closing notes compare boots by (TCG boots scale with it).
fn machine_speed() -> Option<f64> {
    let started = std::time::Instant::now();
    let status = std::process::Command::new("sh")
        .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
        .status()
        .ok()?;
    status.success().then(|| started.elapsed().as_secs_f64())
}

fn seconds(s: Option<f64>) -> String {
    s.map_or_else(|| "?".into(), |s| format!("{s:.2}"))
}
