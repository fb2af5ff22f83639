//! An in-memory store for unit tests only (never selectable in production). It returns
//! neighbours worst-first, to catch code that assumes the store sorts its answer.

use std::sync::{Mutex, MutexGuard};

use futures_util::FutureExt;

use async_trait::async_trait;

use super::{
    After, Counts, Expired, Exported, Matches, MemoryStore, Portable, Remembered, StoreError,
    keep_nearest, write,
};
use crate::dedup;
use crate::embed::Fit;
use crate::memory::{Hit, KeywordHit, Memory, MemoryType, NewMemory, Tenant, Visibility};
use crate::search::bm25::{Corpus, Scorer};
use crate::search::{self, Query, best_first, cosine};

#[derive(Default)]
pub struct InMemoryStore {
    rows: Mutex<Vec<(Tenant, Memory, Vec<f32>)>>,
    calibration: Mutex<Option<Fit>>,
}

impl InMemoryStore {
    fn nearest_locked(
        rows: &[(Tenant, Memory, Vec<f32>)],
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        k: usize,
    ) -> Vec<Hit> {
        let hits = rows
            .iter()
            .filter(|(t, m, _)| t == tenant && visibility.can_see(m))
            .map(|(_, m, e)| Hit::new(m.clone(), cosine(embedding, e)))
            .collect();
        let mut nearest = keep_nearest(hits, k);
        nearest.reverse();
        nearest
    }

    /// BM25 over every visible memory, terms made on the fly: the reference the indexed
    /// stores must agree with.
    fn keyword_hits_locked(
        rows: &[(Tenant, Memory, Vec<f32>)],
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> (Vec<KeywordHit>, Vec<f64>) {
        if query.terms.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let visible: Vec<&(Tenant, Memory, Vec<f32>)> = rows
            .iter()
            .filter(|(t, m, _)| t == tenant && visibility.can_see(m))
            .collect();
        let all_terms: Vec<(String, Vec<String>)> = visible
            .iter()
            .map(|(_, m, _)| (m.id.clone(), search::terms(&m.content)))
            .collect();
        let average_terms = all_terms.iter().map(|(_, t)| t.len() as f64).sum::<f64>()
            / all_terms.len().max(1) as f64;
        let matches: Vec<(String, Vec<String>)> = all_terms
            .into_iter()
            .filter(|(_, t)| t.iter().any(|w| query.terms.contains(w)))
            .collect();
        let matches: Vec<(String, &[String])> = matches
            .iter()
            .map(|(id, t)| (id.clone(), t.as_slice()))
            .collect();
        let (best, idf) = best_matches(
            query.terms,
            &matches,
            visible.len() as u64,
            average_terms,
            query.k,
        );
        let found = visible
            .iter()
            .map(|(_, m, e)| Hit::new(m.clone(), cosine(query.vector, e)))
            .collect();
        (in_score_order(best, found), idf)
    }
}

/// A write's steps under the lock.
struct Locked<'a> {
    rows: MutexGuard<'a, Vec<(Tenant, Memory, Vec<f32>)>>,
    tenant: &'a Tenant,
    visibility: &'a Visibility,
}

