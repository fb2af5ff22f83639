//! A store's side of `mcp-memory reembed` (docs/stores.md#reembed): new vectors are
//! staged beside the memories, where no server reads them, a batch at a time and resumably,
//! then put in place at once. SQLite and PostgreSQL switch in one transaction that also
//! records the new model, so servers answer with the old vectors until it commits and then
//! refuse, naming the model, until they are configured with the new one; a write of an old
//! server cannot slip in between (`switch` waits for the writes under way and fails while any
//! memory lacks a new vector). S3 Vectors fixes an index's width, so there the new vectors go
//! to a new index, which shares the state bucket's recency index and counters.

use async_trait::async_trait;

use super::{Settings, StoreError};
use crate::memory::Model;

/// Where a run starts: what the store records, and how far an earlier run got.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The model the store records for its vectors; None: none (an empty or older store).
    pub recorded: Option<Model>,
    /// Memories held; None where counting them would mean reading them all (S3).
    pub total: Option<u64>,
    /// Of them, how many already have a vector of the new model from an earlier run.
    pub staged: u64,
}

/// A memory that still needs a vector of the new model: the store's key for it, and what to
/// embed.
#[derive(Debug, Clone, PartialEq)]
pub struct Unembedded {
    pub key: String,
    pub content: String,
}

/// A page of memories still to embed, and where the next page starts (None after the last).
#[derive(Debug, Default)]
pub struct Pending {
    pub memories: Vec<Unembedded>,
    pub next: Option<String>,
}

impl Pending {
    /// A page of a store that goes in (tenant, id) order, its keys `tenant_and_id`: there
    /// may be more when it is full.
    pub fn by_tenant_and_id(memories: Vec<Unembedded>, limit: usize) -> Pending {
        let next = (memories.len() == limit)
            .then(|| memories.last().map(|m| m.key.clone()))
            .flatten();
        Pending { memories, next }
    }
}

/// How a store that stages vectors names the model they are of: name and width, a
/// newline apart.
pub fn staged_for(model: &Model) -> String {
    format!("{}\n{}", model.name, model.dimension)
}

/// How a switch ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Switched {
    /// Every memory now has its vector of the new model, and the model is recorded.
    Done,
    /// Nothing changed: these many memories, written since they were read, have no new
    /// vector yet; embed them and switch again.
    Behind(u64),
}

#[async_trait]
pub trait Reembedding: Send + Sync {
    /// Starts a run towards `to`, or goes on with an earlier one for the same model (an
    /// earlier run for another model is thrown away).
    async fn begin(&self, to: &Model) -> Result<Plan, StoreError>;

    /// Up to `limit` memories without a staged vector, in the store's order, from `from`
    /// (a page's `next`) on. Memories written while a run goes on are found by a next pass.
    async fn pending(&self, from: Option<&str>, limit: usize) -> Result<Pending, StoreError>;

    /// Keeps these vectors, of memories `pending` named, until the switch. A memory
    /// forgotten meanwhile is skipped.
    async fn stage(&self, vectors: &[(String, Vec<f32>)]) -> Result<(), StoreError>;

    /// Puts every staged vector in place and records `to`, if no memory lacks one.
    async fn switch(&self, to: &Model) -> Result<Switched, StoreError>;

    /// Where the vectors go, for the summary line (never credentials).
    fn describe(&self) -> String;

    /// What the operator must change once it is done, if anything beyond the embedder's
    /// own variables (S3: the index).
    fn afterwards(&self) -> Option<String> {
        None
    }
}

/// The configured store, opened for a re-embedding whatever model it records; on S3 the
/// vectors go to the index `to_index`, which only S3 takes.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "s3")),
    allow(unused_variables)
)]
pub async fn open(
    settings: &Settings,
    to_index: Option<&str>,
) -> Result<Box<dyn Reembedding>, StoreError> {
    match *settings {
        #[cfg(feature = "sqlite")]
        Settings::Sqlite { ref path, .. } => match to_index {
            Some(_) => Err(in_place("SQLite")),
            None => Ok(Box::new(super::sqlite::reembed::Reembedder::open(path)?)),
        },
        #[cfg(feature = "postgres")]
        Settings::Postgres { ref url, ref pool } => match to_index {
            Some(_) => Err(in_place("PostgreSQL")),
            None => Ok(Box::new(
                super::postgres::reembed::Reembedder::open(url, pool).await?,
            )),
        },
        #[cfg(feature = "s3")]
        Settings::S3(ref settings) => match to_index {
            Some(index) => Ok(Box::new(
                super::s3::reembed::Reembedder::open(settings, index).await?,
            )),
            None => Err(StoreError::Refused {
                field: "--to-index",
                limit: 0,
                message: "an S3 Vectors index has a fixed width: name the index the new \
                          vectors go to with --to-index (it is created if missing)"
                    .into(),
            }),
        },
    }
}

/// The refusal of `--to-index` for a store re-embedded in place.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn in_place(store: &str) -> StoreError {
    StoreError::Refused {
        field: "--to-index",
        limit: 0,
        message: format!(
            "--to-index is for S3 Vectors, whose index width is fixed; {store} is re-embedded \
             in place"
        ),
    }
}
