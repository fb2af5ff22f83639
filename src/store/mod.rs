//! Where memories live: one small trait spoken in memory operations, with backends behind
//! Cargo features. Every backend applies the tenant to every operation and the request's
//! visibility wherever docs/behavior.md says so; callers re-check both (fail closed).
//! Decorators of the trait (`timed.rs`) live beside it and run through the shared suite
//! (`suite.rs`) like every backend.

use std::sync::Arc;

use async_trait::async_trait;

use crate::dedup;
use crate::embed::{Fit, Judged, Numbers};
use crate::memory::{Hit, KeywordHit, Memory, MemoryType, Model, NewMemory, Tenant, Visibility};
use crate::search::Query;

mod error;
#[cfg(test)]
pub mod in_memory;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod reembed;
#[cfg(feature = "s3")]
pub mod s3;
mod settings;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(test)]
pub mod suite;
pub mod sweep;
mod timed;
mod write;

pub use error::StoreError;
pub use settings::{Settings, Variables};
pub use timed::TimedStore;

/// The outcome of a write that first looks for a near-verbatim repeat.
#[derive(Debug, Clone, PartialEq)]
pub enum Remembered {
    /// Written; beside it, the visible memories that say nearly the same thing but differ
    /// in a value or a word (`dedup::Verdict::New`), most similar first.
    Stored(Memory, Vec<Memory>),
    /// Nothing was written; this existing memory already says it. What the write was to
    /// replace (`removed`) was deleted all the same (`write::remember`).
    AlreadyKnown {
        existing: Memory,
        removed: Option<String>,
    },
}

/// What a search found: by meaning, and by words (none when the query had none, or the
/// store has no text index), each best first.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Matches {
    pub nearest: Vec<Hit>,
    pub by_words: Vec<KeywordHit>,
    /// How rare each query term is among what the caller sees (BM25's idf), in the
    /// query's order; empty when the query had no terms or the store has no text index.
    pub idf: Vec<f64>,
}

/// How many memories a request can see, by type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// In canonical type order, types with no memories left out.
    pub by_type: Vec<(MemoryType, u64)>,
    pub total: u64,
    /// Set when counting stopped after this many entries, so every figure is a lower
    /// bound; exact stores never set it.
    pub scan_cap: Option<usize>,
}

/// Where a listing goes on: after this memory, in the store's listing order (newest first;
/// memories of one millisecond in an order of the store's own, always the same).
#[derive(Debug, Clone, PartialEq)]
pub struct After {
    pub created_at: i64,
    pub id: String,
}

impl After {
    pub fn memory(memory: &Memory) -> After {
        After {
            created_at: memory.created_at,
            id: memory.id.clone(),
        }
    }
}

/// A memory whole, as it moves between stores (`mcp-memory export` and `import`): its
/// tenant, everything stored of it, its uses as counted, and its vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Portable {
    pub tenant: Tenant,
    pub memory: Memory,
    pub embedding: Vec<f32>,
}

/// A page of an export, and where the next one starts (None after the last).
#[derive(Debug, Default)]
pub struct Exported {
    pub memories: Vec<Portable>,
    pub next: Option<String>,
}

/// A memory's key in a store ordered by (tenant, id), as export cursors and re-embedding
/// keys carry it: the two a newline apart (neither may hold one).
pub fn tenant_and_id(tenant: &str, id: &str) -> String {
    format!("{tenant}\n{id}")
}

/// The tenant and id of a `tenant_and_id` key.
pub fn split_tenant_and_id(key: &str) -> Option<(&str, &str)> {
    key.split_once('\n')
}

impl Exported {
    /// A page of a store that exports in (tenant, id) order, whose cursor is the last
    /// memory's `tenant_and_id`: there may be more when the page is full.
    pub fn by_tenant_and_id(memories: Vec<Portable>, limit: usize) -> Exported {
        let next = (memories.len() == limit)
            .then(|| memories.last())
            .flatten()
            .map(|p| tenant_and_id(p.tenant.as_str(), &p.memory.id));
        Exported { memories, next }
    }

    /// Where such a store's page starts: after the cursor's tenant and id, or after
    /// ('', ''), before every tenant (so a page is always a range of the key).
    pub fn after_tenant_and_id(from: Option<&str>) -> (&str, &str) {
        from.and_then(split_tenant_and_id).unwrap_or(("", ""))
    }
}

