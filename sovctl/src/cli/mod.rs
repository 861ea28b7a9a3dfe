//! sovctl's subcommands, one module per area, with one failure idiom.
//!
//! Every subcommand ends in an [`Exit`] code with the same meaning:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | done: allowed, valid, affirming |
//! | 1 | the thing checked is bad: denied, invalid, not affirming, or the node refused |
//! | 2 | usage, file, connection or I/O error: nothing was checked |
//!
//! `job run` (without `--detach`) is the one exception: it exits with the job's own status.
//!
//! A command returns `Result<Exit, Fail>`; [`finish`] prints a [`Fail`]'s message on standard
//! error as `sovctl: ...` and turns either into the process's exit code.

pub mod attest;
pub mod audit;
pub mod cp;
pub mod job;
pub mod node;
pub mod policy;
pub mod tpm_enroll;

use crate::client::{Client, ClientError};
use ::attest::report::report;
use hostd_api::profile::Profile;
use std::path::Path;
use std::process::ExitCode;

/// How a subcommand ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; allowed, valid, affirming.
    Ok,
    /// The thing checked is bad, or the node refused.
    Bad,
    /// Usage, file, connection or I/O error.
    Usage,
    /// `job run`: the job's own exit status.
    Job(u8),
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Bad => 1,
            Exit::Usage => 2,
            Exit::Job(c) => c,
        }
    }
}

/// A failure with the exit code it deserves and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// [`Exit::Bad`] or [`Exit::Usage`].
    pub exit: Exit,
    /// One sentence (or a few lines) saying what went wrong.
    pub message: String,
}

impl Fail {
    /// Usage, file, connection or I/O error (exit 2).
    pub fn usage(e: impl std::fmt::Display) -> Fail {
        Fail {
            exit: Exit::Usage,
            message: e.to_string(),
        }
    }

    /// The thing checked is bad, or the node refused (exit 1).
    pub fn bad(e: impl std::fmt::Display) -> Fail {
        Fail {
            exit: Exit::Bad,
            message: e.to_string(),
        }
    }
}

impl From<ClientError> for Fail {
    /// A refusal by the node is exit 1; failing to reach it or to understand it is exit 2.
    fn from(e: ClientError) -> Fail {
        match e {
            ClientError::Api { .. } => Fail::bad(report(&e)),
            other => Fail::usage(report(&other)),
        }
    }
}

/// What a subcommand returns.
pub type CmdResult = Result<Exit, Fail>;

/// Prints a failure and turns the result into the process's exit code.
pub fn finish(r: CmdResult) -> ExitCode {
    match r {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(f) => {
            eprintln!("sovctl: {}", f.message);
            ExitCode::from(f.exit.code())
        }
    }
}

/// A client for the node of `--profile`.
pub fn connect(profile: Option<&Path>) -> Result<Client, Fail> {
    let dir = profile.ok_or_else(|| {
        Fail::usage(
            "no profile: pass --profile DIR (e.g. dev-state/operator) or set SOVCTL_PROFILE",
        )
    })?;
    let p = Profile::load(dir).map_err(|e| Fail::usage(report(&e)))?;
    Client::new(&p).map_err(|e| Fail::usage(report(&e)))
}

/// Runs an online command on a single-threaded runtime.
pub fn block_on<F: std::future::Future<Output = CmdResult>>(f: F) -> CmdResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::usage(format!("cannot start runtime: {e}", e = report(&e))))?;
    rt.block_on(f)
}

/// Pretty JSON for `--json`.
pub fn print_json(v: &impl serde::Serialize) -> Result<(), Fail> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Fail::usage(report(&e)))?;
    println!("{text}");
    Ok(())
}

/// A value given inline or as the path of a file holding it (keys, a TPM's answer), read
/// into memory that is wiped when dropped.
pub(crate) fn inline_or_file(arg: &str) -> std::io::Result<zeroize::Zeroizing<String>> {
    if Path::new(arg).is_file() {
        std::fs::read_to_string(arg).map(zeroize::Zeroizing::new)
    } else {
        Ok(zeroize::Zeroizing::new(arg.to_string()))
    }
}
