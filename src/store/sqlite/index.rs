//! What recall reads, kept in memory per tenant: the search index (`crate::search`) and,
//! beside it, each memory whole, so a search answers without reading a row. The file stays
//! the truth: the tenant cache (`search::cache`) builds a tenant's index from it on first
//! use, this process updates it on every write it makes, and an index is built again once
//! another process has written to the file. The version is SQLite's `data_version`, which
//! moves whenever another connection commits: one version for every tenant of the file,
//! read under the connection's lock (`TenantCache::current`).

use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, params};

use super::{COLUMNS, MEMORIES, from_blob, memory_from_row};
use crate::memory::{Hit, KeywordHit, Memory, Visibility};
use crate::search::cache::{Version, Weigh};
use crate::search::{self, Entry, Found, Query, SearchIndex};
use crate::store::Matches;

pub(super) struct TenantIndex {
    search: SearchIndex,
    /// At the same positions as in `search`. A hit shares the memory; counting a use puts a
    /// copy with the new counters in its place, under the index's read lock: counting a
    /// recall's uses must not wait for every search in flight to finish.
    memories: Vec<Mutex<Arc<Memory>>>,
    /// What the memories beside the index take, kept as they come and go.
    memory_bytes: usize,
}

impl TenantIndex {
    pub fn load(conn: &Connection, tenant: &str, width: usize) -> rusqlite::Result<TenantIndex> {
        let mut index = TenantIndex {
            search: SearchIndex::new(width),
            memories: Vec::new(),
            memory_bytes: 0,
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
                None => search::terms(&memory.content),
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
            self.take_out(replaced);
        }
        self.search.push(entry, vector, terms);
        self.memory_bytes += weight(&memory);
        self.memories.push(Mutex::new(Arc::new(memory)));
    }

    pub fn remove(&mut self, id: &str) {
        if let Some(gone) = self.search.remove(id) {
            self.take_out(gone);
        }
    }

    /// Takes the memory at `position` out as the search index did (`Vec::swap_remove`).
    fn take_out(&mut self, position: search::Position) {
        let gone = self.memories.swap_remove(position.index());
        self.memory_bytes -= weight(&lock(&gone));
    }

    /// The update `record_access` made to the file, made here too.
    pub fn record_access(&self, visibility: &Visibility, ids: &[String], at: i64) {
        for id in ids {
            let Some(position) = self.search.position(id) else {
                continue;
            };
            let mut shared = lock(&self.memories[position.index()]);
            if visibility.can_see(&shared) {
                let memory = Arc::make_mut(&mut shared);
                memory.access_count += 1;
                memory.last_accessed_at = Some(memory.last_accessed_at.map_or(at, |l| l.max(at)));
            }
        }
    }

    fn hit(&self, position: search::Position, similarity: f64) -> Hit {
        Hit {
            memory: Arc::clone(&lock(&self.memories[position.index()])),
            similarity,
        }
    }

    /// Up to `k` visible memories nearest to `vector`, most similar first.
    pub fn nearest(&self, vector: &[f32], visibility: &Visibility, k: usize) -> Vec<Hit> {
        (self.search.nearest(vector, visibility, k).into_iter())
            .map(|n| self.hit(n.position, n.similarity))
            .collect()
    }

    /// Both of a recall's searches (`SearchIndex::search`), as memories.
    pub fn search(&self, query: &Query<'_>, visibility: &Visibility) -> Matches {
        let Found { nearest, by_words } = self.search.search(query, visibility);
        Matches {
            nearest: (nearest.into_iter())
                .map(|n| self.hit(n.position, n.similarity))
                .collect(),
            by_words: (by_words.into_iter())
                .map(|m| KeywordHit {
                    hit: self.hit(m.position, m.similarity),
                    score: m.score,
                })
                .collect(),
        }
    }
}

impl Weigh for TenantIndex {
    fn bytes(&self) -> usize {
        self.search.bytes() + self.memory_bytes
    }

    fn is_empty(&self) -> bool {
        self.search.is_empty()
    }
}

/// What a memory held beside the index takes; counting a use changes none of it.
fn weight(memory: &Memory) -> usize {
    let tags: usize = memory.tags.iter().map(String::len).sum();
    200 + memory.id.len()
        + memory.content.len()
        + memory.category.as_ref().map_or(0, String::len)
        + tags
}

/// A poisoned lock still holds a whole memory: a panic cannot leave one half-written.
fn lock(memory: &Mutex<Arc<Memory>>) -> MutexGuard<'_, Arc<Memory>> {
    memory.lock().unwrap_or_else(|e| e.into_inner())
}

/// The file's `data_version` on this store's connection.
pub(super) fn data_version(conn: &Connection) -> rusqlite::Result<Version> {
    conn.query_row("PRAGMA data_version", [], |r| r.get(0))
}
