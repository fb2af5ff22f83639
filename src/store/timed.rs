//! The store, timed: it wraps the configured store, passes every call through unchanged,
//! and reports how long each took (successful or not) to the metrics, and to a tool call's
//! trace as a span.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{
    After, Counts, Expired, Exported, Matches, MemoryStore, Portable, Remembered, StoreError,
};
use crate::embed::Fit;
use crate::memory::{Memory, MemoryType, NewMemory, Tenant, Visibility};
use crate::metrics::Metrics;
use crate::search::Query;

pub struct TimedStore {
    pub inner: Arc<dyn MemoryStore>,
    pub metrics: Arc<Metrics>,
}

impl TimedStore {
    async fn time<T>(&self, operation: &'static str, call: impl Future<Output = T>) -> T {
        // A search is a span of its own in a tool call's trace (docs/operations.md#traces).
        let name: std::borrow::Cow<'static, str> = match operation {
            "candidates" => "search".into(),
            _ => format!("store.{operation}").into(),
        };
        let _span = crate::traces::child(name);
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
        dedup_scope: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: crate::dedup::Rule,
    ) -> Result<Remembered, StoreError> {
        let call = self
            .inner
            .remember(tenant, dedup_scope, memory, embedding, rule);
        self.time("remember", call).await
    }

    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError> {
        let call = self.inner.search(tenant, visibility, query);
        // Named as operators' dashboards have known it since it was `candidates`.
        self.time("candidates", call).await
    }

    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        after: Option<&After>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let call = self
            .inner
            .list(tenant, visibility, memory_type, after, limit);
        self.time("list", call).await
    }

    async fn get(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError> {
        self.time("get", self.inner.get(tenant, visibility, id))
            .await
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

    async fn export(
        &self,
        only: &[Tenant],
        at: i64,
        from: Option<&str>,
        limit: usize,
    ) -> Result<Exported, StoreError> {
        self.inner.export(only, at, from, limit).await
    }

    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError> {
        self.inner.import(memories).await
    }

    async fn expire(&self, at: i64, limit: usize) -> Result<Expired, StoreError> {
        self.time("expire", self.inner.expire(at, limit)).await
    }

    async fn calibration(&self) -> Result<Option<Fit>, StoreError> {
        self.inner.calibration().await
    }

    async fn record_calibration(&self, fit: &Fit) -> Result<(), StoreError> {
        self.inner.record_calibration(fit).await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }

    async fn close(&self) {
        self.inner.close().await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn exact_counts(&self) -> bool {
        self.inner.exact_counts()
    }

    fn width_fixed_by_index(&self) -> bool {
        self.inner.width_fixed_by_index()
    }

    fn index_usage(&self) -> Option<crate::search::cache::Usage> {
        self.inner.index_usage()
    }
}
