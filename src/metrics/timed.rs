//! The store and the embedder, timed: each wraps the configured part, passes every call
//! through unchanged, and reports how long it took (successful or not).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::Metrics;
use crate::embed::{EmbedError, Embedder};
use crate::memory::{Hit, KeywordHit, Memory, MemoryType, NewMemory, Tenant, Visibility};
use crate::store::{Candidates, Counts, MemoryStore, Remembered, StoreError};

pub struct TimedStore {
    pub inner: Arc<dyn MemoryStore>,
    pub metrics: Arc<Metrics>,
}

impl TimedStore {
    async fn time<T>(&self, operation: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = call.await;
        self.metrics.store_call(operation, started.elapsed());
        result
    }
}

#[async_trait]
impl MemoryStore for TimedStore {
    async fn remember(
        &self,
        tenant: &Tenant,
        memory: NewMemory,
        embedding: &[f32],
        dedup_scope: &Visibility,
    ) -> Result<Remembered, StoreError> {
        let call = self.inner.remember(tenant, memory, embedding, dedup_scope);
        self.time("remember", call).await
    }

    async fn nearest(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let call = self.inner.nearest(tenant, visibility, embedding, k);
        self.time("nearest", call).await
    }

    async fn keyword_hits(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        terms: &[String],
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<KeywordHit>, StoreError> {
        let call = self
            .inner
            .keyword_hits(tenant, visibility, terms, embedding, k);
        self.time("keyword_hits", call).await
    }

    async fn candidates(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        terms: &[String],
        k: usize,
    ) -> Result<Candidates, StoreError> {
        let call = self
            .inner
            .candidates(tenant, visibility, embedding, terms, k);
        self.time("candidates", call).await
    }

    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let call = self.inner.list(tenant, visibility, memory_type, limit);
        self.time("list", call).await
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<bool, StoreError> {
        self.time("delete", self.inner.delete(tenant, visibility, id))
            .await
    }

    async fn count_by_type(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
    ) -> Result<Counts, StoreError> {
        let call = self.inner.count_by_type(tenant, visibility);
        self.time("count_by_type", call).await
    }

    async fn record_access(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        used: &[&Memory],
        at: i64,
    ) -> Result<(), StoreError> {
        let call = self.inner.record_access(tenant, visibility, used, at);
        self.time("record_access", call).await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn exact_counts(&self) -> bool {
        self.inner.exact_counts()
    }
}

pub struct TimedEmbedder {
    pub inner: Arc<dyn Embedder>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl Embedder for TimedEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let started = Instant::now();
        let result = self.inner.embed(text).await;
        self.metrics.embedding(started.elapsed());
        result
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}
