//! What can go wrong in the node, as the API sorts it into answers.

use super::*;

/// Errors the API turns into status codes.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("placement denied by residency policy")]
    Denied {
        policy_digest: String,
        reasons: Vec<String>,
    },
    #[error("{0}")]
    Unavailable(String),
    /// Too much of a bounded kind of work is in flight; the client should retry shortly.
    #[error("{0}")]
    Busy(String),
    /// A failure of the node itself (store, ledger, serialisation): logged with its whole
    /// source chain under a request id, answered to clients as a bare 500.
    #[error("internal error")]
    Internal(#[source] InternalError),
}

/// What the node was doing when it failed, and the error that stopped it. Its text may hold
/// state paths and internals, which is why the API never sends it to a client.
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct InternalError {
    /// What the node was doing.
    pub context: String,
    /// Why it failed.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl NodeError {
    /// An internal failure without more context than its own message.
    pub fn internal(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> NodeError {
        NodeError::Internal(InternalError {
            context: "internal".into(),
            source: e.into(),
        })
    }
}

impl From<StoreError> for NodeError {
    fn from(e: StoreError) -> Self {
        internal("store", e)
    }
}
