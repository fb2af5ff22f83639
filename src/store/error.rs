//! What can go wrong at the store's edge, typed by what the caller can do about it. The
//! tool layer turns each kind into the model's message in one place (`tools/mod.rs`). A
//! message names the backend and the step, never memory content or credentials; the cause
//! it quotes is also kept as the error's `source`.

use crate::memory::Model;

/// Why a dependency failed, as that dependency said it.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed or could not be reached: a connection, an I/O error, a refusal
    /// of the service. Nothing the caller asked for was wrong.
    #[error("{what} — {cause}")]
    Unavailable {
        what: String,
        #[source]
        cause: Cause,
    },
    /// The backend did not answer within its limit.
    #[error("{what} did not answer in time — {cause}")]
    TimedOut {
        what: String,
        #[source]
        cause: Cause,
    },
    /// The memory does not fit the store's limits: the caller's to fix, and nothing was
    /// written.
    #[error("{message}")]
    Refused {
        field: &'static str,
        limit: usize,
        message: String,
    },
    /// An argument names a memory the caller cannot see: another tenant's, another
    /// conversation's, unknown or already gone. The caller's to fix; nothing was written.
    #[error("`{field}` names no memory this caller can see: {id}. Nothing was written.")]
    NotVisible { field: &'static str, id: String },
    /// The store holds vectors of another width than this deployment embeds with.
    #[error(
        "{location} holds {stored}-dimensional embeddings but EMBEDDING_DIM is {configured}; \
         use the model they were stored with, or re-embed them or start from a fresh store \
         before changing models — nothing was altered"
    )]
    Dimension {
        location: String,
        stored: usize,
        configured: usize,
    },
    /// The store was made otherwise than this server needs (an S3 Vectors index with another
    /// metric, or without the keys it must not filter on): the operator's to fix, with `fix`.
    #[error("{location} {problem}; {fix} — nothing was written")]
    SetUp {
        location: String,
        problem: String,
        fix: String,
    },
    /// The store holds vectors another model made (as it recorded at its first write).
    #[error(
        "{location} holds embeddings of {stored}, but this server embeds with {configured}; \
         configure the model they were made with, or embed them again with `mcp-memory \
         reembed` under this configuration (or move them to a fresh store with `mcp-memory \
         export`, then `mcp-memory import --reembed`) — nothing was altered"
    )]
    OtherModel {
        location: String,
        stored: Model,
        configured: Model,
    },
}

impl StoreError {
    pub fn unavailable(what: impl Into<String>, cause: impl Into<Cause>) -> StoreError {
        StoreError::Unavailable {
            what: what.into(),
            cause: cause.into(),
        }
    }

    pub fn not_visible(field: &'static str, id: &str) -> StoreError {
        StoreError::NotVisible {
            field,
            id: id.to_owned(),
        }
    }

    /// `OtherModel` when `stored`, the model `location` recorded, is not `configured`; a
    /// store that recorded none holds no vectors of another model.
    pub fn unless_same_model(
        location: &str,
        stored: Option<Model>,
        configured: &Model,
    ) -> Result<(), StoreError> {
        match stored {
            Some(stored) if stored != *configured => Err(StoreError::OtherModel {
                location: location.to_owned(),
                stored,
                configured: configured.clone(),
            }),
            _ => Ok(()),
        }
    }

    pub fn timed_out(what: impl Into<String>, cause: impl Into<Cause>) -> StoreError {
        StoreError::TimedOut {
            what: what.into(),
            cause: cause.into(),
        }
    }
}

impl From<crate::search::cache::Interrupted> for StoreError {
    fn from(e: crate::search::cache::Interrupted) -> StoreError {
        StoreError::unavailable("the in-process search index", e)
    }
}
