//! What recall reads, kept in memory per tenant: the shared search index (`store::index`)
//! and, beside it, each memory whole, so a search answers without reading a row.
//! The file stays the truth: a tenant's index is built from it on first use, this process
//! updates it on every write it makes, and every index is dropped whenever another process
//! has written to the file (SQLite's `data_version`).

use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rusqlite::{Connection, params};

use super::{COLUMNS, MEMORIES, from_blob, memory_from_row};
use crate::keywords;
use crate::memory::{Hit, KeywordHit, Memory, Visibility};
use crate::store::Candidates;
use crate::store::index::cache::{Cache, Weigh};
use crate::store::index::{Entry, SearchIndex, WordMatch};

pub(super) struct TenantIndex {
    search: SearchIndex,
    /// At the same positions as in `search`. A hit shares the memory; counting a use puts a
    /// copy with the new counters in its place, under the index's read lock: counting a
    /// recall's uses must not wait for every search in flight to finish.
    memories: Vec<Mutex<Arc<Memory>>>,
}

impl TenantIndex {
    fn load(conn: &Connection, tenant: &str, width: usize) -> rusqlite::Result<TenantIndex> {
        let mut index = TenantIndex {
            search: SearchIndex::new(width),
            memories: Vec::new(),
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, m.embedding, m.terms FROM {MEMORIES} WHERE m.tenant_id = ?1"
        ))?;
        let mut rows = stmt.query(params![tenant])?;
        while let Some(row) = rows.next()? {
            let memory = memory_from_row(row)?;
            // A row another process wrote without terms (an older release) still matches.
            let terms = match row.get::<_, Option<String>>(12)? {
                Some(terms) => terms
                    .split(' ')
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect(),
                None => keywords::terms(&memory.content),
            };
            index.push(memory, &from_blob(row.get_ref(11)?.as_blob()?), &terms);
        }
        index.memories.shrink_to_fit();
        Ok(index)
    }

    pub fn push(&mut self, memory: Memory, vector: &[f32], terms: &[String]) {
        let entry = Entry {
            id: &memory.id,
            scope: memory.scope,
            conversation: memory.conversation.as_ref().map(|c| c.as_str()),
        };
        if let Some(replaced) = self.search.position(entry.id) {
            self.memories.swap_remove(replaced);
        }
        self.search.push(entry, vector, terms);
        self.memories.push(Mutex::new(Arc::new(memory)));
    }

    pub fn remove(&mut self, id: &str) {
        if let Some(gone) = self.search.remove(id) {
            self.memories.swap_remove(gone);
        }
    }

    /// The update `record_access` made to the file, made here too.
    pub fn record_access(&self, visibility: &Visibility, ids: &[String], at: i64) {
        for id in ids {
            let Some(i) = self.search.position(id) else {
                continue;
            };
            let mut shared = lock(&self.memories[i]);
            if visibility.can_see(&shared) {
                let memory = Arc::make_mut(&mut shared);
                memory.access_count += 1;
                memory.last_accessed_at = Some(memory.last_accessed_at.map_or(at, |l| l.max(at)));
            }
        }
    }

    fn hit(&self, (position, similarity): (usize, f64)) -> Hit {
        Hit {
            memory: Arc::clone(&lock(&self.memories[position])),
            similarity,
        }
    }

    /// Up to `k` visible memories nearest to `query`, most similar first.
    pub fn nearest(&self, query: &[f32], visibility: &Visibility, k: usize) -> Vec<Hit> {
        self.search
            .nearest(query, visibility, k)
            .into_iter()
            .map(|found| self.hit(found))
            .collect()
    }

    /// Both of a recall's searches (`SearchIndex::candidates`).
    pub fn candidates(
        &self,
        query_terms: &[String],
        embedding: &[f32],
        visibility: &Visibility,
        k: usize,
    ) -> Candidates {
        let (nearest, by_words) = self
            .search
            .candidates(embedding, query_terms, visibility, k);
        Candidates {
            nearest: nearest.into_iter().map(|found| self.hit(found)).collect(),
            by_words: by_words.into_iter().map(|m| self.word_hit(m)).collect(),
        }
    }

    /// The `k` visible memories best matching `query_terms` by BM25, best first, with
    /// their exact cosine similarity to `embedding`.
    pub fn keyword_hits(
        &self,
        query_terms: &[String],
        embedding: &[f32],
        visibility: &Visibility,
        k: usize,
    ) -> Vec<KeywordHit> {
        (self
            .search
            .keyword_hits(query_terms, embedding, visibility, k))
        .into_iter()
        .map(|m| self.word_hit(m))
        .collect()
    }

    fn word_hit(&self, (position, similarity, score): WordMatch) -> KeywordHit {
        KeywordHit {
            hit: self.hit((position, similarity)),
            score,
        }
    }
}

impl Weigh for RwLock<TenantIndex> {
    fn bytes(&self) -> usize {
        let Ok(index) = self.read() else { return 0 };
        let memories: usize = index
            .memories
            .iter()
            .map(|m| {
                let m = lock(m);
                200 + m.id.len() + m.content.len() + m.tags.iter().map(String::len).sum::<usize>()
            })
            .sum();
        index.search.bytes() + memories
    }
}

/// A poisoned lock still holds a whole memory: a panic cannot leave one half-written.
fn lock(memory: &Mutex<Arc<Memory>>) -> MutexGuard<'_, Arc<Memory>> {
    memory.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every tenant's index this process holds.
pub(super) struct Indexes {
    width: usize,
    cache: Cache<RwLock<TenantIndex>>,
    /// The file's `data_version` when the indexes were last known to match it.
    data_version: Mutex<Option<i64>>,
}

impl Indexes {
    pub fn new(width: usize) -> Indexes {
        Indexes {
            width,
            cache: Cache::default(),
            data_version: Mutex::new(None),
        }
    }

    /// The tenant's index, built from the file if this process does not hold it or another
    /// process wrote since. `conn` is this store's connection, locked by the caller.
    pub fn get(
        &self,
        conn: &Connection,
        tenant: &str,
    ) -> rusqlite::Result<Arc<RwLock<TenantIndex>>> {
        let version: i64 = conn.query_row("PRAGMA data_version", [], |r| r.get(0))?;
        {
            let mut known = self.data_version.lock().unwrap_or_else(|e| e.into_inner());
            if *known != Some(version) {
                self.cache.clear();
                *known = Some(version);
            }
        }
        self.cache.get(tenant, || {
            TenantIndex::load(conn, tenant, self.width).map(RwLock::new)
        })
    }

    /// The tenant's index if this process holds it, for a write to update.
    pub fn held(&self, tenant: &str) -> Option<Arc<RwLock<TenantIndex>>> {
        self.cache.held(tenant)
    }
}
