//! Where memories live: one small trait spoken in memory operations, with backends behind
//! Cargo features. Every backend applies the tenant to every operation and the request's
//! visibility wherever BEHAVIOR.md says so; callers re-check both (fail closed).

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::StoreConfig;
use crate::memory::{Hit, KeywordHit, Memory, MemoryType, NewMemory, Tenant, Visibility};

#[cfg(test)]
pub mod in_memory;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod index;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod scan;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(test)]
pub mod suite;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed; the message says why, without user content or credentials.
    #[error("{0}")]
    Failed(String),
    /// The vector's width does not match what this store holds.
    #[error("{0}")]
    Dimension(String),
    /// The memory does not fit the store's limits: the caller's to fix, not a failure.
    #[error("{0}")]
    Refused(String),
}

/// The outcome of a write that first looks for a near-verbatim repeat.
#[derive(Debug, Clone, PartialEq)]
pub enum Remembered {
    Stored(Memory),
    /// Nothing was written; this existing memory already says it.
    AlreadyKnown(Memory),
}

/// What a recall weighs (`MemoryStore::candidates`).
#[derive(Debug, Default)]
pub struct Candidates {
    pub nearest: Vec<Hit>,
    pub by_words: Vec<KeywordHit>,
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

#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Writes `memory` unless a memory visible to `dedup_scope` already says the same
    /// thing (`dedup::find_duplicate` over the nearest `dedup::NEIGHBOURS`). Check and
    /// write are atomic per tenant where the backend can make them so.
    async fn remember(
        &self,
        tenant: &Tenant,
        memory: NewMemory,
        embedding: &[f32],
        dedup_scope: &Visibility,
    ) -> Result<Remembered, StoreError>;

    /// Up to `k` visible memories nearest to `embedding` by cosine similarity, in no
    /// promised order.
    async fn nearest(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError>;

    /// Up to `k` visible memories containing any of `terms` (from `keywords::query_terms`),
    /// best BM25 first, scored over the memories the caller can see. A store without a
    /// text index finds none, and recall stays vector-only there (S3).
    async fn keyword_hits(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        terms: &[String],
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<KeywordHit>, StoreError> {
        let _ = (tenant, visibility, terms, embedding, k);
        Ok(Vec::new())
    }

    /// A recall's candidates: `nearest` and, unless `terms` is empty, `keyword_hits`, both
    /// for `k`. A store that answers both from one index in memory finds it once.
    async fn candidates(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        terms: &[String],
        k: usize,
    ) -> Result<Candidates, StoreError> {
        let nearest = self.nearest(tenant, visibility, embedding, k).await?;
        let by_words = if terms.is_empty() {
            Vec::new()
        } else {
            self.keyword_hits(tenant, visibility, terms, embedding, k)
                .await?
        };
        Ok(Candidates { nearest, by_words })
    }

    /// The newest `limit` visible memories, optionally of one type, newest first.
    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError>;

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

    /// Makes everything durable before the process exits.
    async fn flush(&self) -> Result<(), StoreError>;

    /// Where the memories are, for the startup line (never credentials).
    fn describe(&self) -> String;

    /// Whether `count_by_type` is always exact; a store that may stop counting early says
    /// so in `memory_stats`' description.
    fn exact_counts(&self) -> bool {
        true
    }
}

/// Opens the configured store; `dimension` is the embedder's, which stored vectors must match
/// (S3 Vectors checks every write against its index instead).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_variables)
)]
pub async fn open(
    config: &StoreConfig,
    dimension: usize,
) -> Result<Arc<dyn MemoryStore>, StoreError> {
    match *config {
        #[cfg(feature = "sqlite")]
        StoreConfig::Sqlite { ref path } => {
            Ok(Arc::new(sqlite::SqliteStore::open(path, dimension)?))
        }
        #[cfg(feature = "postgres")]
        StoreConfig::Postgres { ref url, ref pool } => Ok(Arc::new(
            postgres::PostgresStore::open(url, dimension, pool).await?,
        )),
        #[cfg(feature = "s3")]
        StoreConfig::S3(ref settings) => Ok(Arc::new(s3::S3Store::open(settings).await)),
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

/// Cosine similarity; 0 for mismatched widths or a zero vector.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (na, nb) = (dot64(a, a), dot64(b, b));
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot64(a, b) / (na.sqrt() * nb.sqrt())
    }
}

