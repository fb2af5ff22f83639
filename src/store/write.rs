//! What `remember` does, written once for every store (docs/architecture.md, "The remember
//! sequence"): check that what it replaces is visible, find the nearest visible neighbours,
//! decide whether one of them already says it (`dedup`), then insert or refuse, delete what
//! it replaces, and commit, which also brings a tenant's index held in this process up to
//! date. A store provides those steps (`Steps`) inside whatever keeps another writer of the
//! tenant out until it has committed: SQLite's write transaction, PostgreSQL's version row,
//! S3's one write task, a test store's lock. A change to the duplicate rule or to
//! `replaces` is made here, once (docs/ranking.md, "Duplicates").

use crate::dedup;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::memory::Conversation;
use crate::memory::{Hit, Memory, NewMemory, Visibility};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::search::{self, Entry, SearchIndex};

use super::{Remembered, StoreError};

/// A write's steps as one store takes them, all within one transaction or lock scope the
/// store opened before handing them over. Dropped without `commit`, nothing is written.
pub trait Steps {
    /// What the store holds of a visible memory to delete it later.
    type Found;

    /// The memory `id` if the writer sees it.
    async fn visible(&mut self, id: &str) -> Result<Option<Self::Found>, StoreError>;

    /// Up to `dedup::NEIGHBOURS` memories nearest to `vector` among those `seen` sees, in
    /// any order.
    async fn neighbours(
        &mut self,
        seen: &Visibility,
        vector: &[f32],
    ) -> Result<Vec<Hit>, StoreError>;

    async fn insert(&mut self, stored: &Stored, vector: &[f32]) -> Result<(), StoreError>;

    async fn delete(&mut self, found: Self::Found) -> Result<(), StoreError>;

    /// Makes what was written durable, then lets the tenant's index take `change`.
    async fn commit(self, change: Change<'_>, vector: &[f32]) -> Result<(), StoreError>;
}

/// Writes `memory` unless a neighbour already says it (`MemoryStore::remember`).
pub async fn remember<S: Steps>(
    mut steps: S,
    visibility: &Visibility,
    memory: NewMemory,
    vector: &[f32],
    rule: dedup::Rule,
) -> Result<Remembered, StoreError> {
    let replaced = match &memory.replaces {
        Some(id) => Some(
            (steps.visible(id).await?).ok_or_else(|| StoreError::not_visible("replaces", id))?,
        ),
        None => None,
    };
    let seen = visibility.for_dedup(memory.scope);
    let neighbours = steps.neighbours(&seen, vector).await?;
    match dedup::judge(&memory, &neighbours, rule) {
        // Nothing is written, but what it was to replace is deleted all the same: the
        // caller said that memory is wrong, and the neighbour says what it should
        // (docs/tools.md, "remember").
        dedup::Verdict::Repeat(existing) => {
            if let (Some(found), Some(id)) = (replaced, &memory.replaces) {
                steps.delete(found).await?;
                steps.commit(Change::Removed(id), vector).await?;
            }
            Ok(Remembered::AlreadyKnown {
                existing: Memory::clone(&existing.memory),
                removed: memory.replaces,
            })
        }
        dedup::Verdict::New { similar } => {
            let stored = Stored {
                #[cfg(any(feature = "sqlite", feature = "postgres"))]
                terms: search::terms(&memory.content),
                memory: memory.into_memory(),
            };
            // New, then old: until both land (S3 has no transaction), both are visible,
            // never neither.
            steps.insert(&stored, vector).await?;
            if let Some(found) = replaced {
                steps.delete(found).await?;
            }
            steps.commit(Change::Stored(&stored), vector).await?;
            Ok(Remembered::Stored(stored.memory, similar))
        }
    }
}

/// A memory to write.
pub struct Stored {
    pub memory: Memory,
    /// Its words as recall matches them (`search::terms`), for a store that indexes them.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub terms: Vec<String>,
}

/// What a committed write changed, for a store that holds an index in this process.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub enum Change<'a> {
    /// Only the memory it replaced went: a neighbour already says what it should.
    Removed(&'a str),
    /// The memory was written, and what it replaces (if anything) deleted.
    Stored(&'a Stored),
}

impl Change<'_> {
    /// How many rows the write inserted or deleted.
    #[cfg(feature = "postgres")]
    pub fn rows(&self) -> i64 {
        match self {
            Change::Removed(_) => 1,
            Change::Stored(stored) => 1 + i64::from(stored.memory.replaces.is_some()),
        }
    }

    /// The write as a tenant's index takes it: what it replaces out, the memory in.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub fn apply(&self, index: &mut impl Indexed, vector: &[f32]) {
        match self {
            Change::Removed(id) => index.remove(id),
            Change::Stored(stored) => {
                if let Some(id) = &stored.memory.replaces {
                    index.remove(id);
                }
                index.insert(&stored.memory, vector, &stored.terms);
            }
        }
    }
}

/// A tenant's index as a write changes it in place.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub trait Indexed {
    fn insert(&mut self, memory: &Memory, vector: &[f32], terms: &[String]);
    fn remove(&mut self, id: &str);
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Indexed for SearchIndex {
    fn insert(&mut self, memory: &Memory, vector: &[f32], terms: &[String]) {
        let entry = Entry {
            id: &memory.id,
            scope: memory.scope,
            conversation: memory.conversation.as_ref().map(Conversation::as_str),
            expires_at: memory.expires_at,
        };
        self.push(entry, vector, terms);
    }

    fn remove(&mut self, id: &str) {
        SearchIndex::remove(self, id);
    }
}
