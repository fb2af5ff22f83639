//! What recall reads, kept in memory per tenant: each memory, its vector (end to end, for
//! the scan kernel) and its terms (as numbers, so matching is integer compares). A search
//! answers from here without reading a row.
//! The file stays the truth: a tenant's index is built from it on first use, this process
//! updates it on every write it makes, and it is dropped whenever another process has
//! written to the file (SQLite's `data_version`). Indexes beyond `BUDGET_BYTES` are evicted
//! least recently used first, and simply rebuilt when needed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, params};

use super::super::{best_in_corpus, cosine, scan};
use super::{COLUMNS, from_blob, memory_from_row};
use crate::keywords::{self, Corpus};
use crate::memory::{Hit, KeywordHit, Memory, Visibility};

/// The memory the indexes may hold together: about 250,000 memories at width 384. A tenant
/// larger than this is still indexed, alone.
const BUDGET_BYTES: usize = 512 << 20;

pub(super) struct TenantIndex {
    width: usize,
    memories: Vec<Memory>,
    vectors: Vec<f32>,
    norms: Vec<f32>,
    terms: Vec<Box<[u32]>>,
    words: HashMap<String, u32>,
}

impl TenantIndex {
    fn load(conn: &Connection, tenant: &str, width: usize) -> rusqlite::Result<TenantIndex> {
        let mut index = TenantIndex {
            width,
            memories: Vec::new(),
            vectors: Vec::new(),
            norms: Vec::new(),
            terms: Vec::new(),
            words: HashMap::new(),
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, embedding, terms FROM memories WHERE tenant_id = ?1"
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
        // Growth by doubling may have reserved up to twice what a large tenant needs.
        index.vectors.shrink_to_fit();
        index.memories.shrink_to_fit();
        Ok(index)
    }

    pub fn push(&mut self, memory: Memory, vector: &[f32], terms: &[String]) {
        // A stored vector of another width cannot be compared: it takes its slot, padded or
        // cut, with norm 0, which scores 0 as `cosine` does.
        self.norms.push(if vector.len() == self.width {
            scan::norm(vector)
        } else {
            0.0
        });
        let start = self.vectors.len();
        self.vectors.extend(vector.iter().take(self.width));
        self.vectors.resize(start + self.width, 0.0);
        self.memories.push(memory);
        let terms = terms
            .iter()
            .map(|t| {
                let next = u32::try_from(self.words.len()).unwrap_or(u32::MAX);
                *self.words.entry(t.clone()).or_insert(next)
            })
            .collect();
        self.terms.push(terms);
    }

    pub fn remove(&mut self, id: &str) {
        if let Some(i) = self.memories.iter().position(|m| m.id == id) {
            self.memories.swap_remove(i);
            self.norms.swap_remove(i);
            self.terms.swap_remove(i);
            let last = self.memories.len() * self.width;
            if i * self.width != last {
                self.vectors
                    .copy_within(last..last + self.width, i * self.width);
            }
            self.vectors.truncate(last);
        }
    }

    /// The update `record_access` made to the file, made here too.
    pub fn record_access(&mut self, visibility: &Visibility, ids: &[String], at: i64) {
        for memory in &mut self.memories {
            if ids.contains(&memory.id) && visibility.can_see(memory) {
                memory.access_count += 1;
                memory.last_accessed_at = Some(memory.last_accessed_at.map_or(at, |l| l.max(at)));
            }
        }
    }

    fn vector(&self, i: usize) -> &[f32] {
        &self.vectors[i * self.width..(i + 1) * self.width]
    }

    fn hit(&self, i: usize, query: &[f32]) -> Hit {
        // Norm 0: a zero vector or one of another width, both 0 to `cosine` too.
        let similarity = if self.norms[i] > 0.0 {
            cosine(query, self.vector(i))
        } else {
            0.0
        };
        Hit {
            memory: self.memories[i].clone(),
            similarity,
        }
    }

    /// Up to `k` visible memories nearest to `query`, with their exact cosine similarity.
    pub fn nearest(&self, query: &[f32], visibility: &Visibility, k: usize) -> Vec<Hit> {
        if query.len() != self.width {
            return Vec::new();
        }
        let query_norm = scan::norm(query);
        let mut scores = Vec::new();
        scan::dot_all(&self.vectors, query, &mut scores);
        let mut ranked: Vec<(usize, f32)> = scores
            .iter()
            .enumerate()
            .filter(|(i, _)| visibility.can_see(&self.memories[*i]))
            .map(|(i, dot)| {
                let norms = query_norm * self.norms[i];
                (i, if norms > 0.0 { dot / norms } else { 0.0 })
            })
            .collect();
        if ranked.len() > k && k > 0 {
            ranked.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
        }
        ranked.truncate(k);
        ranked
            .into_iter()
            .map(|(i, _)| self.hit(i, query))
            .collect()
    }

    /// The `k` visible memories best matching `query_terms` by BM25 over the memories the
    /// caller can see, best first, with their exact cosine similarity to `embedding`.
    pub fn keyword_hits(
        &self,
        query_terms: &[String],
        embedding: &[f32],
        visibility: &Visibility,
        k: usize,
    ) -> Vec<KeywordHit> {
        let query: Vec<u32> = query_terms
            .iter()
            .map(|t| self.words.get(t).copied().unwrap_or(u32::MAX))
            .collect();
        if query.iter().all(|q| *q == u32::MAX) {
            return Vec::new();
        }
        // The corpus is counted in the same pass that finds the matches.
        let mut corpus = Corpus {
            containing: vec![0; query.len()],
            ..Corpus::default()
        };
        let mut all_terms = 0usize;
        // Ties break on the id, as in every store; the position rides along.
        let mut matches: Vec<((&str, usize), &[u32])> = Vec::new();
        for (i, terms) in self.terms.iter().enumerate() {
            if !visibility.can_see(&self.memories[i]) {
                continue;
            }
            corpus.memories += 1;
            all_terms += terms.len();
            let mut matched = false;
            for (q, containing) in query.iter().zip(corpus.containing.iter_mut()) {
                if terms.contains(q) {
                    *containing += 1;
                    matched = true;
                }
            }
            if matched {
                matches.push(((self.memories[i].id.as_str(), i), terms));
            }
        }
        corpus.average_terms = all_terms as f64 / corpus.memories.max(1) as f64;
        best_in_corpus(&query, &matches, &corpus, k)
            .into_iter()
            .map(|((_, i), score)| KeywordHit {
                hit: self.hit(i, embedding),
                score,
            })
            .collect()
    }

    fn bytes(&self) -> usize {
        let text: usize = self
            .memories
            .iter()
            .map(|m| {
                160 + m.id.len() + m.content.len() + m.tags.iter().map(String::len).sum::<usize>()
            })
            .sum();
        let words: usize = self.words.keys().map(|w| 48 + w.len()).sum();
        self.vectors.len() * 4
            + text
            + words
            + self.terms.iter().map(|t| 16 + t.len() * 4).sum::<usize>()
    }
}

/// Every tenant's index this process holds.
pub(super) struct Indexes {
    width: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The file's `data_version` when the indexes were last known to match it.
    data_version: Option<i64>,
    tenants: HashMap<String, (Arc<RwLock<TenantIndex>>, u64)>,
    uses: u64,
}

impl Indexes {
    pub fn new(width: usize) -> Indexes {
        Indexes {
            width,
            state: Mutex::new(State::default()),
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
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.data_version != Some(version) {
            state.tenants.clear();
            state.data_version = Some(version);
        }
        state.uses += 1;
        let now = state.uses;
        if let Some((index, used)) = state.tenants.get_mut(tenant) {
            *used = now;
            return Ok(Arc::clone(index));
        }
        let index = Arc::new(RwLock::new(TenantIndex::load(conn, tenant, self.width)?));
        state
            .tenants
            .insert(tenant.to_owned(), (Arc::clone(&index), now));
        evict(&mut state, tenant);
        Ok(index)
    }

    /// The tenant's index if this process holds it, for a write to update.
    pub fn held(&self, tenant: &str) -> Option<Arc<RwLock<TenantIndex>>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .tenants
            .get(tenant)
            .map(|(index, _)| Arc::clone(index))
    }
}

/// Drops the least recently used indexes, never `keep`, until the rest fit the budget.
fn evict(state: &mut State, keep: &str) {
    let size = |index: &Arc<RwLock<TenantIndex>>| index.read().map(|i| i.bytes()).unwrap_or(0);
    let mut total: usize = state.tenants.values().map(|(i, _)| size(i)).sum();
    while total > BUDGET_BYTES {
        let Some(oldest) = state
            .tenants
            .iter()
            .filter(|(t, _)| t.as_str() != keep)
            .min_by_key(|(_, (_, used))| *used)
            .map(|(t, _)| t.clone())
        else {
            return;
        };
        if let Some((index, _)) = state.tenants.remove(&oldest) {
            total -= size(&index);
        }
    }
}
