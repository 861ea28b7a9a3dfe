//! Running the Debian tools the build drives (`apt-get`, `dpkg-deb`, `mkfs.erofs`, …): one
//! place that turns a failure into an error naming the command and carrying its error output,
//! or, for a tool that is not installed, the Debian package that has it.

use std::process::{Command, ExitStatus};

/// The Debian package of each tool the build runs (bookworm's names).
pub const PACKAGES: &[(&str, &str)] = &[
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    ("dpkg-deb", "dpkg"),
    ("cp", "coreutils"),
    ("depmod", "kmod"),
    ("ldconfig", "libc-bin"),
    ("objcopy", "binutils"),
    ("systemctl", "systemd"),
    ("systemd-sysusers", "systemd"),
    ("mkfs.erofs", "erofs-utils"),
    ("veritysetup", "cryptsetup-bin"),
    ("mkfs.fat", "dosfstools"),
    ("mcopy", "mtools"),
    ("mmd", "mtools"),
    ("zstd", "zstd"),
    ("mkfs.ext4", "e2fsprogs"),
];

/// A tool could not be started, or exited unsuccessfully.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Not installed, or not runnable.
    #[error("could not run {tool}{}", install_hint(.package))]
    NotStarted {
        /// The command line.
        tool: String,
        /// The Debian package that has the program, where the build knows it.
        package: Option<&'static str>,
        #[source]
        source: std::io::Error,
    },
    /// It ran and failed.
    #[error("{tool} failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        tool: String,
        status: ExitStatus,
        /// Its error output.
        stderr: String,
    },
}

fn install_hint(package: &Option<&'static str>) -> String {
    match package {
        Some(p) => format!(" (install the Debian package {p})"),
        None => String::new(),
    }
}

/// Runs `cmd` to completion and returns its standard output.
pub fn run(cmd: &mut Command) -> Result<String, ToolError> {
    let tool = format!("{cmd:?}");
    let out = cmd.output().map_err(|source| {
        let program = cmd.get_program().to_string_lossy();
        let package = PACKAGES
            .iter()
            .find(|(name, _)| *name == program)
            .map(|(_, package)| *package);
        ToolError::NotStarted {
            tool: tool.clone(),
            package: package.filter(|_| source.kind() == std::io::ErrorKind::NotFound),
            source,
        }
    })?;
    if !out.status.success() {
        return Err(ToolError::Failed {
            tool,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_the_command_and_carry_its_error_output() {
        let err = run(Command::new("sh").args(["-c", "echo oops >&2; exit 3"])).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ToolError::Failed { .. }), "{err:?}");
        assert!(text.contains("\"sh\""), "{text}");
        assert!(text.contains("oops") && text.contains('3'), "{text}");
        let err = run(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/tool"), "{err}");
        assert!(matches!(err, ToolError::NotStarted { package: None, .. }));
        assert_eq!(run(Command::new("echo").arg("hi")).unwrap(), "hi\n");
    }

    /// A tool the build knows that is not installed is answered with its package.
    #[test]
    fn a_missing_tool_is_answered_with_its_package() {
        let err = run(Command::new("mkfs.erofs").env("PATH", "/nonexistent")).unwrap_err();
        assert!(
            err.to_string()
                .contains("install the Debian package erofs-utils"),
            "{err}"
        );
    }
}