impl write::Steps for Locked<'_> {
    type Found = String;

    async fn visible(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        let (tenant, visibility) = (self.tenant, self.visibility);
        let seen = |(t, m, _): &&(Tenant, Memory, Vec<f32>)| {
            t == tenant && m.id == id && visibility.can_see(m)
        };
        Ok(self.rows.iter().find(seen).map(|_| id.to_owned()))
    }

    async fn neighbours(
        &mut self,
        seen: &Visibility,
        vector: &[f32],
    ) -> Result<Vec<Hit>, StoreError> {
        let k = dedup::NEIGHBOURS;
        Ok(InMemoryStore::nearest_locked(
            &self.rows,
            self.tenant,
            seen,
            vector,
            k,
        ))
    }

    async fn insert(&mut self, stored: &write::Stored, vector: &[f32]) -> Result<(), StoreError> {
        let row = (self.tenant.clone(), stored.memory.clone(), vector.to_vec());
        self.rows.push(row);
        Ok(())
    }

    async fn delete(&mut self, id: String) -> Result<(), StoreError> {
        let tenant = self.tenant;
        self.rows.retain(|(t, m, _)| !(t == tenant && m.id == id));
        Ok(())
    }

    async fn commit(self, _: write::Change<'_>, _: &[f32]) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl MemoryStore for InMemoryStore {
    async fn remember(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: dedup::Rule,
    ) -> Result<Remembered, StoreError> {
        let steps = Locked {
            rows: self.rows.lock().expect("lock"),
            tenant,
            visibility,
        };
        let written = write::remember(steps, visibility, memory, embedding, rule);
        written
            .now_or_never()
            .expect("the steps under the lock never wait")
    }

    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError> {
        let rows = self.rows.lock().expect("lock");
        let (by_words, idf) = Self::keyword_hits_locked(&rows, tenant, visibility, query);
        Ok(Matches {
            nearest: Self::nearest_locked(&rows, tenant, visibility, query.vector, query.k),
            by_words,
            idf,
        })
    }

    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        after: Option<&After>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let rows = self.rows.lock().expect("lock");
        let mut found: Vec<Memory> = rows
            .iter()
            .filter(|(t, m, _)| t == tenant && visibility.can_see(m))
            .filter(|(_, m, _)| memory_type.is_none_or(|ty| m.memory_type == ty))
            .filter(|(_, m, _)| after.is_none_or(|a| (m.created_at, &m.id) < (a.created_at, &a.id)))
            .map(|(_, m, _)| m.clone())
            .collect();
        found.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        found.truncate(limit);
        Ok(found)
    }

    async fn get(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError> {
        let rows = self.rows.lock().expect("lock");
        Ok((rows.iter())
            .find(|(t, m, _)| t == tenant && m.id == id && visibility.can_see(m))
            .map(|(_, m, _)| m.clone()))
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<bool, StoreError> {
        let mut rows = self.rows.lock().expect("lock");
        let before = rows.len();
        rows.retain(|(t, m, _)| !(t == tenant && m.id == id && visibility.can_see(m)));
        Ok(rows.len() < before)
    }

    async fn count_by_type(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
    ) -> Result<Counts, StoreError> {
        let rows = self.rows.lock().expect("lock");
        Ok(Counts::from_tallies(
            rows.iter()
                .filter(|(t, m, _)| t == tenant && visibility.can_see(m))
                .map(|(_, m, _)| (m.memory_type, 1)),
        ))
    }

    async fn record_access(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        used: &[&Memory],
        at: i64,
    ) -> Result<(), StoreError> {
        let ids: Vec<String> = used.iter().map(|m| m.id.clone()).collect();
        let mut rows = self.rows.lock().expect("lock");
        for (_, m, _) in rows
            .iter_mut()
            .filter(|(t, m, _)| t == tenant && visibility.can_see(m) && ids.contains(&m.id))
        {
            m.access_count = crate::memory::add_uses(m.access_count, 1);
            m.last_accessed_at = Some(m.last_accessed_at.map_or(at, |seen| seen.max(at)));
        }
        Ok(())
    }

    async fn export(
        &self,
        only: &[Tenant],
        at: i64,
        from: Option<&str>,
        limit: usize,
    ) -> Result<Exported, StoreError> {
        let rows = self.rows.lock().expect("lock");
        let mut all: Vec<Portable> = (rows.iter())
            .filter(|(t, m, _)| {
                (only.is_empty() || only.contains(t)) && !crate::memory::expired(m.expires_at, at)
            })
            .map(|(t, m, e)| Portable {
                tenant: t.clone(),
                memory: m.clone(),
                embedding: e.clone(),
            })
            .collect();
        all.sort_by(|a, b| {
            (a.tenant.as_str(), &a.memory.id).cmp(&(b.tenant.as_str(), &b.memory.id))
        });
        let (after_tenant, after_id) = Exported::after_tenant_and_id(from);
        all.retain(|p| (p.tenant.as_str(), p.memory.id.as_str()) > (after_tenant, after_id));
        all.truncate(limit);
        Ok(Exported::by_tenant_and_id(all, limit))
    }

    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError> {
        let mut rows = self.rows.lock().expect("lock");
        let mut written = 0;
        for p in memories {
            if !rows
                .iter()
                .any(|(t, m, _)| *t == p.tenant && m.id == p.memory.id)
            {
                rows.push((p.tenant.clone(), p.memory.clone(), p.embedding.clone()));
                written += 1;
            }
        }
        Ok(written)
    }

    async fn expire(&self, at: i64, limit: usize) -> Result<Expired, StoreError> {
        let mut rows = self.rows.lock().expect("lock");
        let mut expired = 0;
        rows.retain(|(_, m, _)| {
            let gone = expired < limit && m.expires_at.is_some_and(|e| e <= at);
            expired += usize::from(gone);
            !gone
        });
        Ok(Expired::of(expired, expired, limit))
    }

    async fn calibration(&self) -> Result<Option<Fit>, StoreError> {
        Ok(self.calibration.lock().unwrap().clone())
    }

    async fn record_calibration(&self, fit: &Fit) -> Result<(), StoreError> {
        *self.calibration.lock().unwrap() = Some(fit.clone());
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn describe(&self) -> String {
        "in-memory (tests only)".into()
    }
}

/// Keyword matching by brute force, for the test store: from the visible memories holding a
/// query term (`matches`: id and terms) and the size of the caller's visible set, the `k`
/// best by BM25, as (id, score). Document frequencies come from `matches` itself, which
/// holds exactly the memories containing each term.
fn best_matches<T: PartialEq, I: Clone + Ord>(
    query: &[T],
    matches: &[(I, &[T])],
    memories: u64,
    average_terms: f64,
    k: usize,
) -> (Vec<(I, f64)>, Vec<f64>) {
    let corpus = Corpus {
        memories,
        average_terms,
        containing: query
            .iter()
            .map(|q| {
                matches
                    .iter()
                    .filter(|(_, terms)| terms.contains(q))
                    .count() as u64
            })
            .collect(),
    };
    let scorer = Scorer::new(&corpus);
    let scored = matches
        .iter()
        .map(|(id, terms)| (id.clone(), scorer.score(query, terms)))
        .filter(|(_, score)| *score > 0.0)
        .collect();
    (best_first(scored, k), corpus.idf())
}

/// The best matches in score order, joined with their memories (`found`, any order).
fn in_score_order(best: Vec<(impl AsRef<str>, f64)>, found: Vec<Hit>) -> Vec<KeywordHit> {
    let mut by_id: std::collections::HashMap<String, Hit> = found
        .into_iter()
        .map(|h| (h.memory.id.clone(), h))
        .collect();
    best.into_iter()
        .filter_map(|(id, score)| {
            Some(KeywordHit {
                hit: by_id.remove(id.as_ref())?,
                score,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::InMemoryStore;
    use crate::metrics::Metrics;
    use crate::store::{TimedStore, suite};

    #[tokio::test]
    async fn memories_move_out_and_in_whole() {
        suite::run_portable(|| async { InMemoryStore::default() }).await;
    }

    #[tokio::test]
    async fn the_shared_suite() {
        suite::run(|| async { InMemoryStore::default() }).await;
        suite::run_keywords(|| async { InMemoryStore::default() }).await;
        suite::run_atomic(|| async { InMemoryStore::default() }).await;
    }

    /// The decorator passes every behaviour through unchanged, and times each call.
    #[tokio::test]
    async fn the_shared_suite_through_the_timing_decorator() {
        let metrics = Arc::new(Metrics::new(false, &[]));
        let timed = || async {
            TimedStore {
                inner: Arc::new(InMemoryStore::default()),
                metrics: Arc::clone(&metrics),
            }
        };
        suite::run(timed).await;
        suite::run_keywords(timed).await;
        let text = metrics.render(None);
        for operation in ["remember", "candidates", "list", "delete", "record_access"] {
            let count =
                format!("mcp_memory_store_duration_seconds_count{{operation=\"{operation}\"}}");
            assert!(text.contains(&count), "{operation} was not timed:\n{text}");
        }
    }
}
