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
            ClientError::Api { .. } | ClientError::Throttled { .. } => Fail::bad(report(&e)),
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

/// Prints a list that the node answers in pages, each item as it arrives: with `--json` one
/// `{"<key>":[...]}` document, the shape of a single page without `next_after`; otherwise a
/// line per item.
pub(crate) struct PagedList {
    json: bool,
    first: bool,
}

impl PagedList {
    /// Starts the list (with `--json`, its opening).
    pub(crate) fn start(key: &str, json: bool) -> PagedList {
        if json {
            print!("{{\"{key}\":[");
        }
        PagedList { json, first: true }
    }

    /// One item: as JSON, or as `line` prints it.
    pub(crate) fn item<T: serde::Serialize>(&mut self, item: &T, line: fn(&T)) -> CmdResult {
        if self.json {
            let text = serde_json::to_string(item).map_err(|e| Fail::usage(report(&e)))?;
            print!("{}\n{text}", if self.first { "" } else { "," });
        } else {
            line(item);
        }
        self.first = false;
        Ok(Exit::Ok)
    }

    /// Ends the list (with `--json`, its closing).
    pub(crate) fn finish(self) -> CmdResult {
        if self.json {
            println!("\n]}}");
        }
        Ok(Exit::Ok)
    }
}

/// Moves a pager's `after` on to the page's `next_after`: `false` after the last page. A node
/// whose next page would not advance is an error, not an endless loop.
pub(crate) fn next_page<T>(after: &mut Option<T>, next: Option<T>) -> Result<bool, Fail>
where
    T: PartialOrd + std::fmt::Display,
{
    match next {
        None => Ok(false),
        Some(n) if after.as_ref().is_none_or(|a| n > *a) => {
            *after = Some(n);
            Ok(true)
        }
        Some(n) => Err(Fail::usage(format!(
            "the node answered a page after {} with next_after {n}, which does not advance",
            after.as_ref().map(ToString::to_string).unwrap_or_default()
        ))),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A pager moves on only forwards: the last page ends it, a node answering the same or an
    /// earlier `next_after` is an error instead of a loop.
    #[test]
    fn next_page_moves_forwards_only() {
        let mut after = None;
        assert!(next_page(&mut after, Some(5u64)).unwrap());
        assert!(next_page(&mut after, Some(9)).unwrap());
        assert_eq!(after, Some(9));
        assert!(!next_page(&mut after, None).unwrap());
        let err = next_page(&mut after, Some(9)).unwrap_err();
        assert!(err.message.contains("does not advance"), "{}", err.message);
        let mut jobs = Some("job-2".to_owned());
        assert!(next_page(&mut jobs, Some("job-1".to_owned())).is_err());
        assert_eq!(jobs.as_deref(), Some("job-2"));
    }
}