/// The dot product in f64, over eight running sums (one sum would wait on each addition).
/// Every exact similarity is made of these, so all stores agree to the last bit; the
/// AVX2 build (chosen at run time) does the same operations per sum, four sums to a
/// register, and so gives the same bits.
pub fn dot64(a: &[f32], b: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if a.len() == b.len() && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has the feature `dot64_avx2` is compiled for.
        return unsafe { dot64_avx2(a, b) };
    }
    dot64_lanes(a, b)
}

/// `dot64_lanes` for equal lengths: `low` holds sums 0–3 and `high` sums 4–7. Written out,
/// because the compiler vectorised the loop two sums at a time, with shuffles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot64_avx2(a: &[f32], b: &[f32]) -> f64 {
    use std::arch::x86_64::*;
    let body = a.len() / 8 * 8;
    let tail: f64 = a[body..]
        .iter()
        .zip(&b[body..])
        .fold(0.0, |sum, (x, y)| sum + f64::from(*x) * f64::from(*y));
    let (mut low, mut high) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    for at in (0..body).step_by(8) {
        // SAFETY: `at + 8 <= body <= a.len() == b.len()`; unaligned loads.
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr().add(at)),
                _mm256_loadu_ps(b.as_ptr().add(at)),
            )
        };
        let half = |v: __m256, upper: bool| {
            _mm256_cvtps_pd(if upper {
                _mm256_extractf128_ps(v, 1)
            } else {
                _mm256_castps256_ps128(v)
            })
        };
        low = _mm256_add_pd(low, _mm256_mul_pd(half(x, false), half(y, false)));
        high = _mm256_add_pd(high, _mm256_mul_pd(half(x, true), half(y, true)));
    }
    // Sums i and i + 4, side by side, then added as `dot64_lanes` adds them.
    let mut pairs = [0.0f64; 4];
    // SAFETY: `pairs` holds four f64; unaligned store.
    unsafe { _mm256_storeu_pd(pairs.as_mut_ptr(), _mm256_add_pd(low, high)) };
    ((pairs[0] + pairs[1]) + (pairs[2] + pairs[3])) + tail
}

fn dot64_lanes(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut tail = 0.0f64;
    for (x, y) in a8.remainder().iter().zip(b8.remainder()) {
        tail += f64::from(*x) * f64::from(*y);
    }
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += f64::from(x[i]) * f64::from(y[i]);
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// The `k` best of `scored` (id, score), best first. Ties go in id order, newest first, so
/// every store answers alike. Only the best k are sorted: a common word can match most of
/// a tenant.
pub fn best_first<I: Ord>(mut scored: Vec<(I, f64)>, k: usize) -> Vec<(I, f64)> {
    let order = |a: &(I, f64), b: &(I, f64)| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0));
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, order);
    }
    scored.truncate(k);
    scored.sort_by(order);
    scored
}

/// Keeps the `k` most similar hits.
pub fn keep_nearest(mut hits: Vec<Hit>, k: usize) -> Vec<Hit> {
    hits.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    hits.truncate(k);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot64_gives_the_same_bits_on_every_cpu() {
        let mut state = 3u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Mixed magnitudes, so the order of additions shows in the last bits.
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                * [1e-3, 1.0, 1e4][(state % 3) as usize]
        };
        for width in [0, 1, 7, 8, 9, 31, 384, 1536] {
            let a: Vec<f32> = (0..width).map(|_| next()).collect();
            let b: Vec<f32> = (0..width).map(|_| next()).collect();
            assert_eq!(
                dot64(&a, &b).to_bits(),
                dot64_lanes(&a, &b).to_bits(),
                "{width}"
            );
        }
    }
}
