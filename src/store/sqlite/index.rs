//! What recall reads, kept in memory per tenant: the search index (`crate::search`) and,
//! beside it, each memory whole, so a search answers without reading a row. The file stays
//! the truth: the tenant cache (`search::cache`) builds a tenant's index from it on first
//! use, this process updates it on every write it makes, and another process's write is
//! caught by the tenant's two versions in `memory_versions`, kept by triggers (`schema.rs`) and
//! read under the connection's lock: a change to the memories (`memories`, the cache's
//! label) builds the index again (`builds.rs`); a change to counted uses alone (`uses`:
//! another process's recall) only reads the tenant's counts again (`set_uses`), so one
//! process's recalls no longer make every other process rebuild every tenant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{COLUMNS, MEMORIES, WIDTH, from_blob, memory_from_row};
use super::uses;
use crate::memory::{Hit, KeywordHit, MAX_USES, Memory, Visibility};
use crate::search::cache::{Version, Weigh};
use crate::search::{self, Entry, Found, Query, SearchIndex, VectorFiles};
use crate::store::Matches;
use crate::store::write::Indexed;

pub(super) struct TenantIndex {
    search: SearchIndex,
    /// At the same positions as in `search`. A hit shares the memory; counting a use puts a
    /// copy with the new counters in its place, under the index's read lock: counting a
    /// recall's uses must not wait for every search in flight to finish.
    memories: Vec<Mutex<Arc<Memory>>>,
    /// What the memories beside the index take, kept as they come and go.
    memory_bytes: usize,
    /// Each memory's uses as counted in its own row (older releases count there), by
    /// position: what `memory_uses` adds to.
    own_counts: Vec<Counts>,
    /// The tenant's `uses` version the counts show.
    uses: AtomicI64,
}

/// A memory's uses: how many, and the last.
pub(super) type Counts = (u64, Option<i64>);

/// A tenant's two versions (`schema.rs`, `memory_versions`); both 0 before its first write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Versions {
    pub memories: Version,
    pub uses: Version,
}

impl Versions {
    pub fn read(conn: &Connection, tenant: &str) -> rusqlite::Result<Versions> {
        let read = conn
            .prepare_cached("SELECT memories, uses FROM memory_versions WHERE tenant_id = ?1")?
            .query_row(params![tenant], |r| {
                Ok(Versions {
                    memories: r.get(0)?,
                    uses: r.get(1)?,
                })
            })
            .optional()?;
        Ok(read.unwrap_or(Versions {
            memories: 0,
            uses: 0,
        }))
    }
}

