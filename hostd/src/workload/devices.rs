//! The device nodes a lease's jobs may open, found the way the driver publishes them.
//!
//! `/dev/nvidiaN` is character device 195:N and `/dev/nvidiactl` 195:255, fixed by the
//! driver; `/dev/nvidia-uvm` has a *dynamic* major, assigned at module load and published
//! in `/proc/devices`, so it is read there and never hard-coded. A node without the UVM module
//! (or without GPUs, as in tests) simply has none.

use std::path::Path;

/// Major number of the NVIDIA GPU character devices.
pub const NVIDIA_MAJOR: u32 = 195;
/// Minor number of `/dev/nvidiactl`.
pub const NVIDIACTL_MINOR: u32 = 255;

/// The major number `/proc/devices` lists for character driver `name`.
pub fn char_major(proc_devices: &str, name: &str) -> Option<u32> {
    let mut in_char = false;
    for line in proc_devices.lines() {
        let line = line.trim();
        if line == "Character devices:" {
            in_char = true;
            continue;
        }
        if line == "Block devices:" {
            in_char = false;
            continue;
        }
        if !in_char {
            continue;
        }
        let mut parts = line.split_whitespace();
        if let (Some(major), Some(driver)) = (parts.next(), parts.next()) {
            if driver == name {
                return major.parse().ok();
            }
        }
    }
    None
}

/// Reads `/proc/devices` (or a copy of it) for the `nvidia-uvm` major.
pub fn uvm_major(proc_devices: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(proc_devices).ok()?;
    char_major(&text, "nvidia-uvm")
}

/// The device node of GPU minor `n`.
pub fn gpu_node(minor: u32) -> String {
    format!("/dev/nvidia{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_DEVICES: &str = "Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia-frontend
234 nvidia-uvm
235 nvidia-caps
509 nvidia-uvm-tools

Block devices:
  8 sd
234 nvidia-uvm
";

    /// The UVM major is the one the running kernel assigned, found among character
    /// devices only, and absent where the module is not loaded.
    #[test]
    fn the_uvm_major_is_read_not_assumed() {
        assert_eq!(char_major(PROC_DEVICES, "nvidia-uvm"), Some(234));
        assert_eq!(char_major(PROC_DEVICES, "nvidia-uvm-tools"), Some(509));
        assert_eq!(char_major(PROC_DEVICES, "nvidia-frontend"), Some(195));
        assert_eq!(char_major(PROC_DEVICES, "sd"), None, "a block device");
        assert_eq!(
            char_major("Character devices:\n  1 mem\n", "nvidia-uvm"),
            None
        );
        assert_eq!(uvm_major(Path::new("/nonexistent/devices")), None);
        // This machine's own table parses (it has no NVIDIA driver).
        if let Ok(text) = std::fs::read_to_string("/proc/devices") {
            assert_eq!(char_major(&text, "mem"), Some(1));
        }
        assert_eq!(gpu_node(3), "/dev/nvidia3");
    }
}