/// `Dimension` for the first of `memories` whose vector is not `width` wide.
pub fn check_widths(memories: &[Portable], width: usize) -> Result<(), StoreError> {
    match memories.iter().find(|p| p.embedding.len() != width) {
        Some(wrong) => Err(StoreError::Dimension {
            location: format!("the memory {}", wrong.memory.id),
            stored: wrong.embedding.len(),
            configured: width,
        }),
        None => Ok(()),
    }
}

/// What one pass of the expiry sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub deleted: usize,
    /// The pass stopped before it had looked at everything: at its limit of deletions, or
    /// (S3) at the end of its stretch of keys.
    pub more: bool,
}

impl Expired {
    /// A pass that asked for at most `limit` expired memories and found `found`.
    pub fn of(deleted: usize, found: usize, limit: usize) -> Expired {
        Expired {
            deleted,
            more: found >= limit,
        }
    }
}

/// Every operation takes the tenant, then what the caller may see, then its own arguments.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Writes `memory` for a caller who sees `visibility`, unless a memory visible to
    /// `visibility.for_dedup(memory.scope)` already says the same thing (`dedup::judge`
    /// by `rule`, the model's, over the nearest `dedup::NEIGHBOURS`). With
    /// `memory.replaces`, the memory it names must be one the caller sees
    /// (`StoreError::NotVisible` otherwise, nothing written); it is not a repeat of its own
    /// replacement, and it is removed as the new one is written. Check and write are atomic
    /// per tenant where the backend can make them so.
    async fn remember(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: dedup::Rule,
    ) -> Result<Remembered, StoreError>;

    /// Up to `query.k` visible memories nearest to `query.vector` by cosine similarity and,
    /// unless `query.terms` is empty, up to `query.k` holding any of them, by BM25 over the
    /// memories the caller can see. A store without a text index finds none by words, and
    /// recall stays vector-only there (S3).
    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError>;

    /// The newest `limit` visible memories, optionally of one type, newest first; with
    /// `after`, the next ones after that memory (which need not exist any more).
    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        after: Option<&After>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError>;

    /// The visible memory `id`, whole; None when there is none the caller may see (another
    /// tenant's or conversation's is none, as a missing one is).
    async fn get(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError>;

    /// Deletes one visible memory; false when there is none with that id.
    async fn delete(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<bool, StoreError>;

    async fn count_by_type(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
    ) -> Result<Counts, StoreError>;

    /// One access for each of `used` that `visibility` may see, at `at` (ms). The only
    /// update a stored memory ever gets. `used` are memories this store returned.
    async fn record_access(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        used: &[&Memory],
        at: i64,
    ) -> Result<(), StoreError>;

    /// Deletes up to `limit` memories of any tenant that expired by `at` (ms), and says
    /// how many and whether there may be more to look at: the sweep (`sweep.rs`). They were
    /// invisible from that instant already.
    async fn expire(&self, at: i64, limit: usize) -> Result<Expired, StoreError>;

    /// Up to `limit` memories whole, of the tenants `only` (every tenant when empty), none
    /// expired at `at`, in an order of the store's own; from `from`, a page's `next`, the ones
    /// after that page.
    async fn export(
        &self,
        only: &[Tenant],
        at: i64,
        from: Option<&str>,
        limit: usize,
    ) -> Result<Exported, StoreError>;

    /// Writes `memories` as they are (no duplicate check; their times, uses and links kept),
    /// except any whose tenant and id the store already holds, and says how many it wrote:
    /// importing the same memories twice stores each once. Their vectors must be of the
    /// store's model (the caller's to check); the first import records it as a write does.
    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError>;

    /// The fit `mcp-memory calibrate` recorded beside the store's model record, if any
    /// (docs/models.md, "Calibrating a model"); the reader checks that it is for its model
    /// (`Fit::is_for`).
    async fn calibration(&self) -> Result<Option<Fit>, StoreError>;

    /// Records `fit`, made for this process's model, in place of any earlier one.
    async fn record_calibration(&self, fit: &Fit) -> Result<(), StoreError>;

    /// Makes everything durable (counters buffered in this process, a WAL): at shutdown,
    /// and whenever an operator asks. The store stays usable.
    async fn flush(&self) -> Result<(), StoreError>;

    /// Lets go of connections and timers; nothing may be called afterwards.
    async fn close(&self) {}

    /// Where the memories are, for the startup line (never credentials).
    fn describe(&self) -> String;

    /// What this process's tenant indexes hold, for a store that keeps them.
    fn index_usage(&self) -> Option<crate::search::cache::Usage> {
        None
    }

    /// Whether `count_by_type` is always exact; a store that may stop counting early says
    /// so in `memory_stats`' description.
    fn exact_counts(&self) -> bool {
        true
    }

    /// Whether the vector width was fixed when the store's index was created, outside the
    /// server (S3 Vectors), rather than checked against what the store holds at open.
    fn width_fixed_by_index(&self) -> bool {
        false
    }
}

/// What a process on `store` embedding with `model` judges by: the fit the store recorded
/// for that model (`mcp-memory calibrate`), else `numbers` (docs/models.md, "The fit,
/// recorded").
pub async fn judged(
    store: &dyn MemoryStore,
    numbers: &Numbers,
    model: &Model,
) -> Result<Judged, StoreError> {
    let recorded = store.calibration().await?;
    Ok(numbers.judged(recorded.filter(|fit| fit.is_for(model)).as_ref()))
}

/// A fit as a store keeps it: JSON, read back by `read_fit`.
pub(crate) fn fit_text(fit: &Fit) -> String {
    serde_json::to_string(fit).expect("a fit is numbers and a name")
}

/// The fit kept in `location` as `text`; one this version cannot read is the operator's to
/// record again.
pub(crate) fn read_fit(location: &str, text: &str) -> Result<Fit, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::SetUp {
        location: location.to_owned(),
        problem: format!("records a model calibration this version cannot read ({e})"),
        fix: "run `mcp-memory calibrate` to record it again".into(),
    })
}

