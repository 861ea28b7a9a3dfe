//! `systemd-analyze blame`, read off the console of a node that has no shell to run it in.
//!
//! With `SOVEREIGN_VM_DEBUG=1` the image's journal goes to the serial console, each line
//! stamped with the kernel's clock. systemd says "Starting X..." when a unit's job starts
//! (blame's "activating") and "Finished X." / "Started X." when it is active ("Mounting" and
//! "Mounted" for mounts, "Failed to start" when it failed), so the time between the two is
//! the time blame reports for the unit. Units that systemd starts without a "Starting" line
//! (simple services, targets) are not listed, as blame lists them near zero.

/// One unit's activation: from its start line to its finish line, in kernel seconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Activation {
    pub(crate) unit: String,
    pub(crate) started_at: f64,
    pub(crate) seconds: f64,
}

/// A console line of systemd's: `[   14.365501] systemd[1]: Starting x.service - ...`.
struct ManagerLine<'a> {
    stamp: f64,
    message: &'a str,
}

fn manager_line(line: &str) -> Option<ManagerLine<'_>> {
    let (stamp, rest) = kernel_stamp(line)?;
    let message = rest.strip_prefix("systemd[1]: ")?;
    Some(ManagerLine { stamp, message })
}

/// A console line's kernel timestamp (`[   14.365501] ...`) and what follows it.
pub(crate) fn kernel_stamp(line: &str) -> Option<(f64, &str)> {
    let (_, rest) = line.split_once('[')?;
    let (stamp, rest) = rest.split_once(']')?;
    Some((stamp.trim().parse().ok()?, rest.trim_start()))
}

/// The unit a message names after `verb`: `Starting nftables.service - nftables...` gives
/// `nftables.service`. Only names with a unit suffix count.
fn unit_after<'a>(message: &'a str, verb: &str) -> Option<&'a str> {
    const SUFFIXES: [&str; 6] = [
        ".service", ".mount", ".socket", ".swap", ".device", ".timer",
    ];
    let rest = message.strip_prefix(verb)?.strip_prefix(' ')?;
    let token = rest.split_whitespace().next()?;
    let unit = token.trim_end_matches('.');
    SUFFIXES.iter().any(|s| unit.ends_with(s)).then_some(unit)
}

/// Every unit that started and finished on this console, longest first, as blame sorts.
pub(crate) fn blame(console: &str) -> Vec<Activation> {
    let mut starting: Vec<(String, f64)> = Vec::new();
    let mut done = Vec::new();
    for line in console.lines().filter_map(manager_line) {
        let msg = line.message;
        if let Some(unit) = ["Starting", "Mounting"]
            .iter()
            .find_map(|v| unit_after(msg, v))
        {
            starting.push((unit.to_owned(), line.stamp));
        } else if let Some(unit) = ["Finished", "Started", "Mounted", "Failed to start"]
            .iter()
            .find_map(|v| unit_after(msg, v))
        {
            if let Some(at) = starting.iter().position(|(u, _)| u == unit) {
                let (unit, since) = starting.swap_remove(at);
                done.push(Activation {
                    unit,
                    started_at: since,
                    seconds: line.stamp - since,
                });
            }
        }
    }
    done.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    done
}

/// The kernel stamp of systemd's first line on the console: where the kernel's share (and
/// the initrd's) ends, give or take the moment journald starts forwarding.
pub(crate) fn first_manager_line(console: &str) -> Option<f64> {
    console
        .lines()
        .filter_map(manager_line)
        .map(|l| l.stamp)
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
BdsDxe: loading Boot0001 \"UEFI Non-Block Boot Device\"
[   14.139575] systemd-modules-load[124]: Inserted module 'button'
[   14.200000] systemd[1]: Mounting sys-kernel-config.mount - Kernel Configuration File System...
[   14.365501] systemd[1]: Starting systemd-tmpfiles-setup.service - Create System Files and Directories...
[   14.398965] systemd[1]: Finished nftables.service - nftables.
[   14.400000] systemd[1]: Mounted sys-kernel-config.mount - Kernel Configuration File System.
[   17.261852] systemd[1]: Finished systemd-tmpfiles-setup.service - Create System Files and Directories.
[   18.180556] systemd[1]: Reached target sysinit.target - System Initialization.
[   18.588499] systemd[1]: Starting dbus.service - D-Bus System Message Bus...
[   19.020671] systemd[1]: Starting hostd.service - Sovereign Host node daemon...
[   19.447765] systemd[1]: Started dbus.service - D-Bus System Message Bus.
[   19.500000] systemd[1]: Starting broken.service - Broken...
[   19.600000] systemd[1]: Failed to start broken.service - Broken.
";

    #[test]
    fn units_are_timed_from_start_to_finish_longest_first() {
        let got: Vec<(String, i64)> = blame(CONSOLE)
            .into_iter()
            .map(|a| (a.unit, (a.seconds * 1000.0).round() as i64))
            .collect();
        let want = [
            ("systemd-tmpfiles-setup.service", 2896),
            ("dbus.service", 859),
            ("sys-kernel-config.mount", 200),
            ("broken.service", 100),
        ];
        let want: Vec<(String, i64)> = want.iter().map(|(u, s)| (u.to_string(), *s)).collect();
        assert_eq!(
            got, want,
            "a finish without a start (nftables) or a start without a finish (hostd) is not listed"
        );
    }

    #[test]
    fn the_kernels_share_ends_at_systemds_first_line() {
        assert_eq!(first_manager_line(CONSOLE), Some(14.2));
        assert_eq!(
            first_manager_line("[ 1.0] sovereign-init: root mounted\n"),
            None
        );
    }

    #[test]
    fn lines_that_are_not_systemds_are_passed_over() {
        for line in [
            "[   19.1] hostd[159]: Starting hostd.service - not the manager",
            "[ garbled] systemd[1]: Starting x.service - X...",
            "systemd[1]: Starting x.service - X...",
            "[   19.1] systemd[1]: Starting the thing",
        ] {
            assert!(
                blame(&format!(
                    "{line}\n[ 20.0] systemd[1]: Finished x.service - X.\n"
                ))
                .is_empty(),
                "{line}"
            );
        }
    }
}