impl TenantIndex {
    /// The tenant's index as the file holds it; `uses` is the version read before the rows,
    /// `files` where its exact vectors go once it is large.
    pub fn load(
        conn: &Connection,
        tenant: &str,
        width: usize,
        uses: Version,
        files: &VectorFiles,
    ) -> rusqlite::Result<TenantIndex> {
        let mut index = TenantIndex {
            search: SearchIndex::new(width, files),
            memories: Vec::new(),
            memory_bytes: 0,
            own_counts: Vec::new(),
            uses: AtomicI64::new(uses),
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, m.embedding, m.terms, m.access_count, m.last_accessed_at \
             FROM {MEMORIES} WHERE m.tenant_id = ?1"
        ))?;
        let mut rows = stmt.query(params![tenant])?;
        while let Some(row) = rows.next()? {
            let memory = memory_from_row(row)?;
            // A row another process wrote without terms (an older release) still matches.
            let terms = match row.get::<_, Option<String>>(WIDTH + 1)? {
                Some(terms) => terms
                    .split(' ')
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect(),
                None => search::terms(&memory.content),
            };
            let uses = (row.get::<_, i64>(WIDTH + 2)?.max(0) as u64).min(MAX_USES);
            let own = (uses, row.get(WIDTH + 3)?);
            index.add(
                memory,
                own,
                &from_blob(row.get_ref(WIDTH)?.as_blob()?),
                &terms,
            );
        }
        index.memories.shrink_to_fit();
        Ok(index)
    }

    fn add(&mut self, memory: Memory, own: Counts, vector: &[f32], terms: &[String]) {
        let entry = Entry {
            id: &memory.id,
            scope: memory.scope,
            conversation: memory.conversation.as_ref().map(|c| c.as_str()),
            expires_at: memory.expires_at,
        };
        if let Some(replaced) = self.search.position(entry.id) {
            self.take_out(replaced);
        }
        self.search.push(entry, vector, terms);
        self.memory_bytes += weight(&memory);
        self.memories.push(Mutex::new(Arc::new(memory)));
        self.own_counts.push(own);
    }

    /// The tenant's `uses` version its counts show.
    pub fn uses(&self) -> Version {
        self.uses.load(Ordering::Relaxed)
    }

    /// Notes that this process's write moved the tenant's uses from `from` to `to`, when
    /// the counts showed `from` (they are read again at the next search otherwise).
    pub fn moved_uses(&self, from: Version, to: Version) {
        let _ = (self.uses).compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Sets every count of the tenant as the file holds it at `version` (`counted_uses`):
    /// what another process's recalls changed. The counts this process has yet to write
    /// (`waiting`, locked by the caller so a use counted meanwhile is not overwritten) are
    /// added back (`uses.rs`).
    pub fn set_uses(
        &self,
        counted: &HashMap<String, Counts>,
        waiting: Option<&HashMap<String, Counts>>,
        version: Version,
    ) {
        for (position, own) in self.own_counts.iter().enumerate() {
            let mut shared = lock(&self.memories[position]);
            // `COLUMNS` adds them up the same way (None is below every time).
            let mut counts = *own;
            let more = [
                counted.get(&shared.id),
                waiting.and_then(|w| w.get(&shared.id)),
            ];
            for (uses, last) in more.into_iter().flatten() {
                uses::add(&mut counts, *uses, *last);
            }
            if (shared.access_count, shared.last_accessed_at) != counts {
                let memory = Arc::make_mut(&mut shared);
                (memory.access_count, memory.last_accessed_at) = counts;
            }
        }
        self.uses.store(version, Ordering::Relaxed);
    }

    /// Adds the counts this process has yet to write to an index just read from the file.
    pub fn count_waiting(&self, waiting: Option<&HashMap<String, Counts>>) {
        for (id, (uses, last)) in waiting.into_iter().flatten() {
            if let Some(position) = self.search.position(id) {
                let mut shared = lock(&self.memories[position.index()]);
                add_uses(Arc::make_mut(&mut shared), *uses, *last);
            }
        }
    }

    /// Takes the memory at `position` out as the search index did (`Vec::swap_remove`).
    fn take_out(&mut self, position: search::Position) {
        let gone = self.memories.swap_remove(position.index());
        self.own_counts.swap_remove(position.index());
        self.memory_bytes -= weight(&lock(&gone));
    }

    /// One use at `at` of each of `ids` that `visibility` may see; which those are.
    pub fn count_uses<'i>(
        &self,
        visibility: &Visibility,
        ids: &'i [String],
        at: i64,
    ) -> Vec<&'i String> {
        let counted = |id: &&String| {
            let Some(position) = self.search.position(id) else {
                return false;
            };
            let mut shared = lock(&self.memories[position.index()]);
            let seen = visibility.can_see(&shared);
            if seen {
                add_uses(Arc::make_mut(&mut shared), 1, Some(at));
            }
            seen
        };
        ids.iter().filter(counted).collect()
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
        let Found {
            nearest,
            by_words,
            idf,
        } = self.search.search(query, visibility);
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
            idf,
        }
    }
}

/// Every use of the tenant's memories counted in `memory_uses`, by id: only these small
/// rows are read when another process's recalls moved the counts.
pub(super) fn counted_uses(
    conn: &Connection,
    tenant: &str,
) -> rusqlite::Result<HashMap<String, Counts>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, access_count, last_accessed_at FROM memory_uses WHERE tenant_id = ?1",
    )?;
    stmt.query_map(params![tenant], |r| {
        Ok((
            r.get(0)?,
            ((r.get::<_, i64>(1)?.max(0) as u64).min(MAX_USES), r.get(2)?),
        ))
    })?
    .collect()
}

/// A write of this process: the memory it wrote has no uses yet.
impl Indexed for TenantIndex {
    fn insert(&mut self, memory: &Memory, vector: &[f32], terms: &[String]) {
        self.add(memory.clone(), (0, None), vector, terms);
    }

    fn remove(&mut self, id: &str) {
        if let Some(gone) = self.search.remove(id) {
            self.take_out(gone);
        }
    }
}

impl Weigh for TenantIndex {
    fn bytes(&self) -> usize {
        self.search.bytes() + self.memory_bytes
    }

    fn searched_bytes(&self) -> usize {
        self.search.searched_bytes() + self.memory_bytes
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

fn add_uses(memory: &mut Memory, uses: u64, last: Option<i64>) {
    let mut counts = (memory.access_count, memory.last_accessed_at);
    uses::add(&mut counts, uses, last);
    (memory.access_count, memory.last_accessed_at) = counts;
}

/// A poisoned lock still holds a whole memory: a panic cannot leave one half-written.
fn lock(memory: &Mutex<Arc<Memory>>) -> MutexGuard<'_, Arc<Memory>> {
    memory.lock().unwrap_or_else(|e| e.into_inner())
}
