//! Showing an error to a person: its message, then each of its causes.
//!
//! Every error type of this workspace follows one rule, the Rust API guidelines' advice for
//! error types: an error caused by another returns that cause from
//! [`source`](std::error::Error::source) and does not repeat it in its own message. The cause
//! then stays a typed value that callers can inspect, and a chain printed link by link
//! (anyhow's `{:#}`, a tracing layer) shows each cause once. The price is that one message
//! alone is incomplete: whoever shows an error to an operator, an auditor or a log shows
//! [`Report`], which every crate that shows errors can reach because they all link this one.

use std::error::Error;
use std::fmt;

/// An error and its causes, outermost first, joined by `": "`
/// (`cannot open state database /var/lib/hostd/state: Permission denied (os error 13)`).
#[derive(Clone, Copy)]
pub struct Report<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// [`Report`] of `e`: `tracing::warn!(error = %report(&e), …)`, `format!("{}", report(&e))`.
pub fn report<'a>(e: &'a (dyn Error + 'static)) -> Report<'a> {
    Report(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open {path}")]
    struct Open {
        path: String,
        #[source]
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("starting the node")]
    struct Start(#[source] Open);

    #[test]
    fn each_cause_is_shown_once_outermost_first() {
        let e = Start(Open {
            path: "/state".into(),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        });
        assert_eq!(
            report(&e).to_string(),
            "starting the node: cannot open /state: denied"
        );
    }

    #[test]
    fn an_error_without_cause_is_its_message() {
        let e = std::io::Error::other("disk full");
        assert_eq!(report(&e).to_string(), "disk full");
    }
}
