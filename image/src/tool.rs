//! Running the Debian tools the build drives (`apt-get`, `dpkg-deb`, `mkfs.erofs`, …): one
//! place that turns a failure into an error naming the command and carrying its error output.

use attest::report::report;
use std::process::Command;

/// A tool could not be started, or exited unsuccessfully.
#[derive(Debug, thiserror::Error)]
#[error("{tool} failed: {detail}")]
pub struct ToolError {
    /// The command line.
    pub tool: String,
    /// Its exit status and error output, or why it did not start.
    pub detail: String,
}

/// Runs `cmd` to completion and returns its standard output.
pub fn run(cmd: &mut Command) -> Result<String, ToolError> {
    let tool = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| ToolError {
        tool: tool.clone(),
        detail: report(&e).to_string(),
    })?;
    if !out.status.success() {
        return Err(ToolError {
            tool,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
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
        assert!(err.tool.contains("\"sh\""), "{err}");
        assert!(
            err.detail.contains("oops") && err.detail.contains('3'),
            "{err}"
        );
        let err = run(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(err.tool.contains("/nonexistent/tool"), "{err}");
        assert_eq!(run(Command::new("echo").arg("hi")).unwrap(), "hi\n");
    }
}