/// Opens the configured store for vectors of `model`, the embedder's: a store that recorded
/// another refuses to open (S3 refuses its first search or write instead, making no call
/// at boot), and one from before models were recorded must hold vectors of its width.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_variables)
)]
pub async fn open(settings: &Settings, model: &Model) -> Result<Arc<dyn MemoryStore>, StoreError> {
    match *settings {
        #[cfg(feature = "sqlite")]
        Settings::Sqlite {
            ref path,
            ref indexing,
        } => Ok(Arc::new(sqlite::SqliteStore::open(path, model, indexing)?)),
        #[cfg(feature = "postgres")]
        Settings::Postgres { ref url, ref pool } => Ok(Arc::new(
            postgres::PostgresStore::open(url, model, pool).await?,
        )),
        #[cfg(feature = "s3")]
        Settings::S3(ref settings) => Ok(Arc::new(s3::S3Store::open(settings, model).await)),
    }
}

impl Counts {
    /// Builds counts from `(memory_type, count)` rows of a SQL `GROUP BY`; an unknown type
    /// name counts as `project`, as a row with it would read.
    pub fn from_type_names(rows: impl IntoIterator<Item = (String, i64)>) -> Counts {
        Counts::from_tallies(rows.into_iter().map(|(t, n)| {
            (
                MemoryType::parse(&t).unwrap_or(MemoryType::Project),
                n.max(0) as u64,
            )
        }))
    }

    /// Builds counts from per-type tallies in any order.
    pub fn from_tallies(tallies: impl IntoIterator<Item = (MemoryType, u64)>) -> Counts {
        let mut by_type: Vec<(MemoryType, u64)> = Vec::new();
        for (t, n) in tallies {
            match by_type.iter_mut().find(|(seen, _)| *seen == t) {
                Some((_, total)) => *total += n,
                None => by_type.push((t, n)),
            }
        }
        by_type.retain(|(_, n)| *n > 0);
        by_type.sort_by_key(|(t, _)| *t);
        Counts {
            total: by_type.iter().map(|(_, n)| n).sum(),
            by_type,
            scan_cap: None,
        }
    }
}

/// A store's tenant indexes as `indexing` describes them (SQLite and PostgreSQL), or the
/// refusal of a directory the operator chose for their vectors that cannot hold a file.
pub fn tenant_indexes<T: crate::search::cache::Weigh + Send + Sync + 'static>(
    indexing: &crate::search::cache::Indexing,
) -> Result<crate::search::cache::TenantCache<T>, StoreError> {
    crate::search::cache::TenantCache::open(indexing).map_err(|e| {
        StoreError::unavailable("INDEX_VECTORS_DIR cannot hold the index's vector files", e)
    })
}

/// Keeps the `k` most similar hits.
pub fn keep_nearest(mut hits: Vec<Hit>, k: usize) -> Vec<Hit> {
    hits.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    hits.truncate(k);
    hits
}
